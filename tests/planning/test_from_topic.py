"""``olu-worker plan --from-topic N`` on the real broker: the last N records of the input topic, read
with run's connection settings and decoded by the worker's own decoder, are the plan's sample."""

from __future__ import annotations

import orjson

from tests.stream.kafka_harness import read_topic
from worker.cli import main


def test_the_plan_reads_the_workload_from_the_input_topic(kafka_bootstrap, kafka_topic, tmp_path, capsys,
                                                         monkeypatch):
    for name in [n for n in __import__("os").environ if n.startswith("OLU_")]:
        monkeypatch.delenv(name)
    topic = kafka_topic(partitions=2)
    lines = []
    for j in range(900):
        subject = f"user-{j % 30}"
        x = [((j * 7) % 11 - 5) / 10, ((j * 3) % 7 - 3) / 10]
        lines.append({"key": subject, "value": {"op": "insert", "id": f"r-{j}", "x": x, "y": j % 2}})
        if j % 100 == 99:  # an account deletion: every record of one subject so far
            victim = f"user-{(j // 100) % 30}"
            ids = [f"r-{i}" for i in range(j + 1) if f"user-{i % 30}" == victim]
            lines.append({"key": victim, "value": {"op": "delete", "ids": ids}})
    lines.append({"key": "r-5", "value": None})  # a tombstone
    path = tmp_path / "events.jsonl"
    path.write_bytes(b"".join(orjson.dumps(line) + b"\n" for line in lines) + b'{"op": "insert", "id": "bad"}\n')
    assert main(["produce", "--bootstrap-servers", kafka_bootstrap, "--input-topics", topic, "--file", str(path)]) == 0
    assert len(read_topic(kafka_bootstrap, topic)) == len(lines) + 1
    capsys.readouterr()

    code = main(["plan", "--from-topic", "5000", "--bootstrap-servers", kafka_bootstrap, "--input-topics", topic,
                 "--dim", "2", "--privacy-unit", "per-request", "--sim-events", "1900", "--json"])
    out, err = capsys.readouterr()
    assert code == 0, err
    plan = orjson.loads(out)
    work = plan["workload"]
    assert work["source"] == "sample" and work["sample"].startswith(f"topic {topic} (last 5,000 records")
    assert "1 the worker would dead-letter left out" in work["sample"]  # the insert without x and y
    assert work["records"] == 900 and work["keys"] == 30
    assert work["records_per_request"]["max"] == 30 and work["requests"] >= 10  # account deletions, a tombstone
    assert plan["search"]["best"]["per-request"]["settings"].startswith("OLU_PRIVACY_UNIT=per-request")

    bad = main(["plan", "--from-topic", "10", "--dim", "2", "--input-topics", topic])
    assert bad == 2 and "--from-topic needs OLU_KAFKA_BOOTSTRAP_SERVERS" in capsys.readouterr().err
