"""Following a Databricks run (issue 16): the driver's logs as the cluster delivers them (`cluster_log_conf`),
read by offset while the run runs; the runs crosstrain made, newest first; why a failed run failed."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from crosstrain.backends.databricks.backend import DatabricksBackend
from crosstrain.backends.databricks.logs import _failing_rank, _not_seen
from crosstrain.loader import job_from_dict
from crosstrain.records import JobState
from crosstrain.testing.conformance import BASE_JOB, merge
from tests.backends.databricks_workspace import DatabricksPlatform

VOLUME = "/Volumes/main/default/runs"
LINES = [f"[rank{i % 2}]:step {i} loss {1 / (i + 1):.4f}" for i in range(24)]


@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Any) -> None:
    import os

    for name in list(os.environ):
        if name.startswith("DATABRICKS_"):
            monkeypatch.delenv(name)
    monkeypatch.setenv("HOME", str(tmp_path))


@pytest.fixture
def platform(clean_env: None) -> Iterator[DatabricksPlatform]:
    with DatabricksPlatform() as running:
        yield running


def _backend(platform: DatabricksPlatform) -> DatabricksBackend:
    backend = platform.backend()
    assert isinstance(backend, DatabricksBackend)
    backend.log_interval = 0.0
    return backend


def _running(platform: DatabricksPlatform, polls: int, result: str = "SUCCESS") -> None:
    platform.workspace.states = [("PENDING", None)] + [("RUNNING", None)] * polls + [("TERMINATED", result)]


@pytest.mark.parametrize("volume", [None, VOLUME], ids=["dbfs", "volume"])
def test_the_render_delivers_the_clusters_logs_under_the_identity(platform: DatabricksPlatform, volume: Any) -> None:
    settings = {**platform.settings, **({"volume": volume} if volume else {})}
    request = platform.backend().render(job_from_dict(BASE_JOB), settings)
    cluster = request.create.body["tasks"][0]["new_cluster"]
    kind, root = ("volumes", VOLUME) if volume else ("dbfs", "dbfs:/crosstrain")
    assert cluster["cluster_log_conf"] == {kind: {"destination": f"{root}/logs/{request.identity}"}}
    assert any(f"{root}/logs/{request.identity}/<cluster id>/" in note for note in request.notes)  # the dry run


@pytest.mark.parametrize("volume", [None, VOLUME], ids=["dbfs", "volume"])
def test_follow_streams_the_driver_log_while_the_run_runs(platform: DatabricksPlatform, volume: Any) -> None:
    workspace = platform.workspace
    workspace.driver_log = "".join(f"{line}\n" for line in LINES)
    workspace.driver_stderr = "WARNING: a driver warning\n"
    workspace.log_bytes_per_poll = 50  # lines arrive in parts: a line is yielded whole, once
    workspace.output = {"logs": "\n".join(LINES[-4:]), "error": None}  # the tail of stdout, already streamed
    _running(platform, 40)
    db = _backend(platform)
    settings = {**platform.settings, **({"volume": volume} if volume else {})}
    handle = db.send(db.render(job_from_dict(BASE_JOB), settings))
    run = workspace.runs[int(handle.job_id)]
    seen: list[tuple[str, bool]] = []
    for line in db.logs(handle, follow=True):
        seen.append((line, len(workspace.delivered(int(handle.job_id))) < len(workspace.driver_log)))
        assert run["polls"] <= 42  # it ends when the run does
    lines = [line for line, _ in seen]
    stdout = [line for line in lines if line.startswith("[driver] ")]
    assert stdout == [f"[driver] {line}" for line in LINES]  # in order, none lost, none repeated
    assert lines.count("[driver stderr] WARNING: a driver warning") == 1
    assert sum(before_the_end for _, before_the_end in seen) >= len(LINES) // 2, "lines came while it ran"
    assert run["polls"] == 42  # the submit's read, then one per follow read until the end
    reads = [c for c in workspace.received if workspace.operation(c) in ("fs-get", "dbfs-read")]
    assert len(reads) > 5  # read piecewise, by offset


@pytest.mark.parametrize(("volume", "read"), [(None, "dbfs-read"), (VOLUME, "fs-get")], ids=["dbfs", "volume"])
def test_a_failed_read_is_retried_from_the_same_offset(platform: DatabricksPlatform, volume: Any, read: str) -> None:
    workspace = platform.workspace
    workspace.driver_log = "".join(f"{line}\n" for line in LINES)
    workspace.output = {"logs": "", "error": None}
    _running(platform, 30)
    db = _backend(platform)
    settings = {**platform.settings, **({"volume": volume} if volume else {})}
    handle = db.send(db.render(job_from_dict(BASE_JOB), settings))
    lines = []
    for line in db.logs(handle, follow=True):
        lines.append(line)
        if len(lines) in (2, 5):
            platform.inject(read, "error")  # a 500 on the next read of the file
    assert lines == [f"[driver] {line}" for line in LINES]
    assert workspace.played["error"] == 2


def test_the_outputs_tail_adds_what_was_not_delivered_yet(platform: DatabricksPlatform) -> None:
    workspace = platform.workspace
    workspace.driver_log = "".join(f"{line}\n" for line in LINES[:-3])  # the last delivery came late
    workspace.output = {
        "logs": "\n".join(LINES[-6:]),
        "error": "TrainingFailed: training failed on at least one rank",
        "error_trace": "Traceback (most recent call last):\nTrainingFailed: training failed on at least one rank",
    }
    _running(platform, 3, "FAILED")
    db = _backend(platform)
    handle = db.send(db.render(job_from_dict(BASE_JOB), platform.settings))
    lines = list(db.logs(handle, follow=True))
    assert lines == [
        *(f"[driver] {line}" for line in LINES),
        "error: TrainingFailed: training failed on at least one rank",
        "Traceback (most recent call last):",
        "TrainingFailed: training failed on at least one rank",
    ]


def test_logs_without_follow_read_what_was_delivered_once(platform: DatabricksPlatform) -> None:
    workspace = platform.workspace
    workspace.driver_log = "".join(f"{line}\n" for line in LINES)
    workspace.output = {"logs": "", "error": None}
    workspace.log_bytes_per_poll = 100
    _running(platform, 10)
    db = platform.backend()
    handle = db.send(db.render(job_from_dict(BASE_JOB), platform.settings))
    first = list(db.logs(handle))
    assert 0 < len(first) < len(LINES)
    assert first == [f"[driver] {line}" for line in LINES[: len(first)]]


def test_a_huge_driver_log_is_read_in_bounded_memory(platform: DatabricksPlatform) -> None:
    """300,000 lines and one line of 20 MB: each line comes once (the long one in bounded pieces), and what is
    kept to join the run output's tail stays small."""
    import tracemalloc

    lines = [f"step {i} loss {1 / (i + 1):.6f} " + "x" * 60 for i in range(300_000)]
    text = "\n".join(lines[:1000]) + "\n" + "y" * 20_000_000 + "\n" + "\n".join(lines[1000:]) + "\n"
    workspace = platform.workspace
    workspace.output = {"logs": "", "error": None}
    _running(platform, 0)
    db = _backend(platform)
    handle = db.send(db.render(job_from_dict(merge(BASE_JOB, {"output_dir": VOLUME})), platform.settings))
    db.wait(handle, poll_interval=0.0)
    folder = workspace.log_folder(int(handle.ref["run_id"]))
    workspace.files[f"{folder}/stdout"] = text.encode()  # delivered whole; the fake holds it outside the count
    del text
    tracemalloc.start()
    try:
        count = long = kept = 0
        for line in db.logs(handle):
            count += 1
            if line.startswith("[driver] yyyy"):
                long += 1
                kept += len(line) - len("[driver] ")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert count == 300_000 + long
    assert long > 1  # the long line, in bounded pieces
    assert kept == 20_000_000  # nothing lost
    assert peak < 40_000_000, f"{peak:,} bytes at the peak"


