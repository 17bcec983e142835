"""The CLI as users and CI pipelines run it: separate processes, stdout for results, exit codes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT

EXAMPLE = ROOT / "examples" / "ddp-quickstart" / "job.yaml"


def run(
    *args: str, stdin: str | None = None, env: dict[str, str] | None = None, cwd: Path = ROOT
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "crosstrain.cli", *args],
        input=stdin,
        capture_output=True,
        text=True,
        env={**os.environ, **(env or {})},
        timeout=120,
        cwd=cwd,
    )


def write(tmp_path: Path, text: str, name: str = "job.yaml") -> str:
    path = tmp_path / name
    path.write_text(text)
    return str(path)


JOB = """\
name: cli-job
image: img:1
command: python train.py
primary: {machine: "T4:2"}
workers: {replicas: 1}
targets:
  fake: {}
"""


def test_render_prints_only_the_request_json_on_stdout(fake_root: Path) -> None:
    done = run("render", str(EXAMPLE), "-t", "fake")
    assert done.returncode == 0, done.stderr
    request = json.loads(done.stdout)
    assert request["target"] == "fake"
    assert request["calls"][0]["url"].startswith(fake_root.as_uri())
    assert request["identity"].startswith("ddp-quickstart-")
    assert not fake_root.exists()  # a dry run sends nothing


def test_render_reads_stdin_and_honours_set_and_run_id(tmp_path: Path) -> None:
    done = run("render", "-", "--set", f"root={tmp_path}", "--set", "outcome=failed", "--run-id", "r7", stdin=JOB)
    request = json.loads(done.stdout)
    assert request["identity"] == "cli-job-r7"
    assert request["settings"]["outcome"] == "failed"
    assert request["calls"][0]["url"] == (tmp_path / "jobs" / "cli-job-r7.json").as_uri()


@pytest.mark.parametrize(
    ("text", "path", "fix"),
    [
        ("name: j\nworkers: {replica: 2}\n", "workers.replica", "did you mean 'replicas'?"),
        ("name: j\nworkers: {replicas: -1}\n", "workers.replicas", "use a value of at least 0"),
        ("name: j\nprimary: {machine: {accelerator: {count: 4}}}\n", "primary.machine", "add accelerator.type"),
        ("name: j\nprimary: {machine: 'Q900:8'}\n", "primary.machine.accelerator.type", "use one of T4"),
    ],
)
def test_bad_spec_exits_2_before_sending_naming_path_and_fix(
    fake_root: Path, tmp_path: Path, text: str, path: str, fix: str
) -> None:
    job = write(tmp_path, text + "targets: {fake: {}}\n")
    for verb in ("render", "validate", "submit"):
        done = run(verb, job)
        assert done.returncode == 2, (verb, done.stderr)
        assert f"  - {path}: " in done.stderr
        assert f"fix: {fix}" in done.stderr
        assert done.stdout == ""
    assert not fake_root.exists()


def test_json_errors_are_machine_readable(tmp_path: Path) -> None:
    done = run("render", write(tmp_path, "name: j\nworkers: {replicas: -1}\n"), "--target", "fake", "--json")
    assert done.returncode == 2
    error = json.loads(done.stdout)
    assert error["error"] == "SpecError"
    assert error["problems"][0]["path"] == "workers.replicas"


def test_refused_spec_exits_2_with_the_reason(tmp_path: Path) -> None:
    done = run("render", write(tmp_path, JOB + "reduction_server: {replicas: 2}\n"))
    assert done.returncode == 2
    assert "the fake target cannot run this job" in done.stderr
    assert "reduction_server: fake has no reduction server" in done.stderr


def test_unknown_target_and_missing_target(tmp_path: Path) -> None:
    done = run("render", str(EXAMPLE), "--target", "vertx")
    assert done.returncode == 2
    assert "unknown target 'vertx'" in done.stderr
    done = run("render", write(tmp_path, "name: j\ntargets: {fake: {}, vertex: {}}\n"))
    assert done.returncode == 2
    assert "no target chosen (the job file lists fake, vertex)" in done.stderr
    assert "--local to run it here" in done.stderr


def test_usage_errors_exit_2() -> None:
    assert run("render").returncode == 2
    assert run("frobnicate").returncode == 2


def test_submit_status_wait_logs_cancel_across_processes(tmp_path: Path) -> None:
    job = write(tmp_path, JOB)
    root = f"root={tmp_path / 'cloud'}"
    done = run("submit", job, "--set", root)
    assert done.returncode == 0, done.stderr
    handle = done.stdout.strip()
    assert json.loads(handle)["target"] == "fake"
    assert "submitted cli-job-" in done.stderr
    (tmp_path / "handle.json").write_text(handle + "\n")

    status = run("status", str(tmp_path / "handle.json"), "--json")
    assert json.loads(status.stdout)["state"] == "SUCCEEDED"
    assert run("wait", handle).returncode == 0
    assert run("status", "-", stdin=handle).stdout.startswith("SUCCEEDED")
    logs = run("logs", handle).stdout.splitlines()
    assert [line.split(" ", 2)[2] for line in logs] == ["created", "started", "ended succeeded"]

    again = run("submit", job, "--set", root)
    assert again.stdout.strip() == handle
    assert "existed already" in again.stderr
    fresh = run("submit", job, "--set", root, "--run-id", "new", "--json")
    assert json.loads(fresh.stdout)["identity"] != json.loads(handle)["identity"]

    running = run("submit", job, "--set", root, "--set", "run_seconds=600", "--json")
    assert run("cancel", running.stdout).returncode == 0
    assert json.loads(run("status", running.stdout, "--json").stdout)["state"] == "CANCELLED"
    ended = run("cancel", handle, "--json")  # a job that has ended is left as it is, and said so
    assert ended.returncode == 0
    assert json.loads(ended.stdout) == {
        "identity": json.loads(handle)["identity"],
        "cancelled": False,
        "state": "SUCCEEDED",
    }
    assert "already ended SUCCEEDED" in ended.stderr
    assert "asked" not in ended.stderr


def test_wait_exit_codes(tmp_path: Path) -> None:
    job = write(tmp_path, JOB)
    root = f"root={tmp_path / 'cloud'}"
    failed = run("submit", job, "--set", root, "--set", "outcome=failed", "--wait")
    assert failed.returncode == 4
    assert "ended FAILED" in failed.stderr
    slow = run("submit", job, "--set", root, "--set", "run_seconds=600", "--wait", "--timeout", "0.2")
    assert slow.returncode == 5
    assert "still RUNNING" in slow.stderr


def test_submit_sends_an_edited_rendered_request(tmp_path: Path) -> None:
    request = json.loads(run("render", write(tmp_path, JOB), "--set", f"root={tmp_path}").stdout)
    request["calls"][0]["body"]["labels"]["edited"] = "yes"
    saved = write(tmp_path, json.dumps(request), "request.json")
    done = run("submit", saved)
    assert done.returncode == 0, done.stderr
    stored = json.loads((tmp_path / "jobs" / f"{request['identity']}.json").read_text())
    assert stored["labels"] == {"edited": "yes"}


def test_validate_reports_each_target(tmp_path: Path) -> None:
    done = run("validate", write(tmp_path, JOB + "  vertx: {}\n"), "--json")
    assert done.returncode == 2
    report = json.loads(done.stdout)
    assert report["targets"]["fake"] == []
    assert report["targets"]["vertx"][0]["message"] == "unknown target 'vertx'"
    # every target, databricks included: it finds the training file it uploads in the current folder
    assert run("validate", str(EXAMPLE), cwd=EXAMPLE.parent).returncode == 0


def test_catalog_and_help() -> None:
    rows = json.loads(run("catalog", "--target", "vertex", "--json").stdout)
    assert {
        "target": "vertex",
        "gpu": "A100",
        "count": 8,
        "machine_types": ["a2-highgpu-8g"],
        "accelerator": "NVIDIA_TESLA_A100",
        "note": "",
    } in rows
    assert "databricks-aws" in run("catalog").stdout
    assert run("catalog", "--target", "nowhere").returncode == 2
    help_text = run("--help").stdout
    for verb in ("render", "validate", "submit", "status", "wait", "cancel", "logs", "schema"):
        assert verb in help_text
    assert "exit codes" in help_text


def test_a_changed_job_under_a_fixed_run_id_is_refused_with_both_fingerprints(tmp_path: Path) -> None:
    root = f"root={tmp_path / 'cloud'}"
    first = run("submit", write(tmp_path, JOB), "--set", root, "--run-id", "fixed")
    assert first.returncode == 0, first.stderr
    changed = write(tmp_path, JOB.replace("name: cli-job", "name: cli-job\nargs: [--epochs, '40']"), "changed.yaml")
    refused = run("submit", changed, "--set", root, "--run-id", "fixed", "--json")
    assert refused.returncode == 3
    error = json.loads(refused.stdout)
    assert error["error"] == "IdentityConflict"
    ours = json.loads(run("render", changed, "--set", root, "--run-id", "fixed").stdout)["fingerprint"]
    theirs = json.loads(run("render", write(tmp_path, JOB), "--set", root, "--run-id", "fixed").stdout)["fingerprint"]
    assert ours != theirs
    assert ours in error["message"]
    assert theirs in error["message"]
    assert "--run-id new" in error["message"]
    assert len(list((tmp_path / "cloud" / "jobs").iterdir())) == 1


def test_another_targets_settings_do_not_rename_the_job(tmp_path: Path) -> None:
    root = f"root={tmp_path / 'cloud'}"
    first = run("submit", write(tmp_path, JOB), "--set", root)
    edited = JOB + "  databricks: {host: https://dbc-1.cloud.databricks.com}\n"
    again = run("submit", write(tmp_path, edited, "edited.yaml"), "-t", "fake", "--set", root)
    assert again.returncode == 0, again.stderr
    assert again.stdout == first.stdout
    assert "existed already" in again.stderr


def test_submit_dry_run_prints_the_render_and_sends_nothing(tmp_path: Path) -> None:
    job = write(tmp_path, JOB)
    root = f"root={tmp_path / 'cloud'}"
    dry = run("submit", job, "--set", root, "--dry-run")
    assert dry.returncode == 0, dry.stderr
    assert json.loads(dry.stdout) == json.loads(run("render", job, "--set", root, "--json").stdout)
    assert "dry run: nothing was sent" in dry.stderr
    assert not (tmp_path / "cloud" / "jobs").exists()  # the fake cloud got no job
    saved = tmp_path / "request.json"
    saved.write_text(dry.stdout)
    again = run("submit", str(saved), "--dry-run")
    assert json.loads(again.stdout) == json.loads(dry.stdout)
    refused = run("submit", job, "--set", root, "--dry-run", "--wait")
    assert refused.returncode == 2
    assert "nothing to --wait for" in refused.stderr or "no job to --wait for" in refused.stderr


@pytest.mark.parametrize(("typed", "meant"), [("sumbit", "submit"), ("stauts", "status"), ("valdiate", "validate")])
def test_a_mistyped_verb_gets_the_closest_one(typed: str, meant: str) -> None:
    done = run(typed, "job.yaml")
    assert done.returncode == 2
    assert f"did you mean `crosstrain {meant}`?" in done.stderr
    as_json = json.loads(run("--json", typed).stdout)
    assert as_json["error"] == "UsageError"
    assert meant in as_json["message"]


def test_the_cli_render_loads_no_pydantic_plugin_and_a_program_keeps_its_plugins(tmp_path: Path) -> None:
    """The CLI skips pydantic's plugin discovery (a scan of every installed distribution); a program that imports
    crosstrain still has its plugins loaded."""
    (tmp_path / "marking_plugin.py").write_text(
        f"open({str(tmp_path / 'loaded')!r}, 'a').write('x')\n"
        "class Plugin:\n    def new_schema_validator(self, *args, **kwargs):\n        return None, None, None\n"
        "plugin = Plugin()\n",
        encoding="utf-8",
    )
    info = tmp_path / "marking_plugin-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: marking-plugin\nVersion: 1.0\n", encoding="utf-8")
    (info / "entry_points.txt").write_text("[pydantic]\nmarking = marking_plugin:plugin\n", encoding="utf-8")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), str(ROOT / "src")])}
    env.pop("PYDANTIC_DISABLE_PLUGINS", None)
    job = str(ROOT / "examples" / "ddp-quickstart" / "job.yaml")
    render = "import sys; from crosstrain.cli import main; sys.exit(main(['render', sys.argv[1], '-t', 'vertex']))"
    subprocess.run([sys.executable, "-c", render, job], env=env, check=True, capture_output=True)
    assert not (tmp_path / "loaded").exists()
    program = "import sys; from crosstrain.loader import load_job; load_job(sys.argv[1])"
    subprocess.run([sys.executable, "-c", program, job], env=env, check=True, capture_output=True)
    assert (tmp_path / "loaded").read_text() == "x"


def test_the_command_exits_without_tearing_down_yet_flushes_and_runs_exit_handlers() -> None:
    """`crosstrain` (`cli.entry`) ends its process without freeing every object: what it printed, the exit
    handlers and the exit code are as at any exit; a thread still running makes it the ordinary exit, which waits."""
    program = (
        "import atexit, sys, threading\n"
        "class Marker:\n"
        "    def __del__(self):\n"
        "        print('torn down', flush=True)\n"
        "marker = Marker()\n"
        "atexit.register(lambda: print('handler ran', flush=True))\n"
        "if sys.argv[1] == 'thread':\n"
        "    main = threading.main_thread()  # the thread ends once the main thread has\n"
        "    threading.Thread(target=lambda: (main.join(), print('thread ended', flush=True))).start()\n"
        "sys.argv[1:] = ['render', sys.argv[2], '-t', 'vertex']\n"
        "from crosstrain.cli import entry\n"
        "entry()\n"
    )

    def exit_of(mode: str, job: Path) -> tuple[int, list[str], str]:
        done = subprocess.run(
            [sys.executable, "-c", program, mode, str(job)], capture_output=True, text=True, timeout=120, cwd=ROOT
        )
        request, _, rest = done.stdout.rpartition("}\n")
        return done.returncode, rest.splitlines(), request + "}"

    code, after, request = exit_of("alone", EXAMPLE)
    assert (code, after) == (0, ["handler ran"])  # no teardown, so no __del__
    assert json.loads(request)["target"] == "vertex"  # every byte of the output, flushed
    code, after, _ = exit_of("thread", EXAMPLE)
    assert (code, after) == (0, ["thread ended", "handler ran", "torn down"])
    code, after, _ = exit_of("alone", ROOT / "missing.yaml")
    assert (code, after) == (2, ["handler ran"])


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="no /dev/full here: a disk that is always full")
def test_output_that_cannot_be_written_fails_the_command() -> None:
    """A render to a full disk: its output, buffered until the end, is written before the command exits, and the
    failure is said and exits 1 rather than leave a cut file behind a success."""
    env = {key: value for key, value in os.environ.items() if key != "PYTHONUNBUFFERED"}
    with open("/dev/full", "w") as full:
        done = subprocess.run(
            [sys.executable, "-m", "crosstrain.cli", "render", str(EXAMPLE), "-t", "vertex"],
            stdout=full,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
            timeout=120,
            cwd=ROOT,
        )
    assert done.returncode == 1, done.stderr
    assert "No space left on device" in done.stderr
