"""The Helm chart (infra/helm/aside), checked statically: there is no cluster
here. It is rendered with the real helm (infra/install.sh helm) for its
defaults, the production-like file and the lab with every part on, and each
rendering is held against the code it deploys: every variable a service reads
is set (and read by the gateway's own config loader), every probe path is a
route, Prometheus and Grafana are the native stack's, the load Job carries the
variables the bench gives the load driver and splits the step among its
shards, every image is pinned. Strict decoding of each document is
infra/helm/validate's (Go)."""

from __future__ import annotations

import base64
import importlib.util
import json
import math
import os
import re
import subprocess
import time
from collections.abc import Iterator, Mapping
from functools import cache
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import yaml
from aside_bench.load.run import LoadShape, step_run
from aside_bench.plan.arms import CACHE_PARAMS
from aside_bench.plan.steps import Step, pool_for
from aside_gateway.config.settings import load_settings
from aside_seed.config import load_config
from stack_helpers import ROOT

CHART = ROOT / "infra/helm/aside"
RELEASE = "aside"
NAMESPACE = "aside-lab"
LAB_ALL = (
    "--set", "profile=lab", "--set", "load.enabled=true", "--set", "load.runId=check-1",
    "--set", "nodeExporter.enabled=true", "--set", "grafana.enabled=true",
)  # fmt: skip
RENDERS = {
    "default": (),
    "production": ("-f", str(CHART / "values-production.yaml")),
    "lab-all": LAB_ALL,
}
# Switches of the test suites, refused or meaningless in a deployment: the
# chart must not set them (and the services' defaults are the safe values).
TEST_SWITCHES = {
    "ASIDE_TEST_HOOKS", "ASIDE_CACHE_COHERENCE", "CACHE_L1_INVALIDATION", "CACHE_L1_TRACKING",
    "ASIDE_SEED_FAIL_AFTER_ROWS", "ASIDE_SEED_EXIT_AFTER_SWAP",
}  # fmt: skip
# The chart's links to files outside it (a chart reads only its own folder):
# helm reads the file linked to (and `helm package` packs its contents), so
# there is one schema, one rules file and one dashboard, not two of each.
LINKS = {
    "files/grafana/aside.json": "infra/grafana/dashboards/aside.json",
    "files/schema.sql": "contracts/schema.sql",
    "files/rules.yml": "prometheus/rules.yml",
}
# The former load generator's name, spelled so that a grep of infra/ finds none.
RETIRED = "k" + "6"
# Token-shaped stand-ins for the values of a Secret the chart does not render.
EXTERNAL_SECRET = {
    "database-url": "postgresql://aside:pw@db.example:5432/aside",
    "redis-url": "redis://:pw@cache.example:6379/0",
    "write-token": "w" * 32,
    "core-token": "c" * 32,
}


def helm_bin() -> Path:
    bin_dir = Path(os.environ.get("ASIDE_BIN_DIR") or ROOT / "bin")
    helm = bin_dir / "helm"
    assert helm.is_file(), f"{helm} is missing: run infra/install.sh helm"
    return helm


def helm_template(*args: str) -> subprocess.CompletedProcess[str]:
    command = [str(helm_bin()), "template", RELEASE, str(CHART), "--namespace", NAMESPACE, *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=60, check=False)


@cache
def rendered(name: str) -> tuple[dict[str, Any], ...]:
    result = helm_template(*RENDERS[name])
    assert result.returncode == 0, result.stderr
    return tuple(doc for doc in yaml.safe_load_all(result.stdout) if doc)


def find(docs: tuple[dict[str, Any], ...], kind: str, name: str) -> dict[str, Any]:
    for doc in docs:
        if doc["kind"] == kind and doc["metadata"]["name"] == name:
            return doc
    raise AssertionError(f"no {kind} {name} rendered")


def of_kind(docs: tuple[dict[str, Any], ...], kind: str) -> list[dict[str, Any]]:
    return [doc for doc in docs if doc["kind"] == kind]


def pod_spec(doc: dict[str, Any]) -> dict[str, Any]:
    return doc["spec"]["template"]["spec"]


def container(doc: dict[str, Any], name: str, init: bool = False) -> dict[str, Any]:
    key = "initContainers" if init else "containers"
    return next(c for c in pod_spec(doc)[key] if c["name"] == name)


