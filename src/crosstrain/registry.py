"""The backend registry: names -> module paths, imported on first use.

Built-in backends are listed here as strings, so `import crosstrain` imports none of them. Third-party
backends register under the entry-point group `crosstrain.backends` (`name = "package.module:Class"`); they
are added to the built-ins, never replace them.
"""

from __future__ import annotations

import importlib
import warnings
from typing import TYPE_CHECKING, Any

from crosstrain.errors import MissingDependency, UnknownBackend, closest
from crosstrain.frozen import frozen

if TYPE_CHECKING:
    from crosstrain.backends.base import Backend

ENTRY_POINT_GROUP = "crosstrain.backends"


@frozen
class BackendEntry:
    name: str
    target: str  # "package.module:Class"
    summary: str
    extra: str | None = None  # pip extra that submit needs
    emulations: tuple[str, ...] = ()  # the `--emulate` names of its `Backend.emulation_module`'s EMULATION

    @property
    def install_hint(self) -> str:
        return f"pip install 'crosstrain[{self.extra}]'" if self.extra else "pip install crosstrain"


BUILTIN_BACKENDS: dict[str, BackendEntry] = {
    entry.name: entry
    for entry in (
        BackendEntry(
            "local",
            "crosstrain.backends.local:LocalBackend",
            "this machine: a multi-node cluster of local processes, with a platform's environment emulated",
            "runtime",
        ),
        BackendEntry(
            "fake",
            "crosstrain.backends.fake:FakeBackend",
            "a cloud in a local directory, for tests, demos and CI dry runs",
        ),
        BackendEntry(
            "aiplatform",
            "crosstrain.backends.aiplatform:AIPlatformBackend",
            "legacy AI Platform Training (shut down 2025-01-31)",
            "aiplatform",
            ("aiplatform",),
        ),
        BackendEntry(
            "azureml",
            "crosstrain.backends.azureml:AzureMLBackend",
            "Azure ML command jobs",
            "azureml",
            ("azureml", "azureml-mpi"),
        ),
        BackendEntry(
            "vertex", "crosstrain.backends.vertex:VertexBackend", "Vertex AI custom training", "vertex", ("vertex",)
        ),
        BackendEntry(
            "databricks",
            "crosstrain.backends.databricks:DatabricksBackend",
            "Databricks one-time runs that call TorchDistributor on a GPU cluster",
            "databricks",
            ("databricks",),
        ),
        BackendEntry(
            "databricks-air",
            "crosstrain.backends.databricks_air:DatabricksAIRBackend",
            "Databricks AI Runtime (serverless GPU) runs",
            "databricks",
            ("databricks-air",),
        ),
    )
}

_registered: dict[str, BackendEntry] = {}


def register(name: str, target: str, *, summary: str = "", extra: str | None = None) -> None:
    """Register a backend in this process (a notebook, a test). Built-in names cannot be replaced."""
    if name in BUILTIN_BACKENDS:
        raise ValueError(f"{name!r} is a built-in backend and cannot be replaced")
    _registered[name] = BackendEntry(name, target, summary, extra)


def _entry_points() -> dict[str, BackendEntry]:
    from importlib.metadata import entry_points

    found = {}
    for ep in entry_points(group=ENTRY_POINT_GROUP):
        if ep.name in BUILTIN_BACKENDS:
            warnings.warn(f"ignoring plugin backend {ep.name!r} ({ep.value}): the name is built in", stacklevel=3)
            continue
        found[ep.name] = BackendEntry(ep.name, ep.value, f"plugin from {ep.dist.name if ep.dist else '?'}")
    return found


def entries() -> dict[str, BackendEntry]:
    """Every backend: built-ins, then plugins, then ones registered in this process."""
    return {**_entry_points(), **_registered, **BUILTIN_BACKENDS}


def _entry(name: str) -> BackendEntry:
    # Built-ins and in-process registrations need no entry-point scan (importlib.metadata costs ~25 ms).
    entry = BUILTIN_BACKENDS.get(name) or _registered.get(name)
    if entry:
        return entry
    known = entries()
    if name in known:
        return known[name]
    close = closest(name, known)
    hint = f"; did you mean {close!r}?" if close else "."
    raise UnknownBackend(f"unknown target {name!r}{hint} Valid targets: {', '.join(sorted(known))}")


def get_backend_class(name: str) -> type[Backend[Any, Any]]:
    entry = _entry(name)
    module_name, _, attr = entry.target.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise MissingDependency(
            f"the {name} backend needs {exc.name or 'a missing package'}: {entry.install_hint}"
        ) from exc
    cls: type[Backend[Any, Any]] = getattr(module, attr)
    return cls


def create_backend(name: str, **kwargs: Any) -> Backend[Any, Any]:
    """A backend instance. `retry=` and `environ=` are common; each backend names its own client injection
    point for tests (`cloud=`, `client=`, `session=`, `transport=`...)."""
    return get_backend_class(name)(**kwargs)
