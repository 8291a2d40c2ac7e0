"""Reading the settings: flags, then ``OLU_*`` environment variables, then defaults; checked once.

:func:`load_settings` parses every value, refuses unknown ``OLU_*`` variables and flags (naming
the closest known one), checks the combinations and builds the engine's model once, so a bad
setting fails at start with a :class:`ConfigError` that names it by both its names.
:func:`add_arguments` gives an ``argparse`` parser every setting's flag.
"""

from __future__ import annotations

import argparse
import difflib
import os
import re
from collections.abc import Iterable, Mapping
from typing import Any

from .exceptions import BadValue, ConfigError
from .kafka import KAFKA_ENV_PREFIX, check_key, check_release_timeout, env_to_kafka_key
from .model import build_model, engine_class
from .options import (
    BOOTSTRAP_ENV,
    BOOTSTRAP_FALLBACK_ENV,
    ENV_PREFIX,
    GROUP_TITLES,
    OPTION_BY_ENV,
    OPTION_BY_NAME,
    OPTIONS,
)
from .parsers import boolean
from .settings import Settings, hostname

#: ``OLU_*`` variables that are not settings but are read elsewhere (tests, the numba kernel); the
#: unknown-variable check leaves them alone. ``OLU_TEST_*`` is reserved for test fixtures.
OTHER_ENV = frozenset({"OLU_REFERENCE_KERNEL", "OLU_KAFKA_LOCAL"})
OTHER_ENV_PREFIXES = ("OLU_TEST_",)
#: Environment variables that carry object-store credentials (read by obstore, never copied).
AWS_CREDENTIAL_ENV = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN",
                      "AWS_WEB_IDENTITY_TOKEN_FILE", "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI",
                      "AWS_CONTAINER_CREDENTIALS_FULL_URI", "AWS_PROFILE")
COMMANDS = ("run", "demo", "plan", "produce")
#: Settings that were removed, with what replaces them: refused at start, never silently ignored.
REMOVED = {
    "eps": ("OLU_EPS (--eps) was removed: it was the Renyi slope, not epsilon. Set OLU_RHO (--rho) "
            "for the slope, or OLU_TARGET_EPSILON (--target-epsilon) with OLU_DELTA (--delta) for "
            "an (epsilon, delta) target per privacy unit"),
}
DEMO_DIM = 10
#: Defaults that follow the privacy unit, applied where the setting is not given. Under per-request
#: a request naming a subject's records is noised for their summed shift, so without renewal the
#: deletion of an active subject leaves noise in every later release: 7 to 15 points below plain OGD
#: at 2% of records deleted by account, against 0.1 to 0.5 with a 20,000-event disjoint rotation
#: (bench/deletion_workloads.py, docs/accounting.md 13).
UNIT_DEFAULTS = {"per-request": {"rotation": "on", "rotation_variant": "disjoint",
                                 "model_lifetime_events": 20_000}}
KAFKA_FLAG = "--kafka"


