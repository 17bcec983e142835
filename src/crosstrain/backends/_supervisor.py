"""Runs the processes of a local plan as one job.

Output streams live, each line prefixed with its node and rank; progress and the final summary go to stderr.
The first process that fails, the job's timeout or Ctrl-C stops every other process (SIGTERM, then SIGKILL after
a grace period) with all of its descendants, so nothing is left behind. Ranks that torchrun started report their
exit codes through torchrun's own event log (`PET_EVENT_LOG_HANDLER=console`), read off its output here.
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import json
import os
import re
import secrets
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import IO, Any, TextIO

from crosstrain.errors import Stopped
from crosstrain.failures import classify, last_lines
from crosstrain.frozen import frozen
from crosstrain.packaging import counted
from crosstrain.records import JobState

PLACEHOLDERS = ("${MASTER_PORT}", "${RUN_DIR}", "${PATH}")
_EVENT = b'{"name": "torchelastic.worker.status.'
_RANK_TAG = re.compile(r"\[rank(\d+)\] ?")
_POLL_S = 0.05
#: How often a run says it is still running (its processes' own output streams in between).
PROGRESS_S = 30.0


#: The variable every process of a run carries (its value the run's id), and all they start: what is left of a
#: run after it ended is found by it.
RUN_MARK = "CROSSTRAIN_LOCAL_RUN"
#: A local run's id (its folder under `runs_dir`): the only thing of a handle that says where its log is.
RUN_ID = re.compile(r"local-[0-9]{8}-[0-9]{6}-[0-9a-f]{4}")


@dataclass
class Process:
    """One process of the plan: a node's torchrun agent (`agent`), a rank, or the Databricks driver."""

    name: str
    node: int
    ranks: list[int]
    argv: list[str]
    env: dict[str, str]
    agent: bool = False
    #: "spark": its ranks' lines come tagged, each twice (`emulation.Node.relays`); shown once, as that rank's.
    relays: str = ""
    popen: subprocess.Popen[bytes] | None = None
    stopped: bool = False  # this supervisor stopped it: its late output is noise and is not shown
    rank_codes: dict[int, int] = field(default_factory=dict)  # from torchrun's worker events
    #: Its last lines, each with the rank that wrote it where torchrun says (for the failure's summary).
    tail: collections.deque[tuple[int | None, str]] = field(default_factory=lambda: collections.deque(maxlen=400))

    @property
    def returncode(self) -> int | None:
        return None if self.popen is None else self.popen.poll()


@frozen
class RankResult:
    rank: int
    process: str
    exit_code: int | None  # None where it is not known (stopped with its node, or inside Spark)
    note: str = ""

    def line(self) -> str:
        code = "" if self.exit_code is None else f"exit {_code_text(self.exit_code)}"
        return f"rank {self.rank} [{self.process.split()[0]}]: " + ", ".join(filter(None, [code, self.note]))


@frozen
class Outcome:
    run_id: str
    state: JobState
    message: str
    wall_seconds: float
    ranks: tuple[RankResult, ...]
    #: The file that holds every line the run printed, prefixed and in the order streamed (`crosstrain logs`).
    log: str = ""
    #: Where and why that file stops short of what the run printed ("": it holds every line).
    log_cut: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {
            "run_id": self.run_id,
            "state": self.state.value,
            "message": self.message,
            "wall_seconds": round(self.wall_seconds, 3),
            "log": self.log,
            **({"log_cut": self.log_cut} if self.log_cut else {}),
            "ranks": [
                {"rank": r.rank, "process": r.process, "exit_code": r.exit_code, "note": r.note} for r in self.ranks
            ],
        }


def _code_text(code: int) -> str:
    if code < 0:
        try:
            return f"{code} ({signal.Signals(-code).name})"
        except ValueError:
            return str(code)
    return str(code)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _fill(text: str, values: Mapping[str, str]) -> str:
    for placeholder, value in values.items():
        text = text.replace(placeholder, value)
    return text


