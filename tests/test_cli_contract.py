"""The CLI's contract, verb by verb: stdout holds only the result (JSON where --json asks, JSON errors included),
every error exits with its documented code and a headline that names its kind, and narration goes to stderr."""

from __future__ import annotations

import json
import os
import pty
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from crosstrain import cli
from tests.conftest import drained

GOOD = "name: c\ncommand: python -c \"print('rank output')\"\n"
HANDLE_VERBS = ("status", "wait", "cancel", "logs")
JOB_VERBS = ("render", "validate", "run", "submit")


def call(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = cli.main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture
def inputs(tmp_path: Path, fake_root: Path) -> dict[str, str]:
    (tmp_path / "bad.yaml").write_text("name: [unclosed\n")
    (tmp_path / "unknown.yaml").write_text("name: c\ncomand: python x.py\n")
    (tmp_path / "good.yaml").write_text(GOOD)
    (tmp_path / "folder").mkdir()
    return {
        "missing file": str(tmp_path / "none.yaml"),
        "a folder": str(tmp_path / "folder"),
        "not YAML": str(tmp_path / "bad.yaml"),
        "unknown field": str(tmp_path / "unknown.yaml"),
        "good": str(tmp_path / "good.yaml"),
    }


BAD_JOB_ARGS = {
    "missing file": [],
    "a folder": [],
    "not YAML": [],
    "unknown field": [],
    "unknown target": ["-t", "nowhere"],
    "bad --set": ["--set", "no-equals-sign"],
    "unknown setting": ["-t", "fake", "--set", "colour=blue"],
    "unknown option": ["--frobnicate"],
}


@pytest.mark.parametrize("as_json", [False, True], ids=["text", "json"])
@pytest.mark.parametrize("verb", JOB_VERBS)
@pytest.mark.parametrize("case", list(BAD_JOB_ARGS))
def test_bad_input_to_a_job_verb_exits_2_with_only_json_or_nothing_on_stdout(
    capsys: pytest.CaptureFixture[str], inputs: dict[str, str], verb: str, case: str, as_json: bool
) -> None:
    source = inputs.get(case, inputs["good"])
    extra = ["--json"] if as_json else []
    code, out, err = call(capsys, verb, source, *BAD_JOB_ARGS[case], *extra)
    assert code == 2, (case, out, err)
    assert "Traceback" not in err
    assert err.strip(), "an error is always said on stderr"
    if as_json:
        result = json.loads(out)  # an error object, or validate's result saying what is invalid
        assert result["valid"] is False if verb == "validate" and "valid" in result else result["error"]
    else:
        assert out == ""


BAD_HANDLES = {
    "not a handle": "nonsense",
    "not JSON": "{nope",
    "no target": '{"identity": "x", "job_id": "x"}',
    "unknown target": '{"target": "nowhere", "identity": "x", "job_id": "x"}',
    "a list": "[1, 2]",
}


@pytest.mark.parametrize("as_json", [False, True], ids=["text", "json"])
@pytest.mark.parametrize("verb", HANDLE_VERBS)
@pytest.mark.parametrize("case", list(BAD_HANDLES))
def test_a_bad_handle_exits_2_headlined_as_a_handle(
    capsys: pytest.CaptureFixture[str], verb: str, case: str, as_json: bool
) -> None:
    code, out, err = call(capsys, verb, BAD_HANDLES[case], *(["--json"] if as_json else []))
    assert code == 2, (case, out, err)
    assert "invalid job handle" in err
    if as_json:
        assert json.loads(out)["problems"][0]["path"].startswith("handle")
    else:
        assert out == ""


@pytest.mark.parametrize("as_json", [False, True], ids=["text", "json"])
@pytest.mark.parametrize(
    "argv",
    [["bogus"], [], ["render"], ["wait", "{}", "--timeout", "soon"], ["completion", "tcsh"], ["catalog", "-t", "x"]],
    ids=["unknown verb", "no verb", "no job", "bad duration", "unknown shell", "unknown catalog target"],
)
def test_usage_errors_exit_2_as_json_when_asked(
    capsys: pytest.CaptureFixture[str], argv: list[str], as_json: bool
) -> None:
    code, out, err = call(capsys, *argv, *(["--json"] if as_json else []))
    assert code == 2, (out, err)
    if as_json:
        assert json.loads(out)["error"] in ("UsageError", "SpecError")
    else:
        assert out == ""


def test_a_wrong_format_is_headlined_as_an_option(capsys: pytest.CaptureFixture[str], inputs: dict[str, str]) -> None:
    code, out, err = call(capsys, "render", inputs["good"], "--local", "--format", "yaml")
    assert (code, out) == (2, "")
    assert "unknown format" in err
    assert "invalid job spec" not in err


def test_results_are_alone_on_stdout(capsys: pytest.CaptureFixture[str], inputs: dict[str, str]) -> None:
    code, out, _ = call(capsys, "render", inputs["good"], "-t", "fake", "--json")
    assert code == 0
    assert json.loads(out)["target"] == "fake"
    code, out, _ = call(capsys, "submit", inputs["good"], "-t", "fake")
    assert code == 0
    assert len(out.splitlines()) == 1
    assert json.loads(out)["target"] == "fake"
    handle = out.strip()
    code, out, err = call(capsys, "wait", handle, "--json")
    assert code == 0
    assert json.loads(out)["state"] == "SUCCEEDED"
    assert "SUCCEEDED" in err  # progress goes to stderr
    for verb in ("schema", "catalog", "targets"):
        code, out, _ = call(capsys, verb, "--json")
        assert code == 0
        assert json.loads(out)
    code, out, _ = call(capsys, "completion", "bash")
    assert code == 0
    assert "complete -o filenames -F _crosstrain crosstrain" in out


def test_a_local_run_keeps_its_ranks_output_off_stdout_and_exits_4_when_it_fails(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    good = tmp_path / "good.yaml"
    good.write_text(GOOD)
    code, out, err = call(capsys, "submit", str(good), "--local")
    assert code == 0
    assert json.loads(out)["target"] == "local"  # the handle alone
    assert "rank output" in err
    failing = tmp_path / "failing.yaml"
    failing.write_text("name: f\ncommand: python -c 'raise SystemExit(3)'\n")
    for argv in (["submit", str(failing), "--local"], ["submit", str(failing), "--local", "--json"]):
        code, out, err = call(capsys, *argv)
        assert code == 4, err
        assert json.loads(out)


def test_set_scoped_to_one_target_and_plain_keys_where_they_exist(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    job = tmp_path / "job.yaml"
    job.write_text(GOOD + "targets:\n  fake: {}\n  local: {}\n")
    code, out, err = call(capsys, "validate", str(job), "--set", "run_seconds=5", "--set", "local.nodes=1", "--json")
    assert code == 0, err  # run_seconds exists on fake only; local.nodes is for local only
    assert json.loads(out)["checked"] == ["spec", "fake", "local"]
    code, out, err = call(capsys, "validate", str(job), "--set", "colour=blue")
    assert code == 2
    assert "has a setting 'colour'" in err
    code, out, err = call(capsys, "render", str(job), "-t", "fake", "--set", "local.nodes=1", "--json")
    assert code == 0, err  # scoped to another target: not applied here
    code, out, err = call(capsys, "render", str(job), "-t", "fake", "--set", "nowhere.x=1")
    assert code == 2
    assert "unknown target 'nowhere'" in err


def test_validate_says_when_no_target_was_checked(capsys: pytest.CaptureFixture[str], inputs: dict[str, str]) -> None:
    code, out, err = call(capsys, "validate", inputs["good"])
    assert code == 0
    assert "targets checked: no target" in out  # the report is the result: stdout
    assert "targets checked" not in err
    code, out, err = call(capsys, "validate", inputs["good"], "--json")
    assert json.loads(out)["valid"] is True
    assert "targets checked: no target" in err  # beside --json, narration


def test_durations_are_accepted_where_seconds_are(capsys: pytest.CaptureFixture[str], inputs: dict[str, str]) -> None:
    code, _out, err = call(capsys, "run", inputs["good"], "-t", "fake", "--timeout", "1h30m", "--json")
    assert code == 0, err


def test_a_terminal_sees_one_live_progress_line(tmp_path: Path, fake_root: Path) -> None:
    job = tmp_path / "job.yaml"
    job.write_text(GOOD)
    env = {**os.environ, "CROSSTRAIN_FAKE_ROOT": str(fake_root)}
    submitted = subprocess.run(
        [sys.executable, "-m", "crosstrain.cli", "submit", str(job), "-t", "fake", "--set", "run_seconds=3"],
        capture_output=True,
        text=True,
        env=env,
        check=True,
    )
    primary, secondary = pty.openpty()
    started = time.monotonic()
    waiting = subprocess.Popen(
        [sys.executable, "-m", "crosstrain.cli", "wait", submitted.stdout.strip()],
        stdout=subprocess.DEVNULL,
        stderr=secondary,
        env=env,
    )
    os.close(secondary)
    seen = drained(primary, waiting)
    assert waiting.wait(timeout=30) == 0
    assert time.monotonic() - started < 3 + 8  # reported within seconds of its end, not a 10 s poll later
    text = re.sub(r"\x1b\[[0-9;]*m", "", seen.decode())  # less the state's colour
    assert "\r\x1b[K" in text  # the line is rewritten in place
    assert "RUNNING (RUNNING) after" in text
    assert text.rstrip().endswith("SUCCEEDED (DONE) after 3s") or "SUCCEEDED (DONE) after" in text.splitlines()[-1]


def test_a_local_runs_logs_after_the_run_equal_what_was_streamed(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    job = tmp_path / "job.yaml"
    job.write_text(
        "name: logs\ncommand: python -c \"import os; [print('line', i, os.environ['RANK']) for i in range(3)]\"\n"
        "workers: {replicas: 1}\n"
    )
    code, out, streamed = call(capsys, "submit", str(job), "--local", "--set", f"runs_dir={tmp_path / 'runs'}")
    assert code == 0, streamed
    code, logs, _ = call(capsys, "logs", out.strip(), "--follow")
    assert code == 0
    relayed = [line for line in streamed.splitlines() if line.startswith("[node")]
    assert logs.splitlines() == relayed
    assert sorted(relayed) == sorted(f"[node{r} rank{r}] line {i} {r}" for r in (0, 1) for i in range(3))
    assert sorted(p.name for p in (tmp_path / "runs").rglob("*.log")) == ["node0.log", "node1.log", "output.log"]


def test_list_shows_the_jobs_made_on_a_target_newest_first(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, fake_root: Path
) -> None:
    first, second = tmp_path / "a.yaml", tmp_path / "b.yaml"
    first.write_text(GOOD.replace("name: c", "name: first"))
    second.write_text(GOOD.replace("name: c", "name: second"))
    handles = []
    for job in (first, second):
        code, out, _ = call(capsys, "submit", str(job), "-t", "fake", "--set", "run_seconds=600")
        handles.append(json.loads(out))
        time.sleep(0.05)
    code, out, _ = call(capsys, "list", "-t", "fake", "--json")
    listed = json.loads(out)
    assert code == 0
    assert [job["identity"] for job in listed] == [handles[1]["identity"], handles[0]["identity"]]
    assert {job["state"] for job in listed} == {"RUNNING"}
    code, out, _ = call(capsys, "status", listed[0]["handle"], "--json")  # a listed job's handle works
    assert json.loads(out)["identity"] == handles[1]["identity"]
    runs = tmp_path / "runs"
    code, out, _ = call(capsys, "submit", str(first), "--local", "--set", f"runs_dir={runs}")
    code, out, _ = call(capsys, "list", "--set", f"runs_dir={runs}")
    (line,) = out.splitlines()
    assert line.startswith("first-")
    assert "\tSUCCEEDED\t" in line
    handle = line.split("\t")[4]  # in a pipe, the handle is the last column
    code, out, _ = call(capsys, "status", handle, "--json")
    assert json.loads(out)["state"] == "SUCCEEDED"


def test_a_terminal_sees_list_as_an_aligned_table_with_a_header(tmp_path: Path, fake_root: Path) -> None:
    env = {**os.environ, "CROSSTRAIN_FAKE_ROOT": str(fake_root)}
    for name in ("short", "a-much-longer-name"):
        job = tmp_path / f"{name}.yaml"
        job.write_text(GOOD.replace("name: c", f"name: {name}"))
        subprocess.run(
            [sys.executable, "-m", "crosstrain.cli", "submit", str(job), "-t", "fake"],
            capture_output=True,
            env=env,
            check=True,
        )
    primary, secondary = pty.openpty()
    listing = subprocess.Popen(
        [sys.executable, "-m", "crosstrain.cli", "list", "-t", "fake"],
        stdout=secondary,
        stderr=subprocess.DEVNULL,
        env=env,
    )
    os.close(secondary)
    seen = drained(primary, listing)
    assert listing.wait(timeout=30) == 0
    lines = re.sub(r"\x1b\[[0-9;]*m", "", seen.decode()).replace("\r\n", "\n").splitlines()  # less colour
    assert lines[0].split() == ["IDENTITY", "STATE", "CREATED", "CONSOLE", "HANDLE"]
    assert len(lines) == 3
    starts = [line.index("SUCCEEDED") for line in lines[1:]]
    assert starts == [lines[0].index("STATE")] * 2  # the columns line up
    assert "\t" not in seen.decode()


def test_a_missing_sdk_exits_6_saying_how_to_install_it(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Following a job without its platform's SDK fails here, before anything is asked of the platform: not
    "submission failed" (3)."""
    from crosstrain.records import JobHandle

    workspace = {"subscription_id": "00000000-0000-0000-0000-000000000000", "resource_group": "rg", "workspace": "ws"}
    arm = "https://management.azure.com/subscriptions/{subscription_id}/resourceGroups/{resource_group}"
    url = (arm + "/providers/Microsoft.MachineLearningServices/workspaces/{workspace}/jobs/j-1").format(**workspace)
    handle = JobHandle("azureml", "j-1", "j-1", ref={**workspace, "url": url + "?api-version=2025-01-01-preview"})
    monkeypatch.setitem(sys.modules, "azure.ai.ml", None)
    for verb in ("status", "logs"):
        code, out, err = call(capsys, verb, str(handle))
        assert code == 6, (verb, err)
        assert "pip install 'crosstrain[azureml]'" in err
        assert out == ""
