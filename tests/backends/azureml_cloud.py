"""A small Azure ML control plane behind an azure-core transport, for driving the real `MLClient` offline.

`FakeAzureML` is an `HttpTransport`: pass it to `MLClient(..., transport=...)` (or to `AzureMLBackend`) and
every HTTP call the SDK makes lands here instead of the network. It stores PUT resources by their ARM path
(a PUT of an existing path returns it with 200, as create-or-update does), moves each job through a scripted
list of statuses one GET at a time, cancels on `POST .../cancel`, and injects faults: an HTTP status with a
Retry-After header, a connection refused before sending, or a connection dropped after the PUT was stored.
It relies on azure-core internals (`RestRequestsTransportResponse`), pinned with azure-ai-ml 1.35.2.
"""

from __future__ import annotations

import io
import json
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlparse

import requests
from azure.core.credentials import AccessToken, AccessTokenInfo
from azure.core.exceptions import ServiceRequestError, ServiceResponseError
from azure.core.pipeline.transport import HttpTransport
from azure.core.rest._requests_basic import RestRequestsTransportResponse


class FakeCredential:
    """A token credential that never talks to Entra ID."""

    def get_token(self, *scopes: str, **kwargs: Any) -> AccessToken:
        return AccessToken("fake-token", int(time.time()) + 3600)

    def get_token_info(self, *scopes: str, options: Any = None) -> AccessTokenInfo:
        return AccessTokenInfo("fake-token", int(time.time()) + 3600)


TERMINAL = ("Completed", "Failed", "Canceled", "NotResponding")


@dataclass
class Fault:
    """Fail the first request whose method is `method` and whose URL contains `url_part`."""

    method: str
    url_part: str
    kind: str  # "429" / "503" / "500": that status; "connect": refused before sending; "drop": stored, answer lost
    retry_after: str | None = None


@dataclass
class Recorded:
    method: str
    url: str
    body: Any
    headers: dict[str, str]
    outcome: str = ""


@dataclass
class FakeAzureML(HttpTransport):  # type: ignore[misc]
    statuses: Sequence[str] = ("Queued", "Running", "Completed")
    faults: list[Fault] = field(default_factory=list)
    resources: dict[str, dict[str, Any]] = field(default_factory=dict)
    requests: list[Recorded] = field(default_factory=list)
    _plans: dict[str, list[str]] = field(default_factory=dict)

    # HttpTransport's context-manager protocol; nothing to open.
    def __enter__(self) -> FakeAzureML:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def open(self) -> None:
        return None

    def close(self) -> None:
        return None

    @property
    def jobs(self) -> list[str]:
        return [path for path in self.resources if "/jobs/" in path]

    def calls(self, method: str | None = None) -> list[Recorded]:
        return [r for r in self.requests if r.outcome == "answered" and (method is None or r.method == method)]

    def send(self, request: Any, **kwargs: Any) -> Any:
        raw_body = getattr(request, "content", None) or getattr(request, "body", None)
        body = json.loads(raw_body) if raw_body else None
        record = Recorded(request.method, request.url, body, dict(request.headers))
        self.requests.append(record)
        fault = self._fault(request.method, request.url)
        path = urlparse(request.url).path
        if fault and fault.kind == "connect":
            record.outcome = "refused"
            raise ServiceRequestError("connection refused (injected)")
        if fault and fault.kind.isdigit():
            record.outcome = f"status {fault.kind}"
            headers = {"Retry-After": fault.retry_after} if fault.retry_after else {}
            error = {"error": {"code": "Injected", "message": f"injected {fault.kind}"}}
            return _response(request, int(fault.kind), error, headers)
        record.outcome = "answered"
        if request.method == "PUT":
            code, payload = self._put(path, body)
            if fault and fault.kind == "drop":
                record.outcome = "dropped"
                raise ServiceResponseError("connection reset after the request was sent (injected)")
            return _response(request, code, payload)
        if request.method == "GET":
            if path not in self.resources:
                return _response(request, 404, {"error": {"code": "NotFound", "message": f"{path} not found"}})
            return _response(request, 200, self._get(path))
        if request.method == "POST" and path.endswith("/cancel"):
            job = path.removesuffix("/cancel")
            if job not in self.resources:
                return _response(request, 404, {"error": {"code": "NotFound", "message": f"{job} not found"}})
            current = self._plans[job][0]
            if current not in TERMINAL:
                self._plans[job] = ["CancelRequested", "Canceled"]
            return _response(request, 200, {})
        return _response(request, 404, {"error": {"code": "NotFound", "message": "no such endpoint here"}})

    def _fault(self, method: str, url: str) -> Fault | None:
        for i, fault in enumerate(self.faults):
            if fault.method == method and fault.url_part in url:
                return self.faults.pop(i)
        return None

    def _put(self, path: str, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        if path in self.resources:
            return 200, self._get(path, advance=False)
        stored = json.loads(json.dumps(body))
        stored.update(id=path, name=path.rsplit("/", 1)[-1])
        if "/jobs/" in path:
            stored["type"] = "Microsoft.MachineLearningServices/workspaces/jobs"
            stored["properties"]["services"] = {
                "Studio": {"jobServiceType": "Studio", "endpoint": f"https://ml.azure.com/runs/{stored['name']}"}
            }
            self._plans[path] = ["NotStarted", *self.statuses]
        self.resources[path] = stored
        return 201, self._get(path, advance=False)

    def _get(self, path: str, *, advance: bool = True) -> dict[str, Any]:
        stored = json.loads(json.dumps(self.resources[path]))
        plan = self._plans.get(path)
        if plan:
            stored["properties"]["status"] = plan[0]
            if advance and len(plan) > 1:
                plan.pop(0)
        return stored


def _response(request: Any, status: int, payload: Any, headers: dict[str, str] | None = None) -> Any:
    raw = requests.Response()
    raw.status_code = status
    raw.headers["Content-Type"] = "application/json"
    raw.headers.update(headers or {})
    raw._content = json.dumps(payload).encode()
    raw.raw = io.BytesIO(raw._content)
    response = RestRequestsTransportResponse(request=request, internal_response=raw)
    response._content, response._is_closed = raw._content, True
    return response


def faults(*specs: Iterable[str]) -> list[Fault]:
    """`faults(("PUT", "/jobs/", "503"), ...)` -> a list of `Fault`s."""
    return [Fault(*spec) for spec in specs]
