"""The Python API as a notebook uses it."""

from __future__ import annotations

from pathlib import Path

import pytest

import crosstrain
from crosstrain.errors import SpecError
from tests.conftest import ROOT, printed_by

EXAMPLE = ROOT / "examples" / "ddp-quickstart" / "job.yaml"


def test_render_submit_wait(fake_root: Path) -> None:
    job = crosstrain.load_job(EXAMPLE)
    request = crosstrain.render(job, "fake", run_id="nb-1", run_seconds=0)
    assert request.identity == "ddp-quickstart-nb-1"
    with pytest.raises(SpecError, match=r"use send\(request\)"):
        crosstrain.submit(request)  # type: ignore[arg-type]  # one thing per name
    handle = crosstrain.send(request)
    assert handle.identity == request.identity
    assert handle.wait(poll_interval=0.01).state is crosstrain.JobState.SUCCEEDED
    assert (fake_root / "jobs" / "ddp-quickstart-nb-1.json").exists()


def test_render_takes_dicts_and_paths_alike() -> None:
    data = {"name": "nb", "primary": {"machine": "L4:1"}, "targets": {"fake": {"root": "/tmp/x"}}}
    assert crosstrain.render(data).to_dict() == crosstrain.render(crosstrain.TrainingJob.model_validate(data)).to_dict()
    assert crosstrain.render(EXAMPLE, "fake").job_name == "ddp-quickstart"


def test_settings_are_checked(fake_root: Path) -> None:
    with pytest.raises(SpecError, match=r"targets\.fake\.outcome"):
        crosstrain.render(EXAMPLE, "fake", outcome="maybe")
    with pytest.raises(SpecError, match="sent as it is"):
        crosstrain.send(crosstrain.render(EXAMPLE, "fake"), outcome="failed")


def test_validate_lists_problems_per_target() -> None:
    data = {"name": "nb", "reduction_server": {}, "targets": {"fake": {}}}
    [problem] = crosstrain.validate(data)["fake"]
    assert problem.path == "reduction_server"


def test_notebook_display_escapes_and_summarises() -> None:
    job = crosstrain.load_job(
        {
            "name": "nb",
            "image": "<img>",
            "primary": {"machine": "A100:8"},
            "workers": {"replicas": 1},
            "targets": {"fake": {}},
        }
    )
    html = job._repr_html_()
    assert "&lt;img&gt;" in html
    assert "<img>" not in html
    assert "1 x A100:8" in html
    request = crosstrain.render(job)
    assert request.identity in request._repr_html_()
    assert "PUT file://" in request._repr_html_()


def test_lazy_names() -> None:
    """Every public name resolves, from the module that defines it (a module that moves breaks this, not users)."""
    assert set(crosstrain.__all__) <= set(dir(crosstrain))
    for name in crosstrain.__all__:
        value = getattr(crosstrain, name)
        assert getattr(value, "__module__", crosstrain._LAZY[name]) == crosstrain._LAZY[name], name
    shown = dir(crosstrain)  # after every name was loaded: each once, and nothing but the public ones
    assert sorted(set(shown)) == shown
    assert set(shown) == {*crosstrain.__all__, "__version__"}
    with pytest.raises(AttributeError):
        _ = crosstrain.nope


def _returns_one() -> int:
    return 1


def test_only_a_function_job_has_a_result_and_the_fake_says_where_it_would_be(fake_root: Path) -> None:
    command = crosstrain.submit(EXAMPLE, "fake", run_seconds=0)
    with pytest.raises(SpecError) as refused:
        command.result()
    assert refused.value.problems[0].path == "handle.result_at"
    assert "submit_function" in refused.value.problems[0].fix
    function = crosstrain.submit_function(_returns_one, {"name": "fn", "image": "img:1"}, "fake", run_seconds=0)
    assert function.result_at == "outputs/result.pkl"  # where Azure ML, which the fake plays, keeps it
    with pytest.raises(crosstrain.Unsupported, match=r"outputs/result\.pkl"):
        function.result(timeout=10)


def test_set_scopes_to_other_targets_only_where_a_key_names_one() -> None:
    from crosstrain.api import settings_for

    assert settings_for("fake", {"root": "/r", "fake.root": "/s", "vertex.region": "x"}) == {"root": "/s"}
    with pytest.raises(SpecError, match="unknown target 'vertx'"):
        settings_for("fake", {"vertx.region": "x"})


def test_set_of_the_target_s_own_keys_reads_no_installed_plugins() -> None:
    """Which targets the installed plugins add is read (importlib.metadata) only for a key scoped to another."""
    probe = (
        "import sys\n"
        "from crosstrain.api import settings_for\n"
        "settings_for('local', {'nodes': 2, 'local.nproc_per_node': 1})\n"
        "print('importlib.metadata' in sys.modules)\n"
        "settings_for('local', {'vertex.region': 'x'})\n"
        "print('importlib.metadata' in sys.modules)\n"
    )
    assert printed_by(probe) == ["False", "True"]
