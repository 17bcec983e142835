"""An Azure ML sweep's trials' metrics, read through the real MLClient's run history pipeline from the workspace's
MLflow tracking service (the loopback Azure ML answers MLflow's `runs/search` from what each trial logged)."""

from __future__ import annotations

from typing import Any

from tests.backends.test_sweeps import sweep_job


def _sweep(platform: Any, *, maximize: bool = False) -> tuple[Any, Any, str]:
    backend = platform.backend()
    job = sweep_job(args=["--lr", "${sweep.lr}"])
    if maximize:
        job = sweep_job(args=["--lr", "${sweep.lr}"], sweep={"metric": "accuracy", "goal": "maximize"})
    handle = backend.send(backend.render(job, dict(platform.settings)))
    name = handle.job_id
    platform.service.add_trial(name, 0, {"lr": 0.1}, "Completed")
    platform.service.add_trial(name, 1, {"lr": 0.01}, "Running")
    return backend, handle, name


def _best_said(platform: Any, name: str, run: str, score: str) -> None:
    with platform.service.lock:
        props = platform.service.resources[platform.service.job(name)]["properties"]
        props["properties"] = {**(props.get("properties") or {}), "best_child_run_id": run, "score": score}


def test_a_failing_metrics_search_leaves_the_trials_shown_and_says_why() -> None:
    """The search refused (a 400: final) or unreachable: every trial is shown with its state and values, each
    says its metric was not read, the line says why once, and the sweep's state stands."""
    from tests.backends.azureml_cloud import AzureMLPlatform

    with AzureMLPlatform(statuses=("Running",)) as platform:
        backend, handle, name = _sweep(platform)
        platform.service.log_metric(f"{name}_0", "val_loss", 0.3)
        platform.service.inject("metrics", "invalid")
        said = backend.status(handle)
        assert not said.state.terminal
        assert said.message.startswith(
            "2 trials (1 running, 1 succeeded); trial 0 val_loss not read, trial 1 val_loss not read "
            "(val_loss not read: POST https://eastus.api.azureml.ms/mlflow/v1.0/subscriptions/"
        )
        assert "400 from Azure" in said.message
        sweep = handle.ref["outcome"]["sweep"]
        assert [(t["trial"], t["params"], t["state"], t["note"]) for t in sweep["trials"]] == [
            (0, {"lr": 0.1}, "SUCCEEDED", "val_loss not read"),
            (1, {"lr": 0.01}, "RUNNING", "val_loss not read"),
        ]
        assert all("value" not in t for t in sweep["trials"])
        assert "400 from Azure" in sweep["metrics_error"]
        assert "<td>0</td><td>lr=0.1</td><td>SUCCEEDED</td><td>val_loss not read</td>" in handle._repr_html_()
        # a refused connection is retried as every poll is: the next status reads the metrics
        platform.transport.unreachable("POST", "/mlflow/runs/search")
        again = backend.status(handle)
        assert "trial 0 val_loss 0.3, trial 1 no val_loss logged yet" in again.message
        assert "metrics_error" not in handle.ref["outcome"]["sweep"]
        # never reachable: said, never raised
        platform.transport.unreachable("POST", "/mlflow/runs/search", times=20)
        down = backend.status(handle)
        assert "could not reach Azure" in down.message
        assert [t["note"] for t in handle.ref["outcome"]["sweep"]["trials"]] == ["val_loss not read"] * 2


def test_without_the_services_choice_the_best_is_the_best_value_read_by_the_goal() -> None:
    from tests.backends.azureml_cloud import AzureMLPlatform

    with AzureMLPlatform(statuses=("Running",)) as platform:
        backend, handle, name = _sweep(platform, maximize=True)
        platform.service.log_metric(f"{name}_0", "accuracy", 0.7)
        platform.service.log_metric(f"{name}_1", "accuracy", 0.8, step=2)
        said = backend.status(handle)
        assert said.message == (
            "2 trials (1 running, 1 succeeded); best so far: trial 1 (lr=0.01), accuracy 0.8; "
            "trial 0 accuracy 0.7, trial 1 accuracy 0.8"
        )
        sweep = handle.ref["outcome"]["sweep"]
        assert (sweep["goal"], sweep["best"]["trial"], sweep["best"]["value"]) == ("maximize", 1, 0.8)
        assert "<td>1 (best)</td><td>lr=0.01</td><td>RUNNING</td><td>0.8</td>" in handle._repr_html_()


def test_the_services_best_wins_and_a_better_value_read_is_said_beside_it() -> None:
    from tests.backends.azureml_cloud import AzureMLPlatform

    with AzureMLPlatform(statuses=("Running",)) as platform:
        backend, handle, name = _sweep(platform)
        _best_said(platform, name, f"{name}_0", "0.3")
        platform.service.log_metric(f"{name}_0", "val_loss", 0.3)
        platform.service.log_metric(f"{name}_1", "val_loss", 0.2)  # a running trial's latest, not yet judged
        said = backend.status(handle)
        assert said.message == (
            "2 trials (1 running, 1 succeeded); best so far: trial 0 (lr=0.1), val_loss 0.3 (the service's choice; "
            "of the values read, trial 1's val_loss 0.2 is better); trial 0 val_loss 0.3, trial 1 val_loss 0.2"
        )
        assert handle.ref["outcome"]["sweep"]["best"]["trial"] == 0


def test_list_reads_no_metrics() -> None:
    """`list` makes one run history call per sweep, and no search: its rows are as they were."""
    from tests.backends.azureml_cloud import AzureMLPlatform

    with AzureMLPlatform(statuses=("Running",)) as platform:
        _, _, name = _sweep(platform)
        platform.service.log_metric(f"{name}_0", "val_loss", 0.3)
        rows = list(platform.backend().list_jobs(dict(platform.settings)))
        assert rows[0].to_dict()["sweep"]["summary"] == "2 trials (1 running, 1 succeeded)"
        assert not [r for r in platform.transport.sent() if "/mlflow/" in r.url]
