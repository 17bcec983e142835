"""Sweeps: the spec's `sweep:` checked at its paths, refused per target with reasons, rendered for each platform's
own tuning service (validated by the platform's types, compared with what its SDK sends), and golden files."""

from __future__ import annotations

import json
import logging
import math
import os
import re
from pathlib import Path
from typing import Any

import pytest

from crosstrain.errors import SpecError, Unsupported
from crosstrain.loader import job_from_dict, load_job
from crosstrain.records import Request
from crosstrain.registry import create_backend
from crosstrain.sweep import trials
from crosstrain.testing.conformance import BASE_JOB, merge
from tests.backends.test_vertex import golden_text
from tests.backends.validators import assert_valid, violations
from tests.conftest import ROOT

EXAMPLE = ROOT / "examples" / "sweep" / "job.yaml"
GOLDEN = Path(__file__).parent / "golden"
VERTEX = {"project": "my-project", "region": "us-central1"}
AIPLATFORM = {"project": "my-project", "region": "us-central1"}
AZUREML = {"subscription_id": "00000000-0000-0000-0000-000000000000", "resource_group": "ml", "workspace": "ws"}
AZUREML_COMPUTE = {**AZUREML, "compute": "gpu-cluster"}

SWEEP: dict[str, Any] = {
    "parameters": {
        "lr": {"min": 0.0001, "max": 0.1, "scale": "log"},
        "layers": {"min": 1, "max": 4},
        "batch": [16, 32, 64],
        "optimizer": ["adam", "sgd"],
    },
    "metric": "val_loss",
    "goal": "minimize",
    "algorithm": "random",
    "max_trials": 8,
    "parallel_trials": 2,
}


def sweep_job(**changes: Any) -> Any:
    base = merge(BASE_JOB, {"sweep": SWEEP, "args": ["--epochs", "2"]})
    return job_from_dict(merge(base, changes))


def render(target: str, job: Any, settings: dict[str, Any]) -> Request:
    return create_backend(target, environ={}).render(job, settings)


def refusal(target: str, job: Any, settings: dict[str, Any]) -> dict[str, str]:
    with pytest.raises(Unsupported) as refused:
        render(target, job, settings)
    return {p.path: p.message for p in refused.value.problems}


# -- the spec --------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("changes", "path", "words"),
    [
        ({"parameters": {"lr": {"min": 0.1, "max": 0.01}}}, "sweep.parameters.lr", "below max"),
        ({"parameters": {"lr": {"type": "double", "min": 0, "max": 1, "scale": "log"}}}, "sweep.parameters.lr", "log"),
        ({"parameters": {"n": {"type": "integer", "min": 1.5, "max": 3}}}, "sweep.parameters.n", "whole numbers"),
        ({"parameters": {"o": ["a b", "c"]}}, "sweep.parameters.o", "categorical value"),
        ({"parameters": {"b": [1, 1]}}, "sweep.parameters.b", "repeat"),
        ({"parameters": {"9lr": [1, 2]}}, "sweep.parameters", "parameter name"),
        ({"algorithm": "grid", "max_trials": None}, "sweep.parameters.lr.type", "double range"),
        ({"max_trials": None}, "sweep.max_trials", "number of trials"),
        ({"parallel_trials": 9}, "sweep.parallel_trials", "exceed max_trials"),
        ({"metric": "val loss"}, "sweep.metric", "metric name"),
        ({"goal": "lowest"}, "sweep.goal", ""),
        ({"early_stopping": {"policy": "bandit"}}, "sweep.early_stopping", "slack_factor"),
    ],
)
def test_every_sweep_field_is_checked_at_its_path(changes: dict[str, Any], path: str, words: str) -> None:
    with pytest.raises(SpecError) as refused:
        sweep_job(sweep=changes)
    found = {p.path: p.message for p in refused.value.problems}
    assert path in found, found
    assert words in found[path]


def test_a_sweep_reference_names_a_parameter_of_the_sweep() -> None:
    with pytest.raises(SpecError) as refused:
        sweep_job(args=["--lr", "${sweep.rate}"])
    (problem,) = refused.value.problems
    assert (problem.path, problem.fix) == (
        "args[1]",
        "use one of ${sweep.lr}, ${sweep.layers}, ${sweep.batch}, ${sweep.optimizer}",
    )
    with pytest.raises(SpecError) as refused:
        job_from_dict({**BASE_JOB, "env": {"LR": "${sweep.lr}"}})
    assert [p.path for p in refused.value.problems] == ["env.LR"]
    assert "no sweep" in refused.value.problems[0].message


