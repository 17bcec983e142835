"""`crosstrain.runtime.secrets`: the real Secret Manager and Key Vault clients read references from a loopback
store (Google's REST API, and Key Vault's with its 401 bearer challenge), and the resolver runs a command."""

from __future__ import annotations

import base64
import copy
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from crosstrain.backends.loopback import Call, LoopbackService, Reply, serving
from crosstrain.runtime.secrets import SecretError, azure_reader, environment, google_reader, resolve

ROOT = Path(__file__).resolve().parents[2]
GOOGLE_REF = "projects/my-proj/secrets/hf-token"
VAULT = "https://my-vault.vault.azure.net"
AZURE_REF = f"{VAULT}/secrets/wandb-key"
AZURE_VERSION = "0123456789abcdef0123456789abcdef"


class SecretStores(LoopbackService):
    """Secret Manager's `versions/*:access` and Key Vault's `GET /secrets/<name>[/<version>]`, one service."""

    def __init__(self) -> None:
        super().__init__()
        # (project, secret, version) -> payload; "latest" is its own entry, as the store's alias resolves it.
        self.google: dict[tuple[str, str, str], bytes] = {
            ("my-proj", "hf-token", "latest"): b"hf-value-2",
            ("my-proj", "hf-token", "1"): b"hf-value-1",
        }
        self.forbidden = {("my-proj", "locked", "latest")}
        self.corrupt = {("my-proj", "corrupt", "latest"): b"corrupt-value"}
        self.vault: dict[tuple[str, str], str] = {("wandb-key", ""): "wandb-value", ("wandb-key", AZURE_VERSION): "old"}

    def operation(self, call: Call) -> str:
        return "google" if call.path.startswith("/v1/") else "azure"

    def answer(self, call: Call) -> Reply:
        return self._google(call) if call.path.startswith("/v1/") else self._azure(call)

    def _google(self, call: Call) -> Reply:
        import google_crc32c

        parts = call.path.removeprefix("/v1/").removesuffix(":access").split("/")
        if call.method != "GET" or len(parts) != 6 or not call.path.endswith(":access"):
            return self.error(400, f"unexpected call {call.method} {call.path}")
        key = (parts[1], parts[3], parts[5])
        if key in self.forbidden:
            return self.error(403, f"Permission 'secretmanager.versions.access' denied for {call.path}")
        if key in self.corrupt:
            data = self.corrupt[key]
            crc = int(google_crc32c.value(b"something else"))
        elif key in self.google:
            data = self.google[key]
            crc = int(google_crc32c.value(data))
        else:
            return self.error(404, f"Secret Version [{call.path}] not found or has no versions.")
        name = "/".join([*parts[:4], "versions", parts[5]])
        return Reply(200, {"name": name, "payload": {"data": base64.b64encode(data).decode(), "dataCrc32c": str(crc)}})

    def _azure(self, call: Call) -> Reply:
        if not call.headers.get("Authorization", "").startswith("Bearer "):
            challenge = (
                'Bearer authorization="https://login.microsoftonline.com/tenant", resource="https://vault.azure.net"'
            )
            return Reply(401, {"error": {"code": "Unauthorized"}}, {"WWW-Authenticate": challenge})
        parts = call.path.strip("/").split("/")
        if parts[0] != "secrets" or not call.query.get("api-version"):
            return Reply(400, {"error": {"code": "BadParameter", "message": call.path}})
        key = (parts[1], parts[2] if len(parts) > 2 else "")
        if key not in self.vault:
            return Reply(
                404, {"error": {"code": "SecretNotFound", "message": f"A secret with (name/id) {key[0]} was not found"}}
            )
        version = key[1] or "ffffffffffffffffffffffffffffffff"
        return Reply(
            200,
            {"value": self.vault[key], "id": f"{VAULT}/secrets/{key[0]}/{version}", "attributes": {"enabled": True}},
        )


@pytest.fixture
def stores() -> Iterator[tuple[SecretStores, str]]:
    service = SecretStores()
    with serving(service) as url:
        yield service, url


def google(url: str) -> Any:
    from google.api_core.client_options import ClientOptions
    from google.cloud.secretmanager import SecretManagerServiceClient

    from crosstrain.adaptors import gapic

    client = SecretManagerServiceClient(
        credentials=gapic.anonymous_credentials(), transport="rest", client_options=ClientOptions(api_endpoint=url)
    )
    return google_reader(client)


class _Credential:
    """A token credential that never talks to Entra ID."""

    def get_token(self, *scopes: str, **kwargs: Any) -> Any:
        from azure.core.credentials import AccessToken

        return AccessToken("fake-token", int(time.time()) + 3600)


