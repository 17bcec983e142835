"""What the docs say is what crosstrain renders.

* Every ```yaml block in the docs says what it is, in an HTML comment on the line before it (unseen when the page
  is shown), and is checked as that:

  - `<!-- checked: job TARGET... [refuses=TARGET,...:WORDS]... [files=PATH,...] -->`: a complete job file.
    Written with `files` beside it, it renders on each TARGET, and is refused on each `refuses` target with a
    reason holding WORDS.
  - `<!-- checked: part [TARGET...] -->`: part of a job file. Over a minimal job (`PART_BASE`, its script
    beside it), it loads, and renders on each TARGET.
  - `<!-- checked: excerpt PATH -->`: what the example at PATH holds (every key it shows, with that value).
  - `<!-- checked: yaml -->`: YAML for reading only (alternatives side by side): it parses.

  Each target gets the settings it needs to render where the block gives none (`TARGET_SETTINGS`).
* Every ```toml block is marked `<!-- checked: config -->` and is a config file crosstrain reads
  (`crosstrain.userconfig`): its shape, and every key and value against its target's settings, each profile too.
* Every command line the docs and the examples give for an example (`crosstrain render|run|submit|validate
  examples/...`) renders (or validates) as written, from the repository's root: `run` and `submit` render
  what they would start or send.
* The statements in `CLAIMS`, each quoted from its page, hold for the render they describe.
"""

from __future__ import annotations

import json
import os
import re
import shlex
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from crosstrain import cli
from crosstrain.errors import CrosstrainError
from crosstrain.loader import load_job
from crosstrain.records import Request
from crosstrain.registry import create_backend
from tests.conftest import ROOT

PAGES = [*sorted((ROOT / "docs").glob("*.md")), ROOT / "README.md"]
EXAMPLE = ROOT / "examples" / "ddp-quickstart" / "job.yaml"

#: What each target needs to render where a block names none of its settings.
TARGET_SETTINGS: dict[str, dict[str, Any]] = {
    "vertex": {"project": "my-project", "region": "us-central1", "staging_bucket": "gs://my-bucket/staging"},
    "aiplatform": {"project": "my-project", "region": "us-central1", "staging_bucket": "gs://my-bucket/staging"},
    "azureml": {
        "subscription_id": "00000000-0000-0000-0000-000000000000",
        "resource_group": "my-rg",
        "workspace": "my-ws",
    },
    "databricks": {"host": "https://dbc-1234abcd-5678.cloud.databricks.com"},
    "fake": {"root": "cloud"},
    "local": {},
}
#: The job a `part` block is laid over.
PART_BASE: dict[str, Any] = {
    "name": "doc-part",
    "image": "registry.example/train:1.0",
    "command": ["python", "train.py"],
    "primary": {"machine": "V100:4"},
    "scheduling": {"timeout": "2h"},
}


@dataclass(frozen=True)
class Block:
    page: Path
    line: int
    mark: list[str]  # the marker's words: the kind, then its options
    text: str

    @property
    def id(self) -> str:
        return f"{self.page.relative_to(ROOT)}:{self.line}"


def _blocks() -> Iterator[Block]:
    for page in PAGES:
        text = page.read_text()
        for fence in re.finditer(r"^[ \t]*```ya?ml[ \t]*\n(.*?)^[ \t]*```", text, re.M | re.S):
            before = text[: fence.start()].rstrip("\n").rsplit("\n", 1)[-1]
            marked = re.fullmatch(r"<!-- checked: (.*) -->", before.strip())
            line = text[: fence.start()].count("\n") + 1
            yield Block(page, line, shlex.split(marked.group(1)) if marked else [], fence.group(1))


BLOCKS = list(_blocks())


def _with_settings(data: dict[str, Any], targets: list[str], folder: Path) -> dict[str, Any]:
    """`data` with each target's `TARGET_SETTINGS` under the block's own, paths in them made to land in `folder`."""
    section = dict(data.get("targets") or {})
    for target in targets:
        defaults = dict(TARGET_SETTINGS[target])
        if target == "fake":
            defaults["root"] = str(folder / "cloud")
        section[target] = {**defaults, **(section.get(target) or {})}
    return {**data, "targets": section}


