"""The local backend: its plan (pure, read back by the real runtime) and real runs of the quickstart example.

The runs start real processes (torchrun, gloo, a local SparkSession for Databricks) through the CLI, as a user
does, so they are few: the example under every emulation, a rank that fails, Ctrl-C, and a timeout.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest

import crosstrain
from crosstrain.backends.base import Backend
from crosstrain.backends.local import EMULATIONS, LocalBackend, inherited_environment
from crosstrain.backends.loopback import LoopbackPlatform
from crosstrain.errors import SpecError, Unsupported
from crosstrain.launch import plan, with_node_count
from crosstrain.records import JobHandle, JobState, Request
from crosstrain.registry import create_backend
from crosstrain.runtime import detect
from crosstrain.testing.conformance import BackendConformance, SendConformance
from tests.conftest import ROOT
from tests.runtime.test_multiprocess import alive

EXAMPLE = ROOT / "examples" / "ddp-quickstart" / "job.yaml"
JOB = {"name": "t", "command": "python train.py", "workers": {"replicas": 1}, "targets": {"local": {}}}


def render(job: Any = EXAMPLE, environ: dict[str, str] | None = None, **settings: Any) -> Request:
    return crosstrain.render(job, "local", environ=environ or {}, **settings)


def processes(request: Request) -> list[dict[str, Any]]:
    body = request.create.body
    filled: list[dict[str, Any]] = json.loads(
        json.dumps(body["processes"]).replace("${MASTER_PORT}", "29999").replace("${RUN_DIR}", "/run")
    )
    return filled


# -- the plan --------------------------------------------------------------------------------------------------
#: The quickstart asks for a T4 in a managed PyTorch environment, which AI Runtime does not offer (its own machines and
#: environment versions): it is refused there, and tests/backends/test_databricks_air.py runs that emulation.
NOT_THE_QUICKSTARTS = ("databricks-air",)


@pytest.mark.parametrize("emulate", [e for e in EMULATIONS if e not in ("databricks", *NOT_THE_QUICKSTARTS)])
def test_every_rank_reads_its_place_from_the_emulated_environment(emulate: str) -> None:
    """Each planned process's environment, read by the real `runtime.detect` (and the launcher's plan where a
    node runs it), puts ranks 0-3 on nodes 0-1, with the primary on loopback: the emulation is what the runtime
    sees on that platform."""
    request = render(emulate=emulate)
    seen: list[tuple[int, int]] = []
    for process in processes(request):
        env = detect(process["env"])
        assert env.master_addr == "127.0.0.1"
        argv = process["argv"]
        if process["agent"]:  # a node's one process: torchrun starts its ranks
            line = " ".join(argv)
            if "crosstrain.launch" in line:  # as the cloud runs it: the launcher reads the platform's variables
                nnodes = re.search(r"--nnodes (\d+)", line)
                argv = plan(with_node_count(env, int(nnodes.group(1)) if nnodes else None), "2", ["python", "t.py"])
            assert {f"--node_rank={process['node']}", "--nnodes=2", "--nproc_per_node=2"} <= set(argv)
            seen += [(int(rank), int(process["node"])) for rank in process["ranks"]]
        else:  # a rank the platform started itself
            assert (env.rank, env.node_rank, env.world_size) == (process["ranks"][0], process["node"], 4)
            assert env.rank is not None
            assert env.node_rank is not None
            seen.append((env.rank, env.node_rank))
    assert sorted(seen) == [(0, 0), (1, 0), (2, 1), (3, 1)]


def test_a_cloud_emulation_runs_the_command_that_target_renders() -> None:
    two_per_node = crosstrain.load_job(EXAMPLE).model_dump(exclude_unset=True)
    two_per_node |= {"launch": {"processes_per_node": 2}, "primary": {"machine": "n1-standard-8"}}
    located = crosstrain.load_job(EXAMPLE).model_validate(two_per_node).located(EXAMPLE.parent)
    vertex = crosstrain.render(located, "vertex", environ={}).create.body["jobSpec"]["workerPoolSpecs"][0]
    [node0, _] = processes(render(emulate="vertex"))
    # The quickstart ships its folder: Vertex installs the package and runs its module, here from the archive.
    assert node0["argv"] == [
        "python",
        "-m",
        vertex["pythonPackageSpec"]["pythonModule"],
        *vertex["pythonPackageSpec"]["args"],
    ]
    assert node0["argv"][3:10] == ["--", "python", "-m", "crosstrain.launch", "--nproc-per-node", "2", "--"]
    assert node0["env"]["NCCL_DEBUG"] == "WARN"  # the job's env, as the CustomJob carries it
    assert json.loads(node0["env"]["CLUSTER_SPEC"])["task"] == {"type": "workerpool0", "index": 0, "trial": ""}
    [azure0, *_] = processes(render(emulate="azureml"))
    assert azure0["argv"][:4] == ["python", "-m", "crosstrain_code", "--"]  # the code asset's bootstrap
    mpi = processes(render(emulate="azureml-mpi"))
    assert [p["env"]["OMPI_COMM_WORLD_RANK"] for p in mpi] == ["0", "1", "2", "3"]


def test_databricks_runs_torchdistributor_on_the_local_file() -> None:
    [driver] = processes(render(emulate="databricks"))
    # the launcher Databricks runs, from the unpacked archive, on the archive (the quickstart ships its folder)
    assert driver["argv"][:2] == ["python", "crosstrain_code/crosstrain/databricks_task.py"]
    assert any(arg.startswith("--code=") for arg in driver["argv"])
    assert "--num-processes=4" in driver["argv"]  # 2 nodes x 2: one Spark task per rank
    assert "--use-gpu=false" in driver["argv"]
    assert "--file=train.py" in driver["argv"]
    assert "local[4]" in driver["env"]["PYSPARK_SUBMIT_ARGS"]  # a barrier stage needs a slot per task
    assert not any(k.endswith("_SOCKET_IFNAME") for k in driver["env"])  # the cloud's NIC names: not here


def test_render_is_deterministic_and_works_in_the_job_files_folder(tmp_path: Path) -> None:
    first, second = render(), render()
    assert first.to_dict() == second.to_dict()
    assert first.create.body["code"]["folder"] == str(EXAMPLE.parent)  # the job file's folder ships
    assert first.identity.startswith("ddp-quickstart-")
    assert any("ships" in note for note in first.notes)


def test_nodes_and_processes_can_be_capped() -> None:
    request = render(nodes=1, nproc_per_node=3)
    [node] = processes(request)
    assert "--nproc_per_node=3" in node["argv"]
    assert "--nnodes=1" in node["argv"]
    assert any("1 of the job's 2 nodes" in note for note in request.notes)


@pytest.mark.parametrize("emulate", ["torchrun", "vertex"])
def test_more_nodes_than_a_machine_runs_are_refused_unless_capped(emulate: str) -> None:
    """Fuzzed: 10,001 nodes emulating Vertex built a plan whose every node lists every node in CLUSTER_SPEC,
    gigabytes before anything ran."""
    job = {**JOB, "workers": {"replicas": 10000}}
    with pytest.raises(Unsupported) as refused:
        render(job, emulate=emulate)
    [problem] = refused.value.problems
    assert problem.path == "workers.replicas"
    assert "at most 64, and this job has 10001" in problem.message
    assert "--nodes N" in problem.fix
    assert len(processes(render(job, emulate=emulate, nodes=2))) == 2


def test_gpus_are_split_between_nodes_or_left_out() -> None:
    job = {**JOB, "primary": {"machine": "T4:2"}}
    [n0, n1] = processes(render(job, {"CUDA_VISIBLE_DEVICES": "4,5,6,7"}))
    assert (n0["env"]["CUDA_VISIBLE_DEVICES"], n1["env"]["CUDA_VISIBLE_DEVICES"]) == ("4,5", "6,7")
    request = render(job, {"CUDA_VISIBLE_DEVICES": "0"})
    assert {p["env"]["CUDA_VISIBLE_DEVICES"] for p in processes(request)} == {""}
    assert any("gloo on the CPU" in note for note in request.notes)


def test_what_the_emulated_platform_refuses_is_refused_with_its_reason() -> None:
    with pytest.raises(Unsupported, match="reduction_server: local has no reduction server"):
        render({**JOB, "reduction_server": {}})
    job = {**JOB, "launch": {"mode": "per-process", "processes_per_node": 2}}
    with pytest.raises(Unsupported, match="emulating vertex"):
        render(job, emulate="vertex")
    with pytest.raises(Unsupported, match="local cannot run tensorflow jobs"):
        render({**JOB, "launch": {"framework": "tensorflow"}}, emulate="azureml")
    with pytest.raises(SpecError, match="needs a command"):
        render({"name": "t"})


ACCOUNTS = {
    "vertex": {"project": "p", "region": "us-central1", "staging_bucket": "gs://my-bucket"},
    "aiplatform": {"project": "p", "region": "us-central1", "staging_bucket": "gs://my-bucket"},
    "azureml": {"subscription_id": "0" * 8 + "-0000-0000-0000-" + "0" * 12, "resource_group": "r", "workspace": "w"},
    "databricks": {"host": "https://x.cloud.databricks.com"},
}


@pytest.mark.parametrize(
    ("emulate", "machine"),
    [
        ("azureml", "T4:2"),
        ("azureml-mpi", "T4:2"),
        ("vertex", "A10G:1"),
        ("aiplatform", "A10G:1"),
        ("databricks", "T4:3"),
    ],
)
def test_a_machine_the_targets_catalog_lacks_is_refused_as_the_target_refuses_it(emulate: str, machine: str) -> None:
    """The issue's cases: `--emulate azureml` ran `T4:2` and `--emulate vertex` ran `A10G:1`, which the targets
    refuse. The emulation refuses them with the target's own problem, through the target's own render."""
    target = "azureml" if emulate == "azureml-mpi" else emulate
    job = {**JOB, "image": "img:1", "primary": {"machine": machine}, "targets": {}}
    with pytest.raises(Unsupported) as by_target:
        crosstrain.render(job, target, environ={}, **ACCOUNTS[target])
    with pytest.raises(Unsupported) as emulated:
        render({**job, "targets": {"local": {}}}, emulate=emulate)
    [problem] = emulated.value.problems
    [same] = [p for p in by_target.value.problems if p.path == problem.path]
    assert problem.path.startswith("primary.machine.accelerator")
    assert (problem.message, problem.fix) == (f"emulating {target}: {same.message}", same.fix)


def test_the_inherited_environment_places_no_process() -> None:
    outer = {"RANK": "3", "OMPI_COMM_WORLD_RANK": "1", "CLUSTER_SPEC": "{}", "HOME": "/h", "LOCAL_DATA": "x"}
    assert inherited_environment(outer) == {"HOME": "/h", "LOCAL_DATA": "x"}


def test_cli_local_options_need_the_local_target() -> None:
    done = cli("render", str(EXAMPLE), "-t", "vertex", "--emulate", "vertex")
    assert done.returncode == 2
    assert "add --local" in done.stderr
    done = cli("render", str(EXAMPLE), "--local", "--emulate", "vertx")
    assert done.returncode == 2
    assert "targets.local.emulate" in done.stderr


# -- real runs -------------------------------------------------------------------------------------------------
def cli(*args: str, timeout: float = 240) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "crosstrain.cli", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=ROOT,
        env={k: v for k, v in inherited_environment(os.environ).items() if k != "PYTHONPATH"},
    )


def _needs_java(emulate: str) -> None:
    if emulate == "databricks" and not shutil.which("java") and not os.environ.get("JAVA_HOME"):
        (pytest.fail if os.environ.get("CI") else pytest.skip)("no Java for the local SparkSession")


@pytest.mark.parametrize("emulate", EMULATIONS)
def test_the_example_trains_under_every_emulation_where_crosstrain_is_not_installed(
    emulate: str, stock_python: Path
) -> None:
    """The quickstart ships its folder: every node runs the command the target renders with a Python that has
    torch and no crosstrain (a stock image), which imports crosstrain's runtime from the shipped bundle."""
    _needs_java(emulate)
    done = cli("run", str(EXAMPLE), "--local", "--emulate", emulate, "--set", f"python={stock_python}")
    if emulate in NOT_THE_QUICKSTARTS:  # refused with the platform's reasons, before anything starts
        assert done.returncode == 2, done.stderr[-3000:]
        assert "does not offer T4" in done.stderr
        return
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    finals = dict(re.findall(r"rank (\d)/4 done in [\d.]+s: params (\w+)", done.stderr))
    assert sorted(finals) == ["0", "1", "2", "3"], done.stderr[-3000:]
    assert len(set(finals.values())) == 1  # DDP kept every rank's parameters identical
    losses = [float(x) for x in re.findall(r"epoch \d/5: loss ([\d.]+)", done.stderr)]
    assert losses[-1] < losses[0] / 5
    assert "SUCCEEDED" in done.stderr
    if emulate != "databricks":  # torchrun's events or the processes themselves give each rank's exit code
        assert re.findall(r"rank (\d) \[node\d\]: exit 0", done.stderr) == ["0", "1", "2", "3"]
        assert re.search(r"^\[node1 rank3\] rank 3/4 done", done.stderr, re.MULTILINE)


