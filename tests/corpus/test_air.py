"""The air CLI's rules as tests/corpus/air.py translates them (its docstring names the Go source read)."""

from __future__ import annotations

import pytest

from tests.corpus import air

WORKLOAD = """
experiment_name: demo
compute: {accelerator_type: GPU_8xH100, num_accelerators: 16}
command: python train.py
"""


def test_defaults_are_the_clis() -> None:
    """No version: the CLIENT-GPU-6 channel; no max_retries: 3, with retry_on_timeout; no timeout: none sent."""
    body = air.submit_body(air.load_workload(WORKLOAD), "/x/command.sh", "", "t")
    air.sdk_round_trip(body)
    assert body["environments"][0]["spec"] == {"environment_version": "6"}
    task = body["tasks"][0]
    assert (task["task_key"], task["max_retries"], task["retry_on_timeout"]) == ("demo", 3, True)
    assert "timeout_seconds" not in body
    assert "code_source_path" not in task["ai_runtime_task"]


def test_a_databricks_ai_version_is_a_base_environment() -> None:
    cfg = air.load_workload(WORKLOAD + "environment: {version: databricks_ai_v6, dependencies: []}\n")
    body = air.submit_body(cfg, "/x/command.sh", "", "t")
    assert body["environments"][0]["spec"] == {"base_environment": "workspace-base-environments/databricks_ai_v6"}


@pytest.mark.parametrize(
    ("extra", "said"),
    [
        ("max_retries: -1\n", "max_retries must be >= 0"),
        ("secrets: {HF_TOKEN: no-slash}\n", "invalid secret reference"),
        ("env_variables: {A: b}\nsecrets: {A: s/k}\n", "set in both env_variables and secrets"),
        ("environment: {version: databricks_ai_v4}\n", "version 5 or higher"),
        ("environment: {dependencies: requirements.txt}\n", "must be a list of packages"),
        ("unknown_field: 1\n", "unknown fields"),
    ],
)
def test_what_the_cli_refuses(extra: str, said: str) -> None:
    with pytest.raises(ValueError, match=said):
        air.load_workload(WORKLOAD + extra)


def test_a_pool_and_priority_go_where_submit_run_puts_them() -> None:
    pooled = "num_accelerators: 16, pool_id: p1, priority_class: NORMAL}"
    cfg = air.load_workload(WORKLOAD.replace("num_accelerators: 16}", pooled))
    task = air.submit_body(cfg, "/x/command.sh", "", "t")["tasks"][0]["ai_runtime_task"]
    assert task["priority_class"] == "NORMAL"
    assert task["deployments"][0]["compute"]["provisioned_capacity_id"] == "p1"


def test_commands_the_translation_does_not_know_are_refused() -> None:
    with pytest.raises(ValueError, match="not a shape this translation knows"):
        air.original_command("pip install x\npython train.py", 8, 1)
    with pytest.raises(ValueError, match="each node trains alone"):
        air.original_command("torchrun --nproc_per_node=8 train.py", 8, 2)
    assert air.original_command("cd $CODE_SOURCE_PATH\ntorchrun --nproc_per_node=8 train.py", 8, 1) == {
        "cwd": air.CODE,
        "processes_per_node": 8,
        "argv": ["python", "train.py"],
    }
