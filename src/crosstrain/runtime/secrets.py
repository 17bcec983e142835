"""Read the job's secrets on the node, then run the training command: `python -m crosstrain.runtime.secrets -- CMD`.

Where a platform has no secret variables of its own (Vertex AI, AI Platform Training, Azure ML), the render
puts each secret's *reference* in `CROSSTRAIN_SECRET_<NAME>` and runs the command under this module. It reads
each reference with the job's own identity, sets `NAME` to the value, removes the references, and replaces
itself with the command (`exec`, so signals and the exit code are the command's own):

* Google Secret Manager (`projects/<p>/secrets/<s>[/versions/<v>]`, default version `latest`):
  `google-cloud-secret-manager` with Application Default Credentials (the job's service account); the
  payload's CRC32C is checked where the service sends one.
* Azure Key Vault (`https://<vault>.vault.azure.net/secrets/<name>[/<version>]`): `azure-keyvault-secrets`
  with `DefaultAzureCredential` (the compute's managed identity; `AZURE_CLIENT_ID` picks a user-assigned one).

Both SDKs come with `pip install 'crosstrain[secrets]'`. A failure names the variable, the reference and the
fix, exits 2, and never prints a value. `resolve()` takes one reader per store, which is where tests pass the
real SDK clients pointed at a loopback service.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, NoReturn

from crosstrain.errors import CrosstrainError, ExitCode, MissingDependency
from crosstrain.secrets import REFERENCE_PREFIX, RUNTIME_EXTRA, STORE_TITLES, match_reference

if TYPE_CHECKING:
    from azure.core.credentials import TokenCredential
    from google.cloud.secretmanager import SecretManagerServiceClient

#: A reader of one store: the reference in, the value out.
Reader = Callable[[str], str]
#: Seconds one read may take before it fails (the SDKs retry inside it).
TIMEOUT = 60.0


class SecretError(CrosstrainError):
    """A secret could not be read; says which variable, which reference and the fix, never a value."""

    exit_code = ExitCode.INVALID

    def __init__(self, name: str, reference: str, problem: str, fix: str) -> None:
        self.name, self.reference, self.problem, self.fix = name, reference, problem, fix
        super().__init__(f"{name} ({reference}): {problem}\n    fix: {fix}")


def _require(module: str, package: str) -> Any:
    import importlib

    try:
        return importlib.import_module(module)
    except ImportError:
        raise MissingDependency(
            f"{package} is not installed: pip install '{RUNTIME_EXTRA}' in the image (or add {package} to it)"
        ) from None


def google_reader(client: SecretManagerServiceClient | None = None) -> Reader:
    """Reads Secret Manager references with `client` (default: the SDK's, with Application Default Credentials)."""
    made: list[SecretManagerServiceClient] = [client] if client is not None else []

    def read(reference: str) -> str:
        if not made:
            made.append(
                _require("google.cloud.secretmanager", "google-cloud-secret-manager").SecretManagerServiceClient()
            )
        name = reference if "/versions/" in reference else f"{reference}/versions/latest"
        response = made[0].access_secret_version(request={"name": name}, timeout=TIMEOUT)
        data: bytes = response.payload.data
        if response.payload.data_crc32c:  # proto3 optional: 0 when the service sent none
            crc32c = _require("google_crc32c", "google-crc32c")
            if int(crc32c.value(data)) != int(response.payload.data_crc32c):
                raise ValueError("the payload's CRC32C does not match: it was corrupted on the way")
        return data.decode("utf-8")

    return read


def azure_reader(credential: TokenCredential | None = None, **client_kwargs: Any) -> Reader:
    """Reads Key Vault references with `credential` (default: `DefaultAzureCredential`); `client_kwargs` go to
    each `SecretClient` (tests pass a `transport`)."""
    credentials: list[TokenCredential] = [credential] if credential is not None else []
    clients: dict[str, Any] = {}  # one per vault; the process execs the command soon after, closing them

    def read(reference: str) -> str:
        found = match_reference(reference)
        assert found is not None, "resolve() reads only references of this store"
        parts = found[1]
        if not credentials:
            credentials.append(_require("azure.identity", "azure-identity").DefaultAzureCredential())
        vault = f"https://{parts['vault']}.{parts['suffix']}"
        if vault not in clients:
            keyvault = _require("azure.keyvault.secrets", "azure-keyvault-secrets")
            clients[vault] = keyvault.SecretClient(vault, credentials[0], **client_kwargs)
        secret = clients[vault].get_secret(parts["name"], parts.get("version"), timeout=TIMEOUT)
        value = secret.value
        if value is None:
            raise ValueError("the secret has no value")
        return str(value)

    return read


#: What to do when a store refuses, by store.
_ACCESS_FIX = {
    "gcp": "grant the job's service account roles/secretmanager.secretAccessor on the secret, and check the name",
    "azure": "grant the compute's managed identity 'get' on the vault's secrets (Key Vault Secrets User), and "
    "check the name",
}


def resolve(environ: Mapping[str, str], readers: Mapping[str, Reader] | None = None) -> dict[str, str]:
    """NAME -> value for every `CROSSTRAIN_SECRET_<NAME>` reference in `environ`; `SecretError` on the first
    that cannot be read. `readers` maps a store (gcp, azure) to its reader; default: the SDKs' own clients."""
    chosen: dict[str, Reader] = dict(readers or {})
    values: dict[str, str] = {}
    for variable, reference in sorted(environ.items()):
        if not variable.startswith(REFERENCE_PREFIX):
            continue
        name = variable[len(REFERENCE_PREFIX) :]  # it starts with it (above)
        found = match_reference(reference)
        if found is None or found[0] not in _ACCESS_FIX:
            raise SecretError(
                name,
                reference,
                "is not a Secret Manager or Key Vault reference",
                "render the job again with crosstrain; do not edit the reference variables",
            )
        store = found[0]
        if store not in chosen:
            chosen[store] = google_reader() if store == "gcp" else azure_reader()
        try:
            values[name] = chosen[store](reference)
        except MissingDependency as error:
            raise SecretError(name, reference, f"cannot read {STORE_TITLES[store]}", str(error)) from None
        except Exception as error:  # the SDKs' own errors, whatever their kind: said once, with the fix
            detail = str(error).splitlines()[0][:300] if str(error) else type(error).__name__
            raise SecretError(
                name,
                reference,
                f"{STORE_TITLES[store]} refused or failed the read: {type(error).__name__}: {detail}",
                _ACCESS_FIX[store],
            ) from None
    return values


def environment(environ: Mapping[str, str], values: Mapping[str, str]) -> dict[str, str]:
    """The command's environment: `environ` less the references, plus the values."""
    return {**{k: v for k, v in environ.items() if not k.startswith(REFERENCE_PREFIX)}, **values}


def main(argv: Sequence[str] | None = None) -> NoReturn:
    args = list(sys.argv[1:] if argv is None else argv)
    command = args[args.index("--") + 1 :] if "--" in args else args
    if not command:
        print("usage: python -m crosstrain.runtime.secrets -- COMMAND [ARGS...]", file=sys.stderr)
        raise SystemExit(ExitCode.INVALID)
    try:
        env = environment(os.environ, resolve(os.environ))
    except SecretError as error:
        print(f"crosstrain.runtime.secrets: {error}", file=sys.stderr)
        raise SystemExit(error.exit_code) from None
    try:
        os.execvpe(command[0], command, env)
    except OSError as error:
        print(f"crosstrain.runtime.secrets: cannot run {command[0]}: {error.strerror}", file=sys.stderr)
        raise SystemExit(127) from None


if __name__ == "__main__":
    main()
