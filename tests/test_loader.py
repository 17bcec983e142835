"""Loading job files: YAML, JSON, stdin, and the errors for files that are not jobs."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

from crosstrain.errors import SpecError
from crosstrain.loader import job_from_dict, load_job, read_document


def test_yaml_and_json_files_load_the_same(tmp_path: Path) -> None:
    data = {"name": "j", "primary": {"machine": "T4:2"}, "workers": {"replicas": 1}}
    (tmp_path / "job.json").write_text(json.dumps(data))
    (tmp_path / "job.yaml").write_text("name: j\nprimary: {machine: 'T4:2'}\nworkers:\n  replicas: 1\n")
    assert load_job(tmp_path / "job.json") == load_job(tmp_path / "job.yaml") == load_job(data)


def test_stdin() -> None:
    data, name = read_document("-", stdin=io.StringIO("name: from-stdin\n"))
    assert (data, name) == ({"name": "from-stdin"}, "<stdin>")


def test_syntax_error_names_line_and_column(tmp_path: Path) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text("name: j\nworkers: {replicas: 2\n")
    with pytest.raises(SpecError, match=r"line 3, column 1") as err:
        load_job(path)
    assert err.value.source == str(path)


@pytest.mark.parametrize(("text", "what"), [("", "empty"), ("- a\n- b\n", "list"), ("42", "int")])
def test_a_job_file_holds_a_mapping(tmp_path: Path, text: str, what: str) -> None:
    path = tmp_path / "job.yaml"
    path.write_text(text)
    with pytest.raises(SpecError, match=f"not {what}"):
        load_job(path)


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(SpecError, match="no such file"):
        load_job(tmp_path / "nope.yaml")


def test_error_message_lists_source_and_each_problem(tmp_path: Path) -> None:
    path = tmp_path / "job.yaml"
    path.write_text("name: j\nworkers: {replicas: -1}\nprimry: {}\n")
    with pytest.raises(SpecError) as err:
        load_job(path)
    text = str(err.value)
    assert text.startswith(f"invalid job spec ({path}): 2 problems")
    assert "  - primry: unknown field 'primry'\n      fix: did you mean 'primary'?" in text
    assert err.value.problems[0].path in ("workers.replicas", "primry")


def test_every_example_is_a_valid_job() -> None:
    from tests.conftest import EXAMPLES

    for example in EXAMPLES:
        assert load_job(example).name


@pytest.mark.parametrize(
    ("spec", "path"),
    [
        ({"name": "j", "": {}}, '""'),  # fuzzed: an empty unknown key gave a problem with no path at all
        ({"name": "j", "primary": {"": 1}}, 'primary.""'),
        ({"name": "j", "[": None}, "["),  # fuzzed: a key holding '[' was taken for a pydantic tag and dropped
        ({"name": "j", "workers": {"a[0]": 1}}, "workers.a[0]"),
    ],
)
def test_an_unknown_key_always_has_a_path(spec: dict[str, object], path: str) -> None:
    with pytest.raises(SpecError) as err:
        job_from_dict(spec)
    assert [p.path for p in err.value.problems] == [path]
    assert err.value.problems[0].message.startswith("unknown field")
    assert err.value.problems[0].fix.startswith("remove it")


def test_the_python_api_reads_within_the_same_limits(tmp_path: Path) -> None:
    """`load_job` (notebooks, scripts) refuses what the CLI refuses, in the same bounded way."""
    levels = ["a0: &a0 [lol, lol, lol, lol, lol, lol, lol, lol, lol]"]
    levels += [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 9)}]" for i in range(1, 9)]
    path = tmp_path / "bomb.yaml"
    path.write_text("name: j\ntargets:\n  other:\n" + "".join(f"    {line}\n" for line in levels))
    with pytest.raises(SpecError, match="more than 20,000 values"):
        load_job(path)
    with pytest.raises(SpecError, match="a NUL byte at line 1, column 8"):
        read_document("-", stdin=io.StringIO("name: j\0\n"))
    with pytest.raises(SpecError, match=r"the tag !!binary at line 1, column 22"):
        read_document("-", stdin=io.StringIO("targets: {other: {x: !!binary aGk=}}\n"))
