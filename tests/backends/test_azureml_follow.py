"""Following an Azure ML job: its log files as the service writes them (the job's default output in the
workspace's artifact store, on Azurite), read by offset while the fake job runs; the jobs list; a failed
job's status naming the failing rank and the kind of failure."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

import pytest
from azure.core.exceptions import ServiceResponseError

from crosstrain.backends.azureml.backend import AzureMLBackend
from crosstrain.loader import job_from_dict
from crosstrain.records import JobHandle, JobState
from crosstrain.retry import RetryPolicy
from crosstrain.testing.conformance import BASE_JOB, merge
from tests.backends.azureml_cloud import (
    WORKSPACE,
    AzureMLService,
    AzureMLTransport,
    FakeCredential,
    LoopbackTransport,
)

SETTINGS = {**WORKSPACE, "compute": "gpu-cluster"}


@pytest.fixture(autouse=True)
def _quiet_sdk() -> Iterator[None]:
    logging.disable(logging.WARNING)
    yield
    logging.disable(logging.NOTSET)


def backend(service: AzureMLService, azurite_url: str) -> AzureMLBackend:
    return AzureMLBackend(
        transport=AzureMLTransport(service),
        storage_transport=LoopbackTransport(azurite_url),  # the account's blob host, served by Azurite
        credential=FakeCredential(),
        retry=RetryPolicy(sleep=lambda s: None, call_timeout=30),
        environ={},
        log_interval=0,
    )


def submit(ml: AzureMLBackend, name: str) -> JobHandle:
    return ml.submit(job_from_dict(merge(BASE_JOB, {"name": name})), SETTINGS)


#: Two ranks writing over four status reads; lines split across writes, rank 1's last line without a newline.
GROWTH: tuple[dict[str, str], ...] = (
    {"std_log_process_0.txt": "step 0\n", "std_log_process_1.txt": "r1 step 0\nr1 st"},
    {"std_log_process_0.txt": "step 1\nstep", "std_log_process_1.txt": "ep 1\n"},
    {"std_log_process_0.txt": " 2\n"},
    {"std_log_process_0.txt": "done\n", "std_log_process_1.txt": "r1 done"},
)


def test_follow_streams_lines_while_the_job_runs_in_order_once_and_ends_with_it(azurite_url: str) -> None:
    service = AzureMLService(
        ("Running", "Running", "Running", "Running", "Completed"), blob_endpoint=azurite_url, logs=GROWTH
    )
    ml = backend(service, azurite_url)
    handle = submit(ml, "follow-me")
    seen: list[tuple[str, bool]] = []
    for line in ml.logs(handle, follow=True):
        seen.append((line, handle.job_id in service.ended))
    lines = [line for line, _ in seen]
    rank0 = [line for line in lines if line.startswith("[rank 0] ")]
    rank1 = [line for line in lines if line.startswith("[rank 1] ")]
    assert rank0 == [f"[rank 0] {text}" for text in ("step 0", "step 1", "step 2", "done")]
    assert rank1 == [f"[rank 1] {text}" for text in ("r1 step 0", "r1 step 1", "r1 done")]
    assert len(lines) == len(rank0) + len(rank1)  # nothing else, nothing twice
    assert any(not ended for _, ended in seen), "no line arrived while the job ran"
    assert seen[-1][1], "the stream ended before the job"
    assert service.current(service.job(handle.job_id)) == "Completed"
    # the logs after the end are what was streamed
    assert sorted(ml.logs(handle)) == sorted(lines)


def test_logs_without_follow_read_what_is_there_and_stop(azurite_url: str) -> None:
    service = AzureMLService(("Running",) * 6 + ("Completed",), blob_endpoint=azurite_url, logs=GROWTH)
    ml = backend(service, azurite_url)
    handle = submit(ml, "no-follow")
    ml.status(handle)  # NotStarted: the first write
    assert list(ml.logs(handle)) == ["[rank 0] step 0", "[rank 1] r1 step 0", "[rank 1] r1 st"]


def test_list_gives_the_jobs_crosstrain_made_newest_first(azurite_url: str) -> None:
    service = AzureMLService(blob_endpoint=azurite_url)
    ml = backend(service, azurite_url)
    made = [submit(ml, name) for name in ("first", "second", "third")]
    # a job made elsewhere (no fingerprint property) is not listed
    first = service.job(made[0].job_id)
    other = service.resources[first]
    other = {**other, "properties": {**other["properties"], "properties": {}}}
    service.resources[first.replace(made[0].job_id, "other")] = {**other, "name": "other"}
    listed = list(ml.list_jobs(SETTINGS))
    assert [job.identity for job in listed] == [h.job_id for h in reversed(made)]
    assert all(job.state is JobState.QUEUED and job.native_state == "NotStarted" for job in listed)
    assert listed[0].created > listed[1].created > listed[2].created
    assert listed[0].console_url == f"https://ml.azure.com/runs/{made[2].job_id}"
    assert listed[0].handle is not None
    assert listed[0].handle.ref["url"] == made[2].ref["url"]
    assert ml.status(listed[0].handle).state is JobState.QUEUED  # the handle works


FAILING: tuple[dict[str, Any], ...] = (
    {"std_log_process_0.txt": "epoch 1\n", "std_log_process_1.txt": "epoch 1\n", "std_log_process_2.txt": "e1\n"},
    {
        "std_log_process_0.txt": "[W] waiting for rank 2\n",
        "std_log_process_2.txt": (
            "Traceback (most recent call last):\n"
            '  File "train.py", line 3, in <module>\n'
            "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB\n"
        ),
    },
)


def test_a_failed_job_names_the_failing_rank_its_last_lines_and_the_kind(azurite_url: str) -> None:
    service = AzureMLService(("Running", "Failed"), blob_endpoint=azurite_url, logs=FAILING)
    ml = backend(service, azurite_url)
    handle = submit(ml, "oom")
    states = [ml.status(handle) for _ in range(3)]
    failed = states[-1]
    assert failed.state is JobState.FAILED
    assert "rank 2 failed" in failed.message
    assert "out of memory" in failed.message
    assert "CUDA out of memory" in failed.message
    assert f"https://ml.azure.com/runs/{handle.job_id}" in failed.message
    assert "rank 0" not in failed.message


class FlakyBlobs(LoopbackTransport):
    """Azurite behind a connection that drops every other log read, after Azurite has answered it (the bytes
    were read on the server and lost on the way): a retry must read them again from the same offset."""

    def __init__(self, base_url: str) -> None:
        super().__init__(base_url)
        self.reads = 0
        self.dropped = 0

    def send(self, request: Any, **kwargs: Any) -> Any:
        response = super().send(request, **kwargs)
        if request.method == "GET" and "/user_logs/" in request.url and "comp=list" not in request.url:
            self.reads += 1
            if self.reads % 2:
                self.dropped += 1
                raise ServiceResponseError("the connection closed mid-answer (injected)")
        return response


def test_follow_loses_and_repeats_nothing_when_log_reads_are_dropped(azurite_url: str) -> None:
    service = AzureMLService(
        ("Running", "Running", "Running", "Running", "Completed"), blob_endpoint=azurite_url, logs=GROWTH
    )
    ml = backend(service, azurite_url)
    flaky = FlakyBlobs(azurite_url)
    ml.storage_transport = flaky
    handle = submit(ml, "flaky")
    lines = list(ml.logs(handle, follow=True))
    assert flaky.dropped >= 3
    assert [line for line in lines if line.startswith("[rank 0] ")] == [
        f"[rank 0] {text}" for text in ("step 0", "step 1", "step 2", "done")
    ]
    assert [line for line in lines if line.startswith("[rank 1] ")] == [
        f"[rank 1] {text}" for text in ("r1 step 0", "r1 step 1", "r1 done")
    ]
    assert len(lines) == 7


def test_a_failed_job_without_logs_still_says_failed_and_where_to_look() -> None:
    service = AzureMLService(("Failed",))  # no blob store: the datastore read fails, the state stands
    ml = AzureMLBackend(
        transport=AzureMLTransport(service),
        credential=FakeCredential(),
        retry=RetryPolicy(sleep=lambda s: None, call_timeout=30),
        environ={},
    )
    handle = submit(ml, "no-logs")
    failed = [ml.status(handle) for _ in range(2)][-1]
    assert failed.state is JobState.FAILED
    assert failed.message.startswith("the first failure seen: the job failed. user code: ")
    assert handle.console_url in failed.message


@pytest.mark.parametrize(
    ("name", "prefix"),
    [
        ("ExperimentRun/dcid.x/user_logs/std_log_process_12.txt", "[rank 12] "),
        ("ExperimentRun/dcid.x/user_logs/std_log_node_1_process_3.txt", "[node 1 rank 3] "),
        ("ExperimentRun/dcid.x/user_logs/std_log.txt", ""),
    ],
)
def test_a_line_names_the_rank_its_file_names(name: str, prefix: str) -> None:
    from crosstrain.backends.azureml.logs import _LOG_FILE, _log_prefix

    assert _LOG_FILE.search(name)
    assert _log_prefix(name) == prefix


def test_follow_of_a_failing_job_ends_with_its_error(azurite_url: str) -> None:
    service = AzureMLService(("Running", "Failed"), blob_endpoint=azurite_url, logs=FAILING)
    ml = backend(service, azurite_url)
    handle = submit(ml, "follow-oom")
    lines = list(ml.logs(handle, follow=True))
    assert lines[-1] == "[rank 2] torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB"
    assert lines.count("[rank 0] epoch 1") == 1
    assert handle.job_id in service.ended