@contextlib.contextmanager
def timed(phase: str) -> Iterator[None]:
    """Under CROSSTRAIN_DEBUG, `crosstrain: debug: PHASE: N ms` on stderr once the phase ends: where a local
    run's time goes beside the training itself."""
    if not os.environ.get("CROSSTRAIN_DEBUG"):
        yield
        return
    start = time.perf_counter()
    try:
        yield
    finally:
        print(f"crosstrain: debug: {phase}: {(time.perf_counter() - start) * 1000:.0f} ms", file=sys.stderr)


def supervise(
    processes: list[Process],
    *,
    cwd: str,
    base_env: Mapping[str, str],
    timeout: float | None,
    grace: float,
    header: str,
    out: TextIO | None = None,
    err: TextIO | None = None,
    runs_dir: Path | None = None,
) -> Outcome:
    """Start every process, stream their output, stop them all at the first failure; Ctrl-C stops them too and
    is raised again once they are gone. With `runs_dir`, every line is also kept in `<runs_dir>/<run id>/`:
    `output.log` (all of them, in order) and `<process>.log` (one process's)."""
    out, err = out or sys.stdout, err or sys.stderr
    run_id = f"local-{datetime.now(timezone.utc):%Y%m%d-%H%M%S}-{secrets.token_hex(2)}"  # the form of RUN_ID
    logs = _Logs(runs_dir / run_id if runs_dir is not None else None, out)
    lock = threading.Lock()
    pumps: list[threading.Thread] = []
    failure: Process | None = None
    timed_out = False
    interrupted: KeyboardInterrupt | None = None
    _say(err, lock, header)
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="crosstrain-run-") as run_dir, _stopped_by_signals():
        values = dict(zip(PLACEHOLDERS, (str(free_port()), run_dir, base_env.get("PATH", os.defpath)), strict=True))
        try:
            with timed(f"start {counted(len(processes), 'process', 'processes')}"):
                for process in processes:
                    env = {**base_env, RUN_MARK: run_id, **{k: _fill(v, values) for k, v in process.env.items()}}
                    process.popen = subprocess.Popen(
                        [_fill(a, values) for a in process.argv],
                        cwd=cwd,
                        env=env,
                        stdin=subprocess.DEVNULL,
                        stdout=subprocess.PIPE,
                        stderr=subprocess.STDOUT,
                        start_new_session=True,  # its own process group: Ctrl-C reaches this supervisor, which stops it
                    )
                    pump = threading.Thread(target=_pump, args=(process, logs, lock), daemon=True)
                    pump.start()
                    pumps.append(pump)
            started_text = counted(len(processes), "process", "processes")
            _say(err, lock, f"crosstrain: started {started_text}; Ctrl-C stops them all")
            deadline = None if timeout is None else started + timeout
            with timed("run, until every process ended"):
                failure, timed_out = _watch(processes, deadline, lambda text: _say(err, lock, text), started)
        except KeyboardInterrupt as stop:  # Ctrl-C, or SIGTERM or SIGHUP (`Stopped`)
            interrupted = stop
        finally:
            with _no_interrupts(), timed("stop what is left, close the logs"):  # a second signal must not cut the
                # stopping short and leave processes behind
                _stop([p for p in processes if p.popen is not None and p.returncode is None], grace)
                _stop_marked(run_id, grace)  # what the ranks left running: background children, daemons
                for pump in pumps:
                    pump.join(timeout=5)
                logs.close()
    wall = time.monotonic() - started
    outcome = dataclasses.replace(
        _outcome(run_id, processes, failure, timed_out, interrupted, timeout, wall), log=logs.path, log_cut=logs.failed
    )
    if logs.failed:
        _say(err, lock, f"crosstrain: {logs.failed}")
    _say(err, lock, _summary(outcome))
    if interrupted is not None:
        raise interrupted
    return outcome


