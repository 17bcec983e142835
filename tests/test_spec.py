"""The TrainingJob spec: shorthands, defaults, and refusals that name the field and the fix."""

from __future__ import annotations

from typing import Any

import pytest

from crosstrain.errors import SpecError
from crosstrain.loader import job_from_dict
from crosstrain.spec import TrainingJob
from crosstrain.spec_fields import Machine


def problems(data: dict[str, Any]) -> list[tuple[str, str, str]]:
    with pytest.raises(SpecError) as err:
        job_from_dict(data)
    return [(p.path, p.message, p.fix) for p in err.value.problems]


def test_portable_machine_shorthand() -> None:
    job = job_from_dict({"name": "j", "primary": {"machine": "a100:8"}})
    assert job.primary.machine == Machine(accelerator={"type": "A100", "count": 8})
    assert job_from_dict({"name": "j", "primary": {"machine": "L4"}}).primary.machine == Machine(
        accelerator={"type": "L4", "count": 1}
    )
    assert job_from_dict({"name": "j", "primary": {"machine": "n1-standard-8"}}).primary.machine == Machine(
        type="n1-standard-8"
    )


def test_platform_accelerator_names_become_portable_kinds() -> None:
    job = job_from_dict({"name": "j", "primary": {"machine": {"accelerator": {"type": "NVIDIA_TESLA_V100"}}}})
    assert job.primary.machine == Machine(accelerator={"type": "V100", "count": 1})


def test_command_string_is_split_like_a_shell() -> None:
    job = job_from_dict({"name": "j", "command": "python -m train --msg 'hello world'"})
    assert job.command == ["python", "-m", "train", "--msg", "hello world"]


@pytest.mark.parametrize(
    ("text", "seconds"),
    [(90, 90), ("90", 90), ("15m", 900), ("24h", 86400), ("1h30m", 5400), ("7d", 604800), ("2.5h", 9000)],
)
def test_durations(text: object, seconds: int) -> None:
    assert job_from_dict({"name": "j", "scheduling": {"timeout": text}}).scheduling.timeout == seconds


def test_workers_inherit_the_primary() -> None:
    job = job_from_dict(
        {
            "name": "j",
            "image": "img:1",
            "command": ["python", "t.py"],
            "env": {"A": "1"},
            "primary": {"machine": "A100:8", "image": "img:2", "env": {"B": "2"}},
            "workers": {"replicas": 3, "env": {"C": "3"}},
        }
    )
    primary, workers = job.pools()
    assert (workers.image, workers.machine, workers.command) == ("img:2", primary.machine, ["python", "t.py"])
    assert workers.env == {"A": "1", "B": "2", "C": "3"}
    assert workers.machine_path == "primary.machine"
    assert job.nodes == 4
    assert job.processes_per_node(8) == 8
    assert job_from_dict({"name": "j", "launch": {"processes_per_node": 2}}).processes_per_node(8) == 2
    assert job_from_dict({"name": "j"}).processes_per_node(0) == 1


def test_spec_is_immutable() -> None:
    job = job_from_dict({"name": "j"})
    with pytest.raises(ValueError, match="frozen"):
        job.name = "k"  # type: ignore[misc]


# The acceptance's bad specs: each exits 2 naming the field path and the fix.
def test_unknown_field_suggests_the_right_one() -> None:
    assert problems({"name": "j", "workers": {"replica": 2}}) == [
        ("workers.replica", "unknown field 'replica'", "did you mean 'replicas'?")
    ]


def test_negative_replicas() -> None:
    [(path, message, fix)] = problems({"name": "j", "workers": {"replicas": -2}})
    assert path == "workers.replicas"
    assert "greater than or equal to 0" in message
    assert fix == "use a value of at least 0"


def test_accelerator_count_without_type() -> None:
    [(path, message, fix)] = problems({"name": "j", "primary": {"machine": {"accelerator": {"count": 8}}}})
    assert path == "primary.machine"
    assert "accelerator.type is missing" in message
    assert "A100:8" in fix


