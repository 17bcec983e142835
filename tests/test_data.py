"""Data inputs and outputs, and shell lines: the spec's checks (each at its field path, with a fix), what each
target renders where its nodes see the data (every render checked by the platform's own validators), what
each refuses with the reason, and a real local run that reads an input folder and writes an output folder
with a shell line that uses $RANK, && and quotes."""

from __future__ import annotations

import json
import shlex
from pathlib import Path
from typing import Any

import pytest

import crosstrain
from crosstrain.databricks_task import DistributorCall, train_on_rank
from crosstrain.errors import Problem, SpecError, Unsupported
from crosstrain.loader import job_from_dict, load_job
from crosstrain.records import Request
from crosstrain.registry import create_backend
from tests.backends.validators import assert_valid
from tests.conftest import ROOT

ACCOUNTS: dict[str, dict[str, Any]] = {
    "vertex": {"project": "my-project", "region": "us-central1"},
    "aiplatform": {"project": "my-project", "region": "us-central1"},
    "azureml": {
        "subscription_id": "00000000-0000-0000-0000-000000000000",
        "resource_group": "my-rg",
        "workspace": "my-ws",
        "compute": "gpu-cluster",
    },
    "databricks": {"host": "https://dbc-1234567890123456.cloud.databricks.com"},
    "fake": {},
    "local": {},
}
MACHINES = {"vertex": "T4:1", "aiplatform": "n1-standard-8", "azureml": "V100:1", "databricks": "A10G:1"}


def spec(target: str = "fake", **changes: Any) -> Any:
    data: dict[str, Any] = {
        "name": "data",
        "image": "example.com/train:1",
        "command": ["python", "train.py", "--data", "${inputs.train}", "--out", "${outputs.model}"],
        **changes,
    }
    if target in MACHINES:
        data.setdefault("primary", {"machine": MACHINES[target]})
    if target == "databricks" and not data.get("shell"):  # TorchDistributor runs a file the cluster sees
        data["command"] = ["python", "/Volumes/c/s/code/train.py", *data["command"][2:]]
    return job_from_dict(data)


def render(target: str, job: Any) -> Request:
    return create_backend(target, environ={}).render(job, ACCOUNTS[target])


def refusals(target: str, job: Any) -> list[Problem]:
    with pytest.raises(Unsupported) as refused:
        render(target, job)
    return list(refused.value.problems)


def problems(data: dict[str, Any]) -> list[Problem]:
    with pytest.raises(SpecError) as error:
        job_from_dict({"name": "data", **data})
    return list(error.value.problems)


# -- the spec ------------------------------------------------------------------------------------------------
def test_short_and_long_forms_mean_the_same_location() -> None:
    short = job_from_dict({"name": "d", "inputs": {"train": "gs://bkt/d"}})
    long = job_from_dict({"name": "d", "inputs": {"train": {"path": "gs://bkt/d", "type": "folder"}}})
    assert short.inputs == long.inputs
    assert short.inputs["train"].shown_mode() == "mount"


