"""Fuzzed job specs and what every target makes of them, for tests/test_fuzz.py and benchmarks/fuzz.py.

`specs()` draws job dicts: well-formed ones (every field of `TrainingJob`, machines and GPUs from the catalog
in every pairing, the platforms' own machine types on the wrong platform, realistic images, commands,
durations, labels, identities and per-target settings) and malformed ones (a well-formed job with values
replaced by junk of any type, keys deleted, unknown keys added). `outcome()` runs one through one case (a
target with valid settings) the way `crosstrain render` does and sorts the result:

* accepted: the render returned and passes the platform's own check (tests/backends/validators.py);
* refused: a `SpecError` (or `Unsupported`) whose every problem names a field path and a fix;
* vague: a refusal with a problem that lacks a path or a fix (or gives only the loader's generic pointer);
* invalid: the render returned a request its platform would not take;
* crashed: any other exception, in loading, rendering or formatting.
"""

from __future__ import annotations

import dataclasses
import json
import re
import time
import traceback
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Literal

from hypothesis import strategies as st

from crosstrain import catalog
from crosstrain.errors import SpecError
from crosstrain.loader import job_from_dict
from crosstrain.registry import create_backend

Kind = Literal["accepted", "refused", "vague", "invalid", "crashed"]
KINDS: tuple[Kind, ...] = ("accepted", "refused", "vague", "invalid", "crashed")

_AZURE_WORKSPACE = {
    "subscription_id": "00000000-0000-0000-0000-000000000000",
    "resource_group": "fuzz-rg",
    "workspace": "fuzz-ws",
}

#: case -> (target, its settings given the run's folder). Valid settings: only the spec is fuzzed here.
CASES: dict[str, tuple[str, Callable[[Path], dict[str, Any]]]] = {
    "vertex": ("vertex", lambda _: {"project": "fuzz-project", "region": "us-central1"}),
    "aiplatform": ("aiplatform", lambda _: {"project": "fuzz-project", "region": "us-central1"}),
    "azureml": ("azureml", lambda _: {**_AZURE_WORKSPACE, "compute": "gpu-cluster"}),
    "azureml-serverless": ("azureml", lambda _: dict(_AZURE_WORKSPACE)),
    # an environment built from `prepare`'s docker-context/: with an image or environment drawn, refused
    "azureml-build": (
        "azureml",
        lambda _: {**_AZURE_WORKSPACE, "compute": "gpu-cluster", "build": {"path": "docker-context"}},
    ),
    "databricks-aws": ("databricks", lambda _: {"host": "https://dbc-1234abcd-5678.cloud.databricks.com"}),
    "databricks-azure": ("databricks", lambda _: {"host": "https://adb-1234567890123456.7.azuredatabricks.net"}),
    "databricks-gcp": ("databricks", lambda _: {"host": "https://1234567890123456.7.gcp.databricks.com"}),
    "databricks-air": ("databricks-air", lambda _: {"host": "https://dbc-1234abcd-5678.cloud.databricks.com"}),
    "fake": ("fake", lambda folder: {"root": str(folder / "cloud")}),
    "local": ("local", lambda folder: {"workdir": str(folder)}),
    "local-vertex": ("local", lambda folder: {"workdir": str(folder), "emulate": "vertex"}),
    "local-azureml": ("local", lambda folder: {"workdir": str(folder), "emulate": "azureml"}),
    "local-databricks": ("local", lambda folder: {"workdir": str(folder), "emulate": "databricks"}),
    "local-databricks-air": ("local", lambda folder: {"workdir": str(folder), "emulate": "databricks-air"}),
}


