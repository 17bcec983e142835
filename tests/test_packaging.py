"""The code bundle: what is shipped, its digest, its archive, and that it runs where crosstrain is not installed."""

from __future__ import annotations

import ast
import io
import json
import os
import subprocess
import sys
import tarfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from crosstrain import named_files, packaging
from crosstrain.errors import SpecError
from crosstrain.loader import job_from_dict, load_job
from crosstrain.registry import create_backend
from crosstrain.spec import TrainingJob
from crosstrain.uploads import UploadRefused
from tests import fuzzing


def _tree(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


def _members(bundle: packaging.Bundle) -> dict[str, bytes]:
    with tarfile.open(fileobj=io.BytesIO(bundle.archive())) as tar:
        return {m.name: tar.extractfile(m).read() for m in tar.getmembers() if m.isfile()}  # type: ignore[union-attr]


def test_the_archive_holds_the_files_less_the_ignored_ones_and_crosstrains_runtime(tmp_path: Path) -> None:
    root = _tree(
        tmp_path / "src",
        {
            "train.py": "print('hi')\n",
            "pkg/model.py": "X = 1\n",
            "data/big.bin": "x" * 100,
            "notes.pyc": "",
            ".gitignore": "data/\n*.pyc\n",
            ".git/HEAD": "ref\n",
        },
    )
    made = packaging.bundle(root)
    assert made.ignore_sources == (".gitignore",)
    shipped = sorted(f.path.removeprefix("crosstrain_code/src/") for f in made.user_files)
    assert shipped == [".gitignore", "pkg/model.py", "train.py"]
    members = _members(made)
    top = "crosstrain_code-1.0/crosstrain_code"
    assert members[f"{top}/src/train.py"] == b"print('hi')\n"
    assert f"{top}/crosstrain/launch.py" in members
    assert f"{top}/crosstrain/runtime/dist.py" in members
    assert f"{top}/__main__.py" in members
    assert "crosstrain_code-1.0/setup.py" in members
    assert not any("data/" in name or name.endswith(".pyc") or "/.git/" in name for name in members)


def test_every_node_side_module_travels() -> None:
    """The shipped files are the node side's entry points and what they import: a module added under
    crosstrain/runtime/ (one per platform) travels without a list to keep, and no client-side module does."""
    source = Path(packaging.__file__).parent
    runtime = {str(path.relative_to(source)) for path in (source / "runtime").rglob("*.py")}
    shipped = set(packaging.NODE_SIDE_FILES)
    assert runtime <= shipped
    assert {"launch.py", "databricks_task.py", "function.py", "errors.py", "secrets.py"} <= shipped
    assert not shipped & {"api.py", "spec.py", "packaging.py", "settings.py", "registry.py", "records.py"}


def _imports_by_syntax_tree(tree: ast.AST) -> Iterator[str]:
    """The crosstrain names a module imports outside `if TYPE_CHECKING:`, as Python's own parser reads them."""
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, ast.If) and isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING":
            continue
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names if alias.name.split(".")[0] == "crosstrain")
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").split(".")[0] == "crosstrain":
            yield str(node.module)
            yield from (f"{node.module}.{alias.name}" for alias in node.names)
        yield from _imports_by_syntax_tree(node)


#: Where the node side starts: what a node runs (the launcher, the Databricks task, a shipped function's runner)
#: and what a job imports (`crosstrain.runtime`). `runtime/secrets.py` runs as `python -m crosstrain.runtime.secrets`.
NODE_ENTRY_POINTS = ("launch.py", "databricks_task.py", "function.py", "runtime/__init__.py", "runtime/secrets.py")


def _module_path(package: Path, module: str) -> str | None:
    """`crosstrain.a.b` -> `a/b.py` or `a/b/__init__.py`; None for a name that is no module (an imported name)."""
    parts = module.split(".")[1:]
    candidates = ("/".join(parts) + ".py", "/".join([*parts, "__init__.py"])) if parts else ()
    return next((name for name in candidates if (package / name).is_file()), None)


