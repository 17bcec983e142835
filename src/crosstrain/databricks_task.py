"""The Databricks task: run a training file or module under TorchDistributor, and fail when any rank fails.

The `databricks` backend uploads the job's code bundle (`crosstrain.packaging`: the user's folder and
crosstrain's runtime, this module included) as one archive, and this very file next to it. The run's
`spark_python_task` runs this file on the driver:

    crosstrain_task.py --code=/Workspace/.../crosstrain_code-1.0.tar.gz --num-processes=2 --local-mode=false
                       --use-gpu=true --file=train.py -- ARGS

Started as a file, it unpacks the archive to the driver's local disk and imports crosstrain from there (the
cluster has no crosstrain installed). `main` then calls `TorchDistributor(num_processes, local_mode,
use_gpu).run(train_on_rank, ...)`. `train_on_rank` travels to the Spark tasks by value (cloudpickle), so the
workers need no crosstrain either: each training process unpacks the same archive (read through the
`/Workspace` or `/Volumes` FUSE path every node sees) once per node, puts crosstrain and the user's folder on
`sys.path`, changes into the user's folder and runs the target there, as `python -m crosstrain_code` does.

TorchDistributor hides training failures: its torchrun wrapper exits 0 and `run()` returns None whatever the
ranks did (every pyspark from 3.4 to 4.3). So the training file runs inside `train_on_rank`, in function mode:

* a rank whose script raises or exits non-zero produces no output; in distributed mode (one process per
  Spark task, since the task GPU amount stays 1) that task raises and the barrier stage fails;
* in local mode all ranks share one torchrun and one output file (the last rank to finish wins), so each
  rank that finished also leaves a marker in a driver-local directory, and every rank's marker must be there;
* every rank returns the same value, holding this run's token, which `run()` must hand back.

Anything else fails the task (`TrainingFailed`), so the Databricks run and `crosstrain wait` report FAILED.

This module imports only the standard library at import time: the backend's render uses `DistributorCall`
to build the task parameters, and the render path must not import pyspark or torch.
"""

from __future__ import annotations

import os
import sys

if (
    not __name__.endswith("databricks_task")  # started as a file (STARTED below), not imported
    and globals().get("__file__")
    and sys.path
    and sys.path[0] == os.path.dirname(os.path.abspath(globals()["__file__"]))
):
    # Started as a file from inside an unpacked bundle (crosstrain_code/crosstrain/databricks_task.py): that
    # folder, first on sys.path, holds crosstrain's secrets.py, which would shadow the standard library's.
    del sys.path[0]

import argparse
import hashlib
import io
import shutil
import tarfile
import tempfile
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

#: Whether this file was started (the run's python_file, `python -m`), not imported as a module. Databricks
#: runs a Python task's file as `__main__`; any name but an imported one counts, so the task never succeeds
#: silently by doing nothing.
STARTED = not __name__.endswith("databricks_task")

#: The console script of an installed crosstrain (`python_wheel_task`), for clusters that have it.
ENTRY_POINT = "crosstrain-databricks"
#: The name this file is uploaded under, beside the archive: the run's `spark_python_task.python_file`.
LAUNCHER_NAME = "crosstrain_task.py"
#: The package folder of an unpacked bundle (`crosstrain.packaging.PACKAGE`; this module imports no crosstrain).
PACKAGE = "crosstrain_code"


def _flag(value: str) -> bool:
    if value.lower() in ("true", "1", "yes"):
        return True
    if value.lower() in ("false", "0", "no"):
        return False
    raise argparse.ArgumentTypeError(f"{value!r} is not true or false")


