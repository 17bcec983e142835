"""Hostile input through the CLI, each run in its own process: alias bombs, deep nesting, huge files, binary, odd
encodings, YAML tags, odd handles, directories, devices, FIFOs and closed stdin.

Every run must exit 2 with a short message (under 1 KB on stderr, one JSON object on stdout with --json, never a
traceback), nothing sent, within 200 MB of memory (the child's peak RSS, from `wait4`) and 2 s of CPU time. Wall
time is bounded too, more loosely, since CI machines are shared; `-s` prints the largest figures measured.
The corpus is generated here, so no hostile file is checked in.
"""

from __future__ import annotations

import codecs
import contextlib
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import ROOT

MAX_RSS_MB = 200
MAX_CPU_S = 2.0
MAX_WALL_S = 10.0  # a hang (a blocking FIFO, a parser that never returns) fails; load on a shared CI box does not
MAX_STDERR = 1024
MiB = 1024 * 1024
CLOSED = "closed"  # run with stdin (fd 0) closed

BASE = "name: hostile\nimage: img:1\ncommand: python train.py\n"


@dataclass
class Run:
    args: list[str]
    code: int
    stdout: str
    stderr: str
    wall: float
    cpu: float
    rss_mb: float

    def __str__(self) -> str:
        return f"{self.args[:2]} -> {self.code}: {self.stderr[:600]!r} stdout={self.stdout[:300]!r}"


MEASURED: list[Run] = []


@pytest.fixture(scope="module", autouse=True)
def _print_figures() -> Iterator[None]:
    yield
    if MEASURED:
        print(
            f"\n{len(MEASURED)} runs: max wall {max(r.wall for r in MEASURED):.2f} s, "
            f"max CPU {max(r.cpu for r in MEASURED):.2f} s (all runs {sum(r.cpu for r in MEASURED):.1f} s), "
            f"max RSS {max(r.rss_mb for r in MEASURED):.1f} MB"
        )


#: Starts the CLI from a small process and reports the CLI's own peak RSS and CPU time. Linux keeps a process's
#: peak RSS across exec, so a child forked straight from pytest (large after the SDK tests) would count pytest's
#: pages as its own; forked from this small launcher, it counts only its own and the launcher's few MB.
LAUNCHER = """
import json, os, resource, signal, sys
report, argv = sys.argv[1], sys.argv[2:]
pid = os.fork()
if pid == 0:
    limit = 2048 * 1024 * 1024  # a safety net for the machine running the tests, well above the goal
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    os.execvp(argv[0], argv)
_, status, usage = os.wait4(pid, 0)
with open(report, "w") as out:
    json.dump({"cpu": usage.ru_utime + usage.ru_stime, "rss_kb": usage.ru_maxrss}, out)
if os.WIFSIGNALED(status):
    signal.signal(os.WTERMSIG(status), signal.SIG_DFL)
    os.kill(os.getpid(), os.WTERMSIG(status))
os._exit(os.waitstatus_to_exitcode(status))
"""


def cli(*commands: list[str], stdin: Path | str | None = None, cwd: Path = ROOT) -> list[Run]:
    """Run the CLI once per command, concurrently, measuring each one's peak RSS and CPU time with wait4."""
    env = {k: v for k, v in os.environ.items() if k != "CROSSTRAIN_DEBUG"}
    runs = []
    with contextlib.ExitStack() as files:
        started = []
        for args in commands:
            argv = [sys.executable, "-m", "crosstrain.cli", *args]
            if stdin == CLOSED:
                argv = ["sh", "-c", 'exec "$@" <&-', "sh", *argv]
            out, err = (files.enter_context(tempfile.TemporaryFile()) for _ in range(2))
            report = files.enter_context(tempfile.NamedTemporaryFile(suffix=".json"))
            with open(stdin if isinstance(stdin, Path) else os.devnull, "rb") as source:
                proc = subprocess.Popen(
                    [sys.executable, "-c", LAUNCHER, report.name, *argv],
                    stdin=source,
                    stdout=out,
                    stderr=err,
                    cwd=cwd,
                    env=env,
                    start_new_session=True,
                )
            started.append((args, proc, out, err, report, time.monotonic()))
        for args, proc, out, err, report, t0 in started:
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
            wall = time.monotonic() - t0
            out.seek(0)
            err.seek(0)
            stdout, stderr = (f.read().decode("utf-8", "replace") for f in (out, err))
            usage = json.loads(Path(report.name).read_text() or '{"cpu": 0, "rss_kb": 0}')
            runs.append(Run(args, proc.returncode, stdout, stderr, wall, usage["cpu"], usage["rss_kb"] / 1024))
    MEASURED.extend(runs)
    return runs


