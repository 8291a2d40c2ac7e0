"""Online learning-unlearning (OLU) engine: pure Python and numpy, no I/O.

Usable alone, like a River estimator::

    model = PassiveOLU(dim=10, loss="logistic", l2=0.01, radius=10.0, feature_bound=1.0, eps=1.0)
    model.learn_one("r-1", x, 1)
    model.unlearn_one("r-1")
"""