def test_shorthands_and_the_trials_chosen_here() -> None:
    sweep = sweep_job(sweep={"algorithm": "grid", "max_trials": None, "parameters": {"lr": None}}).sweep
    assert [p.type for p in sweep.parameters.values()] == ["integer", "discrete", "categorical"]
    grid = trials(sweep)
    assert len(grid) == sweep.trial_count == 4 * 3 * 2
    assert grid[0] == {"layers": 1, "batch": 16, "optimizer": "adam"}
    drawn = trials(sweep_job().sweep)
    assert drawn == trials(sweep_job().sweep)  # the same spec draws the same trials on every machine
    assert len(drawn) == 8
    for values in drawn:
        assert 0.0001 <= values["lr"] <= 0.1
        assert values["layers"] in range(1, 5)
        assert values["batch"] in (16, 32, 64)


# -- refusals per target ---------------------------------------------------------------------------------------
def test_each_target_refuses_what_its_service_lacks_with_the_reason() -> None:
    median = sweep_job(sweep={"early_stopping": "median"})
    assert "AI Platform" in refusal("aiplatform", median, AIPLATFORM)["sweep.early_stopping.policy"]
    bandit = sweep_job(sweep={"early_stopping": {"policy": "bandit", "slack_factor": 0.1}})
    assert "no bandit early stopping" in refusal("vertex", bandit, VERTEX)["sweep.early_stopping.policy"]
    failed = sweep_job(sweep={"max_failed_trials": 2})
    assert "failed trials" in refusal("azureml", failed, AZUREML_COMPUTE)["sweep.max_failed_trials"]
    bayes = sweep_job(sweep={"algorithm": "bayesian"})
    found = refusal("azureml", bayes, AZUREML_COMPUTE)
    assert "loguniform" in found["sweep.parameters.lr.scale"]
    databricks = refusal("databricks", bayes, {"host": "https://dbc-1.cloud.databricks.com"})
    assert "runs/submit has no tuning service" in databricks["sweep.algorithm"]


def test_a_value_the_service_passes_to_the_program_needs_the_bootstrap_to_be_placed() -> None:
    job = sweep_job(args=["--lr", "${sweep.lr}"], env={"OPT": "${sweep.optimizer}"})
    found = refusal("vertex", job, VERTEX)
    assert set(found) == {"args[1]", "env.OPT"}
    assert "ships its code" in found["args[1]"]
    # Azure ML writes the value into the command itself: only the variable needs the bootstrap
    assert set(refusal("azureml", job, AZUREML_COMPUTE)) == {"env.OPT"}


# -- Vertex AI -------------------------------------------------------------------------------------------------
def test_vertex_renders_a_tuning_job_whose_trials_are_the_jobs_own_pools() -> None:
    plain = render("vertex", job_from_dict(BASE_JOB), VERTEX)
    request = render("vertex", sweep_job(), VERTEX)
    assert_valid(request)  # HyperparameterTuningJob.from_json, the discovery document, the documented rules
    assert request.create.url.endswith("/locations/us-central1/hyperparameterTuningJobs")
    body = request.create.body
    trial_pools = body["trialJobSpec"]["workerPoolSpecs"]
    for pool in trial_pools:
        env = pool["containerSpec"].pop("env")
        assert {"name": "CROSSTRAIN_SWEEP", "value": "lr,layers,batch,optimizer"} in env
        pool["containerSpec"]["env"] = [e for e in env if e["name"] != "CROSSTRAIN_SWEEP"]
    assert body["trialJobSpec"] == plain.create.body["jobSpec"]
    assert (body["maxTrialCount"], body["parallelTrialCount"]) == (8, 2)


def test_vertex_tuning_jobs_invalid_for_the_platform_are_caught() -> None:
    request = render("vertex", sweep_job(), VERTEX)
    request.create.body["studySpec"]["algorithm"] = "GRID_SEARCH"
    request.create.body["studySpec"]["parameters"][0]["scaleType"] = "UNIT_SQUARE"
    found = violations(request)
    assert any("GRID_SEARCH" in line for line in found)
    assert any("HyperparameterTuningJob.from_json" in line for line in found)