def assert_refused(run: Run, expect: str | tuple[str, ...], *, as_json: bool) -> None:
    """Exit 2, a short message that says `expect` (or one of them), JSON on stdout under --json, in bounded time
    and memory."""
    assert run.code == 2, run
    assert "Traceback" not in run.stderr, run
    assert 0 < len(run.stderr.encode()) < MAX_STDERR, run
    says = (expect,) if isinstance(expect, str) else expect
    assert any(text in run.stderr for text in says), run
    if as_json:
        error = json.loads(run.stdout)
        assert error["error"], run
        assert any(text in error["message"] for text in says), run
    else:
        assert run.stdout == "", run
    assert run.rss_mb < MAX_RSS_MB, run
    assert run.cpu < MAX_CPU_S, run
    assert run.wall < MAX_WALL_S, run


# --- the corpus --------------------------------------------------------------------------------------------


def alias_bomb(levels: int = 9, width: int = 9, *, mapping: bool = False) -> str:
    """Billion laughs: each level repeats the one below `width` times; `width ** levels` values in ~400 bytes."""
    if mapping:
        lines = ["    a0: &a0 {" + ", ".join(f"k{i}: lol" for i in range(width)) + "}"]
        item = "k{j}: *a{i}"
        opener, closer = "{", "}"
    else:
        lines = ["    a0: &a0 [" + ", ".join(["lol"] * width) + "]"]
        item = "*a{i}"
        opener, closer = "[", "]"
    for level in range(1, levels):
        items = ", ".join(item.format(i=level - 1, j=j) for j in range(width))
        lines.append(f"    a{level}: &a{level} {opener}{items}{closer}")
    return BASE + "targets:\n  fake: {}\n  other:\n" + "\n".join(lines) + "\n"


def merge_bomb(levels: int = 12) -> str:
    """Merge keys (`<<`) and aliases doubling at every level."""
    lines = ["    m0: &m0 {a: 1, b: 2}"]
    for level in range(1, levels):
        lines.append(f"    m{level}: &m{level} {{<<: *m{level - 1}, x: *m{level - 1}, y: *m{level - 1}}}")
    return BASE + "targets:\n  fake: {}\n  other:\n" + "\n".join(lines) + "\n"


def quadratic_blowup(n: int = 4000) -> str:
    """One anchor of n values, aliased n times: 16 million values from ~30 KB."""
    return (
        BASE
        + "targets:\n  fake: {}\n  other:\n    a: &a ["
        + ", ".join(["x"] * n)
        + "]\n    b: ["
        + (", ".join(["*a"] * n) + "]\n")
    )


def nested_block_mappings(depth: int) -> str:
    return BASE + "targets:\n" + "".join(" " * level + "k:\n" for level in range(1, depth)) + " " * depth + "k: v\n"


def unknown_keys(size: int, *, as_json: bool = False) -> str:
    """`size` bytes of unknown keys, built from one block with the key prefix changed (fast to generate)."""
    block = "".join((f'"k{i}": {i}, ' if as_json else f"k{i}: {i}\n") for i in range(50_000))
    chunks: list[str] = []
    total = 0
    while total < size:
        chunks.append(block.replace("k", f"k{len(chunks)}_"))
        total += len(block)
    if as_json:
        return '{"name": "hostile", ' + "".join(chunks) + '"last": 0}'
    return BASE + "".join(chunks)


def encoded(text: str, encoding: str, bom: bytes = b"") -> bytes:
    return bom + text.encode(encoding, "surrogatepass")


