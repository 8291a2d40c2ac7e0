"""Typed errors of the OLU engine.

Every rejection of an example raises a subclass of :class:`InvalidExample` *before* any state
changes, so the caller (the stream layer) can route the record to the dead-letter topic with
``error.reason`` as its reason code. Messages name fields, shapes and bounds, never a feature,
label or id value: they end up in dead-letter headers and logs.
"""


class OLUError(Exception):
    """Base class of every error the engine raises on purpose."""


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


class ConfigError(OLUError, ValueError):
    """A bad constructor argument; the message names the parameter."""


class BudgetExhausted(OLUError, RuntimeError):
    """The deletion capacity or the Rényi budget ``eps`` of the current epoch is used up."""


class InvalidAccountantState(OLUError, ValueError):
    """A dict given to :meth:`PrivacyAccountant.from_state` is malformed or inconsistent."""
