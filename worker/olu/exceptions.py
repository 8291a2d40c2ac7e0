"""Typed errors of the OLU engine.

Every rejection of an example raises a subclass of :class:`InvalidExample` *before* any state
changes, so the caller (the stream layer) can route the record to the dead-letter topic with
``error.reason`` as its reason code. Messages name fields, shapes and bounds, never a feature,
label or id value: they end up in dead-letter headers and logs.
"""


from ..exceptions import ConfigError, OluWorkerError

__all__ = ["BudgetExhausted", "ConfigError", "DimensionMismatch", "InvalidAccountantState",
           "InvalidExample", "InvalidFeatures", "InvalidLabel", "InvalidRecordId", "InvalidState",
           "NonFiniteInput", "NormExceeded", "OLUError"]


class OLUError(OluWorkerError):
    """Base class of every error the engine raises on purpose (bad settings raise the package's one
    :class:`~worker.exceptions.ConfigError`, which names the parameter)."""


class InvalidExample(OLUError, ValueError):
    """An example the model refuses; ``reason`` is a bounded, snake_case code."""

    reason = "schema_violation"


class DimensionMismatch(InvalidExample):
    reason = "wrong_dimension"


class NonFiniteInput(InvalidExample):
    reason = "non_finite"


class NormExceeded(InvalidExample):
    reason = "norm_exceeded"


class InvalidLabel(InvalidExample):
    reason = "bad_label"


class InvalidFeatures(InvalidExample):
    reason = "bad_features"


class InvalidRecordId(InvalidExample):
    reason = "bad_id"


class InvalidState(OLUError, ValueError):
    """A state dict that cannot be imported (wrong version, shape, or inconsistent counters)."""


class BudgetExhausted(OLUError, RuntimeError):
    """The deletion capacity or the Rényi budget ``rho`` of the current epoch is used up."""


class InvalidAccountantState(OLUError, ValueError):
    """A dict given to :meth:`PrivacyAccountant.from_state` is malformed or inconsistent."""