def prepare(folder: Path) -> Path:
    """The folder a fuzz run works in (its current directory): a `train.py` that a Databricks render uploads, the
    Docker build context of the `azureml-build` case, and the `./data` folder a local input names (Azure ML
    uploads it, the local target reads it in place)."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "train.py").write_text("print('training')\n")
    (folder / "data").mkdir(exist_ok=True)
    (folder / "data" / "part-0.csv").write_text("x,y\n1,2\n")
    (folder / "docker-context").mkdir(exist_ok=True)
    (folder / "docker-context" / "Dockerfile").write_text("FROM python:3.11-slim\n")
    return folder


#: The loader's fallback for a pydantic error it has no fix of its own for: a pointer, not a fix.
GENERIC_FIX = "see `crosstrain schema` for the expected form"


# -- what happens to one spec ------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class Outcome:
    kind: Kind
    detail: str = ""
    #: How long crosstrain took to load, render and format the spec (the platform check not included).
    seconds: float = 0.0

    def report(self, case: str, spec: Any) -> str:
        text = json.dumps(spec, default=repr, ensure_ascii=True)
        return f"{case}: {self.kind}: {self.detail}\nspec: {text[:4000]}"


def outcome(case: str, spec: Mapping[str, Any], folder: Path, base: Path | None = None) -> Outcome:
    """Load, render and format `spec` for `case` as the CLI would (from the job file's folder `base`, else
    the current one), and check what comes out."""
    from tests.backends import validators

    target, settings = CASES[case]
    began = time.perf_counter()
    try:
        job = job_from_dict(spec).located(base)
        backend = create_backend(target, environ={})
        request = backend.render(job, settings(folder))
        for fmt in backend.formats:
            backend.format(request, fmt)
    except SpecError as refusal:
        took = time.perf_counter() - began
        vague = [p for p in refusal.problems if not (p.path and p.fix) or p.fix == GENERIC_FIX]
        if not refusal.problems or vague:
            problems = [p.to_dict() for p in vague] or "no problems"
            return Outcome("vague", f"{type(refusal).__name__} {problems}", took)
        return Outcome("refused", str(refusal), took)
    except Exception:
        return Outcome("crashed", traceback.format_exc(limit=-6), time.perf_counter() - began)
    took = time.perf_counter() - began
    try:
        found = validators.violations(request)
    except Exception:
        detail = "the platform check itself failed on this request:\n" + traceback.format_exc()
        return Outcome("invalid", detail, took)
    return Outcome("invalid", "\n".join(found), took) if found else Outcome("accepted", "", took)


def warm_up(folder: Path) -> None:
    """Import what the first render and check of each case would (cloud SDKs take seconds), so that timings
    measure crosstrain."""
    from crosstrain.testing.conformance import BASE_JOB

    for case in CASES:
        for machine in ("A100:8", "T4:1", "V100:4"):
            outcome(case, {**BASE_JOB, "command": "python train.py", "primary": {"machine": machine}}, folder)


# -- strategies --------------------------------------------------------------------------------------------
def _gpu_names() -> list[str]:
    names = [name for kind in catalog.GPU_KINDS for name in (kind.name, *kind.aliases)]
    return [*names, "a100", "nvidia_tesla_t4", " h100 ", "K80", "MI300X", "TPU_V3", "A100-40G"]


def _machine_types() -> list[str]:
    known: set[str] = set()
    for offers in catalog.OFFERS.values():
        for offer in offers.values():
            known.update(t for types in offer.machines.values() for t in types)
            known.update(offer.family_counts.values())
    cpu = [
        "n1-standard-4",
        "n1-standard-8",
        "n1-highcpu-16",
        "n1-highmem-96",
        "n2-standard-32",
        "e2-standard-4",
        "c2-standard-60",
        "a2-highgpu-3g",
        "a3-edgegpu-8g",
        "g2-standard-2",
        "complex_model_m",
        "cloud_tpu",
        "Standard_D4s_v3",
        "Standard_NC6",
        "Standard_ND96asr_v5",
        "i3.xlarge",
        "m5.large",
        "p4d.12xlarge",
        "g5.xlarge ",
    ]
    return sorted(known) + cpu


GPU_NAMES = _gpu_names()
MACHINE_TYPES = _machine_types()
IMAGES = [
    "us-docker.pkg.dev/fuzz/train/trainer:1.4",
    "gcr.io/fuzz/trainer:2",
    "registry.example/train:1.0",
    "pytorch/pytorch:2.3.0-cuda12.1-cudnn8-runtime",
    "mcr.microsoft.com/azureml/openmpi4.1.0-cuda11.8-cudnn8-ubuntu22.04:latest",
]
COMMANDS: list[str | list[str]] = [
    "python train.py",
    "python train.py",
    "python -m train",
    "python -m train",
    "python3 -m trainer.main --steps 100",
    ["python", "-m", "trainer.main"],
    ["torchrun", "--nproc-per-node=4", "train.py"],
    "python /Workspace/Shared/train.py",
    "python dbfs:/code/train.py",
    "python /Volumes/main/default/code/train.py",
    "python /opt/app/train.py",
    "python missing.py",
    "bash run.sh",
    "python -m",
    "python 'unclosed",
    [],
    "",
]
#: Strings that have broken parsers elsewhere: empty, control characters, shorthand edge cases, numbers too
#: large for a float, digits that are not ASCII, very long text.
NASTY = [
    "",
    " ",
    "\x00",
    "\n",
    "A100:",
    ":8",
    "A100:0",
    "A100:x",
    "A100:²",
    "A100:١٢",
    "H100-NVL:8",
    "a2-highgpu-8g",
    "9" * 400 + "d",
    "9" * 400 + ".5h",
    "1e999",
    "nan",
    "inf",
    "-1",
    "0",
    "9" * 30,
    "auto",
    "per-node",
    "../../etc/passwd",
    "${HOME}",
    "😀",
    "x" * 3000,
]

_text = st.text(max_size=12)
_name = st.one_of(st.sampled_from(["ddp", "fuzz-job"]), st.from_regex(r"[A-Za-z][A-Za-z0-9_.-]{0,62}", fullmatch=True))
_count = st.one_of(st.sampled_from([1, 2, 4, 8, 16]), st.integers(1, 20))
_gpu = st.sampled_from(GPU_NAMES)
_accelerator = st.fixed_dictionaries({"type": _gpu}, optional={"count": _count})
_machine = st.one_of(
    _gpu,
    st.builds(lambda gpu, count: f"{gpu}:{count}", _gpu, _count),
    st.sampled_from(MACHINE_TYPES),
    st.fixed_dictionaries({}, optional={"type": st.sampled_from(MACHINE_TYPES), "accelerator": _accelerator}),
)
_command: st.SearchStrategy[Any] = st.sampled_from(COMMANDS)
_args = st.lists(
    st.sampled_from(["--epochs", "2", "--lr=0.01", "a,b", "$(HOME)", "--out=gs://b/o", "é", "${inputs.train}"]),
    max_size=3,
)
#: Data locations of every kind crosstrain reads, in every mode (some a target refuses, some the spec does).
_data_path = st.sampled_from(
    [
        "gs://fuzz-bucket/data",
        "azureml:cifar:3",
        "azureml:cifar@latest",
        "azureml://datastores/ws/paths/d/",
        "abfss://c@acct.dfs.core.windows.net/d",
        "s3://fuzz-bucket/d",
        "/Volumes/main/ml/d",
        "dbfs:/d",
        "./data",
        "gs://fuzz-bucket/d/",
    ]
)
_data = st.dictionaries(
    st.sampled_from(["train", "model", "2x"]),
    st.one_of(
        _data_path,
        st.fixed_dictionaries(
            {"path": _data_path},
            optional={
                "type": st.sampled_from(["folder", "file", "table"]),
                "mode": st.sampled_from(["mount", "download", "upload", "direct"]),
            },
        ),
    ),
    max_size=2,
)
_env_name = st.one_of(
    st.sampled_from(["NCCL_DEBUG", "CUDA_VISIBLE_DEVICES", "RANK", "PATH", "OMP_NUM_THREADS"]),
    st.from_regex(r"[A-Za-z_][A-Za-z0-9_]{0,10}", fullmatch=True),
)
#: Secrets by reference, in every store's form, and forms no store has.
SECRETS = [
    {"secret": "training/wandb-key"},
    {"secret": "projects/fuzz-project/secrets/hf-token"},
    {"secret": "projects/fuzz-project/secrets/hf-token/versions/3"},
    {"secret": "https://fuzzvault.vault.azure.net/secrets/hf-token"},
    {"secret": "not a reference"},
    {"secret": "scope/key", "value": "x"},
]
_env_value = st.one_of(st.sampled_from(["INFO", "1", "", "a b", "$(X)"]), st.sampled_from(SECRETS))
_env = st.one_of(
    st.dictionaries(_env_name, _env_value, max_size=3),
    st.just({f"VAR_{i}": str(i) for i in range(101)}),  # past Vertex AI's 100 per container
)
_image = st.sampled_from(IMAGES)
_boot_disk = st.fixed_dictionaries(
    {},
    optional={
        "type": st.sampled_from(["pd-ssd", "pd-standard", "pd-balanced", "hyperdisk"]),
        "size_gb": st.one_of(st.sampled_from([10, 99, 100, 200, 64000, 64001, 65536]), st.integers(10, 65536)),
    },
)
_duration = st.one_of(
    st.sampled_from(["90m", "24h", "1h30m", "7d", "30s", "1.5h", "45m", "30m", "2h", "1d12h", 3600, 1, 10**7]),
    st.integers(1, 10**7),
    st.from_regex(r"(\d{1,3}d)?(\d{1,3}h)?(\d{1,3}m)?(\d{1,3}s)?", fullmatch=True).filter(bool),
)
_label_key = st.one_of(
    st.sampled_from(["team", "Team", "crosstrain-id", "cost_center"]),
    st.from_regex(r"[a-z][a-z0-9_-]{0,20}", fullmatch=True),
)
_label_value = st.one_of(
    st.sampled_from(["ml", "ML", "a b", "", "x" * 70]), st.from_regex(r"[a-z0-9_-]{0,20}", fullmatch=True)
)


def _settings_sections() -> st.SearchStrategy[dict[str, Any]]:
    """`targets:` sections: each target's own setting names with plausible or junk values, and unknown names."""
    from crosstrain.registry import BUILTIN_BACKENDS, get_backend_class

    sections = {}
    for name in BUILTIN_BACKENDS:
        model = get_backend_class(name).settings_model
        keys = st.one_of(st.sampled_from(sorted(model.model_fields)), st.sampled_from(["no_such_setting"]))
        sections[name] = st.dictionaries(keys, st.one_of(_text, st.sampled_from(NASTY), st.integers()), max_size=2)
    return st.fixed_dictionaries({}, optional=sections)


