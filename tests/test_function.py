"""A function shipped from a notebook: it runs on every rank from the code bundle, rank 0's result comes back,
and a rank that raises comes back as that rank's traceback."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

import crosstrain
from crosstrain.errors import FunctionFailed, SpecError

JOB: dict[str, Any] = {"name": "fn", "workers": {"replicas": 1}, "targets": {"local": {"nproc_per_node": 2}}}


def all_reduce_ranks(scale: float, *, fail_on: int = -1) -> dict[str, float]:
    import torch
    import torch.distributed as dist

    from crosstrain import runtime

    env = runtime.init()
    assert env.rank is not None
    total = torch.tensor([float(env.rank + 1)])
    dist.all_reduce(total)
    if env.rank == fail_on:
        raise ValueError(f"rank {env.rank} fails on purpose")
    return {"sum": total.item() * scale, "world": float(env.world_size or 0)}


def test_rank_zeros_result_comes_back_from_a_stock_python(stock_python: Path) -> None:
    result = crosstrain.run(all_reduce_ranks, JOB, args=(10.0,), python=str(stock_python))
    assert result == {"sum": 100.0, "world": 4.0}  # ranks 1+2+3+4, every rank joined


def test_a_rank_that_raises_comes_back_with_its_rank_and_traceback() -> None:
    with pytest.raises(FunctionFailed) as failed:
        crosstrain.run(all_reduce_ranks, JOB, args=(1.0,), kwargs={"fail_on": 3})
    assert failed.value.rank == 3
    assert "ValueError: rank 3 fails on purpose" in failed.value.traceback
    assert "all_reduce_ranks" in failed.value.traceback


def test_a_function_with_a_code_folder_imports_from_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)  # a job made in Python names its folder from the current one, as a notebook does
    (tmp_path / "src" / "helpers").mkdir(parents=True)
    (tmp_path / "src" / "helpers" / "__init__.py").write_text("FACTOR = 7\n")

    def uses_helpers() -> int:
        import helpers  # type: ignore[import-not-found]  # shipped in the code folder, imported on the node

        return int(helpers.FACTOR)

    job = {"name": "fn", "code": "src"}
    assert crosstrain.run(uses_helpers, job) == 7


def test_a_job_file_with_a_command_runs_the_function_and_says_which() -> None:
    """One job file for both: run as a file it runs its command; given a function, the function runs instead."""
    job = {**JOB, "command": "python train.py", "args": ["--epochs", "2"], "shell": True}
    assert crosstrain.run(all_reduce_ranks, job, args=(1.0,)) == {"sum": 10.0, "world": 4.0}  # 1 + 2 + 3 + 4
    request = crosstrain.render_function(all_reduce_ranks, job, "local", args=(1.0,), environ={})
    note = "all_reduce_ranks() runs on every rank in place of the job file's command `python train.py` and args"
    assert any(n.startswith(note) for n in request.notes), request.notes
    assert "train.py" not in json.dumps(request.create.body["processes"])


def test_the_notebook_function_example_runs_under_databricks_emulation() -> None:
    """A notebook's function through TorchDistributor on a local SparkSession, as Databricks' function mode runs
    it: rank 0's result comes back to the caller."""
    import ast
    import os
    import shutil
    import subprocess
    import sys

    from tests.conftest import ROOT

    if not shutil.which("java") and not os.environ.get("JAVA_HOME"):
        (pytest.fail if os.environ.get("CI") else pytest.skip)("no Java for the local SparkSession")
    notebook = ROOT / "examples" / "databricks-function" / "notebook.py"
    done = subprocess.run([sys.executable, str(notebook)], capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    result = ast.literal_eval(done.stdout.strip().splitlines()[-1])  # the dict notebook.py prints
    assert result["world_size"] == 2.0
    assert result["mean_loss"] < 0.1


@pytest.mark.parametrize("target", ["vertex", "aiplatform"])
def test_a_function_on_a_google_target_needs_a_staging_bucket(target: str) -> None:
    """A function ships as a code package, as `code:` does; without a bucket its render once crashed on an assert."""
    from crosstrain import api
    from crosstrain.errors import Unsupported
    from crosstrain.registry import create_backend

    job = api.with_function(all_reduce_ranks, {"name": "fn", "image": "img:1", "primary": {"machine": "n1-standard-8"}})
    backend = create_backend(target, environ={})
    with pytest.raises(Unsupported) as refused:
        backend.render(job, {"project": "p", "region": "us-central1"})
    assert [p.path for p in refused.value.problems] == [f"targets.{target}.staging_bucket"]
    request = backend.render(job, {"project": "p", "region": "us-central1", "staging_bucket": "gs://my-bucket/stage"})
    assert request.result_at == ""  # no output_dir: the render says the result is kept nowhere
    assert any("kept nowhere" in note for note in request.notes)
    job = job.model_copy(update={"output_dir": "gs://my-bucket/runs"})
    request = backend.render(job, {"project": "p", "region": "us-central1", "staging_bucket": "gs://my-bucket/stage"})
    # AI Platform's nodes have no Cloud Storage mount: what rank 0 writes under /gcs/ stays on the node.
    expected = "gs://my-bucket/runs/crosstrain-result/result.pkl" if target == "vertex" else ""
    assert request.result_at == expected
    upload = "https://storage.googleapis.com/upload/storage/v1/b/my-bucket/"
    assert any(call.url.startswith(upload) for call in request.calls)


DATABRICKS: dict[str, Any] = {"host": "https://dbc-1234abcd-5678.cloud.databricks.com"}
GOOGLE: dict[str, Any] = {"project": "p", "region": "us-central1", "staging_bucket": "gs://my-bucket/stage"}


@pytest.mark.parametrize(
    ("target", "settings", "output_dir", "node_folder"),
    [
        ("vertex", GOOGLE, "gs://my-bucket/runs", "/gcs/my-bucket/runs/crosstrain-result"),
        ("databricks", DATABRICKS, "/Volumes/main/ml/runs", "/Volumes/main/ml/runs/crosstrain-result"),
        ("databricks", DATABRICKS, "dbfs:/runs/", "/dbfs/runs/crosstrain-result"),
        ("databricks", DATABRICKS, "gs://my-bucket/runs", None),  # a cluster mounts no Cloud Storage at /gcs/
        ("aiplatform", GOOGLE, "gs://my-bucket/runs", None),  # nor does an AI Platform node
    ],
)
def test_a_functions_result_goes_where_the_platforms_nodes_write_and_crosstrain_reads_back(
    target: str, settings: dict[str, Any], output_dir: str, node_folder: str | None
) -> None:
    """The result folder is the platform's own: Databricks once told its nodes /gcs/... for a gs:// output_dir."""
    job = {"name": "fn", "image": "img:1", "primary": {"machine": "A10G:1" if target == "databricks" else "T4:1"}}
    request = crosstrain.render_function(all_reduce_ranks, {**job, "output_dir": output_dir}, target, **settings)
    stored = f"{output_dir.rstrip('/')}/crosstrain-result/result.pkl"
    assert request.result_at == (stored if node_folder else "")
    assert ('"CROSSTRAIN_RESULT_DIR"' in request.to_json()) == bool(node_folder)
    if node_folder:
        assert node_folder in request.to_json()


@pytest.mark.parametrize(
    ("target", "settings", "says", "fix"),
    [
        ("vertex", GOOGLE, "under an output_dir in Cloud Storage", "set output_dir, e.g. gs://my-bucket/runs"),
        (
            "databricks",
            DATABRICKS,
            "under an output_dir in a Unity Catalog volume or DBFS",
            "set output_dir, e.g. /Volumes/main/ml/runs or dbfs:/runs",
        ),
        ("aiplatform", GOOGLE, "nodes write no output folder that crosstrain reads back", "crosstrain targets"),
    ],
)
def test_a_function_whose_result_would_be_lost_is_told_where_this_platform_keeps_one(
    target: str, settings: dict[str, Any], says: str, fix: str
) -> None:
    """Databricks was told to set a gs:// output_dir, which its nodes do not write."""
    job = {"name": "fn", "image": "img:1", "primary": {"machine": "A10G:1" if target == "databricks" else "T4:1"}}
    request = crosstrain.render_function(all_reduce_ranks, job, target, **settings)
    assert request.result_at == ""
    assert any(says in note and fix in note for note in request.notes)
    with pytest.raises(SpecError) as refused:
        crosstrain.submit_function(all_reduce_ranks, job, target, **settings)
    [problem] = refused.value.problems
    assert problem.path == "output_dir"
    assert says in problem.message
    assert fix in problem.fix
    assert target == "vertex" or "gs://" not in problem.fix


def test_a_submitted_functions_handle_brings_rank_zeros_result_back(tmp_path: Path) -> None:
    """`render_function` shows where the result will be, `submit_function` runs it, and the handle, even one
    loaded from its text in another step, reads rank 0's return value back."""
    runs = str(tmp_path / "runs")
    request = crosstrain.render_function(all_reduce_ranks, JOB, "local", args=(2.0,), runs_dir=runs)
    assert request.result_at.startswith(runs)
    assert request.result_at.endswith("/result.pkl")
    handle = crosstrain.submit_function(all_reduce_ranks, JOB, "local", args=(2.0,), runs_dir=runs)
    assert handle.result_at == request.result_at
    loaded = crosstrain.JobHandle.loads(handle.dumps())
    assert loaded.result_at == request.result_at
    assert loaded.result() == {"sum": 20.0, "world": 4.0}


def test_submitting_a_function_whose_result_would_be_lost_is_refused_before_anything_is_sent() -> None:
    job = {"name": "fn", "image": "img:1", "primary": {"machine": "n1-standard-8"}}
    settings: dict[str, Any] = {"project": "p", "region": "us-central1", "staging_bucket": "gs://my-bucket/stage"}
    with pytest.raises(SpecError) as refused:  # Vertex keeps what a node writes only under a gs:// output_dir
        crosstrain.submit_function(all_reduce_ranks, job, "vertex", args=(1.0,), **settings)
    assert [p.path for p in refused.value.problems] == ["output_dir"]


def test_a_result_is_unpickled_only_from_a_handle_crosstrain_sealed_here(tmp_path: Path) -> None:
    """Unpickling runs code: a handle edited to name another result (or crafted, or made elsewhere) reads it
    only when the caller says it trusts it."""
    runs = str(tmp_path / "runs")
    handle = crosstrain.submit_function(all_reduce_ranks, JOB, "local", args=(2.0,), runs_dir=runs)
    assert handle.result_seal
    planted = tmp_path / "planted" / "result.pkl"
    planted.parent.mkdir()
    planted.write_bytes(Path(handle.result_at).read_bytes())
    moved = json.loads(handle.dumps())
    moved["result_at"] = str(planted)
    for text in (json.dumps(moved), json.dumps({k: v for k, v in moved.items() if k != "result_seal"})):
        crafted = crosstrain.JobHandle.loads(text)
        with pytest.raises(SpecError, match="runs any code it holds") as refused:
            crafted.result()
        assert refused.value.problems[0].fix.endswith("handle.result(trust=True)")
        assert crafted.result(trust=True) == {"sum": 20.0, "world": 4.0}


def command_line() -> list[str]:
    import sys

    return sys.argv[1:]


def test_a_deepspeed_functions_ranks_are_given_deepspeeds_arguments() -> None:
    """As DeepspeedTorchDistributor's function mode gives them: the function reads them from sys.argv (through
    `deepspeed.add_config_arguments` or transformers' argument parser)."""
    job = {"name": "fn", "launch": {"framework": "deepspeed", "deepspeed_config": "/opt/ds.json"}}
    assert crosstrain.run(command_line, job) == ["--deepspeed", "--deepspeed_config", "/opt/ds.json"]