#: The signals that end a run as Ctrl-C does: a CI cancel or `timeout` (SIGTERM), a closed terminal (SIGHUP).
_TERMINATING = (signal.SIGTERM, signal.SIGHUP)


@contextlib.contextmanager
def _stopped_by_signals() -> Iterator[None]:
    """While a run goes, SIGTERM and SIGHUP raise `Stopped` (a KeyboardInterrupt) in the supervisor, which stops
    every process before it goes; left alone, they would end only the supervisor and orphan the run."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def stop(signum: int, frame: object) -> None:
        raise Stopped(signum)

    previous = {sig: signal.signal(sig, stop) for sig in _TERMINATING}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


@contextlib.contextmanager
def _no_interrupts() -> Iterator[None]:
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {sig: signal.signal(sig, signal.SIG_IGN) for sig in (signal.SIGINT, *_TERMINATING)}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _say(err: TextIO, lock: threading.Lock, text: str) -> None:
    with lock, contextlib.suppress(OSError, ValueError):  # a closed terminal (SIGHUP) must not stop the stopping
        print(text, file=err, flush=True)


def _watch(
    processes: list[Process], deadline: float | None, say: Callable[[str], None], started: float
) -> tuple[Process | None, bool]:
    """Wait until every process succeeded (None, False), one failed (it, False) or the deadline passed; every
    `PROGRESS_S`, say how many are still running and for how long."""
    from crosstrain.progress import elapsed_text

    next_word = started + PROGRESS_S
    while True:
        if time.monotonic() >= next_word:
            running = sum(p.returncode is None for p in processes)
            say(
                f"crosstrain: RUNNING after {elapsed_text(time.monotonic() - started)}: {running} of "
                f"{counted(len(processes), 'process', 'processes')} still running"
            )
            next_word += PROGRESS_S
        codes = [p.returncode for p in processes]
        for process, code in zip(processes, codes, strict=True):
            if code not in (None, 0):
                return process, False
        if all(code == 0 for code in codes):
            return None, False
        if deadline is not None and time.monotonic() >= deadline:
            return None, True
        time.sleep(_POLL_S)


class _Logs:
    """Where the relayed lines go: the console, and the run's log files when there is a folder for them. When
    the files cannot be written (a full disk), the console still gets every line and `failed` says where the
    files stop."""

    def __init__(self, folder: Path | None, out: TextIO) -> None:
        self.out = out
        self.folder = folder
        self.files: dict[str, IO[str]] = {}
        self.all: IO[str] | None = None
        self.path = ""
        self.lines = 0
        self.failed = ""
        if folder is not None:
            try:
                folder.mkdir(parents=True, exist_ok=True)
                self.all = (folder / "output.log").open("w", encoding="utf-8")
                self.path = str(folder / "output.log")
            except OSError as exc:  # no place for logs never stops a run
                self.folder = None
                self.failed = f"no log was kept in {folder}: {exc.strerror or exc}"

    def write(self, process: str, line: str) -> None:
        with contextlib.suppress(OSError, ValueError):  # a closed terminal: the log files still get the line
            self.out.write(line)
            self.out.flush()
        if self.all is None or self.folder is None:
            return
        try:
            if process not in self.files:
                self.files[process] = (self.folder / f"{process}.log").open("w", encoding="utf-8")
            self.all.write(line)
            self.files[process].write(line)
            self.all.flush()
            self.lines += 1
        except OSError as exc:
            self.failed = (
                f"the run's log in {self.folder} stops after {self.lines:,} line(s): {exc.strerror or exc}; "
                "every line was printed here"
            )
            self.close()
            self.folder = None

    def close(self) -> None:
        for handle in [*self.files.values(), *([self.all] if self.all else [])]:
            with contextlib.suppress(OSError):
                handle.close()
        self.files, self.all = {}, None


def _pump(process: Process, logs: _Logs, lock: threading.Lock) -> None:
    """Copy one process's output, line by line, with its prefix; keep torchrun's worker events, not print them."""
    assert process.popen is not None
    assert process.popen.stdout is not None
    stream: IO[bytes] = process.popen.stdout
    held: list[str] = []  # torchrun's exit-barrier error and what follows it: shown only if the agent fails
    twice: dict[tuple[int, str], int] = {}  # a local Spark's copies of each rank's line, counted
    joined = _RankLines(process.ranks)
    for raw in bounded_lines(stream):
        if raw.startswith(_EVENT):
            _record_event(process, raw)
            continue
        if process.stopped:
            continue
        line = raw.decode("utf-8", errors="replace")
        for rank, text in joined.lines(line) if process.agent or process.relays else [(None, line)]:
            _relay(process, rank, text, logs, lock, held, twice)
    for rank, text in joined.rest():
        _relay(process, rank, text, logs, lock, held, twice)
    stream.close()
    if held:
        ended_well = process.popen.wait() == 0
        with lock:
            if ended_well:  # every rank of the node had finished: the store it waited on had gone with node 0
                logs.write(process.name, f"[{process.name}] {_EXIT_BARRIER_NOTE}\n")
            else:
                for text in held:
                    process.tail.append((None, text))
                    logs.write(process.name, text + "\n")


def _relay(
    process: Process,
    rank: int | None,
    text: str,
    logs: _Logs,
    lock: threading.Lock,
    held: list[str],
    twice: dict[tuple[int, str], int],
) -> None:
    """Show one whole line of a process, tagged with its rank where it has one."""
    if rank is not None and process.relays == "spark":
        twice[rank, text] = twice.get((rank, text), 0) + 1
        if twice[rank, text] % 2 == 0:  # the second copy of a line this rank wrote once
            return
    shown = (f"[{process.name} rank{rank}] " if rank is not None else f"[{process.name}] ") + text
    if process.agent and (held or _EXIT_BARRIER in text) and len(held) < _HELD_LINES:
        held.append(shown)
        return
    # a process that is one rank (Azure ML per process, MPI) says everything as that rank
    alone = process.ranks[0] if not process.agent and len(process.ranks) == 1 else None
    process.tail.append((rank if rank is not None else alone, shown))
    with lock:
        logs.write(process.name, shown + "\n")


class _RankLines:
    """Whole lines per rank from a stream where each write is `[rankN] ` and what that rank wrote so far.

    torchrun's tee reads each rank's log with `readline()` and writes `[rankN] ` plus what it got: where a rank
    wrote a line in two writes (unbuffered `print` writes the text, then the newline), the first half comes
    without its newline and the next write, any rank's, follows on the same line. The halves are joined here:
    within one line a tag of one of this process's ranks starts the next write, and every write but the last
    on a line is a part its rank has not ended yet."""

    def __init__(self, ranks: list[int]) -> None:
        self.ranks = set(ranks)
        self.pending: dict[int, str] = {}

    def lines(self, line: str) -> list[tuple[int | None, str]]:
        first = _RANK_TAG.match(line)
        if first is None:
            return [(None, line)]
        starts = [first] + [
            tag for tag in _RANK_TAG.finditer(line, first.end()) if int(tag.group(1)) in self.ranks or not self.ranks
        ]
        whole: list[tuple[int | None, str]] = []
        for index, tag in enumerate(starts):
            rank = int(tag.group(1))
            end = starts[index + 1].start() if index + 1 < len(starts) else len(line)
            text = self.pending.pop(rank, "") + line[tag.end() : end]
            if index + 1 < len(starts):
                self.pending[rank] = text
            else:
                whole.append((rank, text))
        return whole

    def rest(self) -> list[tuple[int | None, str]]:
        """What a rank wrote last without ending the line."""
        rest: list[tuple[int | None, str]] = [(rank, text) for rank, text in self.pending.items()]
        self.pending.clear()
        return rest


#: What torchrun's agent logs when the store of its exit barrier closes under it: the agent that hosts the store
#: (node 0's) leaves the barrier first and takes the store with it. After its ranks all succeeded it is noise.
_EXIT_BARRIER = "Error waiting on exit barrier"
_EXIT_BARRIER_NOTE = (
    "(torchrun's agent lost its exit barrier as node 0's agent left: its ranks had all finished; the trace is left out)"
)
_HELD_LINES = 400


#: The longest line relayed whole: past it, the rest of the line is left out and a marker says how much.
MAX_LINE = 64 * 1024
_ENDS = re.compile(rb"\r\n|\r|\n")


def bounded_lines(stream: IO[bytes], limit: int = MAX_LINE) -> Iterator[bytes]:
    """The lines of a stream in memory bounded by `limit` whatever it sends: a longer line is cut at `limit`
    and followed by a marker line saying how many bytes were left out. A lone `\r` ends a line as `\n` does,
    so a progress bar shows as it goes instead of when its loop ends."""
    pending, cut = b"", 0  # cut: bytes left out of the line being cut (0: none is)
    read = getattr(stream, "read1", stream.read)
    while chunk := read(1 << 16):
        pending += chunk
        while (end := _ENDS.search(pending)) is not None:
            if end.group() == b"\r" and end.end() == len(pending):
                break  # a \r at the end of what came: its \n may be in the next chunk
            line, pending = pending[: end.start()], pending[end.end() :]
            if cut:
                yield _cut_marker(cut + len(line), limit)
                cut = 0
            elif len(line) > limit:
                yield line[:limit]
                yield _cut_marker(len(line) - limit, limit)
            elif line or end.group() != b"\r":
                yield line
        if cut:
            cut += len(pending)
            pending = b""
        elif len(pending) > limit:
            yield pending[:limit]
            cut, pending = len(pending) - limit, b""
    if cut:
        yield _cut_marker(cut + len(pending.rstrip(b"\r")), limit)
    elif pending.rstrip(b"\r"):
        yield pending.rstrip(b"\r")


def _cut_marker(left_out: int, limit: int) -> bytes:
    return f"[crosstrain: the line above was cut at {limit:,} bytes; {left_out:,} more were left out]".encode()


def _record_event(process: Process, raw: bytes) -> None:
    try:
        event = json.loads(raw)
        meta = event["metadata"]
        if event.get("source") != "WORKER" or meta.get("global_rank") is None:
            return
        state, code = meta.get("state"), json.loads(meta.get("metadata") or "{}").get("exit_code", [None])[0]
        if state == "SUCCEEDED":
            process.rank_codes[int(meta["global_rank"])] = 0
        elif state == "FAILED" and code is not None:
            process.rank_codes[int(meta["global_rank"])] = int(code)
    except (ValueError, KeyError, TypeError, IndexError):
        return  # not an event after all, or one of another shape: the exit code stays unknown


def descendants(pid: int) -> list[int]:
    """Every process below `pid` (Linux /proc; elsewhere none are found and only process groups are signalled).
    torchrun starts each rank in a session of its own, so signalling the agent's group does not reach them."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        children.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    found, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def _signal(pids: list[int], group: int, sig: signal.Signals) -> None:
    for target in [-group, *pids]:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(target, sig)


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (FileNotFoundError, IndexError):
        return False
    except OSError:  # no /proc: ask the kernel
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        return True


