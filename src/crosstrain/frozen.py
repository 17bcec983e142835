"""`@frozen`: a frozen dataclass, cls at a fifth of the cost.

For each frozen class, Python 3.10 and 3.11's `dataclass` writes and compiles six methods (`__init__`, `__repr__`,
`__eq__`, `__hash__`, `__setattr__`, `__delattr__`); compiling them is most of what importing crosstrain's records
costs, about half a millisecond a class, with some forty on a render's path. `@frozen` has `dataclass` compile
`__init__` only and gives the class the other five as closures over its fields, which compile nothing. To
everything else it is the frozen dataclass it replaces: `dataclasses.fields`, `replace` and `asdict` work,
`repr`, `==` and `hash` give what the dataclass gave (fields marked `compare=False`, `hash=` or `repr=False`
included), assigning or deleting a field raises `FrozenInstanceError`, and type checkers read `frozen=True`.
"""

from __future__ import annotations

import dataclasses
import reprlib
import sys
from collections.abc import Callable
from typing import Any, TypeVar, cast

if sys.version_info >= (3, 11):
    from typing import dataclass_transform
else:  # Python 3.10
    from typing_extensions import dataclass_transform

_T = TypeVar("_T")


@dataclass_transform(frozen_default=True, field_specifiers=(dataclasses.field, dataclasses.Field))
def frozen(cls: type[_T]) -> type[_T]:
    """`cls` as a frozen dataclass (`@dataclass(frozen=True)`), without compiling five of its six methods."""
    dataclasses.dataclass(cls, eq=False, repr=False)  # in place: an __init__ that assigns through __setattr__
    fields = dataclasses.fields(cast(Any, cls))
    names = frozenset(field.name for field in fields)
    compared = tuple(field.name for field in fields if field.compare)
    hashed = tuple(field.name for field in fields if (field.compare if field.hash is None else field.hash))
    shown = tuple(field.name for field in fields if field.repr)

    def __setattr__(self: Any, name: str, value: Any) -> None:
        if name in names and name not in self.__dict__:  # __init__ setting a field
            object.__setattr__(self, name, value)
        elif type(self) is cls or name in names:
            raise dataclasses.FrozenInstanceError(f"cannot assign to field {name!r}")
        else:
            super(cls, self).__setattr__(name, value)

    def __delattr__(self: Any, name: str) -> None:
        if type(self) is cls or name in names:
            raise dataclasses.FrozenInstanceError(f"cannot delete field {name!r}")
        super(cls, self).__delattr__(name)

    def __eq__(self: Any, other: object) -> bool:
        if other.__class__ is not self.__class__:
            return NotImplemented
        return tuple([getattr(self, name) for name in compared]) == tuple([getattr(other, name) for name in compared])

    def __hash__(self: Any) -> int:
        return hash(tuple([getattr(self, name) for name in hashed]))

    @reprlib.recursive_repr()
    def __repr__(self: Any) -> str:
        shows = ", ".join(f"{name}={getattr(self, name)!r}" for name in shown)
        return f"{self.__class__.__qualname__}({shows})"

    for name in ("__setattr__", "__delattr__"):
        if name in cls.__dict__:
            raise TypeError(f"Cannot overwrite attribute {name} in class {cls.__name__}")
    given: dict[str, Callable[..., Any]] = {"__setattr__": __setattr__, "__delattr__": __delattr__}
    given.update(
        {name: method for name, method in (("__repr__", __repr__), ("__eq__", __eq__)) if name not in cls.__dict__}
    )
    # as dataclass decides: a class's own __hash__ stays, unless it is the None that defining __eq__ leaves
    own_hash = cls.__dict__.get("__hash__", dataclasses.MISSING)
    if own_hash is dataclasses.MISSING or (own_hash is None and "__eq__" in cls.__dict__):
        given["__hash__"] = __hash__
    for name, method in given.items():
        method.__qualname__ = f"{cls.__qualname__}.{name}"
        setattr(cls, name, method)
    return cls