FAILS_ON_RANK_1 = """
    import os, time
    from pathlib import Path
    import torch.distributed as dist
    from crosstrain import runtime
    Path(os.environ["PID_DIR"], str(os.getpid())).touch()
    with runtime.init() as env:
        if env.rank == 1:
            raise RuntimeError("rank 1 fails on purpose")
        for _ in range(3000):
            time.sleep(0.1)
            dist.barrier()
"""


def failing_job(tmp_path: Path, script: str, **extra: Any) -> Path:
    (tmp_path / "train.py").write_text(textwrap.dedent(script))
    (tmp_path / "pids").mkdir()
    job = {**JOB, "env": {"PID_DIR": str(tmp_path / "pids")}, "launch": {"processes_per_node": 2}, **extra}
    path = tmp_path / "job.yaml"
    path.write_text(json.dumps(job))
    return path


def assert_no_strays(pid_dir: Path) -> None:
    pids = [int(p.name) for p in pid_dir.iterdir()]
    assert pids
    deadline = time.monotonic() + 60  # a generous bound: a loaded machine reaps killed processes late
    while any(alive(pid) for pid in pids) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not [pid for pid in pids if alive(pid)]


@pytest.mark.parametrize("emulate", ["torchrun", "azureml"])
def test_a_failing_rank_ends_the_run_fast_with_its_error_and_nothing_left(emulate: str, tmp_path: Path) -> None:
    job = failing_job(tmp_path, FAILS_ON_RANK_1)
    started = time.monotonic()
    done = cli("run", str(job), "--local", "--emulate", emulate, timeout=120)
    assert time.monotonic() - started < 60
    assert done.returncode == 4, done.stderr[-3000:]
    assert "RuntimeError: rank 1 fails on purpose" in done.stderr
    assert re.search(r"^\[node0 rank1\] .*rank 1 fails on purpose", done.stderr, re.MULTILINE)
    assert "FAILED" in done.stderr
    assert "the first failure seen" in done.stderr
    assert_no_strays(tmp_path / "pids")