def environment(
    docs: tuple[dict[str, Any], ...], spec: dict[str, Any], secret: Mapping[str, str] | None
) -> dict[str, str]:
    """The variables a container gets: its ConfigMaps, then its env, secret
    references resolved from the rendered Secret (or `secret`)."""
    env: dict[str, str] = {}
    for source in spec.get("envFrom", []):
        env.update(find(docs, "ConfigMap", source["configMapRef"]["name"])["data"])
    for item in spec.get("env", []):
        if "value" in item:
            env[item["name"]] = str(item["value"])
            continue
        ref = item["valueFrom"]["secretKeyRef"]
        if secret is None:
            data = find(docs, "Secret", ref["name"])["data"]
            env[item["name"]] = base64.b64decode(data[ref["key"]]).decode()
        else:
            env[item["name"]] = secret[ref["key"]]
    return env


def secret_for(name: str) -> Mapping[str, str] | None:
    return EXTERNAL_SECRET if name == "production" else None


class Recording(dict[str, str]):
    """An environment that remembers every name a loader asks for."""

    def __init__(self, values: Mapping[str, str]):
        super().__init__(values)
        self.asked: set[str] = set()

    def get(self, key: str, default: Any = None) -> Any:  # type: ignore[override]
        self.asked.add(key)
        return super().get(key, default)

    def __getitem__(self, key: str) -> str:
        self.asked.add(key)
        return super().__getitem__(key)

    def __contains__(self, key: object) -> bool:
        if isinstance(key, str):
            self.asked.add(key)
        return super().__contains__(key)


def core_env_names() -> set[str]:
    """Every variable core-go/internal/config reads: the names its reader is asked for."""
    text = (ROOT / "core-go/internal/config/config.go").read_text()
    return set(re.findall(r'\br\.\w+\("([A-Z][A-Z0-9_]+)"', text))


# ---- environments --------------------------------------------------------------------
@pytest.mark.parametrize("name", sorted(RENDERS))
def test_gateway_gets_every_variable_it_reads_and_accepts_them(name: str) -> None:
    docs = rendered(name)
    spec = container(find(docs, "Deployment", f"{RELEASE}-gateway"), "gateway")
    recording = Recording(environment(docs, spec, secret_for(name)))
    settings = load_settings(recording)  # the gateway's own checks, on the chart's values
    assert len(recording.asked) > 40, recording.asked
    missing = recording.asked - set(recording) - TEST_SWITCHES
    assert not missing, f"{name}: the gateway reads {sorted(missing)}, which the chart does not set"
    unread = set(recording) - recording.asked - {"PROMETHEUS_MULTIPROC_DIR"}
    assert not unread, f"{name}: the chart sets {sorted(unread)}, which the gateway never reads"
    assert not TEST_SWITCHES & set(recording)
    assert settings.bind == "0.0.0.0:8000" and settings.metrics_bind == "0.0.0.0:28009"
    assert settings.profile == ("lab" if name == "lab-all" else "production")
    assert settings.write_token and settings.core_token


@pytest.mark.parametrize("name", sorted(RENDERS))
def test_core_gets_every_variable_it_reads(name: str) -> None:
    docs = rendered(name)
    spec = container(find(docs, "Deployment", f"{RELEASE}-core"), "core")
    given = environment(docs, spec, secret_for(name))
    read = core_env_names() - TEST_SWITCHES
    assert {"DATABASE_URL", "REDIS_URL", "CORE_TOKEN", "CORE_SHUTDOWN_TIMEOUT"} <= read
    assert set(given) == read, (
        f"{name}: not set {sorted(read - set(given))}, never read {sorted(set(given) - read)}"
    )
    assert given["CORE_LISTEN_ADDR"] == "0.0.0.0:8080"
    # The gateway and the core share one token, from one Secret key.
    gateway = container(find(docs, "Deployment", f"{RELEASE}-gateway"), "gateway")
    assert environment(docs, gateway, secret_for(name))["CORE_TOKEN"] == given["CORE_TOKEN"]


def test_seed_job_gets_every_variable_the_seeder_reads() -> None:
    docs = rendered("default")
    spec = container(find(docs, "Job", f"{RELEASE}-seed"), "seed", init=True)
    recording = Recording(environment(docs, spec, None))
    config = load_config(recording)
    assert recording.asked - TEST_SWITCHES <= set(recording), recording.asked - set(recording)
    assert config.data_dir == Path("/data") and str(config.schema_path) == (
        "/app/contracts/schema.sql"
    )
    assert spec["args"][0] == "aside-seed" and "--reset" in spec["args"]


def test_every_secret_reference_resolves() -> None:
    docs = rendered("lab-all")
    secrets = {d["metadata"]["name"]: d["data"] for d in of_kind(docs, "Secret")}
    for ref in _walk(docs, "secretKeyRef"):
        assert ref["key"] in secrets.get(ref["name"], {}), ref
    production = rendered("production")
    assert not of_kind(production, "Secret"), "the production file's Secret is made outside"
    keys = {ref["key"] for ref in _walk(production, "secretKeyRef")}
    assert keys <= set(EXTERNAL_SECRET), keys