def test_a_run_whose_cluster_is_not_started_yet_has_only_its_output(platform: DatabricksPlatform) -> None:
    platform.workspace.states = [("PENDING", None)]
    db = platform.backend()
    handle = db.send(db.render(job_from_dict(BASE_JOB), platform.settings))
    assert list(db.logs(handle)) == ["[driver] epoch 1 loss 0.5", "[driver] epoch 2 loss 0.1"]


def test_list_is_newest_first_with_handles_that_work(platform: DatabricksPlatform) -> None:
    db = platform.backend()
    handles = [
        db.send(db.render(job_from_dict(merge(BASE_JOB, {"name": f"job-{i}"})), platform.settings)) for i in range(3)
    ]
    platform.workspace.submit({"run_name": "not crosstrain's", "tasks": [{"task_key": "x", "new_cluster": {}}]})
    listed = list(db.list_jobs(platform.settings))
    assert [job.identity for job in listed] == [h.identity for h in reversed(handles)]
    assert all(
        job.console_url.endswith(f"/#job/runs/{h.job_id}") for job, h in zip(listed, reversed(handles), strict=True)
    )
    assert all(job.created > 1e9 for job in listed)
    newest = listed[0]
    assert newest.handle is not None
    assert newest.handle.job_id == handles[-1].job_id
    assert newest.state is JobState.QUEUED
    assert newest.native_state == "PENDING"
    assert db.status(newest.handle).state is JobState.RUNNING  # the listed handle reads the run
    assert list(db.logs(newest.handle))  # and its logs
    queries = [c.query for c in platform.workspace.received if platform.workspace.operation(c) == "list"]
    assert queries
    assert all(q.get("run_type") == "SUBMIT_RUN" for q in queries)