def _node_side_by_imports() -> tuple[str, ...]:
    """The entry points, every crosstrain module they import (at any depth, at import time or in a function, not
    under TYPE_CHECKING) and each package's `__init__.py` on the way, as Python's parser reads them."""
    package = Path(packaging.__file__).parent
    found = {"__init__.py"}
    todo = list(NODE_ENTRY_POINTS)
    while todo:
        name = todo.pop()
        if name in found:
            continue
        found.add(name)
        parts = name.split("/")[:-1]
        todo += ["/".join([*parts[:depth], "__init__.py"]) for depth in range(1, len(parts) + 1)]
        tree = ast.parse((package / name).read_text(encoding="utf-8"))
        todo += [path for module in _imports_by_syntax_tree(tree) if (path := _module_path(package, module))]
    return tuple(sorted(found, key=lambda name: (name.count("/"), name)))


def test_the_node_side_files_are_the_entry_points_and_what_they_import() -> None:
    """The list that ships (kept as a list: walking the imports cost every cold render 7 ms) is what the entry
    points import: an import added on the node side, or one removed, fails here with the list to write."""
    wanted = _node_side_by_imports()
    listed = "".join(f'    "{name}",\n' for name in wanted)
    assert wanted == packaging.NODE_SIDE_FILES, f"packaging.NODE_SIDE_FILES should read:\n(\n{listed})"


def test_crosstrainignore_adds_to_gitignore_and_can_bring_back_what_it_leaves_out(tmp_path: Path) -> None:
    files = {"a.py": "", "b.py": "", "c.py": "", ".gitignore": "a.py\nc.py\n", ".crosstrainignore": "b.py\n!c.py\n"}
    made = packaging.bundle(_tree(tmp_path, files))
    assert made.ignore_sources == (".crosstrainignore", ".gitignore")
    assert sorted(f.path.rsplit("/", 1)[-1] for f in made.user_files) == [".crosstrainignore", ".gitignore", "c.py"]


def test_same_files_give_the_same_digest_and_bytes_whatever_mtimes_order_or_umask(tmp_path: Path) -> None:
    files = {f"m{i}.py": f"V = {i}\n" for i in range(20)}
    first = packaging.bundle(_tree(tmp_path / "a", files))
    old = os.umask(0o077)
    try:
        second_root = _tree(tmp_path / "b", dict(reversed(list(files.items()))))
    finally:
        os.umask(old)
    for path in second_root.iterdir():
        os.utime(path, (1, 1))
    second = packaging.bundle(second_root)
    assert first.digest == second.digest
    assert first.archive() == second.archive()
    (second_root / "m3.py").write_text("V = 33\n")
    assert packaging.bundle(second_root).digest != first.digest


def test_a_link_out_of_the_folder_is_refused_naming_it(tmp_path: Path) -> None:
    secret = tmp_path / "credentials"
    secret.write_text("key")
    root = _tree(tmp_path / "src", {"train.py": ""})
    (root / "creds").symlink_to(secret)
    with pytest.raises(UploadRefused) as refused:
        packaging.bundle(root)
    assert "creds" in refused.value.problem.path
    assert "leaves the code folder" in refused.value.problem.message


def test_a_link_inside_the_folder_is_shipped_as_the_file(tmp_path: Path) -> None:
    root = _tree(tmp_path / "src", {"real.py": "A = 1\n"})
    (root / "alias.py").symlink_to(root / "real.py")
    members = _members(packaging.bundle(root))
    assert members["crosstrain_code-1.0/crosstrain_code/src/alias.py"] == b"A = 1\n"


def test_limits_refuse_before_reading_with_the_limit(tmp_path: Path) -> None:
    root = _tree(tmp_path / "src", {f"f{i}": "x" for i in range(5)})
    with pytest.raises(UploadRefused, match="more than 3 files"):
        packaging.bundle(root, limits=packaging.Limits(max_files=3))
    with pytest.raises(UploadRefused, match="platform X takes 4"):
        packaging.bundle(root, limits=packaging.Limits(max_bytes=4, description="platform X takes 4"))