@pytest.mark.parametrize(
    ("data", "path", "message", "fix"),
    [
        (
            {"inputs": {"train": "gs://bkt/d"}, "command": ["python", "t.py", "${inputs.trian}"]},
            "command[2]",
            "${inputs.trian} names no input",
            "did you mean ${inputs.train}?",
        ),
        (
            {"outputs": {"model": "gs://bkt/m"}, "env": {"OUT": "${outputs.modle}"}},
            "env.OUT",
            "names no output",
            "${outputs.model}",
        ),
        ({"workers": {"replicas": 1, "args": ["${inputs.x}"]}}, "workers.args[0]", "no input", "declare it"),
        (
            {"inputs": {"train": "gs://bkt/d"}, "command": "python t.py --data ${{inputs.train}}"},
            "command[3]",
            "Azure ML's spelling",
            "write ${inputs.train}",
        ),
        ({"inputs": {"train": {"path": "gs://bkt/d", "mode": "upload"}}}, "inputs.train.mode", "mode of outputs", ""),
        ({"outputs": {"m": {"path": "gs://bkt/d", "mode": "download"}}}, "outputs.m.mode", "mode of inputs", "upload"),
        ({"inputs": {"train": {"path": "gs://bkt/d", "mode": "copy"}}}, "inputs.train.mode", "not a data mode", ""),
        ({"inputs": {"t": {"path": "gs://bkt/d/", "type": "file"}}}, "inputs.t", "names a folder", "type: folder"),
        ({"inputs": {"t": {"path": "s3://b/d", "type": "table"}}}, "inputs.t", "mltable", "type: folder"),
        ({"inputs": {"m": {"path": "gs://bkt/m/", "type": "mlflow_model"}}}, "inputs.m", "Azure ML model", "folder"),
        ({"outputs": {"m": {"path": "s3://b/m/", "type": "custom_model"}}}, "outputs.m", "Azure ML model", "folder"),
        ({"inputs": {"t": "ftp://host/d"}}, "inputs.t.path", "no ftp:// locations", "gs://BUCKET/PATH"),
        ({"inputs": {"t": "azureml:cifar"}}, "inputs.t.path", "not a registered data asset", "azureml:NAME:VERSION"),
        ({"inputs": {"t": "gs://"}}, "inputs.t.path", "names no bucket", ""),
        # The staging bucket's rule, held to every gs:// location: no bucket is called `b` or `My_Data`.
        ({"inputs": {"t": "gs://b/d"}}, "inputs.t.path", "bucket names are 3-63 characters", "gs://BUCKET/PATH"),
        ({"outputs": {"m": "gs://My_Data/m"}}, "outputs.m.path", "only lowercase letters", "gs://BUCKET/PATH"),
        ({"output_dir": "gs://b/runs"}, "output_dir", "(up to 222 with dots), and 'b' has 1", "gs://BUCKET/PATH"),
        ({"inputs": {"2train": "gs://bkt/d"}}, "inputs.2train", "not a valid input name", "letters, digits"),
        ({"inputs": {"t": {"type": "folder"}}}, "inputs.t.path", "an input needs a path", "add `path:`"),
        ({"inputs": {"t": "gs://bkt/d"}, "outputs": {"t": "gs://bkt/o"}}, "outputs.t", "both an input", "rename"),
        ({"shell": True, "command": ["python", "t.py"]}, "command", "one shell line", "one string"),
        ({"shell": True, "workers": {"replicas": 1, "command": ["a", "b"]}}, "workers.command", "one shell line", ""),
        ({"shell": True, "command": "  "}, "command", "the shell line is empty", ""),
    ],
)
def test_bad_data_and_shell_lines_are_errors_at_their_field_path(
    data: dict[str, Any], path: str, message: str, fix: str
) -> None:
    found = problems(data)
    assert [p.path for p in found] == [path]
    assert message in found[0].message
    assert fix in found[0].fix


def test_a_shell_line_is_kept_whole_and_args_are_appended_quoted() -> None:
    job = job_from_dict(
        {"name": "s", "shell": True, "command": "cd src && python t.py --rank $RANK", "args": ["a b", "it's"]}
    )
    primary = job.pools()[0]
    line = "cd src && python t.py --rank $RANK 'a b' 'it'\"'\"'s'"
    assert (primary.command, primary.args, primary.shell_line) == (["bash", "-c", line], [], line)
    assert shlex.split(line)[-2:] == ["a b", "it's"]


def test_workers_build_their_line_from_their_own_args() -> None:
    job = job_from_dict(
        {"name": "s", "shell": True, "command": "python t.py", "args": ["--x"], "workers": {"replicas": 1, "args": []}}
    )
    assert [p.shell_line for p in job.pools()] == ["python t.py --x", "python t.py"]


def test_the_json_schema_documents_the_new_fields() -> None:
    schema = json.loads((ROOT / "docs" / "job.schema.json").read_text())
    assert {"inputs", "outputs", "shell"} <= set(schema["properties"])


# -- where each target's nodes see the data ------------------------------------------------------------------
def test_vertex_mounts_cloud_storage_under_gcs_in_the_command_args_and_env() -> None:
    job = spec(
        "vertex",
        inputs={"train": "gs://bkt/cifar", "raw": {"path": "gs://bkt/raw", "mode": "direct"}},
        outputs={"model": "gs://bkt/out/model"},
        args=["--raw", "${inputs.raw}"],
        env={"DATA": "${inputs.train}"},
    )
    request = render("vertex", job)
    assert_valid(request)
    container = request.create.body["jobSpec"]["workerPoolSpecs"][0]["containerSpec"]
    assert container["command"] == ["python", "train.py", "--data", "/gcs/bkt/cifar", "--out", "/gcs/bkt/out/model"]
    assert container["args"] == ["--raw", "gs://bkt/raw"]
    assert container["env"] == [{"name": "DATA", "value": "/gcs/bkt/cifar"}]


