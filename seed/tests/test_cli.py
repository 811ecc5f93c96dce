"""Bad arguments and an unreachable database: one line, non-zero exit, at once."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from aside_seed.cli import parse_options
from aside_seed.config import load_config
from aside_seed.errors import UsageError

LAB = {"ASIDE_PROFILE": "lab"}


def assert_one_line_failure(stderr: str, status: int, expected_status: int, words: str) -> None:
    lines = stderr.strip().splitlines()
    assert status == expected_status, stderr
    assert len(lines) == 1, stderr
    assert lines[0].startswith("aside-seed: ")
    assert words.lower() in lines[0].lower()
    assert "Traceback" not in stderr


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["--rows", "-1"], "--rows must be a whole number >= 1"),
        (["--rows", "0"], "--rows must be a whole number >= 1"),
        (["--rows", "1e6"], "--rows must be a whole number"),
        (["--hot-ratio", "2"], "--hot-ratio must be a number from 0 to 1"),
        (["--hot-ratio", "nan"], "--hot-ratio must be a number from 0 to 1"),
        (["--hot-emails", "0"], "--hot-emails 0 leaves no address"),
        (["--rows", "100", "--hot-emails", "100"], "too few to share each"),
        (["--seed", "-3"], "--seed must be a whole number >= 0"),
        (["--lock-timeout", "0"], "--lock-timeout must be seconds"),
        (["--copy-format", "csv"], "invalid choice"),
        (["--frobnicate"], "unrecognized arguments"),
    ],
)
def test_bad_argument_is_one_line_and_exit_2(seed, args: list[str], words: str) -> None:
    done = seed(*args)
    assert_one_line_failure(done.stderr, done.returncode, 2, words)
    assert not seed.data_dir.exists()  # nothing written


def test_bad_test_hook_value_is_one_line(seed) -> None:
    done = seed("--rows", "1000", "--hot-emails", "5", ASIDE_SEED_FAIL_AFTER_ROWS="ten")
    assert_one_line_failure(done.stderr, done.returncode, 2, "ASIDE_SEED_FAIL_AFTER_ROWS")


def test_unreachable_database_fails_fast_with_one_line(seed) -> None:
    started = time.monotonic()
    done = seed(
        "--rows", "1000", "--hot-emails", "5", DATABASE_URL="postgresql://aside@127.0.0.1:1/aside"
    )
    assert_one_line_failure(
        done.stderr, done.returncode, 1, "cannot connect to PostgreSQL at 127.0.0.1:1/aside"
    )
    assert time.monotonic() - started < 15


def test_malformed_database_url_is_one_line(seed) -> None:
    done = seed("--rows", "1000", "--hot-emails", "5", DATABASE_URL="not a url")
    assert_one_line_failure(done.stderr, done.returncode, 1, "DATABASE_URL is not a valid")


def test_hot_ratio_zero_ignores_hot_emails() -> None:
    options = parse_options(["--rows", "10", "--hot-ratio", "0", "--hot-emails", "0"])
    assert (options.hot_emails, options.hot_ratio) == (0, 0.0)
    assert parse_options(["--rows", "250"]).hot_emails == 100
    with pytest.raises(UsageError, match="199 hot rows"):
        parse_options(["--rows", "249", "--hot-ratio", "0.8"])


def test_config_reads_the_environment_in_one_place(tmp_path: Path) -> None:
    config = load_config({"ASIDE_ROOT": str(tmp_path), "DATABASE_URL": "postgresql://x@h/db"})
    assert config.database_url == "postgresql://x@h/db"
    assert config.data_dir == tmp_path / "bench" / "data"
    assert config.schema_path == tmp_path / "contracts" / "schema.sql"
    assert config.fail_after_rows is None
    config = load_config(
        {"ASIDE_DATA_DIR": str(tmp_path), "ASIDE_SEED_FAIL_AFTER_ROWS": "5", **LAB}
    )
    assert config.data_dir == tmp_path and config.fail_after_rows == 5
    assert config.database_url == "postgresql://aside@127.0.0.1:25432/aside"
    with pytest.raises(UsageError, match="ASIDE_SEED_FAIL_AFTER_ROWS"):
        load_config({"ASIDE_SEED_FAIL_AFTER_ROWS": "-1", **LAB})
    assert config.exit_after_swap is False
    assert load_config({"ASIDE_SEED_EXIT_AFTER_SWAP": "1", **LAB}).exit_after_swap is True
    with pytest.raises(UsageError, match=r"^ASIDE_SEED_EXIT_AFTER_SWAP must be 0 or 1"):
        load_config({"ASIDE_SEED_EXIT_AFTER_SWAP": "yes", **LAB})


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("ASIDE_SEED_FAIL_AFTER_ROWS", "10"),
        ("ASIDE_SEED_FAIL_AFTER_ROWS", "0"),
        ("ASIDE_SEED_EXIT_AFTER_SWAP", "1"),
    ],
)
@pytest.mark.parametrize("profile", [{}, {"ASIDE_PROFILE": "production"}])
def test_failure_hooks_are_refused_outside_the_lab(
    name: str, value: str, profile: dict[str, str]
) -> None:
    with pytest.raises(
        UsageError, match=rf"^{name} is a test hook, refused unless ASIDE_PROFILE=lab$"
    ):
        load_config({name: value, **profile})
    # Unset or off, production loads.
    assert load_config({"ASIDE_SEED_EXIT_AFTER_SWAP": "0", **profile}).exit_after_swap is False


def test_a_production_seed_with_a_hook_stops_at_once_in_one_line(seed) -> None:
    done = seed("--rows", "1000", "--hot-emails", "5", ASIDE_PROFILE="production",
                ASIDE_SEED_EXIT_AFTER_SWAP="1")  # fmt: skip
    assert_one_line_failure(done.stderr, done.returncode, 2, "ASIDE_SEED_EXIT_AFTER_SWAP")
    assert not seed.data_dir.exists()  # nothing written


def test_bad_profile_is_refused() -> None:
    with pytest.raises(UsageError, match=r"^ASIDE_PROFILE must be one of lab\|production"):
        load_config({"ASIDE_PROFILE": "staging"})


def test_redis_mode_is_read_and_checked() -> None:
    assert load_config({}).redis_mode == "standalone"
    assert load_config({"REDIS_MODE": "cluster"}).redis_mode == "cluster"
    sentinel = load_config({"REDIS_MODE": "sentinel", "REDIS_SENTINEL_MASTER": "aside"})
    assert (sentinel.redis_mode, sentinel.redis_sentinel_master) == ("sentinel", "aside")
    with pytest.raises(UsageError, match=r"^REDIS_MODE must be one of"):
        load_config({"REDIS_MODE": "ring"})
    with pytest.raises(UsageError, match=r"^REDIS_SENTINEL_MASTER is required"):
        load_config({"REDIS_MODE": "sentinel"})
