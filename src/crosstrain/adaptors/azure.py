"""azure-core, azure-ai-ml and azure-identity: their lazy import, the install hint, and their errors as
crosstrain's three kinds of failure.

* `ServiceRequestError` (azure-core: "no request was sent": connection refused, DNS, TLS, connect timeout):
  refused, retry freely;
* `ServiceResponseError` (sent, but the answer was lost: read timeout, connection reset) and
  `IncompleteReadError` (the answer was cut short): outcome unknown, look first;
* `HttpResponseError`: by its status, through `crosstrain.adaptors.http.error_for_status`, as on every platform;
* `ClientAuthenticationError` and azure-identity's `CredentialUnavailableError` (a subclass of it): final, with
  the fix (`az login`, or a service principal's variables);
* azure-ai-ml's own `MlException` (validation, user errors): final.

Every call through an `MLClient` made by `ml_client` carries connection and read timeouts (a per-call policy
sets them, so they hold for an injected transport too): a stalled service is an unknown outcome, never a hang.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

from crosstrain.adaptors import require
from crosstrain.adaptors.http import error_for_status, unreadable, unreadable_answer
from crosstrain.errors import SubmitError, TransientError

if TYPE_CHECKING:
    from azure.core.credentials import TokenCredential
    from azure.core.pipeline.transport import HttpTransport

EXTRA = "azureml"
T = TypeVar("T")

#: How to give crosstrain Azure credentials, for the final error when it has none or they are refused.
LOGIN_FIX = (
    "run `az login` (and `az account set --subscription <id>`), or set AZURE_CLIENT_ID, AZURE_TENANT_ID and "
    "AZURE_CLIENT_SECRET for a service principal, or run where a managed or workload identity is available"
)


def ml() -> Any:
    """`azure.ai.ml`, or a MissingDependency that says `pip install 'crosstrain[azureml]'`."""
    return require("azure.ai.ml", EXTRA)


def default_credential() -> TokenCredential:
    """azure-identity's `DefaultAzureCredential` (CI variables, workload or managed identity, `az login`)."""
    credential: TokenCredential = require("azure.identity", EXTRA).DefaultAzureCredential()
    return credential


def ml_client(
    credential: TokenCredential | None,
    subscription_id: str,
    resource_group: str,
    workspace: str,
    *,
    timeout: float,
    transport: HttpTransport[Any, Any] | None = None,
) -> Any:
    """An `MLClient` for the workspace whose calls all carry `timeout` as connection and read timeout, with
    the SDK's own retries off (crosstrain's retry policy is the one). The credential is asked for a token
    only with the first call."""
    kwargs: dict[str, Any] = {"retry_total": 0, "per_call_policies": [_timeouts(timeout)]}
    if transport is not None:
        kwargs["transport"] = transport
    return ml().MLClient(
        credential if credential is not None else default_credential(),
        subscription_id,
        resource_group,
        workspace,
        **kwargs,
    )


def _timeouts(seconds: float) -> Any:
    """A per-call azure-core policy that gives each request `seconds` to connect and `seconds` to answer,
    unless the call set its own."""
    require("azure.core.pipeline.policies", EXTRA)  # the install hint, if azure-core is missing
    from azure.core.pipeline import PipelineRequest
    from azure.core.pipeline.policies import SansIOHTTPPolicy

    class Timeouts(SansIOHTTPPolicy[Any, Any]):
        def on_request(self, request: PipelineRequest[Any]) -> None:
            request.context.options.setdefault("connection_timeout", seconds)
            request.context.options.setdefault("read_timeout", seconds)

    return Timeouts()


def aml_token(credential: TokenCredential, resource: str, what: str) -> str:
    """A token of `credential` for `resource` (scope `<resource>/.default`), as azure-ai-ml's
    `_set_headers_with_user_aml_token` gets the submitter's token for a user-identity job, and refused as it is
    there unless its audience is `resource` (the JWT's `aud`, read without verifying it: Azure verifies it)."""
    token = str(call(lambda: credential.get_token(f"{resource}/.default").token, what))
    audience = _jwt_claims(token).get("aud")
    if audience != resource:
        raise SubmitError(
            f"{what}: the Azure credential's token for {resource} is for {audience or 'no audience'}, and a job that "
            f"runs as its submitter needs one for {resource}. Fix: {LOGIN_FIX}"
        )
    return token


