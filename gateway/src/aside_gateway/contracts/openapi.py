"""The OpenAPI 3 document of the gateway's public API, served at GET /api/v1/openapi.json.

Longer than the other modules because it is a data declaration: one literal
per schema and operation, no logic to split.

Built from Python data rather than kept as a JSON file so that the error
responses come from one table (`errors.STATUS_BY_CODE`, which mirrors
contracts/errors.json) instead of being repeated by hand. `document()` is the
versioned source; tests check it against the app's registered routes, and
schemathesis checks the running gateway against it.

One document serves both profiles: the lab-only answers (403 `lab_disabled`),
the production ones (401 without the bearer token, /metrics 404) are
documented as possible statuses of the operations they concern.
"""

from __future__ import annotations

import json
from functools import cache
from typing import Any

from aside_gateway.contracts.cache_keys import BYPASS, HIT, MISS, POLICIES, STALE
from aside_gateway.contracts.errors import STATUS_BY_CODE
from aside_gateway.contracts.validation import (
    BCRYPT_COST_DEFAULT,
    BCRYPT_COST_MAX,
    BCRYPT_COST_MIN,
    BCRYPT_HASH_RE,
    COMPLEXITY_MAX,
    COMPLEXITY_MIN,
    EMAIL_MAX,
    ID_MAX,
    IDEMPOTENCY_KEY_MAX,
    KIND_BCRYPT,
    KIND_CHECKSUM,
    KIND_PBKDF2,
    PASSWORD_MAX_BYTES,
    PBKDF2_ITERATIONS_DEFAULT,
    PBKDF2_ITERATIONS_MAX,
    PBKDF2_ITERATIONS_MIN,
    SALT_MAX_BYTES,
    TOLERANCE_MAX,
    TOLERANCE_MAX_LENGTH,
    TOLERANCE_MIN,
    USERNAME_RE,
)

VERSION = "1.0.0"
JSON = "application/json"

Schema = dict[str, Any]

_REASONS = {
    200: "OK",
    201: "Created",
    204: "No Content",
    400: "Bad request",
    401: "Missing or wrong bearer token (when WRITE_TOKEN is set: always in production)",
    403: "Lab-only feature asked for in the production profile",
    404: "Not found",
    409: "Conflict: the username is taken",
    413: "Request body over 16 KiB",
    415: "Content-Type is not application/json",
    422: "Idempotency-Key already used with a different request body",
    429: "Production's miss budget spent for this route or client (GATEWAY_MISS_BUDGET_*): "
    "cached answers are still served; retry a miss after Retry-After",
    500: "Unexpected error (never carries internals)",
    503: "A dependency is unavailable; retry later",
    504: "Timed out: a database query took too long (`timeout`), or the core did not "
    "answer a write, which may have been applied: retry it, a create with the same "
    "Idempotency-Key (`write_outcome_unknown`)",
}

# Characters the email rules of contracts/validation.json forbid anywhere:
# whitespace, C0/C1 controls, DEL and "(),:;<>[\].
_EMAIL_BAD = r'\s\x00-\x1f\x7f-\x9f"(),:;<>\[\\\]@'
_EMAIL_PATTERN = rf"^[^{_EMAIL_BAD}]{{1,64}}@(?:[^{_EMAIL_BAD}.]+\.)+[^{_EMAIL_BAD}.]+$"


def _ref(name: str) -> Schema:
    return {"$ref": f"#/components/schemas/{name}"}


def _header(schema: Schema, description: str, required: bool = False) -> Schema:
    return {"description": description, "required": required, "schema": schema}