@pytest.mark.parametrize("algorithm", ["random", "grid", "bayesian"])
def test_vertex_study_matches_what_the_sdk_sends(algorithm: str) -> None:
    from google.auth.credentials import AnonymousCredentials
    from google.cloud import aiplatform
    from google.cloud.aiplatform import hyperparameter_tuning as hpt
    from google.cloud.aiplatform_v1 import CustomJob

    changes: dict[str, Any] = {"algorithm": algorithm, "max_failed_trials": 3, "early_stopping": None}
    if algorithm == "grid":
        changes["parameters"] = {"lr": None}
    job = sweep_job(sweep=changes)
    body = render("vertex", job, VERTEX).create.body
    ours = CustomJob.from_json(json.dumps({"displayName": "x", "jobSpec": body["trialJobSpec"]}))
    place: dict[str, Any] = {
        "project": "my-project",
        "location": "us-central1",
        "credentials": AnonymousCredentials(),  # type: ignore[no-untyped-call]
    }
    custom = aiplatform.CustomJob(display_name="x", worker_pool_specs=[], staging_bucket="gs://b", **place)
    custom._gca_resource.job_spec = ours.job_spec  # the job's own pools, as the SDK's CustomJob would hold them
    parameters: dict[str, Any] = {
        "lr": hpt.DoubleParameterSpec(min=0.0001, max=0.1, scale="log"),
        "layers": hpt.IntegerParameterSpec(min=1, max=4, scale="linear"),
        "batch": hpt.DiscreteParameterSpec(values=[16, 32, 64], scale=None),  # type: ignore[arg-type]
        "optimizer": hpt.CategoricalParameterSpec(values=["adam", "sgd"]),
    }
    if algorithm == "grid":
        del parameters["lr"]
    sdk = aiplatform.HyperparameterTuningJob(
        display_name=job.name,
        custom_job=custom,
        metric_spec={"val_loss": "minimize"},
        parameter_spec=parameters,
        max_trial_count=job.sweep.trial_count,
        parallel_trial_count=2,
        max_failed_trial_count=3,
        search_algorithm=None if algorithm == "bayesian" else algorithm,
        labels=body["labels"],
        **place,
    )
    message = type(sdk._gca_resource)

    def as_sent(value: Any) -> Any:  # the REST JSON of the message, as the SDK's transport writes it
        return json.loads(message.to_json(value, use_integers_for_enums=False, including_default_value_fields=False))

    assert as_sent(message.from_json(json.dumps(body))) == as_sent(sdk._gca_resource)
    assert message.from_json(json.dumps(body)) == sdk._gca_resource


# -- AI Platform -----------------------------------------------------------------------------------------------
def test_aiplatform_renders_its_hyperparameter_spec() -> None:
    job = sweep_job(sweep={"early_stopping": True, "max_failed_trials": 2, "algorithm": "bayesian"})
    request = render("aiplatform", job, AIPLATFORM)
    assert_valid(request)  # the ml v1 discovery document's HyperparameterSpec, its required fields
    linear, log = "UNIT_LINEAR_SCALE", "UNIT_LOG_SCALE"
    assert request.create.body["trainingInput"]["hyperparameters"] == {
        "goal": "MINIMIZE",
        "hyperparameterMetricTag": "val_loss",
        "params": [
            {"parameterName": "lr", "type": "DOUBLE", "minValue": 0.0001, "maxValue": 0.1, "scaleType": log},
            {"parameterName": "layers", "type": "INTEGER", "minValue": 1, "maxValue": 4, "scaleType": linear},
            {"parameterName": "batch", "type": "DISCRETE", "discreteValues": [16, 32, 64]},
            {"parameterName": "optimizer", "type": "CATEGORICAL", "categoricalValues": ["adam", "sgd"]},
        ],
        "maxTrials": 8,
        "maxParallelTrials": 2,
        "maxFailedTrials": 2,
        "enableTrialEarlyStopping": True,
    }  # fmt: skip
    request.create.body["trainingInput"]["hyperparameters"]["params"][2]["discreteValues"] = [32, 16]
    request.create.body["trainingInput"]["hyperparameters"]["algorithm"] = "BAYESIAN"
    found = violations(request)
    assert any("strictly increasing" in line for line in found)
    assert any("algorithm" in line for line in found)


# -- Azure ML --------------------------------------------------------------------------------------------------
def _azure_sweep(job: Any) -> Request:
    request = render("azureml", job, AZUREML_COMPUTE)
    assert_valid(request)  # load_job of the az-yaml form and Job._from_rest_object, both a SweepJob
    return request


