"""The backend registry: lazy imports, plugins through entry points, helpful errors."""

from __future__ import annotations

import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from crosstrain import registry
from crosstrain.adaptors import require
from crosstrain.backends.fake import FakeBackend
from crosstrain.errors import MissingDependency, UnknownBackend
from crosstrain.registry import create_backend, entries, get_backend_class, register


def test_builtins_are_module_paths_until_used() -> None:
    assert registry.BUILTIN_BACKENDS["fake"].target == "crosstrain.backends.fake:FakeBackend"
    assert get_backend_class("fake") is FakeBackend


def test_unknown_name_lists_the_valid_ones() -> None:
    with pytest.raises(UnknownBackend, match=r"unknown target 'fak'; did you mean 'fake'\? Valid targets: .*fake"):
        create_backend("fak")


@pytest.fixture
def plugin_dist(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A real installed distribution on sys.path, declaring backends in the crosstrain.backends group."""
    (tmp_path / "acme_backend.py").write_text(
        textwrap.dedent("""
        from crosstrain.backends.fake import FakeBackend
        class AcmeBackend(FakeBackend):
            name = "acme"
    """)
    )
    info = tmp_path / "acme_backend-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: acme-backend\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text(
        "[crosstrain.backends]\nacme = acme_backend:AcmeBackend\nfake = acme_backend:AcmeBackend\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    yield tmp_path
    sys.modules.pop("acme_backend", None)


def test_plugins_are_added_to_the_builtins_not_replacing_them(plugin_dist: Path) -> None:
    with pytest.warns(UserWarning, match="ignoring plugin backend 'fake'"):
        known = entries()
    assert {"acme", "fake"} <= set(known)
    assert known["fake"].target == "crosstrain.backends.fake:FakeBackend"
    assert "acme-backend" in known["acme"].summary
    with pytest.warns(UserWarning, match="ignoring plugin backend"):
        assert get_backend_class("acme").__name__ == "AcmeBackend"


def test_a_backend_with_a_missing_dependency_says_what_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(registry, "_registered", {})
    register("broken", "crosstrain_no_such_module:Backend", extra="broken")
    with pytest.raises(MissingDependency, match=r"pip install 'crosstrain\[broken\]'"):
        create_backend("broken")
    with pytest.raises(ValueError, match="built-in"):
        register("fake", "x:Y")


def test_require_gives_the_install_hint() -> None:
    assert require("json", "x").dumps([]) == "[]"
    with pytest.raises(
        MissingDependency,
        match=r"google\.cloud\.no_such_sdk is not installed: "
        r"pip install 'crosstrain\[vertex\]'",
    ):
        require("google.cloud.no_such_sdk", "vertex")


def test_unknown_name_without_a_close_match_still_reads_as_a_sentence() -> None:
    with pytest.raises(UnknownBackend, match=r"^unknown target 'zzz'\. Valid targets: "):
        create_backend("zzz")