def azure(url: str) -> Any:
    from azure.core.pipeline.transport import RequestsTransport

    class Loopback(RequestsTransport):  # type: ignore[misc]
        """azure-core's requests transport, sending a copy of each request to the loopback store: the client
        and its challenge policy keep seeing the vault's own https URL."""

        def send(self, request: Any, **kwargs: Any) -> Any:
            sent = copy.copy(request)
            sent.url = url + "/" + request.url.split("/", 3)[3]
            return super().send(sent, **kwargs)

    return azure_reader(_Credential(), transport=Loopback())


def test_secret_manager_references_are_read_with_the_real_client(stores: tuple[SecretStores, str]) -> None:
    service, url = stores
    environ = {
        "CROSSTRAIN_SECRET_HF_TOKEN": GOOGLE_REF,
        "CROSSTRAIN_SECRET_HF_OLD": f"{GOOGLE_REF}/versions/1",
        "PLAIN": "x",
    }
    assert resolve(environ, {"gcp": google(url)}) == {"HF_TOKEN": "hf-value-2", "HF_OLD": "hf-value-1"}
    paths = sorted(c.path for c in service.received)
    assert paths == [
        "/v1/projects/my-proj/secrets/hf-token/versions/1:access",
        "/v1/projects/my-proj/secrets/hf-token/versions/latest:access",
    ]


def test_key_vault_references_are_read_after_the_bearer_challenge(stores: tuple[SecretStores, str]) -> None:
    service, url = stores
    environ = {"CROSSTRAIN_SECRET_WANDB_API_KEY": AZURE_REF, "CROSSTRAIN_SECRET_OLD": f"{AZURE_REF}/{AZURE_VERSION}"}
    assert resolve(environ, {"azure": azure(url)}) == {"OLD": "old", "WANDB_API_KEY": "wandb-value"}
    auth = [c.headers.get("Authorization") for c in service.received]
    assert auth[0] is None, "the first call carries no token: Key Vault's challenge says where one is for"
    assert "Bearer fake-token" in auth


@pytest.mark.parametrize(
    ("reference", "problem", "fix"),
    [
        ("projects/my-proj/secrets/missing", "NotFound", "roles/secretmanager.secretAccessor"),
        ("projects/my-proj/secrets/locked", "403", "roles/secretmanager.secretAccessor"),
        ("projects/my-proj/secrets/corrupt", "CRC32C does not match", "roles/secretmanager.secretAccessor"),
        (f"{VAULT}/secrets/nope", "ResourceNotFoundError", "Key Vault Secrets User"),
        ("my-scope/my-key", "not a Secret Manager or Key Vault reference", "render the job again"),
    ],
)
def test_a_failed_read_names_the_variable_the_reference_and_the_fix(
    stores: tuple[SecretStores, str], reference: str, problem: str, fix: str
) -> None:
    _, url = stores
    with pytest.raises(SecretError) as failed:
        resolve({"CROSSTRAIN_SECRET_TOKEN": reference}, {"gcp": google(url), "azure": azure(url)})
    error = failed.value
    assert (error.name, error.reference) == ("TOKEN", reference)
    assert problem in error.problem
    assert fix in error.fix
    assert "value" not in str(error).replace("Key Vault", ""), "a value never reaches a message"


def test_the_command_gets_the_values_and_not_the_references() -> None:
    environ = {"CROSSTRAIN_SECRET_HF_TOKEN": GOOGLE_REF, "PATH": "/bin"}
    assert environment(environ, {"HF_TOKEN": "v"}) == {"PATH": "/bin", "HF_TOKEN": "v"}


def _run(env: dict[str, str], *code: str) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith("CROSSTRAIN_SECRET_")}
    return subprocess.run(
        [sys.executable, *code],
        env={**base, "PYTHONPATH": str(ROOT / "src"), **env},
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_the_module_runs_the_command_with_its_exit_code() -> None:
    done = _run({}, "-m", "crosstrain.runtime.secrets", "--", sys.executable, "-c", "raise SystemExit(7)")
    assert done.returncode == 7


def test_a_missing_sdk_is_a_clear_error_without_a_traceback() -> None:
    code = (
        "import sys; sys.modules['google.cloud.secretmanager'] = None\n"
        "from crosstrain.runtime.secrets import main\n"
        "main(['--', 'true'])"
    )
    done = _run({"CROSSTRAIN_SECRET_HF_TOKEN": GOOGLE_REF}, "-c", code)
    assert done.returncode == 2
    assert "HF_TOKEN (projects/my-proj/secrets/hf-token)" in done.stderr
    assert "pip install 'crosstrain[secrets]'" in done.stderr
    assert "Traceback" not in done.stderr
