"""Aside's gateway: Flask read API with a Redis cache-aside in front of PostgreSQL.

`create_app(settings)` lives in `aside_gateway.web.app`; it is re-exported lazily so
that importing `aside_gateway.config.settings` (as gunicorn.conf.py does in the master)
does not import prometheus-client before PROMETHEUS_MULTIPROC_DIR is settled.
"""

from __future__ import annotations

from typing import Any

__all__ = ["create_app"]


def __getattr__(name: str) -> Any:
    if name == "create_app":
        from aside_gateway.web.app import create_app

        return create_app
    raise AttributeError(name)
