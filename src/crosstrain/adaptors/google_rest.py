"""Google REST APIs through google-auth's `AuthorizedSession` (a `requests.Session` that adds and refreshes an
OAuth token), for the backends that call a Google API without a generated client (`aiplatform`).

This module owns the lazy import of google-auth and requests, the install hint, and the mapping of their
failures to crosstrain's three kinds:

* a connection failure: `connection_error` (refused where it happened before sending, else outcome unknown);
* an HTTP status: `error_for_status` (429/503 refused, 408/5xx gateway unknown, other 4xx final);
* credentials: no Application Default Credentials (`DefaultCredentialsError`), or a refresh token Google no
  longer honours (`RefreshError`: expired, revoked, reauthentication needed), is final, with the fix; a token
  endpoint that cannot be reached (`google.auth.exceptions.TransportError`) is a refusal, since the call itself
  was never sent.

Nothing here imports google-auth or requests at import time.
"""

from __future__ import annotations

import json
from collections.abc import Collection
from typing import TYPE_CHECKING, Any

from crosstrain.adaptors import require
from crosstrain.adaptors.http import connection_error, error_for_status
from crosstrain.errors import SubmitError, TransientError

if TYPE_CHECKING:
    import requests

#: The pip extra that installs google-auth[requests].
EXTRA = "aiplatform"
SCOPES = ("https://www.googleapis.com/auth/cloud-platform",)
CREDENTIALS_FIX = (
    "run `gcloud auth application-default login` (or point GOOGLE_APPLICATION_CREDENTIALS at a service "
    "account key file)"
)


def authorized_session(scopes: Collection[str] = SCOPES, *, extra: str = EXTRA) -> requests.Session:
    """An `AuthorizedSession` with Application Default Credentials; a final error with the fix if there are none."""
    google_auth = require("google.auth", extra)
    transport = require("google.auth.transport.requests", extra)
    exceptions = require("google.auth.exceptions", extra)
    try:
        credentials, _ = google_auth.default(scopes=list(scopes))
    except exceptions.DefaultCredentialsError as error:
        raise SubmitError(f"no Google credentials: {error}. To fix it, {CREDENTIALS_FIX}") from None
    session: requests.Session = transport.AuthorizedSession(credentials)
    return session


def call(
    session: requests.Session,
    method: str,
    url: str,
    body: Any = None,
    *,
    timeout: float,
    allow: Collection[int] = (),
    extra: str = EXTRA,
) -> requests.Response:
    """One HTTP call with a client timeout. Returns the response when it succeeded or its status is in `allow`;
    raises every other outcome as a `TransientError` (refused or unknown) or a final `SubmitError`."""
    requests_lib = require("requests", extra)
    auth_errors = require("google.auth.exceptions", extra)
    what = f"{method} {url}"
    try:
        response: requests.Response = session.request(method, url, json=body, timeout=timeout)
    except auth_errors.RefreshError as error:
        if getattr(error, "retryable", False):
            raise TransientError(
                f"{what}: could not refresh the access token, nothing was sent: {error}", accepted=False
            ) from error
        raise SubmitError(
            f"{what}: Google refused to refresh the credentials, nothing was sent: {error}. To fix it, "
            f"{CREDENTIALS_FIX}"
        ) from error
    except auth_errors.DefaultCredentialsError as error:
        raise SubmitError(f"{what}: no usable Google credentials: {error}. To fix it, {CREDENTIALS_FIX}") from error
    except auth_errors.TransportError as error:
        # The token endpoint could not be reached, so the call itself never left: refused, safe to retry.
        raise TransientError(
            f"{what}: could not reach Google's token endpoint to refresh the credentials, nothing was sent: {error}",
            accepted=False,
        ) from error
    except requests_lib.exceptions.RequestException as error:
        raise connection_error(error, what) from error
    if response.status_code < 400 or response.status_code in allow:
        return response
    raise failure(response)


def failure(response: requests.Response) -> SubmitError:
    """A failed call's answer (status 400 or more) as crosstrain's error, with Google's status and message."""
    code = response.status_code
    message = f"{response.request.method} {response.url}: {code} {error_text(response)}"
    if code == 401:
        message += f". To fix it, {CREDENTIALS_FIX}"
    return error_for_status(code, message, response.headers.get("Retry-After")) or SubmitError(message)


def json_of(response: requests.Response) -> dict[str, Any]:
    """The JSON object a call answered; an answer that is not one leaves the outcome unknown."""
    try:
        data = response.json() if response.content else {}
    except ValueError:
        data = None
    if not isinstance(data, dict):
        raise TransientError(
            f"{response.request.method} {response.url}: {response.status_code} with an answer that is not a JSON "
            f"object: {response.text[:200]!r}",
            accepted=None,
        )
    return data


def error_text(response: requests.Response) -> str:
    """Google's error envelope `{"error": {"status", "message"}}` as one line, or the start of the raw text."""
    try:
        error = json.loads(response.text).get("error", {})
        return f"{error.get('status', '')}: {error.get('message', '')}".strip(": ")
    except (ValueError, AttributeError):
        return str(response.text[:200])