def _jwt_claims(token: str) -> dict[str, Any]:
    """The claims of a JWT, unverified; empty where `token` is not one."""
    import base64
    import binascii
    import json

    parts = token.split(".")
    if len(parts) != 3:
        return {}
    try:
        claims = json.loads(base64.urlsafe_b64decode(parts[1] + "=" * (-len(parts[1]) % 4)))
    except (ValueError, binascii.Error):
        return {}
    return claims if isinstance(claims, dict) else {}


def http_request(method: str, url: str, body: Any = None, headers: dict[str, str] | None = None) -> Any:
    """An azure-core request for `pipeline.send_request` (the MLClient's own authenticated ARM pipeline)."""
    rest = require("azure.core.rest", EXTRA)
    return rest.HttpRequest(method, url, json=body, headers=headers or {})


def translate(error: BaseException, what: str) -> BaseException:
    """An azure SDK error as crosstrain's; anything else unchanged (a bug is not a platform failure)."""
    exceptions = require("azure.core.exceptions", EXTRA)
    if isinstance(error, exceptions.ClientAuthenticationError):  # before HttpResponseError: a subclass of it
        if _credential_unavailable(error):
            return SubmitError(f"{what}: no Azure credential is available ({_first_line(error)}). Fix: {LOGIN_FIX}")
        return SubmitError(f"{what}: Azure refused the credentials: {_first_line(error)}. Fix: {LOGIN_FIX}")
    if isinstance(error, exceptions.DecodeError) or unreadable_answer(error, ("azure",)):  # an empty or cut answer
        return unreadable(error, what)
    if isinstance(error, exceptions.IncompleteReadError):  # an answer came and was cut short: it may have worked
        return TransientError(f"{what}: the answer was cut short: {error}", accepted=None)
    if isinstance(error, exceptions.ServiceRequestError):  # azure-core: the request was never sent
        return TransientError(f"{what}: could not reach Azure: {error}", accepted=False)
    if isinstance(error, exceptions.ServiceResponseError):  # sent; the answer was lost or timed out
        return TransientError(f"{what}: no answer from Azure: {error}", accepted=None)
    if isinstance(error, exceptions.HttpResponseError):
        response = getattr(error, "response", None)
        retry_after = response.headers.get("Retry-After") if response is not None else None
        code = error.status_code
        message = f"{what}: {code or 'error'} from Azure: {_first_line(error)}"
        mapped = error_for_status(code, message, retry_after) if code else None
        return mapped or SubmitError(message)
    if isinstance(error, require("azure.ai.ml.exceptions", EXTRA).MlException):  # azure-ai-ml's own errors
        return SubmitError(f"{what}: {error}")
    return error


def _credential_unavailable(error: BaseException) -> bool:
    try:
        from azure.identity import CredentialUnavailableError
    except ImportError:  # a credential of another library was passed in
        return False
    return isinstance(error, CredentialUnavailableError)


def call(fn: Callable[[], T], what: str) -> T:
    """`fn()`, with any azure SDK error raised as crosstrain's (the SDK's error chained as the cause)."""
    try:
        return fn()
    except Exception as error:
        mapped = translate(error, what)
        if mapped is error:
            raise
        raise mapped from error


def stream_logs(client: Any, name: str) -> list[str]:
    """What `MLClient.jobs.stream` prints for the job (it prints rather than yields), once the job has ended.
    A failed job's stream ends in azure-ai-ml's `JobException`: the job's state says so, not its logs."""
    import contextlib
    import io

    from azure.ai.ml.exceptions import JobException

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        try:
            call(lambda: client.jobs.stream(name), f"stream the logs of job {name}")
        except SubmitError as error:
            if not isinstance(error.__cause__, JobException):
                raise
    return out.getvalue().splitlines()


