"""How one environment variable is read and checked (config/settings.py declares them).

A reader takes the environment, the variable's name and what it needs, and
returns the value or raises `ConfigError` with a one-line message naming the
variable. `setting(read, name, default, ...)` declares a field of `Settings`
read by `read` with its default, so a variable's name, default and bounds are
written once; `read_declared(cls, env)` reads every field declared so.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Mapping
from functools import partial
from typing import Any, TypeVar
from urllib.parse import urlsplit

_INT_RE = re.compile(r"^-?[0-9]{1,12}$")
_DECIMAL_RE = re.compile(r"^[0-9]{1,6}(?:\.[0-9]{1,6})?$")
# A bearer token as it can travel in a header: visible ASCII, no spaces.
_TOKEN_RE = re.compile(r"^[\x21-\x7e]{16,512}$")
# The key of a field's metadata holding how its variable is read.
_READ = "aside_env"

Env = Mapping[str, str]
T = TypeVar("T")


class ConfigError(ValueError):
    """A missing or wrong environment variable; the message is one line."""


def one_line(value: str, limit: int = 60) -> str:
    shown = value if len(value) <= limit else value[:limit] + "..."
    return repr(shown)


def _raw(env: Env, name: str) -> str | None:
    """The variable's text, stripped; None when unset or blank."""
    text = (env.get(name) or "").strip()
    return text or None


def required(env: Env, name: str) -> str:
    value = _raw(env, name)
    if value is None:
        raise ConfigError(f"{name} is required but not set")
    return value


def _parsed(env: Env, name: str, default: T, parse: Callable[[str], T | None], want: str) -> T:
    """The variable parsed, its default when unset; `want` says what it must be."""
    text = _raw(env, name)
    if text is None:
        return default
    value = parse(text)
    if value is None:
        raise ConfigError(f"{name} must be {want}, got {one_line(env[name])}")
    return value


def integer(env: Env, name: str, default: int, low: int, high: int) -> int:
    def parse(text: str) -> int | None:
        return int(text) if _INT_RE.match(text) and low <= int(text) <= high else None

    return _parsed(env, name, default, parse, f"an integer from {low} to {high}")


def choice(env: Env, name: str, default: str, choices: tuple[str, ...]) -> str:
    return _parsed(
        env, name, default, lambda t: t if t in choices else None, f"one of {'|'.join(choices)}"
    )


def decimal(env: Env, name: str, default: float, low: float, high: float) -> float:
    """A plain decimal number (e.g. 0.1), from `low` to `high` inclusive."""

    def parse(text: str) -> float | None:
        return float(text) if _DECIMAL_RE.match(text) and low <= float(text) <= high else None

    return _parsed(env, name, default, parse, f"a number from {low} to {high}")


def flag(env: Env, name: str, default: bool = False) -> bool:
    """0 or 1."""
    return choice(env, name, "1" if default else "0", ("0", "1")) == "1"


def on_off(env: Env, name: str, default: bool = True) -> bool:
    """on or off."""
    return choice(env, name, "on" if default else "off", ("on", "off")) == "on"


def url(env: Env, name: str, schemes: tuple[str, ...]) -> str:
    value = required(env, name)
    try:
        parts = urlsplit(value)
        parts.port  # noqa: B018 - raises ValueError on a bad port
    except ValueError as exc:
        raise ConfigError(f"{name} is not a valid URL: {exc}") from None
    if parts.scheme not in schemes:
        raise ConfigError(f"{name} must be a {'/'.join(s + '://' for s in schemes)} URL")
    if parts.scheme != "unix" and not parts.hostname:
        raise ConfigError(f"{name} has no host")
    return value


def token(env: Env, name: str, profile: str) -> str | None:
    """A bearer token: required in production, checked whenever set."""
    # The value is a secret: no message below may show it.
    value = _raw(env, name)
    if value is None:
        if profile == "production":
            raise ConfigError(f"{name} is required when ASIDE_PROFILE=production")
        return None
    if not _TOKEN_RE.match(value):
        raise ConfigError(
            f"{name} must be 16 to 512 visible ASCII characters (no spaces); value not shown"
        )
    return value


def setting(read: Callable[..., Any], name: str, default: Any, *bounds: Any) -> Any:
    """A field whose value is `read(env, name, default, *bounds)`."""
    reader = (read, name, bounds)
    return dataclasses.field(default=default, metadata={_READ: reader})


# A field read from one variable of each kind: (NAME, default, bounds...).
int_var = partial(setting, integer)
choice_var = partial(setting, choice)
flag_var = partial(setting, flag)
switch_var = partial(setting, on_off)
decimal_var = partial(setting, decimal)


def read_declared(cls: type, env: Env) -> dict[str, Any]:
    """The values of `cls`'s fields declared with `setting`, read from `env`."""
    values = {}
    for field in dataclasses.fields(cls):
        if _READ in field.metadata:
            read, name, bounds = field.metadata[_READ]
            values[field.name] = read(env, name, field.default, *bounds)
    return values
