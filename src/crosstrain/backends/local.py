"""`local`: run a job on this machine as a small multi-node cluster of processes, with a platform's environment.

`render()` returns the plan: the processes `run` starts, with their command lines and the variables each gets.
Where a platform starts one process per node (torchrun, Vertex AI, AI Platform, Azure ML per-node) a plan entry
is that node's process, whose torchrun starts the ranks; where it starts the ranks itself (Azure ML per-process,
MPI) an entry is one rank; for Databricks it is the driver, whose TorchDistributor runs the ranks as Spark tasks
on a local SparkSession. Every node lives on 127.0.0.1.

For a cloud emulation the job is first rendered by that target's own backend (with placeholder account settings
where the job file has none), and the plan runs the command, arguments and environment from that request, so a
local run goes through the launcher path the cloud would take, and is refused for the same reasons.

`send()` runs the plan in the foreground (`crosstrain.backends._supervisor`) and returns a handle that holds the
outcome. Container images are not pulled: commands run in this Python environment.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import importlib.util
import os
import shutil
import sys
import tempfile
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from pydantic import Field, field_validator

from crosstrain import catalog, code_archive, data, locations, packaging, pricing
from crosstrain.backends import local_sweep
from crosstrain.backends.base import Backend, Capabilities, Ids, bundle_command, read_bounded
from crosstrain.backends.binding import shown
from crosstrain.backends.emulation import LOOPBACK, PATH, PORT, RUN_DIR, STAGE_DIR, Emulation, Node, ranks
from crosstrain.databricks_task import extract
from crosstrain.errors import (
    CrosstrainError,
    FunctionFailed,
    JobFailed,
    MissingDependency,
    Problem,
    SpecError,
    Unsupported,
    closest,
)
from crosstrain.function import RESULT
from crosstrain.launch import torchrun_options, with_node_arguments
from crosstrain.packaging import ARCHIVE_NAME, PACKAGE, VERSION, CodeRef
from crosstrain.records import HttpCall, JobHandle, JobState, JobStatus, JobSummary, Request
from crosstrain.registry import BUILTIN_BACKENDS, get_backend_class
from crosstrain.secrets import SECRET_STORES
from crosstrain.settings import TargetSettings
from crosstrain.spec import Launch, TrainingJob
from crosstrain.spec_fields import Machine, SecretRef
from crosstrain.untrusted import excerpt

#: Plain torchrun on every node: the emulation no platform declares.
TORCHRUN = "torchrun"
#: Each `--emulate` name a platform declares -> that platform's target (`BackendEntry.emulations`).
EMULATED: dict[str, str] = {name: entry.name for entry in BUILTIN_BACKENDS.values() for name in entry.emulations}
#: Every `--emulate` name: torchrun, then each built-in platform's.
EMULATIONS: tuple[str, ...] = (TORCHRUN, *EMULATED)


def _emulation(target: str) -> Emulation | None:
    """The emulation a platform declares (the `EMULATION` of its backend's `emulation_module`); None for plain
    torchrun."""
    module = get_backend_class(target).emulation_module if target else None
    if module is None:
        return None
    emulation = importlib.import_module(module).EMULATION
    if not isinstance(emulation, Emulation):
        raise TypeError(f"{module}.EMULATION is a {type(emulation).__name__}, not an Emulation")
    return emulation


# The variables a platform or launcher sets; inherited ones would make every process believe it is some rank.
_CLUSTER_NAMES = frozenset(
    {
        "RANK",
        "WORLD_SIZE",
        "LOCAL_RANK",
        "LOCAL_WORLD_SIZE",
        "NODE_RANK",
        "GROUP_RANK",
        "GROUP_WORLD_SIZE",
        "ROLE_RANK",
        "ROLE_WORLD_SIZE",
        "ROLE_NAME",
        "MASTER_ADDR",
        "MASTER_PORT",
        "CLUSTER_SPEC",
        "TF_CONFIG",
        "CLOUD_ML_JOB_ID",
        "CROSSTRAIN_PLATFORM",
        "PYSPARK_SUBMIT_ARGS",
    }
)
_CLUSTER_PREFIXES = (
    "OMPI_COMM_WORLD_",
    "PMI_",
    "MPI_LOCAL",
    "MV2_COMM_WORLD_",
    "AZ_BATCH",
    "AZUREML_",
    "PET_",
    "TORCHELASTIC_",
)
PLACEHOLDER_IMAGE = "local-emulation/no-image:latest"
#: The most nodes one machine runs: every node is a process here, and some platforms' variables list every node.
MAX_NODES = 64


def inherited_environment(environ: Mapping[str, str]) -> dict[str, str]:
    """The caller's environment without the variables that say where a process stands in a cluster."""
    return {k: v for k, v in environ.items() if k not in _CLUSTER_NAMES and not k.startswith(_CLUSTER_PREFIXES)}


class LocalSettings(TargetSettings):
    emulate: str = Field(
        TORCHRUN,
        description="Whose environment each node gets: torchrun (plain torchrun per node), or a platform's, where "
        f"its command runs as that platform starts it: {', '.join(EMULATED)}.",
        json_schema_extra={"enum": list(EMULATIONS)},
    )

    @field_validator("emulate")
    @classmethod
    def _known(cls, value: str) -> str:
        if value not in EMULATIONS:
            raise ValueError(f"is not an emulation; choose one of {', '.join(EMULATIONS)}")
        return value

    nodes: int | None = Field(
        None, ge=1, le=MAX_NODES, description="Run at most this many nodes. Default: all of the job's."
    )
    nproc_per_node: int | None = Field(
        None, ge=1, le=64, description="Processes per node. Default: the job's (its GPUs per node, or 1)."
    )
    workdir: str | None = Field(
        None, description="Folder the command runs in. Default: the job file's folder, else the current one."
    )
    python: str | None = Field(
        None,
        description="The Python that runs the nodes' commands. Default: this one. Point it at an environment "
        "with torch and without crosstrain to prove that a job with `code:` runs in a stock image.",
    )
    runs_dir: str = Field(
        "~/.cache/crosstrain/local-runs",
        description="Where each run keeps its output (output.log, and one log per process), which "
        "`crosstrain logs HANDLE` prints after the run.",
    )
    grace_seconds: float = Field(
        10.0, ge=0, allow_inf_nan=False, description="How long stopped processes get before they are killed."
    )
    inputs: dict[str, str] = Field(
        default_factory=dict,
        description="Local stand-ins for the job's inputs, by name (NAME: PATH, relative to the job file): read here "
        "in place of the input's cloud location, so one job file runs here on a sample and there on the data. "
        "`--input NAME=PATH` on the command line.",
    )
    outputs: dict[str, str] = Field(
        default_factory=dict,
        description="Local stand-ins for the job's outputs, by name (NAME: PATH): written here in place of the "
        "output's cloud location. `--output NAME=PATH` on the command line.",
    )


class LocalBackend(Backend[LocalSettings, None]):
    """This machine. Example: `crosstrain run job.yaml --local --emulate vertex`."""

    name = "local"
    pure_render = False  # its render reads this machine: its folder, its GPUs, the emulated target's upload
    handle_ref = {"outcome": dict}
    title = "This machine (a local multi-node cluster of processes)"
    settings_model = LocalSettings
    extra = "runtime"
    capabilities = Capabilities(
        logs=True,
        code=True,
        requirements=True,  # not installed here (noted): the job runs in `python`'s environment
        environments=True,  # not pulled here either (noted)
        per_pool_images=True,  # images are not pulled: every pool runs in this Python environment
        per_pool_machines=True,
        per_pool_commands=True,
        spot=True,  # no capacity to choose here: spot changes nothing
        reduction_server=True,  # with --emulate vertex only (platform_refusals): left out, all-reduce runs directly
        frameworks=frozenset({"pytorch", "mpi", "deepspeed"}),
        # A secret's value comes from the caller's environment (the processes inherit it), never from a store.
        secret_stores=frozenset(SECRET_STORES),
        sweeps=local_sweep.SUPPORT,
    )

    def cost(self, job: TrainingJob, settings: LocalSettings, plan: None) -> pricing.Cost:
        return pricing.free(self.name, "it runs on this machine", job.scheduling.timeout)

    def platform_refusals(self, job: TrainingJob, settings: LocalSettings) -> list[Problem]:
        problems: dict[str, Problem] = {}
        emulation = _emulation(EMULATED.get(settings.emulate, ""))
        if emulation is None:  # an emulated platform refuses a scale tier itself, but aiplatform
            problems.update((p.path, p) for p in catalog.scale_tier_problems(job.pools(), self.name))
        if job.reduction_server and not (emulation and emulation.reduction_server):
            problems["reduction_server"] = Problem(
                "reduction_server",
                "local has no reduction server (a Vertex AI feature)",
                f"remove `reduction_server`, or run with --emulate {' or '.join(_with_reducers())} (which leaves the "
                "reducers out)",
            )
        if settings.nodes is None and job.nodes > MAX_NODES:
            problems["workers.replicas"] = Problem(
                "workers.replicas",
                f"a local run starts every node on this machine, at most {MAX_NODES}, and this job has {job.nodes}",
                f"run the first nodes only with --nodes N (targets.local.nodes), N at most {MAX_NODES}",
            )
        for pool in job.pools():
            for name, (ref, path) in pool.secrets.items():
                if name not in self.environ and path not in problems:
                    problems[path] = Problem(
                        path,
                        f"{name} names a secret ({ref.secret}); a local run takes its value from your environment, "
                        f"where {name} is not set (crosstrain reads no secret store from this machine)",
                        f"export {name}=... before running",
                    )
        return list(problems.values())

    def data_refusals(self, job: TrainingJob, settings: LocalSettings) -> list[Problem]:
        """A local run reads and writes local paths (relative to the job file) in place; a cloud location is
        reached only on that cloud's nodes, and no emulation reaches it from here."""
        problems = []
        for direction in ("inputs", "outputs"):
            declared = getattr(job, direction)
            for name in getattr(settings, direction):
                if name not in declared:
                    close = closest(name, declared)
                    if close:
                        fix = f"did you mean {close}?"
                    elif declared:
                        fix = f"name one of the job's {direction}: {', '.join(declared)}"
                    else:
                        fix = f"remove it: the job declares no {direction}"
                    problems.append(
                        Problem(
                            f"targets.local.{direction}.{name}",
                            f"the job has no {direction[:-1]} {name!r} to stand in for",
                            fix,
                        )
                    )
        for direction, name, location in data.locations(job):
            stand_in = getattr(settings, direction).get(name)
            if stand_in is not None:
                why = _unreadable(job.base_dir, stand_in) if direction == "inputs" else None
                if why:
                    problems.append(
                        Problem(f"targets.local.inputs.{name}", why, "create it, or name the local copy of the data")
                    )
                continue
            if location.path is None:
                problems.append(data.unreachable(direction, name, location, "a local run", "a local folder"))
            elif data.kind(location) != "local":
                problems.append(
                    data.refusal(
                        direction,
                        name,
                        f"a local run reads and writes local paths only, and {location.path} is "
                        f"{locations.KIND_TITLES[data.kind(location)]}, which only the cloud's nodes reach (crosstrain "
                        "copies no data here, under any emulation)",
                        f"copy the data here and point {direction}.{name} at the local folder (relative to the job "
                        "file)",
                    )
                )
            elif direction == "inputs" and (why := _unreadable(job.base_dir, str(location.path))):
                problems.append(
                    data.refusal(
                        direction, name, why, "create it, or point the input at a local copy of the data", "path"
                    )
                )
        return problems

    def node_path(self, job: TrainingJob, settings: LocalSettings, direction: str, name: str, location: Any) -> str:
        stand_in = getattr(settings, direction).get(name)
        return os.path.abspath(job.base_dir / (stand_in if stand_in is not None else str(location.path)))

    def _render(self, job: TrainingJob, settings: LocalSettings, plan: None, ids: Ids) -> Request:
        if job.sweep is not None:  # one local run per trial
            return local_sweep.render(self, job, settings, ids)
        identity = ids.identity
        places = {
            f"{direction}.{name}": self.node_path(job, settings, direction, name, location)
            for direction, name, location in data.locations(job)
        }
        # The outputs' folders, made when the run starts (a file output's folder is the one that holds it).
        folders = sorted(
            {
                places[f"outputs.{name}"] if out.type != "file" else os.path.dirname(places[f"outputs.{name}"])
                for name, out in job.outputs.items()
            }
        )
        # Their paths are in the commands already: an emulated target renders the job with no data of its own.
        spec, job = job, job.model_copy(update={"inputs": {}, "outputs": {}})
        secret_refs = {name: ref.secret for pool in job.pools() for name, (ref, _) in pool.secrets.items()}
        job = _without_secrets(job)  # their values reach the processes from the caller's environment
        workdir = Path(settings.workdir or os.getcwd()).absolute()
        python = str(Path(settings.python).absolute()) if settings.python else sys.executable
        bundle = packaging.for_job(job)
        nodes = min(job.nodes, settings.nodes or job.nodes)
        primary_gpus = job.primary.machine.gpus if job.primary.machine else 0
        nproc = settings.nproc_per_node or job.processes_per_node(primary_gpus)
        emulation = _emulation(EMULATED.get(settings.emulate, ""))
        sets_nproc = emulation is None or emulation.sets_processes_per_node
        shaped = _shaped(job, nodes, nproc if sets_nproc else None)
        notes: list[str] = []
        if shaped.reduction_server:  # emulating vertex: the reducers only speed up NCCL between GPU nodes
            shaped = shaped.model_copy(update={"reduction_server": None})
            notes.append("the reduction server is not emulated: the nodes all-reduce directly, with the same result")
        emulated: Request | None = None
        if emulation is None:
            processes = _torchrun_nodes(shaped, nproc)
            if bundle is not None:
                for node in processes:
                    node.argv = bundle_command(node.argv)
        else:
            # The emulated job is named by this run's id, so the probe render's placeholder reaches it too.
            run_id = ids.identity.rsplit("-", 1)[-1]
            emulated, rendered_job = self._render_emulated(
                shaped.model_copy(update={"run_id": run_id}), settings.emulate, emulation, job.launch
            )
            notes += [f"{emulated.target}: {note}" for note in emulated.notes]
            if emulated.code is not None:  # exactly what the target uploads (its ignore files: .amlignore...)
                bundle = packaging.check_unchanged(emulated.code)
            processes = emulation.nodes(emulated, rendered_job, nproc)
        gpus_wanted = max((p.machine.gpus if p.machine else 0) for p in job.pools())
        notes += _assign_gpus(processes, nproc, gpus_wanted, emulation is None or emulation.gpus, self.environ)
        if bundle is not None:
            _run_staged(processes)
        _add_local_variables(processes, nodes * nproc, python)
        body: dict[str, Any] = {
            "identity": identity,
            "fingerprint": ids.fingerprint,
            "emulate": settings.emulate,
            "workdir": str(workdir) if bundle is None else f"{STAGE_DIR}/{PACKAGE}-{VERSION}",
            "python": python,
            "image": job.image,
            "nodes": nodes,
            "nproc_per_node": nproc,
            "world_size": nodes * nproc,
            "timeout_seconds": job.scheduling.timeout,
            "filled_in_at_start": {
                PORT: f"a free TCP port on {LOOPBACK}",
                RUN_DIR: "a scratch folder for this run (torchrun's logs), removed at the end",
                PATH: "the caller's PATH",
            },
            "inherits": "the caller's environment, less the variables that place a process in a cluster "
            "(RANK, WORLD_SIZE, MASTER_*, CLUSTER_SPEC, OMPI_*, AZUREML_*, TORCHELASTIC_*...)",
            "processes": [node.to_dict() for node in processes],
        }
        if bundle is not None:
            body["filled_in_at_start"][STAGE_DIR] = "a folder of its own, where the code archive is unpacked"
            body["code"] = {
                "folder": str(bundle.folder),
                "sha256": bundle.digest,
                "files": len(bundle.user_files),
                "bytes": bundle.size,
                "runs_from": f"{STAGE_DIR}: {ARCHIVE_NAME}, the archive every target receives, unpacked",
            }
            notes.append(f"ships {bundle.describe()}")
            if bundle.requirements:
                notes.append(
                    f"requirements ({', '.join(bundle.requirements)}) are not installed here: {python}'s "
                    "environment runs the job"
                )
        if emulated is not None:
            body["rendered_for"] = {"target": emulated.target, "identity": emulated.identity}
            if bundle is not None and emulation is not None and emulation.archived and emulation.archived(emulated):
                body["code"]["runs_from"] += (
                    f"; the user's files as {code_archive.ARCHIVE_PATH}, as the target sends them"
                )
                body["code_archived"] = True
        if job.function_payload is not None:
            body["result_folder"] = job.env["CROSSTRAIN_RESULT_DIR"]
        if places:
            body["data"] = places
            body["output_folders"] = folders
            notes.append("inputs and outputs are read and written in place, whatever their mode")
            for direction, name, location in data.locations(spec):
                if name in getattr(settings, direction):
                    notes.append(
                        f"{direction}.{name}: {places[f'{direction}.{name}']} stands in for {location.path} here "
                        f"(targets.local.{direction})"
                    )
        call = HttpCall(
            "RUN",
            workdir.as_uri(),
            body,
            purpose="start these processes on this machine and wait for them (not an HTTP call)",
        )
        for name, reference in sorted(secret_refs.items()):
            notes.append(f"{name}: the secret {reference}, taken from your environment (its value is not shown)")
        if job.image:
            notes.append(f"the image {job.image} is not pulled: the command runs in this Python environment")
        if nodes < job.nodes:
            notes.append(f"running {nodes} of the job's {job.nodes} nodes (--nodes)")
        return Request(
            self.name,
            identity,
            job.name,
            (call,),
            settings.model_dump(mode="json"),
            tuple(notes),
            code=bundle.ref if bundle else None,
        )

    def _render_emulated(
        self, job: TrainingJob, name: str, emulation: Emulation, launch: Launch
    ) -> tuple[Request, TrainingJob]:
        """The emulated target's own request for `job`, and the job exactly as that target rendered it. The job's
        own `launch` (before this machine's processes per node) is what the platform's refusals judge."""
        target = EMULATED[name]
        variant = dict(emulation.variants[name])
        framework = variant.get("framework")
        if framework and job.launch.framework not in ("pytorch", framework):
            raise Unsupported(
                self.name,
                [
                    Problem(
                        "launch.framework",
                        f"--emulate {name} starts a PyTorch job's ranks as {framework}, and this job's "
                        f"launch.framework is {job.launch.framework}",
                        f"emulate {target} itself: its own settings choose how {job.launch.framework} starts there",
                    )
                ],
            )
        if variant:
            job = job.model_copy(update={"launch": job.launch.model_copy(update=variant)})
        section = {**emulation.placeholder_settings, **job.targets.get(target, {})}
        # No image is pulled here, but the platform wants one named (unless the job asks for its runtime, or for
        # an environment the platform makes from a setting of its own).
        made = any(section.get(key) for key in emulation.environment_settings)
        if not job.image and not job.primary.image and job.environment is None and not made:
            job = job.model_copy(update={"image": PLACEHOLDER_IMAGE})
        job = job.model_copy(update={"targets": {**job.targets, target: section}})
        if emulation.sets_processes_per_node:
            # The platform refuses what it would refuse, machines and its catalog included; then the machines
            # are not emulated: the processes per node (set on the job) say what the platform starts.
            machine = Machine(type=emulation.cpu_machine) if emulation.cpu_machine else None
            named = {  # a pool that names no machine runs on this machine's CPUs: a CPU machine stands in
                pool: getattr(job, pool).model_copy(update={"machine": getattr(job, pool).machine or machine})
                for pool in ("primary", "workers")
            }
            self._emulated_render(target, job.model_copy(update={**named, "launch": launch.model_copy(update=variant)}))
            job = job.model_copy(
                update={
                    pool: getattr(job, pool).model_copy(update={"machine": machine}) for pool in ("primary", "workers")
                }
            )
        return self._emulated_render(target, job), job

    def _emulated_render(self, target: str, job: TrainingJob) -> Request:
        from crosstrain.registry import create_backend

        try:
            return create_backend(target, environ=self.environ, config_profile=self.config_profile).render(job)
        except Unsupported as exc:
            raise Unsupported(
                self.name,
                [dataclasses.replace(p, message=f"emulating {target}: {p.message}") for p in exc.problems],
            ) from None

    # -- run -------------------------------------------------------------------------------------------------
    def send(self, request: Request) -> JobHandle:
        from crosstrain.backends._supervisor import Process, supervise, timed

        body = request.create.body
        if "sweep" in body:
            handle = local_sweep.send(self, request)
            kept = local_sweep.handle_file(request)
            kept.parent.mkdir(parents=True, exist_ok=True)
            _keep(handle, kept)
            return handle
        if importlib.util.find_spec("torch") is None:
            raise MissingDependency("running a job here needs PyTorch: pip install 'crosstrain[runtime]'")
        emulation = _emulation(EMULATED.get(body["emulate"], ""))
        if emulation is not None and emulation.requirements is not None:
            emulation.requirements()
        processes = [
            Process(p["name"], p["node"], list(p["ranks"]), p["argv"], p["env"], bool(p["agent"]), p.get("relays", ""))
            for p in body["processes"]
        ]
        for folder in body.get("output_folders", []):
            Path(folder).mkdir(parents=True, exist_ok=True)
        if body.get("result_folder"):  # what an earlier run of the same function left is not this run's
            folder = Path(body["result_folder"])
            folder.mkdir(parents=True, exist_ok=True)
            for stale in [folder / RESULT, *folder.glob("error-rank*.txt")]:
                stale.unlink(missing_ok=True)
        with contextlib.ExitStack() as stack:
            cwd = body["workdir"]
            if request.code is not None:
                stage = stack.enter_context(tempfile.TemporaryDirectory(prefix="crosstrain-code-"))
                with timed("stage the code"):
                    cwd = cwd.replace(STAGE_DIR, _stage(request.code, Path(stage), bool(body.get("code_archived"))))
            outcome = supervise(
                processes,
                cwd=cwd,
                base_env=inherited_environment(self.environ),
                timeout=body["timeout_seconds"],
                grace=self.request_settings(request).grace_seconds,
                header=_header(request, cwd),
                runs_dir=Path(os.path.expanduser(self.request_settings(request).runs_dir)),
            )
        handle = JobHandle(
            self.name, request.identity, outcome.run_id, console_url="", ref={"outcome": outcome.to_dict()}
        )
        if outcome.log:  # kept beside its log, for `crosstrain list` and `logs`
            _keep(handle, Path(outcome.log).parent / "handle.json")
        return handle

    def function_result(self, job: TrainingJob, settings: LocalSettings) -> tuple[TrainingJob, str]:
        """A folder of its own under `runs_dir`, named by the function and its arguments (emptied when the run
        starts), unless the job names one (`CROSSTRAIN_RESULT_DIR`)."""
        folder = job.env.get("CROSSTRAIN_RESULT_DIR")
        if not isinstance(folder, str):
            digest = hashlib.sha256(job.function_payload or b"").hexdigest()[:16]
            folder = str(Path(os.path.expanduser(settings.runs_dir)).absolute() / "results" / digest)
            job = job.model_copy(update={"env": {**job.env, "CROSSTRAIN_RESULT_DIR": folder}})
        return job, str(Path(folder) / RESULT)

    def result_bytes(self, handle: JobHandle) -> bytes:
        """rank 0's result; a rank's traceback (`FunctionFailed`) where one raised."""
        folder = Path(handle.result_at).parent
        errors = sorted(folder.glob("error-rank*.txt"), key=lambda p: (p.stat().st_mtime_ns, p.name))
        if errors:
            rank = int(errors[0].stem.removeprefix("error-rank"))
            raise FunctionFailed(rank, errors[0].read_text(errors="replace"), len(errors))
        return read_bounded(Path(handle.result_at), "the function's result")

    def read_result(self, handle: JobHandle, *, timeout: float | None = None) -> bytes:
        """A local run has ended when its handle exists: a failed rank's traceback first, then the state."""
        try:
            return super().read_result(handle, timeout=timeout)
        except JobFailed:
            self.result_bytes(handle)  # raises FunctionFailed where a rank left its traceback
            raise

    def list_jobs(self, overrides: Mapping[str, Any] | None = None) -> Iterator[JobSummary]:
        found = []
        runs = self._runs_dir(overrides)
        for path in [*runs.glob("*/handle.json"), *runs.glob("sweeps/*/handle.json")]:  # runs, and sweeps
            try:
                found.append((path.stat().st_mtime, path.parent, JobHandle.loads(path.read_text())))
            except (OSError, SpecError):
                continue
        from crosstrain.sweep import listed

        outcomes = [handle.ref.get("outcome") or {} for *_, handle in found]
        trials = {t.get("run_id") for o in outcomes for t in (o.get("sweep") or {}).get("trials") or []}
        for created, folder, handle in sorted(found, key=lambda item: -item[0]):
            if handle.job_id in trials:  # a sweep's trial: its sweep's row says it
                continue
            status = self.status(handle)
            outcome = handle.ref.get("outcome") or {}
            sweep = listed(outcome) if "sweep" in outcome else None
            yield JobSummary(
                handle.identity, status.state, status.native_state, created, str(folder), handle, sweep=sweep
            )

    def _runs_dir(self, overrides: Mapping[str, Any] | None = None) -> Path:
        settings = self.settings_model.model_validate({**self.overrides, **(overrides or {})})
        return Path(os.path.expanduser(settings.runs_dir)).absolute()

    def _log_of(self, handle: JobHandle) -> Path | None:
        """The run's log: in the run's folder (named by its id) under this machine's `runs_dir`, or under the
        one the job named, where the handle crosstrain kept beside it is this one. Never a path only the handle
        names: handles travel, and a crafted one must not make `logs` print any file."""
        from crosstrain.backends._supervisor import RUN_ID

        if not RUN_ID.fullmatch(handle.job_id):
            return None
        named = (handle.ref.get("outcome") or {}).get("log")
        for folder in [self._runs_dir() / handle.job_id, *([Path(named).parent] if isinstance(named, str) else [])]:
            if folder.name != handle.job_id or not (folder / "output.log").is_file():
                continue
            if folder.parent == self._runs_dir() or _kept_beside(folder, handle):
                return folder / "output.log"
        return None

    def status(self, handle: JobHandle) -> JobStatus:
        outcome = handle.ref.get("outcome") or {}
        state = JobState(outcome.get("state", "UNKNOWN"))
        return JobStatus(state, state.value, outcome.get("message", ""))

    def cancel(self, handle: JobHandle) -> None:
        """A local run ends before its handle exists (Ctrl-C stops a run that is going)."""

    def logs(self, handle: JobHandle, *, follow: bool = False) -> Iterator[str]:
        """What the run printed, as it was streamed (the run is over when its handle exists: nothing to follow)."""
        path = self._log_of(handle)
        if path is None:
            raise Unsupported(
                self.name,
                [
                    Problem(
                        "logs",
                        f"run {shown(handle.job_id)} has no log in {self._runs_dir()} on this machine",
                        "read the output the run printed, or run it again (its log goes to targets.local.runs_dir)",
                    )
                ],
            )
        with open(path, encoding="utf-8", errors="replace") as log:
            for line in log:
                yield line.rstrip("\n")
        cut = (handle.ref.get("outcome") or {}).get("log_cut")
        if cut:
            yield f"crosstrain: {cut}"


def _keep(handle: JobHandle, path: Path) -> None:
    """Write the handle beside the run's log, whole or not at all (a full disk leaves no empty handle.json that
    hides the run from `list`); say so when it cannot be kept."""
    partial = path.with_name(f".{path.name}.partial")
    try:
        partial.write_text(handle.dumps())
        os.replace(partial, path)
    except OSError as exc:
        with contextlib.suppress(OSError):
            partial.unlink(missing_ok=True)
        with contextlib.suppress(OSError, ValueError):
            print(
                f"crosstrain: the run's handle could not be kept in {path.parent} ({exc.strerror or exc}): "
                "`crosstrain list` will not show this run; the handle printed here still reads it",
                file=sys.stderr,
                flush=True,
            )


def _kept_beside(folder: Path, handle: JobHandle) -> bool:
    """Whether `folder` holds the handle crosstrain wrote beside the run's log, for the same run."""
    try:
        kept = JobHandle.loads(read_bounded(folder / "handle.json", "a run's handle", 1 << 20).decode())
    except (OSError, CrosstrainError, UnicodeDecodeError):
        return False
    return (kept.identity, kept.job_id) == (handle.identity, handle.job_id)


def _with_reducers() -> list[str]:
    return [
        name for name, target in EMULATED.items() if (emulation := _emulation(target)) and emulation.reduction_server
    ]


def _header(request: Request, workdir: str) -> str:
    """What the run is, with the folder it runs in (the staged copy's real path, not the request's placeholder)."""
    body = request.create.body
    how = "plain torchrun" if body["emulate"] == "torchrun" else f"the {body['emulate']} environment"
    nodes = packaging.counted(body["nodes"], "node")
    processes = packaging.counted(body["nproc_per_node"], "process", "processes")
    lines = [
        f"crosstrain: running {request.identity} here: {nodes} x {processes}, {how}, in {workdir}",
        f"crosstrain: images are not pulled (there is no container engine): commands run with {body['python']}",
    ]
    return "\n".join(lines + [f"crosstrain: note: {note}" for note in request.notes if "is not pulled" not in note])


def _shaped(job: TrainingJob, nodes: int, nproc: int | None) -> TrainingJob:
    """The job with at most `nodes` nodes and `nproc` processes per node, as the emulated platform gets it."""
    update: dict[str, Any] = {"workers": job.workers.model_copy(update={"replicas": nodes - 1})}
    if nproc is not None:
        update["launch"] = job.launch.model_copy(update={"processes_per_node": nproc})
    return job.model_copy(update=update)


def _without_secrets(job: TrainingJob) -> TrainingJob:
    """The job less its secret variables, which each process inherits from the caller's environment instead."""

    def plain(env: Mapping[str, str | SecretRef]) -> dict[str, str | SecretRef]:
        return {k: v for k, v in env.items() if isinstance(v, str)}

    update: dict[str, Any] = {"env": plain(job.env)}
    for role in ("primary", "workers", "parameter_servers", "evaluators"):
        pool = getattr(job, role)
        if pool is not None:
            update[role] = pool.model_copy(update={"env": plain(pool.env)})
    return job.model_copy(update=update)


def _command(job: TrainingJob, role_index: int) -> list[str]:
    pool = job.pools()[role_index]
    if not pool.command:
        raise SpecError([Problem("command", "a local run needs a command", "set `command`, e.g. python train.py")])
    return [*pool.command, *pool.args]


def _torchrun_nodes(job: TrainingJob, nproc: int) -> list[Node]:
    nodes = []
    for node in range(job.nodes):
        pool = 0 if node == 0 else 1
        command = _command(job, pool)
        if torchrun_options(command) is not None:  # the command's own torchrun is the node's
            argv = with_node_arguments(command, job.nodes, node, LOOPBACK, PORT)
            nodes.append(Node(f"node{node}", node, ranks(node, nproc), argv, dict(job.pools()[pool].env), agent=True))
            continue
        argv = [
            "python",
            "-m",
            "torch.distributed.run",
            f"--nnodes={job.nodes}",
            f"--node_rank={node}",
            f"--nproc_per_node={nproc}",
            f"--master_addr={LOOPBACK}",
            f"--master_port={PORT}",
            "--max_restarts=0",
            "--no_python",
            *command,
        ]
        nodes.append(Node(f"node{node}", node, ranks(node, nproc), argv, dict(job.pools()[pool].env), agent=True))
    return nodes


def _visible_gpus(environ: Mapping[str, str]) -> list[str]:
    """GPU ids this machine shows (without importing torch): `CUDA_VISIBLE_DEVICES`, else the NVIDIA driver's list."""
    if "CUDA_VISIBLE_DEVICES" in environ:
        return [g.strip() for g in environ["CUDA_VISIBLE_DEVICES"].split(",") if g.strip()]
    driver = Path("/proc/driver/nvidia/gpus")
    return [str(i) for i in range(len(list(driver.iterdir())))] if driver.is_dir() else []


def _assign_gpus(plan: list[Node], nproc: int, wanted: int, per_node: bool, environ: Mapping[str, str]) -> list[str]:
    """Each node its own GPUs when there are enough for every rank; else every rank on the CPU, and say so."""
    if not wanted:
        return []
    gpus = _visible_gpus(environ)
    nodes = max(p.node for p in plan) + 1
    if gpus and len(gpus) >= nodes * nproc and per_node:
        for process in plan:
            process.env["CUDA_VISIBLE_DEVICES"] = ",".join(gpus[process.node * nproc : (process.node + 1) * nproc])
        return [f"each node gets {nproc} of this machine's {len(gpus)} GPUs"]
    if gpus:
        for process in plan:
            process.env["CUDA_VISIBLE_DEVICES"] = ""
        return [f"the job's GPUs are not all here ({len(gpus)} for {nodes * nproc} ranks): ranks use gloo on the CPU"]
    return ["this machine has no GPU: ranks use gloo on the CPU"]


def _unreadable(base: Path, path: str) -> str | None:
    """Why a local input cannot be read here (it is missing, or the system refuses its name), or None."""
    shown = excerpt(path)
    try:
        if (base / path).exists():
            return None
    except OSError as exc:  # a name longer than the system takes, and the like
        return f"{shown} cannot be read here: {exc.strerror or exc}"
    return f"{shown} does not exist here (a relative path is read from the job file's folder, {base})"


def _stage(code: CodeRef, folder: Path, archived: bool = False) -> str:
    """The archive of `code`, made and unpacked in `folder` as a platform unpacks or pip-installs it: a local
    run goes through exactly the bytes a cloud target uploads. `archived`: the user's files as the one archive
    the target sends (`crosstrain.code_archive`), for the bootstrap to unpack."""
    made = packaging.check_unchanged(code)
    archive = folder / ARCHIVE_NAME
    with packaging.writing(str(folder)):
        with archive.open("wb") as out:
            made.write_archive(out)
        extract(str(archive), str(folder))
        if archived:
            package = folder / f"{PACKAGE}-{VERSION}" / PACKAGE
            shutil.rmtree(package / packaging.SOURCE_DIR)
            (package / code_archive.ARCHIVED).write_bytes(code_archive.user_archive(made).read())
    return str(folder)


def _run_staged(plan: list[Node]) -> None:
    """Bootstraps never install requirements here (the caller's environment is not the node's; the render's note
    on the bundle's requirements says so once)."""
    for node in plan:
        if "--install" in node.argv[: node.argv.index("--") if "--" in node.argv else 0]:
            node.argv = [a for i, a in enumerate(node.argv) if not (a == "--install" and i < node.argv.index("--"))]


def _add_local_variables(plan: list[Node], processes: int, python: str) -> None:
    """What a machine shared by every node needs: `python` first on PATH, live output, a fair share of cores,
    and, for torchrun agents, rank-prefixed output and per-rank exit codes (torchrun's own `PET_*` switches)."""
    threads = str(max(1, (os.cpu_count() or 1) // processes))
    python_dir = str(Path(python).parent)
    for process in plan:
        extra = {"PATH": f"{python_dir}{os.pathsep}{PATH}", "PYTHONUNBUFFERED": "1"}
        if "OMP_NUM_THREADS" not in process.env:
            extra["OMP_NUM_THREADS"] = threads
        if process.agent:
            extra.update(
                {
                    "PET_TEE": "3",
                    "PET_LOG_DIR": f"{RUN_DIR}/{process.name}",
                    "PET_EVENT_LOG_HANDLER": "console",
                    "TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE": "[rank${rank}] ",
                }
            )
        process.env = {**process.env, **extra}
