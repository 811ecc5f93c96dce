"""The native stack's scripts: up, status, down, and refusing a taken port."""

from __future__ import annotations

import socket

from stack_helpers import MINI_SERVICES, MiniStack, listening


def test_up_status_down_up_again(mini_stack: MiniStack) -> None:
    up = mini_stack.run("up", *MINI_SERVICES)
    assert up.returncode == 0, up.stderr
    for name in MINI_SERVICES:
        assert name in up.stdout and "healthy" in up.stdout

    status = mini_stack.run("status", *MINI_SERVICES)
    assert status.returncode == 0, status.stdout + status.stderr
    first = mini_stack.live_pids()
    assert set(first) == set(MINI_SERVICES)

    # A second `up` finds everything running and starts nothing new.
    again = mini_stack.run("up", *MINI_SERVICES)
    assert again.returncode == 0, again.stderr
    assert mini_stack.live_pids() == first

    down = mini_stack.run("down")
    assert down.returncode == 0, down.stderr
    for pid in first.values():
        assert not _alive(pid), f"pid {pid} survived make down"
    for var in ("ASIDE_PG_PORT", "ASIDE_REDIS_PORT", "ASIDE_INFLUX_PORT"):
        assert not listening(mini_stack.port(var)), f"{var} still listening after down"
    assert mini_stack.run("status", *MINI_SERVICES).returncode == 1

    # State survives a restart: the same data directory comes back up.
    up2 = mini_stack.run("up", *MINI_SERVICES)
    assert up2.returncode == 0, up2.stderr
    assert set(mini_stack.live_pids()) == set(MINI_SERVICES)


def test_taken_port_fails_clearly_and_starts_nothing(mini_stack: MiniStack) -> None:
    port = mini_stack.port("ASIDE_REDIS_PORT")
    with socket.socket() as squatter:
        squatter.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        squatter.bind(("127.0.0.1", port))
        squatter.listen()
        result = mini_stack.run("up", *MINI_SERVICES)

    assert result.returncode != 0
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, result.stderr
    assert f"port {port} (redis) is already in use" in lines[0]
    assert "nothing was started" in lines[0]
    # Nothing half-way: no process, no listener, no database initialised.
    assert mini_stack.live_pids() == {}
    assert not listening(mini_stack.port("ASIDE_PG_PORT"))
    assert not (mini_stack.run_dir / "postgres" / "data").exists()


def test_unknown_service_is_one_clear_line(mini_stack: MiniStack) -> None:
    result = mini_stack.run("up", "mysql")
    assert result.returncode != 0
    assert result.stderr.strip().count("\n") == 0
    assert "unknown service 'mysql'" in result.stderr


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split()[2] != "Z"
    except FileNotFoundError:
        return False


def test_stop_stops_only_the_named_service(mini_stack: MiniStack) -> None:
    up = mini_stack.run("up", *MINI_SERVICES)
    assert up.returncode == 0, up.stderr
    before = mini_stack.live_pids()

    stop = mini_stack.run("stop", "redis")
    assert stop.returncode == 0, stop.stderr
    assert not _alive(before["redis"]), "redis survived stop"
    assert not listening(mini_stack.port("ASIDE_REDIS_PORT"))
    assert not (mini_stack.run_dir / "pids" / "redis.pid").exists()
    # The others keep running, untouched.
    assert mini_stack.live_pids() == {k: v for k, v in before.items() if k != "redis"}
    assert mini_stack.run("status", "redis").returncode == 1
    assert mini_stack.run("status", "postgres", "influxdb").returncode == 0

    # Stopping what is already down is a no-op; `up` brings it back alone.
    assert mini_stack.run("stop", "redis").returncode == 0
    again = mini_stack.run("up", "redis")
    assert again.returncode == 0, again.stderr
    assert listening(mini_stack.port("ASIDE_REDIS_PORT"))
    assert mini_stack.live_pids()["postgres"] == before["postgres"]


def test_stop_needs_a_known_service(mini_stack: MiniStack) -> None:
    for args in (("stop",), ("stop", "mysql")):
        result = mini_stack.run(*args)
        assert result.returncode != 0
        assert result.stderr.strip().count("\n") == 0, result.stderr
    assert "unknown service 'mysql'" in mini_stack.run("stop", "mysql").stderr