@pytest.mark.parametrize(
    "changes",
    [
        {},
        {"algorithm": "grid", "max_trials": None, "parameters": {"lr": [0.001, 0.01]}},
        {"algorithm": "bayesian", "parameters": {"lr": {"scale": "linear"}}},
        {"early_stopping": {"policy": "bandit", "slack_factor": 0.1, "evaluation_interval": 1, "delay_evaluation": 2}},
        {"early_stopping": {"policy": "truncation", "truncation_percentage": 20}, "seed": 7},
    ],
    ids=["random", "grid", "bayesian", "bandit", "truncation"],
)
def test_azureml_sweep_matches_what_command_sweep_sends(changes: dict[str, Any]) -> None:
    from azure.ai.ml import command
    from azure.ai.ml.entities import Environment
    from azure.ai.ml.sweep import (
        BanditPolicy,
        Choice,
        LogUniform,
        RandomSamplingAlgorithm,
        TruncationSelectionPolicy,
        Uniform,
    )

    job = sweep_job(
        command=["python", "-m", "train"],
        args=["--lr", "${sweep.lr}", "--optimizer", "${sweep.optimizer}"],
        env={"NCCL_DEBUG": "INFO"},
        sweep=changes,
    )
    ours = _azure_sweep(job).create.body["properties"]
    base = command(
        command="python -m train --lr ${{inputs.lr}} --optimizer ${{inputs.optimizer}}",
        environment=Environment(image=BASE_JOB["image"]),
        environment_variables={"NCCL_DEBUG": "INFO"},
        inputs={"lr": 0.01, "layers": 1, "batch": 16, "optimizer": "adam"},
        compute="gpu-cluster",
        instance_count=3,
        distribution={"type": "pytorch", "process_count_per_instance": 4},
    )
    sweep = job.sweep
    space: dict[str, Any] = {}
    for name, parameter in sweep.parameters.items():
        if parameter.type == "double" and parameter.scale == "log":
            space[name] = LogUniform(min_value=math.log(parameter.min), max_value=math.log(parameter.max))
        elif parameter.type == "double":
            space[name] = Uniform(min_value=parameter.min, max_value=parameter.max)
        else:
            space[name] = Choice(values=parameter.grid())
    algorithm: Any = RandomSamplingAlgorithm(seed=sweep.seed) if sweep.seed is not None else sweep.algorithm
    swept = base(**space).sweep(
        compute="gpu-cluster", sampling_algorithm=algorithm, primary_metric="val_loss", goal="Minimize"
    )
    swept.set_limits(max_total_trials=sweep.trial_count, max_concurrent_trials=2, trial_timeout=7200)
    stopping = sweep.early_stopping
    if stopping is not None and stopping.policy == "bandit":
        swept.early_termination = BanditPolicy(slack_factor=0.1, evaluation_interval=1, delay_evaluation=2)
    elif stopping is not None:
        swept.early_termination = TruncationSelectionPolicy(
            truncation_percentage=20, evaluation_interval=1, delay_evaluation=0
        )
    logging.disable(logging.WARNING)
    try:
        rest = swept._to_job()._to_rest_object().as_dict()  # the sweep job's PUT body, as the SDK sends it
        theirs = json.loads(json.dumps(rest, default=str))["properties"]
    finally:
        logging.disable(logging.NOTSET)
    for key in ("samplingAlgorithm", "searchSpace", "limits", "earlyTermination"):
        assert ours.get(key) == theirs.get(key), key
    assert ours["objective"] == theirs["objective"]
    trial = dict(theirs["trial"])
    # Where ours differs on purpose: the job's variables carry the sweep's names (CROSSTRAIN_SWEEP) for the node
    # side; the environment is registered by its own call (so environmentId names it); the command's words are
    # shell-quoted as every crosstrain command is.
    assert ours["trial"]["environmentVariables"] == {
        **trial["environmentVariables"],
        "CROSSTRAIN_SWEEP": ",".join(sweep.parameters),
    }
    assert ours["trial"]["command"].replace("'", "") == trial["command"]
    assert ours["trial"]["distribution"] == trial["distribution"]
    assert ours["trial"]["resources"] == trial["resources"]
    assert ours["computeId"].endswith("/computes/gpu-cluster")


def test_azureml_sweeps_the_platform_refuses_are_caught() -> None:
    request = _azure_sweep(sweep_job())
    request.create.body["properties"]["searchSpace"]["lr"] = ["lognormalish", [0, 1]]
    assert violations(request)


# -- golden files ----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("target", ["vertex", "aiplatform", "azureml"])
def test_the_example_renders_valid_on_every_tuning_service(target: str) -> None:
    request = create_backend(target, environ={}).render(load_job(EXAMPLE))
    assert_valid(request)


def runtime_by_name(text: str) -> str:
    """crosstrain's own node-side files by name only (and the totals they count in as placeholders): their
    digests move with every change to crosstrain's runtime, which its own tests cover; the user's files keep theirs."""
    for call in json.loads(text)["calls"]:
        if isinstance(call.get("body"), dict) and "hash_sha256" in call["body"]:
            text = text.replace(call["body"]["hash_sha256"], "<content-hash>")
    data = json.loads(text)
    for call in data["calls"]:
        body = call.get("body")
        if isinstance(body, dict) and "blobs" in body:
            for blob in body["blobs"]:
                if re.search(r"/crosstrain_code/(crosstrain/|__init__\.py$|__main__\.py$)", blob["name"]):
                    blob["sha256"] = blob["size"] = "<runtime>"
            body["bytes"] = "<with the runtime's>"
    return json.dumps(data, indent=2, sort_keys=True, ensure_ascii=False) + "\n"