X_CACHE = _header(
    {"type": "string", "enum": [HIT, MISS, BYPASS, STALE]},
    "How the read was answered: from a cache tier (HIT, see X-Cache-Tier), from "
    "PostgreSQL after a miss (MISS), from PostgreSQL without the cache (BYPASS: "
    "cache=off, or Redis failing), or, with CACHE_EXPIRY=swr only, from a value past "
    "its expiry within the stale bound while it is refreshed (STALE, see "
    "X-Cache-Stale-Ms; never a value a write invalidated).",
    required=True,
)
X_CACHE_STALE_MS = _header(
    {"type": "string", "pattern": "^[0-9]+$"},
    "On a STALE answer, how long past its expiry the value was, in milliseconds.",
)
X_CACHE_TIER = _header(
    {"type": "string", "enum": ["l1", "l2"]},
    "On a HIT, the tier that answered: l1 (the gateway worker's memory) or l2 (Redis).",
)
X_CACHE_ERROR = _header(
    {"type": "string", "enum": ["1"]}, "Present when Redis failed during this request."
)
X_CACHE_INVALIDATION = _header(
    {"type": "string", "enum": ["failed"]},
    "The write committed but the core could not drop its stale cache keys; "
    "they live until their TTL.",
)
RETRY_AFTER = _header({"type": "string", "pattern": "^[0-9]+$"}, "Seconds to wait before retrying.")
READ_HEADERS = {
    "X-Cache": X_CACHE,
    "X-Cache-Tier": X_CACHE_TIER,
    "X-Cache-Stale-Ms": X_CACHE_STALE_MS,
    "X-Cache-Error": X_CACHE_ERROR,
}


def _closed(
    required: list[str], properties: dict[str, Schema], extra: Schema | None = None
) -> Schema:
    """An object with these properties and no other; `extra`: more of its schema."""
    return {
        "type": "object",
        "required": required,
        "additionalProperties": False,
        **(extra or {}),
        "properties": properties,
    }


def _error_schema(status: int) -> Schema:
    codes = sorted(code for code, code_status in STATUS_BY_CODE.items() if code_status == status)
    return {
        "type": "object",
        "required": ["error"],
        "properties": {
            "error": {
                "type": "object",
                "required": ["code", "message"],
                "properties": {
                    "code": {"type": "string", "enum": codes},
                    "message": {"type": "string"},
                },
            },
            # /readyz's 503 also names the state of each dependency.
            "checks": {"type": "object", "additionalProperties": {"type": "string"}},
        },
    }


def _error(status: int, headers: dict[str, Schema] | None = None) -> Schema:
    codes = ", ".join(
        f"`{code}`" for code, code_status in STATUS_BY_CODE.items() if code_status == status
    )
    response: Schema = {
        "description": f"{_REASONS[status]}. Codes: {codes}.",
        "content": {JSON: {"schema": _ref(f"Error{status}")}},
    }
    if headers:
        response["headers"] = headers
    return response


def _errors(*statuses: int) -> dict[str, Schema]:
    special = {
        401: {
            "WWW-Authenticate": _header(
                {"type": "string", "pattern": "^Bearer"}, "The bearer challenge.", required=True
            )
        },
        429: {"Retry-After": RETRY_AFTER},
        503: {"Retry-After": RETRY_AFTER},
        504: {"Retry-After": RETRY_AFTER},
    }
    return {str(status): _error(status, special.get(status)) for status in statuses}


def _ok(
    schema: Schema, description: str = "OK", headers: dict[str, Schema] | None = None
) -> Schema:
    response: Schema = {"description": description, "content": {JSON: {"schema": schema}}}
    if headers:
        response["headers"] = headers
    return response


def _json_body(schema_name: str) -> Schema:
    return {"required": True, "content": {JSON: {"schema": _ref(schema_name)}}}


