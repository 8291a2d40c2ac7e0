"""Worker settings: flags, ``OLU_*`` environment variables and defaults, validated once at start.

Precedence is flag > environment > default. Every setting ``name`` has the environment variable
``OLU_<NAME>`` and the flag ``--<name-with-dashes>`` (one exception: the bootstrap servers are
``OLU_KAFKA_BOOTSTRAP_SERVERS``, with the plain ``KAFKA_BOOTSTRAP_SERVERS`` as a fallback). An empty
environment variable counts as unset. :func:`settings_table` lists them all (docs/configuration.md,
printed by ``python -m worker.config``).

Anything wrong fails at start with a :class:`ConfigError` that names the setting by both its
environment variable and its flag::

    OLU_RHO (--rho) must be a number > 0, got 'abc'

That covers unparsable or out-of-range values, unknown choices, missing required settings, unknown
``OLU_*`` variables (typo protection: the closest known name is suggested), unknown flags, state
URLs with an unsupported scheme, and librdkafka pass-through keys that would break the worker's
contract (:mod:`worker.config.kafka`).

Secrets in the pass-through and the state URL are masked by :meth:`Settings.redacted` and
``repr``. Object-store credentials are not settings: obstore reads the standard ``AWS_*``
environment; only whether some are present is recorded, for the start-up log line.

One job per module:

- :mod:`~worker.config.settings`: the :class:`Settings` dataclass (every default, written once);
- :mod:`~worker.config.options`: the option table (parser, meaning, names of each setting);
- :mod:`~worker.config.parsers`: the value parsers;
- :mod:`~worker.config.kafka`: the librdkafka pass-through rules and secret detection;
- :mod:`~worker.config.loading`: :func:`load_settings` and :func:`add_arguments`;
- :mod:`~worker.config.model`: what the settings know about the engine's algorithms.
"""

from .exceptions import ConfigError
from .kafka import env_to_kafka_key, kafka_key_to_env
from .loading import DEMO_DIM, add_arguments, load_settings
from .model import ALGORITHMS
from .options import OPTION_BY_NAME, OPTIONS, Option, settings_table
from .settings import Settings

# The names imported from worker.config anywhere, and the type of OPTIONS' entries; everything else
# is imported from its own module.
__all__ = [
    "ALGORITHMS", "DEMO_DIM", "OPTIONS", "OPTION_BY_NAME", "ConfigError", "Option", "Settings",
    "add_arguments",
    "env_to_kafka_key", "kafka_key_to_env", "load_settings", "settings_table",
]