def _walk(node: Any, key: str) -> Iterator[Any]:
    """Every value under `key`, anywhere in `node`."""
    if isinstance(node, dict):
        for k, v in node.items():
            if k == key:
                yield v
            yield from _walk(v, key)
    elif isinstance(node, list | tuple):
        for item in node:
            yield from _walk(item, key)


# ---- probes --------------------------------------------------------------------------
def gateway_routes() -> set[str]:
    source = ROOT / "gateway/src/aside_gateway"
    routes = set(re.findall(r'@app\.get\("([^"]+)"\)', (source / "web/app.py").read_text()))
    routes |= set(
        re.findall(r'^HEALTHZ_PATH = "([^"]+)"', (source / "contracts/routes.py").read_text(), re.M)
    )
    assert "/healthz" in routes and "/readyz" in routes, routes
    return routes


def core_routes() -> set[str]:
    text = (ROOT / "core-go/internal/httpapi/router.go").read_text()
    routes = set(re.findall(r'\br\.GET\("([^"]+)"', text))
    assert "/healthz" in routes and "/readyz" in routes, routes
    return routes


@pytest.mark.parametrize("name", sorted(RENDERS))
@pytest.mark.parametrize("service", ["gateway", "core"])
def test_probes_ask_routes_the_service_has(name: str, service: str) -> None:
    routes = gateway_routes() if service == "gateway" else core_routes()
    spec = container(find(rendered(name), "Deployment", f"{RELEASE}-{service}"), service)
    probes = [spec[p] for p in ("startupProbe", "livenessProbe", "readinessProbe") if p in spec]
    assert len(probes) >= 2
    for probe in probes:
        assert probe["httpGet"]["path"] in routes, probe
        assert probe["httpGet"]["port"] == "http"
    http = next(p for p in spec["ports"] if p["name"] == "http")
    assert http["containerPort"] == {"gateway": 8000, "core": 8080}[service]


def test_probe_check_catches_a_path_the_service_lacks() -> None:
    result = helm_template("--set", "gateway.probes.readiness=/ready")
    spec = container(
        find(
            tuple(d for d in yaml.safe_load_all(result.stdout) if d), "Deployment", "aside-gateway"
        ),
        "gateway",
    )
    assert spec["readinessProbe"]["httpGet"]["path"] not in gateway_routes()


# ---- Prometheus and Grafana ----------------------------------------------------------
TARGET_KEYS = {"file_sd_configs", "dns_sd_configs", "static_configs", "kubernetes_sd_configs"}


def without_targets(config: dict[str, Any]) -> dict[str, Any]:
    jobs = [
        {k: v for k, v in job.items() if k not in TARGET_KEYS} for job in config["scrape_configs"]
    ]
    return {**config, "scrape_configs": jobs}


@pytest.mark.parametrize("name", sorted(RENDERS))
def test_prometheus_is_the_native_one_but_for_targets(name: str) -> None:
    docs = rendered(name)
    data = find(docs, "ConfigMap", f"{RELEASE}-prometheus")["data"]
    native = yaml.safe_load((ROOT / "prometheus/prometheus.yml").read_text())
    chart = yaml.safe_load(data["prometheus.yml"])
    assert without_targets(chart) == without_targets(native)
    assert data["rules.yml"] == (ROOT / "prometheus/rules.yml").read_text()
    # Every target is a headless Service of the chart on a port it serves,
    # when the part runs (production has no in-cluster PostgreSQL or Redis).
    services = {d["metadata"]["name"]: d["spec"] for d in of_kind(docs, "Service")}
    suffix = f".{NAMESPACE}.svc.cluster.local"
    for job in chart["scrape_configs"]:
        (sd,) = job["dns_sd_configs"]
        (fqdn,) = sd["names"]
        assert fqdn.endswith(suffix), fqdn
        service = services.get(fqdn.removesuffix(suffix))
        if service is None:
            assert job["job_name"] in {"node", "redis", "postgres"}, f"{job['job_name']}: {fqdn}"
            continue
        assert service["clusterIP"] == "None", f"{fqdn} is not headless"
        assert sd["port"] in {p["port"] for p in service["ports"]}, (fqdn, sd["port"])


def test_gateway_metrics_target_follows_the_profile() -> None:
    def gateway_port(name: str) -> int:
        data = find(rendered(name), "ConfigMap", f"{RELEASE}-prometheus")["data"]
        job = next(
            j for j in yaml.safe_load(data["prometheus.yml"])["scrape_configs"]
            if j["job_name"] == "gateway"
        )  # fmt: skip
        return job["dns_sd_configs"][0]["port"]

    assert gateway_port("default") == 28009  # production: METRICS_BIND only
    assert gateway_port("lab-all") == 8000  # lab: /metrics on the public listener


