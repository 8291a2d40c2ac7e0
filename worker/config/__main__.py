"""``python -m worker.config``: print docs/configuration.md as the options registry defines it."""

from .reference import settings_markdown

print(settings_markdown(), end="")
