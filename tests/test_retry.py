"""The retry policy, exercised against the fake cloud with scripted faults (nothing of ours is mocked)."""

from __future__ import annotations

from pathlib import Path

import pytest

from crosstrain.backends.fake import FakeCloud
from crosstrain.errors import SubmitError, TransientError
from crosstrain.loader import job_from_dict
from crosstrain.records import HttpCall, JobHandle
from crosstrain.registry import create_backend
from crosstrain.retry import RetryPolicy
from crosstrain.testing.conformance import BASE_JOB


class Sleeps(list[float]):
    def __call__(self, seconds: float) -> None:
        self.append(seconds)


def submit_through(cloud: FakeCloud, root: Path, sleeps: Sleeps, attempts: int = 4) -> JobHandle:
    policy = RetryPolicy(attempts=attempts, initial=1.0, maximum=8.0, jitter=0.0, sleep=sleeps)
    backend = create_backend("fake", cloud=cloud, retry=policy, environ={})
    return backend.submit(job_from_dict(BASE_JOB), {"root": str(root)})


def creates(cloud: FakeCloud) -> list[str]:
    return [call.method for call in cloud.received if call.method == "PUT"]


def test_create_is_retried_when_the_request_was_not_accepted(tmp_path: Path) -> None:
    sleeps = Sleeps()
    cloud = FakeCloud()
    cloud.inject("create", "refuse", "refuse")
    handle = submit_through(cloud, tmp_path, sleeps)
    assert len(creates(cloud)) == 3
    assert sleeps == [1.0, 2.0]
    assert len(list((tmp_path / "jobs").iterdir())) == 1
    assert handle.adopted is False


def test_retry_after_is_honoured(tmp_path: Path) -> None:
    sleeps = Sleeps()
    cloud = FakeCloud()
    cloud.inject("create", "rate-limit")
    policy = RetryPolicy(attempts=4, initial=0.5, maximum=8.0, jitter=0.0, sleep=sleeps)
    create_backend("fake", cloud=cloud, retry=policy, environ={}).submit(
        job_from_dict(BASE_JOB), {"root": str(tmp_path)}
    )
    assert sleeps == [1.0]  # the server's Retry-After, above the 0.5 s backoff


def test_a_lost_answer_looks_first_and_finds_the_job(tmp_path: Path) -> None:
    sleeps = Sleeps()
    cloud = FakeCloud()
    cloud.inject("create", "drop")
    handle = submit_through(cloud, tmp_path, sleeps)
    assert [c.method for c in cloud.received] == ["PUT", "GET"]  # sent once; the lookup found the job
    assert len(list((tmp_path / "jobs").iterdir())) == 1
    assert handle.adopted is False  # this submit made it


def test_permanent_errors_are_not_retried(tmp_path: Path) -> None:
    sleeps = Sleeps()
    cloud = FakeCloud()
    cloud.inject("create", "invalid")
    with pytest.raises(SubmitError, match="400") as refused:
        submit_through(cloud, tmp_path, sleeps)
    assert (len(cloud.received), sleeps) == (1, [])
    assert not refused.value.job_may_exist


def test_the_budget_runs_out(tmp_path: Path) -> None:
    sleeps = Sleeps()
    cloud = FakeCloud()
    cloud.inject("create", *["refuse"] * 5)
    with pytest.raises(TransientError, match="503") as refused:
        submit_through(cloud, tmp_path, sleeps, attempts=3)
    assert len(sleeps) == 2
    assert not refused.value.job_may_exist  # every attempt was refused: no job can exist


def test_a_created_job_is_not_hidden_behind_the_last_error(tmp_path: Path) -> None:
    # The first create takes effect but its answer is lost; the lookup after it fails, then the creates are
    # refused until the attempts are spent. The last look finds the job instead of reporting "503".
    cloud = FakeCloud()
    cloud.inject("create", "drop", "refuse", "refuse")
    cloud.inject("get", "invalid")
    handle = submit_through(cloud, tmp_path, Sleeps(), attempts=3)
    assert handle.identity in handle.ref["url"]
    assert len(list((tmp_path / "jobs").iterdir())) == 1


def test_unknown_outcome_is_not_retried_without_dedupe_or_a_lookup() -> None:
    calls: list[int] = []

    def send() -> str:
        calls.append(1)
        raise TransientError("502 Bad Gateway", accepted=None)

    with pytest.raises(SubmitError, match="may exist") as refused:
        RetryPolicy(sleep=Sleeps()).create(send, dedupes=False, identity="job-abc")
    assert len(calls) == 1
    assert refused.value.job_may_exist
    assert "job-abc" in str(refused.value)