def grafana_traces(docs: tuple[dict[str, Any], ...]) -> list[str]:
    """Every trace of Grafana in a rendering: an object, an image, a Secret
    key, a NetworkPolicy peer (any mention of it in a document)."""
    return [
        f"{doc['kind']}/{doc['metadata']['name']}"
        for doc in docs
        if "grafana" in json.dumps(doc).lower()
    ]


@pytest.mark.parametrize("name", ["default", "production"])
def test_default_values_render_no_grafana(name: str) -> None:
    # Grafana is AGPL-3.0: the chart runs it only when asked (grafana.enabled).
    assert grafana_traces(rendered(name)) == []
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    assert values["grafana"]["enabled"] is False
    assert "AGPL-3.0" in (CHART / "values.yaml").read_text().split("\ngrafana:", 1)[1]
    assert "AGPL-3.0" in (CHART / "README.md").read_text()


def test_grafana_renders_when_asked() -> None:
    # The check above can fail: the same search finds Grafana once it is on.
    traces = grafana_traces(rendered("lab-all"))
    assert {"Deployment/aside-grafana", "Service/aside-grafana", "Secret/aside-secrets"} <= set(
        traces
    ), traces


def test_grafana_is_the_native_provisioning_but_for_addresses() -> None:
    docs = rendered("lab-all")
    data = find(docs, "ConfigMap", f"{RELEASE}-grafana")["data"]
    provisioning = ROOT / "infra/grafana/provisioning"
    native = yaml.safe_load((provisioning / "datasources/datasources.yml").read_text())
    chart = yaml.safe_load(data["datasources.yml"])

    def without_url(config: dict[str, Any]) -> list[dict[str, Any]]:
        return [{k: v for k, v in s.items() if k != "url"} for s in config["datasources"]]

    assert without_url(chart) == without_url(native)
    urls = {s["uid"]: s["url"] for s in chart["datasources"]}
    assert urls == {
        "influxdb": "http://aside-influxdb:8086",
        "prometheus": "http://aside-prometheus:9090",
    }
    assert yaml.safe_load(data["dashboards.yml"]) == yaml.safe_load(
        (provisioning / "dashboards/dashboards.yml").read_text()
    )
    dashboard = find(docs, "ConfigMap", f"{RELEASE}-grafana-dashboard")["data"]["aside.json"]
    assert dashboard == (ROOT / "infra/grafana/dashboards/aside.json").read_text()


@pytest.mark.parametrize(("link", "source"), sorted(LINKS.items()))
def test_chart_links_resolve_to_their_sources(link: str, source: str) -> None:
    path = CHART / link
    assert path.is_symlink(), (
        f"{link} is not a link: ln -sf {os.path.relpath(ROOT / source, path.parent)} {path}"
    )
    assert path.resolve() == (ROOT / source).resolve()


# ---- the load Job --------------------------------------------------------------------
def driver_env_names() -> set[str]:
    """Every variable the load driver reads: the names its config reader is asked for."""
    text = (ROOT / "bench/driver/internal/config/config.go").read_text()
    names = set(re.findall(r'\b(?:r\.\w+|getenv)\("([A-Z][A-Z0-9_]+)"', text))
    assert {"BASE_URL", "RATE", "SHARDS", "JOB_COMPLETION_INDEX"} <= names, names
    return names


def load_job(*args: str) -> dict[str, Any]:
    result = helm_template(*LAB_ALL, *args, "--show-only", "templates/load.yaml")
    assert result.returncode == 0, result.stderr
    (job,) = [d for d in yaml.safe_load_all(result.stdout) if d]
    assert job["kind"] == "Job"
    return job


def job_env(job: dict[str, Any]) -> dict[str, str]:
    (load,) = pod_spec(job)["containers"]
    return {item["name"]: item["value"] for item in load["env"]}