@dataclass(frozen=True)
class DistributorCall:
    """`TorchDistributor(num_processes, local_mode, use_gpu).run(<file or module>, *args)`, as task parameters."""

    num_processes: int
    local_mode: bool
    use_gpu: bool
    kind: Literal["file", "module", "shell"]
    target: str
    args: tuple[str, ...] = ()
    #: The code bundle: its archive on a path every node sees, or a folder holding it unpacked ("" for none).
    code: str = ""
    #: DeepSpeed: `DeepspeedTorchDistributor(numGpus=num_processes // nodes, nnodes=nodes, ...)` instead; its
    #: config ("" for none). The ranks' `--deepspeed --deepspeed_config` are in `args`, as the job gives them.
    deepspeed: bool = False
    nodes: int = 1
    deepspeed_config: str = ""

    def parameters(self) -> list[str]:
        """The command-line parameters of the Databricks task; `parse` reads them back."""
        deepspeed = [f"--deepspeed-nodes={self.nodes}", f"--deepspeed-config={self.deepspeed_config}"]
        return [
            *([f"--code={self.code}"] if self.code else []),
            f"--num-processes={self.num_processes}",
            f"--local-mode={str(self.local_mode).lower()}",
            f"--use-gpu={str(self.use_gpu).lower()}",
            *(deepspeed if self.deepspeed else []),
            f"--{self.kind}={self.target}",
            "--",
            *self.args,
        ]

    def distributor(self) -> str:
        """The call as Python, for the task's log."""
        if self.deepspeed:
            config = self.deepspeed_config or None
            return (
                f"DeepspeedTorchDistributor(numGpus={self.num_processes // self.nodes}, nnodes={self.nodes}, "
                f"localMode={self.local_mode}, useGpu={self.use_gpu}, deepspeedConfig={config!r})"
            )
        return (
            f"TorchDistributor(num_processes={self.num_processes}, local_mode={self.local_mode}, "
            f"use_gpu={self.use_gpu})"
        )

    @classmethod
    def parse(cls, argv: Sequence[str]) -> DistributorCall:
        parser = argparse.ArgumentParser(
            prog=ENTRY_POINT, description="Run a training file or module under TorchDistributor."
        )
        parser.add_argument("--code", default="", help="the code bundle's archive, or a folder holding it unpacked")
        parser.add_argument("--num-processes", type=int, required=True)
        parser.add_argument("--local-mode", type=_flag, required=True)
        parser.add_argument("--use-gpu", type=_flag, required=True)
        parser.add_argument("--deepspeed-nodes", type=int, help="DeepspeedTorchDistributor's nnodes (DeepSpeed jobs)")
        parser.add_argument("--deepspeed-config", default="", help="its deepspeedConfig")
        target = parser.add_mutually_exclusive_group(required=True)
        target.add_argument("--file", help="a training script, at the same path on every node")
        target.add_argument("--module", help="a training module, importable on every node")
        target.add_argument("--shell", help="a shell line, run by bash on every rank")
        argv = list(argv)
        split = argv.index("--") if "--" in argv else len(argv)
        ns = parser.parse_args(argv[:split])
        if ns.num_processes < 1:
            parser.error("--num-processes must be at least 1")
        nodes = ns.deepspeed_nodes
        if nodes is not None and (nodes < 1 or ns.num_processes % nodes):
            parser.error("--deepspeed-nodes must divide --num-processes")
        kind: Literal["file", "module", "shell"] = "file" if ns.file else "module" if ns.module else "shell"
        code = os.path.abspath(ns.code) if ns.code else ""  # the ranks run from elsewhere
        args = tuple(argv[split + 1 :])
        target = ns.file or ns.module or ns.shell
        deepspeed = {"deepspeed": True, "nodes": nodes, "deepspeed_config": ns.deepspeed_config} if nodes else {}
        return cls(ns.num_processes, ns.local_mode, ns.use_gpu, kind, target, args, code, **deepspeed)


class UnsafeArchive(Exception):
    """An archive member that a code bundle never holds: the archive is refused."""


def checked(member: tarfile.TarInfo) -> tarfile.TarInfo:
    """`member` made safe to write (a plain mode, no owner from the archive), or `UnsafeArchive` where it is not
    a regular file or a folder named under the destination."""
    parts = member.name.replace("\\", "/").split("/")
    if member.name.startswith(("/", "\\")) or os.path.isabs(member.name) or os.path.splitdrive(member.name)[0]:
        raise UnsafeArchive(f"{member.name!r} is an absolute name: it would be written outside the folder")
    if ".." in parts:
        raise UnsafeArchive(f"{member.name!r} holds '..': it would be written outside the folder")
    if not (member.isfile() or member.isdir()):
        kinds = {
            tarfile.SYMTYPE: "symlink",
            tarfile.LNKTYPE: "hard link",
            tarfile.CHRTYPE: "character device",
            tarfile.BLKTYPE: "block device",
            tarfile.FIFOTYPE: "fifo",
        }
        kind = kinds.get(member.type, f"member of type {member.type!r}")
        raise UnsafeArchive(f"{member.name!r} is a {kind}; a code bundle holds only files and folders")
    member.mode = 0o755 if member.isdir() or member.mode & 0o100 else 0o644  # no setuid, setgid or sticky bit
    member.uid = member.gid = 0  # with no names: root's own files where root unpacks, else the user's
    member.uname = member.gname = ""
    return member


