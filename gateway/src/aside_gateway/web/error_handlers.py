"""Flask's error handlers: every error answer in the one shape of contracts/errors.py.

Handlers cover our own `ApiError`, every werkzeug HTTPException (Flask's 404,
405, 413, ...) and any unexpected exception, which becomes a 500 `internal`
whose body never carries a traceback (the traceback goes to the log).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

from flask import Flask, Response
from werkzeug.exceptions import HTTPException

from aside_gateway.contracts.errors import STATUS_BY_CODE, ApiError, error_body

log = logging.getLogger("aside_gateway")

# Werkzeug's HTTP errors mapped to our codes; any other status falls back to
# the generic code of its class.
_CODE_BY_STATUS: dict[int, str] = {
    400: "invalid_request",
    401: "unauthorized",
    403: "forbidden",
    404: "not_found",
    405: "method_not_allowed",
    409: "conflict",
    413: "payload_too_large",
    415: "unsupported_media_type",
    503: "unavailable",
    504: "timeout",
}

_MESSAGE_BY_STATUS: dict[int, str] = {
    404: "no such route",
    405: "method not allowed on this route",
    413: "request body too large",
}


def error_response(
    code: str, message: str, headers: Mapping[str, str] | None = None, status: int | None = None
) -> Response:
    response = Response(
        error_body(code, message),
        status=status or STATUS_BY_CODE[code],
        mimetype="application/json",
    )
    if headers:
        response.headers.update(headers)
    return response


def _from_api_error(exc: ApiError) -> Response:
    return error_response(exc.code, exc.message, exc.headers)


def _from_http_exception(exc: HTTPException) -> Response:
    status = exc.code or 500
    code = _CODE_BY_STATUS.get(status, "invalid_request" if status < 500 else "internal")
    message = _MESSAGE_BY_STATUS.get(status) or (exc.description or exc.name or "error").strip()
    headers = {}
    allow = exc.get_headers() if status == 405 else []
    for name, value in allow:
        if name.lower() == "allow":
            headers["Allow"] = value
    return error_response(code, message, headers, status=status)


def _from_unexpected(exc: Exception) -> Response:
    if isinstance(exc, HTTPException):
        return _from_http_exception(exc)
    log.exception("unhandled error")
    return error_response("internal", "internal error")


def register_error_handlers(app: Flask) -> None:
    app.register_error_handler(ApiError, _from_api_error)
    app.register_error_handler(HTTPException, _from_http_exception)
    app.register_error_handler(Exception, _from_unexpected)