def test_load_job_carries_the_bench_variables_and_tags() -> None:
    docs = rendered("lab-all")
    (job,) = [
        d
        for d in of_kind(docs, "Job")
        if d["metadata"]["labels"]["app.kubernetes.io/component"] == "load"
    ]
    env = job_env(job)
    assert set(env) <= driver_env_names(), set(env) - driver_env_names()
    # What aside-bench gives the driver for a step of the read sweep, with the
    # chart's addresses; LIVE is the terminal's, SHARDS the Job's own.
    settings = SimpleNamespace(
        gateway_url="http://aside-gateway:8000", influx_url="http://aside-influxdb:8086/aside"
    )
    step = Step("read", "cache", "warm", 100, 30)
    bench = step_run(step, "check-1", LoadShape(), pool_for(100, 1000), Path("/data"))
    given = bench.variables(settings)  # type: ignore[arg-type]
    own = {"SHARDS", "START_AT"}
    assert set(env) == set(given) - {"LIVE"} | own, (set(given) - {"LIVE"}) ^ set(env)
    assert {k: env[k] for k in set(env) - own} == {k: given[k] for k in set(env) - own}
    # The tags of every point.
    assert (env["RUN_ID"], env["ARM"], env["PHASE"], env["RATE"], env["REPEAT"]) == (
        "check-1", "cache", "warm", "100", "1",
    )  # fmt: skip
    # Its points go to the chart's InfluxDB, database aside.
    assert env["INFLUX_URL"] == "http://aside-influxdb:8086/aside"
    influx = find(docs, "StatefulSet", "aside-influxdb")
    assert {"name": "INFLUXDB_DB", "value": "aside"} in container(influx, "influxdb")["env"]


def test_load_job_mounts_the_seeders_files() -> None:
    docs = rendered("lab-all")
    job = load_job()
    spec = pod_spec(job)
    volumes = {v["name"]: v for v in spec["volumes"]}
    (load,) = spec["containers"]
    mounts = {m["name"]: m for m in load["volumeMounts"]}
    assert mounts["data"]["mountPath"] == job_env(job)["DATA_DIR"] and mounts["data"]["readOnly"]
    # The data ConfigMap is the one the seed Job publishes to.
    data_name = volumes["data"]["configMap"]["name"]
    assert data_name == f"{RELEASE}-load-data"
    seed = find(docs, "Job", f"{RELEASE}-seed")
    assert container(seed, "manifest", init=True)["args"][3] == data_name
    role = find(docs, "Role", f"{RELEASE}-seed")
    assert role["rules"] == [
        {"apiGroups": [""], "resources": ["configmaps"], "resourceNames": [data_name],
         "verbs": ["get", "patch"]},
    ]  # fmt: skip
    # The files the driver reads are the ones the seeder writes.
    keys = (ROOT / "bench/driver/internal/scenario/keys.go").read_text()
    keyfiles = (ROOT / "seed/src/aside_seed/keyfiles.py").read_text()
    for file in ("hot_emails.json", "cold_emails.json"):
        assert f'"{file}"' in keys and keyfiles.count(f'"{file}"') == 1, file


@pytest.mark.parametrize("shards", [1, 3, 8])
def test_load_job_splits_the_step_among_its_shards(shards: int) -> None:
    job = load_job("--set", f"load.shards={shards}", "--set", "load.rate=1000")
    spec = job["spec"]
    assert spec["completionMode"] == "Indexed"
    assert spec["completions"] == spec["parallelism"] == shards
    env = job_env(job)
    # The whole step's rate and pool, and how many shards: each pod takes its
    # share, its shard being its completion index (JOB_COMPLETION_INDEX).
    assert (env["RATE"], env["POOL"], env["SHARDS"]) == (
        "1000",
        str(pool_for(1000, 1000)),
        str(shards),
    )
    assert "SHARD" not in env and "JOB_COMPLETION_INDEX" not in env
    # Its pods' host names, <job>-<index>, fit in 63 characters.
    assert len(job["metadata"]["name"]) <= 56


def test_load_job_gives_every_shard_one_start_ahead() -> None:
    # Every pod of the Job gets the same START_AT (one env of the pod
    # template), the rendering's instant plus load.startLeadS: each shard
    # waits for it, and the driver refuses one ready after it.
    values = yaml.safe_load((CHART / "values.yaml").read_text())["load"]
    before = math.floor(time.time())
    job = load_job("--set", "load.shards=4")
    after = math.ceil(time.time())
    start_ms = int(job_env(job)["START_AT"])
    lead = values["startLeadS"]
    assert (before + lead) * 1000 <= start_ms <= (after + lead) * 1000, (before, start_ms, after)
    assert job["metadata"]["annotations"]["aside.lab/start-at"] == str(start_ms)
    (load,) = pod_spec(job)["containers"]
    assert [e["name"] for e in load["env"]].count("START_AT") == 1
    assert "valueFrom" not in next(e for e in load["env"] if e["name"] == "START_AT")
    # The lead fits in the Job's bound, beside the pods' start.
    assert 0 < lead < values["startupAllowanceS"]
    # A start planned by whoever renders (a sweep's steps) wins.
    planned = load_job("--set", "load.startAt=1795000000123")
    assert job_env(planned)["START_AT"] == "1795000000123"
    # What the driver does with it: refuses a start already past.
    driver_tests = (ROOT / "bench/driver/cmd/aside-load/run_test.go").read_text()
    assert "func TestStartAtAlreadyPastIsRefused(" in driver_tests