#: name -> (file content (or a maker given the folder, returning the JOB argument), what the message says)
JOB_FILES: dict[str, tuple[str | bytes | Callable[[Path], str], str]] = {
    # alias bombs and other expansions
    "alias-bomb-400-bytes": (alias_bomb(), "more than 20,000 values"),
    "alias-bomb-of-mappings": (alias_bomb(mapping=True), "more than 20,000 values"),
    "alias-bomb-in-a-used-field": (alias_bomb() + "args: *a8\n", "more than 20,000 values"),
    "alias-bomb-flow-style": (
        '{"name": "hostile", "targets": {"other": {"a": &a [1, 1, 1, 1, 1, 1, 1, 1, 1, 1], '
        + ", ".join(f'"b{i}": &b{i} [' + ", ".join([f"*{'a' if i == 0 else f'b{i - 1}'}"] * 10) + "]" for i in range(7))
        + "}}}",
        "more than 20,000 values",
    ),
    "quadratic-blowup": (quadratic_blowup(), "more than 20,000 values"),
    "merge-key-bomb": (merge_bomb(), "more than 20,000 values"),
    "alias-inside-itself": (BASE + "targets: {fake: {}, other: &a [1, *a]}\n", "inside the node it names"),
    # nesting
    "nesting-1k-flow": (BASE + "args: " + "[" * 1000 + "]" * 1000 + "\n", "nested more than 64 levels"),
    "nesting-100k-flow": (BASE + "args: " + "[" * 100_000 + "]" * 100_000 + "\n", "nested more than 64 levels"),
    "nesting-1k-block": (nested_block_mappings(1000), "nested more than 64 levels"),
    "nesting-100k-block": (BASE + "args:\n" + "- " * 100_000 + "x\n", "nested more than 64 levels"),
    "nesting-1k-json.json": ('{"name": "j", "targets": ' + '{"a": ' * 1000 + "1" + "}" * 1001, "nested more than 64"),
    "nesting-100k-json.json": ('{"args": ' + "[" * 100_000 + "]" * 100_000 + "}", "nested more than 64"),
    # size
    "unknown-keys-50mb": (lambda d: _write(d / "keys.yaml", unknown_keys(50 * MiB)), "larger than 1 MiB"),
    "unknown-keys-50mb.json": (lambda d: _write(d / "keys.json", unknown_keys(50 * MiB, as_json=True)), "larger than"),
    "unknown-keys-under-the-limits": (BASE + "".join(f"k{i}: {i}\n" for i in range(6000)), "6,000 unknown fields"),
    "string-20mb": (lambda d: _write(d / "s.yaml", BASE + "env: {X: " + "x" * (20 * MiB) + "}\n"), "larger than"),
    "string-20mb.json": (lambda d: _write(d / "s.json", '{"name": "' + "x" * (20 * MiB) + '"}'), "larger than"),
    "string-512k": (BASE + "env: {X: '" + "x" * (512 * 1024) + "'}\n", "a string longer than 262,144"),
    "number-5000-digits": (BASE + "workers: {replicas: " + "9" * 5000 + "}\n", "a number of 5000 characters"),
    "number-base-60": (BASE + "workers: {replicas: 1" + ":1" * 50_000 + "}\n", "a number of 100001 characters"),
    "number-100k-digits.json": ('{"name": "j", "workers": {"replicas": ' + "9" * 100_000 + "}}", "a number of"),
    "many-list-items-of-the-wrong-type": (BASE + "args: [" + ", ".join(["[]"] * 5000) + "]\n", "5,000 values"),
    # bytes that are not a job
    "random-binary": (random.Random(13).randbytes(64 * 1024), "not UTF-8 text"),
    "random-binary-from-nul": (b"\0" + random.Random(14).randbytes(64 * 1024), "not UTF-16 text"),
    "nul-bytes": (BASE.encode() + b"env: {X: a\0b}\n", "a NUL byte at line 4, column 11"),
    "control-characters": (
        BASE.encode() + b"env: {X: a\x01\x02b}\n",
        "the character U+0001 at line 4, column 11 is not allowed",
    ),
    "latin-1": (encoded(BASE + "env: {X: café}\n", "latin-1"), "not UTF-8 text: bytes e9 at line 4, column 13"),
    "utf-8-lone-surrogate": (BASE.encode() + b"env: {X: \xed\xa0\x80}\n", "not UTF-8 text: bytes ed"),
    "utf-16-lone-surrogate": (encoded(BASE + "env: {X: \ud800}\n", "utf-16-le", codecs.BOM_UTF16_LE), "not UTF-16"),
    "utf-32-odd-length": (encoded(BASE, "utf-32-le", codecs.BOM_UTF32_LE) + b"\0", "not UTF-32 text"),
    "json-lone-surrogate-escape.json": ('{"name": "j", "env": {"X": "\\ud800"}}', "surrogate"),
    "two-documents": (BASE + "---\n" + BASE, "expected a single document"),
    # tags
    "tag-binary-in-unused-section": (BASE + "targets: {fake: {}, other: {x: !!binary aGVsbG8=}}\n", "!!binary"),
    "tag-python-object-apply": (
        BASE + "targets: {fake: {}, other: !!python/object/apply:os.system ['echo pwned']}\n",
        "!!python/object/apply:os.system",
    ),
    "tag-python-name": (BASE + "env: {X: !!python/name:os.system ''}\n", "!!python/name:os.system"),
    "tag-set": (BASE + "targets: {fake: {}, other: !!set {a, b}}\n", "!!set"),
    "tag-omap": (BASE + "targets: {fake: {}, other: !!omap [a: 1]}\n", "!!omap"),
    "tag-timestamp": (BASE + "env: {X: !!timestamp 2024-01-01}\n", "!!timestamp"),
    "tag-local": (BASE + "image: !Ref ImageUri\n", "the tag !Ref"),
    "tag-verbatim": (BASE + "image: !<tag:example.com,2000:x> y\n", "tag:example.com,2000:x"),
    "tag-directive": ("%TAG !e! tag:example.com,2000:\n---\n" + BASE + "image: !e!x y\n", "tag:example.com,2000:x"),
    # things that are not files
    "empty": ("", "not empty"),
    "directory": (lambda d: _mkdir(d / "job-folder"), "is a directory"),
    "dev-zero": (lambda d: "/dev/zero", "larger than 1 MiB"),
    "fifo-nobody-writes": (lambda d: _mkfifo(d / "fifo"), "a FIFO that nothing is writing to"),
    "missing": (lambda d: str(d / "nope.yaml"), "no such file"),
    "unreadable": (lambda d: _unreadable(d / "secret.yaml"), "cannot read"),
    "name-too-long": (lambda d: "j" * 5000, "File name too long"),
    "name-with-control-characters": (lambda d: str(d / "a\x1b[31mb\n.yaml"), "no such file"),
}


