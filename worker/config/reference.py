"""docs/configuration.md, generated from the options registry (``python -m worker.config``)."""

from __future__ import annotations

from .options import settings_table

HEADER = """# Configuration

<!-- Generated from worker/config/options.py by `.venv/bin/python -m worker.config >
docs/configuration.md`; edit the options there, not this table. -->

Every setting of `olu-worker run` is an environment variable and a flag (the flag wins). A bad
value fails at start with a message naming the setting; an unknown `OLU_*` variable fails with the
closest known name. [running.md](running.md) says how the worker reads them, and
[deploy.md](deploy.md) how the Helm chart sets them (one `config` key per setting).

"""


def settings_markdown() -> str:
    """The whole page: the header, then one table row per setting, in the registry's order."""
    rows = ["| env | flag | default | meaning |", "|---|---|---|---|"]
    rows += [f"| `{r['env']}` | `{r['flag']}` | `{r['default'] or '—'}` | {r['meaning']} |"
             for r in settings_table()]
    return HEADER + "\n".join(rows) + "\n"