def test_load_job_is_bounded_and_runs_once() -> None:
    job = load_job("--set", "load.duration=2m", "--set", "load.timeoutS=5")
    spec = job["spec"]
    assert spec["backoffLimit"] == 0 and pod_spec(job)["restartPolicy"] == "Never"
    values = yaml.safe_load((CHART / "values.yaml").read_text())["load"]
    assert spec["activeDeadlineSeconds"] == 120 + 5 + values["startupAllowanceS"]
    assert load_job("--set", "load.duration=1500ms")["spec"]["activeDeadlineSeconds"] == (
        2 + 10 + values["startupAllowanceS"]
    )
    (load,) = pod_spec(job)["containers"]
    assert load["resources"]["requests"]["cpu"] and load["resources"]["limits"]["memory"]
    # Like the other pods: not root, no token, a read-only root filesystem.
    assert pod_spec(job)["securityContext"]["runAsNonRoot"] is True
    assert pod_spec(job)["automountServiceAccountToken"] is False
    assert load["securityContext"]["readOnlyRootFilesystem"] is True
    assert load["securityContext"]["capabilities"]["drop"] == ["ALL"]


@pytest.mark.parametrize("rate", [5, 100, 1000, 3000])
def test_load_job_sizes_its_pool_as_the_bench_does(rate: int) -> None:
    env = job_env(load_job("--set", f"load.rate={rate}"))
    maximum = yaml.safe_load((CHART / "values.yaml").read_text())["load"]["maxPool"]
    assert int(env["POOL"]) == pool_for(rate, maximum)
    assert job_env(load_job("--set", f"load.rate={rate}", "--set", "load.pool=7"))["POOL"] == "7"


def test_chart_load_values_are_the_plans() -> None:
    values = yaml.safe_load((CHART / "values.yaml").read_text())["load"]
    # The read arms that need nothing but their ?cache= value, as the bench sends it.
    assert values["cacheParams"] == {arm: CACHE_PARAMS[arm] for arm in values["cacheParams"]}
    assert {"nocache", "cache", "l1", "hybrid", "tracking"} <= set(values["cacheParams"])
    config = (ROOT / "bench/driver/internal/config/config.go").read_text()
    (modes,) = re.findall(r"CacheModes = \[\]string\{([^}]*)\}", config)
    assert set(values["cacheParams"].values()) <= set(re.findall(r'"(\w+)"', modes))
    shape = LoadShape()
    assert math.isclose(values["hotShare"], shape.hot_share)
    assert (values["coldSample"], values["timeoutS"]) == (shape.cold_sample, shape.timeout_s)
    for arm in ("nocache", "l1"):
        assert job_env(load_job("--set", f"load.arm={arm}"))["CACHE"] == CACHE_PARAMS[arm]


def test_load_image_is_the_driver_make_images_builds() -> None:
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    assert values["images"]["load"] == {"repository": "aside-load", "tag": ""}
    (load,) = pod_spec(load_job())["containers"]
    assert (
        load["image"]
        == f"aside-load:{yaml.safe_load((CHART / 'Chart.yaml').read_text())['appVersion']}"
    )
    makefile = (ROOT / "Makefile").read_text()
    build = "build -f infra/go.Dockerfile --target load -t aside-load:$(IMAGE_TAG) bench/driver"
    assert build in makefile


def test_nothing_of_the_retired_load_generator_is_left_in_the_chart() -> None:
    for path in sorted(CHART.rglob("*")):
        assert RETIRED not in path.name.lower(), path
        if path.is_file():
            assert RETIRED not in path.read_text().lower(), path
    result = helm_template(*LAB_ALL)
    assert result.returncode == 0, result.stderr
    assert RETIRED not in result.stdout.lower()
    assert not (ROOT / "infra/helm/validate/testdata").exists()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--set", "load.enabled=true", "--set", "load.runId=r1"),
         "load.enabled needs profile=lab"),
        (("--set", "profile=lab", "--set", "load.enabled=true"), "load.runId is required"),
        (("--set", "profile=lab", "--set", "load.enabled=true", "--set", "load.runId=Run_1"),
         "load.runId must be lowercase"),
        ((*LAB_ALL, "--set", "load.arm=l2"),
         "load.arm must be one of cache hybrid index l1 nocache nopool tracking, got"),
        ((*LAB_ALL, "--set", "load.scenario=mixed"), "load.scenario must be read or bare"),
        ((*LAB_ALL, "--set", "load.phase=hot"), "load.phase must be cold, warm or none"),
        ((*LAB_ALL, "--set", "load.shards=0"), "load.shards must be 1 or more"),
        ((*LAB_ALL, "--set", "load.shards=4", "--set", "load.rate=3"),
         "load.rate 3 is below load.shards 4"),
        ((*LAB_ALL, "--set", "load.duration=30"), "load.duration must be a whole number"),
        ((*LAB_ALL, "--set", "influxdb.enabled=false"), "load.enabled needs influxdb.enabled"),
        ((*LAB_ALL, "--set", "seed.enabled=false"), "load.enabled needs seed.enabled"),
        ((*LAB_ALL, "--set", "load.startAt=17950"), "load.startAt must be a Unix time in whole"),
        ((*LAB_ALL, "--set", "load.startLeadS=300"), "load.startLeadS must be 1 or more and below"),
        (("--set", "profile=staging"), "profile must be lab or production"),
        (("--set", "postgres.enabled=false"), "needs secrets.existingSecret"),
    ],
)  # fmt: skip
def test_bad_values_fail_with_one_clear_line(args: tuple[str, ...], message: str) -> None:
    result = helm_template(*args)
    assert result.returncode != 0
    assert message in result.stderr, result.stderr