def test_a_failed_status_names_the_rank_the_error_and_the_kind(platform: DatabricksPlatform) -> None:
    workspace = platform.workspace
    workspace.state_message = "Workload failed, see run output for details"
    workspace.output = {
        "logs": "[rank0]:step 1 loss 0.5\n[rank1]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2 GiB",
        "error": "TrainingFailed: training failed on at least one rank; the reason is in the lines above",
        "error_trace": 'Traceback (most recent call last):\n  File "crosstrain_task.py", line 249\n'
        "TrainingFailed: training failed on at least one rank; the reason is in the lines above",
    }
    _running(platform, 0, "FAILED")
    db = platform.backend()
    handle = db.send(db.render(job_from_dict(BASE_JOB), platform.settings))
    status = db.status(handle)
    assert (status.state, status.native_state) == (JobState.FAILED, "TERMINATED/FAILED")
    assert status.message.startswith("rank 1 failed: Workload failed, see run output for details (TrainingFailed:")
    assert "out of memory: use a smaller batch" in status.message
    assert handle.console_url in status.message
    assert status.message.splitlines()[-2:] == [  # the failing rank's own last lines
        "its last lines:",
        "  [rank1]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2 GiB",
    ]


def test_a_failed_status_without_a_rank_still_names_the_kind(platform: DatabricksPlatform) -> None:
    workspace = platform.workspace
    workspace.output = {"logs": "", "error": "ModuleNotFoundError: No module named 'transformers'"}
    _running(platform, 0, "FAILED")
    db = platform.backend()
    handle = db.send(db.render(job_from_dict(BASE_JOB), platform.settings))
    platform.inject("output", "error")  # retried: the output is read all the same
    message = db.status(handle).message
    assert message.startswith("the run failed: run is terminated (ModuleNotFoundError")
    assert "missing module: add the package to `requirements`" in message


@pytest.mark.parametrize(
    ("lines", "rank"),
    [
        (["Root Cause (first observed failure):", "[0]:", "  rank      : 3 (local_rank: 1)"], 3),
        (["[rank2]: Traceback (most recent call last):", "[rank2]: ValueError: bad"], 2),
        (["RuntimeError: rank(s) 1, 3 of 4 did not finish"], 1),
        (["[rank0]:step 1 loss 0.5", "all good"], None),
    ],
)
def test_the_failing_rank_is_read_from_torchdistributors_output(lines: list[str], rank: int | None) -> None:
    assert _failing_rank(lines) == rank


@pytest.mark.parametrize(
    ("seen", "tail", "rest"),
    [
        (["a", "b", "c"], ["b", "c"], []),
        (["a", "b"], ["b", "c", "d"], ["c", "d"]),
        ([], ["a"], ["a"]),
        (["x"], ["a", "b"], ["a", "b"]),
        (["a", "a"], ["a", "a", "a"], ["a"]),
    ],
)
def test_the_outputs_tail_is_joined_to_what_was_read(seen: list[str], tail: list[str], rest: list[str]) -> None:
    assert _not_seen(seen, tail) == rest


def _returns_ranks() -> list[int]:
    return [0, 1]


@pytest.mark.parametrize("output_dir", ["dbfs:/runs", VOLUME], ids=["dbfs", "volume"])
def test_a_function_jobs_result_comes_back_from_dbfs_or_a_volume(platform: DatabricksPlatform, output_dir: str) -> None:
    import cloudpickle

    from crosstrain import api
    from crosstrain.errors import JobFailed

    base = {k: v for k, v in BASE_JOB.items() if k not in ("command", "args")}
    job = api.with_function(_returns_ranks, {**base, "output_dir": output_dir})
    _running(platform, 1)
    handle = _backend(platform).submit(job, dict(platform.settings))
    assert handle.result_at == f"{output_dir}/crosstrain-result/result.pkl"
    with pytest.raises(JobFailed, match="left no result"):
        handle.result()
    platform.workspace.files[handle.result_at] = cloudpickle.dumps([0, 1])
    assert handle.result() == [0, 1]
