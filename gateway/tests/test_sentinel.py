"""REDIS_MODE=sentinel against a real Sentinel: a throwaway redis-server with a
password and a Sentinel (redis-server --sentinel) watching it, both on free
ports and stopped afterwards. The gateway's clients, made by redis_clients,
find the master through the Sentinel and carry its password."""

from __future__ import annotations

import asyncio
import dataclasses
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
import redis.sentinel
from aside_gateway.backends import redis_clients
from aside_gateway.config.settings import load_settings
from gateway_helpers import free_port, wait_until

PASSWORD = "sentinel-test-password"
MASTER = "aside-test"


def _answers(port: int, password: str | None = None) -> bool:
    client = redis.Redis(
        port=port, password=password, socket_timeout=0.5, socket_connect_timeout=0.5
    )
    try:
        return bool(client.ping())
    except redis.RedisError:
        return False
    finally:
        client.close()


@pytest.fixture(scope="module")
def sentinel(tmp_path_factory) -> Iterator[tuple[str, int]]:
    """(REDIS_URL naming the Sentinel, the master's port)."""
    server = shutil.which("redis-server") or "redis-server"
    tmp: Path = tmp_path_factory.mktemp("sentinel")
    master_port, sentinel_port = free_port(), free_port()
    procs = [
        subprocess.Popen(
            [server, "--port", str(master_port), "--bind", "127.0.0.1", "--save", "",
             "--appendonly", "no", "--dir", str(tmp), "--requirepass", PASSWORD],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )
    ]  # fmt: skip
    conf = tmp / "sentinel.conf"  # Sentinel rewrites its own file
    conf.write_text(
        f"port {sentinel_port}\nbind 127.0.0.1\ndir {tmp}\n"
        f"sentinel monitor {MASTER} 127.0.0.1 {master_port} 1\n"
        f"sentinel auth-pass {MASTER} {PASSWORD}\n"
    )
    procs.append(
        subprocess.Popen(
            [server, str(conf), "--sentinel"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )
    )  # fmt: skip
    try:
        wait_until(lambda: _answers(master_port, PASSWORD), 10, "the master")
        wait_until(lambda: _answers(sentinel_port), 10, "the Sentinel")
        yield f"redis://:{PASSWORD}@127.0.0.1:{sentinel_port}/0", master_port
    finally:
        for proc in procs:
            proc.terminate()
            proc.wait(timeout=10)


def _settings(url: str):
    return load_settings(
        {
            "DATABASE_URL": "postgresql://a@h/d",
            "CORE_URL": "http://c",
            "ASIDE_PROFILE": "lab",
            "REDIS_URL": url,
            "REDIS_MODE": "sentinel",
            "REDIS_SENTINEL_MASTER": MASTER,
        }
    )


def test_the_clients_reach_the_master_through_the_sentinel(sentinel):
    url, master_port = sentinel
    settings = _settings(url)
    client = redis_clients.sync_client(
        settings, socket_timeout=1, connect_timeout=1, max_connections=4, pool_timeout=1
    )
    try:
        assert client.set("aside:test:sentinel", "1") and client.get("aside:test:sentinel") == b"1"
        assert client.connection_pool.get_master_address() == ("127.0.0.1", master_port)
    finally:
        redis_clients.close(client)

    async def read() -> bytes | None:
        asynchronous = redis_clients.async_client(settings, connect_timeout=1, max_connections=4)
        try:
            return await asynchronous.get("aside:test:sentinel")
        finally:
            await asynchronous.aclose()

    assert asyncio.run(read()) == b"1"


def test_an_unknown_master_is_an_error_not_a_hang(sentinel):
    settings = dataclasses.replace(_settings(sentinel[0]), redis_sentinel_master="no-such-master")
    client = redis_clients.sync_client(settings, socket_timeout=1, connect_timeout=1)
    try:
        with pytest.raises(redis.sentinel.MasterNotFoundError):
            client.ping()
    finally:
        client.close()