def test_pools_must_fit_postgres_connections() -> None:
    # 4 gateways x 2 workers x 16 + 1 core x 16 + 10 spare = 154 connections.
    assert helm_template("--set", "postgres.maxConnections=154").returncode == 0
    result = helm_template("--set", "postgres.maxConnections=153")
    assert result.returncode != 0
    assert "postgres.maxConnections 153 is below the pools' 154" in result.stderr


# ---- NetworkPolicy -------------------------------------------------------------------
def selects(selector: dict[str, Any], labels: dict[str, str]) -> bool:
    return all(labels.get(k) == v for k, v in selector["matchLabels"].items())


def pod_labels(docs: tuple[dict[str, Any], ...], kind: str, name: str) -> dict[str, str]:
    return find(docs, kind, name)["spec"]["template"]["metadata"]["labels"]


@pytest.mark.parametrize("name", ["default", "lab-all"])
def test_only_the_gateway_reaches_the_cores_api(name: str) -> None:
    docs = rendered(name)
    policy = find(docs, "NetworkPolicy", f"{RELEASE}-core")
    core = pod_labels(docs, "Deployment", f"{RELEASE}-core")
    assert selects(policy["spec"]["podSelector"], core)
    assert policy["spec"]["policyTypes"] == ["Ingress"]
    pods = {
        (d["kind"], d["metadata"]["name"]): d["spec"]["template"]["metadata"]["labels"]
        for d in docs if d["kind"] in {"Deployment", "StatefulSet", "DaemonSet", "Job"}
    }  # fmt: skip
    api_port = 8080
    allowed = set()
    for rule in policy["spec"]["ingress"]:
        if api_port not in {p["port"] for p in rule["ports"]}:
            continue
        assert rule.get("from"), "the core's port is open to every pod"
        for peer in rule["from"]:
            assert set(peer) == {"podSelector"}, peer
            allowed |= {pod for pod, labels in pods.items() if selects(peer["podSelector"], labels)}
    assert allowed == {("Deployment", f"{RELEASE}-gateway")}


def test_data_stores_admit_only_the_services() -> None:
    docs = rendered("default")
    for store, port in (("postgres", 5432), ("redis", 6379)):
        policy = find(docs, "NetworkPolicy", f"{RELEASE}-{store}")
        assert selects(
            policy["spec"]["podSelector"], pod_labels(docs, "StatefulSet", f"{RELEASE}-{store}")
        )
        (rule,) = [r for r in policy["spec"]["ingress"] if port in {p["port"] for p in r["ports"]}]
        peers = [p["podSelector"] for p in rule["from"]]
        admitted = {
            d["metadata"]["name"] for d in docs
            if d["kind"] in {"Deployment", "Job"}
            and any(selects(p, d["spec"]["template"]["metadata"]["labels"]) for p in peers)
        }  # fmt: skip
        expected = {"aside-gateway", "aside-core", "aside-seed"} | (
            {"aside-migrate"} if store == "postgres" else set()
        )
        assert admitted == expected, (store, admitted)


def test_influxdb_admits_the_load_pods_and_grafana() -> None:
    docs = rendered("lab-all")
    policy = find(docs, "NetworkPolicy", f"{RELEASE}-influxdb")
    assert selects(
        policy["spec"]["podSelector"], pod_labels(docs, "StatefulSet", f"{RELEASE}-influxdb")
    )
    (rule,) = policy["spec"]["ingress"]
    assert [p["port"] for p in rule["ports"]] == [8086]
    peers = [p["podSelector"] for p in rule["from"]]
    admitted = {
        (d["kind"], d["metadata"]["labels"]["app.kubernetes.io/component"]) for d in docs
        if d["kind"] in {"Deployment", "StatefulSet", "DaemonSet", "Job"}
        and any(selects(p, d["spec"]["template"]["metadata"]["labels"]) for p in peers)
    }  # fmt: skip
    assert admitted == {("Job", "load"), ("Deployment", "grafana")}, admitted


