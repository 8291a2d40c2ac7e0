"""Empirical privacy audit of unlearning: membership inference on deleted records, and the measured
divergence between the unlearned and the retrained-plus-noise outputs next to the certified bound.

Issue 6 item 4. Models are built as the worker builds them (worker defaults, bench/_streams.py);
noise comes from OS entropy as in production, so every run is an independent draw.

Part A, membership inference (loss-threshold attack, Yeom et al. 2018), on two streams:
Phishing shuffled per seed into 1,000 streamed and 250 never-seen records (a real task), and a
"memorisation" stream (d = 100, unit-norm x, labels independent of x; 500 streamed and 500 never
seen), where a linear model can only memorise, the worst case for membership. Per seed 1% of the
stream is deleted on the uniform schedule; the attacker sees the final released model and scores
each record by its loss (lower loss: "member"). AUC of deleted vs never-seen records, pooled over
seeds, with a 95% CI from a cluster bootstrap over seeds (records of one seed share a model, so
seeds, not records, are the independent units). Positive controls in the same runs: retained
records vs never-seen (does the attack see membership at all?) and plain OGD (no unlearning) on
the same deleted records. Other algorithms and eps are shown for comparison.

Part B, divergence. A fixed stream (the first 1,000 Phishing records) and deletion schedule; the
passive model is run N times (independent noise). The reference process of the OLU definition
(docs/guarantee.md 2.2) is sampled 10 N times: OGD on the masked stream (each deleted record is the skip
element ⊥ at its own step, later steps keep their step sizes) with noise of the same law
(N(0, sigma_i^2 I) from the real run's public ledger) at the same deletion times, projected after
noise. It reuses the engine's loss, schedule and ball objects, vectorised over the draws, and is
checked against the engine's own exact retraining (``replay_ogd``) with the noise switched off.
Estimates, next to the certified bound D_alpha <= alpha rho (rho = the accountant's Renyi slope;
KL <= rho):

- mean-shift KL: (1/2)||mean_real - mean_ref||^2 in the reference covariance's metric, minus its
  sampling bias d/(2N) + d/(20N); the KL (and D_alpha/alpha) of two Gaussians with one covariance,
  the Gaussian-mechanism form the certificate is written for (docs/accounting.md 1.1). 95% CI by
  bootstrap over the real draws;
- full Gaussian KL of the fitted Gaussians (covariances too), with its estimator floor: the same
  estimate for a fresh reference sample of N draws (true divergence 0).

Schedules: "uniform" (1% of the stream), "last" (the last record deleted right after it was
learned: u = tau, no contraction) and "canary" (the same with the last record replaced by an
adversarial unit-norm record labelled against the current model: its deletion's real shift comes
close to the worst case eta_u L the noise is calibrated for).

Targets (issue 6): the audit AUC's confidence interval contains 0.5.

    .venv/bin/python bench/privacy_audit.py           # ~6 min on 2 busy cores
    .venv/bin/python bench/privacy_audit.py --quick   # 5 seeds, 50 draws: seconds

Writes ``privacy_audit.json`` and ``.png`` into ``--out`` (bench/results).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _harness as h  # noqa: E402
import _streams as S  # noqa: E402
from _targets import Checks, Target  # noqa: E402

from worker.olu.core.examples import ExampleStore  # noqa: E402
from worker.olu.core.replay import replay_ogd  # noqa: E402

AUC_CI_CONTAINS_HALF = Target(
    "audit_auc_ci_gap", "the audit AUC's 95% confidence interval contains 0.5 (gap from 0.5 to the interval)",
    "<=", 0.0, "AUC", "privacy audit (issue 6)")
REPORT_KEYS = ("seconds", "worker_defaults", "membership_inference", "divergence", "targets")
SERVICES = ()

MIA_ALGORITHMS = (("passive", 1.0), ("passive", 0.1), ("passive", 10.0), ("active-d2d", 1.0),
                  ("retrain", 1.0), ("restart", 1.0), ("ogd", 1.0))


def label(alg: str, eps: float) -> str:
    return alg if alg in S.EPS_FREE else f"{alg} eps={eps:g}"


# --------------------------------------------------------------------------- AUC
def auc(pos: np.ndarray, neg: np.ndarray) -> float:
    """Mann-Whitney AUC: P(score_pos > score_neg) + P(score_pos = score_neg)/2, exact with ties."""
    s = np.sort(neg)
    below = np.searchsorted(s, pos, side="left")
    ties = np.searchsorted(s, pos, side="right") - below
    return float((below.sum() + 0.5 * ties.sum()) / (len(pos) * len(neg)))


def cluster_bootstrap_auc(pos_by_seed: list[np.ndarray], neg_by_seed: list[np.ndarray], rng, reps: int) -> tuple:
    """Pooled AUC and a 95% percentile CI from resampling seeds with replacement."""
    point = auc(np.concatenate(pos_by_seed), np.concatenate(neg_by_seed))
    n = len(pos_by_seed)
    stats = []
    for _ in range(reps):
        pick = rng.integers(0, n, size=n)
        stats.append(auc(np.concatenate([pos_by_seed[j] for j in pick]),
                         np.concatenate([neg_by_seed[j] for j in pick])))
    lo, hi = np.percentile(stats, [2.5, 97.5])
    return point, float(lo), float(hi)


# --------------------------------------------------------------------------- part A
_PHISHING: list = []


def _phishing() -> S.Dataset:
    if not _PHISHING:
        _PHISHING.append(S.phishing())
    return _PHISHING[0]


def phishing_split(seed: int):
    """Phishing shuffled by ``seed``: a stream of 1,000 records and 250 never-seen records."""
    full = _phishing()
    perm = np.random.default_rng([seed, 42]).permutation(full.n)
    return full.subset(perm[:1000], "phishing"), full.subset(perm[1000:], "phishing-holdout")


def memorisation_split(seed: int, n: int = 500, d: int = 100):
    """A stream the model can only memorise: unit-norm x in d = 100, labels independent of x;
    n records streamed and n never seen (a worst case for membership, the attack's positive control)."""
    rng = np.random.default_rng([seed, 43])
    X = rng.normal(size=(2 * n, d))
    X /= np.linalg.norm(X, axis=1, keepdims=True)
    y = np.where(rng.random(2 * n) < 0.5, 1.0, -1.0)
    data = S.Dataset("memorisation", X, y, "logistic", "random labels, d=100")
    return data.subset(np.arange(n), "memorisation"), data.subset(np.arange(n, 2 * n), "memorisation-holdout")


MIA_DATASETS = {"phishing": phishing_split, "memorisation": memorisation_split}


def membership_inference(dataset: str, seeds: int, boot: int, log) -> list[dict]:
    split = MIA_DATASETS[dataset]
    per_alg = {label(a, e): {"deleted": [], "holdout": [], "retained": [], "acc": []} for a, e in MIA_ALGORITHMS}
    for seed in range(seeds):
        stream, holdout = split(seed)
        rng = np.random.default_rng([seed, 44])
        plan = S.plan_deletions(stream.n, 0.01, "uniform", rng)
        keep = plan.retained_mask(stream.n)
        retained_rows = rng.choice(np.flatnonzero(keep), size=min(len(holdout.y), int(keep.sum())), replace=False)
        for alg, eps in MIA_ALGORITHMS:
            model = S.make_model(alg, stream.dim, stream.loss, eps, plan.k)
            z = S.run_prequential(model, stream, plan, batch=stream.n).weights

            def score(X, y):
                return -np.logaddexp(0.0, -y * (X @ z))  # higher: more likely a member

            d = per_alg[label(alg, eps)]
            d["deleted"].append(score(stream.X[plan.records], stream.y[plan.records]))
            d["holdout"].append(score(holdout.X, holdout.y))
            d["retained"].append(score(stream.X[retained_rows], stream.y[retained_rows]))
            d["acc"].append(float(np.mean(np.where(holdout.X @ z >= 0, 1.0, -1.0) == holdout.y)))
        if (seed + 1) % max(1, seeds // 4) == 0:
            log(f"  membership inference, {dataset}: {seed + 1}/{seeds} seeds")
    out = []
    brng = np.random.default_rng(7)
    for name, d in per_alg.items():
        a, lo, hi = cluster_bootstrap_auc(d["deleted"], d["holdout"], brng, boot)
        m, mlo, mhi = cluster_bootstrap_auc(d["retained"], d["holdout"], brng, boot)
        out.append(dict(dataset=dataset, algorithm=name, seeds=seeds,
                        deleted=int(sum(len(v) for v in d["deleted"])), holdout=int(sum(len(v) for v in d["holdout"])),
                        auc_deleted_vs_unseen=a, ci=[lo, hi], contains_half=bool(lo <= 0.5 <= hi),
                        auc_retained_vs_unseen=m, ci_retained=[mlo, mhi],
                        holdout_accuracy=float(np.mean(d["acc"]))))
    return out


# --------------------------------------------------------------------------- part B
def reference_outputs(template, data: S.Dataset, plan: S.DeletionPlan, sigmas: np.ndarray, draws: int,
                      rng) -> np.ndarray:
    """``draws`` outputs of the OLU reference process (docs/guarantee.md 2.2), vectorised over draws.

    OGD over the masked stream (deleted records are ⊥ at their own steps), N(0, sigma_i^2 I) added
    and projected at each deletion time, with the template model's own loss, schedule and ball.
    """
    loss, schedule, radius = template.loss, template.schedule, template.ball.radius
    lam = loss.lam
    masked = ~plan.retained_mask(data.n)
    Z = np.zeros((draws, data.dim))
    di = 0

    def project(Z):
        norms = np.linalg.norm(Z, axis=1)
        over = norms > radius
        Z[over] *= (radius / norms[over])[:, None]
        return Z

    for j in range(data.n + 1):
        while di < plan.k and plan.times[di] <= j:
            if sigmas[di] > 0:
                Z = project(Z + rng.normal(0.0, sigmas[di], size=Z.shape))
            di += 1
        if j == data.n:
            break
        if masked[j]:
            continue  # ⊥: identity step; step j + 1's size is simply not used
        x, y = data.X[j], data.y[j]
        m = y * (Z @ x)
        s = -y * np.exp(-np.logaddexp(0.0, m))  # d/dm log(1 + e^{-m}) times y
        Z = project(Z - schedule.eta(j + 1) * (s[:, None] * x[None, :] + lam * Z))
    return Z


def gaussian_kl(A: np.ndarray, m_b: np.ndarray, S_b: np.ndarray) -> float:
    """Plug-in KL(N(mean A, cov A) || N(m_b, S_b))."""
    ma, Sa = A.mean(axis=0), np.cov(A, rowvar=False)
    d = len(ma)
    dm = ma - m_b
    Sb_inv = np.linalg.inv(S_b)
    return float(0.5 * (np.trace(Sb_inv @ Sa) + dm @ Sb_inv @ dm - d + np.linalg.slogdet(S_b)[1]
                        - np.linalg.slogdet(Sa)[1]))


def mean_shift_kl(A: np.ndarray, m_b: np.ndarray, S_b: np.ndarray, n_b: int) -> float:
    """(1/2)||mean A - m_b||^2 in the S_b metric, minus its sampling bias (d/N_A + d/N_B)/2: the
    KL (and D_alpha / alpha) of two Gaussians with the same covariance, i.e. of the Gaussian
    mechanism the certificate is written for (docs/accounting.md 1.1)."""
    dm = A.mean(axis=0) - m_b
    d = len(dm)
    return float(0.5 * (dm @ np.linalg.solve(S_b, dm) - d / len(A) - d / n_b))


def canary_stream(data: S.Dataset) -> S.Dataset:
    """``data`` with its last record replaced by an adversarial canary: unit norm, pointing along
    the model's current weights, labelled against them (the largest loss and gradient a record can
    have here, so the shift of its deletion comes close to the worst case eta_u L)."""
    head = data.subset(np.arange(data.n - 1))
    ogd = S.make_model("ogd", data.dim, data.loss, 1.0, 1)
    ogd.learn_many(head.ids, head.X, head.y)
    z = ogd.weights
    x = z / np.linalg.norm(z)
    X = np.vstack([head.X, x])
    y = np.append(head.y, -1.0)  # margin y x.z = -||z||: misclassified with the largest margin
    return S.Dataset("phishing-canary", X, y, data.loss, "Phishing[:999] + canary", head.ids + ["canary"])


def divergence_audit(draws: int, boot: int, log) -> list[dict]:
    """Passive OLU's output law vs the reference process's, on a fixed stream and schedule."""
    phishing = S.phishing().subset(np.arange(1000))
    ref_draws = 10 * draws  # the reference is cheap (vectorised): sample it densely
    out = []
    for schedule in ("uniform", "last", "canary"):
        data = canary_stream(phishing) if schedule == "canary" else phishing
        if schedule == "uniform":
            plan = S.plan_deletions(data.n, 0.01, "uniform", np.random.default_rng(3))
        else:  # the last record, deleted right after it was learned (u = tau)
            plan = S.DeletionPlan(np.array([data.n]), np.array([data.n - 1]), schedule, 1 / data.n)
        # self-check: the reference without noise is the engine's exact retraining
        template = S.make_model("passive", data.dim, data.loss, 1.0, plan.k)
        rows = np.flatnonzero(plan.retained_mask(data.n))
        store = ExampleStore(data.dim)
        store.extend(np.arange(1, len(rows) + 1, dtype=np.uint64), rows + 1, data.X[rows], data.y[rows])
        exact = replay_ogd(template, store)
        z0 = reference_outputs(template, data, plan, np.zeros(plan.k), 1, np.random.default_rng(0))[0]
        if not np.allclose(z0, exact, atol=1e-9, rtol=0):
            raise RuntimeError(f"reference process != replay_ogd ({np.abs(z0 - exact).max()})")
        for eps in (0.1, 1.0, 10.0):
            t0 = time.perf_counter()
            real = np.empty((draws, data.dim))
            sigmas = shifts = rho = None
            for r in range(draws):
                model = S.make_model("passive", data.dim, data.loss, eps, plan.k)
                real[r] = S.run_prequential(model, data, plan, batch=data.n).weights
                if sigmas is None:  # public: the same in every draw
                    sigmas = np.array([e["sigma"] for e in model.ledger])
                    shifts = np.array([e["shift"] for e in model.ledger])
                    rho = model.accountant.spent
            rrng = np.random.default_rng([draws, int(eps * 10), len(schedule)])
            ref = reference_outputs(template, data, plan, sigmas, ref_draws, rrng)
            fresh = reference_outputs(template, data, plan, sigmas, draws, rrng)  # same law as ref, N draws
            m_ref, S_ref = ref.mean(axis=0), np.cov(ref, rowvar=False)
            shift_kl = mean_shift_kl(real, m_ref, S_ref, ref_draws)
            full_kl = gaussian_kl(real, m_ref, S_ref)
            floor_shift = mean_shift_kl(fresh, m_ref, S_ref, ref_draws)
            floor_full = gaussian_kl(fresh, m_ref, S_ref)
            brng = np.random.default_rng(11)
            boots = [mean_shift_kl(real[brng.integers(0, draws, draws)], m_ref, S_ref, ref_draws) for _ in range(boot)]
            lo, hi = np.percentile(boots, [2.5, 97.5])
            row = dict(schedule=schedule, eps=eps, k=plan.k, draws=draws, reference_draws=ref_draws,
                       rho=rho, kl_bound=rho, renyi2_bound=2 * rho, sigmas=sigmas, shifts=shifts,
                       shift_kl=shift_kl, shift_kl_ci=[float(lo), float(hi)], floor_shift_kl=floor_shift,
                       gaussian_kl=full_kl, floor_gaussian_kl=floor_full,
                       ratio_to_bound=shift_kl / rho if rho else None,
                       mean_distance=float(np.linalg.norm(real.mean(0) - m_ref)),
                       seconds=time.perf_counter() - t0)
            out.append(row)
            log(f"  divergence {schedule} eps={eps:g}: mean-shift KL {shift_kl:.4g} [{lo:.3g}, {hi:.3g}] "
                f"(bound rho {rho:.4g}), full Gaussian KL {full_kl:.4g} (floor {floor_full:.3g}), "
                f"{row['seconds']:.0f} s")
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    args = h.arguments(ap, argv, quick="5 seeds, 50 engine draws, 20 bootstrap samples")
    info = h.machine()
    print(h.machine_line(info))
    started = time.perf_counter()
    seeds, draws, boot = (5, 50, 20) if args.quick else (400, 4000, 400)
    mia = []
    for dataset in MIA_DATASETS:
        print(f"Part A: membership inference, {dataset}, {seeds} seeds")
        mia += membership_inference(dataset, seeds, boot, print)
    print(f"\n{'dataset':>12} {'algorithm':>17} | {'AUC deleted vs unseen [95% CI]':>38} | "
          f"{'control: retained vs unseen':>30} | {'holdout acc':>11}")
    for r in mia:
        print(f"{r['dataset']:>12} {r['algorithm']:>17} | {r['auc_deleted_vs_unseen']:.4f} "
              f"[{r['ci'][0]:.4f}, {r['ci'][1]:.4f}]"
              f"{' 0.5 inside' if r['contains_half'] else ' 0.5 OUTSIDE':>12} | "
              f"{r['auc_retained_vs_unseen']:.4f} [{r['ci_retained'][0]:.4f}, {r['ci_retained'][1]:.4f}] | "
              f"{100 * r['holdout_accuracy']:10.1f}%")
    print(f"\nPart B: divergence of unlearned vs retrained-plus-noise outputs, passive, {draws} engine draws "
          f"(reference {10 * draws})")
    div = divergence_audit(draws, boot, print)
    print(f"\n{'schedule':>8} {'eps':>5} {'k':>3} | {'mean-shift KL [95% CI]':>30} {'floor':>9} | {'Gaussian KL':>11} "
          f"{'floor':>9} | {'bound rho':>10} {'est/bound':>9}")
    for r in div:
        print(f"{r['schedule']:>8} {r['eps']:5g} {r['k']:3d} | {r['shift_kl']:10.3g} [{r['shift_kl_ci'][0]:8.3g}, "
              f"{r['shift_kl_ci'][1]:8.3g}] {r['floor_shift_kl']:9.2g} | {r['gaussian_kl']:11.3g} "
              f"{r['floor_gaussian_kl']:9.2g} | {r['rho']:10.4g} {r['ratio_to_bound']:9.3f}")

    print("\n== targets ==")
    checks = Checks()
    verdicts = []
    for dataset in MIA_DATASETS:
        r = next(r for r in mia if r["algorithm"] == "passive eps=1" and r["dataset"] == dataset)
        lo, hi = r["ci"]
        verdicts.append(checks.check(
            AUC_CI_CONTAINS_HALF, max(0.0, lo - 0.5, 0.5 - hi),
            where=f"{dataset}, passive eps=1, deleted vs never-seen: AUC {r['auc_deleted_vs_unseen']:.4f} "
                  f"[{lo:.4f}, {hi:.4f}]"))
        ctrl = next(c for c in mia if c["algorithm"] == "ogd" and c["dataset"] == dataset)
        print(f"    control, plain OGD on the same deleted records: {ctrl['auc_deleted_vs_unseen']:.4f} "
              f"[{ctrl['ci'][0]:.4f}, {ctrl['ci'][1]:.4f}] "
              f"(the attack {'sees' if not ctrl['contains_half'] else 'does not see'} "
              f"records that were not unlearned)")
    within = all(r["shift_kl_ci"][0] <= r["kl_bound"] for r in div)
    print(f"measured divergence at or below the certified bound (mean-shift KL CI lower end <= rho) everywhere: "
          f"{'yes' if within else 'NO'}; largest estimate/bound ratio "
          f"{max(r['ratio_to_bound'] for r in div):.3f}")
    seconds = time.perf_counter() - started
    print(f"total {seconds:.0f} s")

    report = dict(machine=info, seconds=seconds, worker_defaults=S.model_defaults(), membership_inference=mia,
                  divergence=div, targets=dict(auc_ci_contains_half=all(verdicts), divergence_within_bound=within,
                                               checks=checks.results))
    return h.finish("privacy_audit", report, args.out, checks=checks, plot=lambda path: plot(mia, div, seeds, path))


def plot(mia: list[dict], div: list[dict], seeds: int, path: Path) -> None:
    pyplot = h.plt()
    fig, axes = pyplot.subplots(1, 3, figsize=(17, 4.8))
    for ax, dataset in zip(axes[:2], MIA_DATASETS):
        rs = [r for r in mia if r["dataset"] == dataset]
        names = [r["algorithm"] for r in rs]
        x = np.arange(len(names))
        for off, key, ci, lab in ((-0.15, "auc_deleted_vs_unseen", "ci", "deleted vs never-seen"),
                                  (0.15, "auc_retained_vs_unseen", "ci_retained", "retained vs never-seen (control)")):
            vals = np.array([r[key] for r in rs])
            err = np.array([[v - r[ci][0], r[ci][1] - v] for v, r in zip(vals, rs)]).T
            ax.errorbar(x + off, vals, yerr=err, fmt="o", capsize=3, label=lab)
        ax.axhline(0.5, color="grey", ls="--", lw=1)
        ax.set_xticks(x, names, rotation=25, fontsize=8)
        ax.set_ylabel("loss-threshold attack AUC (95% CI)")
        ax.set_title(f"{dataset}: 1% uniform deletions, {seeds} seeds", fontsize=10)
        ax.legend(fontsize=8)
    ax = axes[2]
    for schedule, marker in (("uniform", "o"), ("last", "s"), ("canary", "^")):
        rs = [r for r in div if r["schedule"] == schedule]
        eps = np.array([r["eps"] for r in rs])
        est = np.array([r["shift_kl"] for r in rs])
        err = np.array([[max(v - r["shift_kl_ci"][0], 0), r["shift_kl_ci"][1] - v] for v, r in zip(est, rs)]).T
        ax.errorbar(eps, np.maximum(est, 1e-7), yerr=err, marker=marker, capsize=3, label=f"measured, {schedule}")
        ax.plot(eps, [r["kl_bound"] for r in rs], marker=marker, ls="--", color="black", alpha=0.6,
                label=f"certified bound rho, {schedule}")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("eps (lifetime Renyi slope)")
    ax.set_ylabel("KL (nats); D_alpha = alpha x this for both")
    ax.set_title("passive: unlearned vs retrained-plus-noise", fontsize=10)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    pyplot.close(fig)


def render(report: dict) -> str:
    """The README tables: membership inference AUCs, then divergence against the certified bound."""
    lines = ["| stream | algorithm | AUC deleted vs never-seen [95% CI] | control: retained vs never-seen "
             "| holdout accuracy |", "|---|---|---|---|---:|"]
    for r in report["membership_inference"]:
        lines.append(f"| {r['dataset']} | {r['algorithm']} | {r['auc_deleted_vs_unseen']:.3f} "
                     f"[{r['ci'][0]:.3f}, {r['ci'][1]:.3f}] | {r['auc_retained_vs_unseen']:.3f} "
                     f"[{r['ci_retained'][0]:.3f}, {r['ci_retained'][1]:.3f}] | {100 * r['holdout_accuracy']:.1f}% |")
    lines += ["", "| schedule (k) | eps | mean-shift KL [95% CI] | full Gaussian KL (floor) | bound rho "
                  "| estimate / bound |", "|---|---:|---|---|---:|---:|"]
    for r in report["divergence"]:
        ratio = "" if r["ratio_to_bound"] is None else f"{r['ratio_to_bound']:.3f}"
        lines.append(f"| {r['schedule']} ({r['k']}) | {r['eps']:g} | {r['shift_kl']:.2g} [{r['shift_kl_ci'][0]:.2g}, "
                     f"{r['shift_kl_ci'][1]:.2g}] | {r['gaussian_kl']:.2g} ({r['floor_gaussian_kl']:.2g}) "
                     f"| {r['rho']:.2g} | {ratio} |")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