def raise_for_status(response: Any, what: str) -> None:
    """A raw pipeline response's failure status as crosstrain's error (a 404 included: callers that expect one
    look at the status first)."""
    code = int(response.status_code)
    if code < 400:
        return
    try:
        payload = response.json()
        detail = str(((payload or {}).get("error") or {}).get("message", "")) if isinstance(payload, dict) else ""
    except ValueError:
        detail = response.text()[:300] if callable(getattr(response, "text", None)) else ""
    message = f"{what}: {code} from Azure" + (f": {detail}" if detail else "")
    if code in (401, 403):
        raise SubmitError(
            f"{message}. Fix: {LOGIN_FIX}; the identity needs a role on the workspace that may create jobs "
            "(e.g. AzureML Data Scientist)"
        )
    error = error_for_status(code, message, response.headers.get("Retry-After"))
    assert error is not None  # code >= 400
    raise error


def _first_line(error: BaseException) -> str:
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__


def upload_blobs(
    container_sas_url: str,
    blobs: list[tuple[str, Callable[[], bytes]]],
    *,
    metadata: dict[str, str],
    timeout: float,
    what: str,
    workers: int = 8,
) -> None:
    """Upload each (blob name, its bytes) to the container a SAS URL names, with azure-storage-blob as
    azure-ai-ml does (`ContainerClient.from_container_url`, MD5-validated content, overwrite), `workers` at a
    time; then `metadata` on the first blob (azure-ai-ml's indicator: its `upload_status: completed`).
    Errors come back as crosstrain's: a retry uploads everything again (overwrite: the same names, the same
    bytes)."""

    storage = require("azure.storage.blob", EXTRA)
    container = storage.ContainerClient.from_container_url(
        container_sas_url, connection_timeout=timeout, read_timeout=timeout, retry_total=0
    )
    with container:
        upload_blobs_to(container, blobs, metadata=metadata, what=what, workers=workers)


def upload_blobs_to(
    container: Any,
    blobs: list[tuple[str, Callable[[], bytes]]],
    *,
    metadata: dict[str, str],
    what: str,
    workers: int = 8,
) -> None:
    """`upload_blobs` to a `ContainerClient` (`blob_container`: a datastore's account, with its secret), which
    the caller closes."""
    from concurrent.futures import ThreadPoolExecutor

    def put(blob: tuple[str, Callable[[], bytes]]) -> None:
        name, read = blob
        data = read()
        container.upload_blob(name, data, overwrite=True, validate_content=bool(data))

    with ThreadPoolExecutor(max_workers=max(1, min(workers, len(blobs)))) as pool:
        call(lambda: list(pool.map(put, blobs)), what)
    if blobs:
        first = blobs[0][0]
        call(lambda: container.get_blob_client(first).set_blob_metadata(metadata), what)


def blob_metadata(container: Any, name: str, what: str) -> dict[str, str] | None:
    """The metadata of blob `name` (azure-ai-ml's `check_blob_exists` reads its upload indicator so); None where
    there is no such blob."""
    exceptions = require("azure.core.exceptions", EXTRA)
    try:
        properties = call(lambda: container.get_blob_client(name).get_blob_properties(), what)
    except SubmitError as error:
        if isinstance(error.__cause__, exceptions.ResourceNotFoundError):
            return None
        raise
    return dict(properties.metadata or {})


def blob_container(
    account_url: str, container: str, credential: Any, *, transport: Any = None, timeout: float = 30.0
) -> Any:
    """A `ContainerClient` of azure-storage-blob, as azure-ai-ml reads a datastore (`get_storage_client`):
    the account URL the datastore names, a SAS token, account key or token credential; crosstrain retries."""
    storage = require("azure.storage.blob", EXTRA)
    extra: dict[str, Any] = {"transport": transport} if transport is not None else {}
    return storage.ContainerClient(
        account_url,
        container,
        credential=credential,
        connection_timeout=timeout,
        read_timeout=timeout,
        retry_total=0,
        **extra,
    )
