"""What a code folder ships is what git lists there: the bundle's files against `git ls-files` itself."""

from __future__ import annotations

import os
import random
import shutil
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

import pytest

from crosstrain import packaging
from crosstrain.uploads import UploadRefused

pytestmark = pytest.mark.skipif(shutil.which("git") is None, reason="needs git")

#: (files under the repository, the code folder in it). A `bytes` value is written as it is.
SCENARIOS: dict[str, tuple[dict[str, str | bytes], str]] = {
    "the repository root's .gitignore, outside the code folder": (
        {".gitignore": ".env\n*.pem\n", "src/.env": "KEY=1", "src/key.pem": "", "src/train.py": ""},
        "src",
    ),
    "a .gitignore between the root and the code folder": (
        {"a/.gitignore": "secret*\n", "a/src/secret.txt": "", "a/src/train.py": "", "secret-top": ""},
        "a/src",
    ),
    "nested .gitignore files, each for its own folder": (
        {
            "src/.gitignore": "*.log\n",
            "src/pkg/.gitignore": "!keep.log\n/only-here.txt\n",
            "src/a.log": "",
            "src/pkg/keep.log": "",
            "src/pkg/b.log": "",
            "src/pkg/only-here.txt": "",
            "src/pkg/deeper/only-here.txt": "",
        },
        "src",
    ),
    "a deeper .gitignore overrides the root's": (
        {".gitignore": "*.txt\n", "src/sub/.gitignore": "!*.txt\n", "src/a.txt": "", "src/sub/b.txt": ""},
        "src",
    ),
    ".git/info/exclude": (
        {".git/info/exclude": "secret.txt\nlocal/\n", "src/secret.txt": "", "src/local/x.py": "", "src/a.py": ""},
        "src",
    ),
    "a .gitignore negation wins over info/exclude": (
        {".git/info/exclude": "*.txt\n", "src/.gitignore": "!keep.txt\n", "src/keep.txt": "", "src/drop.txt": ""},
        "src",
    ),
    "a byte-order mark before the first pattern": (
        {".gitignore": b"\xef\xbb\xbf.env\n*.key\n", "src/.env": "", "src/a.key": "", "src/a.py": ""},
        "src",
    ),
    "CRLF line ends": (
        {".gitignore": b"*.tmp\r\nbuild/\r\n", "src/a.tmp": "", "src/build/x.py": "", "src/a.py": ""},
        "src",
    ),
    "'*' then '!*/' then '!*.py'": (
        {".gitignore": "*\n!*/\n!*.py\n", "src/a/b.py": "", "src/a/b.txt": "", "src/c.py": "", "src/d.txt": ""},
        "src",
    ),
    "directory patterns match folders only": (
        {
            ".gitignore": "build/\nlogs/\n",
            "src/build/x.py": "",
            "src/sub/build/y.py": "",
            "src/build2": "",
            "src/logs": "a file, not a folder",
        },
        "src",
    ),
    "anchored patterns": (
        {
            "src/.gitignore": "/top.txt\ndoc/frotz\n",
            "src/top.txt": "",
            "src/sub/top.txt": "",
            "src/doc/frotz": "",
            "src/a/doc/frotz": "",
        },
        "src",
    ),
    "'**' leading, inner and trailing": (
        {
            "src/.gitignore": "**/cache/\ndocs/**/*.md\na/**/b\nx/**/\nout/**\n",
            "src/cache/c": "",
            "src/deep/er/cache/c": "",
            "src/docs/r.md": "",
            "src/docs/one/two/r.md": "",
            "src/docs/keep.rst": "",
            "src/a/b": "",
            "src/a/1/2/b": "",
            "src/x/f": "",
            "src/x/y/g": "",
            "src/out/o": "",
            "src/outside": "",
        },
        "src",
    ),
    "trailing spaces, one of them escaped": (
        {"src/.gitignore": "foo.txt   \nbar\\ \n", "src/foo.txt": "", "src/bar ": "", "src/bar": ""},
        "src",
    ),
    "escaped '#' and '!', comments and blank lines": (
        {
            "src/.gitignore": "# a comment\n\n\\#hash.txt\n\\!bang.txt\n#not-a-pattern.txt\n",
            "src/#hash.txt": "",
            "src/!bang.txt": "",
            "src/#not-a-pattern.txt": "",
        },
        "src",
    ),
    "a file in a left-out folder cannot come back": (
        {
            "src/.gitignore": "logs/\n!logs/keep.log\n*.log\n!important.log\n",
            "src/logs/keep.log": "",
            "src/a.log": "",
            "src/important.log": "",
        },
        "src",
    ),
    "wildcards and ranges": (
        {
            "src/.gitignore": "file?.txt\n[a-c].dat\n[!x]y.bin\n",
            "src/file1.txt": "",
            "src/file10.txt": "",
            "src/b.dat": "",
            "src/d.dat": "",
            "src/ay.bin": "",
            "src/xy.bin": "",
        },
        "src",
    ),
    "a negated bracket never matches '/'": (
        {"src/.gitignore": "a[!x]b\nd[!x]\n", "src/a/b": "", "src/d/e": "", "src/dz": ""},
        "src",
    ),
    "the code folder is the repository's root": (
        {".gitignore": "*.pyc\n__pycache__/\n", "m.py": "", "m.pyc": "", "__pycache__/m.cpython-311.pyc": ""},
        ".",
    ),
    "'**' right after a pattern's first letters matches folders, as git reads it": (
        {"src/.gitignore": "/a**/b\n/c**\n", "src/a/b": "", "src/ax/y/b": "", "src/a/c": "", "src/cd/e": ""},
        "src",
    ),
    "a bracket that holds a '/'": (
        {"src/.gitignore": "[/*.py/[!a]*\n", "src/b.py": "", "src/a": "", "src/c/d": ""},
        "src",
    ),
    "a symlinked .gitignore is not read": (
        {"src/rules.txt": "*.py\n", "src/a.py": "", "src/b.txt": ""},
        "src",
    ),
}


