"""Data inputs and outputs: where each target's nodes see `inputs:` and `outputs:`.

A job names its data once (`inputs: {train: gs://b/cifar10}`) and refers to it as `${inputs.train}` in its
command, args and env values. Each backend says, for every location, whether its nodes can reach it
(`Backend.data_refusals`: refused at `inputs.NAME` with the reason, never dropped) and the path where a node
sees it (`Backend.node_path`: `/gcs/b/cifar10` on Vertex AI, `${{inputs.train}}` on Azure ML, ...);
`placed` writes those paths into the job before the backend renders it, so every rendered command, argument
and variable shows what the node gets. Standard library only: this module is on the render path.
"""

from __future__ import annotations

import shlex
from collections.abc import Callable, Iterator, Mapping
from typing import TYPE_CHECKING, Any, TypeVar

from pydantic import BaseModel

from crosstrain.errors import Problem
from crosstrain.frozen import frozen
from crosstrain.locations import AZURE_TYPES, KIND_TITLES
from crosstrain.locations import kind as location_kind
from crosstrain.spec_fields import DATA_REFERENCE

if TYPE_CHECKING:
    from crosstrain.spec import TrainingJob
    from crosstrain.spec_fields import DataInput, DataOutput

    Location = DataInput | DataOutput

_Model = TypeVar("_Model", bound=BaseModel)


def locations(job: TrainingJob) -> Iterator[tuple[str, str, Location]]:
    """(`inputs` or `outputs`, name, location) of every data location of the job."""
    for name, found in job.inputs.items():
        yield "inputs", name, found
    for name, out in job.outputs.items():
        yield "outputs", name, out


def kind(location: Location) -> str:
    """`crosstrain.locations.kind` of the location's path; `none` for an output with no path."""
    return location_kind(location.path) if location.path is not None else "none"


def refusal(direction: str, name: str, message: str, fix: str, field: str = "") -> Problem:
    """A problem at `inputs.NAME` (or `inputs.NAME.mode`...)."""
    return Problem(f"{direction}.{name}{'.' + field if field else ''}", message, fix)


def mode_refusal(direction: str, name: str, location: Location, platform: str, why: str, modes: str) -> Problem:
    """A location whose mode the platform does not have."""
    return refusal(
        direction,
        name,
        f"{platform} has no {location.shown_mode()} mode for {KIND_TITLES.get(kind(location), 'this location')}: {why}",
        f"use mode: {modes}",
        "mode",
    )


def unreachable(direction: str, name: str, location: Location, platform: str, reaches: str) -> Problem:
    """A location the platform's nodes cannot reach."""
    if location.path is None:
        return refusal(
            direction,
            name,
            f"{platform} chooses no place for an output without a path",
            f"give the output a path ({reaches})",
        )
    return refusal(
        direction,
        name,
        f"{platform} nodes cannot reach {location.path} ({KIND_TITLES[kind(location)]}); they reach {reaches}",
        f"put the data where the nodes reach it ({reaches}), or choose a target that reads "
        f"{KIND_TITLES[kind(location)]}",
    )


def placed(job: TrainingJob, node_path: Callable[[str, str, Location], str]) -> TrainingJob:
    """The job with every `${inputs.NAME}` / `${outputs.NAME}` replaced by `node_path(direction, name,
    location)`: the path where the node sees it. In a shell line a path that the shell would split is quoted."""
    if not job.inputs and not job.outputs:
        return job
    paths = {(direction, name): node_path(direction, name, location) for direction, name, location in locations(job)}

    def fill(text: str, shell: bool) -> str:
        def one(found: Any) -> str:
            path = paths[(found[1], found[2])]
            return shlex.quote(path) if shell and not _shell_safe(path) else path

        return DATA_REFERENCE.sub(one, text)

    def pool_update(holder: Any) -> dict[str, Any]:
        update: dict[str, Any] = {}
        if holder.command is not None:
            update["command"] = [fill(word, job.shell) for word in holder.command]
        if holder.args is not None:
            update["args"] = [fill(arg, False) for arg in holder.args]
        update["env"] = {k: fill(v, False) if isinstance(v, str) else v for k, v in holder.env.items()}
        return update

    update = pool_update(job)
    for role in ("primary", "workers", "parameter_servers", "evaluators"):
        pool = getattr(job, role)
        if pool is not None:
            update[role] = _filled(pool, pool_update(pool))
    return _filled(job, update)


def _filled(model: _Model, update: dict[str, Any]) -> _Model:
    """`model` with `update`, and the same fields set as the user set: placing a path sets no field, so a
    target's plan (`"workers" in job.model_fields_set`) reads the placed job as it read the user's."""
    filled = model.model_copy(update=update)
    object.__setattr__(filled, "__pydantic_fields_set__", set(model.model_fields_set))
    return filled


def _shell_safe(path: str) -> bool:
    """Whether `path` stays one word in a shell line as it is (Azure ML's `${{...}}` bindings are replaced by
    the service before the shell sees them)."""
    return shlex.quote(path) == path or (path.startswith("${{") and path.endswith("}}"))


def references(job: TrainingJob) -> Iterator[tuple[str, str, str]]:
    """(field path, direction, name) of every reference in the job's commands, args and env values."""
    for loc, text in job.reference_sites():
        path = ""
        for part in loc:
            path += f"[{part}]" if isinstance(part, int) else (f".{part}" if path else str(part))
        for found in DATA_REFERENCE.finditer(text):
            yield path, found[1], found[2]


@frozen
class Reach:
    """How a platform's nodes reach one kind of location: the modes they take (None: the mode left out), why
    another mode is refused and which to use, and where a node sees the location unless its mode is `direct`
    (a FUSE mount: `/gcs/...`, `/dbfs/...`); None: as written."""

    modes: frozenset[str | None]
    why: str = ""
    fix: str = ""
    mounted_at: Callable[[str], str] | None = None


ALL_MODES: frozenset[str | None] = frozenset({None, "mount", "download", "upload", "direct"})


@frozen
class Placement:
    """Where a platform's nodes reach data, declared as `Capabilities` declares what else it runs: each kind of
    location they reach (`crosstrain.locations.kind`, or `none` for an output without a path) and how; every
    other kind is refused as unreachable, saying what they reach. `azure_types_fix`: how to do without Azure ML's
    own types (a table, a model) where the platform reads none (None: it reads them). `check`: the platform's
    own rules for a location, asked first."""

    platform: str
    reach: Mapping[str, Reach]
    reaches: str
    azure_types_fix: str | None = None
    check: Callable[[str, str, Location], Problem | None] | None = None

    def refusals(self, job: TrainingJob) -> list[Problem]:
        problems = []
        for direction, name, location in locations(job):
            found, mode = self.reach.get(kind(location)), getattr(location, "mode", None)
            own = self.check(direction, name, location) if self.check else None
            if own is not None:
                problems.append(own)
            elif location.type in AZURE_TYPES and self.azure_types_fix is not None:
                message = f"{AZURE_TYPES[location.type]}, which {self.platform} does not read"
                problems.append(refusal(direction, name, message, self.azure_types_fix, "type"))
            elif found is None:
                problems.append(unreachable(direction, name, location, self.platform, self.reaches))
            elif mode not in found.modes:
                problems.append(mode_refusal(direction, name, location, self.platform, found.why, found.fix))
        return problems

    def node_path(self, location: Location) -> str:
        """Where a node sees a location `refusals` let through."""
        path = str(location.path)
        found = self.reach.get(kind(location))
        if found is not None and found.mounted_at is not None and getattr(location, "mode", None) != "direct":
            return found.mounted_at(path)
        return path