# ---- images --------------------------------------------------------------------------
# A release: major.minor.patch somewhere in the tag (v1.8.2, 7.4.2-bookworm,
# starter-v1.6.0); PostgreSQL numbers its releases major.minor (16.10).
RELEASE_TAG = re.compile(r"(?<![\d.])\d+\.\d+\.\d+(?![\d.])")
TWO_PART_RELEASES = {"postgres": re.compile(r"^\d+\.\d+(-\w+)?$")}
DIGEST = re.compile(r"@sha256:[0-9a-f]{64}$")


def assert_pinned(image: str, where: str) -> None:
    if DIGEST.search(image):
        return
    name, _, tag = image.rpartition(":")
    if not name or "/" in tag:
        raise AssertionError(f"{where}: {image} has no tag")
    two_part = TWO_PART_RELEASES.get(name.rsplit("/", 1)[-1])
    pinned = RELEASE_TAG.search(tag) or (two_part is not None and two_part.match(tag))
    assert pinned, f"{where}: {image} is not pinned to a release (or a digest)"


@pytest.mark.parametrize("name", sorted(RENDERS))
def test_rendered_images_are_pinned(name: str) -> None:
    images = list(_walk(rendered(name), "image"))
    assert len(images) >= 4
    for image in images:
        assert_pinned(image, name)


def test_compose_and_dockerfiles_pin_their_images() -> None:
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    for service, spec in compose["services"].items():
        if "image" in spec:
            assert_pinned(spec["image"], f"docker-compose.yml {service}")
    dockerfiles = ("gateway/Dockerfile", "infra/go.Dockerfile")
    for dockerfile in (ROOT / path for path in dockerfiles):
        stages: set[str] = set()
        for line in dockerfile.read_text().splitlines():
            match = re.match(r"^FROM\s+(\S+)(?:\s+AS\s+(\S+))?", line, re.I)
            if match is None:
                continue
            if match.group(1) not in stages:
                assert_pinned(match.group(1), str(dockerfile))
            if match.group(2):
                stages.add(match.group(2))
        assert re.search(r"^USER \d+:\d+$", dockerfile.read_text(), re.M), (
            f"{dockerfile}: no numeric USER"
        )


def test_pin_check_refuses_floating_tags() -> None:
    floating = (
        "postgres:16",
        "redis",
        "grafana/grafana:latest",
        "x/y:main",
        "python:3.11-slim",
        "redis:7.4",
        "localhost:5000/x",
    )
    for image in floating:
        with pytest.raises(AssertionError):
            assert_pinned(image, "example")
    for image in (
        "postgres:16.10-bookworm",
        "prom/prometheus:v2.53.0",
        "a/b:nonroot@sha256:" + "0" * 64,
    ):
        assert_pinned(image, "example")


def test_make_images_without_docker_says_so_in_one_line() -> None:
    result = subprocess.run(
        ["make", "-s", "--no-print-directory", "images", "DOCKER=/nonexistent/docker"],
        cwd=ROOT, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert result.returncode != 0
    first = result.stderr.splitlines()[0]
    assert first.startswith("aside: make images needs docker"), result.stderr


# ---- the seed Job's publishing ----------------------------------------------------------
def _manifest_module() -> Any:
    spec = importlib.util.spec_from_file_location("data_manifest", CHART / "files/data-manifest.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_manifest_carries_every_key_file(tmp_path: Path) -> None:
    files = {
        "hot_emails.json": '["a@x"]\n',
        "cold_emails.json": '["b@x"]\n',
        "seed_meta.json": "{}\n",
    }
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    out = tmp_path / "out.json"
    _manifest_module().main([str(tmp_path), "aside-load-data", str(out)])
    manifest = json.loads(out.read_text())
    assert manifest["metadata"] == {"name": "aside-load-data"} and manifest["kind"] == "ConfigMap"
    assert manifest["data"] == files


def test_manifest_refuses_an_unfinished_seed(tmp_path: Path) -> None:
    (tmp_path / "hot_emails.json").write_text("[]")
    with pytest.raises(SystemExit, match=r"no seed_meta\.json"):
        _manifest_module().main([str(tmp_path), "x", str(tmp_path / "out.json")])
    assert not (tmp_path / "out.json").exists()