def _write(root: Path, files: Mapping[str, str | bytes]) -> None:
    for name, content in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(content)


def _git(repo: Path, *args: str) -> bytes:
    """git, with no user or system configuration (no global excludes file)."""
    env = {
        **os.environ,
        "GIT_CONFIG_GLOBAL": os.devnull,
        "GIT_CONFIG_NOSYSTEM": "1",
        "HOME": str(repo),
        "XDG_CONFIG_HOME": str(repo / ".no-config"),
    }
    return subprocess.run(["git", "-C", str(repo), *args], env=env, capture_output=True, check=True).stdout


def _listed_by_git(repo: Path, code: str) -> set[str]:
    out = _git(repo, "ls-files", "--cached", "--others", "--exclude-standard", "-z", "--", code)
    prefix = "" if code == "." else f"{code}/"
    return {os.fsdecode(name).removeprefix(prefix) for name in out.split(b"\0") if name}


def _shipped(folder: Path) -> set[str]:
    return {f.path.removeprefix("crosstrain_code/src/") for f in packaging.bundle(folder).user_files}


@pytest.mark.parametrize("scenario", list(SCENARIOS))
def test_the_bundle_holds_what_git_lists(tmp_path: Path, scenario: str) -> None:
    files, code = SCENARIOS[scenario]
    repo = tmp_path / "repo"
    repo.mkdir()
    _git(repo, "init", "-q")
    _write(repo, files)
    if scenario == "a symlinked .gitignore is not read":
        (repo / "src" / ".gitignore").symlink_to("rules.txt")
    listed = _listed_by_git(repo, code)
    assert listed  # each scenario ships something
    assert _shipped(repo / code) == listed


def test_tracked_files_in_a_worktree_read_the_common_info_exclude(tmp_path: Path) -> None:
    """A linked worktree's `.git` is a file: its repository's info/exclude still applies, as git reads it."""
    repo = tmp_path / "repo"
    repo.mkdir()
    _git(repo, "init", "-q")
    _write(repo, {"src/a.py": "", ".gitignore": "*.log\n"})
    _git(repo, "add", ".")
    _git(repo, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "init")
    _git(repo, "worktree", "add", "-q", str(tmp_path / "wt"))
    _write(tmp_path / "wt", {"src/secret.txt": "", "src/b.log": "", "src/b.py": ""})
    _write(repo, {".git/info/exclude": "secret.txt\n"})
    assert _shipped(tmp_path / "wt" / "src") == _listed_by_git(tmp_path / "wt", "src") == {"a.py", "b.py"}


def test_crosstrainignore_applies_after_git(tmp_path: Path) -> None:
    """It leaves out more than git does, and its `!pattern` brings back what git's rules left out."""
    repo = tmp_path / "repo"
    repo.mkdir()
    _git(repo, "init", "-q")
    _write(
        repo,
        {
            ".gitignore": "*.env\ngenerated/\n",
            "src/.crosstrainignore": "data/\n!generated/\n",
            "src/train.py": "",
            "src/.env": "",
            "src/data/x.csv": "",
            "src/generated/proto.py": "",
        },
    )
    assert _shipped(repo / "src") == {".crosstrainignore", "train.py", "generated/proto.py"}