ID_PARAMETER = {
    "name": "id",
    "in": "path",
    "required": True,
    "description": "A user id: ASCII digits, 1 to 2^63-1 (leading zeros name the same id).",
    "schema": {"type": "integer", "format": "int64", "minimum": 1, "maximum": ID_MAX},
}
CACHE_PARAMETER = {
    "name": "cache",
    "in": "query",
    "required": False,
    "description": "`on` (default): the configured cache strategy (CACHE_STRATEGY). "
    "Lab profile only (403 `lab_disabled` in production): `off` reads PostgreSQL "
    "directly, touching no Redis; `nopool` likewise over a new PostgreSQL connection "
    "per read (no pool); `coalesce` likewise, a count read in the worker's next batched "
    "scan with every other count pending (the cache's miss path, storing nothing; a user "
    "by id as `off`); `l2` Redis cache-aside with leases; `l1` the "
    "gateway worker's memory only; `hybrid` the worker's memory, then Redis; "
    "`tracking` likewise, the memory kept by Redis's client tracking.",
    "schema": {
        "type": "string",
        "enum": ["on", "off", "nopool", "coalesce", "l2", "l1", "hybrid", "tracking"],
    },
}
IDEMPOTENCY_KEY_PARAMETER = {
    "name": "Idempotency-Key",
    "in": "header",
    "required": False,
    "description": "Makes the create safe to retry: the first request with a key creates "
    "the user; a retry with the same key and body within 24 h (the core's key lifetime) "
    "gets the same 201 again "
    "(`Idempotent-Replayed: true`) and creates nothing; the same key with another body "
    "is 422 `idempotency_key_reused`. 1 to 255 printable ASCII characters, else 400.",
    "schema": {
        "type": "string",
        "minLength": 1,
        "maxLength": IDEMPOTENCY_KEY_MAX,
        # HTTP trims a header value's outer spaces, so a key cannot start or end with one.
        "pattern": r"^[\x21-\x7e](?:[\x20-\x7e]*[\x21-\x7e])?$",
    },
}
WRITE_SECURITY = [{}, {"bearerAuth": []}]
TRACK_PARAMETERS = [
    {
        "name": "simplify",
        "in": "query",
        "required": False,
        "description": f"Douglas-Peucker tolerance in degrees, {TOLERANCE_MIN:f} to "
        f"{TOLERANCE_MAX:f}, a plain decimal (no sign or exponent): the path keeps its ends "
        "and every point further than that from the simplified line. Run by the core, "
        "cached by the gateway. Else 400 `invalid_tolerance`.",
        "schema": {
            "type": "string",
            "maxLength": TOLERANCE_MAX_LENGTH,
            "pattern": r"^[0-9]+(\.[0-9]+)?$",
        },
    },
    {
        "name": "cache",
        "in": "query",
        "required": False,
        "description": "`on` (default): through Redis. Lab profile only (403 `lab_disabled` "
        "in production): `l2`, the same; `off` reads PostgreSQL (or the core) directly.",
        "schema": {"type": "string", "enum": ["on", "off", "l2"]},
    },
    {
        "name": "large",
        "in": "query",
        "required": False,
        "description": "Lab profile only: the large-value policy of this read instead of "
        "CACHE_LARGE_VALUES (`compress`, `simplify`, `skip`, `raw`).",
        "schema": {"type": "string", "enum": list(POLICIES)},
    },
]