def test_a_missing_or_empty_folder_is_refused(tmp_path: Path) -> None:
    with pytest.raises(UploadRefused, match="does not exist"):
        packaging.bundle(tmp_path / "nope")
    (tmp_path / "empty").mkdir()
    with pytest.raises(UploadRefused, match="no file to ship"):
        packaging.bundle(tmp_path / "empty")


def test_a_changed_folder_is_refused_at_send(tmp_path: Path) -> None:
    root = _tree(tmp_path / "src", {"train.py": "1\n"})
    ref = packaging.bundle(root).ref
    (root / "train.py").write_text("2\n")
    with pytest.raises(UploadRefused, match="changed since the request was rendered"):
        packaging.check_unchanged(ref)


def test_code_and_requirements_resolve_against_the_job_file_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _tree(tmp_path / "proj", {"src/train.py": "", "reqs.txt": "# pinned\nnumpy==2.0  # arrays\n\ntqdm\n"})
    (tmp_path / "proj" / "job.yaml").write_text(
        "name: j\ncode: src\nrequirements: reqs.txt\ncommand: python train.py\n"
    )
    monkeypatch.chdir(tmp_path)
    made = packaging.for_job(load_job(tmp_path / "proj" / "job.yaml"))
    assert made is not None
    assert made.folder == tmp_path / "proj" / "src"
    assert made.requirements == ("numpy==2.0", "tqdm")


def _job(spec: dict[str, Any], folder: Path) -> TrainingJob:
    return job_from_dict(spec).located(folder)


#: Lines no target may install as a package: pip options (Vertex AI would put them in install_requires, and pip
#: fail on the node) and a URL with a token (printed in renders, shipped in the code).
NOT_PACKAGES = [
    ("--extra-index-url https://pypi.example/simple", "pip options"),
    ("-r more.txt", "pip options"),
    ("git+https://oauth2:glpat-S3CRET@gitlab.com/o/r.git", "carries credentials"),
]


@pytest.mark.parametrize("case", list(fuzzing.CASES))
@pytest.mark.parametrize(("line", "said"), NOT_PACKAGES, ids=["index", "file", "token"])
def test_a_requirement_is_held_to_one_rule_in_a_list_and_in_a_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, case: str, line: str, said: str
) -> None:
    folder = fuzzing.prepare(tmp_path)
    monkeypatch.chdir(folder)
    (folder / "reqs.txt").write_text(f"numpy==2.0\n# pinned\n{line}\n")
    target, settings = fuzzing.CASES[case]
    job = {"name": "j", "image": "registry.example/t:1", "code": ".", "command": "python train.py"}
    backend = create_backend(target, environ={})
    for requirements, path in ((["numpy==2.0", line], "requirements[1]"), ("reqs.txt", "requirements[reqs.txt:3]")):
        with pytest.raises(SpecError) as refused:
            backend.render(_job({**job, "requirements": requirements}, folder), settings(folder))
        found = [p for p in refused.value.problems if p.path.startswith("requirements")]
        assert [p.path for p in found] == [path]
        assert said in found[0].message
        assert found[0].fix
        assert "S3CRET" not in str(refused.value)


