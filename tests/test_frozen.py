"""`@frozen` against the frozen dataclass it stands for: each test makes the same class both ways and holds every
behaviour a caller can see to the dataclass's."""

from __future__ import annotations

import copy
import dataclasses
import pickle
import sys
from collections.abc import Callable
from typing import Any

import pytest

from crosstrain.frozen import frozen

Decorator = Callable[[type[Any]], type[Any]]
BOTH: list[Decorator] = [dataclasses.dataclass(frozen=True), frozen]


@frozen
class Pickled:
    """Module-level, as pickle wants."""

    x: int
    items: tuple[int, ...] = ()


def pair(make: Callable[[Decorator], type[Any]]) -> tuple[type[Any], type[Any]]:
    """The class `make` builds, as a frozen dataclass and as `@frozen`."""
    reference, ours = (make(decorate) for decorate in BOTH)
    return reference, ours


def point(decorate: Decorator) -> type[Any]:
    @decorate
    class Point:
        x: int
        y: int = 0
        tags: tuple[str, ...] = ()
        note: str = dataclasses.field(default="", compare=False)
        secret: str = dataclasses.field(default="", repr=False)
        extra: list[int] = dataclasses.field(default_factory=list, hash=False)

    return Point


def test_repr_eq_and_hash_are_the_dataclass_s() -> None:
    reference, ours = pair(point)
    cases: list[tuple[tuple[Any, ...], dict[str, Any]]] = [
        ((1,), {}),
        ((1, 2), {"tags": ("a",), "note": "n", "secret": "s"}),
        ((0,), {"y": -1}),
    ]
    for args, kwargs in cases:
        a, b = reference(*args, **kwargs), ours(*args, **kwargs)
        assert repr(b) == repr(a)
        assert hash(b) == hash(a)
    assert ours(1, note="a") == ours(1, note="b")  # compare=False
    assert hash(ours(1, extra=[1])) == hash(ours(1, extra=[2]))  # hash=False
    assert ours(1, extra=[1]) != ours(1, extra=[2])  # but still compared
    assert ours(1) != ours(2)
    assert ours(1) != reference(1)  # another class: NotImplemented both ways, so identity decides
    assert ours(1).__eq__((1, 0)) is NotImplemented
    nan = float("nan")  # not equal to itself: each Python's dataclass decides whether the same object is
    for x, y in [(nan, nan), (nan, float("nan"))]:
        assert (ours(x) == ours(y)) is (reference(x) == reference(y))


@pytest.mark.parametrize("decorate", BOTH, ids=["dataclass", "frozen"])
def test_fields_cannot_be_assigned_or_deleted(decorate: Decorator) -> None:
    made = point(decorate)(1)
    with pytest.raises(dataclasses.FrozenInstanceError, match="cannot assign to field 'x'"):
        made.x = 2
    with pytest.raises(dataclasses.FrozenInstanceError, match="cannot assign to field 'other'"):
        made.other = 2
    with pytest.raises(dataclasses.FrozenInstanceError, match="cannot delete field 'y'"):
        del made.y
    assert made.x == 1


@pytest.mark.parametrize("decorate", BOTH, ids=["dataclass", "frozen"])
def test_the_dataclass_functions_work(decorate: Decorator) -> None:
    kind = point(decorate)
    made: Any = kind(1, 2, tags=("a",))
    assert [field.name for field in dataclasses.fields(made)] == ["x", "y", "tags", "note", "secret", "extra"]
    assert dataclasses.asdict(made) == {"x": 1, "y": 2, "tags": ("a",), "note": "", "secret": "", "extra": []}
    moved = dataclasses.replace(made, y=5)
    assert (moved.x, moved.y, made.y) == (1, 5, 2)
    assert copy.copy(made) == made
    assert copy.deepcopy(made) == made
    pickled = Pickled(1, (2, 3))
    assert pickle.loads(pickle.dumps(pickled)) == pickled
    assert kind.__match_args__ == ("x", "y", "tags", "note", "secret", "extra")
    with pytest.raises(TypeError):
        kind()
    assert dataclasses.is_dataclass(made)


def test_a_class_s_own_methods_stay_as_the_dataclass_keeps_them() -> None:
    def own(decorate: Decorator) -> type[Any]:
        @decorate
        class Own:
            x: int

            def __repr__(self) -> str:
                return "own"

            def __eq__(self, other: object) -> bool:
                return True

        return Own

    reference, ours = pair(own)
    assert repr(ours(1)) == repr(reference(1)) == "own"
    assert ours(1) == ours(2)
    assert hash(ours(1)) == hash(reference(1))  # defining __eq__ leaves __hash__ None: both make one

    def own_hash(decorate: Decorator) -> type[Any]:
        @decorate
        class OwnHash:
            x: int

            def __hash__(self) -> int:
                return 7

        return OwnHash

    reference, ours = pair(own_hash)
    assert hash(ours(1)) == hash(reference(1)) == 7

    for decorate in BOTH:
        with pytest.raises(TypeError, match="Cannot overwrite attribute __setattr__"):

            @decorate
            class Settable:
                x: int

                def __setattr__(self, name: str, value: Any) -> None:
                    pass


def test_subclasses_and_post_init() -> None:
    def family(decorate: Decorator) -> type[Any]:
        @decorate
        class Base:
            x: int

        @decorate
        class Child(Base):
            y: int = 0
            doubled: int = dataclasses.field(init=False, default=0)

            def __post_init__(self) -> None:
                object.__setattr__(self, "doubled", 2 * self.x)

        return Child

    reference, ours = pair(family)
    a, b = reference(3, 4), ours(3, 4)
    assert repr(b) == repr(a)
    assert b.doubled == 6
    assert hash(b) == hash(a)
    assert b != ours.__mro__[1](3)
    with pytest.raises(dataclasses.FrozenInstanceError):
        b.x = 1

    class Plain(ours):  # type: ignore[misc,valid-type]  # not a dataclass: only the fields are frozen
        pass

    plain = Plain(1)
    plain.free = 2
    assert plain.free == 2
    with pytest.raises(dataclasses.FrozenInstanceError):
        plain.y = 2


def test_recursion_in_repr_is_cut() -> None:
    @frozen
    class Box:
        items: list[Any]

    box = Box([])
    box.items.append(box)
    assert repr(box) == "test_recursion_in_repr_is_cut.<locals>.Box(items=[...])"


def test_a_field_left_out_of_init_needs_a_default() -> None:
    """Else `__init__` would leave it unset, and `@frozen` would let the first assignment after it through."""

    def defaulted(decorate: Decorator) -> type[Any]:
        @decorate
        class Defaulted:
            x: int
            derived: int = dataclasses.field(init=False, default=0)

        return Defaulted

    reference, ours = pair(defaulted)
    assert (
        repr(ours(1))
        == repr(reference(1))
        == "test_a_field_left_out_of_init_needs_a_default.<locals>.defaulted.<locals>.Defaulted(x=1, derived=0)"
    )
    if sys.version_info < (3, 13):
        with pytest.raises(TypeError, match=r"Unset\.late: a field left out of __init__ needs a default"):

            @frozen
            class Unset:
                late: int = dataclasses.field(init=False)