def extract(archive: str, dest: str) -> None:
    """Unpack the code bundle `archive` into the folder `dest`, safely on every Python: regular files and folders
    only, named under `dest`, with plain modes. A link, a device or a fifo is refused (`UnsafeArchive`): a
    bundle holds none (`crosstrain.packaging` writes files only), and links are how tarfile's own filter was
    bypassed. Where Python has that `data` filter (3.12, 3.11.4, 3.10.12 on) it applies as well; where it has
    none (Debian 12's 3.11.2, 3.10.0 to 3.10.11) this check alone stands between the archive and the disk.

    The one extraction of a bundle: the local target imports it, the Vertex FUSE bootstrap runs its source
    inline, and it lives in this file because the Databricks launcher (this file) runs it before the bundle,
    and so any other crosstrain module, is unpacked. Standard library only."""
    with tarfile.open(archive) as tar:
        if hasattr(tarfile, "data_filter"):
            tar.extractall(dest, filter=lambda member, path: tarfile.data_filter(checked(member), path))
        else:
            for member in tar.getmembers():
                tar.extract(checked(member), dest)


def unpack(code: str) -> Path:
    """The folder holding `crosstrain_code/`: `code` itself, or its archive unpacked once per node.

    The archive's path names its content (the bundle's digest is in it), so the folder is named by the path;
    it is unpacked beside its final name and renamed into place, so processes that race here all see a
    complete folder."""
    if os.path.isdir(code):
        return Path(code)
    base = Path(os.environ.get("CROSSTRAIN_UNPACK_DIR") or tempfile.gettempdir()) / "crosstrain-code"
    folder = base / hashlib.sha256(code.encode()).hexdigest()[:32]
    if not (folder / PACKAGE).is_dir():
        base.mkdir(parents=True, exist_ok=True)
        scratch = Path(tempfile.mkdtemp(prefix=f"{folder.name}.", dir=base))
        extract(code, str(scratch))
        top = next(p for p in scratch.iterdir() if (p / PACKAGE).is_dir())  # crosstrain_code-1.0/
        try:
            top.rename(folder)
        except OSError:  # another process was first
            if not (folder / PACKAGE).is_dir():
                raise
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
    return folder


def enter(root: Path) -> Path:
    """Make this process run as `python -m crosstrain_code` would: crosstrain and the user's folder importable
    (here and in every process it starts), the user's folder the working folder. Returns that folder."""
    package = root / PACKAGE
    source = package / "src"
    for path in (str(source), str(package)):
        if path not in sys.path:
            sys.path.insert(0, path)
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(package), str(source), os.environ.get("PYTHONPATH")]))
    os.environ["CROSSTRAIN_CODE_DIR"] = str(source)
    source.mkdir(exist_ok=True)  # a bundle of the runtime alone has no user files
    os.chdir(source)
    return source


#: Set by a local run's Databricks emulation: every rank's lines are tagged `[rankN] `, as torchrun tags them, so
#: the one driver that relays them all says whose each line is.
RANK_TAGS = "CROSSTRAIN_RANK_TAGS"


class _Tagged(io.TextIOBase):
    """A text stream that starts every line it passes on with a tag."""

    def __init__(self, stream: Any, tag: str) -> None:
        super().__init__()
        self.stream, self.tag, self.pending = stream, tag, ""

    def write(self, text: str) -> int:
        self.pending += text
        lines = self.pending.split("\n")
        self.pending = lines.pop()
        for line in lines:
            self.stream.write(self.tag + line + "\n")
        if lines:
            self.stream.flush()
        return len(text)

    def flush(self) -> None:
        if self.pending:
            self.stream.write(self.tag + self.pending)
            self.pending = ""
        self.stream.flush()