def _render(path: Path, target: str) -> Request:
    return create_backend(target, environ={}).render(load_job(path))


def _targets(block: Block) -> tuple[list[str], dict[str, str], list[str]]:
    """The marker's targets that render, those that refuse (with the words of the reason), and its files."""
    renders, refuses, files = [], {}, []
    for word in block.mark[1:]:
        key, _, value = word.partition("=")
        if key == "refuses":
            targets, _, words = value.partition(":")
            refuses.update(dict.fromkeys(targets.split(","), words))
        elif key == "files":
            files = value.split(",")
        else:
            renders.append(word)
    return renders, refuses, files


def _contains(shown: Any, full: Any, where: str = "") -> None:
    if isinstance(shown, dict) and isinstance(full, dict):
        for key, value in shown.items():
            assert key in full, f"{where}{key} is not in the example"
            _contains(value, full[key], f"{where}{key}.")
    else:
        assert shown == full, f"{where.rstrip('.')}: the page shows {shown!r}, the example holds {full!r}"


@pytest.mark.parametrize("block", BLOCKS, ids=lambda b: b.id)
def test_every_yaml_block_holds_what_its_marker_says(block: Block, tmp_path: Path) -> None:
    kind = block.mark[0] if block.mark else ""
    assert kind in ("job", "part", "excerpt", "yaml"), (
        f"{block.id}: mark the block with <!-- checked: job|part|excerpt|yaml ... --> on the line before it "
        "(see tests/test_docs.py)"
    )
    data = yaml.safe_load(block.text)
    if kind == "yaml":
        return
    if kind == "excerpt":
        example = ROOT / block.mark[1]
        _contains(data, yaml.safe_load(example.read_text()))
        return
    renders, refuses, files = _targets(block)
    if kind == "part":
        data = {**PART_BASE, **data}
        files = [*files, "train.py"]
    job_file = tmp_path / "job.yaml"
    job_file.write_text(json.dumps(_with_settings(data, [*renders, *refuses], tmp_path)))
    for name in files:
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text("")
    load_job(job_file)
    for target in renders:
        _render(job_file, target)
    for target, words in refuses.items():
        with pytest.raises(CrosstrainError) as refused:
            _render(job_file, target)
        assert words in str(refused.value), f"{block.id}: {target} refuses it, not for the reason the page says"


# -- config files -------------------------------------------------------------------------------------------
def _toml_blocks() -> Iterator[Block]:
    for page in PAGES:
        text = page.read_text()
        for fence in re.finditer(r"^[ \t]*```toml[ \t]*\n(.*?)^[ \t]*```", text, re.M | re.S):
            before = text[: fence.start()].rstrip("\n").rsplit("\n", 1)[-1]
            marked = re.fullmatch(r"<!-- checked: (.*) -->", before.strip())
            line = text[: fence.start()].count("\n") + 1
            yield Block(page, line, shlex.split(marked.group(1)) if marked else [], fence.group(1))


TOML_BLOCKS = list(_toml_blocks())


@pytest.mark.parametrize("block", TOML_BLOCKS, ids=lambda b: b.id)
def test_every_toml_block_is_a_config_file_crosstrain_reads(block: Block, tmp_path: Path) -> None:
    from crosstrain import userconfig
    from crosstrain.registry import get_backend_class
    from crosstrain.settings import config_problems

    assert block.mark == ["config"], f"{block.id}: mark the block with <!-- checked: config --> on the line before it"
    path = tmp_path / "config.toml"
    path.write_text(block.text)
    environ = {"CROSSTRAIN_CONFIG": str(path)}
    config = userconfig.load(environ)
    assert list(config.all_layers()), f"{block.id}: sets nothing"
    for layer in config.all_layers():
        assert config_problems(get_backend_class(layer.target).settings_model, [layer]) == [], block.id
    for profile in config.profiles:
        userconfig.load(environ, profile)


def test_the_config_page_shows_a_config_file() -> None:
    assert [b.page.name for b in TOML_BLOCKS].count("config.md") == 1


# -- command lines ------------------------------------------------------------------------------------------
#: What ends a command line written in a page or a comment: a code span, a comment, a redirection, a pipe, a
#: second command, a remark in parentheses.
_END = re.compile(r"`|#|>|\||&&|;| \(")
#: Options of `run` and `submit` that have nothing to render: waiting and following.
_NOT_RENDERED = {"--wait", "--follow"}