@pytest.mark.parametrize(
    ("target", "location", "path", "words"),
    [
        ("vertex", {"path": "gs://bkt/d", "mode": "download"}, "inputs.train.mode", "FUSE mount"),
        ("vertex", "s3://b/d", "inputs.train.mode", "mode: direct"),
        ("vertex", "/Volumes/c/s/v", "inputs.train", "cannot reach"),
        ("vertex", "azureml:cifar:1", "inputs.train", "cannot reach"),
        ("aiplatform", {"path": "gs://bkt/d", "mode": "mount"}, "inputs.train.mode", "no Cloud Storage FUSE"),
        ("databricks", "s3://b/d", "inputs.train.mode", "only /Volumes/ and /dbfs/"),
        ("databricks", {"path": "/Volumes/c/s/v", "mode": "download"}, "inputs.train.mode", "in place"),
        ("databricks", "gs://bkt/d", "inputs.train.mode", "mode: direct"),
        ("databricks", "./data", "inputs.train", "cannot reach"),
        ("azureml", "gs://bkt/d", "inputs.train", "cannot reach"),
        ("azureml", "./no-such-folder", "inputs.train.path", "does not exist"),
        ("azureml", {"path": "./data", "type": "table"}, "inputs.train", "az ml data create"),
        ("azureml", "azureml:cifar@latest", "inputs.train", "pin the version"),
        ("local", "gs://bkt/d", "inputs.train", "local paths only"),
        ("local", "s3://b/d", "inputs.train", "copy the data here"),
        ("local", "./no-such-folder", "inputs.train.path", "does not exist"),
        ("local", "./" + "9" * 5000, "inputs.train.path", "cannot be read here: File name too long"),  # fuzzed
        ("azureml", "./" + "9" * 5000, "inputs.train.path", "too long"),
    ],
)
def test_a_location_a_target_cannot_reach_is_refused_with_the_reason(
    target: str, location: Any, path: str, words: str
) -> None:
    job = spec(target, inputs={"train": location}, outputs={"model": _reachable_output(target)})
    found = refusals(target, job)
    assert [p.path for p in found] == [path], found
    assert words in found[0].message + found[0].fix
    assert found[0].fix


def _reachable_output(target: str) -> Any:
    return {
        "vertex": "gs://bkt/m",
        "aiplatform": "gs://bkt/m",
        "databricks": "/Volumes/c/s/m",
        "azureml": {},
        "local": "./out",
        "fake": "anything",
    }[target]


def test_aiplatform_passes_the_gs_uri_and_says_so() -> None:
    job = spec("aiplatform", inputs={"train": "gs://bkt/d"}, outputs={"model": "gs://bkt/m"})
    request = render("aiplatform", job)
    assert_valid(request)
    command = request.create.body["trainingInput"]["masterConfig"]["containerCommand"]
    assert command == ["python", "train.py", "--data", "gs://bkt/d", "--out", "gs://bkt/m"]
    assert any("no Cloud Storage FUSE mount" in note for note in request.notes)


def test_databricks_sees_volumes_as_they_are_dbfs_under_dbfs_and_uris_in_direct_mode() -> None:
    job = spec(
        "databricks",
        command=["python", "/Volumes/c/s/code/train.py", "${inputs.train}", "${inputs.cache}", "${inputs.raw}"],
        inputs={
            "train": "/Volumes/c/s/data",
            "cache": "dbfs:/tmp/cache",
            "raw": {"path": "abfss://c@acct.dfs.core.windows.net/raw", "mode": "direct"},
        },
        outputs={"model": "/Volumes/c/s/m"},
    )
    request = render("databricks", job)
    assert_valid(request)
    call = DistributorCall.parse(request.create.body["tasks"][0]["spark_python_task"]["parameters"])
    assert call.args == ("/Volumes/c/s/data", "/dbfs/tmp/cache", "abfss://c@acct.dfs.core.windows.net/raw")