@st.composite
def _fields(draw: st.DrawFn, fields: Mapping[str, tuple[int, st.SearchStrategy[Any]]]) -> dict[str, Any]:
    """A dict with each field present about `percent` out of 100 times (rare ones a little less, common ones a
    little more): rare fields stay rare, so that most jobs are ones some target can run."""
    out = {}
    for key, (percent, strategy) in fields.items():
        # Hypothesis leans to small integers (about a third of these are 0-9, most of them 0), so a rare field
        # takes the top of the range and a common one the bottom, where 0 lies.
        roll = draw(st.integers(0, 99))
        if (roll < percent) if percent >= 50 else (roll >= 100 - percent):
            out[key] = draw(strategy)
    return out


def _pool(**extra: tuple[int, st.SearchStrategy[Any]]) -> st.SearchStrategy[dict[str, Any]]:
    return _fields(
        {
            "machine": (90, _machine),
            "image": (10, _image),
            "command": (10, _command),
            "args": (10, _args),
            "env": (15, _env),
            "boot_disk": (8, _boot_disk),
            **extra,
        }
    )


@st.composite
def well_formed(draw: st.DrawFn) -> dict[str, Any]:
    """Job dicts of the shape `TrainingJob` describes, with values a user could plausibly write."""
    spec: dict[str, Any] = {"name": draw(_name)}
    spec |= draw(
        _fields(
            {
                "run_id": (15, st.from_regex(r"[a-z0-9][a-z0-9-]{0,31}", fullmatch=True)),
                "image": (80, _image),
                "command": (85, _command),
                "args": (40, _args),
                "env": (30, _env),
                "shell": (8, st.booleans()),
                "inputs": (12, _data),
                "outputs": (8, _data),
                "primary": (90, _pool(replicas=(5, st.sampled_from([1, 2])))),
                "workers": (50, _pool(replicas=(90, st.one_of(st.integers(0, 4), st.sampled_from([15, 10000]))))),
                "reduction_server": (
                    4,
                    _fields(
                        {
                            "replicas": (60, st.one_of(st.just("auto"), st.integers(1, 8))),
                            "machine_type": (
                                40,
                                st.one_of(
                                    st.sampled_from(["n1-highcpu-16", "n1-standard-8", "a2-highgpu-1g"]),
                                    st.sampled_from(MACHINE_TYPES),  # other platforms' names, a trailing space
                                    st.sampled_from(NASTY),  # GPU forms
                                ),
                            ),
                            "image": (20, _image),
                        }
                    ),
                ),
                "parameter_servers": (3, _pool(replicas=(50, st.integers(1, 3)))),
                "evaluators": (3, _pool(replicas=(50, st.integers(1, 3)))),
                "launch": (
                    40,
                    _fields(
                        {
                            "mode": (60, st.sampled_from(["auto", "per-process", "per-node"])),
                            "processes_per_node": (30, st.one_of(st.sampled_from([1, 2, 4, 8]), st.integers(1, 128))),
                            "framework": (
                                30,
                                st.sampled_from(["pytorch", "mpi", "tensorflow", "deepspeed", "horovod"]),
                            ),
                        }
                    ),
                ),
                "scheduling": (
                    40,
                    _fields(
                        {
                            "timeout": (50, _duration),
                            "max_wait": (8, _duration),
                            "spot": (30, st.booleans()),
                            "max_restarts": (8, st.integers(0, 100)),
                        }
                    ),
                ),
                "labels": (30, st.dictionaries(_label_key, _label_value, max_size=3)),
                "identity": (
                    10,
                    st.sampled_from(
                        [
                            "trainer@fuzz-project.iam.gserviceaccount.com",
                            "6f2c1a9e-0d8b-4f7c-9e3a-5b1d2c3e4f5a",
                            "managed",
                            "aml_token",
                            "user",
                            "principal-name",
                        ]
                    ),
                ),
                "network": (4, st.sampled_from(["projects/123456/global/networks/vpc", "vpc-1"])),
                "output_dir": (
                    8,
                    st.sampled_from(["gs://bucket/out", "azureml://datastores/x/paths/y", "dbfs:/out", "/tmp/out"]),
                ),
                "targets": (8, _settings_sections()),
            }
        )
    )
    return spec