# --------------------------------------------------------------------------- argparse
def add_arguments(parser: argparse.ArgumentParser, *, exclude: Iterable[str] = (),
                  shown: Iterable[str] | None = None) -> None:
    """Add every setting's flag to ``parser`` (defaults None, so environment and defaults apply).

    ``exclude`` names settings whose flag the caller defines itself. ``shown``, when given, names
    the settings ``--help`` lists (with ``kafka`` for ``--kafka``): the others are accepted all the
    same, unlisted, so a command's help stays about that command (``run --help`` lists them all).
    """
    skip = set(exclude)
    listed = None if shown is None else set(shown)
    groups: dict[str, Any] = {}
    for opt in OPTIONS:
        if opt.name in skip:
            continue
        if listed is not None and opt.name not in listed:
            _add_flag(parser, opt, argparse.SUPPRESS)
            continue
        group = groups.get(opt.group)
        if group is None:
            group = groups[opt.group] = parser.add_argument_group(
                f"{GROUP_TITLES[opt.group]} settings")
        shown = ",".join(opt.default) if isinstance(opt.default, tuple) else opt.default
        help_text = f"{opt.help} (env {opt.env}" + ("" if shown is None
                                                    else f"; default {shown}") + ")"
        _add_flag(group, opt, help_text.replace("%", "%%"))
    for name in REMOVED:  # hidden: so the refusal names the replacement instead of "unknown flag"
        parser.add_argument("--" + name.replace("_", "-"), dest=f"removed_{name}", default=None,
                            help=argparse.SUPPRESS)
    if "kafka" not in skip:
        hidden = listed is not None and "kafka" not in listed
        (parser if hidden else groups.get("kafka", parser)).add_argument(
            KAFKA_FLAG, dest="kafka", action="append", default=None, metavar="KEY=VALUE",
            help=argparse.SUPPRESS if hidden else
            "librdkafka setting, repeatable (env OLU_KAFKA_<KEY>, '.' as '_' and '_' as '__')",
        )


def _add_flag(target, opt, help_text: str) -> None:
    if opt.parse is boolean:
        target.add_argument(opt.flag, dest=opt.name, action=argparse.BooleanOptionalAction,
                            default=None,
                            help=help_text)
        return
    choices = getattr(opt.parse, "choices", None)
    metavar = "{" + ",".join(choices) + "}" if choices else opt.name.upper()
    target.add_argument(opt.flag, dest=opt.name, default=None, metavar=metavar, help=help_text)


def _rotates(algorithm: str) -> bool:
    from ..olu.registry import ALGORITHMS

    return bool(getattr(ALGORITHMS.get(algorithm), "rotates", False))


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # raise instead of printing usage and exiting
        raise ConfigError(message)


def _parse_argv(argv: list[str]) -> dict[str, Any]:
    parser = _Parser(prog="olu-worker", add_help=False, allow_abbrev=False)
    add_arguments(parser)
    namespace, rest = parser.parse_known_args(argv)
    if rest:
        flags = [o.flag for o in OPTIONS] + [KAFKA_FLAG]
        unknown = rest[0].split("=", 1)[0]
        hint = difflib.get_close_matches(unknown, flags, n=1)
        raise ConfigError(
            f"unknown flag {unknown!r}" + (f"; did you mean {hint[0]}?" if hint else ""))
    return vars(namespace)


# --------------------------------------------------------------------------- environment
def _suggest_env(name: str) -> str:
    candidates = sorted(OPTION_BY_ENV) + sorted(OTHER_ENV)
    match = difflib.get_close_matches(name, candidates, n=1, cutoff=0.6)
    if not match:
        return ""
    opt = OPTION_BY_ENV.get(match[0])
    return f"; did you mean {match[0]}" + (f" ({opt.flag})" if opt else "") + "?"


def _label(name: str) -> str:
    return OPTION_BY_NAME[name].label


def _kafka_overrides(env: Mapping[str, str], flags: list[str] | None,
                     group_protocol: str) -> dict[str, str]:
    found: dict[str, tuple[str, str]] = {}  # key -> (value, source)
    for name in sorted(env):
        if not name.startswith(KAFKA_ENV_PREFIX) or name == BOOTSTRAP_ENV or name in OTHER_ENV:
            continue
        key = env_to_kafka_key(name)
        if not key or key.startswith(".") or key.endswith("."):
            raise ConfigError(f"{name}: cannot map to a librdkafka key (got {key!r})")
        if env[name] == "":
            continue
        if key in found:
            raise ConfigError(f"{name} and {found[key][1]} both set librdkafka '{key}'")
        found[key] = (env[name], name)
    for item in [flags] if isinstance(flags, str) else flags or ():
        key, sep, value = str(item).partition("=")
        key = key.strip()
        if not sep or not key:
            raise ConfigError(f"{KAFKA_FLAG} takes KEY=VALUE, got {item!r}")
        found[key] = (value, f"{KAFKA_FLAG} {key}")  # a flag wins over the environment
    for key, (value, source) in found.items():
        check_key(key, value, source, group_protocol, _label)
    return {key: value for key, (value, _) in found.items()}