def _compute_schemas() -> dict[str, Schema]:
    """POST /api/v1/compute: one request and one answer shape per kind."""
    engine = {
        "type": "string",
        "enum": ["go", "python"],
        "default": "go",
        "description": "go: the core. python: in the gateway process (lab only), at most "
        "PYTHON_COMPUTE_MAX_CONCURRENCY at once per worker.",
    }

    def kind(name: str) -> Schema:
        return {"type": "string", "enum": [name]}

    def secret(max_bytes: int, what: str) -> Schema:
        return {
            "type": "string",
            "minLength": 1,
            "maxLength": max_bytes,
            "pattern": "^[^\\u0000]+$",
            "description": f"{what}: 1 to {max_bytes} bytes of UTF-8 (longer text in "
            "multi-byte characters is refused), no U+0000.",
        }

    def result(name: str, required: list[str], properties: dict[str, Schema]) -> Schema:
        return _closed(
            ["kind", "engine", *required, "elapsed_ms"],
            {
                "kind": kind(name),
                "engine": {"type": "string", "enum": ["go", "python"]},
                **properties,
                "elapsed_ms": {"type": "number", "minimum": 0},
            },
        )

    password = secret(PASSWORD_MAX_BYTES, "The password (72 bytes is bcrypt's own limit)")
    return {
        "ComputeRequest": {
            "oneOf": [_ref("ChecksumRequest"), _ref("Pbkdf2Request"), _ref("BcryptRequest")],
            "description": "The kind of work (`kind`, default `checksum`) and its parameters "
            "(contracts/compute.json).",
        },
        "ChecksumRequest": _closed(
            ["complexity"],
            {
                "kind": {**kind(KIND_CHECKSUM), "default": KIND_CHECKSUM},
                "complexity": {
                    "type": "integer",
                    "minimum": COMPLEXITY_MIN,
                    "maximum": COMPLEXITY_MAX,
                    "description": "n: the checksum loops n*100000 times. The python "
                    "engine takes at most PYTHON_COMPUTE_MAX_COMPLEXITY (20 by default).",
                },
                "engine": engine,
            },
        ),
        "Pbkdf2Request": _closed(
            ["kind", "password", "salt"],
            {
                "kind": kind(KIND_PBKDF2),
                "password": password,
                "salt": secret(SALT_MAX_BYTES, "The salt"),
                "iterations": {
                    "type": "integer",
                    "minimum": PBKDF2_ITERATIONS_MIN,
                    "maximum": PBKDF2_ITERATIONS_MAX,
                    "default": PBKDF2_ITERATIONS_DEFAULT,
                    "description": "PBKDF2-HMAC-SHA256 iterations (the default is OWASP's "
                    "figure). The python engine takes at most "
                    "PYTHON_COMPUTE_MAX_PBKDF2_ITERATIONS (600,000 by default).",
                },
                "engine": engine,
            },
        ),
        "BcryptRequest": _closed(
            ["kind", "password"],
            {
                "kind": kind(KIND_BCRYPT),
                "password": password,
                "cost": {
                    "type": "integer",
                    "minimum": BCRYPT_COST_MIN,
                    "maximum": BCRYPT_COST_MAX,
                    "default": BCRYPT_COST_DEFAULT,
                    "description": "Hash the password at this cost under a fresh random "
                    "salt. The python engine takes at most PYTHON_COMPUTE_MAX_BCRYPT_COST "
                    "(12 by default).",
                },
                "hash": {
                    "type": "string",
                    "pattern": "^" + BCRYPT_HASH_RE.pattern.replace("([0-9]{2})", "[0-9]{2}") + "$",
                    "description": "Instead of cost: verify the password against this hash "
                    f"(its cost from {BCRYPT_COST_MIN} to {BCRYPT_COST_MAX}, else 400 "
                    "`invalid_cost`).",
                },
                "engine": engine,
            },
            extra={"not": {"required": ["cost", "hash"]}},
        ),
        "ComputeResult": {
            "oneOf": [
                _ref("ChecksumResult"),
                _ref("Pbkdf2Result"),
                _ref("BcryptHashResult"),
                _ref("BcryptVerifyResult"),
            ]
        },
        "ChecksumResult": result(
            KIND_CHECKSUM,
            ["complexity", "checksum"],
            {"complexity": {"type": "integer"}, "checksum": {"type": "integer", "format": "int64"}},
        ),
        "Pbkdf2Result": result(
            KIND_PBKDF2,
            ["iterations", "derived_key"],
            {
                "iterations": {"type": "integer"},
                "derived_key": {"type": "string", "pattern": "^[0-9a-f]{64}$"},
            },
        ),
        "BcryptHashResult": result(
            KIND_BCRYPT,
            ["cost", "hash"],
            {"cost": {"type": "integer"}, "hash": {"type": "string", "pattern": "^\\$2[aby]\\$"}},
        ),
        "BcryptVerifyResult": result(
            KIND_BCRYPT,
            ["cost", "match"],
            {"cost": {"type": "integer"}, "match": {"type": "boolean"}},
        ),
    }


