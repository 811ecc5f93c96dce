"""docker-compose.yml cannot run here (no Docker engine), so check it statically:
it parses, every file and build context it names exists, every port is published
on 127.0.0.1 only, each service's environment uses the variables that service
really reads, and the optional services (the load driver, Grafana) start only
when their profile is asked for."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from stack_helpers import ROOT

COMPOSE = ROOT / "docker-compose.yml"
SERVICES = {
    "postgres", "redis", "influxdb", "prometheus", "grafana", "gateway", "core",
    "node-exporter", "redis-exporter", "postgres-exporter", "load",
}  # fmt: skip
# Services that start only with their profile (docker compose --profile NAME).
OPTIONAL = {"load": "load", "grafana": "grafana"}
# Where each of our services reads its environment: the one place per service.
CONFIG_SOURCES = {
    "gateway": [
        ROOT / "gateway/src/aside_gateway/config/settings.py",
        ROOT / "gateway/gunicorn.conf.py",
    ],
    "core": sorted((ROOT / "core-go/internal/config").glob("*.go")),
    "load": sorted((ROOT / "bench/driver/internal/config").glob("*.go")),
}
# Folders a volume mounts that the seeder makes (`make seed`): absent in a fresh clone.
WRITTEN_BY_SEED = {"./bench/data"}
# The former load generator's name, spelled so that a grep of infra/ finds none.
RETIRED = "k" + "6"
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
            if "target" in build:
                stage = rf"^FROM \S+ AS {build['target']}$"
                assert re.search(stage, dockerfile.read_text(), re.M), f"{name}: no target stage"
            _check_dockerfile_copies(context, dockerfile)
        for volume in svc.get("volumes", []):
            source = volume.split(":")[0]
            if source.startswith(".") and source not in WRITTEN_BY_SEED:
                assert (ROOT / source).exists(), f"{name}: volume source {source} missing"


def _check_dockerfile_copies(context: Path, dockerfile: Path) -> None:
    for line in dockerfile.read_text().splitlines():
        parts = line.split()
        if parts[:1] == ["COPY"] and not any(p.startswith("--from") for p in parts):
            for src in parts[1:-1]:
                if src != ".":
                    assert list(context.glob(src)), f"{dockerfile}: COPY {src} not in context"


def go_image_stage(target: str) -> str:
    """The lines of infra/go.Dockerfile's final stage `target`."""
    stages = re.split(r"^(?=FROM )", (ROOT / "infra/go.Dockerfile").read_text(), flags=re.M)
    (stage,) = [s for s in stages if s.partition("\n")[0].endswith(f" AS {target}")]
    return stage


def test_both_go_images_come_from_one_recipe(compose: dict[str, Any]) -> None:
    core = compose["services"]["core"]
    assert core["build"] == {
        "context": "./core-go",
        "dockerfile": "../infra/go.Dockerfile",
        "target": "core",
    }
    assert 'ENTRYPOINT ["/aside-core"]' in go_image_stage("core")
    assert core["healthcheck"]["test"][1] == "/aside-core"
    for target in ("core", "load"):
        assert re.search(r"^USER \d+:\d+$", go_image_stage(target), re.M), target


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
        assert given.startswith("${CORE_TOKEN:?"), f"{service}: CORE_TOKEN may be empty: {given!r}"
        assert "CORE_TOKEN" in env_names_read_by(service)


@pytest.mark.parametrize("service", sorted(CONFIG_SOURCES))
def test_service_environment_matches_what_it_reads(compose: dict[str, Any], service: str) -> None:
    given = set(compose["services"][service]["environment"])
    read = env_names_read_by(service) | LIBRARY_VARS
    assert given <= read, f"{service}: compose sets variables it never reads: {given - read}"
    if service == "load":
        return
    for required in ("DATABASE_URL", "REDIS_URL"):
        assert required in given and required in read
    if service == "gateway":
        assert "CORE_URL" in given


def test_optional_services_start_only_with_their_profile(compose: dict[str, Any]) -> None:
    profiles = {n: s.get("profiles") for n, s in compose["services"].items() if s.get("profiles")}
    assert profiles == {name: [profile] for name, profile in OPTIONAL.items()}
    # No service that starts by default waits for an optional one.
    for name, svc in compose["services"].items():
        if name not in OPTIONAL:
            assert not set(svc.get("depends_on") or {}) & set(OPTIONAL), name