def test_the_azureml_golden_file() -> None:
    request = create_backend("azureml", environ={}).render(load_job(EXAMPLE))
    # the checkout's path and the code's digests as placeholders (the blob store's content hash covers crosstrain's
    # runtime files too, as the code's digest does)
    text = re.sub(r"hash=[0-9a-f]{64}", "hash=<content-hash>", golden_text(request))
    golden = GOLDEN / "azureml" / "sweep-job.json"
    text = runtime_by_name(text)
    if os.environ.get("CROSSTRAIN_UPDATE_GOLDEN"):
        golden.write_text(text)
    assert golden.read_text() == text, f"rerun with CROSSTRAIN_UPDATE_GOLDEN=1 and review {golden}"


# -- submit, through the platforms' loopback services -----------------------------------------------------------
def test_aiplatform_submits_a_sweep_in_the_jobs_own_create_and_follows_it() -> None:
    from tests.backends.aiplatform_server import AIPlatformPlatform

    with AIPlatformPlatform() as platform:
        backend = platform.backend()
        request = backend.render(sweep_job(), dict(platform.settings))
        handle = backend.send(request)
        (create,) = [c for c in platform.service.received if c.method == "POST"]
        assert create.body["trainingInput"]["hyperparameters"]["maxTrials"] == 8
        assert backend.status(handle).message == "0 trials"  # a tuning job that has started none yet
        stored = next(iter(platform.service.jobs.values()))
        stored["trainingOutput"]["trials"] = [
            {
                "trialId": "1",
                "state": "SUCCEEDED",
                "hyperparameters": {"lr": "0.1"},
                "finalMetric": {"objectiveValue": 0.5},
            },
            {"trialId": "2", "state": "RUNNING", "hyperparameters": {"lr": "0.01"}},
        ]
        said = backend.wait(handle, poll_interval=0.01)
        assert said.state.value == "SUCCEEDED"
        assert said.message.startswith("2 trials (1 running, 1 succeeded); best: trial 1 (lr=0.1), ")
        assert [t["state"] for t in handle.ref["outcome"]["sweep"]["trials"]] == ["SUCCEEDED", "RUNNING"]
        assert "<td>1 (best)</td><td>lr=0.1</td><td>SUCCEEDED</td><td>0.5</td>" in handle._repr_html_()
        assert backend.send(request).adopted  # exactly once: a re-submit adopts it
        assert platform.live_jobs(request.identity) == [handle.job_id]