@pytest.mark.parametrize("case", list(fuzzing.CASES))
@pytest.mark.parametrize(
    ("pools", "path"),
    [
        ({"command": "python missing.py"}, "command"),
        ({"command": "python -u missing.py --epochs 2"}, "command"),
        ({"command": ["bash", "missing.sh"]}, "command"),
        ({"command": "./missing.sh"}, "command"),
        ({"command": "python train.py", "primary": {"command": "python3 missing.py"}}, "primary.command"),
        (
            {"command": "python train.py", "launch": {"framework": "deepspeed", "deepspeed_config": "missing.json"}},
            "launch.deepspeed_config",
        ),
    ],
    ids=["python", "options", "bash", "path", "primary", "deepspeed-config"],
)
def test_a_command_file_the_shipped_folder_lacks_is_refused_on_every_target(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, case: str, pools: dict[str, Any], path: str
) -> None:
    """With `code:` the command runs in the shipped folder everywhere; only Databricks once said the file was not
    there, and every other target rendered a job whose nodes all fail to find it."""
    folder = fuzzing.prepare(tmp_path)
    monkeypatch.chdir(folder)
    target, settings = fuzzing.CASES[case]
    backend = create_backend(target, environ={})
    job = {"name": "j", "image": "registry.example/t:1", "code": ".", "primary": {"machine": "A100:8"}}
    with pytest.raises(SpecError) as refused:
        backend.render(_job({**job, **pools}, folder), settings(folder))
    found = [p for p in refused.value.problems if "is not in the code folder" in p.message]
    assert [p.path for p in found] == [path], refused.value.problems
    assert "missing." in found[0].message
    assert found[0].fix
    for shipped in ("python train.py", "python -m train", "python /opt/app/train.py", "python dbfs:/code/t.py"):
        try:
            backend.render(_job({**job, "command": shipped}, folder), settings(folder))
            others: list[str] = []
        except SpecError as other:  # refused for what this target lacks, never for the file
            others = [p.message for p in other.problems]
        assert not [m for m in others if "not in the code folder" in m], shipped


def test_the_archive_pip_installs_and_the_bootstrap_runs_the_command_where_crosstrain_is_not_installed(
    tmp_path: Path, stock_python: Path
) -> None:
    root = _tree(tmp_path / "src", {"tool/main.py": "import crosstrain.runtime, os\nprint('cwd', os.getcwd())\n"})
    made = packaging.bundle(root, ["example-requirement==1"])
    archive = tmp_path / packaging.ARCHIVE_NAME
    archive.write_bytes(made.archive())
    target = tmp_path / "site"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "-q",
            "--no-build-isolation",
            "--no-deps",
            "--target",
            str(target),
            str(archive),
        ],
        check=True,
    )
    run = subprocess.run(
        [str(stock_python), "-m", "crosstrain_code", "--", "python", "tool/main.py"],
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(target)},
        capture_output=True,
        text=True,
        check=False,
    )
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip() == f"cwd {target / 'crosstrain_code' / 'src'}"
    requires = (next(target.glob("crosstrain_code-*.dist-info")) / "METADATA").read_text()
    assert "Requires-Dist: example-requirement==1" in requires


def test_source_is_deflated_and_incompressible_data_is_stored(tmp_path: Path) -> None:
    source = _tree(tmp_path / "source", {f"m{i}.py": "def f(x):\n    return x * 2\n" * 200 for i in range(20)})
    assert packaging.bundle(source).compression() == 1
    data = _tree(tmp_path / "data", {"train.py": "print(1)\n"})
    (data / "weights.bin").write_bytes(os.urandom(1 << 20))
    stored = packaging.bundle(data)
    assert stored.compression() == 0
    assert len(stored.archive()) > 1 << 20  # stored, not deflated: no time spent on what does not shrink


def _cli(*args: str, cwd: Path, prefix: tuple[str, ...] = ()) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*prefix, sys.executable, "-m", "crosstrain.cli", *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        timeout=120,
        check=False,
    )