def test_a_final_error_after_an_unknown_outcome_says_the_job_may_exist() -> None:
    outcomes = iter([TransientError("504", accepted=None), TransientError("503", accepted=False)])

    def send() -> str:
        raise next(outcomes)

    with pytest.raises(SubmitError, match="may exist although crosstrain did not find it") as refused:
        RetryPolicy(attempts=2, settle=0, sleep=Sleeps()).create(send, dedupes=False, find=lambda: None)
    assert refused.value.job_may_exist


def test_unknown_outcome_finds_the_job_before_resending() -> None:
    created: list[str] = []

    def send() -> str:
        created.append("job-1")
        raise TransientError("timed out", accepted=None)  # the platform made the job, the answer was lost

    def find() -> str | None:
        return created[0] if created else None

    assert RetryPolicy(sleep=Sleeps()).create(send, dedupes=False, find=find) == "job-1"
    assert created == ["job-1"]  # sent once: the retry found the job instead of making a second


def test_a_late_create_is_found_within_the_settling_window() -> None:
    # The service answers 504 and creates the job a few seconds later: look for `settle` seconds first.
    sleeps = Sleeps()
    sent: list[int] = []

    def send() -> str:
        sent.append(1)
        raise TransientError("504 Gateway Timeout", accepted=None)

    looks: list[int] = []

    def find() -> str | None:
        looks.append(1)
        return "job-late" if len(looks) == 4 else None

    policy = RetryPolicy(settle=10, look_interval=2, sleep=sleeps)
    assert policy.create(send, dedupes=False, find=find) == "job-late"
    assert (len(sent), sleeps[1:]) == (1, [2, 2, 2])  # after the backoff, three more looks two seconds apart


def test_a_lookup_that_finds_nothing_resends_after_the_window() -> None:
    outcomes = iter([TransientError("timed out", accepted=None), None])
    sent: list[int] = []
    sleeps = Sleeps()

    def send() -> str:
        sent.append(1)
        error = next(outcomes)
        if error:
            raise error
        return "job-2"

    policy = RetryPolicy(settle=6, look_interval=2, jitter=0.0, sleep=sleeps)
    assert policy.create(send, dedupes=False, find=lambda: None) == "job-2"
    assert len(sent) == 2
    assert sleeps == [1.0, 2, 2, 2]  # the backoff, then three looks two seconds apart


def test_poll_budget_resets_after_each_success(tmp_path: Path) -> None:
    # Three failures before each of three polls: 9 failures in all, never more than 3 in a row, budget 4.
    cloud = FakeCloud()
    policy = RetryPolicy(attempts=4, jitter=0.0, sleep=Sleeps())
    backend = create_backend("fake", cloud=cloud, retry=policy, environ={})
    handle = backend.submit(job_from_dict(BASE_JOB), {"root": str(tmp_path)})
    for _ in range(3):
        cloud.inject("get", *["refuse"] * 3)
        assert backend.status(handle).state.value == "SUCCEEDED"
    cloud.inject("get", *["refuse"] * 4)
    with pytest.raises(TransientError):
        backend.status(handle)


def test_backoff_is_capped_and_jittered() -> None:
    sleeps = Sleeps()
    policy = RetryPolicy(attempts=8, initial=1.0, maximum=5.0, jitter=1.0, sleep=sleeps)
    with pytest.raises(TransientError):
        policy.poll(lambda: (_ for _ in ()).throw(TransientError("503", accepted=False)))
    assert len(sleeps) == 7
    assert all(0 < s <= 5.0 for s in sleeps)
    assert sleeps[-1] == 5.0
    assert len(set(sleeps[:3])) == 3


def test_http_calls_refuse_credentials() -> None:
    with pytest.raises(ValueError, match="credentials"):
        HttpCall("POST", "https://x", headers={"Authorization": "Bearer t"})


def test_a_lookup_refused_for_good_still_ends_in_may_exist() -> None:
    def send() -> str:
        raise TransientError("504", accepted=None)

    def find() -> str | None:
        raise SubmitError("403 the caller may not list jobs")

    with pytest.raises(SubmitError, match="may exist") as refused:
        RetryPolicy(attempts=2, settle=0, sleep=Sleeps()).create(send, dedupes=True, find=find)
    assert refused.value.job_may_exist