def marked(run_id: str) -> list[int]:
    """Every process that carries the run's mark in its environment (Linux /proc; elsewhere none): the ranks and
    whatever they started, background children and double-forked daemons included, wherever they were
    reparented. Only this user's processes can be read, and only they could have been started by the run."""
    mark = f"{RUN_MARK}={run_id}".encode()
    found = []
    for entry in Path("/proc").glob("[0-9]*"):
        try:
            environ = (entry / "environ").read_bytes()
        except OSError:
            continue
        if mark in environ.split(b"\0") and int(entry.name) != os.getpid():
            found.append(int(entry.name))
    return found


def _stop_marked(run_id: str, grace: float) -> None:
    """SIGTERM what the run left running, SIGKILL what is left after `grace` seconds."""
    left = marked(run_id)
    for pid in left:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while any(_alive(pid) for pid in left) and time.monotonic() < deadline:
        time.sleep(_POLL_S)
    for pid in [*left, *marked(run_id)]:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)


def _stop(processes: list[Process], grace: float) -> None:
    """SIGTERM each process, its group and its descendants; SIGKILL whatever is left after `grace` seconds."""
    tree: dict[int, list[int]] = {}
    for process in processes:
        assert process.popen is not None
        process.stopped = True
        tree[process.popen.pid] = descendants(process.popen.pid)
        _signal(tree[process.popen.pid], process.popen.pid, signal.SIGTERM)
    deadline = time.monotonic() + grace

    def remaining() -> bool:
        for process in processes:
            assert process.popen is not None
            if process.popen.poll() is None or any(_alive(pid) for pid in tree[process.popen.pid]):
                return True
        return False

    while remaining() and time.monotonic() < deadline:
        time.sleep(_POLL_S)
    for process in processes:
        assert process.popen is not None
        pid = process.popen.pid
        _signal([*tree[pid], *descendants(pid)], pid, signal.SIGKILL)
        process.popen.wait()


