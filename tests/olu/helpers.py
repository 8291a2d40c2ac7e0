"""Stream generators and a pure-numpy reference process shared by the engine tests."""

from __future__ import annotations

import numpy as np

from worker.olu.privacy.accountant import PrivacyAccountant


def synthetic_stream(n: int, d: int, seed: int = 0, loss: str = "logistic"):
    """n examples with ||x|| <= 1 and labels from a noisy linear rule; ids 'r-0' .. 'r-{n-1}'."""
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d))
    X /= np.maximum(np.linalg.norm(X, axis=1, keepdims=True), 1.0)
    w = rng.normal(size=d)
    score = X @ w + 0.3 * rng.normal(size=n)
    y = np.clip(score, -1, 1) if loss == "ridge" else np.where(score >= 0, 1.0, -1.0)
    return [f"r-{j}" for j in range(n)], X, y


def masked_run(model_cls, kwargs, X, y, skip: set[int]):
    """The reference process: OGD over the stream with the examples at 1-based steps in ``skip``
    replaced by the skip element (identity step, time index kept; docs/guarantee.md 2.2)."""
    m = model_cls(**kwargs)
    z = np.zeros(m.param_dim)
    for t in range(1, len(X) + 1):
        if t in skip:
            continue
        eta = m.schedule.eta(t)
        x = m.features.check(X[t - 1])  # the ingest rule too: a row a hair over the bound is clipped
        z = m.ball.project(z - eta * m.loss.grad(z, x, m.loss.label(y[t - 1])))
    return z


class PlannedCalibration(PrivacyAccountant):
    """The engine's accountant with another sigma rule ``rule(j, shift)`` for the j-th deletion
    (per-request, or even over a capacity): units the worker does not wire yet. The engine's OGD,
    noise draw and projection stay real; the budget is not what is under test (the budget is huge)."""

    def __init__(self, rule):
        super().__init__(budget=1e300)
        self.rule = rule

    def sigma_for_next(self, shift: float) -> float:
        return self.rule(self.deletions + 1, shift)


def halve_sigma(where: str | None, monkeypatch) -> None:
    """Make passive OLU's per-request noise half what it must be, in the calibration (the
    accountant's sigma, its charge skipped) or in the draw; None leaves it alone."""
    from worker.olu import PassiveOLU
    from worker.olu.privacy.accountant import PerRequestAccountant

    if where == "calibration":
        calibrated = PerRequestAccountant.sigma_for_next
        monkeypatch.setattr(PerRequestAccountant, "sigma_for_next", lambda self, a: calibrated(self, a) / 2)
        monkeypatch.setattr(PerRequestAccountant, "charge", lambda self, a, s: None)
    elif where == "draw":
        original = PassiveOLU._noise
        monkeypatch.setattr(PassiveOLU, "_noise", lambda self, s: original(self, s / 2))


def released_law_is_private(state: dict, request: list[str], reference: np.ndarray, rho: float, *, n: int = 3000,
                            seed: int = 20_000) -> tuple[bool, tuple[float, float, float]]:
    """The released law after ``request`` (``n`` restores of ``state``, each with its own noise) vs
    the masked reference run plus the same Gaussian: for equal Gaussians D_alpha = alpha ||m0 -
    m1||^2 / (2 s^2) <= alpha rho, i.e. ||m0 - m1|| / s <= sqrt(2 rho). (private?, (ratio, bound,
    measured spread over sigma)): private when the ratio is within 15% of the bound and the
    spread within 5% of the calibrated sigma."""
    import math

    from worker.olu import load_model

    dim = len(reference)
    real = np.empty((n, dim))
    sigma = None
    for k in range(n):
        m = load_model(state, noise_rng=np.random.default_rng(seed + k))
        d = m.unlearn_request(request)
        real[k], sigma = m.z, d.sigma
    masked = reference + np.random.default_rng(98).normal(0.0, sigma, size=(n, dim))
    gap = np.linalg.norm(real.mean(0) - masked.mean(0))
    spread = math.sqrt((real.var(0, ddof=1).mean() + masked.var(0, ddof=1).mean()) / 2)
    ratio, bound = gap / spread, math.sqrt(2 * rho)
    return bool(ratio <= bound * 1.15 and abs(spread / sigma - 1) < 0.05), (ratio, bound, spread / sigma)


def tight_last_deletion(**extra):
    """A passive model whose last record it misclassifies badly, along z: the record's gradient
    has norm ~L, so the worst-case shift bound a = eta_u L is nearly attained and a privacy check
    on deleting it is near-tight. Returns (kw, ids, model, masked reference run, tightness =
    ||model - reference|| / shift bound)."""
    from worker.olu import PassiveOLU

    kw = {**dict(dim=2, loss="logistic", l2=1e-3, radius=50.0, feature_bound=1.0, rho=1.0), **extra}
    ids, X, y = synthetic_stream(200, 2, seed=3)
    base = PassiveOLU(**kw)
    base.learn_many(ids[:-1], X[:-1], y[:-1])
    X[-1], y[-1] = base.z / np.linalg.norm(base.z), -1.0
    base.learn_one(ids[-1], X[-1], y[-1])
    reference = masked_run(PassiveOLU, kw, X, y, skip={base.t})
    return kw, ids, base, reference, np.linalg.norm(base.z - reference) / base.shift([base.t], base.t)