def test_azureml_renders_the_jobs_own_inputs_and_outputs() -> None:
    job = spec(
        "azureml",
        inputs={
            "train": "azureml:cifar:3",
            "labels": {"path": "https://acct.blob.core.windows.net/c/labels.csv", "type": "file", "mode": "direct"},
            "table": {"path": "azureml://datastores/ws/paths/t/", "type": "table", "mode": "download"},
        },
        outputs={"model": {"mode": "upload"}},
        args=["${inputs.labels}", "${inputs.table}"],
    )
    request = render("azureml", job)
    assert_valid(request)  # load_job(az-yaml) and the REST model both take it
    props = request.create.body["properties"]
    assert props["command"] == (
        "python train.py --data '${{inputs.train}}' --out '${{outputs.model}}' '${{inputs.labels}}' '${{inputs.table}}'"
    )
    workspace = "/subscriptions/00000000-0000-0000-0000-000000000000/resourceGroups/my-rg/providers/"
    assert props["inputs"] == {
        "train": {
            "uri": f"{workspace}Microsoft.MachineLearningServices/workspaces/my-ws/data/cifar/versions/3",
            "jobInputType": "uri_folder",
        },
        "labels": {
            "uri": "https://acct.blob.core.windows.net/c/labels.csv",
            "mode": "Direct",
            "jobInputType": "uri_file",
        },
        "table": {"uri": "azureml://datastores/ws/paths/t/", "mode": "Download", "jobInputType": "mltable"},
    }
    assert props["outputs"] == {"model": {"mode": "Upload", "jobOutputType": "uri_folder"}}


def test_azureml_refuses_a_reference_in_an_environment_variable() -> None:
    job = spec("azureml", inputs={"train": "azureml:cifar:3"}, outputs={"model": {}}, env={"D": "${inputs.train}"})
    found = refusals("azureml", job)
    assert [p.path for p in found] == ["env.D"]
    assert "in the command only" in found[0].message


def test_the_fake_keeps_every_location_as_written() -> None:
    job = spec(inputs={"train": "gs://bkt/d"}, outputs={"model": {"mode": "upload"}})
    body = render("fake", job).create.body
    assert body["pools"][0]["command"] == ["python", "train.py", "--data", "gs://bkt/d", "--out", "${outputs.model}"]
    assert body["inputs"] == {"train": {"path": "gs://bkt/d", "type": "folder"}}
    assert body["outputs"] == {"model": {"type": "folder", "mode": "upload"}}


# -- shell lines on every target -----------------------------------------------------------------------------
LINE = 'cd src && python train.py --rank "$RANK" --data ${inputs.train}'


def shell_job(target: str, location: str, **changes: Any) -> Any:
    return spec(target, shell=True, command=LINE, inputs={"train": location}, **changes)


def test_vertex_runs_the_line_with_bash_and_under_the_launcher() -> None:
    request = render("vertex", shell_job("vertex", "gs://bkt/d"))
    assert_valid(request)
    line = 'cd src && python train.py --rank "$RANK" --data /gcs/bkt/d'
    container = request.create.body["jobSpec"]["workerPoolSpecs"][0]["containerSpec"]
    assert container["command"] == ["bash", "-c", line]
    per_node = shell_job("vertex", "gs://bkt/d", primary={"machine": "T4:2"})
    container = render("vertex", per_node).create.body["jobSpec"]["workerPoolSpecs"][0]["containerSpec"]
    assert container["command"][-4:] == ["--", "bash", "-c", line]  # each rank the launcher starts runs the line


def test_azureml_runs_the_line_in_its_own_shell_as_written_and_wrapped_under_bash() -> None:
    job = shell_job("azureml", "azureml:cifar:3")
    props = render("azureml", job).create.body["properties"]
    assert props["command"] == 'cd src && python train.py --rank "$RANK" --data ${{inputs.train}}'
    with_secret = shell_job(
        "azureml", "azureml:cifar:3", env={"T": {"secret": "https://my-vault.vault.azure.net/secrets/t"}}
    )
    wrapped = render("azureml", with_secret).create.body["properties"]["command"]
    assert shlex.split(wrapped)[:4] == ["python", "-m", "crosstrain.runtime.secrets", "--"]
    assert shlex.split(wrapped)[4:] == [
        "bash",
        "-c",
        'cd src && python train.py --rank "$RANK" --data ${{inputs.train}}',
    ]