def _command_lines() -> dict[str, list[str]]:
    """Each distinct `crosstrain VERB examples/...` line of the pages and the examples' comments -> the argv
    that checks it (`render` for `run` and `submit`)."""
    found: dict[str, list[str]] = {}
    sources = [*PAGES, *sorted((ROOT / "examples").rglob("*.yaml"))]
    for source in sources:
        for match in re.finditer(r"crosstrain (render|run|submit|validate) (examples/[^\n]*)", source.read_text()):
            verb, rest = match.group(1), _END.split(match.group(2))[0]
            words = [w for w in shlex.split(rest) if w not in _NOT_RENDERED]
            argv = ["validate" if verb == "validate" else "render", *words]
            found.setdefault(f"{verb} {' '.join(words)}", argv)
    return found


COMMAND_LINES = _command_lines()


@pytest.mark.parametrize("line", sorted(COMMAND_LINES))
def test_every_command_line_given_for_an_example_works_as_written(
    line: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    for name in list(os.environ):  # this machine's configuration is not what the pages assume
        if name.startswith(("GOOGLE_", "CLOUDSDK_", "AZURE", "DATABRICKS_", "CROSSTRAIN_")):
            monkeypatch.delenv(name)
    monkeypatch.chdir(ROOT)
    code = cli.main(COMMAND_LINES[line])
    assert code == 0, f"crosstrain {line}: exit {code}\n{capsys.readouterr().err}"


# -- statements ---------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Claim:
    page: str
    quotes: tuple[str, ...]  # what the page says, as it says it (line breaks aside)
    check: Callable[[Path], None]


CLAIMS: dict[str, Claim] = {}


def claim(page: str, *quotes: str) -> Callable[[Callable[[Path], None]], Callable[[Path], None]]:
    def register(check: Callable[[Path], None]) -> Callable[[Path], None]:
        CLAIMS[f"{check.__name__} ({page})"] = Claim(page, quotes, check)
        return check

    return register


def _words(text: str) -> str:
    return " ".join(text.split())


def _quickstart(folder: Path, target: str, **changes: Any) -> Request:
    """The quickstart, changed, rendered on `target` (written beside a copy of its code)."""
    data = {**yaml.safe_load(EXAMPLE.read_text()), **changes}
    (folder / "train.py").write_text((EXAMPLE.parent / "train.py").read_text())
    path = folder / "job.yaml"
    path.write_text(json.dumps({k: v for k, v in data.items() if v is not None}))
    return _render(path, target)


def _pool_commands(request: Request) -> list[list[str]]:
    """Each training pool's argv on Vertex AI or AI Platform, wherever the body keeps it."""
    body = request.create.body
    if request.target == "vertex":
        pools = body["jobSpec"]["workerPoolSpecs"]
        return [p.get("pythonPackageSpec", {}).get("args") or p["containerSpec"].get("command", []) for p in pools]
    spec = body["trainingInput"]
    return [spec.get("args") or spec["masterConfig"].get("containerCommand", [])]


LAUNCHED = ["python", "-m", "crosstrain.launch", "--nproc-per-node", "1", "--", "python", "train.py"]


def _launched(command: list[str]) -> bool:
    return any(command[i : i + len(LAUNCHED)] == LAUNCHED for i in range(len(command)))


@claim(
    "docs/vertex.md",
    "or** where the job has more than one node and ships its `code` (or a function), even with one process per node",
    "the quickstart (two `T4:1` nodes, `code: .`) runs `python -m crosstrain.launch --nproc-per-node 1 -- python "
    "train.py ...`, and the render's note says so",
)
@claim("docs/runtime.md", "or (`auto`) on a multi-node job that ships its `code` (crosstrain travels with it)")
def vertex_runs_a_multi_node_job_that_ships_code_under_the_launcher(folder: Path) -> None:
    request = _quickstart(folder, "vertex")
    commands = _pool_commands(request)
    assert len(commands) == 2
    assert all(_launched(command) for command in commands), commands
    assert any("runs under crosstrain's launcher, which starts 1 per node" in note for note in request.notes)


@claim(
    "docs/aiplatform.md",
    "or where the job has more than one node and ships its `code` (crosstrain travels with it), even with one "
    "process per node",
)
def aiplatform_runs_a_multi_node_job_that_ships_code_under_the_launcher(folder: Path) -> None:
    assert all(_launched(command) for command in _pool_commands(_quickstart(folder, "aiplatform")))


@claim("docs/vertex.md", "A one-node job with one process runs the command as is.")
def vertex_runs_a_one_node_job_as_is(folder: Path) -> None:
    commands = _pool_commands(_quickstart(folder, "vertex", workers={"replicas": 0}))
    assert commands
    assert not any("crosstrain.launch" in command for command in commands), commands


@claim(
    "docs/vertex.md",
    "a multi-node job with one process per node that ships no code runs the command as is",
)
def vertex_runs_a_multi_node_job_without_code_as_is(folder: Path) -> None:
    request = _quickstart(folder, "vertex", code=None, environment=None, image="registry.example/train:1.0")
    commands = _pool_commands(request)
    assert len(commands) == 2
    assert not any("crosstrain.launch" in command for command in commands), commands


@claim("docs/spec.md", "**The job file itself never ships** where it lies in the folder", "less the job file job.yaml")
def the_job_file_is_not_shipped(folder: Path) -> None:
    request = _quickstart(folder, "vertex")
    assert request.code is not None
    assert (request.code.files, request.code.job_file) == (1, "job.yaml")
    assert any("less the job file job.yaml" in note for note in request.notes)


def _shell_demo(folder: Path, target: str, train: str | None = None) -> Request:
    """docs/shell.md's example job, with another input where the page says so."""
    (block,) = [b for b in BLOCKS if b.page.name == "shell.md" and b.mark[:1] == ["job"]]
    data = yaml.safe_load(block.text)
    if train is not None:
        data["inputs"] = {"train": train}
    path = folder / "job.yaml"
    path.write_text(json.dumps(_with_settings(data, [target], folder)))
    return _render(path, target)


def _shown(request: Request, text: str) -> None:
    """`text` is in the create body as the page shows it: JSON as json.dumps writes it, or one of its strings."""
    body = json.dumps(request.create.body, ensure_ascii=False)
    assert text in body or json.dumps(text, ensure_ascii=False)[1:-1] in body, (text, body)


@claim(
    "docs/shell.md",
    '* Vertex AI: `"command": ["bash", "-c", "cd src && python train.py --rank \\"$RANK\\" --data '
    '/gcs/my-bucket/cifar10"]`',
)
def shell_line_on_vertex(folder: Path) -> None:
    text = '"command": ["bash", "-c", "cd src && python train.py --rank \\"$RANK\\" --data /gcs/my-bucket/cifar10"]'
    _shown(_shell_demo(folder, "vertex"), text)


@claim(
    "docs/shell.md",
    '* AI Platform: `"containerCommand": ["bash", "-c", "cd src && python train.py --rank \\"$RANK\\" --data '
    'gs://my-bucket/cifar10"]`',
)
def shell_line_on_aiplatform(folder: Path) -> None:
    text = '"containerCommand": ["bash", "-c", "cd src && python train.py --rank \\"$RANK\\" --data gs://my-bucket/cifar10"]'
    _shown(_shell_demo(folder, "aiplatform"), text)


@claim(
    "docs/shell.md",
    '* Azure ML (with `inputs: {train: azureml:cifar10:3}`): `"command": "cd src && python train.py --rank '
    '\\"$RANK\\" --data ${{inputs.train}}"`',
)
def shell_line_on_azureml(folder: Path) -> None:
    text = '"command": "cd src && python train.py --rank \\"$RANK\\" --data ${{inputs.train}}"'
    _shown(_shell_demo(folder, "azureml", "azureml:cifar10:3"), text)


@claim(
    "docs/shell.md",
    "* Databricks (with `inputs: {train: /Volumes/main/ml/cifar10}`): `--shell=cd src && python train.py --rank "
    '"$RANK" --data /Volumes/main/ml/cifar10`',
)
@claim("docs/databricks.md", "A shell line runs with `shell: true`, on every rank")
def shell_line_on_databricks(folder: Path) -> None:
    text = '--shell=cd src && python train.py --rank "$RANK" --data /Volumes/main/ml/cifar10'
    _shown(_shell_demo(folder, "databricks", "/Volumes/main/ml/cifar10"), text)


@claim(
    "docs/shell.md",
    '* local (with `inputs: {train: ./data}`): `python -m torch.distributed.run ... --no_python bash -c "cd src && '
    'python train.py --rank \\"$RANK\\" --data /abs/path/data"`',
)
def shell_line_on_local(folder: Path) -> None:
    (folder / "data").mkdir()
    body = _shell_demo(folder, "local", "./data").create.body
    found: list[list[str]] = []

    def argvs(value: Any) -> None:
        if isinstance(value, list) and value[:3] == ["python", "-m", "torch.distributed.run"]:
            found.append(value)
        for item in value.values() if isinstance(value, dict) else value if isinstance(value, list) else ():
            argvs(item)

    argvs(body)
    line = f'cd src && python train.py --rank "$RANK" --data {folder / "data"}'
    assert found
    assert all(argv[-4:] == ["--no_python", "bash", "-c", line] for argv in found), found


@claim(
    "docs/config.md",
    "| 1 | the setting's built-in default |",
    "| 2 | the config file's `[targets.TARGET]` |",
    "| 3 | the profile in use, `[profiles.NAME.targets.TARGET]` |",
    "| 4 | the platform's environment variables |",
    "| 5 | the job file's `targets.TARGET` section |",
    "| 6 | `--set key=value` (keyword arguments in Python) |",
)
def each_source_of_a_setting_wins_over_the_ones_above_it(folder: Path) -> None:
    """The fake target's `root` (variable CROSSTRAIN_FAKE_ROOT) from each source in turn, each over the last."""
    config = folder / "config.toml"
    config.write_text('[targets.fake]\nroot = "2"\n[profiles.dev.targets.fake]\nroot = "3"\n')
    job = {"name": "j", "command": "python train.py", "targets": {"fake": {}}}
    base = {"CROSSTRAIN_CONFIG": str(config)}
    sources: list[tuple[dict[str, Any], str]] = [
        ({"environ": {}}, "~/.cache/crosstrain/fake-cloud"),
        ({"environ": base}, "2"),
        ({"environ": base, "config_profile": "dev"}, "3"),
        ({"environ": {**base, "CROSSTRAIN_FAKE_ROOT": "4"}, "config_profile": "dev"}, "4"),
    ]
    for kwargs, root in sources:
        assert _render_fake(job, **kwargs).settings["root"] == root
    job["targets"] = {"fake": {"root": "5"}}
    environ = {**base, "CROSSTRAIN_FAKE_ROOT": "4"}
    assert _render_fake(job, environ=environ, config_profile="dev").settings["root"] == "5"
    assert _render_fake(job, environ=environ, config_profile="dev", root="6").settings["root"] == "6"


def _render_fake(job: dict[str, Any], **kwargs: Any) -> Request:
    from crosstrain import api

    return api.render(job, "fake", **kwargs)


# Every claim above is registered by now.
@pytest.mark.parametrize("name", sorted(CLAIMS))
def test_what_the_pages_say_holds(name: str, tmp_path: Path) -> None:
    said = CLAIMS[name]
    page = _words((ROOT / said.page).read_text())
    for quote in said.quotes:
        assert _words(quote) in page, f"{said.page} no longer says {quote!r}: update {name} to what it says now"
    said.check(tmp_path)


def test_a_block_without_a_marker_is_found(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The check cannot pass by not seeing a block: an unmarked one fails it."""
    page = tmp_path / "page.md"
    page.write_text("# A page\n\n```yaml\nname: x\n```\n\n<!-- checked: yaml -->\n```yml\na: 1\n```\n")
    monkeypatch.setattr(f"{__name__}.PAGES", [page])
    monkeypatch.setattr(f"{__name__}.ROOT", tmp_path)
    assert [(b.line, b.mark) for b in _blocks()] == [(3, []), (8, ["yaml"])]
    with pytest.raises(AssertionError, match="mark the block"):
        test_every_yaml_block_holds_what_its_marker_says(next(_blocks()), tmp_path)