_scalar = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.sampled_from([2**64, -(2**63), 10**30]),
    st.floats(),
    _text,
    st.sampled_from(NASTY),
)
junk: st.SearchStrategy[Any] = st.recursive(
    _scalar, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_text, inner, max_size=3), max_leaves=6
)


def _paths(value: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every place in a JSON-like value: dict keys and list indexes, depth first."""
    found = [prefix]
    if isinstance(value, dict):
        for key, item in value.items():
            found += _paths(item, (*prefix, key))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            found += _paths(item, (*prefix, index))
    return found


def _mutate(spec: Any, path: tuple[Any, ...], action: str, value: Any, key: str) -> Any:
    """A copy of `spec` with one change at `path`: replaced, deleted, given an extra key, or wrapped in a list."""
    if not path:
        if action == "add" and isinstance(spec, dict):
            return {**spec, key: value}
        return value if action == "replace" else [spec] if action == "wrap" else spec
    head, rest = path[0], path[1:]
    if isinstance(spec, dict):
        if not rest and action == "delete":
            return {k: v for k, v in spec.items() if k != head}
        return {**spec, head: _mutate(spec[head], rest, action, value, key)}
    if isinstance(spec, list):
        if not rest and action == "delete":
            return spec[:head] + spec[head + 1 :]
        return [*spec[:head], _mutate(spec[head], rest, action, value, key), *spec[head + 1 :]]
    return spec


@st.composite
def malformed(draw: st.DrawFn) -> dict[str, Any]:
    """A well-formed job with one to three things broken: values of the wrong type or range, keys deleted,
    unknown keys added (a near-miss of a real name or any text), values wrapped in a list."""
    spec: Any = draw(well_formed())
    for _ in range(draw(st.integers(1, 3))):
        paths = _paths(spec)
        path = draw(st.sampled_from(paths))
        action = draw(st.sampled_from(["replace", "replace", "delete", "add", "wrap"]))
        key = draw(st.one_of(st.sampled_from(["machin", "replica", "comand", "accelerators", "typo"]), _text))
        spec = _mutate(spec, path, action, draw(st.one_of(st.sampled_from(NASTY), junk)), key)
    return spec if isinstance(spec, dict) else {"name": "fuzz", "primary": spec}


def specs() -> st.SearchStrategy[dict[str, Any]]:
    """Well-formed and malformed job dicts, about half each."""
    return st.one_of(well_formed(), malformed())


def short(text: str, limit: int = 400) -> str:
    """One line of at most `limit` characters, for tallies."""
    flat = re.sub(r"\s+", " ", text).strip()
    return flat if len(flat) <= limit else flat[: limit - 3] + "..."


# -- real jobs, mutated ------------------------------------------------------------------------------------
REPOSITORY = Path(__file__).resolve().parents[1]


def real_jobs() -> list[tuple[str, dict[str, Any]]]:
    """Every example and corpus job (the configurations users wrote, translated), as data: (its folder, job)."""
    import yaml

    found = []
    paths = sorted(REPOSITORY.glob("examples/**/*.yaml")) + sorted(REPOSITORY.glob("tests/corpus/cases/*/job.yaml"))
    for path in paths:
        data = yaml.safe_load(path.read_text())
        if isinstance(data, dict) and ("command" in data or "image" in data or "primary" in data):
            found.append((str(path.parent), data))
    return found


_UNICODE = ["\u202e", "\u200b", "\u00e9", "\uff21\uff11\uff10\uff10", "\U0001f680", "\ufeff", "\u0131", "\u00df"]
_EXTREME = [0, -1, 2**31, 2**63, -(2**63), 10**30, 1e308, float("inf"), float("nan"), 1.5, True]


@st.composite
def _edited(draw: st.DrawFn, value: Any) -> Any:
    """`value` as a careless or hostile hand edits it: padded, recased, of another type, extreme, or unicode."""
    how = draw(st.sampled_from(["pad", "case", "swap", "extreme", "unicode", "nest"]))
    if how == "pad" and isinstance(value, str):
        return draw(st.sampled_from([" ", "\t", "\n", "  "])) + value + draw(st.sampled_from(["", " ", "\n"]))
    if how == "case" and isinstance(value, str):
        return draw(st.sampled_from([value.upper(), value.lower(), value.title(), value.swapcase()]))
    if how == "swap":
        if isinstance(value, bool | int | float):
            return str(value)
        if isinstance(value, str):
            return int(value) if value.strip().isdigit() else [value]
        if isinstance(value, list):
            return value[0] if value else ""
        if isinstance(value, dict):
            return list(value.values())
        return value
    if how == "extreme":
        return draw(st.sampled_from(_EXTREME))
    if how == "unicode" and isinstance(value, str):
        mark = draw(st.sampled_from(_UNICODE))
        at = draw(st.integers(0, len(value)))
        return value[:at] + mark + value[at:]
    if how == "nest":
        return {"value": value}
    return draw(st.sampled_from(NASTY))


_PATCH_TARGETS = ["vertex", "aiplatform", "azureml", "databricks"]


@st.composite
def real_mutated(draw: st.DrawFn, jobs: list[tuple[str, dict[str, Any]]]) -> tuple[str, dict[str, Any]]:
    """A real job with one to four edits (`_edited`), and sometimes a patch of any shape for a target: (its
    folder, the job)."""
    folder, spec = draw(st.sampled_from(jobs))
    for _ in range(draw(st.integers(1, 4))):
        path = draw(st.sampled_from(_paths(spec)))
        current: Any = spec
        for part in path:
            current = current[part]
        spec = _mutate(spec, path, "replace", draw(_edited(current)), "")
    if isinstance(spec, dict) and draw(st.integers(0, 4)) == 0:
        target = draw(st.sampled_from(_PATCH_TARGETS))
        patch = draw(st.one_of(junk, st.dictionaries(_text, junk, max_size=3)))
        found = spec.get("targets")
        targets: dict[str, Any] = found if isinstance(found, dict) else {}
        section = targets.get(target)
        spec = {
            **spec,
            "targets": {**targets, target: {**(section if isinstance(section, dict) else {}), "patch": patch}},
        }
    return folder, spec if isinstance(spec, dict) else {"name": "fuzz", "primary": spec}
