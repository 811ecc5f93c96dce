"""WSGI entry point: `gunicorn aside_gateway.wsgi:app`.

Imported by each gunicorn worker after the fork, so every worker builds its own
pools. A bad setting prints one line and exits with gunicorn's "app load
error" status (4), which makes the master stop instead of respawning workers.
"""

from __future__ import annotations

import os
import sys

from aside_gateway.config import ConfigError, load_settings

APP_LOAD_ERROR = 4

try:
    _settings = load_settings(os.environ)
except ConfigError as exc:
    print(f"aside-gateway: {exc}", file=sys.stderr)
    sys.exit(APP_LOAD_ERROR)

from aside_gateway.app import create_app  # noqa: E402 - after the settings check, on purpose

app = create_app(_settings)
