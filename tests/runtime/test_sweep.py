"""A trial on the node: `runtime.report` writes what each service reads, the trial's id and parameters on every
platform, and the bootstrap places a trial's values at `${sweep.NAME}`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from crosstrain import bootstrap
from crosstrain.runtime import sweep


def test_report_writes_the_hypertune_file_as_cloudml_hypertune_does(tmp_path: Path) -> None:
    path = tmp_path / "hypertune" / "output.metrics"
    env = {"CLUSTER_SPEC": json.dumps({"task": {"type": "workerpool0", "index": 0, "trial": "3"}}),
           "CLOUD_ML_HP_METRIC_FILE": str(path)}  # fmt: skip
    for step in range(1, 103):
        assert sweep.report({"val_loss": 1.0 / step}, step=step, environ=env) == "hypertune"
    lines = path.read_text().splitlines()
    assert len(lines) == sweep.HYPERTUNE_KEEP  # the last 100, as cloudml-hypertune keeps them
    last = json.loads(lines[-1])
    assert lines[-1] == json.dumps(last, sort_keys=True)
    assert {k: v for k, v in last.items() if k != "timestamp"} == {
        "global_step": "102",
        "trial": "0",
        "val_loss": str(1.0 / 102),
    }
    assert isinstance(last["timestamp"], float)
    assert sweep.trial_id(env) == "3"  # Vertex AI's trial, from CLUSTER_SPEC


def test_report_on_databricks_and_locally_appends_to_the_results_file(tmp_path: Path) -> None:
    results = tmp_path / "results.jsonl"
    env = {"CROSSTRAIN_SWEEP_RESULTS": str(results), "CROSSTRAIN_TRIAL_ID": "2"}
    assert sweep.report({"loss": 0.5}, step=1, environ=env) == "file"
    assert sweep.report({"loss": 0.25, "acc": 0.9}, step=2, environ=env) == "file"
    assert sweep.report({"loss": 9.0}, step=2, environ={**env, "RANK": "1"}) == "none"  # rank 0 only
    assert sweep.read_results(str(results), "loss") == {"value": 0.25, "step": 2}
    assert sweep.read_results(str(results), "missing") is None
    with pytest.raises(ValueError, match="at least one metric"):
        sweep.report({}, environ=env)


def test_report_on_azureml_without_mlflow_says_so(capsys: pytest.CaptureFixture[str]) -> None:
    import importlib.util

    if importlib.util.find_spec("mlflow") is not None:
        pytest.skip("mlflow is installed here")
    assert sweep.report({"loss": 1.0}, environ={"AZUREML_RUN_ID": "run-1", "CROSSTRAIN_SWEEP": "lr"}) == "none"
    assert "install mlflow and azureml-mlflow" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("env", "argv", "trial", "values"),
    [
        ({"CROSSTRAIN_SWEEP": "lr,opt", "CROSSTRAIN_SWEEP_lr": "0.1", "CROSSTRAIN_SWEEP_opt": "adam",
          "CROSSTRAIN_TRIAL_ID": "1"}, [], "1", {"lr": 0.1, "opt": "adam"}),
        ({"CROSSTRAIN_SWEEP": "lr", "TF_CONFIG": json.dumps({"task": {"type": "master", "trial": "7"}})},
         ["--epochs", "2", "--lr=0.01"], "7", {"lr": 0.01}),
        ({"CROSSTRAIN_SWEEP": "lr,n", "AZUREML_SWEEP_lr": "0.2", "AZUREML_SWEEP_n": "3", "AZUREML_RUN_ID": "sweep_1"},
         [], "sweep_1", {"lr": 0.2, "n": 3}),
        ({}, ["--lr", "0.1"], None, {}),
    ],
    ids=["crosstrain", "aiplatform", "azureml", "no-sweep"],
)  # fmt: skip
def test_every_platform_gives_the_trial_its_id_and_parameters(
    env: dict[str, str], argv: list[str], trial: str | None, values: dict[str, object]
) -> None:
    assert sweep.trial_id(env) == trial
    assert sweep.params(env, argv) == values


def test_the_bootstrap_places_the_values_the_service_appends() -> None:
    env: dict[str, str] = {"CROSSTRAIN_SWEEP": "lr,opt", "OPT": "${sweep.opt}"}
    command = ["python", "train.py", "--lr", "${sweep.lr}", "--lr=0.01", "--opt", "sgd"]
    assert bootstrap.fill_sweep(command, env) == ["python", "train.py", "--lr", "0.01"]
    assert env == {
        "CROSSTRAIN_SWEEP": "lr,opt",
        "OPT": "sgd",
        "CROSSTRAIN_SWEEP_lr": "0.01",
        "CROSSTRAIN_SWEEP_opt": "sgd",
    }
    # AI Platform runs the command under `env NAME=VALUE`; Azure ML sets AZUREML_SWEEP_NAME
    aip: dict[str, str] = {}
    assert bootstrap.fill_sweep(["env", "CROSSTRAIN_SWEEP=lr", "python", "t.py", "${sweep.lr}", "--lr=3"], aip) == [
        "env", "CROSSTRAIN_SWEEP=lr", "python", "t.py", "3"
    ]  # fmt: skip
    azure = {"CROSSTRAIN_SWEEP": "lr", "AZUREML_SWEEP_lr": "0.5", "X": "lr=${sweep.lr}"}
    assert bootstrap.fill_sweep(["python", "t.py"], azure) == ["python", "t.py"]
    assert azure["X"] == "lr=0.5"
    # a program that reads the appended arguments itself keeps them
    assert bootstrap.fill_sweep(["python", "t.py", "--lr=0.2"], {"CROSSTRAIN_SWEEP": "lr"}) == [
        "python", "t.py", "--lr=0.2"
    ]  # fmt: skip
