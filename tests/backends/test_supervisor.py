"""The local runner's supervisor: it says a run is still going while it goes, and keeps every line it streams."""

from __future__ import annotations

import io
import sys
from pathlib import Path

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
    assert beats[0].endswith("1 of 1 process(es) still running")
    assert out.getvalue().splitlines() == ["[node0] start", "[node0] end"]
    assert Path(outcome.log).read_text().splitlines() == ["[node0] start", "[node0] end"]