def _job_file(folder: Path, code: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "job.yaml"
    path.write_text(f"name: j\nimage: img:1\ncode: {code}\ncommand: python train.py\n")
    return path


@pytest.mark.parametrize("how", ["..", "absolute", "symlink"])
def test_a_code_folder_outside_the_job_files_folder_is_refused(tmp_path: Path, how: str) -> None:
    """As every other upload: `code: ../home/.aws` shipped the credentials file."""
    aws = _tree(tmp_path / "home" / ".aws", {"credentials": "[default]\naws_secret_access_key = k\n"})
    project = tmp_path / "project"
    if how == "symlink":
        project.mkdir()
        (project / "src").symlink_to(aws)
    code = {"..": "../home/.aws", "absolute": str(aws), "symlink": "./src"}[how]
    job = load_job(_job_file(project, code))
    with pytest.raises(UploadRefused) as refused:
        packaging.for_job(job)
    problem = refused.value.problem
    assert problem.path == "code"
    assert f"outside the job file's folder {project}" in problem.message
    assert ("through a symlink" in problem.message) == (how == "symlink")
    assert f"code: {{path: {code}, outside_job_folder: true}}" in problem.fix
    done = _cli("render", str(project / "job.yaml"), "-t", "fake", cwd=tmp_path)
    assert done.returncode == 2
    assert "outside the job file's folder" in done.stderr
    assert "Traceback" not in done.stderr


def test_a_folder_named_as_outside_the_job_folder_is_shipped(tmp_path: Path) -> None:
    shared = _tree(tmp_path / "shared", {"train.py": "print(1)\n"})
    path = _job_file(tmp_path / "jobs", "{path: ../shared, outside_job_folder: true}")
    made = packaging.for_job(load_job(path))
    assert made is not None
    assert made.folder == shared
    assert [f.path for f in made.user_files] == ["crosstrain_code/src/train.py"]
    inside = _tree(tmp_path / "jobs" / "src", {"a.py": ""})
    assert packaging.for_job(load_job(_job_file(tmp_path / "jobs", "./src"))).folder == inside  # type: ignore[union-attr]


def test_a_file_rewritten_in_place_after_it_was_hashed_is_refused_not_shipped(tmp_path: Path) -> None:
    """Same size, same mtime: what a stat cannot tell apart, the digest of the bytes written can."""
    root = _tree(tmp_path / "src", {"train.py": "A" * 1000})
    made = packaging.bundle(root)
    path = root / "train.py"
    before = path.stat()
    path.write_text("B" * 1000)
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))
    with pytest.raises(UploadRefused, match="changed while the code was packaged"):
        made.archive()


def test_every_archive_holds_the_bytes_its_digest_names_while_a_file_is_rewritten(tmp_path: Path) -> None:
    """A writer flips a file between two same-size contents, restoring its mtime, while bundles are made: each
    archive is refused or holds exactly the bytes its digest was computed from."""
    import hashlib
    import threading
    import time

    size = 1 << 16
    root = _tree(tmp_path / "src", {"train.py": "print(1)\n"})
    path = root / "data.bin"
    path.write_bytes(b"a" * size)
    mtime = path.stat().st_mtime_ns
    stop = threading.Event()

    def rewrite() -> None:
        with open(path, "r+b", buffering=0) as handle:
            for turn in range(10**9):
                if stop.is_set():
                    return
                handle.seek(0)
                handle.write((b"a", b"b")[turn % 2] * size)
                os.utime(path, ns=(mtime, mtime))

    writer = threading.Thread(target=rewrite)
    writer.start()
    shipped = refused = 0
    deadline = time.monotonic() + 3
    try:
        while time.monotonic() < deadline and (shipped < 20 or refused < 20):
            try:
                made = packaging.bundle(root)
                members = _members(made)
            except UploadRefused:
                refused += 1
                continue
            (file,) = (f for f in made.user_files if f.path.endswith("data.bin"))
            data = members[f"crosstrain_code-1.0/{file.path}"]
            assert hashlib.sha256(data).hexdigest() == file.sha256, "an archive disagrees with its digest"
            shipped += 1
    finally:
        stop.set()
        writer.join()
    assert shipped
    assert refused


def test_many_tiny_files_are_deflated_for_their_headers_and_padding(tmp_path: Path) -> None:
    """Each member costs a 512-byte header and pads to 512 bytes: 3,000 files of 400 random bytes are 3 MB
    stored, half that deflated, though their contents alone do not compress."""
    root = tmp_path / "src"
    root.mkdir()
    for i in range(3000):
        (root / f"f{i:04d}.bin").write_bytes(os.urandom(400))
    made = packaging.bundle(root)
    assert made.compression() == 1
    assert len(made.archive()) < 3000 * 1024 // 2