def train_on_rank(
    kind: str, target: str, args: list[str], token: str, marker_dir: str | None, code: str = ""
) -> dict[str, Any]:
    """Runs in every training process: the user's script as `__main__` (or the shell line, with this rank's
    RANK, LOCAL_RANK and WORLD_SIZE in its environment), then proof that this rank finished."""
    import runpy
    import subprocess

    if code:
        enter(unpack(code))
    sys.argv = [target, *args]
    tagged = bool(os.environ.get(RANK_TAGS))
    streams = sys.stdout, sys.stderr
    if tagged:  # a local run relays every rank through one driver: each line says whose it is
        tag = "[rank{}] ".format(os.environ.get("RANK", "?"))
        sys.stdout, sys.stderr = _Tagged(sys.stdout, tag), _Tagged(sys.stderr, tag)
    try:
        if kind == "shell":
            sys.stdout.flush()
            line = ["bash", "-c", target, *args]
            if tagged:
                shell = subprocess.Popen(line, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
                for raw in shell.stdout or ():
                    sys.stdout.write(raw.decode("utf-8", "replace"))
                returncode = shell.wait()
            else:
                returncode = subprocess.run(line, check=False).returncode
            if returncode:
                raise SystemExit(returncode)
        elif kind == "file":
            sys.path.insert(0, os.path.dirname(os.path.abspath(target)))
            runpy.run_path(target, run_name="__main__")
        else:
            runpy.run_module(target, run_name="__main__", alter_sys=True)
    except SystemExit as exit_:
        if exit_.code not in (None, 0):
            raise
    finally:
        if tagged:
            sys.stdout.flush()
            sys.stderr.flush()
            sys.stdout, sys.stderr = streams
    if marker_dir is not None:
        Path(marker_dir, f"rank-{os.environ.get('RANK', '0')}").write_text(token)
    return {"ok": True, "token": token}


def failures(call: DistributorCall, result: Any, token: str, marker_dir: str | None) -> list[str]:
    """Why the run failed, judged from what `run()` returned and the ranks' markers; empty when it succeeded."""
    found: list[str] = []
    if result != {"ok": True, "token": token}:
        found.append(f"TorchDistributor returned {result!r}, not this run's success value: a rank failed")
    if marker_dir is not None:
        missing = [r for r in range(call.num_processes) if not Path(marker_dir, f"rank-{r}").is_file()]
        if missing:
            found.append(f"rank(s) {', '.join(map(str, missing))} of {call.num_processes} did not finish")
    return found


def main(argv: Sequence[str] | None = None) -> int:
    call = DistributorCall.parse(sys.argv[1:] if argv is None else argv)
    from pyspark.ml.torch.distributor import TorchDistributor
    from pyspark.sql import SparkSession

    SparkSession.builder.getOrCreate()  # on Databricks: the cluster's session
    if call.code:
        # The workers have no crosstrain installed: ship `train_on_rank` (and what it calls here) by value.
        from pyspark import cloudpickle

        cloudpickle.register_pickle_by_value(sys.modules[train_on_rank.__module__])  # type: ignore[no-untyped-call]
    token = uuid.uuid4().hex
    print(f"crosstrain: {call.distributor()}.run({call.target!r}, *{list(call.args)!r})", flush=True)
    with tempfile.TemporaryDirectory(prefix="crosstrain-ranks-") as scratch:
        marker_dir = scratch if call.local_mode else None
        distributor: TorchDistributor
        if call.deepspeed:
            # Its own command line (`--deepspeed --deepspeed_config`) is the generated file's, which
            # `train_on_rank` replaces with the job's: the job's args carry the same two arguments.
            from pyspark.ml.deepspeed.deepspeed_distributor import DeepspeedTorchDistributor

            distributor = DeepspeedTorchDistributor(
                numGpus=call.num_processes // call.nodes,
                nnodes=call.nodes,
                localMode=call.local_mode,
                useGpu=call.use_gpu,
                deepspeedConfig=call.deepspeed_config or None,
            )
        else:
            distributor = TorchDistributor(
                num_processes=call.num_processes, local_mode=call.local_mode, use_gpu=call.use_gpu
            )
        try:
            result = distributor.run(
                train_on_rank, call.kind, call.target, list(call.args), token, marker_dir, call.code
            )
        except Exception as exc:  # a failed barrier stage surfaces as Py4JJavaError, a missing output as RuntimeError
            print(f"crosstrain: training failed: {type(exc).__name__}: {exc}", file=sys.stderr, flush=True)
            return 1
        problems = failures(call, result, token, marker_dir)
    for problem in problems:
        print(f"crosstrain: training failed: {problem}", file=sys.stderr, flush=True)
    return 1 if problems else 0


class TrainingFailed(RuntimeError):
    """Raised by the task's entry point: a Databricks wheel task calls the function and ignores what it returns,
    so only an exception fails the task, the run and `crosstrain wait`."""


def run(argv: Sequence[str] | None = None) -> None:
    """The `crosstrain-databricks` entry point of the wheel task: `main()`, raising when training failed."""
    if main(argv) != 0:
        raise TrainingFailed("training failed on at least one rank; the reason is in the lines above")


def _code_argument(argv: Sequence[str]) -> str:
    for arg in argv:
        if arg == "--":
            break
        if arg.startswith("--code="):
            return arg[len("--code=") :]
    return ""


if STARTED:
    # Started as the uploaded file (the run's python_file), or as `python -m crosstrain.databricks_task`.
    # With a bundle, crosstrain is imported from it (the cluster has none installed); and always through the
    # imported module, so `train_on_rank` is pickled as `crosstrain.databricks_task`'s, not `__main__`'s.
    if _code_argument(sys.argv[1:]):
        root = unpack(os.path.abspath(_code_argument(sys.argv[1:])))
        sys.path.insert(0, str(root / PACKAGE))
    from crosstrain import databricks_task

    databricks_task.run(sys.argv[1:])