def test_azureml_submits_a_sweep_job_and_follows_it() -> None:
    """Status and wait read the sweep's trials through the real MLClient: its child runs from the run history
    service of the workspace's region (found through the workspace's discovery URL), each trial's values from
    the sweep job's tags, the best and its metric from its properties."""
    from tests.backends.azureml_cloud import SUBSCRIPTION, AzureMLPlatform

    with AzureMLPlatform(statuses=("Queued", "Running", "Running", "Completed")) as platform:
        backend = platform.backend()
        job = sweep_job(args=["--lr", "${sweep.lr}"])
        request = backend.render(job, dict(platform.settings))
        handle = backend.send(request)
        puts = [c for c in platform.service.received if c.method == "PUT" and "/jobs/" in c.path]
        assert puts[-1].body["properties"]["jobType"] == "Sweep"
        first = backend.status(handle)
        assert first.message.startswith("0 trials")
        assert "best" not in first.message  # none chosen yet
        name = handle.job_id
        platform.service.add_trial(name, 0, {"lr": 0.1, "layers": 2}, "Completed")
        platform.service.add_trial(name, 1, {"lr": 0.01, "layers": 3}, "Running")
        platform.service.add_trial(name, 2, {"lr": 0.001, "layers": 2}, "Queued")
        path = platform.service.job(name)
        with platform.service.lock:  # the service records the best trial so far on the sweep job's properties
            props = platform.service.resources[path]["properties"]
            props["properties"] = {**(props.get("properties") or {}), "best_child_run_id": f"{name}_0", "score": "0.25"}
        # what the trials logged with MLflow (crosstrain.runtime.report); trial 2 has logged nothing yet
        platform.service.log_metric(f"{name}_0", "val_loss", 0.3, step=0)
        platform.service.log_metric(f"{name}_0", "val_loss", 0.25, step=1)
        platform.service.log_metric(f"{name}_1", "val_loss", 0.41, step=0)
        platform.service.log_metric(f"{name}_1", "train_loss", 0.1, step=0)  # not the sweep's metric
        platform.service.mlflow_page_size = 2  # the search answers in pages: every page is read
        said = backend.status(handle)
        assert said.message == (
            "3 trials (1 queued, 1 running, 1 succeeded); best so far: trial 0 (lr=0.1, layers=2), val_loss 0.25; "
            "trial 0 val_loss 0.25, trial 1 val_loss 0.41, trial 2 no val_loss logged yet"
        )
        outcome = handle.ref["outcome"]["sweep"]  # what --json prints, and the notebook's table
        assert [(t["trial"], t["state"], t["params"]) for t in outcome["trials"]] == [
            (0, "SUCCEEDED", {"lr": 0.1, "layers": 2}),
            (1, "RUNNING", {"lr": 0.01, "layers": 3}),
            (2, "QUEUED", {"lr": 0.001, "layers": 2}),
        ]
        assert [(t.get("value"), t.get("step"), t.get("note")) for t in outcome["trials"]] == [
            (0.25, 1, None),
            (0.41, 0, None),
            (None, None, "no val_loss logged yet"),
        ]
        assert (outcome["best"]["run_id"], outcome["metric"], outcome["goal"]) == (f"{name}_0", "val_loss", "minimize")
        shown = handle._repr_html_()
        assert "<td>0 (best)</td><td>lr=0.1, layers=2</td><td>SUCCEEDED</td><td>0.25</td>" in shown
        assert "<td>1</td><td>lr=0.01, layers=3</td><td>RUNNING</td><td>0.41</td>" in shown
        assert "<td>2</td><td>lr=0.001, layers=2</td><td>QUEUED</td><td>no val_loss logged yet</td>" in shown
        children = [r for r in platform.transport.sent() if r.url.split("?")[0].endswith(f"/runs/{name}/children")]
        assert children
        assert children[0].url.startswith(f"https://eastus.api.azureml.ms/history/v1.0/subscriptions/{SUBSCRIPTION}")
        assert children[0].headers["Authorization"] == "Bearer fake-token"  # the same credential, as the SDK asks
        searches = [r for r in platform.transport.sent() if r.url.endswith("/api/2.0/mlflow/runs/search")]
        assert len(searches) == 2  # one search for every trial, in two pages of two
        assert searches[0].url == (
            f"https://eastus.api.azureml.ms/mlflow/v1.0/subscriptions/{SUBSCRIPTION}/resourceGroups/my-rg/providers/"
            "Microsoft.MachineLearningServices/workspaces/my-ws/api/2.0/mlflow/runs/search"
        )
        assert searches[0].body == {
            "experiment_ids": ["00000000-0000-0000-0000-0000000000e1"],
            "filter": f"tags.mlflow.parentRunId = '{name}'",
            "max_results": 1000,
        }
        assert searches[1].body["page_token"] == "2"
        assert {s.headers["Authorization"] for s in searches} == {children[0].headers["Authorization"]}
        assert {s.read_timeout for s in searches} == {platform.call_timeout}  # the calls' own timeouts
        for index in (1, 2):
            platform.service.add_trial(
                name, index, {"lr": [0.01, 0.001][index - 1], "layers": 3 - index % 2}, "Completed"
            )
        platform.service.log_metric(f"{name}_2", "val_loss", 0.5, step=3)
        done = backend.wait(handle, poll_interval=0.01)
        assert done.state.value == "SUCCEEDED"
        assert done.message == (
            "3 trials (3 succeeded); best: trial 0 (lr=0.1, layers=2), val_loss 0.25; "
            "trial 0 val_loss 0.25, trial 1 val_loss 0.41, trial 2 val_loss 0.5"
        )
        assert [t["value"] for t in handle.ref["outcome"]["sweep"]["trials"]] == [0.25, 0.41, 0.5]
        assert backend.send(request).adopted
        assert platform.live_jobs(request.identity) == [handle.job_id]


def test_azureml_trials_are_not_read_from_a_host_that_is_not_a_regions_run_history() -> None:
    """A discovery URL that names another host: no trial is read there (the token goes nowhere else), and the
    sweep's state stands."""
    from tests.backends.azureml_cloud import AzureMLPlatform

    with AzureMLPlatform(statuses=("Running",)) as platform:
        backend = platform.backend()
        handle = backend.send(backend.render(sweep_job(args=["--lr", "${sweep.lr}"]), dict(platform.settings)))
        platform.service.discovered = "https://eastus.api.azureml.ms.example.com"
        said = backend.status(handle)
        assert not said.state.terminal
        assert "its trials are not read" in said.message
        assert "not a region's Azure ML API host" in said.message
        assert not [r for r in platform.transport.sent() if "/children" in r.url]