def _write(path: Path, text: str) -> str:
    path.write_text(text)
    return str(path)


def _mkdir(path: Path) -> str:
    path.mkdir()
    (path / "job.yaml").write_text(BASE)
    return str(path)


def _mkfifo(path: Path) -> str:
    os.mkfifo(path)
    return str(path)


def _unreadable(path: Path) -> str:
    if os.geteuid() == 0:
        pytest.skip("root reads any file")
    path.write_text(BASE)
    path.chmod(0)
    return str(path)


def make(case: str, folder: Path) -> str:
    content, _ = JOB_FILES[case]
    if callable(content):
        return content(folder)
    path = folder / (case if case.endswith(".json") else f"{case}.yaml")
    path.write_bytes(content.encode() if isinstance(content, str) else content)
    return str(path)


@pytest.mark.parametrize("case", list(JOB_FILES))
def test_hostile_job_file(tmp_path: Path, case: str) -> None:
    job = make(case, tmp_path)
    root = tmp_path / "cloud"
    # A YAML file is read the same way by every verb, so one run each, taking turns; submit reads a .json file
    # (or stdin) as a job or a rendered request, so those go through submit and render both.
    index = list(JOB_FILES).index(case)
    submit = ["submit", job, "-t", "fake", "--set", f"root={root}"]
    if job.endswith(".yaml"):
        commands = [[["render", job, "-t", "fake", "--json"], ["validate", job, "-t", "fake"], submit][index % 3]]
    else:
        commands = [["render", job, "-t", "fake", "--json"], submit]
    runs = cli(*commands)
    expect = JOB_FILES[case][1]
    for run in runs:
        assert_refused(run, expect, as_json="--json" in run.args)
    assert not root.exists()