def _schemas() -> dict[str, Schema]:
    username = {
        "type": "string",
        "pattern": f"^{USERNAME_RE.pattern}$",
        "description": "1 to 64 of A-Z a-z 0-9 _ . -, starting with a letter or digit.",
    }
    schemas: dict[str, Schema] = {
        "Email": {
            "type": "string",
            "minLength": 3,
            "maxLength": EMAIL_MAX,
            "pattern": _EMAIL_PATTERN,
            "description": "contracts/validation.json: one '@', local part 1 to 64 characters, "
            "a domain of two or more non-empty labels, no whitespace, controls or "
            '"(),:;<>[\\]; other Unicode letters allowed. Lengths count code points.',
        },
        "Username": username,
        "User": _closed(
            ["id", "username", "email", "created_at"],
            {
                "id": {"type": "integer", "format": "int64", "minimum": 1},
                "username": {"type": "string"},
                "email": {"type": "string"},
                "created_at": {
                    "type": "string",
                    "format": "date-time",
                    "pattern": r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z$",
                    "description": "UTC, RFC 3339 with exactly six fractional digits.",
                },
            },
        ),
        "Track": _closed(
            ["id", "name", "distance_m", "path"],
            {
                "id": {"type": "integer", "format": "int64", "minimum": 1},
                "name": {"type": "string"},
                "distance_m": {"type": "integer", "minimum": 0, "description": "metres"},
                "tolerance": {
                    "type": "number",
                    "description": "Present when the path is simplified: the tolerance in "
                    "degrees (the canonical form of ?simplify=, or CACHE_SIMPLIFY_TOLERANCE "
                    "for a large track under CACHE_LARGE_VALUES=simplify).",
                },
                "path": {
                    "type": "array",
                    "minItems": 1,
                    "description": "[longitude, latitude] pairs in degrees.",
                    "items": {
                        "type": "array",
                        "minItems": 2,
                        "maxItems": 2,
                        "items": {"type": "number"},
                    },
                },
            },
        ),
        "Count": _closed(
            ["email", "count"],
            {
                "email": {"type": "string"},
                "count": {"type": "integer", "minimum": 0},
            },
        ),
        "CreateUser": _closed(
            ["username", "email"], {"username": _ref("Username"), "email": _ref("Email")}
        ),
        "UpdateUser": {
            "type": "object",
            "minProperties": 1,
            "additionalProperties": False,
            "properties": {"username": _ref("Username"), "email": _ref("Email")},
        },
        **_compute_schemas(),
        "Health": {
            "type": "object",
            "required": ["status"],
            "properties": {"status": {"type": "string", "enum": ["ok"]}},
        },
        "Ready": {
            "type": "object",
            "required": ["status", "checks"],
            "properties": {
                "status": {"type": "string", "enum": ["ready"]},
                "checks": {
                    "type": "object",
                    "required": ["postgres", "redis"],
                    "properties": {
                        "postgres": {"type": "string", "enum": ["ok"]},
                        "redis": {"type": "string", "enum": ["ok"]},
                    },
                },
            },
        },
    }
    for status in sorted(set(STATUS_BY_CODE.values())):
        schemas[f"Error{status}"] = _error_schema(status)
    return schemas


def _user_paths() -> dict[str, Schema]:
    write_headers = {"X-Cache-Invalidation": X_CACHE_INVALIDATION}
    return {
        "/api/v1/users/count": {
            "get": {
                "operationId": "countUsersByEmail",
                "summary": "How many users have exactly this email (cached)",
                "parameters": [
                    {
                        "name": "email",
                        "in": "query",
                        "required": True,
                        "description": "The exact email (case kept).",
                        "schema": _ref("Email"),
                    },
                    CACHE_PARAMETER,
                ],
                "responses": {
                    "200": _ok(_ref("Count"), headers=READ_HEADERS),
                    **_errors(400, 403),
                    **_errors(429, 500, 503, 504),
                },
            }
        },
        "/api/v1/users": {
            "post": {
                "operationId": "createUser",
                "summary": "Create a user (forwarded to the core)",
                "security": WRITE_SECURITY,
                "parameters": [IDEMPOTENCY_KEY_PARAMETER],
                "requestBody": _json_body("CreateUser"),
                "responses": {
                    "201": _ok(
                        _ref("User"),
                        "Created",
                        {
                            "Location": _header(
                                {"type": "string", "pattern": r"^/api/v1/users/[0-9]+$"},
                                "The new user's URL.",
                                required=True,
                            ),
                            "Idempotent-Replayed": _header(
                                {"type": "string", "enum": ["true"]},
                                "This is the stored answer of an earlier request with "
                                "the same Idempotency-Key; nothing was created now.",
                            ),
                            **write_headers,
                        },
                    ),
                    **_errors(400, 401, 409, 413, 415, 422, 500, 503, 504),
                },
            }
        },
        "/api/v1/users/{id}": {
            "parameters": [ID_PARAMETER],
            "get": {
                "operationId": "getUser",
                "summary": "One user (cached; an unknown id is cached as a negative entry)",
                "parameters": [CACHE_PARAMETER],
                "responses": {
                    "200": _ok(_ref("User"), headers=READ_HEADERS),
                    **_errors(400, 403),
                    "404": _error(404, READ_HEADERS),
                    **_errors(429, 500, 503, 504),
                },
            },
            "patch": {
                "operationId": "updateUser",
                "summary": "Change a user's username and/or email (forwarded to the core)",
                "security": WRITE_SECURITY,
                "requestBody": _json_body("UpdateUser"),
                "responses": {
                    "200": _ok(_ref("User"), headers=write_headers),
                    **_errors(400, 401, 404, 409, 413),
                    **_errors(415, 500, 503, 504),
                },
            },
            "delete": {
                "operationId": "deleteUser",
                "summary": "Delete a user (forwarded to the core)",
                "security": WRITE_SECURITY,
                "responses": {
                    "204": {"description": "Deleted; no body.", "headers": write_headers},
                    **_errors(400, 401, 404, 413),
                    **_errors(500, 503, 504),
                },
            },
        },
    }