def _outcome(
    run_id: str,
    processes: list[Process],
    failure: Process | None,
    timed_out: bool,
    interrupted: KeyboardInterrupt | None,
    timeout: float | None,
    wall: float,
) -> Outcome:
    ranks: list[RankResult] = []
    for process in processes:
        code = process.returncode
        for rank in process.ranks:
            if process.agent:
                known = process.rank_codes.get(rank)
                note = "" if known is not None else ("stopped" if process.stopped else f"torchrun exited {code}")
                ranks.append(RankResult(rank, process.name, known, note))
            elif len(process.ranks) > 1:  # the Databricks driver: the ranks ran as Spark tasks
                ranks.append(RankResult(rank, process.name, None, f"in Spark; {process.name} exited {code}"))
            else:
                ranks.append(RankResult(rank, process.name, None if process.stopped else code, _stopped(process)))
    ranks.sort(key=lambda r: r.rank)
    if interrupted is not None:
        by = signal.Signals(interrupted.signum).name if isinstance(interrupted, Stopped) else "Ctrl-C"
        return Outcome(run_id, JobState.CANCELLED, f"stopped by {by}", wall, tuple(ranks))
    if timed_out:
        message = f"stopped after {timeout:g}s (scheduling.timeout)"
        return Outcome(run_id, JobState.FAILED, message, wall, tuple(ranks))
    if failure is None:
        return Outcome(run_id, JobState.SUCCEEDED, "", wall, tuple(ranks))
    failed = [r for r in ranks if r.process == failure.name and r.exit_code not in (None, 0, -signal.SIGTERM)]
    what = (
        f"rank {failed[0].rank} [{failure.name.split()[0]}] exited {_code_text(failed[0].exit_code or 0)}"
        if failed
        else f"{failure.name} exited {_code_text(failure.returncode or 0)}"
    )
    culprit = failed[0].rank if failed else None
    tail = last_lines([text for who, text in failure.tail if culprit is None or who == culprit])
    kind, advice = classify("\n".join(tail))
    message = f"the first failure seen: {what}; the other processes were stopped. {kind}: {advice}"
    if tail:
        message += "\nits last lines:\n" + "\n".join(f"  {line}" for line in tail)
    return Outcome(run_id, JobState.FAILED, message, wall, tuple(ranks))


def _stopped(process: Process) -> str:
    return "stopped" if process.stopped else ""


def _summary(outcome: Outcome) -> str:
    head = f"crosstrain: {outcome.state.value} in {outcome.wall_seconds:.1f}s"
    lines = [head + (f": {outcome.message}" if outcome.message else "")]
    lines += [f"  {rank.line()}" for rank in outcome.ranks]
    return "\n".join(lines)
