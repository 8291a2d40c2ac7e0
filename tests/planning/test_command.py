"""``olu-worker plan`` through the command line: the report, --json, the warning, --plot, and a
one-line error with exit code 2 for each kind of bad input."""

import math

import numpy as np
import orjson
import pytest

from worker.cli import main
from worker.olu.privacy.analysis.gaussian import gaussian_epsilon
from worker.olu.privacy.analysis.noise import plan_deletions
from worker.olu.privacy.analysis.rdp import rdp_to_dp, rho_for_epsilon

BASE = ["plan", "--dim", "10", "--deletion-rate", "0.01"]


@pytest.fixture(autouse=True)
def no_olu_environment(monkeypatch):
    import os

    for name in [n for n in os.environ if n.startswith("OLU_")]:
        monkeypatch.delenv(name)


def run(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def write_sample(path, n=2000, dim=10, seed=1, loss="logistic"):
    rng = np.random.default_rng(seed)
    w = rng.normal(size=dim)
    lines = []
    for j in range(n):
        x = rng.normal(size=dim)
        x /= max(1.0, float(np.linalg.norm(x)) * 1.01)
        score = float(x @ w) + 0.3 * rng.normal()
        y = float(np.clip(score, -1, 1)) if loss == "ridge" else (1 if score >= 0 else 0)
        lines.append(orjson.dumps({"op": "insert", "id": f"r-{j}", "x": x.tolist(), "y": y}))
    path.write_bytes(b"\n".join(lines) + b"\n")
    return str(path)


# ------------------------------------------------------------------ the report
def test_help_lists_the_options(capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["plan", "--help"])
    out = capsys.readouterr().out
    assert exit_.value.code == 0
    for flag in ("--deletion-rate", "--events", "--deletion-age", "--sample", "--json", "--plot", "--privacy-unit",
                 "--target-epsilon", "--rho", "--delta", "--l2", "--loss", "--dim"):
        assert flag in out, flag
    for flag in ("--request-records", "--recent-share", "--from-topic", "--bootstrap-servers"):
        assert flag in out, flag  # the workload's dimensions, and the input's connection for --from-topic
    assert "--snapshot-keep" not in out and "--http-port" not in out  # nothing else of run


def test_json_fields(capsys):
    code, out, err = run(capsys, *BASE, "--target-epsilon", "1", "--json")
    assert code == 0, err
    plan = orjson.loads(out)
    assert plan["unit"] == "all-deletions" and plan["target_epsilon"] == 1.0
    assert plan["rho"] == rho_for_epsilon(1.0, 1e-5) and plan["delta"] == 1e-5
    assert plan["epsilon"] == rdp_to_dp(plan["rho"], 1e-5) <= 1.0
    assert plan["events"] == 1_000_000 and plan["deletions"] == 10_000 and plan["deletion_age"] == 100_000
    sigma = plan["sigma"]
    assert sigma["first"] > sigma["typical"] > sigma["last"] > 0  # shifts shrink faster than the weights grow
    assert list(plan["noise_growth"]) == ["100000", "1000000", "10000000"]
    growth = list(plan["noise_growth"].values())
    assert growth[0] < growth[1] < growth[2]  # omega weights: the noise grows with the stream (T**0.1)
    assert plan["noise_growth"]["1000000"] == plan["noise_std"]
    assert math.isclose(plan["noise_to_radius"], plan["noise_std"] * math.sqrt(10) / 10.0)
    assert math.isclose(plan["noise_norm"], plan["noise_std"] * math.sqrt(10))
    assert plan["other_unit"]["unit"] == "per-request" and plan["other_unit"]["noise_std"] < plan["noise_std"] / 100
    assert [c["l2"] for c in plan["l2_candidates"]] == [0.003, 0.01, 0.03, 0.1]
    assert plan["search"] is None and plan["workload"] is None and plan["recommendation"]["l2"] is None
    assert plan["recommendation"]["unit"] == "per-request" and plan["recommendation"]["target_useful"] is False


def test_rho_and_delta_and_unit_flags(capsys):
    code, out, _ = run(capsys, *BASE, "--rho", "0.5", "--delta", "1e-6", "--privacy-unit", "per-request", "--json")
    plan = orjson.loads(out)
    assert code == 0 and plan["unit"] == "per-request" and plan["rho"] == 0.5 and plan["delta"] == 1e-6
    # per request: the exact Gaussian curve of mu = sqrt(2 rho) = 1 (docs/accounting.md 2.6)
    assert plan["target_epsilon"] is None and plan["epsilon"] == gaussian_epsilon(1.0, 1e-6) < rdp_to_dp(0.5, 1e-6)
    growth = list(plan["noise_growth"].values())
    assert growth[0] > growth[1] > growth[2]  # per request: falls like T**-1/2
    # Closed form under the strongly convex schedule: a deletion at step tau has the shift
    # L / (mu (tau + t0)), whatever the age, and sigma = shift / sqrt(2 rho) (= shift for rho 0.5).
    t0 = (0.26 / 0.01 - 1) / 2  # logistic: beta = R**2 / 4 + l2
    _, taus = plan_deletions(1_000_000, 0.01)
    for name, tau in (("first", taus[0]), ("typical", taus[4999]), ("last", taus[-1])):
        assert math.isclose(plan["sigma"][name], 1.1 / (0.01 * (tau + t0)), rel_tol=1e-9), name


@pytest.mark.parametrize("unit,warned", [("all-deletions", True), ("per-request", False)])
def test_warning_for_all_deletions_at_one_percent_and_epsilon_one(capsys, unit, warned):
    code, out, _ = run(capsys, *BASE, "--target-epsilon", "1", "--privacy-unit", unit)
    assert code == 0
    assert ("WARNING: the all-deletions target epsilon 1" in out) is warned, out
    assert ("cannot be met with useful accuracy" in out) is warned
    # the same target is a larger slope per request (the exact Gaussian curve, docs/accounting.md 9)
    assert f"rho {'0.03056' if unit == 'all-deletions' else '0.03593'}" in out and "epsilon 1 at delta 1e-05" in out


@pytest.mark.parametrize("unit", ["all-deletions", "per-request"])
def test_the_search_on_a_sample(capsys, tmp_path, unit):
    sample = write_sample(tmp_path / "sample.jsonl")
    code, out, err = run(capsys, *BASE, "--target-epsilon", "1", "--privacy-unit", unit, "--sample", sample,
                         "--sim-events", "10000", "--json")
    assert code == 0, err
    plan = orjson.loads(out)
    work, found = plan["workload"], plan["search"]
    assert work["source"] == "flags" and work["records"] == 2000 and work["requests"] == 100
    assert work["events"] == 10_000 and work["records_per_request"]["max"] == 1
    assert found["metric"] == "accuracy" and found["events"] == 10_000 and 0.75 < found["ogd"] <= 1.0
    assert set(found["best"]) == {"all-deletions", "per-request"}
    assert {r["rotation"] for r in found["runs"]} == {"off", "overlap", "disjoint"}
    assert {r["lifetime"] for r in found["runs"]} == {None, 1000, 2000, 5000}  # at most 3/4 of the stream
    assert not any(r["cap"] for r in found["runs"])  # single-record requests: no cap to try
    mine = found["best"][unit]
    assert mine["score"] == max(r["score"] for r in found["runs"] if r["unit"] == unit)
    assert found["best"]["per-request"]["score"] > found["ogd"] - 0.03
    rec = plan["recommendation"]
    assert rec["unit"] == unit and rec["settings"] == mine["settings"] and rec["predicted"] == mine["score"]
    assert rec["settings"].startswith(f"OLU_PRIVACY_UNIT={unit}") and f"OLU_L2={mine['l2']:g}" in rec["settings"]
    assert bool(plan["warnings"]) is (mine["score"] < found["ogd"] - 0.03)


def test_a_sample_with_its_own_deletes_is_the_workload(capsys, tmp_path):
    lines = [orjson.dumps({"key": f"u{j % 7}", "value": {"op": "insert", "id": f"r-{j}", "x": [0.3, -0.2],
                                                          "y": j % 2}}) for j in range(600)]
    lines.insert(300, orjson.dumps({"key": "u3", "value": {"op": "delete", "ids": [f"r-{j}" for j in range(3, 300, 7)]}}))
    lines.insert(450, b'{"key": "r-440", "value": null}')
    lines.append(b'{"op": "delete", "id": "r-old"}')  # a record from before the sample
    path = tmp_path / "s.jsonl"
    path.write_bytes(b"\n".join(lines) + b"\n")
    code, out, err = run(capsys, "plan", "--sample", str(path), "--sim-events", "1206", "--json")
    assert code == 0, err
    plan = orjson.loads(out)
    work = plan["workload"]
    assert work["source"] == "sample" and work["requests"] == 6 and work["keys"] == 7 and work["outside"] == 2
    assert work["records_per_request"]["max"] == 43 and plan["dim"] == 2  # dim from the sample
    assert plan["deletion_rate"] == work["rate"]  # the formula takes the sample's own rate
    assert any(r["cap"] for r in plan["search"]["runs"])  # a request names a key's records: caps tried
    assert any("older than the sample" in t for t in plan["recommendation"]["text"])
    line = one_line_error(capsys, "plan", "--sample", str(path), "--deletion-rate", "0.01")
    assert "the sample has its own deletes" in line and "--deletion-rate" in line


def test_account_deletions_drawn_from_the_flags(capsys, tmp_path):
    sample = write_sample(tmp_path / "sample.jsonl", n=3000)
    code, out, err = run(capsys, "plan", "--sample", sample, "--deletion-rate", "0.002", "--request-records", "key",
                         "--keys", "100", "--key-skew", "1.1", "--recent-share", "0.5", "--recent-age", "500",
                         "--sim-events", "6000", "--json")
    assert code == 0, err
    work = orjson.loads(out)["workload"]
    assert work["shape"]["records"] == "key" and work["keys"] <= 100 and work["requests"] == 12
    assert work["records_per_request"]["mean"] > 3 and work["age_events"]["p10"] < 500


def test_plot_writes_a_png(capsys, tmp_path):
    sample = write_sample(tmp_path / "sample.jsonl", n=300)
    png = tmp_path / "plan.png"
    code, _, err = run(capsys, *BASE, "--sample", sample, "--sim-events", "1000", "--plot", str(png))
    assert code == 0, err
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


# ------------------------------------------------------------------ bad input: one line, exit 2
def one_line_error(capsys, *argv) -> str:
    code, out, err = run(capsys, *argv)
    assert code == 2 and out == ""
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


@pytest.mark.parametrize("rate", ["1", "1.5", "-0.1", "abc", "nan"])
def test_deletion_rate_outside_zero_one(capsys, rate):
    line = one_line_error(capsys, "plan", "--dim", "10", "--deletion-rate", rate)
    assert line == f"olu-worker plan: --deletion-rate must be a number in [0, 1), got {rate!r}"


def test_a_plot_file_that_is_not_a_png_is_refused_before_planning(capsys, tmp_path):
    line = one_line_error(capsys, *BASE, "--plot", str(tmp_path / "p.txt"))
    assert "--plot writes a PNG" in line and "p.txt" in line
    assert not (tmp_path / "p.txt").exists()


def test_no_deletions_no_noise(capsys):
    code, out, _ = run(capsys, "plan", "--dim", "3", "--deletion-rate", "0", "--events", "1000", "--json")
    plan = orjson.loads(out)
    assert code == 0 and plan["deletions"] == 0 and plan["sigma"] is None
    assert plan["noise_std"] == 0.0 and not plan["warnings"] and plan["recommendation"]["target_useful"]


def test_missing_deletion_rate_and_dimension(capsys):
    assert "--deletion-rate is required" in one_line_error(capsys, "plan", "--dim", "10")
    assert "OLU_DIM (--dim) is required" in one_line_error(capsys, "plan", "--deletion-rate", "0.01")


@pytest.mark.parametrize("flag,value", [("--events", "0"), ("--events", "1.5"), ("--deletion-age", "x"),
                                        ("--sim-events", "-3"), ("--rho", "0"), ("--target-epsilon", "-1")])
def test_bad_plan_numbers(capsys, flag, value):
    assert flag in one_line_error(capsys, *BASE, flag, value)


def test_settings_errors(capsys):
    assert one_line_error(capsys, *BASE, "--l2", "abc") == \
        "olu-worker: configuration error: OLU_L2 (--l2) must be a number >= 0, got 'abc'"
    both = one_line_error(capsys, *BASE, "--rho", "1", "--target-epsilon", "1")
    assert "--rho" in both and "--target-epsilon" in both
    unit = one_line_error(capsys, *BASE, "--privacy-unit", "per-record")
    assert "--privacy-unit" in unit and "'per-record'" in unit
    assert "passive" in one_line_error(capsys, *BASE, "--algorithm", "active-d2d")
    removed = one_line_error(capsys, *BASE, "--eps", "1")
    assert "OLU_EPS (--eps) was removed" in removed and "--rho" in removed and "--target-epsilon" in removed


def test_missing_sample_file(capsys, tmp_path):
    missing = tmp_path / "nope.jsonl"
    line = one_line_error(capsys, *BASE, "--sample", str(missing))
    assert line.startswith("olu-worker plan: cannot read sample") and str(missing) in line


@pytest.mark.parametrize("text,problem", [
    (b'{"op": "insert", "id": "a", "x": [0.1, 0.2], "y": 1}\n{"op": "insert", "id": "b", "x": [0.1,\n', "line 2: not valid JSON"),
    (b'[1, 2]\n', "line 1: expected a JSON object"),
    (b'{"op": "delete", "id": "a"}\n', "has no usable insert"),
    (b'{"op": "delete"}\n', "line 1: an event without an \"id\" needs its key"),
    (b'{"key": "k", "value": {"op": "delete"}}\n', "line 1: a delete names its record"),
    (b'{"op": "update", "id": "a"}\n', "line 1: expected an insert or a delete event"),
    (b'{"op": "insert", "id": "a", "x": [0.1, 0.2]}\n', "line 1: missing y"),
    (b'{"op": "insert", "id": "a", "x": [0.1, 0.2, 0.3], "y": 1}\n', "line 1: x has 3 features, expected dim 2"),
    (b'{"op": "insert", "id": "a", "x": [0.1, 0.2], "y": 7}\n', "line 1: logistic labels are -1/+1 or 0/1"),
    (b'{"op": "insert", "id": "a", "x": [0.1, "z"], "y": 1}\n', "line 1: features are not an array of numbers"),
    (b'{"op": "insert", "id": "a", "x": [0.1, 0.2], "y": 1}\n{"op": "insert", "id": "a", "x": [0.1, 0.2], "y": 1}\n',
     "line 2: id 'a' appears twice"),
    (b'{"op": "insert", "id": "a", "x": [5.0, 5.0], "y": 1}\n', "no usable insert (1 over the feature bound)"),
    (b'\n\n', "has no usable insert"),
])
def test_malformed_sample_lines(capsys, tmp_path, text, problem):
    path = tmp_path / "bad.jsonl"
    path.write_bytes(text)
    line = one_line_error(capsys, "plan", "--dim", "2", "--sample", str(path))
    assert line.startswith(f"olu-worker plan: sample {str(path)!r}") and problem in line, line


def test_plot_without_matplotlib(capsys, monkeypatch, tmp_path):
    import sys

    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import fails as if not installed
    line = one_line_error(capsys, *BASE, "--plot", str(tmp_path / "p.png"))
    assert "--plot needs matplotlib" in line
    assert not (tmp_path / "p.png").exists()


def test_unwritable_plot(capsys, tmp_path):
    line = one_line_error(capsys, *BASE, "--plot", str(tmp_path / "no-such-dir" / "p.png"))
    assert line.startswith("olu-worker plan: cannot write the plot")


def test_the_noise_norm_grows_with_the_square_root_of_the_dimension(capsys):
    """The std per coordinate does not depend on d; its norm does, and the warning follows it."""
    plans = {}
    for dim in ("100", "10000"):
        code, out, err = run(capsys, "plan", "--dim", dim, "--deletion-rate", "0.01", "--target-epsilon", "1",
                             "--privacy-unit", "per-request", "--json")
        assert code == 0, err
        plans[dim] = orjson.loads(out)
    small, wide = plans["100"], plans["10000"]
    assert (small["dim"], wide["dim"]) == (100, 10_000)
    assert wide["noise_std"] == small["noise_std"]
    assert math.isclose(wide["noise_norm"], 10 * small["noise_norm"])
    assert wide["noise_to_radius"] > small["noise_to_radius"]