@pytest.mark.parametrize(
    ("case", "render_says", "submit_says"),
    [
        ("alias-bomb-400-bytes", "more than 20,000 values", "more than 20,000 values"),
        ("nesting-100k-json.json", "nested more than 64", "nested more than 64"),
        ("unknown-keys-50mb", "larger than 1 MiB, the limit for a job file", "larger than 16 MiB"),
        ("unknown-keys-50mb.json", "larger than 1 MiB", "larger than 16 MiB, the limit for a rendered request"),
        ("random-binary", "not UTF-8 text", "not UTF-8 text"),
        ("dev-zero", "larger than 1 MiB", "larger than 16 MiB"),
    ],
)
def test_hostile_job_on_stdin(tmp_path: Path, case: str, render_says: str, submit_says: str) -> None:
    """`submit -` reads a job or a rendered request, so it reads up to a request's limit; `render -` a job's."""
    source = Path(make(case, tmp_path))
    root = tmp_path / "cloud"
    render, submit = cli(["validate", "-", "-t", "fake"], stdin=source) + cli(
        ["submit", "-", "-t", "fake", "--set", f"root={root}", "--json"], stdin=source
    )
    assert_refused(render, render_says, as_json=False)
    assert_refused(submit, submit_says, as_json=True)
    assert not root.exists()


def test_closed_stdin(tmp_path: Path) -> None:
    runs = cli(
        ["render", "-", "-t", "fake", "--json"],
        ["validate", "-"],
        ["submit", "-", "-t", "fake", "--set", f"root={tmp_path}"],
        ["status", "-", "--json"],
        stdin=CLOSED,
    )
    for run in runs:
        assert_refused(run, "stdin is closed", as_json="--json" in run.args)


@pytest.mark.parametrize(
    ("encoding", "bom"),
    [
        ("utf-8", codecs.BOM_UTF8),
        ("utf-16-le", codecs.BOM_UTF16_LE),
        ("utf-16-be", codecs.BOM_UTF16_BE),
        ("utf-16-le", b""),
        ("utf-16-be", b""),
        ("utf-32-le", codecs.BOM_UTF32_LE),
        ("utf-32-be", b""),
    ],
)
def test_utf16_and_utf32_job_files_are_read(tmp_path: Path, encoding: str, bom: bytes) -> None:
    job = tmp_path / "job.yaml"
    job.write_bytes(encoded(BASE + "env: {GREETING: café ☕ 🚀}\n", encoding, bom))
    (run,) = cli(["render", str(job), "-t", "fake", "--json"])
    assert run.code == 0, run
    assert json.loads(run.stdout)["calls"][0]["body"]["pools"][0]["env"]["GREETING"] == "café ☕ 🚀"


def test_anchors_merge_keys_and_dates_in_a_real_job(tmp_path: Path) -> None:
    job = tmp_path / "job.yaml"
    job.write_text(
        BASE + "primary: &node {machine: 'T4:2', env: {A: '1'}}\nworkers: {<<: *node, replicas: 1}\n"
        "env: {DAY: 2024-01-01}\n"
    )
    (run,) = cli(["render", str(job), "-t", "fake", "--json"])
    assert run.code == 0, run
    workers = json.loads(run.stdout)["calls"][0]["body"]["pools"][1]
    assert workers["machine"]["gpuCount"] == 2
    assert workers["env"] == {"DAY": "2024-01-01", "A": "1"}  # a date stays the text it was written as


