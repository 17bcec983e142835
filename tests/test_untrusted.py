"""Reading within limits: crosstrain's own limits speak first, whichever YAML parser PyYAML brings.

Each test runs with libyaml's parser (where this PyYAML has it) and with PyYAML's own: an install without libyaml
has no `yaml.CSafeLoader`, which is what the `parser` fixture gives. `nox -s yaml` runs these and the hostile-input
suite under each supported PyYAML release, with and without libyaml.
"""

from __future__ import annotations

import pytest
import yaml

from crosstrain import untrusted
from crosstrain.errors import SpecError

BASE = "name: j\ncommand: python train.py\n"


@pytest.fixture(params=["libyaml", "pyyaml"])
def parser(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setattr(untrusted, "_LOADERS", {})
    if request.param == "libyaml":
        if not hasattr(yaml, "CSafeLoader"):
            pytest.skip("this PyYAML was built without libyaml")
    else:
        monkeypatch.delattr(yaml, "CSafeLoader", raising=False)
    return str(request.param)


def refusal(text: str) -> str:
    with pytest.raises(SpecError) as err:
        untrusted.parse_yaml(text, untrusted.JOB, "job.yaml")
    return str(err.value)


@pytest.mark.parametrize("depth", [65, 1_000, 1_001, 100_000])
@pytest.mark.parametrize(("opening", "closing"), [("[", "]"), ("{", "}")])
def test_deep_flow_nesting_is_refused_with_crosstrains_limit(
    parser: str, depth: int, opening: str, closing: str
) -> None:
    """PyYAML 6.0.4's libyaml refuses flow nesting past 1,000 levels before the 65th level is read."""
    message = refusal(BASE + "args: " + opening * depth + closing * depth + "\n")
    assert "nested more than 64 levels deep at line 3, column 70" in message
    assert "check the file's structure" in message


def test_deep_nesting_after_other_lines_points_at_the_65th_level(parser: str) -> None:
    # the mapping and the block list are levels 1 and 2, so the 63rd bracket is the 65th level
    text = BASE + "env: {A: '[[[ not nesting ]'}  # [[[\n" + "args:\n  - " + "[" * 5000 + "]" * 5000 + "\n"
    assert "nested more than 64 levels deep at line 5, column 67" in refusal(text)


def test_a_syntax_error_is_still_the_parsers(parser: str) -> None:
    message = refusal(BASE + "args: " + "[" * 10 + "\n")
    assert "not valid YAML or JSON at line 4, column 1" in message
    assert "fix the syntax" in message


def test_a_document_within_the_limits_loads(parser: str) -> None:
    text = BASE + "args: " + "[" * 63 + "x" + "]" * 63 + "\n"
    data = untrusted.parse_yaml(text, untrusted.JOB, "job.yaml")
    inner = data["args"]
    for _ in range(62):
        (inner,) = inner
    assert inner == ["x"]


def test_a_lone_surrogate_is_refused_by_either_parser(parser: str) -> None:
    """libyaml refuses the escape itself; PyYAML's own parser reads it, and crosstrain refuses the string, which
    could be neither printed nor sent."""
    message = refusal('{"name": "j", "env": {"X": "a\\ud800"}}')
    expected = "invalid Unicode character escape code" if parser == "libyaml" else "lone surrogate"
    assert expected in message
    assert "line 1, column" in message