SLEEPS = """
    import os, sys, time
    from pathlib import Path
    Path(os.environ["PID_DIR"], str(os.getpid())).touch()
    print("up", flush=True)
    time.sleep(600)
"""


@pytest.mark.parametrize(
    ("sig", "code"), [(signal.SIGINT, 130), (signal.SIGTERM, 143), (signal.SIGHUP, 129)], ids=["ctrl-c", "term", "hup"]
)
def test_a_stopping_signal_stops_every_process_and_leaves_nothing(
    tmp_path: Path, sig: signal.Signals, code: int
) -> None:
    """Ctrl-C, a CI cancel or `timeout` (SIGTERM), a closed terminal (SIGHUP), once every rank is up: every
    process stops and the staged code and run folders go. The waits are for events (each rank's pid file, the
    CLI's exit), bounded generously: a loaded machine is slow, not wrong. Should the CLI hang, its stacks show."""
    job = failing_job(tmp_path, SLEEPS, code=".")
    (tmp_path / "tmp").mkdir()
    run = subprocess.Popen(
        [sys.executable, "-X", "faulthandler", "-m", "crosstrain.cli", "run", str(job), "--local"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        cwd=ROOT,
        env={**inherited_environment(os.environ), "TMPDIR": str(tmp_path / "tmp")},
    )
    deadline = time.monotonic() + 300
    while len(list((tmp_path / "pids").iterdir())) < 4 and run.poll() is None and time.monotonic() < deadline:
        time.sleep(0.1)
    started = len(list((tmp_path / "pids").iterdir()))
    run.send_signal(sig if started == 4 else signal.SIGABRT)  # SIGABRT: faulthandler shows the stacks
    try:
        _, err = run.communicate(timeout=300)
    except subprocess.TimeoutExpired:
        run.send_signal(signal.SIGABRT)
        _, err = run.communicate()
        pytest.fail(f"still running 300 s after {sig.name}:\n{err[-6000:]}")
    assert started == 4, f"{started} of 4 ranks started: {err[-6000:]}"
    assert run.returncode == code, err[-3000:]
    assert "CANCELLED" in err
    assert_no_strays(tmp_path / "pids")
    assert list((tmp_path / "tmp").iterdir()) == []  # the staged code and the run's folder are gone


LEAVES_CHILDREN = """
    import os, subprocess, sys
    from pathlib import Path
    pids = Path(os.environ["PID_DIR"])
    pids.joinpath(str(os.getpid())).touch()
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])  # never waited for
    pids.joinpath(str(child.pid)).touch()
    if os.fork() == 0:  # a daemon: double-forked, in a session of its own, its parent gone
        os.setsid()
        if os.fork() == 0:
            pids.joinpath(str(os.getpid())).touch()
            import time
            time.sleep(600)
        os._exit(0)
    print("done", flush=True)
"""


def test_what_the_ranks_leave_running_is_stopped_when_the_run_ends(tmp_path: Path) -> None:
    """A rank's background child and a double-forked daemon outlive the rank: not the run."""
    job = failing_job(tmp_path, LEAVES_CHILDREN)
    done = cli("run", str(job), "--local", "--emulate", "azureml", "--set", "grace_seconds=2", timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "SUCCEEDED" in done.stderr
    assert len(list((tmp_path / "pids").iterdir())) == 12  # 4 ranks, each with a child and a daemon
    assert_no_strays(tmp_path / "pids")


def test_the_jobs_timeout_stops_it(tmp_path: Path) -> None:
    job = failing_job(tmp_path, SLEEPS, scheduling={"timeout": 3})
    done = cli("run", str(job), "--local", "--emulate", "azureml", "--set", "grace_seconds=1", timeout=120)
    assert done.returncode == 4
    assert "stopped after 3s (scheduling.timeout)" in done.stderr
    assert_no_strays(tmp_path / "pids")


def test_the_handle_holds_the_outcome(tmp_path: Path) -> None:
    job = failing_job(tmp_path, "import os, pathlib; pathlib.Path(os.environ['PID_DIR'], str(os.getpid())).touch()\n")
    handle = create_backend("local").submit(
        crosstrain.load_job(job), {"workdir": str(tmp_path), "emulate": "azureml", "nodes": 1}
    )
    assert handle.status().state is crosstrain.JobState.SUCCEEDED
    assert handle.wait().state is crosstrain.JobState.SUCCEEDED
    again = crosstrain.JobHandle.loads(handle.dumps())
    assert [r["exit_code"] for r in again.ref["outcome"]["ranks"]] == [0, 0]


HUGE_LINE = """
    import sys
    chunk = "x" * 1_000_000
    for _ in range(400):
        sys.stdout.write(chunk)
    print(flush=True)
    print("after the long line", flush=True)
"""


def test_a_400_mb_line_keeps_the_cli_small_and_loses_only_what_the_marker_says(tmp_path: Path) -> None:
    job = failing_job(tmp_path, HUGE_LINE)
    measure = (
        "import resource, subprocess, sys\n"
        "done = subprocess.run(sys.argv[1:], capture_output=True)\n"
        "sys.stderr.buffer.write(done.stderr)\n"
        "peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss\n"
        "print(f'PEAK {peak} EXIT {done.returncode}', file=sys.stderr)\n"
    )
    command = [sys.executable, "-m", "crosstrain.cli", "run", str(job), "--local", "--emulate", "azureml"]
    done = subprocess.run(
        [sys.executable, "-c", measure, *command, "--set", "nodes=1", "--set", "nproc_per_node=1"],
        capture_output=True,
        timeout=300,
        cwd=ROOT,
        env=inherited_environment(os.environ),
    )
    peak_kib, code = map(int, re.findall(rb"PEAK (\d+) EXIT (-?\d+)", done.stderr)[0])
    assert code == 0, done.stderr[-3000:]
    assert peak_kib < 300 * 1024  # the CLI and the rank, whichever was larger
    lines = [line for line in done.stderr.splitlines() if line.startswith(b"[node0]")]  # the ranks' output
    assert lines[0] == b"[node0] " + b"x" * 65_536
    assert f"{400_000_000 - 65_536:,} more were left out".encode() in lines[1]
    assert lines[2:] == [b"[node0] after the long line"]


def test_logs_read_only_the_runs_own_log_never_a_path_the_handle_names(tmp_path: Path) -> None:
    """Handles travel: one crafted to name /proc/self/environ (or any file) as its log prints nothing of it."""
    job = failing_job(tmp_path, "print('the run said this')\n")
    runs = tmp_path / "runs"
    backend = create_backend("local", settings={"runs_dir": str(runs)})
    handle = backend.submit(crosstrain.load_job(job), {"workdir": str(tmp_path), "emulate": "azureml", "nodes": 1})
    assert any("the run said this" in line for line in backend.logs(handle))
    elsewhere = create_backend("local")  # a job-named runs_dir: found by the handle kept beside the log
    assert any("the run said this" in line for line in elsewhere.logs(JobHandle.loads(handle.dumps())))
    secret = tmp_path / "secret"
    secret.write_text("DATABRICKS_TOKEN=dapi-secret\n")
    for log, job_id in [
        ("/proc/self/environ", handle.job_id),
        (str(secret), handle.job_id),
        (str(secret), "../../secret"),
        (str(runs / "x" / "output.log"), "local-20260101-000000-beef"),
    ]:
        crafted = json.loads(handle.dumps())
        crafted["ref"]["outcome"]["log"], crafted["job_id"] = log, job_id
        with pytest.raises(Unsupported, match="has no log"):
            list(elsewhere.logs(JobHandle.loads(json.dumps(crafted))))


class TestLocalConformance(BackendConformance):
    target = "local"
    settings = {"workdir": "/tmp/crosstrain-conformance"}
    methods = ("RUN",)
    refused = [
        ({"reduction_server": {"replicas": "auto"}}, "reduction server"),
        ({"parameter_servers": {"replicas": 2}}, "parameter servers"),
        ({"evaluators": {"replicas": 1}}, "evaluators"),
        ({"launch": {"framework": "tensorflow"}}, "tensorflow"),
    ]


class TestLocalVertexConformance(TestLocalConformance):
    """An emulation renders the cloud target's request on the way: that must stay pure too."""

    settings = {"workdir": "/tmp/crosstrain-conformance", "emulate": "vertex"}
    reads_targets = ("vertex",)
    # Emulating Vertex AI, a reduction server is left out (a note says so): the nodes all-reduce directly.
    refused = [case for case in TestLocalConformance.refused if "reduction_server" not in case[0]]


class RecordingLocalBackend(LocalBackend):
    """The local backend, keeping the handle of every run it made."""

    def __init__(self, runs: list[JobHandle]) -> None:
        super().__init__(environ={})
        self.runs = runs

    def send(self, request: Request) -> JobHandle:
        handle = super().send(request)
        self.runs.append(handle)
        return handle


class LocalMachine(LoopbackPlatform):
    """This machine: a one-rank job that exits at once, run per-process as Azure ML starts ranks (no torchrun)."""

    native_states = tuple(state.value for state in JobState if state.terminal)  # what a finished run records

    def __init__(self, folder: Path) -> None:
        (folder / "train.py").write_text("print('trained')\n")
        self.settings = {"workdir": str(folder), "emulate": "azureml", "nodes": 1, "nproc_per_node": 1}
        self.runs: list[JobHandle] = []

    def backend(self) -> Backend[Any, Any]:
        return RecordingLocalBackend(self.runs)

    def inject(self, operation: str, fault: str) -> None:
        raise AssertionError("the local target has no server to play faults")

    def live_jobs(self, identity: str) -> list[str]:
        return [run.job_id for run in self.runs if run.identity == identity]

    def set_state(self, handle: JobHandle, native: str) -> None:
        handle.ref["outcome"]["state"] = native

    def child_backend(self) -> str:
        return "from crosstrain.backends.local import LocalBackend\nbackend = LocalBackend()\n"


class TestLocalSends(SendConformance):
    target = "local"
    job_changes = {"image": None, "command": "python train.py", "args": [], "workers": {"replicas": 0}}
    create_faults = ()
    reads_in_submit = False
    adopts = False
    cancels = False

    @pytest.fixture
    def platform(self, tmp_path: Path) -> LoopbackPlatform:
        return LocalMachine(tmp_path)
