"""docker-compose.yml cannot run here (no Docker engine), so check it statically:
it parses, every file and build context it names exists, every port is published
on 127.0.0.1 only, and each service's environment uses the variables that
service really reads."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from stack_helpers import ROOT

COMPOSE = ROOT / "docker-compose.yml"
SERVICES = {
    "postgres", "redis", "influxdb", "prometheus", "grafana", "gateway", "core",
    "node-exporter", "redis-exporter", "postgres-exporter",
}  # fmt: skip
# Where each of our services reads its environment: the one place per service.
CONFIG_SOURCES = {
    "gateway": [ROOT / "gateway/src/aside_gateway/config.py", ROOT / "gateway/gunicorn.conf.py"],
    "core": sorted((ROOT / "core-go/internal/config").glob("*.go")),
}
# Read by a library rather than by our config module.
LIBRARY_VARS = {"PROMETHEUS_MULTIPROC_DIR"}


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    return yaml.safe_load(COMPOSE.read_text())


def env_names_read_by(service: str) -> set[str]:
    names: set[str] = set()
    for path in CONFIG_SOURCES[service]:
        names |= set(re.findall(r'"([A-Z][A-Z0-9_]{2,})"', path.read_text()))
    return names


def test_has_every_service_with_healthchecks(compose: dict[str, Any]) -> None:
    assert set(compose["services"]) == SERVICES
    for name in ("postgres", "redis", "influxdb", "prometheus", "grafana", "gateway", "core"):
        assert "healthcheck" in compose["services"][name], f"{name} has no healthcheck"
    for name, svc in compose["services"].items():
        for dep, cond in (svc.get("depends_on") or {}).items():
            assert dep in compose["services"], f"{name} depends on unknown {dep}"
            if cond.get("condition") == "service_healthy":
                assert "healthcheck" in compose["services"][dep], f"{dep} needs a healthcheck"


def test_versions_asked_for(compose: dict[str, Any]) -> None:
    """The majors asked for, each pinned to a patch release (the Helm chart
    uses the same tags; infra/tests/test_helm.py checks every image is pinned)."""
    images = {n: s.get("image", "") for n, s in compose["services"].items()}
    assert re.fullmatch(r"postgres:16\.\d+(-\w+)?", images["postgres"])
    assert re.fullmatch(r"redis:7\.\d+\.\d+(-\w+)?", images["redis"])
    assert re.fullmatch(r"influxdb:1\.8\.\d+", images["influxdb"])


def test_every_referenced_file_exists(compose: dict[str, Any]) -> None:
    for name, svc in compose["services"].items():
        build = svc.get("build")
        if build:
            context = ROOT / build["context"]
            assert context.is_dir(), f"{name}: build context {context} missing"
            dockerfile = context / build.get("dockerfile", "Dockerfile")
            assert dockerfile.is_file(), f"{name}: {dockerfile} missing"
            _check_dockerfile_copies(context, dockerfile)
        for volume in svc.get("volumes", []):
            source = volume.split(":")[0]
            if source.startswith("."):
                assert (ROOT / source).exists(), f"{name}: volume source {source} missing"


def _check_dockerfile_copies(context: Path, dockerfile: Path) -> None:
    for line in dockerfile.read_text().splitlines():
        parts = line.split()
        if parts[:1] == ["COPY"] and not any(p.startswith("--from") for p in parts):
            for src in parts[1:-1]:
                if src != ".":
                    assert list(context.glob(src)), f"{dockerfile}: COPY {src} not in context"


def test_ports_only_on_loopback(compose: dict[str, Any]) -> None:
    for name, svc in compose["services"].items():
        for port in svc.get("ports", []):
            assert str(port).startswith("127.0.0.1:"), f"{name} publishes {port} beyond loopback"


def test_the_core_is_reached_only_through_the_gateway(compose: dict[str, Any]) -> None:
    core = compose["services"]["core"]
    assert not core.get("ports"), f"the core publishes {core.get('ports')}: only the gateway may"
    assert "expose" not in core or not core["expose"]
    assert compose["services"]["gateway"]["environment"]["CORE_URL"] == "http://core:8080"


def test_core_token_reaches_both_sides(compose: dict[str, Any]) -> None:
    for service in ("core", "gateway"):
        environment = compose["services"][service]["environment"]
        given = environment.get("CORE_TOKEN")
        assert given == "${CORE_TOKEN:-}", f"{service}: CORE_TOKEN not from .env: {given!r}"
        assert "CORE_TOKEN" in env_names_read_by(service)


@pytest.mark.parametrize("service", sorted(CONFIG_SOURCES))
def test_service_environment_matches_what_it_reads(compose: dict[str, Any], service: str) -> None:
    given = set(compose["services"][service]["environment"])
    read = env_names_read_by(service) | LIBRARY_VARS
    assert given <= read, f"{service}: compose sets variables it never reads: {given - read}"
    for required in ("DATABASE_URL", "REDIS_URL"):
        assert required in given and required in read
    if service == "gateway":
        assert "CORE_URL" in given


def test_variables_are_documented_in_env_example(compose: dict[str, Any]) -> None:
    text = COMPOSE.read_text()
    used = set(re.findall(r"\$\{([A-Z_]+)", text))
    example = (ROOT / ".env.example").read_text()
    for var in used:
        assert re.search(rf"^{var}=", example, re.M), f"{var} missing from .env.example"


def test_prometheus_targets_cover_every_job() -> None:
    config = yaml.safe_load((ROOT / "prometheus/prometheus.yml").read_text())
    for job in config["scrape_configs"]:
        for sd in job["file_sd_configs"]:
            for pattern in sd["files"]:
                name = Path(pattern).name
                target = ROOT / "prometheus/compose-targets" / name
                assert target.is_file(), f"no compose target file for job {job['job_name']}"
                host = json.loads(target.read_text())[0]["targets"][0].split(":")[0]
                assert host in SERVICES, f"{name} points at unknown service {host}"
