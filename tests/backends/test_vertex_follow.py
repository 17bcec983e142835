"""Following a Vertex AI job: `logs` (and `--follow`) through Cloud Logging, `list_jobs`, and why a job failed.

Everything runs the real clients (google-cloud-logging's REST client, the GAPIC job service client) against the
loopback service of `vertex_server`, whose jobs write log entries as they run.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from crosstrain.backends._google import IDENTITY_LABEL
from crosstrain.errors import JobFailed
from crosstrain.loader import job_from_dict
from crosstrain.records import JobHandle, JobState
from crosstrain.testing.conformance import BASE_JOB, merge
from tests.backends.vertex_server import ENDED, LogLine, VertexPlatform

RUNNING = "JOB_STATE_RUNNING"
PLAN = ("JOB_STATE_PENDING", RUNNING, RUNNING, RUNNING, RUNNING, "JOB_STATE_SUCCEEDED")
#: Five batches, one per poll while the job runs and the rest at its end. Every entry of a batch shares one
#: timestamp; the late line of batch 2 is stamped with batch 1's time, after batch 1 was read.
LOG_PLAN = [
    [LogLine("service", "Waiting for job to be provisioned.")],
    [LogLine("workerpool0-0", "step 1 loss 2.0"), LogLine("workerpool1-0", "step 1 loss 2.1")],
    [
        LogLine("workerpool1-1", "step 1 loss 2.2", late=True),
        LogLine("workerpool0-0", "step 2 loss 1.5\nstep 2 done"),
        LogLine("workerpool1-0", "step 2 loss 1.6"),
    ],
    [LogLine("workerpool0-0", f"step 3 line {i}") for i in range(5)],
    [LogLine("workerpool0-0", "saved the model"), LogLine("service", "Job completed successfully.")],
]
PREFIX = {
    "service": "[service] ",
    "workerpool0-0": "[workerpool0-0 node 0] ",
    "workerpool1-0": "[workerpool1-0 node 1] ",
    "workerpool1-1": "[workerpool1-1 node 2] ",
}


def expected(plan: list[list[LogLine]]) -> list[str]:
    """The lines in the order a follower sees them: batch by batch, a late entry first in its batch (it sorts
    before the rest of the batch by time)."""
    out = []
    for batch in plan:
        for line in [*(x for x in batch if x.late), *(x for x in batch if not x.late)]:
            out += [PREFIX[line.task] + text for text in line.text.splitlines()]
    return out


def job(**changes: Any) -> Any:
    return job_from_dict(merge(BASE_JOB, changes))


@pytest.fixture
def vertex() -> Iterator[VertexPlatform]:
    with VertexPlatform(plan=PLAN, log_plan=LOG_PLAN, page_size=2) as platform:
        yield platform


def submit(platform: VertexPlatform, **changes: Any) -> JobHandle:
    return platform.backend().submit(job(**changes), dict(platform.settings))


def test_follow_streams_while_the_job_runs_in_order_none_lost_or_repeated(
    vertex: VertexPlatform, monkeypatch: pytest.MonkeyPatch
) -> None:
    from google.cloud.logging_v2.handlers import _monitored_resources

    def no_metadata(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("reading logs asked the GCE metadata server")

    monkeypatch.setattr(_monitored_resources, "retrieve_metadata_server", no_metadata)
    handle = submit(vertex)
    backend = vertex.backend()
    # Reads fail now and then (a 500, a dropped answer, a refusal mid-paging): each read is retried whole.
    vertex.service.inject("entries", "error", "drop", "refuse")
    seen: list[tuple[str, bool]] = []
    for line in backend.logs(handle, follow=True):
        seen.append((line, vertex.service.jobs[handle.ref["name"]]["state"] in ENDED))
    lines = [line for line, _ in seen]
    assert lines == expected(LOG_PLAN)
    while_running = [line for line, ended in seen if not ended]
    assert len(while_running) >= 5, "lines arrive while the job runs"
    assert lines[-1] == "[service] Job completed successfully."
    assert vertex.service.jobs[handle.ref["name"]]["state"] == "JOB_STATE_SUCCEEDED"
    assert vertex.service.played["error"] == 1
    assert vertex.service.played["drop"] == 1
    # Paged: the service answered two entries per page.
    reads = [call for call in vertex.service.received if call.path == "/v2/entries:list"]
    assert any(call.body.get("pageToken") for call in reads)
    filters = {call.body["filter"] for call in reads}
    assert all(f'resource.type="ml_job" AND resource.labels.job_id="{handle.job_id}"' in f for f in filters)
    # After the end, the logs read at once are what was streamed.
    assert list(backend.logs(handle)) == lines


def test_logs_without_follow_read_once_and_end(vertex: VertexPlatform) -> None:
    handle = submit(vertex)
    backend = vertex.backend()
    first = list(backend.logs(handle))  # the job's first poll: only what the service wrote by then
    assert first == expected(LOG_PLAN[:1])
    assert backend.wait(handle, poll_interval=0).state is JobState.SUCCEEDED
    assert list(backend.logs(handle)) == expected(LOG_PLAN)


def test_list_jobs_newest_first_with_working_handles(vertex: VertexPlatform) -> None:
    handles = [submit(vertex, name=f"run-{i}") for i in range(3)]
    # A job crosstrain did not make (no identity label) is not listed.
    vertex.service.create("projects/my-project/locations/us-central1", {"displayName": "other", "labels": {}})
    backend = vertex.backend()
    listed = list(backend.list_jobs(dict(vertex.settings)))
    assert [summary.identity for summary in listed] == [h.identity for h in reversed(handles)]
    assert [summary.created for summary in listed] == sorted((s.created for s in listed), reverse=True)
    received = [call for call in vertex.service.received if call.method == "GET" and "filter" in call.query]
    assert received[-1].query["filter"] == f"labels.{IDENTITY_LABEL}:*"
    for summary, handle in zip(listed, reversed(handles), strict=True):
        assert summary.handle is not None
        assert summary.state is JobState.QUEUED
        assert summary.native_state == "JOB_STATE_PENDING"
        assert summary.console_url == handle.console_url
        assert summary.handle.job_id == handle.job_id
        # The listed handle, saved and loaded as the CLI does, drives status.
        loaded = JobHandle.loads(summary.handle.dumps())
        assert backend.status(loaded).state is JobState.RUNNING


FAILURE = (
    "The replica workerpool1-0 exited with a non-zero status of 1. Termination reason: Error.\n"
    "To find out more about why your job exited please check the logs: https://console.cloud.google.com/logs"
)


def test_a_failed_job_names_the_replica_its_last_lines_and_the_kind() -> None:
    log_plan = [
        [LogLine("workerpool0-0", "step 1"), LogLine("workerpool1-0", "step 1")],
        [
            LogLine("workerpool1-0", "Traceback (most recent call last):"),
            LogLine("workerpool1-0", "torch.distributed.DistStoreError: Socket Timeout"),
            LogLine("workerpool0-0", "waiting for workerpool1-0"),
        ],
    ]
    plan = ("JOB_STATE_PENDING", RUNNING, "JOB_STATE_FAILED")
    with VertexPlatform(plan=plan, log_plan=log_plan, failure=FAILURE) as vertex:
        handle = submit(vertex)
        backend = vertex.backend()
        with pytest.raises(JobFailed, match=r"ended FAILED \(JOB_STATE_FAILED\): .*replica workerpool1-0"):
            backend.wait(handle, poll_interval=0)
        status = backend.status(handle)
    assert status.state is JobState.FAILED
    assert status.native_state == "JOB_STATE_FAILED"
    head, *tail = status.message.splitlines()
    assert "replica workerpool1-0 node 1 failed" in head
    assert "(The replica workerpool1-0 exited with a non-zero status of 1." in head
    assert "rendezvous timeout:" in head
    assert handle.console_url in head
    # Only the failing replica's lines, the error's end.
    assert tail == [
        "its last lines:",
        "  step 1",
        "  Traceback (most recent call last):",
        "  torch.distributed.DistStoreError: Socket Timeout",
    ]


def test_a_failed_job_whose_logs_cannot_be_read_still_says_the_replica_and_kind() -> None:
    plan = ("JOB_STATE_PENDING", "JOB_STATE_FAILED")
    with VertexPlatform(plan=plan, failure=FAILURE) as vertex:
        handle = submit(vertex)
        backend = vertex.backend()
        backend.status(handle)  # moves the job to FAILED
        vertex.service.inject("entries", *["invalid"] * 3)
        status = backend.status(handle)
    assert status.state is JobState.FAILED
    assert "replica workerpool1-0 node 1 failed" in status.message
    assert "user code:" in status.message
    assert "its last lines" not in status.message