#: What random patterns are made of: names of the random trees' files, and every kind of wildcard git reads.
_SEGMENTS = (
    "a", "b.py", "deep", "*", "**", "***", "?", "*.py", "a*", "*a*", "[ab]*", "[!a]*", "[^b].py", "[a-c]",
    "[]a]*", "[[:digit:]]*", "[[:alpha:]]", "\\*", "\\[x]", "x-y", ".hidden", "c?", "[z-a]", "[", "[!]a]*",
    "[a-]", "[-a]*", "**a", "a**", "\\!b", "\\#a", "#a", "[[:punct:]]*", "[[:space:]]*", "[[:upper:]]",
    "[[:bogus:]]", "[[:]", "a\\ ", "[\\]]*", "[a\\-c]", "[!/]*", "[/]", "-", "[.]hidden", "a\\/**", "**\\/a",
    "??", "é", "[a-é]*", "?.txt",
)  # fmt: skip
_NAMES = (
    "a", "b.py", "ab.py", "c1", "c12", "deep", "x-y", ".hidden", "[x]", "*", "]a", "1", "z", "a b", "#a", "!b", "a-",
    "-", "A", "a ", "]", "a**", "[", "é", "ü.txt", "aé",
)  # fmt: skip


def _random_pattern(rng: random.Random) -> str:
    body = "/".join(rng.choice(_SEGMENTS) for _ in range(rng.choice((1, 1, 2, 3))))
    return rng.choice(("", "", "!")) + rng.choice(("", "", "/")) + body + rng.choice(("", "", "/"))


def _random_tree(rng: random.Random) -> dict[str, str | bytes]:
    files: dict[str, str | bytes] = {}
    for _ in range(40):
        depth = rng.choice((1, 2, 2, 3, 4))
        files["/".join(rng.choice(_NAMES) for _ in range(depth))] = ""
    names = sorted(files)
    # a name both a file and a folder's: keep the folder
    files = {name: "" for name in names if not any(other.startswith(f"{name}/") for other in names)}
    folder = rng.choice([name.rsplit("/", 1)[0] for name in files if "/" in name] or [""])
    files[".gitignore"] = "".join(f"{_random_pattern(rng)}\n" for _ in range(8))
    if folder:
        files[f"{folder}/.gitignore"] = "".join(f"{_random_pattern(rng)}\n" for _ in range(3))
    return files


@pytest.mark.parametrize("seed", range(60))
def test_random_patterns_leave_out_what_git_leaves_out(tmp_path: Path, seed: int) -> None:
    """Patterns made at random from every wildcard git reads (`**`, brackets, classes, escapes, ranges backwards,
    an unclosed bracket), over a random tree: what ships is what git lists, file for file."""
    rng = random.Random(seed)
    repo = tmp_path / "repo"
    repo.mkdir()
    _git(repo, "init", "-q")
    files = _random_tree(rng)
    _write(repo, files)
    listed = _listed_by_git(repo, ".")
    if not listed:  # everything left out: the folder is refused, as one with no file to ship
        with pytest.raises(UploadRefused, match="holds no file to ship"):
            _shipped(repo)
        return
    assert _shipped(repo) == listed, files


def test_patterns_made_to_backtrack_are_matched_in_bounded_time(tmp_path: Path) -> None:
    """`*a*a*...*c` over a long name and `**/a/**/a/.../c` over a deep path: trying every way to share the name or
    the folders out took minutes (the first with pathspec's expressions too, the second in git itself); each
    place is matched once now."""
    deep = "/".join(["a"] * 60)
    patterns = ["*a" * 20 + "c", "**/a/" * 12 + "c", "/a**/" + "a/**/" * 12 + "c", "!" + "*a" * 20 + "b"]
    files = {".gitignore": "\n".join(patterns) + "\n", "a" * 200: "", f"{deep}/b": "", f"{deep}/c": "", "x": ""}
    _write(tmp_path, files)
    code = "import pathlib, sys; from crosstrain import packaging; packaging.bundle(pathlib.Path(sys.argv[1]))"
    done = subprocess.run([sys.executable, "-c", code, str(tmp_path)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert _shipped(tmp_path) == {".gitignore", "a" * 200, f"{deep}/b", "x"}
