"""`@frozen`: a frozen dataclass, made at a fraction of the cost.

Before Python 3.13, `dataclass` writes and compiles six methods for each frozen class, one at a time
(`__init__`, `__repr__`, `__eq__`, `__hash__`, `__setattr__`, `__delattr__`); compiling them is most of what
importing crosstrain's records costs, about half a millisecond a class, with some forty on a render's path.
`@frozen` has `dataclass` compile `__init__` only and gives the class the other five as closures over its
fields, which compile nothing. To everything else it is the frozen dataclass it replaces: `dataclasses.fields`,
`replace` and `asdict` work, `repr`, `==` and `hash` give what the dataclass gives (fields marked
`compare=False`, `hash=` or `repr=False` included), assigning or deleting a field raises `FrozenInstanceError`,
and type checkers read `frozen=True`. From Python 3.13, which compiles a class's methods at once, `@frozen` is
`dataclass(frozen=True)` itself."""

from __future__ import annotations

import dataclasses
import operator
import reprlib
import sys
from collections.abc import Callable
from typing import Any, TypeVar, cast

if sys.version_info >= (3, 11):
    from typing import dataclass_transform
else:  # Python 3.10
    from typing_extensions import dataclass_transform

_T = TypeVar("_T")


def _getter(names: tuple[str, ...]) -> Callable[[Any], tuple[Any, ...]]:
    """A function giving an object's `names` as a tuple, as the dataclass's generated methods build it."""
    if len(names) > 1:
        return operator.attrgetter(*names)
    return lambda obj: tuple([getattr(obj, name) for name in names])


@dataclass_transform(frozen_default=True, field_specifiers=(dataclasses.field, dataclasses.Field))
def frozen(cls: type[_T]) -> type[_T]:
    """`cls` as a frozen dataclass (`@dataclass(frozen=True)`), without compiling five of its six methods. A
    `@frozen` class subclasses, and is subclassed by, `@frozen` classes only."""
    if sys.version_info >= (3, 13):  # dataclass compiles a class's methods in one go: nothing to save
        return dataclasses.dataclass(cls, frozen=True)
    dataclasses.dataclass(cls, eq=False, repr=False)  # in place: an __init__ that assigns through __setattr__
    fields = dataclasses.fields(cast(Any, cls))
    for field in fields:
        if not field.init and field.default is dataclasses.MISSING and field.default_factory is dataclasses.MISSING:
            # __init__ would leave it unset, and the first assignment after it would be let through
            raise TypeError(f"{cls.__qualname__}.{field.name}: a field left out of __init__ needs a default")
    names = frozenset(field.name for field in fields)
    compared = _getter(tuple(field.name for field in fields if field.compare))
    hashed = _getter(tuple(field.name for field in fields if (field.compare if field.hash is None else field.hash)))
    shown = tuple(field.name for field in fields if field.repr)

    def __setattr__(self: Any, name: str, value: Any) -> None:
        values = self.__dict__
        if name in names and name not in values:  # __init__ setting a field
            values[name] = value
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
        return bool(compared(self) == compared(other))

    def __hash__(self: Any) -> int:
        return hash(hashed(self))

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
