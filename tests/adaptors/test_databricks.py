"""databricks-sdk's adaptor: a body goes to `JobsAPI.submit` only where the installed SDK's classes carry all of it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from crosstrain.adaptors import databricks as adaptor
from crosstrain.errors import SubmitError

GOLDEN = Path(__file__).parents[1] / "backends" / "golden"


@pytest.mark.parametrize("golden", sorted(GOLDEN.glob("databricks*/*.json")), ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_every_rendered_body_goes_through_the_sdk_classes_whole(golden: Path) -> None:
    bodies = [call["body"] for call in json.loads(golden.read_text())["calls"] if call["url"].endswith("runs/submit")]
    assert bodies  # a job's one run, or a sweep's one per trial
    for body in bodies:
        arguments = adaptor.submit_arguments(body)
        assert arguments.keys() == body.keys()
        assert [task.as_dict() for task in arguments["tasks"]] == body["tasks"]


def test_a_field_the_sdk_does_not_model_is_refused_before_anything_is_sent() -> None:
    body = {
        "run_name": "r",
        "tasks": [{"task_key": "train", "ai_runtime_task": {"experiment": "e", "deployments": [], "future": 1}}],
    }
    with pytest.raises(SubmitError, match=r"cannot send tasks\[0\]\.ai_runtime_task\.future = 1") as raised:
        adaptor.submit_arguments(body)
    assert "nothing was sent" in str(raised.value)
    assert not raised.value.job_may_exist
