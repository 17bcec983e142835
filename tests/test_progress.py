"""Progress while waiting: plain lines per change off a terminal, and in a notebook one display updated in place."""

from __future__ import annotations

import io
import os
from pathlib import Path

import pytest

from crosstrain.progress import Progress, elapsed_text
from crosstrain.records import JobState, JobStatus


def test_plain_lines_only_when_the_state_changes() -> None:
    out = io.StringIO()
    now = [0.0]
    progress = Progress("job-1", "https://console/job-1", stream=out, clock=lambda: now[0], live=False)
    for seconds, state in ((0, "QUEUED"), (5, "QUEUED"), (65, "RUNNING"), (3700, "RUNNING"), (3725, "SUCCEEDED")):
        now[0] = seconds
        progress(JobStatus(JobState(state), state.lower()))
    assert out.getvalue().splitlines() == [
        "job-1: console https://console/job-1",
        "job-1: QUEUED (queued) after 0s",
        "job-1: RUNNING (running) after 1m05s",
        "job-1: SUCCEEDED (succeeded) after 1h02m05s",
    ]


def test_elapsed_text() -> None:
    assert [elapsed_text(s) for s in (0, 59, 60, 3599, 3600, 86399)] == [
        "0s",
        "59s",
        "1m00s",
        "59m59s",
        "1h00m00s",
        "23h59m59s",
    ]


def test_a_notebook_shows_one_display_updated_in_place(tmp_path: Path) -> None:
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    pytest.importorskip("ipykernel")
    code = f"""
import os
os.environ["CROSSTRAIN_FAKE_ROOT"] = {str(tmp_path / "cloud")!r}
import crosstrain
job = {{"name": "nb", "command": "python train.py"}}
handle = crosstrain.submit(job, "fake", run_seconds=2)
status = handle.wait(poll_interval=0.2)
print(status.state.value)
"""
    notebook = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(code)])
    nbclient.NotebookClient(
        notebook, timeout=120, kernel_name="python3", resources={"metadata": {"path": os.getcwd()}}
    ).execute()
    outputs = notebook.cells[0].outputs
    displays = [o for o in outputs if o["output_type"] == "display_data"]
    streams = "".join(o.get("text", "") for o in outputs if o["output_type"] == "stream")
    assert len(displays) == 1, outputs  # one display, updated as the job went on, not one per poll
    assert "SUCCEEDED (DONE) after " in displays[0]["data"]["text/html"]
    assert streams.strip() == "SUCCEEDED"