def test_vertex_submits_a_tuning_job_exactly_once_and_follows_it() -> None:
    from tests.backends.vertex_server import VertexPlatform

    with VertexPlatform() as platform:
        backend = platform.backend()
        request = backend.render(sweep_job(), dict(platform.settings))
        handle = backend.send(request)
        assert "/hyperparameterTuningJobs/" in handle.ref["name"]
        creates = [c for c in platform.service.received if c.method == "POST"]
        assert [c.path.rsplit("/", 1)[1] for c in creates] == ["hyperparameterTuningJobs"]
        from google.cloud.aiplatform_v1 import HyperparameterTuningJob

        sent = HyperparameterTuningJob.from_json(json.dumps(creates[0].body))  # the REST transport's enums are ints
        assert sent == HyperparameterTuningJob.from_json(json.dumps(request.create.body))
        again = backend.send(request)  # exactly once: a re-submit finds it under its identity label
        assert (again.adopted, again.job_id) == (True, handle.job_id)
        assert platform.live_jobs(request.identity) == [handle.job_id]
        status = backend.wait(handle, poll_interval=0.01)
        assert status.state.value == "SUCCEEDED"
        assert status.message.startswith("0 trials")  # the loopback runs no trials


def test_a_tuning_jobs_trials_and_the_best_are_said() -> None:
    from google.cloud.aiplatform_v1 import HyperparameterTuningJob

    from crosstrain.backends.vertex.sweep import trials_said

    job = HyperparameterTuningJob.from_json(
        json.dumps(
            {
                "studySpec": {"metrics": [{"metricId": "loss", "goal": "MINIMIZE"}]},
                "trials": [
                    {"id": "1", "state": "SUCCEEDED", "parameters": [{"parameterId": "lr", "value": 0.1}],
                     "finalMeasurement": {"metrics": [{"metricId": "loss", "value": 0.5}]}},
                    {"id": "2", "state": "SUCCEEDED", "parameters": [{"parameterId": "lr", "value": 0.01}],
                     "finalMeasurement": {"metrics": [{"metricId": "loss", "value": 0.25}]}},
                    {"id": "3", "state": "ACTIVE", "parameters": [{"parameterId": "lr", "value": 0.001}]},
                ],
            }
        )
    )  # fmt: skip
    assert trials_said(job) == "3 trials (1 active, 2 succeeded); best: trial 2 (lr=0.01), loss 0.25"
    from crosstrain.backends.vertex.sweep import trials_outcome

    outcome = trials_outcome(job)["sweep"]  # what status keeps on the handle: --json, the notebook's table
    assert [(t["trial"], t["state"], t["params"], t.get("value")) for t in outcome["trials"]] == [
        ("1", "SUCCEEDED", {"lr": 0.1}, 0.5),
        ("2", "SUCCEEDED", {"lr": 0.01}, 0.25),
        ("3", "ACTIVE", {"lr": 0.001}, None),
    ]
    assert (outcome["best"]["trial"], outcome["metric"], outcome["goal"]) == ("2", "loss", "minimize")


def test_an_aiplatform_tuning_jobs_trials_and_the_best_are_said() -> None:
    from crosstrain.backends.aiplatform.sweep import trials_said

    job = {
        "trainingInput": {"hyperparameters": {"goal": "MAXIMIZE", "hyperparameterMetricTag": "accuracy"}},
        "trainingOutput": {
            "isHyperparameterTuningJob": True,
            "trials": [
                {"trialId": "1", "state": "SUCCEEDED", "hyperparameters": {"lr": "0.1"},
                 "finalMetric": {"trainingStep": "10", "objectiveValue": 0.8}},
                {"trialId": "2", "state": "SUCCEEDED", "hyperparameters": {"lr": "0.01"},
                 "finalMetric": {"trainingStep": "10", "objectiveValue": 0.9}},
                {"trialId": "3", "state": "RUNNING", "hyperparameters": {"lr": "0.001"}},
            ],
        },
    }  # fmt: skip
    assert trials_said(job) == "3 trials (1 running, 2 succeeded); best: trial 2 (lr=0.01), accuracy 0.9"
    from crosstrain.backends.aiplatform.sweep import trials_outcome

    outcome = trials_outcome(job)
    assert outcome is not None
    assert [(t["trial"], t["state"], t.get("value"), t.get("step")) for t in outcome["sweep"]["trials"]] == [
        ("1", "SUCCEEDED", 0.8, 10),
        ("2", "SUCCEEDED", 0.9, 10),
        ("3", "RUNNING", None, None),
    ]
    assert outcome["sweep"]["best"]["trial"] == "2"
    assert outcome["sweep"]["goal"] == "maximize"
    assert trials_said({"trainingOutput": {}}) == ""


def test_a_vertex_patch_on_a_sweep_is_refused_with_the_reason() -> None:
    job = sweep_job(targets={"vertex": {"patch": {"jobSpec": {"enableWebAccess": True}}}})
    found = refusal("vertex", job, VERTEX)
    assert "HyperparameterTuningJob" in found["targets.vertex.patch"]