def _track_paths() -> dict[str, Schema]:
    return {
        "/api/v1/tracks/{id}": {
            "parameters": [{**ID_PARAMETER, "description": "A track id: as a user id."}],
            "get": {
                "operationId": "getTrack",
                "summary": "One GPS track, whole or simplified (cached; values over "
                "CACHE_LARGE_VALUE_BYTES stored as CACHE_LARGE_VALUES says)",
                "parameters": TRACK_PARAMETERS,
                "responses": {
                    "200": _ok(_ref("Track"), headers=READ_HEADERS),
                    **_errors(400, 403),
                    "404": _error(404, READ_HEADERS),
                    **_errors(429, 500, 503, 504),
                },
            },
        }
    }


def _other_paths() -> dict[str, Schema]:
    return {
        "/api/v1/compute": {
            "post": {
                "operationId": "compute",
                "summary": "CPU work (checksum, PBKDF2, bcrypt) in the core (go) or the "
                "gateway (python, lab)",
                "security": WRITE_SECURITY,
                "requestBody": _json_body("ComputeRequest"),
                "responses": {
                    "200": _ok(_ref("ComputeResult")),
                    **_errors(400, 401, 403, 413, 415, 500, 503),
                },
            }
        },
        "/api/v1/openapi.json": {
            "get": {
                "operationId": "openapi",
                "summary": "This document",
                "responses": {"200": _ok({"type": "object"}), **_errors(400, 500)},
            }
        },
        "/healthz": {
            "get": {
                "operationId": "healthz",
                "summary": "Liveness: 200 while the process runs (no dependency checked)",
                "responses": {"200": _ok(_ref("Health")), **_errors(400, 500)},
            }
        },
        "/readyz": {
            "get": {
                "operationId": "readyz",
                "summary": "Readiness: PostgreSQL and Redis answer",
                "responses": {"200": _ok(_ref("Ready")), **_errors(400, 500, 503)},
            }
        },
        "/metrics": {
            "get": {
                "operationId": "metrics",
                "summary": "Prometheus text, summed over all workers (lab profile; in "
                "production 404 here, served by the gunicorn master on METRICS_BIND)",
                "responses": {
                    "200": {
                        "description": "Prometheus exposition format.",
                        "content": {"text/plain": {"schema": {"type": "string"}}},
                    },
                    **_errors(400, 404, 500),
                },
            }
        },
    }


@cache
def document() -> dict[str, Any]:
    """The OpenAPI document (built once; treat it as read-only)."""
    return {
        "openapi": "3.0.3",
        "info": {
            "title": "Aside gateway",
            "version": VERSION,
            "description": "Cached reads of users from PostgreSQL through Redis, writes and "
            "compute forwarded to the core. Every error is "
            '`{"error": {"code": ..., "message": ...}}` with a code of contracts/errors.json. '
            "Writes (POST, PATCH, DELETE) need `Authorization: Bearer <WRITE_TOKEN>` when "
            "the gateway has a WRITE_TOKEN, which the production profile requires.",
        },
        "paths": {**_user_paths(), **_track_paths(), **_other_paths()},
        "components": {
            "schemas": _schemas(),
            "securitySchemes": {
                "bearerAuth": {
                    "type": "http",
                    "scheme": "bearer",
                    "description": "The gateway's WRITE_TOKEN.",
                }
            },
        },
    }


@cache
def encoded() -> bytes:
    """The document as the bytes the route serves."""
    return json.dumps(document(), separators=(",", ":")).encode()