# --------------------------------------------------------------------------- loading
def load_settings(argv=None, env: Mapping[str, str] | None = None, *,
                  command: str = "run") -> Settings:
    """Settings from flags (``argv``: a list of strings or an ``argparse.Namespace`` produced by a
    parser given :func:`add_arguments`), the environment (default ``os.environ``) and defaults.

    ``command="run"`` requires the bootstrap servers and ``dim``, ``command="produce"`` the
    bootstrap servers; ``demo`` and ``plan`` require neither (``dim`` defaults to 10; the demo
    brings its own cluster).

    >>> s = load_settings(["--dim", "3", "--rho", "2"], {"OLU_KAFKA_BOOTSTRAP_SERVERS": "k:9092"})
    >>> s.dim, s.rho, s.target_epsilon, s.origin("rho"), s.origin("l2")
    (3, 2.0, None, 'flag', 'default')
    >>> try:
    ...     load_settings([], {"OLU_RHO": "abc"}, command="demo")
    ... except ConfigError as exc:
    ...     print(exc)
    OLU_RHO (--rho) must be a number > 0, got 'abc'
    """
    if command not in COMMANDS:
        raise ValueError(f"command must be one of {', '.join(COMMANDS)}, got {command!r}")
    env = os.environ if env is None else env
    if argv is None:
        flag_values: dict[str, Any] = {}
    elif isinstance(argv, argparse.Namespace):
        flag_values = vars(argv)
    else:
        flag_values = _parse_argv(list(argv))

    for name, message in REMOVED.items():
        if flag_values.get(f"removed_{name}") is not None or env.get(ENV_PREFIX + name.upper()):
            raise ConfigError(message)

    # Typo protection: every OLU_* variable must be a setting, a pass-through key or a known extra.
    for name in sorted(env):
        if not name.startswith(ENV_PREFIX) or name in OPTION_BY_ENV or name in OTHER_ENV:
            continue
        if name.startswith(KAFKA_ENV_PREFIX) or name.startswith(OTHER_ENV_PREFIXES):
            continue
        raise ConfigError(f"unknown environment variable {name}{_suggest_env(name)}")

    values: dict[str, Any] = {}
    origins: dict[str, str] = {}
    for opt in OPTIONS:
        raw, origin, source = flag_values.get(opt.name), "flag", opt.flag
        if raw is None:
            raw, origin, source = env.get(opt.env) or None, "env", opt.env
        if raw is None and opt.name == "bootstrap_servers":
            raw, source = env.get(BOOTSTRAP_FALLBACK_ENV) or None, BOOTSTRAP_FALLBACK_ENV
        if raw is None:
            values[opt.name], origins[opt.name] = opt.default, "default"
            continue
        if isinstance(raw, bool):
            raw = "true" if raw else "false"
        elif isinstance(raw, (list, tuple)):
            raw = ",".join(map(str, raw))
        raw = str(raw)
        try:
            values[opt.name] = opt.parse(raw)
        except BadValue as bad:
            raise ConfigError(f"{opt.label} must be {bad}, got {raw!r}" +
                              (f" (from {source})" if source == BOOTSTRAP_FALLBACK_ENV
                               else "")) from None
        origins[opt.name] = origin

    for name, value in UNIT_DEFAULTS.get(values["privacy_unit"], {}).items():
        if origins[name] == "default" and _rotates(values["algorithm"]):
            values[name], origins[name] = value, "unit default"
    explicit = {name for name, origin in origins.items()
                if origin not in ("default", "unit default")}
    if {"rho", "target_epsilon"} <= explicit:
        raise ConfigError(
            f"{_label('rho')} and {_label('target_epsilon')} are mutually exclusive: give the "
            "Renyi slope or the (epsilon, delta) target, not both")
    if "rho" in explicit:
        values["target_epsilon"] = None  # the default target gives way to an explicit slope

    _apply_feature_spec(values, explicit)
    required_by_command = {"run": ("bootstrap_servers", "dim"), "produce": ("bootstrap_servers",)}
    required = required_by_command.get(command, ())
    for name in required:
        if values[name] is None:
            extra = f" (or {BOOTSTRAP_FALLBACK_ENV})" if name == "bootstrap_servers" else ""
            raise ConfigError(f"{_label(name)}{extra} is required")
    if values["dim"] is None:
        values["dim"] = DEMO_DIM

    # Cross-checks (the engine would reject these later with less context).
    topics = values["input_topics"]
    for name in ("params_topic", "dlq_topic"):
        if values[name] in topics:
            raise ConfigError(f"{_label(name)} must not be one of the input topics "
                              f"({_label('input_topics')}), got {values[name]!r}")
    if values["params_topic"] == values["dlq_topic"]:
        raise ConfigError(f"{_label('params_topic')} and {_label('dlq_topic')} must differ, both "
                          f"are {values['params_topic']!r}")
    if values["schedule"] == "constant" and values["step"] is None:
        raise ConfigError(f"{_label('step')} is required with {_label('schedule')} = constant")
    if values["schedule"] == "strongly-convex" and values["l2"] == 0:
        raise ConfigError(
            f"{_label('l2')} must be > 0 with {_label('schedule')} = strongly-convex, got 0")
    if not values["snapshot_every_events"] and not values["snapshot_every_seconds"]:
        raise ConfigError(
            f"{_label('snapshot_every_events')} and {_label('snapshot_every_seconds')} cannot both "
            "be 0: offsets are committed only with snapshots")

    _check_registry(values)
    _check_sparse(values)
    values["kafka_overrides"] = tuple(sorted(
        _kafka_overrides(env, flag_values.get("kafka"), values["group_protocol"]).items()))
    if not values["transactional"]:
        check_release_timeout(values["group_protocol"], dict(values["kafka_overrides"]), _label)
    if values["transactional_id"] is None:
        values["transactional_id"] = f"{values['group_id']}-{hostname(env)}"
    values["storage_credentials_present"] = any(env.get(name) for name in AWS_CREDENTIAL_ENV)
    values["origins"] = tuple(sorted(origins.items()))
    _check_loss(values)
    settings = Settings(**values)
    _check_model(settings)
    return settings


