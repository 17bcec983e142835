"""google-cloud-aiplatform's GAPIC clients on their REST transport (google-api-core, google-auth, requests).

Owns the lazy import of `google.cloud.aiplatform_v1` with its install hint (`crosstrain[vertex]`), the job
service client on a regional endpoint, and the mapping of everything those libraries raise to crosstrain's
three kinds of failure:

* `google.api_core.exceptions.GoogleAPICallError`: by its HTTP status, through `error_for_status` (429 and 503
  refused, 408 and 500/502/504 outcome unknown, any other final), honouring the response's Retry-After;
* `requests` connection failures and timeouts: through `connection_error` (refused where the request never left
  this machine, else outcome unknown);
* `google.auth.exceptions.TransportError` (the token endpoint could not be reached, so the call was never
  sent): refused;
* `DefaultCredentialsError` and `RefreshError`: final, with the command that gives this machine credentials.

Nothing here imports a Google package at import time.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from crosstrain.adaptors import require
from crosstrain.adaptors.http import connection_error, error_for_status, unreadable, unreadable_answer
from crosstrain.errors import SubmitError, TransientError

if TYPE_CHECKING:
    from google.auth.credentials import Credentials
    from google.cloud.aiplatform_v1 import CustomJob, HyperparameterTuningJob, JobServiceClient

EXTRA = "vertex"
#: How to give this machine Application Default Credentials.
CREDENTIALS_FIX = "run `gcloud auth application-default login`, or set GOOGLE_APPLICATION_CREDENTIALS"


def aiplatform_v1() -> Any:
    """`google.cloud.aiplatform_v1`, or MissingDependency with `pip install 'crosstrain[vertex]'`."""
    return require("google.cloud.aiplatform_v1", EXTRA)


def job_service_client(endpoint: str, *, credentials: Credentials | None = None) -> JobServiceClient:
    """The job service client on `endpoint` (a regional host, or a URL), REST transport; Application Default
    Credentials unless `credentials` are given."""
    v1 = aiplatform_v1()
    from google.api_core.client_options import ClientOptions

    with calling(f"connect to {endpoint}"):
        client: JobServiceClient = v1.JobServiceClient(
            credentials=credentials, transport="rest", client_options=ClientOptions(api_endpoint=endpoint)
        )
    return client


#: Cloud Logging's API host (google-cloud-logging's default; a URL points its client at a loopback service).
LOGGING_ENDPOINT = "https://logging.googleapis.com"


def logging_client(project: str, *, endpoint: str | None = None, credentials: Credentials | None = None) -> Any:
    """google-cloud-logging's client for `project` on its JSON REST transport (`entries:list`), Application
    Default Credentials unless `credentials` are given; `endpoint` (a URL) for a loopback service.

    The client only reads. Reading an entry makes a `Logger` for its log, and a `Logger` made without a
    monitored resource asks the GCE metadata server which resource this machine is (two requests with a 5 s
    timeout each, for every new log name of every read): this client gives its loggers the `global` resource,
    so a read sends nothing but `entries:list`."""
    logging = require("google.cloud.logging", EXTRA)
    base: Any = logging.Client

    class ReadingClient(base):  # type: ignore[misc]
        def logger(self, name: str, *, labels: Any = None, resource: Any = None) -> Any:
            return super().logger(name, labels=labels, resource=resource or logging.Resource("global", {}))

    options = {"api_endpoint": endpoint} if endpoint else None
    with calling("connect to Cloud Logging"):
        return ReadingClient(project=project, credentials=credentials, _use_grpc=False, client_options=options)


def anonymous_credentials() -> Credentials:
    """Credentials that sign nothing, for a client of a loopback service."""
    credentials: Credentials = require("google.auth.credentials", EXTRA).AnonymousCredentials()
    return credentials


def custom_job(body: Mapping[str, Any]) -> CustomJob:
    """A rendered (possibly edited) body as a `CustomJob`; unknown fields, bad enums and durations are final."""
    v1 = aiplatform_v1()
    json_format = require("google.protobuf.json_format", EXTRA)  # protobuf ships no type information
    try:
        job: CustomJob = v1.CustomJob.from_json(json.dumps(body))
    except json_format.ParseError as error:
        raise SubmitError(f"the request's body is not a Vertex AI CustomJob: {error}") from None
    return job


def tuning_job(body: Mapping[str, Any]) -> HyperparameterTuningJob:
    """A rendered (possibly edited) body as a `HyperparameterTuningJob` (a sweep); as `custom_job`."""
    v1 = aiplatform_v1()
    json_format = require("google.protobuf.json_format", EXTRA)
    try:
        job: HyperparameterTuningJob = v1.HyperparameterTuningJob.from_json(json.dumps(body))
    except json_format.ParseError as error:
        raise SubmitError(f"the request's body is not a Vertex AI HyperparameterTuningJob: {error}") from None
    return job


def translate(error: BaseException, what: str) -> SubmitError | None:
    """`error` as crosstrain's kind of failure, or None where it is none of these libraries' errors."""
    from google.api_core import exceptions as api
    from google.auth import exceptions as auth

    if isinstance(error, api.GoogleAPICallError):
        code = error.code
        message = f"{what}: {int(code) if code is not None else '?'} {error.message}"
        response = getattr(error, "response", None)
        retry_after = getattr(response, "headers", {}).get("Retry-After") if response is not None else None
        mapped = error_for_status(int(code), message, retry_after) if code is not None else None
        return mapped or SubmitError(message)
    if isinstance(error, auth.TransportError):
        # Raised while fetching a token, before the call itself is sent.
        return TransientError(f"{what}: could not reach Google's token endpoint: {error}", accepted=False)
    if isinstance(error, auth.DefaultCredentialsError | auth.RefreshError):
        return SubmitError(f"{what}: no usable Google credentials: {error}. Fix: {CREDENTIALS_FIX}")
    import requests

    if isinstance(error, requests.ConnectionError | requests.Timeout | requests.exceptions.ChunkedEncodingError):
        return connection_error(error, what)
    if unreadable_answer(error, ("google", "proto")):
        return unreadable(error, what)
    return None


@contextmanager
def calling(what: str) -> Iterator[None]:
    """Run SDK calls, raising what they raise as crosstrain's errors (from the original)."""
    try:
        yield
    except Exception as error:
        mapped = translate(error, what)
        if mapped is None:
            raise
        raise mapped from error
