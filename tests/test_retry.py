"""The retry policy, exercised against the fake cloud with scripted faults (nothing of ours is mocked)."""

from __future__ import annotations

from pathlib import Path

import pytest

from crosstrain.backends import create_backend
from crosstrain.backends.base import HttpCall
from crosstrain.backends.fake import FakeCloud
from crosstrain.errors import SubmitError, TransientError
from crosstrain.loader import job_from_dict
from crosstrain.retry import RetryPolicy, error_for_status, parse_retry_after
from crosstrain.testing.conformance import BASE_JOB


class Sleeps(list[float]):
    def __call__(self, seconds: float) -> None:
        self.append(seconds)


def submit_through(cloud: FakeCloud, root: Path, sleeps: Sleeps, attempts: int = 4) -> object:
    policy = RetryPolicy(attempts=attempts, initial=1.0, maximum=8.0, jitter=0.0, sleep=sleeps)
    backend = create_backend("fake", transport=cloud, retry=policy, environ={})
    return backend.submit(job_from_dict(BASE_JOB), {"root": str(root)})


def test_create_is_retried_when_the_request_was_not_accepted(tmp_path: Path) -> None:
    sleeps = Sleeps()
    cloud = FakeCloud(faults=["refuse", "refuse"])
    handle = submit_through(cloud, tmp_path, sleeps)
    assert len(cloud.received) == 3
    assert sleeps == [1.0, 2.0]
    assert len(list((tmp_path / "jobs").iterdir())) == 1
    assert handle.adopted is False  # type: ignore[attr-defined]


def test_retry_after_is_honoured(tmp_path: Path) -> None:
    sleeps = Sleeps()
    submit_through(FakeCloud(faults=["rate-limit"]), tmp_path, sleeps)
    assert sleeps == [2.0]  # the server's Retry-After, above the 1 s backoff


def test_lost_answer_is_retried_only_because_the_platform_dedupes(tmp_path: Path) -> None:
    sleeps = Sleeps()
    cloud = FakeCloud(faults=["lose-response"])
    handle = submit_through(cloud, tmp_path, sleeps)
    assert [c.method for c in cloud.received] == ["PUT", "PUT"]
    assert len(list((tmp_path / "jobs").iterdir())) == 1  # one job, not two
    assert handle.adopted is True  # type: ignore[attr-defined]


def test_permanent_errors_are_not_retried(tmp_path: Path) -> None:
    sleeps = Sleeps()
    cloud = FakeCloud(faults=["error"])
    with pytest.raises(SubmitError, match="400"):
        submit_through(cloud, tmp_path, sleeps)
    assert (len(cloud.received), sleeps) == (1, [])


def test_the_budget_runs_out(tmp_path: Path) -> None:
    sleeps = Sleeps()
    with pytest.raises(TransientError, match="503"):
        submit_through(FakeCloud(faults=["refuse"] * 5), tmp_path, sleeps, attempts=3)
    assert len(sleeps) == 2


def test_unknown_outcome_is_not_retried_without_dedupe_or_adoption() -> None:
    calls: list[int] = []

    def send() -> str:
        calls.append(1)
        raise TransientError("502 Bad Gateway", accepted=None)

    with pytest.raises(SubmitError, match="may or may not have accepted"):
        RetryPolicy(sleep=Sleeps()).create(send, dedupes=False)
    assert len(calls) == 1


def test_unknown_outcome_adopts_the_job_before_resending() -> None:
    created: list[str] = []

    def send() -> str:
        created.append("job-1")
        raise TransientError("timed out", accepted=None)  # the platform made the job, the answer was lost

    def adopt() -> str | None:
        return created[0] if created else None

    assert RetryPolicy(sleep=Sleeps()).create(send, dedupes=False, adopt=adopt) == "job-1"
    assert created == ["job-1"]  # sent once: the retry found the job instead of making a second


def test_adoption_that_finds_nothing_resends() -> None:
    outcomes = iter([TransientError("timed out", accepted=None), None])
    sent: list[int] = []

    def send() -> str:
        sent.append(1)
        error = next(outcomes)
        if error:
            raise error
        return "job-2"

    assert RetryPolicy(sleep=Sleeps()).create(send, dedupes=False, adopt=lambda: None) == "job-2"
    assert len(sent) == 2


def test_poll_budget_resets_after_each_success(tmp_path: Path) -> None:
    # Three failures before each of three polls: 9 failures in all, never more than 3 in a row, budget 4.
    cloud = FakeCloud()
    policy = RetryPolicy(attempts=4, jitter=0.0, sleep=Sleeps())
    backend = create_backend("fake", transport=cloud, retry=policy, environ={})
    handle = backend.submit(job_from_dict(BASE_JOB), {"root": str(tmp_path)})
    for _ in range(3):
        cloud.faults.extend(["refuse"] * 3)
        assert policy.poll(lambda: backend.status(handle)).state.value == "SUCCEEDED"
    cloud.faults.extend(["refuse"] * 4)
    with pytest.raises(TransientError):
        policy.poll(lambda: backend.status(handle))


def test_backoff_is_capped_and_jittered() -> None:
    sleeps = Sleeps()
    policy = RetryPolicy(attempts=8, initial=1.0, maximum=5.0, jitter=1.0, sleep=sleeps)
    with pytest.raises(TransientError):
        policy.poll(lambda: (_ for _ in ()).throw(TransientError("503", accepted=False)))
    assert len(sleeps) == 7
    assert all(0 < s <= 5.0 for s in sleeps)
    assert sleeps[-1] == 5.0
    assert len(set(sleeps[:3])) == 3


def test_parse_retry_after() -> None:
    assert parse_retry_after("120") == 120.0
    assert parse_retry_after("Wed, 21 Oct 2015 07:28:00 GMT", now=1445412470.0) == 10.0
    assert parse_retry_after("Wed, 21 Oct 2015 07:28:00 GMT", now=1445412490.0) == 0.0
    assert parse_retry_after("soon") is None
    assert parse_retry_after(None) is None


def test_http_calls_refuse_credentials() -> None:
    with pytest.raises(ValueError, match="credentials"):
        HttpCall("POST", "https://x", headers={"Authorization": "Bearer t"})


@pytest.mark.parametrize(
    ("code", "kind", "accepted"),
    [
        (429, TransientError, False),
        (503, TransientError, False),
        (500, TransientError, None),
        (502, TransientError, None),
        (504, TransientError, None),
        (408, TransientError, None),
        (400, SubmitError, None),
        (404, SubmitError, None),
        (501, SubmitError, None),
    ],
)
def test_every_backend_reads_http_statuses_alike(code: int, kind: type, accepted: bool | None) -> None:
    error = error_for_status(code, f"{code} from somewhere", "7")
    assert type(error) is kind
    assert str(error) == f"{code} from somewhere"
    if isinstance(error, TransientError):
        assert error.accepted is accepted
        assert error.retry_after == 7.0
    assert error_for_status(204, "fine") is None
