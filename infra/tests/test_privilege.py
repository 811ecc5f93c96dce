"""Least privilege of the native stack: the services run as the `aside` user
(PostgreSQL as `postgres`), PostgreSQL and Redis want the passwords kept in
ASIDE_RUN_DIR/passwords, a stack made before the passwords is migrated, and
the logs are rotated at start."""

from __future__ import annotations

import os
import pwd
import shutil
import stat
import subprocess
from pathlib import Path

import psycopg
import pytest
import redis
from stack_helpers import MINI_SERVICES, ROOT, MiniStack

SERVICE_USER = "aside"
AS_ROOT = os.geteuid() == 0
needs_root = pytest.mark.skipif(not AS_ROOT, reason="only root switches the services' user")


def passwords(run_dir: Path) -> dict[str, str]:
    found = {}
    for line in (run_dir / "passwords").read_text().splitlines():
        key, _, value = line.partition("=")
        if value and not key.startswith("#"):
            found[key] = value
    return found


def env_url(stack: MiniStack, name: str) -> str:
    """What infra/env.sh exports as `name` for this stack."""
    done = subprocess.run(
        ["bash", "-c", f'source infra/env.sh && printf %s "${name}"'],
        cwd=ROOT,
        env=stack.env,
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    )
    return done.stdout


def uid_of(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("Uid:"):
            return int(line.split()[1])
    raise AssertionError(f"no Uid line for pid {pid}")


def pg_url(stack: MiniStack, password: str | None, db: str = "aside") -> str:
    auth = f"aside:{password}" if password else "aside"
    return f"postgresql://{auth}@127.0.0.1:{stack.port('ASIDE_PG_PORT')}/{db}"


@needs_root
def test_services_run_as_the_service_user(mini_stack: MiniStack) -> None:
    up = mini_stack.run("up", *MINI_SERVICES)
    assert up.returncode == 0, up.stderr
    aside = pwd.getpwnam(SERVICE_USER).pw_uid
    pids = mini_stack.live_pids()
    for name in ("redis", "influxdb"):
        assert uid_of(pids[name]) == aside, f"{name} does not run as {SERVICE_USER}"
        assert (mini_stack.run_dir / name).stat().st_uid == aside, f".run/{name} not owned by it"
    assert uid_of(pids["postgres"]) == pwd.getpwnam("postgres").pw_uid


def test_passwords_are_required_and_kept_private(mini_stack: MiniStack) -> None:
    up = mini_stack.run("up", "postgres", "redis")
    assert up.returncode == 0, up.stderr
    file = mini_stack.run_dir / "passwords"
    assert stat.S_IMODE(file.stat().st_mode) == 0o600
    assert stat.S_IMODE((mini_stack.run_dir / "redis" / "redis.conf").stat().st_mode) == 0o600
    secret = passwords(mini_stack.run_dir)
    assert len(secret["postgres"]) >= 32 and len(secret["redis"]) >= 32

    # The URLs infra/env.sh exports carry them, so every consumer just works.
    with psycopg.connect(env_url(mini_stack, "DATABASE_URL"), connect_timeout=5) as conn:
        assert conn.execute("SELECT 1").fetchone() == (1,)
    assert redis.Redis.from_url(env_url(mini_stack, "REDIS_URL"), socket_timeout=5).ping()

    # Without them: refused.
    with pytest.raises(psycopg.OperationalError, match="password"):
        psycopg.connect(pg_url(mini_stack, None), connect_timeout=5)
    with pytest.raises(psycopg.OperationalError, match="password"):
        psycopg.connect(pg_url(mini_stack, "wrong"), connect_timeout=5)
    bare = redis.Redis(port=mini_stack.port("ASIDE_REDIS_PORT"), socket_timeout=5)
    with pytest.raises(redis.AuthenticationError):
        bare.ping()

    # A restart keeps the same passwords.
    assert mini_stack.run("down").returncode == 0
    again = mini_stack.run("up", "postgres", "redis")
    assert again.returncode == 0, again.stderr
    assert passwords(mini_stack.run_dir) == secret


@needs_root
def test_a_stack_made_before_the_passwords_is_migrated(mini_stack: MiniStack) -> None:
    # The cluster as the old `up` made it: trust for every local user.
    pg_dir = mini_stack.run_dir / "postgres"
    pg_dir.mkdir(parents=True)
    shutil.chown(pg_dir, "postgres", "postgres")
    bin_dir = sorted(Path("/usr/lib/postgresql").glob("*/bin"))[-1]
    subprocess.run(
        ["setpriv", "--reuid=postgres", "--regid=postgres", "--init-groups",
         "--inh-caps=+dac_read_search", "--ambient-caps=+dac_read_search",
         str(bin_dir / "initdb"), "-D", str(pg_dir / "data"), "-U", "aside", "--auth=trust",
         "-E", "UTF8", "--locale=C.UTF-8"],
        capture_output=True, check=True, timeout=120,
    )  # fmt: skip
    assert not (mini_stack.run_dir / "passwords").exists()

    up = mini_stack.run("up", "postgres")
    assert up.returncode == 0, up.stderr
    secret = passwords(mini_stack.run_dir)["postgres"]
    with psycopg.connect(pg_url(mini_stack, secret), connect_timeout=5) as conn:
        assert conn.execute("SELECT count(*) FROM users").fetchone() == (0,)
    with pytest.raises(psycopg.OperationalError, match="password"):
        psycopg.connect(pg_url(mini_stack, None), connect_timeout=5)
    hba = (pg_dir / "data" / "pg_hba.conf").read_text().splitlines()
    rules = [line.split() for line in hba if line.strip() and not line.startswith("#")]
    assert rules == [["host", "all", "all", "127.0.0.1/32", "scram-sha-256"]]


def test_big_logs_are_rotated_at_start(mini_stack: MiniStack) -> None:
    logs = mini_stack.run_dir / "logs"
    logs.mkdir(parents=True)
    old = "an old line\n" * 1000
    (logs / "redis.log").write_text(old)
    (logs / "redis.log.1").write_text("the oldest\n")
    mini_stack.env["ASIDE_LOG_MAX_BYTES"] = "4096"

    up = mini_stack.run("up", "redis")
    assert up.returncode == 0, up.stderr
    assert (logs / "redis.log.1").read_text() == old  # one old log kept, the one before dropped
    assert (logs / "redis.log").stat().st_size < 4096
    assert not (logs / "redis.log.2").exists()

    # A small log is left to grow.
    assert mini_stack.run("stop", "redis").returncode == 0
    small = (logs / "redis.log").read_text()
    assert mini_stack.run("up", "redis").returncode == 0
    assert (logs / "redis.log").read_text().startswith(small)


def test_a_redis_still_running_without_a_password_is_refused(mini_stack: MiniStack) -> None:
    up = mini_stack.run("up", "redis")
    assert up.returncode == 0, up.stderr
    # As a Redis started by the version before passwords would answer.
    redis.Redis.from_url(env_url(mini_stack, "REDIS_URL")).config_set("requirepass", "")

    again = mini_stack.run("up", "redis", "postgres")
    assert again.returncode != 0
    lines = again.stderr.strip().splitlines()
    assert len(lines) == 1, again.stderr
    assert "redis of this stack still run(s) without a password" in lines[0]
    assert "make down" in lines[0]
    assert "postgres" not in mini_stack.live_pids()