#: The feature bound is the spec's own norm bound with this much room, so that rounding in the
#: engine's norm (summed in another order than the spec's) never refuses a vector of the spec.
FEATURE_BOUND_ROOM = 1 + 1e-9


def _apply_feature_spec(values: dict[str, Any], explicit: set[str]) -> None:
    """Load ``features_file``: it sets ``dim`` and ``feature_bound`` (worker/features)."""
    if values["features_file"] is None:
        if values["features_reset"]:
            raise ConfigError(
                f"{_label('features_reset')} applies only with {_label('features_file')}")
        return
    from ..features.exceptions import FeatureSpecError
    from ..features.spec import load_spec

    try:
        spec = load_spec(values["features_file"])
    except FeatureSpecError as bad:
        raise ConfigError(
            f"{_label('features_file')} ({values['features_file']}): the feature spec has "
            "mistakes:\n"
            + "\n".join(f"  - {p}" for p in bad.problems)) from None
    if values["dim"] is not None and values["dim"] != spec.dim:
        raise ConfigError(
            f"{_label('dim')} is {values['dim']}, but the feature spec makes {spec.dim} "
            f"coordinates: leave {_label('dim')} unset with {_label('features_file')}")
    if "feature_bound" in explicit:
        raise ConfigError(
            f"{_label('feature_bound')} is set, but the feature spec bounds the vector: declare "
            f"'bound:' in the spec instead (docs/calibration.md 2.4)")
    if values["input_feature_fields"]:
        raise ConfigError(
            f"{_label('input_feature_fields')} and {_label('features_file')} exclude each other: "
            "the spec names the feature fields")
    values["dim"], values["feature_bound"] = spec.dim, spec.norm_bound * FEATURE_BOUND_ROOM
    values["feature_spec"] = spec