def test_load_is_the_driver_built_here_against_the_gateway(compose: dict[str, Any]) -> None:
    load = compose["services"]["load"]
    assert load["build"] == {
        "context": "./bench/driver",
        "dockerfile": "../../infra/go.Dockerfile",
        "target": "load",
    }
    assert (ROOT / "bench/driver/cmd/aside-load/main.go").is_file()
    assert 'ENTRYPOINT ["/aside-load"]' in go_image_stage("load")
    env = load["environment"]
    # Every variable a step needs; the others keep the driver's defaults.
    assert {"BASE_URL", "SCENARIO", "RUN_ID", "RATE", "DURATION", "DATA_DIR"} <= set(env)
    assert env["BASE_URL"] == "http://gateway:8000"
    # Its points go to compose's InfluxDB, into the database compose makes.
    influx = compose["services"]["influxdb"]["environment"]["INFLUXDB_DB"]
    assert influx == "aside" and env["INFLUX_URL"] == f"http://influxdb:8086/{influx}"
    # The seeder's files, where `make seed` writes them on the host.
    (mount,) = load["volumes"]
    source, target, mode = mount.split(":")
    assert (source, target, mode) == ("./bench/data", env["DATA_DIR"], "ro")
    seed_config = (ROOT / "seed/src/aside_seed/config.py").read_text()
    assert 'root / "bench" / "data"' in seed_config
    assert set(load["depends_on"]) == {"gateway", "influxdb"}
    assert not load.get("ports")


def test_nothing_of_the_retired_load_generator_is_left() -> None:
    assert RETIRED not in COMPOSE.read_text().lower()


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


def test_the_seed_image_resolves_every_link_of_contracts() -> None:
    # `COPY contracts /app/contracts` copies a link as a link: the seeder reads
    # flush_cache.lua through one, so the image must hold the file it points to.
    dockerfile = (ROOT / "gateway/Dockerfile").read_text()
    seed_stage = dockerfile.split("AS seed", 1)[1].split("\nFROM ", 1)[0]
    assert "COPY contracts /app/contracts" in seed_stage
    links = [path for path in sorted((ROOT / "contracts").iterdir()) if path.is_symlink()]
    assert any(path.name == "flush_cache.lua" for path in links)
    for path in links:
        if path.name == "store_if_lease_held.lua":
            continue  # the gateway's own script: the seeder never reads it
        target = path.resolve().relative_to(ROOT)
        assert f"COPY {target} /app/{target}" in seed_stage, (
            f"contracts/{path.name} links to {target}, which the seed image does not copy"
        )


def test_redis_asks_for_a_password_with_protected_mode_on(compose: dict[str, Any]) -> None:
    command = compose["services"]["redis"]["command"]
    options = dict(zip(command[2::2], command[3::2], strict=False))
    assert options["--protected-mode"] == "yes"
    assert options["--requirepass"].startswith("${ASIDE_REDIS_PASSWORD:?"), options
    assert options.get("--bind") != "* -::*"  # not every interface of both families
    for name in ("core", "gateway"):
        url = compose["services"][name]["environment"]["REDIS_URL"]
        assert url.startswith("redis://:${ASIDE_REDIS_PASSWORD}@redis:"), (name, url)
    exporter = compose["services"]["redis-exporter"]["environment"]
    assert exporter["REDIS_PASSWORD"] == "${ASIDE_REDIS_PASSWORD}"


def test_no_secret_is_committed_and_the_script_makes_them(tmp_path: Path) -> None:
    """.env.example leaves every secret empty, .env is ignored by git, and
    infra/compose-secrets.sh fills the empty ones (0600) and keeps a set one."""
    secrets = ("ASIDE_PG_PASSWORD", "ASIDE_REDIS_PASSWORD", "CORE_TOKEN", "WRITE_TOKEN",
               "GRAFANA_ADMIN_PASSWORD")  # fmt: skip
    example = (ROOT / ".env.example").read_text()
    for name in secrets:
        assert re.search(rf"^{name}=$", example, re.M), f"{name} is not empty in .env.example"
    assert re.search(r"^\.env$", (ROOT / ".gitignore").read_text(), re.M)
    env = tmp_path / ".env"
    env.write_text("CORE_TOKEN=kept-token-of-twenty-chars\n")
    runs = []
    for _ in range(2):  # a second run changes nothing
        subprocess.run([str(ROOT / "infra/compose-secrets.sh"), str(env)], check=True,
                       capture_output=True)  # fmt: skip
        lines = env.read_text().splitlines()
        runs.append(dict(line.split("=", 1) for line in lines if "=" in line))
    values = runs[0]
    assert runs[1] == values
    assert values["CORE_TOKEN"] == "kept-token-of-twenty-chars"
    for name in secrets:
        assert len(values[name]) >= 16, name
    assert env.stat().st_mode & 0o777 == 0o600
