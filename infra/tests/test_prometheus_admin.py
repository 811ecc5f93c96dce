"""The running stack's Prometheus keeps its admin API off (infra/services.sh
starts it without --web.enable-admin-api): anyone who reaches its port could
otherwise delete series or fill the disk with TSDB snapshots."""

from __future__ import annotations

import os

import pytest
import requests

TIMEOUT_S = 5


@pytest.fixture(scope="module")
def prometheus() -> str:
    """PROMETHEUS_URL of the stack infra/env.sh describes, checked to answer."""
    url = os.environ.get("PROMETHEUS_URL", "http://127.0.0.1:29090").rstrip("/")
    ready = requests.get(f"{url}/-/ready", timeout=TIMEOUT_S)
    assert ready.status_code == 200, f"Prometheus at {url} is not ready: {ready.status_code}"
    return url


@pytest.mark.parametrize(
    "path",
    ["/api/v1/admin/tsdb/snapshot", "/api/v1/admin/tsdb/delete_series?match[]=up"],
)
def test_the_admin_api_is_off(prometheus: str, path: str) -> None:
    answer = requests.post(f"{prometheus}{path}", timeout=TIMEOUT_S)
    assert answer.status_code >= 400, f"POST {path} answered {answer.status_code}: {answer.text}"
    assert answer.json()["error"] == "admin APIs disabled"