def test_a_job_through_a_pipe_path(tmp_path: Path) -> None:
    """`crosstrain render /dev/stdin` (or `<(...)`) reads a pipe with a writer: the FIFO check lets it through."""
    done = subprocess.run(
        [sys.executable, "-m", "crosstrain.cli", "render", "/dev/stdin", "-t", "fake"],
        input=BASE,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["job_name"] == "hostile"


# --- handles -----------------------------------------------------------------------------------------------

GOOD = {"target": "fake", "identity": "j-1", "job_id": "j-1", "console_url": "", "ref": {"url": "file:///nope"}}


def handle(**changes: object) -> str:
    return json.dumps({k: v for k, v in {**GOOD, **changes}.items() if v is not ...})


#: name -> (HANDLE argument, or a maker given the folder; what the message says)
HANDLES: dict[str, tuple[str | Callable[[Path], str], str]] = {
    "a-list": ("[1, 2]", "not list"),
    "a-number": (lambda d: _write(d / "h.json", "42"), "not int"),
    "a-string": (lambda d: _write(d / "h.json", '"fake"'), "not str"),
    "null": (lambda d: _write(d / "h.json", "null"), "not null"),
    "empty-object": ("{}", "handle.target: missing"),
    "not-json": ("{target: fake}", "not JSON"),
    "missing-identity": (handle(identity=...), "handle.identity: missing"),
    "job-id-an-int": (handle(job_id=7), "handle.job_id: must be a non-empty string, not 7"),
    "target-a-list": (handle(target=["fake"]), "handle.target: must be a non-empty string"),
    "ref-a-string": (handle(ref="file:///x"), "handle.ref: must be a JSON object"),
    "ref-a-list": (handle(ref=[1]), "handle.ref: must be a JSON object"),
    "ref-missing-url": (handle(ref={}), "handle.ref.url: fake needs url: a string, missing"),
    "ref-url-a-number": (handle(ref={"url": 3}), "handle.ref.url: fake needs url: a string, not 3"),
    "unknown-target": (handle(target="nimbus"), "unknown target 'nimbus'"),
    "databricks-run-id-a-string": (
        handle(target="databricks", ref={"host": "https://dbc-1.cloud.databricks.com", "run_id": "abc"}),
        "handle.ref.run_id: databricks needs run_id: a whole number, not 'abc'",
    ),
    "vertex-name-a-number": (handle(target="vertex", ref={"name": 7}), "handle.ref.name: vertex needs name"),
    "azureml-ref-empty": (
        handle(target="azureml", ref={}),
        "handle.ref.subscription_id: azureml needs subscription_id",
    ),
    "aiplatform-url-a-list": (handle(target="aiplatform", ref={"url": ["x"]}), "aiplatform needs url: a string"),
    "huge-identity": (lambda d: _write(d / "h.json", handle(identity="i" * 12_000)), "longer than 1,024"),
    "huge-string-in-ref": (lambda d: _write(d / "h.json", handle(ref={"url": "u" * 100_000})), "longer than 16,384"),
    "huge-file": (lambda d: _write(d / "h.json", handle(ref={"url": "u" * (50 * MiB)})), "larger than 256 KiB"),
    "deep-nesting": (lambda d: _write(d / "h.json", "[" * 100_000 + "]" * 100_000), "nested more than 32"),
    "many-values": (lambda d: _write(d / "h.json", "[" + "0," * 100_000 + "0]"), "more than 20,000 values"),
    "lone-surrogate-escape": (handle(identity="\ud800"), "lone surrogate"),
    # bytes that are not UTF-8 reach Python's argv as lone surrogates
    "lone-surrogate-in-argv": ('{"target": "fake", "identity": "\udcff"}', "a lone surrogate"),
    "unterminated-escaped-quotes": (lambda d: _write(d / "h.json", '{"a": "' + '\\"' * 100_000), "not JSON"),
    "long-number": ('{"target": "fake", "job_id": ' + "9" * 5000 + "}", "a number of 5000 characters"),
    "submit-json-wrapping-a-bad-handle": (json.dumps({"handle": "[1]", "target": "fake"}), "not list"),
    "binary-file": (lambda d: _write_bytes(d / "h.bin", random.Random(5).randbytes(4096)), "not UTF-8 text"),
    "utf-16-file-without-a-job": (lambda d: _write_bytes(d / "h.json", encoded("[]", "utf-16")), "not list"),
    "directory": (lambda d: _mkdir(d / "handles"), "is a directory"),
    "dev-zero": (lambda d: "/dev/zero", "larger than 256 KiB"),
    "fifo-nobody-writes": (lambda d: _mkfifo(d / "fifo"), "a FIFO that nothing is writing to"),
    "no-such-file": (lambda d: str(d / "handle.txt"), "not a handle and no such file"),
}


def _write_bytes(path: Path, data: bytes) -> str:
    path.write_bytes(data)
    return str(path)


@pytest.mark.parametrize("case", list(HANDLES))
def test_odd_handle(tmp_path: Path, case: str) -> None:
    source, expect = HANDLES[case]
    argument = source(tmp_path) if callable(source) else source
    index = list(HANDLES).index(case)
    verb = ("status", "wait", "cancel", "logs")[index % 4]
    (run,) = cli([verb, argument, *(["--json"] if index % 2 == 0 else [])])
    assert_refused(run, expect, as_json=index % 2 == 0)


def test_odd_handle_on_stdin(tmp_path: Path) -> None:
    source = tmp_path / "h.json"
    source.write_text(handle(job_id=7))
    (run,) = cli(["wait", "-", "--json"], stdin=source)
    assert_refused(run, "handle.job_id", as_json=True)


# --- rendered requests -------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def request_json(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """A rendered request, whose cloud root no test creates."""
    folder = tmp_path_factory.mktemp("request")
    job = folder / "job.yaml"
    job.write_text(BASE)
    (run,) = cli(["render", str(job), "-t", "fake", "--set", f"root={folder / 'cloud'}", "--json"])
    assert run.code == 0, run
    request: dict[str, Any] = json.loads(run.stdout)
    return request


@pytest.mark.parametrize(
    ("edit", "expect"),
    [
        (lambda r: {**r, "calls": "PUT"}, "calls: must be a list of calls"),
        (lambda r: {**r, "calls": []}, "calls: holds no call"),
        (lambda r: {**r, "calls": [1]}, "calls[0]: must be a mapping"),
        (lambda r: {**r, "calls": [{"url": "file:///x"}]}, "calls[0].method: must be a string"),
        (lambda r: {**r, "identity": 5}, "identity: must be a string, not 5"),
        (lambda r: {**r, "notes": "n"}, "notes: must be a list"),
        (lambda r: {**r, "build_context": {"folder": 1, "digest": "d"}}, "build_context.folder: must be a string"),
        (lambda r: {**r, "inputs": ["data"]}, "inputs: must be a mapping of input names to folders"),
        (lambda r: {**r, "inputs": {"m": {"folder": "/d", "digest": 2}}}, "inputs.m.digest: must be a string"),
        (
            lambda r: {**r, "calls": [{**r["calls"][0], "headers": {"Authorization": "Bearer x"}}]},
            "must not carry credentials",
        ),
        # under 1 MiB, JSON that fails a request's checks is read as a job: libyaml names the escape, crosstrain
        # the lone surrogate that PyYAML's own parser reads from it
        (lambda r: {**r, "job_name": "\ud800"}, ("invalid Unicode character escape code", "lone surrogate")),
    ],
)
def test_an_edited_request_with_a_wrong_field(
    tmp_path: Path,
    request_json: dict[str, Any],
    edit: Callable[[dict[str, Any]], dict[str, Any]],
    expect: str | tuple[str, ...],
) -> None:
    path = tmp_path / "request.json"
    path.write_text(json.dumps(edit(request_json)))
    (run,) = cli(["submit", str(path), "--json"])
    assert_refused(run, expect, as_json=True)
    assert not Path(request_json["settings"]["root"]).exists()


def test_a_huge_request(tmp_path: Path, request_json: dict[str, Any]) -> None:
    request = request_json
    big = tmp_path / "big.json"
    big.write_text(json.dumps({**request, "notes": ["n"] * 300_000}))  # past 1 MiB: only a request can be this big
    deep = tmp_path / "deep.json"
    deep.write_text(json.dumps(request)[:-1] + ', "x": ' + "[" * 100_000 + "]" * 100_000 + "}")
    long = tmp_path / "long.json"
    long.write_text(json.dumps({**request, "notes": ["n" * (17 * MiB)]}))
    # the most memory a request within the limits takes: 16 MiB of ASCII, then one emoji (4 bytes a character)
    widest = tmp_path / "widest.json"
    widest.write_text(
        json.dumps({**request, "calls": [5], "notes": ["x" * (16 * MiB - 2000), "🚀"]}, ensure_ascii=False)
    )
    runs = cli(["submit", str(big), "--json"], ["submit", str(deep), "--json"], ["submit", str(long), "--json"])
    runs += cli(["submit", str(widest), "--json"])
    for run, expect in zip(
        runs,
        ["more than 100,000 values", "nested more than 64", "larger than 16 MiB", "calls[0]: must be a mapping"],
        strict=True,
    ):
        assert_refused(run, expect, as_json=True)


# --- usage and unexpected errors ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "args",
    [["frobnicate", "--json"], ["render", "--json"], ["status", "--json", "--bogus", "x"], ["--json"]],
)
def test_usage_errors_are_json_under_json(args: list[str]) -> None:
    (run,) = cli(args)
    assert run.code == 2, run
    error = json.loads(run.stdout)
    assert error["error"] == "UsageError"
    assert "usage:" in run.stderr
    assert "Traceback" not in run.stderr