def test_gpu_the_catalog_lacks() -> None:
    [(path, message, fix)] = problems({"name": "j", "workers": {"replicas": 1, "machine": "A10O:8"}})
    assert path == "workers.machine.accelerator.type"
    assert message == "unknown GPU 'A10O'"
    assert "A100" in fix
    assert "H200" in fix


def test_primary_has_one_replica() -> None:
    [(path, _, fix)] = problems({"name": "j", "primary": {"replicas": 4}})
    assert path == "primary.replicas"
    assert fix.startswith("set workers.replicas: 3")


@pytest.mark.parametrize(
    ("data", "path"),
    [
        ({"name": "my job"}, "name"),
        ({"name": "j", "run_id": "Not OK"}, "run_id"),
        ({"name": "j", "env": {"1BAD": "x"}}, "env"),
        ({"name": "j", "scheduling": {"timeout": "soon"}}, "scheduling.timeout"),
        ({"name": "j", "scheduling": {"timeout": 0}}, "scheduling.timeout"),
        ({"name": "j", "launch": {"mode": "per-gpu"}}, "launch.mode"),
        ({"name": "j", "reduction_server": {"replicas": 0}}, "reduction_server.replicas"),
        ({"name": "j", "primary": {"machine": "A100:x"}}, "primary.machine"),
        (
            {"name": "j", "primary": {"machine": {"accelerator": {"type": "T4", "count": 0}}}},
            "primary.machine.accelerator.count",
        ),
        ({"name": "j", "labels": {"": "x"}}, "labels"),
        ({}, "name"),
    ],
)
def test_each_bad_field_is_named(data: dict[str, Any], path: str) -> None:
    found = problems(data)
    assert [p[0] for p in found] == [path]
    assert all(fix for _, _, fix in found)


def test_all_problems_are_reported_at_once() -> None:
    found = problems({"name": "j", "workers": {"replicas": -1}, "scheduling": {"spot": "maybe"}, "nope": 1})
    assert sorted(p[0] for p in found) == ["nope", "scheduling.spot", "workers.replicas"]


def test_model_dump_round_trips() -> None:
    job = job_from_dict(
        {
            "name": "j",
            "primary": {"machine": "H100:8"},
            "workers": {"replicas": 1},
            "scheduling": {"timeout": "1h"},
            "command": "python x.py",
        }
    )
    assert TrainingJob.model_validate(job.model_dump()) == job


@pytest.mark.parametrize("command", ["python 'unclosed", "python train.py \\"])
def test_a_command_string_a_shell_cannot_split_is_refused_with_the_fix(command: str) -> None:
    """Fuzzed: the unclosed quote came back as pydantic's 'Value error, No closing quotation' with no fix."""
    for where in ({"command": command}, {"primary": {"command": command}}):
        with pytest.raises(SpecError) as err:
            job_from_dict({"name": "j", **where})
        [problem] = err.value.problems
        assert problem.path == ("command" if "command" in where else "primary.command")
        assert "cannot be split like a shell would" in problem.message
        assert problem.fix == "close the quote, or write the command as a list, e.g. [python, train.py]"


@pytest.mark.parametrize(
    ("value", "message", "fix"),
    [
        # Fuzzed: 400 digits of days overflowed a float and raised OverflowError out of the loader.
        ("9" * 400 + "d", "is longer than a job may run", "use at most 31622400 (366d)"),
        ("9" * 5000, "is longer than a job may run", "use at most 31622400 (366d)"),
        ("367d", "is longer than a job may run", "use at most 31622400 (366d)"),
        # Fuzzed: 10**400 was a valid timeout, rendered as a duration no platform takes.
        (10**400, "less than or equal to 31622400", "use a value of at most 31622400"),
        # true was taken as one second
        (True, "True is not a duration", 'write seconds (3600) or a duration such as "90m", "24h", "1h30m"'),
        # Fuzzed: numbers pydantic refuses came with no fix of their own.
        (1.5, "fractional part", "use a whole number"),
        (1e308, "exceeded maximum size", "use a smaller whole number"),
        (float("nan"), "finite number", "use a finite number"),
    ],
)
def test_a_duration_out_of_any_range_is_refused_with_the_fix(value: object, message: str, fix: str) -> None:
    with pytest.raises(SpecError) as err:
        job_from_dict({"name": "j", "scheduling": {"timeout": value}})
    [problem] = err.value.problems
    assert (problem.path, problem.fix) == ("scheduling.timeout", fix)
    assert message in problem.message
    assert job_from_dict({"name": "j", "scheduling": {"max_wait": "366d"}}).scheduling.max_wait == 366 * 86400


