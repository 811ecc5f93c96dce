"""infra/services.tsv is read by infra/services.sh and by the bench alike: both
must see the same services, in the same order, on the same ports."""

from __future__ import annotations

import os
import subprocess

import pytest
from aside_bench.stack import procs
from stack_helpers import ROOT

# Print, for each service of ALL_SERVICES: name, ports, URL and probe.
_DUMP = """
source infra/env.sh && source infra/lib.sh && source infra/services.sh
for s in "${ALL_SERVICES[@]}"; do
    printf '%s\\t%s\\t%s\\t%s\\n' "$s" "$(service_port "$s")" "$(service_url "$s")" \\
        "${SERVICE_PROBE[$s]}"
done
"""


def _bash(script: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", "-c", f"set -euo pipefail\n{script}"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )


def _defaults_env() -> dict[str, str]:
    """The environment with none of the stack's variables: infra/env.sh's defaults."""
    own = ("ASIDE_", "DATABASE_URL", "REDIS_URL", "CORE_", "GATEWAY_", "INFLUXDB_", "PROMETHEUS_")
    return {k: v for k, v in os.environ.items() if not k.startswith(own)}


def test_bash_and_python_read_the_same_services() -> None:
    env = {**_defaults_env(), "ASIDE_REDIS_PORT": "26999", "ASIDE_INFLUX_RPC_PORT": "28999"}
    done = _bash(_DUMP, env)
    assert done.returncode == 0, done.stderr
    rows = [line.split("\t") for line in done.stdout.splitlines()]
    table = procs.services_table()
    assert [row[0] for row in rows] == [s.name for s in table] == list(procs.SERVICES)

    values = _bash(
        "source infra/env.sh && "
        + " && ".join(f'echo "{s.name}\t${{{v}}}"' for s in table for v in s.port_vars),
        env,
    )
    assert values.returncode == 0, values.stderr
    expected_ports: dict[str, list[str]] = {}
    for line in values.stdout.splitlines():
        name, port = line.split("\t")
        expected_ports.setdefault(name, []).append(port)

    for (name, ports, url, probe), service in zip(rows, table, strict=True):
        assert ports.split() == expected_ports[name], name
        assert probe == service.probe
        # The status line shows the main port; "${" would be a placeholder left over.
        assert f":{ports.split()[0]}" in url and "${" not in url, (name, url)
    assert dict(zip([r[0] for r in rows], [r[1] for r in rows], strict=True))["redis"] == "26999"
    assert expected_ports["influxdb"][1] == "28999"


def test_a_table_with_a_missing_column_is_refused() -> None:
    text = "name\tports\turl\tprobe\tmatch\nredis\tASIDE_REDIS_PORT\tredis://x\tredis_ping\n"
    with pytest.raises(procs.TableError, match="line 2"):
        procs.parse_services(text)