def test_usage_error_without_json_leaves_stdout_empty() -> None:
    (run,) = cli(["render", "job.yaml", "--bogus"])
    assert run.code == 2, run
    assert run.stdout == ""
    assert "crosstrain render: unrecognized arguments: --bogus" in run.stderr


def test_interrupted_is_130_with_json(tmp_path: Path) -> None:
    job = tmp_path / "job.yaml"
    job.write_text(BASE)
    (submitted,) = cli(["submit", str(job), "-t", "fake", "--set", f"root={tmp_path}", "--set", "run_seconds=600"])
    assert submitted.code == 0, submitted
    waiting = subprocess.Popen(
        [sys.executable, "-m", "crosstrain.cli", "wait", submitted.stdout.strip(), "--poll", "0.1", "--json"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert waiting.stderr is not None
    first = waiting.stderr.readline()  # the progress's first line: main is running, past the imports
    assert first.startswith(json.loads(submitted.stdout)["identity"] + ": "), first
    time.sleep(0.3)
    waiting.send_signal(signal.SIGINT)
    out, err = waiting.communicate(timeout=30)
    assert waiting.returncode == 130, err
    assert json.loads(out)["error"] == "Interrupted"
    assert "Traceback" not in err
    assert "crosstrain wait: interrupted" in err


def test_the_fake_clouds_store_failing_is_a_submit_failure_exit_3(tmp_path: Path) -> None:
    """The fake cloud's store refusing (its root is a file) fails the submit (exit 3) in one line, not a traceback."""
    job = tmp_path / "job.yaml"
    job.write_text(BASE)
    (tmp_path / "cloud").write_text("not a folder")
    (run,) = cli(["submit", str(job), "-t", "fake", "--set", f"root={tmp_path}/cloud", "--json"])
    assert run.code == 3, run
    assert "Traceback" not in run.stderr
    assert run.stderr.count("\n") == 1
    assert "the fake cloud's store failed: Not a directory" in run.stderr
    assert json.loads(run.stdout)["error"] == "SubmitError"


BROKEN_PLUGIN = """
from crosstrain.registry import register
from crosstrain.cli import main

register("broken", "broken_plugin:Backend")  # a third-party backend whose module fails to import
raise SystemExit(main())
"""


@pytest.mark.parametrize("debug", [False, True])
def test_an_unexpected_error_is_one_line_and_a_hint(tmp_path: Path, debug: bool) -> None:
    """A bug says so in one line with the exception's type, exit 1; CROSSTRAIN_DEBUG=1 adds the traceback."""
    (tmp_path / "broken_plugin.py").write_text("raise RuntimeError('the plugin has a bug')\n")
    job = tmp_path / "job.yaml"
    job.write_text(BASE)
    env = {**os.environ, "PYTHONPATH": f"{tmp_path}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    env.pop("CROSSTRAIN_DEBUG", None)
    if debug:
        env["CROSSTRAIN_DEBUG"] = "1"
    argv = [sys.executable, "-c", BROKEN_PLUGIN, "render", str(job), "-t", "broken", "--json"]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=60, cwd=ROOT, env=env)
    assert done.returncode == 1, done.stderr
    error = json.loads(done.stdout)
    assert error["error"] == "RuntimeError"
    assert error["bug"] is True
    assert "unexpected error (RuntimeError: the plugin has a bug). This is a bug" in done.stderr
    if debug:
        assert "Traceback (most recent call last)" in done.stderr
    else:
        assert "Traceback" not in done.stderr
        assert done.stderr.count("\n") == 1
        assert "CROSSTRAIN_DEBUG=1" in done.stderr