def test_databricks_ranks_run_the_line_with_bash() -> None:
    request = render("databricks", shell_job("databricks", "/Volumes/c/s/d"))
    assert_valid(request)
    call = DistributorCall.parse(request.create.body["tasks"][0]["spark_python_task"]["parameters"])
    assert (call.kind, call.target) == ("shell", 'cd src && python train.py --rank "$RANK" --data /Volumes/c/s/d')
    assert DistributorCall.parse(call.parameters()) == call


@pytest.mark.parametrize(("line", "code"), [("exit 3", 3), ('test "$RANK" = 5', 0)])
def test_a_databricks_rank_fails_when_its_line_fails(
    line: str, code: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RANK", "5")
    if code:
        with pytest.raises(SystemExit) as exit_:
            train_on_rank("shell", line, [], "token", str(tmp_path))
        assert exit_.value.code == code
        assert not (tmp_path / "rank-5").exists()
    else:
        assert train_on_rank("shell", line, [], "token", str(tmp_path)) == {"ok": True, "token": "token"}
        assert (tmp_path / "rank-5").read_text() == "token"


def test_a_path_the_shell_would_split_is_quoted_in_the_line(tmp_path: Path) -> None:
    (tmp_path / "my data").mkdir()
    job_file = tmp_path / "job.yaml"
    job_file.write_text('name: q\nshell: true\ncommand: "python t.py ${inputs.train}"\ninputs: {train: "./my data"}\n')
    request = crosstrain.render(load_job(job_file), "local", environ={})
    argv = request.create.body["processes"][0]["argv"]
    assert argv[-3:] == ["bash", "-c", f"python t.py {shlex.quote(str(tmp_path / 'my data'))}"]


# -- a real local run ----------------------------------------------------------------------------------------
COUNT = """
import os, sys
from pathlib import Path
data, out = Path(sys.argv[1]), Path(sys.argv[2])
lines = sum(len(p.read_text().splitlines()) for p in sorted(data.iterdir()))
(out / f"rank-{os.environ['RANK']}.txt").write_text(f"{lines} {sys.argv[3]}")
"""


@pytest.mark.parametrize("emulate", ["torchrun", "vertex"])
def test_a_local_run_reads_the_input_folder_and_writes_the_output_folder(tmp_path: Path, emulate: str) -> None:
    """Two nodes x two processes; each rank's shell line reads `$RANK`, chains with `&&` and quotes an argument;
    the output folder does not exist before the run."""
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "a.csv").write_text("1\n2\n3\n")
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "count.py").write_text(COUNT)
    (tmp_path / "job.yaml").write_text(
        "name: data-run\ncode: ./src\nshell: true\n"
        'command: test -d ${outputs.counts} && python count.py ${inputs.train} ${outputs.counts} "it\'s rank $RANK"\n'
        "inputs: {train: ./data}\noutputs: {counts: ./out/counts}\n"
        "workers: {replicas: 1}\nlaunch: {processes_per_node: 2}\n"
    )
    handle = crosstrain.submit(str(tmp_path / "job.yaml"), "local", emulate=emulate)
    assert handle.status().state.value == "SUCCEEDED", handle.ref
    written = {p.name: p.read_text() for p in (tmp_path / "out" / "counts").iterdir()}
    assert written == {f"rank-{r}.txt": f"3 it's rank {r}" for r in range(4)}


def test_placing_the_paths_sets_no_field_the_user_did_not() -> None:
    """A target's plan reads which fields the user set (a v1 node count against `workers`): the placed job must
    say the same as the user's."""
    from crosstrain import data

    spec = job_from_dict(
        {
            "name": "j",
            "image": "img:1",
            "command": ["python", "train.py", "${inputs.train}"],
            "inputs": {"train": "gs://bkt/train"},
            "primary": {"machine": "T4:1"},
        }
    )
    placed = data.placed(spec, lambda direction, name, location: "/gcs/b/train")
    assert placed.command == ["python", "train.py", "/gcs/b/train"]
    assert placed.model_fields_set == spec.model_fields_set
    for role in ("primary", "workers"):
        assert getattr(placed, role).model_fields_set == getattr(spec, role).model_fields_set