@pytest.mark.parametrize("machine", ["A100:²", "A100:١٢", "A100:" + "9" * 5000, "A100:x"])
def test_a_shorthand_count_that_is_not_ascii_digits_is_refused_with_the_fix(machine: str) -> None:
    """Fuzzed: `A100:²` passed str.isdigit() and failed in int(), with pydantic's wording and no fix."""
    with pytest.raises(SpecError) as err:
        job_from_dict({"name": "j", "primary": {"machine": machine}})
    [problem] = err.value.problems
    assert (problem.path, problem.fix) == ("primary.machine", "write the portable form as e.g. A100:8")
    assert problem.message.endswith("is not GPU:COUNT")
    assert len(problem.message) < 80


# -- DeepSpeed's arguments ------------------------------------------------------------------------------------
DEEPSPEED = {"framework": "deepspeed", "deepspeed_config": "ds_config.json"}


def test_deepspeed_arguments_follow_every_training_ranks_own() -> None:
    job = job_from_dict(
        {
            "name": "j",
            "command": "python train.py --lr 1",
            "workers": {"replicas": 1, "args": ["--worker"]},
            "evaluators": {"replicas": 1},
            "launch": DEEPSPEED,
        }
    )
    given = ["--deepspeed", "--deepspeed_config", "ds_config.json"]
    args = {pool.role: pool.args for pool in job.pools()}
    assert args == {"primary": given, "workers": ["--worker", *given], "evaluators": []}  # evaluators train nothing
    without = job_from_dict({"name": "j", "command": "python train.py", "launch": {"framework": "deepspeed"}})
    assert without.pools()[0].args == ["--deepspeed"]  # DeepSpeed falls back to its defaults


def test_deepspeed_arguments_end_a_shell_line() -> None:
    job = job_from_dict({"name": "j", "shell": True, "command": "cd src && python train.py", "launch": DEEPSPEED})
    assert job.pools()[0].shell_line == "cd src && python train.py --deepspeed --deepspeed_config ds_config.json"


@pytest.mark.parametrize(
    ("data", "path"),
    [
        ({"command": "python train.py --deepspeed"}, "command[2]"),
        ({"command": "python train.py", "args": ["--deepspeed_config=ds.json"]}, "args[0]"),
        ({"shell": True, "command": "python train.py --deepspeed_config ds.json"}, "command[0]"),
        ({"command": "python train.py", "workers": {"replicas": 1, "args": ["--deepspeed"]}}, "workers.args[0]"),
    ],
)
def test_deepspeed_arguments_are_given_once(data: dict[str, Any], path: str) -> None:
    found = problems({"name": "j", **data, "launch": DEEPSPEED})
    assert [(p, m) for p, m, _ in found] == [(path, found[0][1])]
    assert "is what launch.framework: deepspeed gives every rank" in found[0][1]
    assert "launch.deepspeed_config" in found[0][2]


def test_a_deepspeed_config_needs_a_deepspeed_job() -> None:
    [(path, message, fix)] = problems({"name": "j", "launch": {"deepspeed_config": "ds.json"}})
    assert path == "launch.deepspeed_config"
    assert "launch.framework is pytorch" in message
    assert "launch.framework: deepspeed" in fix
    [(path, message, _)] = problems({"name": "j", "launch": {"framework": "deepspeed", "deepspeed_config": "--x"}})
    assert (path, message) == ("launch.deepspeed_config", "'--x' is not a file name")