def _check_loss(values: dict[str, Any]) -> None:
    """The algorithm takes the loss (the engine class declares which), and softmax has its classes:
    required with it, refused without it; string classes only where inserts are read as JSON."""
    algorithm, loss, classes = values["algorithm"], values["loss"], values["classes"]
    cls = engine_class(algorithm)
    if cls is not None and loss not in cls.losses:
        # the engine's refusal (OnlineUnlearner.__init__), named by the settings: its reason may use
        # words that are other settings' names, which _check_model would name too
        raise ConfigError(
            f"{_label('algorithm')}, {_label('loss')}: algorithm {algorithm!r} does not support "
            f"loss {loss!r}: {cls.loss_refusal}")
    if loss == "softmax" and classes is None:
        raise ConfigError(
            f"{_label('classes')} is required with {_label('loss')} = softmax: the class labels, "
            "e.g. fraud,ok,review or 0,1,2 (at least 2)")
    if loss != "softmax" and classes is not None:
        raise ConfigError(
            f"{_label('classes')} applies only with {_label('loss')} = softmax, got loss {loss}")
    if classes is not None and isinstance(classes[0], str) and values["input_format"] != "json":
        raise ConfigError(f"{_label('classes')} are strings, but {_label('input_format')} = "
                          f"{values['input_format']} reads numeric labels: use integer classes "
                          "(e.g. 0,1,2) with a registry format, or input_format json")


def _check_sparse(values: dict[str, Any]) -> None:
    """Sparse rows come from the JSON reader alone (the
    registry formats' readers write dense rows)."""
    if values["sparse_input"] and values["input_format"] != "json":
        raise ConfigError(
            f"{_label('sparse_input')} needs {_label('input_format')} = json (the registry "
            f"formats' readers write dense rows), got {values['input_format']}")


def _check_registry(values: dict[str, Any]) -> None:
    """The Schema Registry settings fit together (worker/formats)."""
    framed = [name for name in ("input_format", "release_format") if values[name] != "json"]
    if framed and values["schema_registry_url"] is None:
        raise ConfigError(f"{_label('schema_registry_url')} is required with {_label(framed[0])} = "
                          f"{values[framed[0]]}")
    for name in ("input_fields", "input_feature_fields"):
        if values[name] and values["input_format"] == "json":
            raise ConfigError(f"{_label(name)} applies to the registry formats only, not to "
                              f"{_label('input_format')} = json (its field names are fixed: "
                              "schemas/)")
    features = values["input_feature_fields"]
    if features:
        if "x" in dict(values["input_fields"] or ()):
            raise ConfigError(
                f"{_label('input_feature_fields')} and x= in {_label('input_fields')} exclude each "
                "other: features are one array field or named fields")
        if values["dim"] is not None and len(features) != values["dim"]:
            raise ConfigError(f"{_label('input_feature_fields')} names {len(features)} fields, "
                              f"{_label('dim')} is {values['dim']}")
    if (values["schema_registry_cert_location"] is None) != (
            values["schema_registry_key_location"] is None):
        raise ConfigError(
            f"{_label('schema_registry_cert_location')} and "
            f"{_label('schema_registry_key_location')} go together (mTLS)")


def _check_model(settings: Settings) -> None:
    """Build the model once, so a combination the engine refuses fails now, naming the settings."""
    try:
        build_model(settings)
    except ValueError as exc:
        message = str(exc)
        named = [_label(n) for n in OPTION_BY_NAME if re.search(rf"\b{re.escape(n)}\b", message)]
        raise ConfigError(f"{', '.join(named) or _label('algorithm')}: {message}") from None
