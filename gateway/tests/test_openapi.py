"""The OpenAPI document: valid, in step with the app's routes and errors.json,
served by the gateway, and obeyed by the running gateway (schemathesis)."""

from __future__ import annotations

import copy
import re
from collections.abc import Iterator

import pytest
import requests
import schemathesis
from aside_gateway.config.settings import Settings, load_settings
from aside_gateway.contracts import openapi
from aside_gateway.services import build_services
from aside_gateway.web.app import create_app
from flask import Flask
from gateway_helpers import CORE_TOKEN, WRITE_TOKEN, contract
from hypothesis import HealthCheck, settings
from schemathesis.checks import (
    content_type_conformance,
    not_a_server_error,
    response_headers_conformance,
    response_schema_conformance,
    status_code_conformance,
)

DOCUMENT = openapi.document()
HTTP_METHODS = ("get", "put", "post", "patch", "delete", "head", "options", "trace")
# Flask adds these to every route itself; they are not part of the API.
AUTOMATIC_METHODS = {"HEAD", "OPTIONS"}
# Bounded run: examples per operation (10 operations, about a minute in all).
MAX_EXAMPLES = 50


def documented() -> set[tuple[str, str]]:
    return {
        (path, method.upper())
        for path, item in DOCUMENT["paths"].items()
        for method in item
        if method in HTTP_METHODS
    }


def registered(app: Flask) -> set[tuple[str, str]]:
    routes = set()
    for rule in app.url_map.iter_rules():
        path = re.sub(r"<(?:[a-z]+:)?([A-Za-z_]+)>", r"{\1}", rule.rule)
        routes |= {(path, method) for method in rule.methods - AUTOMATIC_METHODS}
    return routes


@pytest.fixture(params=["lab", "production"])
def app_settings(request, database_url, redis_url) -> Settings:
    env = {
        "DATABASE_URL": database_url,
        "REDIS_URL": redis_url,
        "CORE_URL": "http://127.0.0.1:9",
        "ASIDE_PROFILE": request.param,
        "WRITE_TOKEN": WRITE_TOKEN,
        "CORE_TOKEN": CORE_TOKEN,
    }
    return load_settings(env)


@pytest.fixture
def app(app_settings: Settings) -> Iterator[Flask]:
    services = build_services(app_settings)
    yield create_app(app_settings, services)
    services.close()


def test_every_route_is_documented_and_every_documented_path_exists(app, app_settings):
    routes = registered(app)
    assert routes - documented() == set()  # nothing registered goes undocumented
    missing = documented() - routes
    if app_settings.is_lab:
        assert missing == set()
    else:
        # Production has no /metrics route (its 404 is documented).
        assert missing == {("/metrics", "GET")}


def test_the_document_is_valid_openapi():
    schema = schemathesis.openapi.from_dict(DOCUMENT)
    schema.validate()
    assert DOCUMENT["openapi"].startswith("3.0.")


def test_error_responses_list_the_codes_of_errors_json():
    codes_by_status: dict[int, set[str]] = {}
    for code, status in contract("errors.json")["codes"].items():
        codes_by_status.setdefault(status, set()).add(code)
    schemas = DOCUMENT["components"]["schemas"]
    for path, item in DOCUMENT["paths"].items():
        for method, operation in item.items():
            if method not in HTTP_METHODS:
                continue
            for status, response in operation["responses"].items():
                if int(status) < 400:
                    continue
                name = response["content"]["application/json"]["schema"]["$ref"].split("/")[-1]
                enum = schemas[name]["properties"]["error"]["properties"]["code"]["enum"]
                assert set(enum) == codes_by_status[int(status)], (path, method, status)
                assert 500 in {int(s) for s in operation["responses"]}, (path, method)


def test_read_answers_document_x_cache():
    for path, status in (("/api/v1/users/count", "200"), ("/api/v1/users/{id}", "200")):
        headers = DOCUMENT["paths"][path]["get"]["responses"][status]["headers"]
        assert headers["X-Cache"]["required"] is True
        # Every way a read is answered, swr's stale answers and their age included.
        assert set(headers["X-Cache"]["schema"]["enum"]) == {"HIT", "MISS", "BYPASS", "STALE"}
        assert "X-Cache-Stale-Ms" in headers
    negative = DOCUMENT["paths"]["/api/v1/users/{id}"]["get"]["responses"]["404"]["headers"]
    assert negative["X-Cache"]["required"] is True


def test_the_gateway_serves_the_document(gateway, production_gateway):
    for gw in (gateway, production_gateway):
        response = requests.get(gw.url + "/api/v1/openapi.json", timeout=10)
        assert response.status_code == 200
        assert response.headers["Content-Type"] == "application/json"
        assert response.json() == DOCUMENT


# ---- schemathesis against a running gateway (lab profile, real core) ---------------

# The document as the package builds it (the test above shows the gateway serves
# exactly this); loaded eagerly because schemathesis's lazy fixture loader
# (schemathesis.pytest.from_fixture) does not work with pytest 9.
api = schemathesis.openapi.from_dict(copy.deepcopy(openapi.document()))


@api.parametrize()
@settings(
    max_examples=MAX_EXAMPLES,
    deadline=None,
    database=None,  # no .hypothesis folder in the repository
    suppress_health_check=list(HealthCheck),
)
def test_the_gateway_obeys_its_document(case, gateway):
    case.call_and_validate(
        base_url=gateway.url,
        timeout=30,
        checks=[
            not_a_server_error,
            status_code_conformance,
            content_type_conformance,
            response_schema_conformance,
            response_headers_conformance,
        ],
    )
