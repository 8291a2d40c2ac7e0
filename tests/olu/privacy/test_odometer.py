"""The zCDP deletion odometer (docs/accounting.md 3) against closed forms and dp-accounting."""

from __future__ import annotations

import math

import numpy as np
import pytest
from dp_accounting import dp_event, pld, rdp

from worker.olu.privacy.accountant import rdp_to_dp
from worker.olu.privacy.odometer import (
    DeletionOdometer,
    dp_to_zcdp,
    gaussian_rho,
    gaussian_sigma,
    zcdp_to_dp,
)

ORDERS = [1.01, 1.1, 1.25, 1.5, 2.0, 3.0, 4.0, 6.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0]


@pytest.mark.parametrize("rho,delta", [(0.02, 1e-5), (0.5, 1e-6), (1.0, 1e-5), (1.55, 1e-5), (7.0, 1e-9)])
def test_conversion_is_bun_steinke_and_matches_the_engine(rho, delta):
    eps = zcdp_to_dp(rho, delta)
    assert eps == pytest.approx(rho + 2 * math.sqrt(rho * math.log(1 / delta)), rel=1e-15)
    assert eps == pytest.approx(rdp_to_dp(rho, delta, "zcdp"), rel=1e-14)
    assert dp_to_zcdp(eps, delta) == pytest.approx(rho, rel=1e-12)  # docs/accounting.md 3.3: the two forms are inverse


def test_the_spec_noise_table_is_reproduced():
    # docs/accounting.md 3.2 "noise comparison" (zCDP column): sigma / Delta = sqrt(m / (2 rho_tot)).
    for eps, m, rho_tot, ratio in [(1.0, 20, 0.0208, 21.9), (1.0, 100, 0.0208, 49.0), (10.0, 100, 1.550, 5.7)]:
        odo = DeletionOdometer.from_dp(eps, 1e-5, m)
        assert odo.rho_total == pytest.approx(rho_tot, abs=5e-4)
        assert odo.sigma_step(1.0) == pytest.approx(ratio, abs=0.05)
        assert odo.epsilon_total == pytest.approx(eps, rel=1e-12)


@pytest.mark.parametrize("eps,m", [(1.0, 20), (1.0, 100), (10.0, 100), (3.0, 7)])
def test_m_deletions_compose_to_rho_total_per_dp_accounting(eps, m):
    """dp-accounting's RDP of m Gaussian mechanisms at sigma_step/Delta is alpha * rho_total at every order."""
    odo = DeletionOdometer.from_dp(eps, 1e-5, m)
    acc = rdp.RdpAccountant(ORDERS)
    acc.compose(dp_event.GaussianDpEvent(odo.sigma_step(1.0)), m)
    np.testing.assert_allclose(np.asarray(acc._rdp) / np.asarray(ORDERS), odo.rho_total, rtol=1e-12)
    # the reported epsilon is a valid (sound) bound: never below the tight PLD accounting
    tight = pld.PLDAccountant()
    tight.compose(dp_event.GaussianDpEvent(odo.sigma_step(1.0)), m)
    assert tight.get_epsilon(1e-5) <= odo.epsilon_spent(m) <= eps * (1 + 1e-12)
    assert acc.get_epsilon(1e-5) <= odo.epsilon_spent(m) * (1 + 1e-9)


def test_gaussian_mechanism_rho_and_sigma_are_inverse():
    for delta_, rho in [(1.0, 0.05), (10.0, 0.001), (0.3, 2.0)]:
        sigma = gaussian_sigma(delta_, rho)
        assert sigma == pytest.approx(delta_ / math.sqrt(2 * rho), rel=1e-15)
        assert gaussian_rho(delta_, sigma) == pytest.approx(rho, rel=1e-12)


def test_capacity_is_an_integer_gate_immune_to_rounding():
    # 0.1 / 3 * 3 != 0.1 in floating point: the gate must still allow exactly 3 deletions.
    odo = DeletionOdometer(rho_total=0.1, capacity=3)
    assert [odo.allows(k) for k in range(5)] == [True, True, True, False, False]
    assert [odo.capacity_left(k) for k in range(5)] == [3, 2, 1, 0, 0]
    assert odo.rho_spent(3) == pytest.approx(0.1, rel=1e-15)
    assert odo.epsilon_remaining(0) == pytest.approx(odo.epsilon_total)
    assert odo.epsilon_remaining(3) == pytest.approx(0.0, abs=1e-12)
    spent = [odo.epsilon_spent(k) for k in range(4)]
    assert spent[0] == 0.0 and all(a < b for a, b in zip(spent, spent[1:]))


@pytest.mark.parametrize("kwargs", [dict(rho_total=0.0, capacity=1), dict(rho_total=-1, capacity=1),
                                    dict(rho_total=math.inf, capacity=1), dict(rho_total=1.0, capacity=0),
                                    dict(rho_total=1.0, capacity=2.5), dict(rho_total=1.0, capacity=True),
                                    dict(rho_total=1.0, capacity=3, delta=1.0),
                                    dict(rho_total=1.0, capacity=3, delta=0)])
def test_bad_odometer_parameters_are_refused(kwargs):
    with pytest.raises(ValueError):
        DeletionOdometer(**kwargs)


def test_bad_counts_and_conversion_inputs_are_refused():
    odo = DeletionOdometer(1.0, 5)
    for k in (-1, 1.5, True):
        with pytest.raises(ValueError):
            odo.allows(k)
    with pytest.raises(ValueError):
        zcdp_to_dp(-0.1, 1e-5)
    with pytest.raises(ValueError):
        dp_to_zcdp(0.0, 1e-5)
    with pytest.raises(ValueError):
        gaussian_sigma(0.0, 1.0)
