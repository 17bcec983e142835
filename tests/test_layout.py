"""The layout holds: what one platform means lives in its package, modules stay readable, and no assert stands in
for a refusal. (The import rules themselves are import-linter's contracts, run by `nox -s lint`.)"""

from __future__ import annotations

import ast
import re

import pytest

from crosstrain.registry import BUILTIN_BACKENDS, get_backend_class
from tests.conftest import ROOT

SOURCE = ROOT / "src" / "crosstrain"
PLATFORMS = [name for name in BUILTIN_BACKENDS if get_backend_class(name).emulation_module is not None]
#: Where a platform may be named besides its own package, its SDK adaptors and its node-side module: the
#: registry, the machine catalog, the data-location parser, and the secret stores (one is Databricks' scopes).
MAX_NAMING = 3


def _modules() -> dict[str, ast.Module]:
    return {str(p.relative_to(SOURCE)): ast.parse(p.read_text()) for p in sorted(SOURCE.rglob("*.py"))}


def _names(tree: ast.AST, platform: str, others: set[str] = frozenset()) -> bool:  # type: ignore[assignment]
    """Whether a module names `platform`: imports its package, or holds its target name as a string (not the
    name of another target, `others`: `databricks-air` is not `databricks`)."""
    package = re.compile(rf"crosstrain\.backends\.{platform.replace('-', '_')}\b")
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            if node.value in others:
                continue
            if re.fullmatch(rf"{platform}(-[a-z]+)?", node.value) or package.search(node.value):
                return True
        elif isinstance(node, ast.ImportFrom) and package.search(node.module or ""):
            return True
    return False


def _adaptors(modules: dict[str, ast.Module], platform: str) -> set[str]:
    """The SDK adaptors the platform's package imports, itself or through the shared module of its vendor that
    it imports (`backends/_databricks.py`: what both Databricks targets do the same way)."""
    found, shared = set(), set()
    for path, tree in modules.items():
        if path.startswith(f"backends/{platform}/"):
            for node in ast.walk(tree):
                module = node.module or "" if isinstance(node, ast.ImportFrom) else ""
                if module.startswith("crosstrain.backends._"):
                    shared.add(f"backends/{module.rsplit('.', 1)[-1]}.py")
    for path, tree in modules.items():
        if path.startswith(f"backends/{platform}/") or path in shared:
            for node in ast.walk(tree):
                if isinstance(node, ast.ImportFrom) and node.module == "crosstrain.adaptors":
                    found |= {f"adaptors/{alias.name}.py" for alias in node.names}
    return found


def _package(target: str) -> str:
    """A target's package under backends/ (`databricks-air` -> `databricks_air`)."""
    return target.replace("-", "_")


@pytest.mark.parametrize("platform", PLATFORMS)
def test_a_platform_is_named_outside_its_package_in_at_most_three_modules(platform: str) -> None:
    """Its own places: its package, its SDK adaptors, its node side, and what the platforms of one vendor share:
    the shared module `backends/_<platform>.py` and the packages of the platforms installed by the same pip extra
    (databricks and databricks-air: one SDK), each naming the other's extra and SDK."""
    modules = _modules()
    package = _package(platform)
    own = _adaptors(modules, package)
    extra = get_backend_class(platform).extra
    siblings = [_package(p) for p in BUILTIN_BACKENDS if p != platform and get_backend_class(p).extra == extra]
    others = {name for name in BUILTIN_BACKENDS if name != platform}  # another target's name names that one
    elsewhere = sorted(
        path
        for path, tree in modules.items()
        if not path.startswith(f"backends/{package}/")
        and path not in own
        and path != f"backends/_{package}.py"
        and not any(path.startswith(f"backends/{sibling}/") for sibling in siblings)
        and not path.startswith(f"runtime/platforms/{package}")  # its node side: what a node of it reads
        and _names(tree, platform, others)
    )
    assert "registry.py" in elsewhere  # the check sees names
    assert len(elsewhere) <= MAX_NAMING, elsewhere


def test_no_module_is_over_900_lines() -> None:
    long = {path: n for path in _modules() if (n := len((SOURCE / path).read_text().splitlines())) > 900}
    assert not long


def test_no_assert_stands_for_a_refusal() -> None:
    """A plan that the checks refused never reaches a render: the render builds from what the plan returned, so no
    assert says "the refusal pass refused it"."""
    standing_in = re.compile(r"^\s*assert\b.*#.*(refus|already checked|checked in|render\(\) )", re.IGNORECASE)
    found = [
        f"{path}:{number}"
        for path in _modules()
        for number, line in enumerate((SOURCE / path).read_text().splitlines(), 1)
        if standing_in.search(line)
    ]
    assert not found


#: The oldest Python a node may run crosstrain's node side on: AI Platform's runtime versions 1.15 to 2.11 run 3.7.
NODE_PYTHON = (3, 7)
#: What the standard library added after that and the node side must not call (str methods of 3.9).
_NEWER_APIS = {"removeprefix", "removesuffix"}


def test_the_node_side_runs_on_the_oldest_python_a_node_has() -> None:
    """Every file the bundle ships for the nodes parses as Python 3.7 and calls none of the newer str methods."""
    from crosstrain.packaging import NODE_SIDE_FILES

    root = ROOT / "src" / "crosstrain"
    newer = []
    for name in NODE_SIDE_FILES:
        text = (root / name).read_text()
        ast.parse(text, filename=name, feature_version=NODE_PYTHON)
        newer += [
            f"{name}:{node.lineno} {node.attr}"
            for node in ast.walk(ast.parse(text))
            if isinstance(node, ast.Attribute) and node.attr in _NEWER_APIS
        ]
    assert not newer, newer