def test_a_file_name_that_is_not_utf8_is_refused_naming_it(tmp_path: Path) -> None:
    root = _tree(tmp_path / "src", {"train.py": ""})
    with open(os.path.join(os.fsencode(root), b"caf\xe9.py"), "wb"):
        pass
    with pytest.raises(UploadRefused) as refused:
        packaging.bundle(root)
    problem = refused.value.problem
    assert problem.path == "code: caf\\xe9.py"
    assert "is not UTF-8" in problem.message
    assert "rename it" in problem.fix
    assert ".crosstrainignore" in problem.fix
    (root / ".crosstrainignore").write_bytes(b"caf\xe9.py\n")
    assert sorted(f.path for f in packaging.bundle(root).user_files) == [
        "crosstrain_code/src/.crosstrainignore",
        "crosstrain_code/src/train.py",
    ]


def test_an_unreadable_file_is_refused_naming_it_with_exit_2(tmp_path: Path) -> None:
    root = _tree(tmp_path / "project" / "src", {"train.py": "", "secret.key": "k"})
    (root / "secret.key").chmod(0)
    prefix: tuple[str, ...] = ()
    if os.geteuid() == 0:  # root reads any file: run without the capabilities that let it
        if not Path("/usr/bin/setpriv").exists():
            pytest.skip("as root, needs setpriv to drop the capability to read unreadable files")
        prefix = ("setpriv", "--bounding-set=-dac_override,-dac_read_search")
    done = _cli("render", str(_job_file(tmp_path / "project", "./src")), "-t", "fake", cwd=tmp_path, prefix=prefix)
    assert done.returncode == 2, done.stderr
    assert f"code: secret.key: cannot read {root / 'secret.key'}: Permission denied" in done.stderr
    assert "make it readable" in done.stderr
    assert "Traceback" not in done.stderr


def test_a_code_path_too_long_is_refused_with_exit_2(tmp_path: Path) -> None:
    done = _cli("render", str(_job_file(tmp_path, "./" + "x" * 300)), "-t", "fake", cwd=tmp_path)
    assert done.returncode == 2, done.stderr
    assert "File name too long" in done.stderr
    assert "use a shorter path" in done.stderr


def test_a_full_disk_names_where_the_bundle_was_written_and_what_to_do(tmp_path: Path) -> None:
    import errno
    import tempfile

    from crosstrain.errors import SubmitError

    made = packaging.bundle(_tree(tmp_path / "src", {"train.py": ""}))

    class Full(io.RawIOBase):
        """A temporary file (no name) on a full disk."""

        def writable(self) -> bool:
            return True

        def write(self, data: Any) -> int:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    with pytest.raises(SubmitError) as full:
        made.write_archive(io.BufferedWriter(Full()))
    assert f"to a temporary file in {tempfile.gettempdir()}: No space left on device" in str(full.value)
    assert "point TMPDIR at a folder on a disk with room" in str(full.value)
    if Path("/dev/full").exists():
        with open("/dev/full", "wb", buffering=0) as out, pytest.raises(SubmitError, match="/dev/full: No space"):
            made.write_archive(out)


def test_the_job_file_is_left_out_of_the_folder_it_lies_in_and_the_request_says_so(tmp_path: Path) -> None:
    """Its content is in the request already; shipped, an edit of any target's settings would move the
    code's digest. Left out by what it is: a link to it does not ship it either."""
    folder = _tree(tmp_path / "project", {"train.py": "print(1)\n"})
    path = _job_file(folder, ".")
    (folder / "same.yaml").symlink_to("job.yaml")
    made = packaging.for_job(load_job(path))
    assert made is not None
    assert [f.path for f in made.user_files] == ["crosstrain_code/src/train.py"]
    assert made.job_file == "job.yaml"
    assert "less the job file job.yaml" in made.describe()
    elsewhere = packaging.for_job(
        load_job(_job_file(tmp_path / "jobs", "{path: ../project, outside_job_folder: true}"))
    )
    assert elsewhere is not None
    assert sorted(f.path for f in elsewhere.user_files) == [
        f"crosstrain_code/src/{n}" for n in ("job.yaml", "same.yaml", "train.py")
    ]
    assert not elsewhere.job_file  # another job's file is code like any other