@pytest.mark.parametrize(("target", "settings"), [("vertex", {"project": "p"}), ("aiplatform", {"project": "p"})])
def test_a_model_is_read_by_azure_ml_alone(target: str, settings: dict[str, Any]) -> None:
    job = {
        "name": "m",
        "image": "gcr.io/p/i:1",
        "command": "python t.py ${inputs.base}",
        "primary": {"machine": "n1-standard-8"},
        "inputs": {"base": {"path": "azureml:llama:3", "type": "mlflow_model"}},
    }
    with pytest.raises(SpecError) as refused:
        crosstrain.render(job, target, environ={}, **settings)
    (problem,) = refused.value.problems
    assert problem.path == "inputs.base.type"
    assert "an mlflow_model is an Azure ML model" in problem.message


# -- local stand-ins for cloud data ----------------------------------------------------------------------------
CLOUD_JOB = (
    "name: standin\nshell: true\ncommand: python t.py ${inputs.train} ${outputs.model}\n"
    "inputs: {train: gs://my-bucket/train}\noutputs: {model: gs://my-bucket/model}\n"
    "environment: pytorch\nprimary: {machine: T4:1}\n"
    "targets: {vertex: {project: p, region: us-central1}}\n"
)


def test_a_local_stand_in_runs_a_cloud_job_here_and_the_same_file_renders_for_the_cloud(tmp_path: Path) -> None:
    (tmp_path / "sample").mkdir()
    job_file = tmp_path / "job.yaml"
    job_file.write_text(CLOUD_JOB)
    with pytest.raises(SpecError, match="local paths only"):  # no stand-in: refused, as before
        crosstrain.render(load_job(job_file), "local", environ={})
    request = crosstrain.render(
        load_job(job_file), "local", environ={}, inputs={"train": "sample"}, outputs={"model": "out"}
    )
    line = request.create.body["processes"][0]["argv"][-1]
    assert line == f"python t.py {tmp_path / 'sample'} {tmp_path / 'out'}"
    assert f"inputs.train: {tmp_path / 'sample'} stands in for gs://my-bucket/train here" in " ".join(request.notes)
    cloud = crosstrain.render(load_job(job_file), "vertex", environ={})
    assert "/gcs/my-bucket/train" in json.dumps(cloud.create.body)  # the stand-in is the local target's alone


@pytest.mark.parametrize(
    ("settings", "path", "words"),
    [
        ({"inputs": {"trian": "sample"}}, "targets.local.inputs.trian", "did you mean train?"),
        ({"inputs": {"train": "nowhere"}}, "targets.local.inputs.train", "does not exist here"),
        ({"outputs": {"logs": "out"}}, "targets.local.outputs.logs", "name one of the job's outputs: model"),
    ],
)
def test_a_stand_in_for_nothing_or_from_nowhere_is_refused_at_its_name(
    tmp_path: Path, settings: dict[str, Any], path: str, words: str
) -> None:
    (tmp_path / "sample").mkdir()
    (tmp_path / "job.yaml").write_text(CLOUD_JOB)
    with pytest.raises(SpecError) as refused:
        crosstrain.render(load_job(tmp_path / "job.yaml"), "local", environ={}, **settings)
    found = [p for p in refused.value.problems if p.path == path]
    assert found, refused.value.problems
    assert words in found[0].message + " " + found[0].fix


def test_the_command_line_names_stand_ins(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from crosstrain import cli

    (tmp_path / "sample").mkdir()
    (tmp_path / "job.yaml").write_text(CLOUD_JOB)
    argv = ["render", str(tmp_path / "job.yaml"), "--local", "--input", "train=sample", "--output", "model=out"]
    assert cli.main([*argv, "--json"]) == 0
    line = json.loads(capsys.readouterr().out)["calls"][-1]["body"]["processes"][0]["argv"][-1]
    assert line == f"python t.py {tmp_path / 'sample'} {tmp_path / 'out'}"
    assert cli.main(["render", str(tmp_path / "job.yaml"), "-t", "vertex", "--input", "train=sample"]) == 2
    assert "--input: these options are for runs on this machine" in capsys.readouterr().err
