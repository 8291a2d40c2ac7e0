"""Privacy units (what one guarantee protects) and the per-request calibration. Pure math.

Two units
---------
* ``"all-deletions"`` (what the accountant charges today): the current model is indistinguishable
  from one that never saw ANY deleted record. The slope ``rho`` is a lifetime budget of the model,
  split over deletions (:func:`.rdp.budget_weight`), so ``sigma_i`` grows with the deletion index i.
* ``"per-request"``: after a deletion request is honoured, every later release is
  indistinguishable from the masked reference run for that request alone: the same stream in which
  the records the request names are replaced by a skipped step in place (the step counter still
  advances), with the same noise schedule. Each request is charged ``rho`` once, with
  ``sigma = shift / sqrt(2 rho)``; a data subject deleted in r requests costs r rho by composition,
  so a subject's records must be named in ONE request to be covered by one charge.

Why the per-request charge is rho, whatever came before
--------------------------------------------------------
Couple the real run with the reference run of request R. They differ only at R's masked steps u:
there the real map is the projected gradient step g_u and the reference map the identity, so
``||g_u(z) - z'|| <= gamma_u ||z - z'|| + Delta_u``; at every other step both apply the same
gamma_r-Lipschitz map. Unrolled, the distance at the deletion time tau is at most

    a_R = sum over R's masked steps u of Gamma_{u,tau} Delta_u,

the shift. Privacy amplification by iteration then gives ``D_alpha <= alpha a_R**2 / (2 sigma**2)``
for the release right after R's noise ``N(0, sigma**2 I)``, i.e. ``alpha rho`` for
``sigma = a_R / sqrt(2 rho)``, and every later release is post-processing (the same maps in both
runs). Other requests' noise is added in both runs with the same public scale, so it only ever
helps; the bound is the same whatever came before. Hence sigma must be a function of public
request metadata only (the request time and the insert steps of its records): a noise decision
that depends on another request's records, or a record named by two requests, breaks the proof.

A request naming several records: the masked steps of all of them enter the one sum above. The
discrepancies add through the recursion ``e_t = gamma_t e_{t-1} + s_t`` (the triangle inequality
at every step of the coupling), so grouping the steps by record, the request's shift is the sum
of its records' shifts, each ``sum_u Gamma_{u,tau} Delta_u`` over that record's applied steps.

>>> per_request_sigma([0.3, 0.1], rho=0.5)
0.4
>>> (per_request_sigma([], rho=0.5), per_request_charge([], rho=0.5),
...  per_request_charge([0.3], rho=0.5))
(0.0, 0.0, 0.5)
"""

from __future__ import annotations

import math
import sys  # noqa: F401 - the doctests compare with sys.float_info.min
from collections.abc import Iterable

from ...formulas import deletion_sigma
from .checks import positive, real
from .gaussian import gaussian_epsilon, gaussian_rho_for_epsilon, mu_for_rho
from .rdp import rdp_to_dp, rho_for_epsilon

__all__ = ["ACCOUNTING", "UNITS", "per_request_charge", "per_request_sigma", "request_shift",
           "unit_epsilon", "unit_rho_for_epsilon"]

UNITS = ("all-deletions", "per-request")
#: How each unit's slope becomes (epsilon, delta) (docs/accounting.md 2.6): a per-request guarantee
#: is one Gaussian mechanism (its exact curve); all-deletions composes amplification-by-iteration
#: bounds, which only give the Rényi curve (its conversion, :func:`.rdp.rdp_to_dp`).
ACCOUNTING = {"all-deletions": "renyi", "per-request": "gaussian"}
#: Each accounting's (slope -> epsilon at delta, epsilon at delta -> the largest slope) pair.
_CONVERSIONS = {
    "renyi": (rdp_to_dp, rho_for_epsilon),
    "gaussian": (lambda rho, delta: gaussian_epsilon(mu_for_rho(rho), delta),
                 gaussian_rho_for_epsilon),
}


def _conversions(unit: str):
    if unit not in ACCOUNTING:
        raise ValueError(f"unit must be one of {UNITS}, got {unit!r}")
    return _CONVERSIONS[ACCOUNTING[unit]]


def unit_epsilon(unit: str, rho: float, delta: float) -> float:
    """The epsilon at ``delta`` a slope ``rho`` certifies under ``unit`` (its :data:`ACCOUNTING`).

    >>> (round(unit_epsilon("per-request", 0.030557, 1e-5), 3),
    ...  round(unit_epsilon("all-deletions", 0.030557, 1e-5), 3))
    (0.915, 1.0)
    """
    return _conversions(unit)[0](rho, delta)


def unit_rho_for_epsilon(unit: str, epsilon: float, delta: float) -> float:
    """The largest slope whose :func:`unit_epsilon` at ``delta`` is at most ``epsilon``.

    >>> [round(unit_rho_for_epsilon(unit, 1.0, 1e-5), 6)
    ...  for unit in ("per-request", "all-deletions")]
    [0.035926, 0.030557]
    """
    return _conversions(unit)[1](epsilon, delta)


def request_shift(shifts: Iterable[float]) -> float:
    """The shift of a request: the (exactly rounded) sum of its records' shifts, each >= 0.

    A record the model never applied has no shift (pass nothing, or 0.0 for it).

    >>> request_shift([0.25, 0.5, 0.0]), request_shift([])
    (0.75, 0.0)
    >>> request_shift([0.1, -0.2])
    Traceback (most recent call last):
    ...
    ValueError: shifts[1] must be in [0.0, inf), got -0.2
    """
    return math.fsum(real(f"shifts[{j}]", a, lo=0.0) for j, a in enumerate(shifts))


def per_request_sigma(shifts: Iterable[float], rho: float) -> float:
    """Noise std of a request under the per-request unit: ``request_shift(shifts) / sqrt(2 rho)``.

    0.0 when the request moves nothing (no applied record): it then adds no noise. No deletion
    index enters: the same request gets the same sigma whatever came before it. A positive shift
    never gets a sigma below the smallest normal float (``sys.float_info.min``, 2.2e-308): a
    subnormal quotient would lose the relative precision the charge relies on (or underflow to
    0, no noise for a real shift), and a larger sigma is always safe.

    >>> per_request_sigma([1.0], rho=2.0), per_request_sigma([0.0], rho=2.0)
    (0.5, 0.0)
    >>> per_request_sigma([5e-324], rho=2.0) == sys.float_info.min
    True
    """
    rho = positive("rho", rho)
    shift = request_shift(shifts)
    if shift == 0.0:
        return 0.0
    return deletion_sigma(shift, -math.sqrt(2.0 * rho))


def per_request_charge(shifts: Iterable[float], rho: float) -> float:
    """The Rényi slope a request spends under the per-request
    unit: ``rho``, or 0.0 if it moves nothing.

    ``shift**2 / (2 sigma**2)`` with :func:`per_request_sigma` is ``rho`` by construction.

    >>> per_request_charge([0.2, 0.1], rho=0.25), per_request_charge([0.0, 0.0], rho=0.25)
    (0.25, 0.0)
    """
    rho = positive("rho", rho)
    return rho if request_shift(shifts) > 0.0 else 0.0
