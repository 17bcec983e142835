"""Fallback with one live job: the fake backend, through its client, against the fake cloud with capacity
(`tests/backends/capacity_cloud.py`); every move-on reason, every stop reason, repeat and concurrent submits,
and at most one live job of a run at every moment."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest

from crosstrain import api, fallback
from crosstrain.backends.fake import FakeBackend
from crosstrain.errors import JobFailed, SpecError
from crosstrain.fallback import RunStopped
from crosstrain.loader import job_from_dict
from crosstrain.records import JobHandle, JobState
from crosstrain.retry import RetryPolicy
from crosstrain.spec import TrainingJob
from tests.backends.capacity_cloud import CapacityBackend, CapacityCloud, most_live

FAST = RetryPolicy(attempts=4, sleep=lambda _: None, settle=0.0)


def job(root: Path, primary: str = "H100:8", *alternatives: dict[str, Any], **extra: Any) -> TrainingJob:
    return job_from_dict(
        {
            "name": "train",
            "image": "img",
            "command": "python train.py",
            "primary": {"machine": primary},
            "fallback": list(alternatives) or [{"machine": "A100:8"}, {"machine": "L4:1"}],
            "targets": {"fake": {"root": str(root)}},
            **extra,
        }
    )


class World:
    def __init__(self, tmp: Path, plans: dict[str, str], **cloud: Any) -> None:
        self.root = tmp / "cloud"
        self.state = tmp / "state"
        self.cloud = CapacityCloud(plans, **cloud)
        self.backend = FakeBackend(cloud=self.cloud, retry=FAST)

    def run(self, spec: TrainingJob, **kwargs: Any) -> fallback.Run:
        return fallback.Run(
            spec,
            "fake",
            backend=lambda name: self.backend,
            environ={"CROSSTRAIN_STATE_DIR": str(self.state)},
            **kwargs,
        )

    def intervals(self) -> dict[str, list[tuple[float, float, str]]]:
        return self.cloud.live_intervals(self.root)

    def live(self) -> list[str]:
        return sorted(i for runs in self.intervals().values() for _, end, i in runs if end == float("inf"))


def attempt_of(handle: JobHandle) -> int:
    return int(handle.ref["fallback"]["attempt"])


def test_quota_refused_at_create_moves_on(tmp_path: Path) -> None:
    world = World(tmp_path, {"H100": "quota"})
    run = world.run(job(world.root))
    handle = run.submit()
    assert attempt_of(handle) == 1
    assert handle.identity.endswith("-1")
    assert [(p["attempt"], p["kind"]) for p in handle.ref["fallback"]["passed"]] == [(0, "quota")]
    assert world.live() == [handle.identity]
    creates = [c.path for c in world.cloud.received if c.method == "PUT"]
    assert [p.rsplit("-", 1)[-1] for p in creates] == ["0.json", "1.json"]  # a 429 for quota is not retried
    assert run.status().state is JobState.RUNNING
    lines = fallback.history(handle)
    assert "following attempt 1 of 3 (fake A100:8)" in lines[0]
    assert "passed over for quota" in lines[1]
    assert "exceed quota limits" in lines[1]


def test_stockout_after_create_moves_on_and_the_label_is_on_each_attempt(tmp_path: Path) -> None:
    world = World(tmp_path, {"H100": "stockout", "A100": "stockout"}, fail_after=0.0)
    run = world.run(job(world.root))
    handle = run.submit()
    assert attempt_of(handle) == 2
    assert [p["kind"] for p in handle.ref["fallback"]["passed"]] == ["capacity", "capacity"]
    runs = world.intervals()
    assert len(runs) == 1
    assert len(next(iter(runs.values()))) == 3
    assert most_live(next(iter(runs.values()))) == 1
    assert world.live() == [handle.identity]


def test_stockout_found_by_wait_moves_on(tmp_path: Path) -> None:
    world = World(tmp_path, {"H100": "stockout"}, fail_after=0.3)
    run = world.run(job(world.root))
    assert attempt_of(run.submit()) == 0  # created and queued: submit returns it
    status = run.wait(timeout=10, poll_interval=0.05, until_running=True)
    assert status.state is JobState.RUNNING
    assert run.current == 1
    assert [p.kind for p in run.passed] == ["capacity"]
    assert most_live(next(iter(world.intervals().values()))) == 1


def test_dws_expiry_by_the_service_moves_on(tmp_path: Path) -> None:
    world = World(tmp_path, {"H100": "dws"}, dws_scale=0.1)
    run = world.run(job(world.root, scheduling={"max_wait": 1}), watch=2.0)
    handle = run.submit()
    assert attempt_of(handle) == 1
    assert [p["kind"] for p in handle.ref["fallback"]["passed"]] == ["wait-expired"]


def test_held_past_max_wait_is_cancelled_and_read_ended_before_the_next(tmp_path: Path) -> None:
    world = World(tmp_path, {"H100": "held"})
    clock = [1000.0]
    run = world.run(job(world.root, scheduling={"max_wait": 60}), clock=lambda: clock[0])
    first = run.submit()
    assert attempt_of(first) == 0
    clock[0] += 3600  # the wait outlasted max_wait by crosstrain's clock
    world.cloud.inject("cancel", "drop", "error")  # lost answers on the cancel: it is asked again, read ended
    status = run.wait(timeout=10, poll_interval=0.01, until_running=True)
    assert status.state is JobState.RUNNING
    assert run.current == 1
    assert [p.kind for p in run.passed] == ["wait-expired"]
    assert world.backend.status(first).state is JobState.CANCELLED
    assert most_live(next(iter(world.intervals().values()))) == 1


def test_repeat_submit_finds_the_live_attempt_and_says_why(tmp_path: Path) -> None:
    world = World(tmp_path, {"H100": "quota"})
    spec = job(world.root)
    first = world.run(spec).submit()
    again = world.run(spec).submit()
    assert again.identity == first.identity
    assert again.adopted
    assert [p["kind"] for p in again.ref["fallback"]["passed"]] == ["quota"]
    assert world.live() == [first.identity]


def test_repeat_submit_without_the_journal_still_moves_from_an_ended_attempt(tmp_path: Path) -> None:
    world = World(tmp_path, {"H100": "stockout"}, fail_after=0.0)
    spec = job(world.root)
    world.cloud.plans["H100"] = "stockout"
    first = world.run(spec).submit()
    (world.state).rename(tmp_path / "elsewhere")  # another machine: no notes of this run
    again = world.run(spec).submit()
    assert again.identity == first.identity
    assert [(p["attempt"], p["kind"]) for p in again.ref["fallback"]["passed"]] == [(0, "capacity")]


def test_two_submits_at_once_make_one_live_job(tmp_path: Path) -> None:
    world = World(tmp_path, {"H100": "quota", "A100": "stockout"}, fail_after=0.0)
    spec = job(world.root)
    handles: list[JobHandle] = []
    threads = [threading.Thread(target=lambda: handles.append(world.run(spec).submit())) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert {h.identity for h in handles} == set(world.live())
    assert len(world.live()) == 1
    assert most_live(next(iter(world.intervals().values()))) == 1


def test_lost_answers_on_create_move_on_without_a_second_job(tmp_path: Path) -> None:
    world = World(tmp_path, {"H100": "quota", "A100": "stockout"}, fail_after=0.0)
    world.cloud.inject("create", "drop", "error", "drop")
    handle = world.run(job(world.root)).submit()
    assert attempt_of(handle) == 2
    assert world.live() == [handle.identity]


def test_a_bad_request_stops_the_run(tmp_path: Path) -> None:
    world = World(tmp_path, {})
    world.cloud.inject("create", "invalid")
    with pytest.raises(RunStopped, match="does not move a run on") as stopped:
        world.run(job(world.root)).submit()
    assert not stopped.value.job_may_exist
    assert world.live() == []


def test_an_unknown_outcome_stops_the_run(tmp_path: Path) -> None:
    world = World(tmp_path, {})
    world.backend.retry = RetryPolicy(attempts=2, sleep=lambda _: None, settle=0.0)
    world.cloud.inject("create", *["error"] * 6)  # two tries of each of three sends of attempt 0
    with pytest.raises(RunStopped, match="outcome is unknown") as stopped:
        world.run(job(world.root)).submit()
    assert stopped.value.job_may_exist
    assert world.live() == []  # nothing was created elsewhere
    assert world.cloud.played["error"] == 6


def test_a_failure_of_its_own_ends_the_run_without_moving_on(tmp_path: Path) -> None:
    world = World(tmp_path, {}, run_seconds=0.05)
    spec = job(world.root)
    spec = spec.model_copy(update={"targets": {"fake": {"root": str(world.root), "outcome": "failed"}}})
    run = world.run(spec)
    assert attempt_of(run.submit()) == 0
    with pytest.raises(JobFailed, match="the plan said so"):
        run.wait(timeout=5, poll_interval=0.01)
    assert run.current == 0
    assert run.passed == []


def test_every_alternative_passed_over_says_each(tmp_path: Path) -> None:
    world = World(tmp_path, {"H100": "quota", "A100": "quota", "L4": "stockout"}, fail_after=0.0)
    with pytest.raises(RunStopped, match="every alternative was passed over") as stopped:
        world.run(job(world.root)).submit()
    assert [p.kind for p in stopped.value.passed] == ["quota", "quota", "capacity"]
    assert world.live() == []


def test_a_bad_alternative_fails_before_anything_is_sent(tmp_path: Path) -> None:
    world = World(tmp_path, {})
    spec = job(world.root, "H100:8", {"machine": "A100:8"}, {"target": "fake", "region": "us-east1"})
    with pytest.raises(SpecError, match=r"fallback\[1\].region: fake has no region setting"):
        world.run(spec)
    with pytest.raises(SpecError, match=r"fallback\[0\].target: unknown target"):
        world.run(job(world.root, "H100:8", {"target": "nowhere"}))
    assert world.cloud.received == []


def test_render_shows_the_primary_and_says_the_alternatives(tmp_path: Path) -> None:
    spec = job(tmp_path)
    request = api.render(spec, "fake")
    assert request.identity.endswith("-0")
    assert request.create.body["labels"]["crosstrain-attempt"] == "0"
    said = [note for note in request.notes if note.startswith("fallback:")]
    assert len(said) == 2
    assert "attempt 1 (fake A100:8)" in said[0]
    assert said[1].endswith("-2")


def test_a_job_without_fallback_renders_as_before(tmp_path: Path) -> None:
    plain = job(tmp_path).model_copy(update={"fallback": []})
    request = api.render(plain, "fake")
    assert "crosstrain-run" not in request.create.body["labels"]


def test_cross_target_alternatives_render_each(tmp_path: Path) -> None:
    spec = job_from_dict(
        {
            "name": "train",
            "image": "img",
            "command": "python train.py",
            "primary": {"machine": "A100:8"},
            "fallback": [{"region": "us-east1"}, {"target": "azureml", "machine": "A100-80GB:8"}],
            "targets": {
                "vertex": {"project": "p", "region": "us-central1", "staging_bucket": "gs://bucket"},
                "azureml": {"subscription_id": "s", "resource_group": "g", "workspace": "w", "compute": "c"},
            },
        }
    )
    made = fallback.plan(spec, "vertex")
    assert [a.where for a in made.attempts] == [
        "vertex us-central1 A100:8",
        "vertex us-east1 A100:8",
        "azureml A100-80GB:8",
    ]
    assert [r.target for r in made.requests] == ["vertex", "vertex", "azureml"]
    assert len({r.identity for r in made.requests}) == 3


def test_with_check_an_attempt_whose_preflight_says_quota_or_capacity_is_never_created(tmp_path: Path) -> None:
    world = World(tmp_path, {"H100": "quota", "A100": "stockout"})
    world.backend = CapacityBackend(cloud=world.cloud, retry=FAST)
    handle = world.run(job(world.root), check=True).submit()
    assert attempt_of(handle) == 2
    passed = handle.ref["fallback"]["passed"]
    assert [(p["attempt"], p["kind"]) for p in passed] == [(0, "quota"), (1, "capacity")]
    assert passed[0]["message"].startswith("crosstrain check: quota: H100: quota")
    assert [c.method for c in world.cloud.received] == ["PUT", "GET"]  # one create: attempt 2's


def test_with_check_a_permission_failure_stops_the_run(tmp_path: Path) -> None:
    world = World(tmp_path, {"H100": "quota", "A100": "denied"})
    world.backend = CapacityBackend(cloud=world.cloud, retry=FAST)
    with pytest.raises(RunStopped, match=r"the check of attempt 1 \(fake A100:8\) failed") as stopped:
        world.run(job(world.root), check=True).submit()
    assert [p.kind for p in stopped.value.passed] == ["quota"]
    assert world.cloud.received == []


def test_validate_renders_every_alternative(tmp_path: Path) -> None:
    spec = job(tmp_path, "H100:8", {"machine": "A100:8"}, {"target": "fake", "region": "us-east1"})
    problems = api.validate(spec, ["fake"])["fake"]
    assert [p.path for p in problems] == ["fallback[1].region"]
    assert api.validate(job(tmp_path), ["fake"]) == {"fake": []}


def test_a_backend_alone_refuses_a_job_with_alternatives_rather_than_drop_them() -> None:
    from crosstrain.registry import create_backend

    job = TrainingJob.model_validate(
        {"name": "fb", "image": "python:3.11", "command": ["python", "-c", "0"], "fallback": [{"region": "us-east1"}]}
    )
    with pytest.raises(SpecError, match=r"fallback: names alternatives"):
        create_backend("vertex", settings={"project": "p", "region": "us-central1"}).submit(job)


class _Stalling(CapacityCloud):
    """A cloud whose status reads stall once `stall` is set: an answer that never completes."""

    def __init__(self, plans: dict[str, str]) -> None:
        super().__init__(plans)
        self.stall = threading.Event()
        self.released = threading.Event()

    def answer(self, call: Any) -> Any:
        if call.method == "GET" and self.stall.is_set():
            self.released.wait(30)
        return super().answer(call)


def _stalled_run(tmp_path: Path) -> tuple[fallback.Run, _Stalling]:
    """A run submitted to a cloud whose status reads then stall (until `released` is set)."""
    world = World(tmp_path, {})
    world.cloud = cloud = _Stalling({})
    world.backend = FakeBackend(cloud=cloud, retry=FAST)
    run = world.run(job(world.root))
    run.submit()
    cloud.stall.set()
    return run, cloud


def test_wait_s_timeout_holds_while_a_status_read_never_completes(tmp_path: Path) -> None:
    import time

    from crosstrain.errors import WaitTimeout

    run, cloud = _stalled_run(tmp_path)
    started = time.monotonic()
    try:
        with pytest.raises(WaitTimeout, match="gave no whole answer to a status read"):
            run.wait(timeout=0.5, poll_interval=0.05)
    finally:
        cloud.released.set()
    assert time.monotonic() - started < 3  # the 0.5 s asked, or the last read's second


def test_the_cli_s_wait_says_the_last_state_read_rather_than_read_again(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """After the timeout, `crosstrain wait --json` prints the last status the wait read: a read that never
    completes is not asked again (where none ever answered, the state is UNKNOWN)."""
    import json
    import time

    from crosstrain import cli
    from crosstrain.errors import ExitCode

    run, cloud = _stalled_run(tmp_path)
    started = time.monotonic()
    try:
        code = cli._wait(run, 0.5, 0.05, True)
    finally:
        cloud.released.set()
    assert code == ExitCode.WAIT_TIMEOUT
    assert time.monotonic() - started < 3
    said = json.loads(capsys.readouterr().out)
    assert said["state"] == "UNKNOWN"
    assert "gave no whole answer" in said["error"]
