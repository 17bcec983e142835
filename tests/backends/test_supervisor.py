"""The local runner's supervisor: it says a run is still going while it goes, and keeps every line it streams."""

from __future__ import annotations

import io
import sys
from pathlib import Path
from typing import Any

import pytest

from crosstrain.backends import _supervisor
from crosstrain.backends._supervisor import Process, supervise
from crosstrain.records import JobState


def test_a_long_run_says_it_is_running_and_keeps_its_lines(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_supervisor, "PROGRESS_S", 0.3)
    out, err = io.StringIO(), io.StringIO()
    slow = [sys.executable, "-c", "import time; print('start', flush=True); time.sleep(1.2); print('end')"]
    outcome = supervise(
        [Process("node0", 0, [0], slow, {})],
        cwd=str(tmp_path),
        base_env={"PATH": "/usr/bin:/bin"},
        timeout=None,
        grace=1.0,
        header="test run",
        out=out,
        err=err,
        runs_dir=tmp_path / "runs",
    )
    assert outcome.state is JobState.SUCCEEDED
    beats = [line for line in err.getvalue().splitlines() if "RUNNING after" in line]
    assert len(beats) >= 2, err.getvalue()  # every 0.3 s while the 1.2 s process runs
    assert beats[0].endswith("1 of 1 process still running")
    assert out.getvalue().splitlines() == ["[node0] start", "[node0] end"]
    assert Path(outcome.log).read_text().splitlines() == ["[node0] start", "[node0] end"]


class Chunks(io.RawIOBase):
    """A stream that hands out its bytes in the chunk sizes given, as a pipe does."""

    def __init__(self, data: bytes, sizes: list[int]) -> None:
        self.data, self.sizes, self.at = data, sizes, 0

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        step = min(self.sizes[self.at % len(self.sizes)], len(buffer))
        chunk, self.data = self.data[:step], self.data[step:]
        buffer[: len(chunk)] = chunk
        self.at += 1
        return len(chunk)


def piped(data: bytes, sizes: list[int]) -> io.BufferedReader:
    return io.BufferedReader(Chunks(data, sizes))


@pytest.mark.parametrize("sizes", [[1], [3, 7], [1 << 16], [5, 1, 2, 11]])
def test_lines_end_at_newlines_and_carriage_returns_whatever_the_chunks(sizes: list[int]) -> None:
    data = b"one\ntwo\r\nthree\r 10%\r 50%\r100%\n\nlast"
    assert list(_supervisor.bounded_lines(piped(data, sizes))) == [
        b"one",
        b"two",
        b"three",
        b" 10%",
        b" 50%",
        b"100%",
        b"",
        b"last",
    ]


@pytest.mark.parametrize("sizes", [[1 << 16], [7, 1000]])
def test_a_line_past_the_limit_is_cut_and_the_marker_says_how_much(sizes: list[int]) -> None:
    data = b"before\n" + b"x" * 10_000 + b"\nafter\n" + b"y" * 5_000
    lines = list(_supervisor.bounded_lines(piped(data, sizes), limit=1_000))
    assert lines[0] == b"before"
    assert lines[1] == b"x" * 1_000
    assert b"9,000 more were left out" in lines[2]
    assert lines[3] == b"after"
    assert lines[4] == b"y" * 1_000
    assert b"4,000 more were left out" in lines[5]
    assert len(lines) == 6


def test_a_full_disk_keeps_every_line_on_the_console_and_says_where_the_log_stops(tmp_path: Path) -> None:
    """The log files stop (a file-size limit stands in for a full disk); the console keeps every line."""
    script = (
        "import resource, signal, sys\n"
        "signal.signal(signal.SIGXFSZ, signal.SIG_IGN)\n"
        "resource.setrlimit(resource.RLIMIT_FSIZE, (20_000, 20_000))\n"
        "from crosstrain.backends._supervisor import Process, supervise\n"
        "talk = [sys.executable, '-c', 'for i in range(5000): print(\"line\", i)']\n"
        "o = supervise([Process('node0', 0, [0], talk, {})], cwd='.', base_env={}, timeout=None, grace=1.0,"
        f" header='run', runs_dir=__import__('pathlib').Path({str(tmp_path / 'runs')!r}))\n"
        "print('CUT', o.log_cut, file=sys.stderr)\n"
    )
    import subprocess

    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [f"[node0] line {i}" for i in range(5000)]
    assert "stops after" in done.stderr
    assert "every line was printed here" in done.stderr
    kept = (next((tmp_path / "runs").iterdir()) / "output.log").read_text().split("\n")[:-1]  # whole lines
    assert 0 < len(kept) < 5000
    assert f"stops after {len(kept):,} line(s)" in done.stderr