def test_hyphenated_names_timeouts_and_their_refusals() -> None:
    job = sweep_job(sweep={"parameters": {"learning-rate": [0.1, 0.2]}, "timeout": "2h"})
    assert "no time limit for a whole sweep" in refusal("vertex", job, VERTEX)["sweep.timeout"]
    assert "letters, digits and '_'" in refusal("azureml", job, AZUREML_COMPUTE)["sweep.parameters.learning-rate"]
    ok = sweep_job(sweep={"timeout": "2h"})
    assert _azure_sweep(ok).create.body["properties"]["limits"]["timeout"] == "PT2H"
    with pytest.raises(SpecError) as refused:
        sweep_job(sweep={"parameters": {"a-b": [1, 2], "a_b": [1, 2]}})
    assert "differ only in '-' and '_'" in str(refused.value)


def test_the_notebook_shows_a_sweeps_trials_as_a_table() -> None:
    from crosstrain.records import JobHandle

    outcome = {
        "state": "SUCCEEDED",
        "sweep": {
            "metric": "loss",
            "trials": [
                {"trial": 1, "params": {"lr": 0.1}, "state": "SUCCEEDED", "value": 0.5},
                {"trial": 2, "params": {"lr": "<b>"}, "state": "FAILED"},
            ],
            "best": {"trial": 1},
        },
    }
    shown = JobHandle("local", "x-1", "sweep-x-1", "", {"outcome": outcome})._repr_html_()
    assert "<td>1 (best)</td><td>lr=0.1</td><td>SUCCEEDED</td><td>0.5</td>" in shown
    assert "lr=&lt;b&gt;" in shown  # every value escaped
    assert "sweep</th><td style='text-align:left'>4 trials (grid)" in load_job(EXAMPLE)._repr_html_()


def test_azureml_list_shows_a_sweep_as_one_row_with_its_trials() -> None:
    from tests.backends.azureml_cloud import AzureMLPlatform

    with AzureMLPlatform(statuses=("Running",)) as platform:
        backend = platform.backend()
        single = backend.send(backend.render(job_from_dict(BASE_JOB), dict(platform.settings)))
        handle = backend.send(backend.render(sweep_job(args=["--lr", "${sweep.lr}"]), dict(platform.settings)))
        platform.service.add_trial(handle.job_id, 0, {"lr": 0.1}, "Completed")
        platform.service.add_trial(handle.job_id, 1, {"lr": 0.01}, "Running")
        rows = list(platform.backend().list_jobs(dict(platform.settings)))
        assert [row.identity for row in rows] == [handle.job_id, single.job_id]  # one row per sweep, newest first
        assert rows[0].sweep is not None
        assert rows[0].to_dict()["sweep"] == {
            "trials": 2,
            "states": {"SUCCEEDED": 1, "RUNNING": 1},
            "summary": "2 trials (1 running, 1 succeeded)",
            "best": None,
        }
        assert "sweep" not in rows[1].to_dict()
        assert rows[0].handle is not None
        assert "outcome" not in rows[0].handle.ref


def test_vertex_list_shows_a_tuning_job_as_one_row_with_its_trials() -> None:
    from tests.backends.vertex_server import VertexPlatform

    with VertexPlatform() as platform:
        backend = platform.backend()
        single = backend.send(backend.render(job_from_dict(BASE_JOB), dict(platform.settings)))
        handle = backend.send(backend.render(sweep_job(), dict(platform.settings)))
        platform.service.jobs[handle.ref["name"]]["trials"] = [
            {"id": "1", "state": "SUCCEEDED", "parameters": [{"parameterId": "lr", "value": 0.1}],
             "finalMeasurement": {"stepCount": "3", "metrics": [{"metricId": "val_loss", "value": 0.5}]}},
            {"id": "2", "state": "ACTIVE", "parameters": [{"parameterId": "lr", "value": 0.01}]},
        ]  # fmt: skip
        rows = list(platform.backend().list_jobs(dict(platform.settings)))
        assert [row.identity for row in rows] == [handle.identity, single.identity]
        assert rows[0].sweep is not None
        assert rows[0].sweep["trials"] == 2
        assert rows[0].sweep["states"] == {"SUCCEEDED": 1, "ACTIVE": 1}
        assert rows[0].sweep["best"]["trial"] == "1"
        assert rows[0].sweep["summary"].endswith("best: trial 1 (lr=0.1), val_loss 0.5")
        assert rows[1].sweep is None
        assert rows[0].handle is not None
        assert "/hyperparameterTuningJobs/" in rows[0].handle.ref["name"]