def test_a_request_rendered_from_a_job_file_in_its_code_is_sent_from_another_process(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`render --json` then `submit REQUEST.json`: the sending process packages the folder again, less the job
    file, and finds the digest the request names."""
    folder = _tree(tmp_path / "project", {"train.py": "print(1)\n"})
    job = _job_file(folder, ".")
    monkeypatch.setenv("CROSSTRAIN_FAKE_ROOT", str(tmp_path / "cloud"))
    rendered = _cli("render", str(job), "-t", "fake", "--json", cwd=tmp_path)
    assert rendered.returncode == 0, rendered.stderr
    assert json.loads(rendered.stdout)["code"]["job_file"] == "job.yaml"
    (tmp_path / "request.json").write_text(rendered.stdout)
    sent = _cli("submit", "request.json", cwd=tmp_path)
    assert sent.returncode == 0, sent.stderr


def test_a_deepspeed_config_in_a_code_folder_the_job_does_not_ship_is_refused() -> None:
    def job(config: str) -> dict[str, Any]:
        launch = {"framework": "deepspeed", "deepspeed_config": config}
        return {"name": "j", "command": "python /app/train.py", "launch": launch}

    [problem] = named_files.problems(job_from_dict(job("ds_config.json")))
    assert problem.path == "launch.deepspeed_config"
    assert "ships none" in problem.message
    assert named_files.problems(job_from_dict(job("/app/ds_config.json"))) == []


def _aged(root: Path) -> Path:
    """Every file and folder under `root` (and it) last changed an hour ago: past the racy window."""
    old = os.stat(root).st_mtime - 3600
    for path in [*root.rglob("*"), root]:
        os.utime(path, (old, old), follow_symlinks=False)
    return root


def test_an_unchanged_folder_is_replayed_and_any_change_to_what_its_listing_read_is_seen(tmp_path: Path) -> None:
    """A folder listed before is not listed again while nothing its listing read moved; a file added, a file
    rewritten, a folder's ignore file edited or a `.git` appearing above it each make it listed again."""
    folder = _aged(_tree(tmp_path / "project", {"a.py": "A = 1\n", "pkg/b.py": "B = 1\n", ".gitignore": "*.log\n"}))
    first = packaging.bundle(folder)
    assert packaging.bundle(folder) is first  # replayed: the same bundle, nothing listed or read
    (folder / "pkg" / "c.py").write_text("C = 1\n")
    added = packaging.bundle(folder)
    assert {f.path.rsplit("/", 1)[-1] for f in added.user_files} == {".gitignore", "a.py", "b.py", "c.py"}
    _aged(folder)
    listed = packaging.bundle(folder)
    (folder / "a.py").write_text("A = 2\n")
    assert packaging.bundle(folder).digest != listed.digest
    _aged(folder)
    (folder / "x.log").write_text("kept out\n")
    _aged(folder)
    without_log = packaging.bundle(folder)
    (folder / ".gitignore").write_text("*.txt\n")
    assert "x.log" in {f.path.rsplit("/", 1)[-1] for f in packaging.bundle(folder).user_files}
    assert "x.log" not in {f.path.rsplit("/", 1)[-1] for f in without_log.user_files}
    _aged(folder)
    before = packaging.bundle(folder)
    (tmp_path / ".git").mkdir()
    (tmp_path / ".gitignore").write_text("a.py\n")  # the repository's rules now apply to the folder
    assert "a.py" not in {f.path.rsplit("/", 1)[-1] for f in packaging.bundle(folder).user_files}
    assert "a.py" in {f.path.rsplit("/", 1)[-1] for f in before.user_files}


def test_a_folder_changed_just_before_its_listing_is_listed_again(tmp_path: Path) -> None:
    """Within the racy window a stat may not show a change made in the same clock tick, so a freshly written
    folder is never replayed: a file added right after is always seen."""
    folder = _tree(tmp_path / "fresh", {"a.py": "A = 1\n"})
    first = packaging.bundle(folder)
    (folder / "b.py").write_text("B = 1\n")
    second = packaging.bundle(folder)
    assert second is not first
    assert {f.path.rsplit("/", 1)[-1] for f in second.user_files} == {"a.py", "b.py"}