def _shown(process: Process, tmp_path: Path) -> str:
    """What the supervisor shows of one process's output."""
    out, err = io.StringIO(), io.StringIO()
    supervise(
        [process],
        cwd=str(tmp_path),
        base_env={"PATH": "/usr/bin:/bin"},
        timeout=None,
        grace=1.0,
        header="test run",
        out=out,
        err=err,
    )
    return out.getvalue()


@pytest.mark.parametrize("code", [0, 1])
def test_torchruns_exit_barrier_trace_shows_only_when_its_agent_fails(tmp_path: Path, code: int) -> None:
    """The agent hosting the rendezvous store (node 0's) leaves the exit barrier first and takes the store with
    it; another agent then logs a long trace though every rank finished. After success it is one line."""
    script = (
        "import sys\n"
        "print('[rank1] trained', flush=True)\n"
        "print('[E1127 00:00:00 api.py:1008] Error waiting on exit barrier. Elapsed: 0.1 seconds', flush=True)\n"
        "print('Traceback (most recent call last):', flush=True)\n"
        "print('torch.distributed.DistNetworkError: Connection reset by peer', flush=True)\n"
        f"sys.exit({code})\n"
    )
    shown = _shown(Process("node1", 1, [1], [sys.executable, "-c", script], {}, agent=True), tmp_path)
    assert "[node1 rank1] trained" in shown
    assert ("Connection reset by peer" in shown) is (code != 0)
    assert ("the trace is left out" in shown) is (code == 0)


def test_a_spark_drivers_rank_lines_show_once_each_tagged_with_their_rank(tmp_path: Path) -> None:
    """A local Spark relays each of a task's lines twice (TorchDistributor's log stream, and the worker's own
    stderr); two ranks that print the same words are still two lines."""
    script = (
        "for line in ['[rank0] epoch 1', '[rank0] epoch 1', '[rank1] epoch 1', '[rank1] epoch 1',"
        " 'Spark says this once', '[rank0] done', '[rank0] done']: print(line, flush=True)\n"
    )
    out = _shown(Process("driver", 0, [0, 1], [sys.executable, "-c", script], {}, relays="spark"), tmp_path)
    assert out.splitlines() == [
        "[driver rank0] epoch 1",
        "[driver rank1] epoch 1",
        "[driver] Spark says this once",
        "[driver rank0] done",
    ]


def test_a_rank_line_torchrun_tees_in_halves_shows_whole_as_that_ranks(tmp_path: Path) -> None:
    """An unbuffered `print` writes its text, then its newline; torchrun's tee can read between the two and write
    the half, so another rank's line follows on the same line, and the newline later comes alone (seen in CI)."""
    script = (
        "import sys\n"
        "w = sys.stdout.write\n"
        "w('[rank0] rank 0/4 params f93f'); w('[rank1] rank 1/4 params f93f\\n'); w('[rank0] \\n')\n"
        "w('[rank0] one'); w('[rank0]  and two\\n')\n"
        "w('[rank1] [rank7] is not ours\\n')\n"
        "w('[rank1] left unended')\n"
    )
    out = _shown(Process("node0", 0, [0, 1], [sys.executable, "-c", script], {}, agent=True), tmp_path)
    assert out.splitlines() == [
        "[node0 rank1] rank 1/4 params f93f",
        "[node0 rank0] rank 0/4 params f93f",
        "[node0 rank0] one and two",
        "[node0 rank1] [rank7] is not ours",
        "[node0 rank1] left unended",
    ]
