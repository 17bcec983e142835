"""What a job costs: the price table shipped with crosstrain, and a job's price per hour and its bound.

Each platform package ships its list prices as data (`backends/<platform>/prices.json`), every price with the
source it was read from and the date it was read; `crosstrain prices --refresh` rereads the public price APIs
that need no key. A platform names what its job runs on (`Need`: so many instances of a machine, on demand or
spot, in a region), the table prices each one, and `Cost` adds them up. A price the table lacks is said, never
guessed: the job's price per hour is then unknown, and so is its bound.

This module is pure: it reads package data and imports no SDK; the render builds its cost from it.
"""

from __future__ import annotations

import importlib
import json
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import field
from functools import cache
from pathlib import Path
from typing import Any

from crosstrain.errors import Problem
from crosstrain.frozen import frozen

#: The file a platform package ships its prices in.
PRICES_FILE = "prices.json"
#: Every price is in this currency.
CURRENCY = "USD"
#: `Need.region` for a price whose region is not known at render (Azure ML: the workspace's): the bound takes
#: the highest price the table holds for the item.
ANY_REGION = "*"


@frozen
class Source:
    """Where prices were read, and when."""

    url: str
    read: str  # the date read, YYYY-MM-DD
    note: str = ""

    def to_dict(self) -> dict[str, str]:
        return {"url": self.url, "read": self.read, **({"note": self.note} if self.note else {})}


@frozen
class Price:
    """One list price: an item (a machine type, a GPU, a node type's DBU rate), in a region ("" where its
    source states none), on demand or spot, in USD per hour."""

    item: str
    region: str
    spot: bool
    usd_per_hour: float
    source: Source


@frozen
class Need:
    """What a job runs on, to be priced: `count` instances of `item` in `region` (or `ANY_REGION`)."""

    item: str
    count: int
    region: str
    spot: bool = False
    what: str = ""  # how the cost line names it; `item` by default

    @property
    def label(self) -> str:
        return f"{self.count} x {self.what or self.item}"


@frozen
class Line:
    """A need, priced (each instance) or not, with why not."""

    need: Need
    price: Price | None
    missing: str = ""  # why the table has no price for it
    regions: tuple[str, ...] = ()  # ANY_REGION: the regions the highest price is from

    @property
    def usd_per_hour(self) -> float | None:
        return None if self.price is None else self.price.usd_per_hour * self.need.count

    def to_dict(self) -> dict[str, Any]:
        need = self.need
        data: dict[str, Any] = {
            "item": need.item,
            "count": need.count,
            "region": need.region,
            "spot": need.spot,
            "usd_per_hour_each": None if self.price is None else self.price.usd_per_hour,
            "usd_per_hour": self.usd_per_hour,
        }
        if self.price is not None:
            data["source"] = self.price.source.to_dict()
            if self.price.region != need.region:
                data["priced_region"] = self.price.region or "not stated by the source"
        if self.regions:
            data["highest_of_regions"] = list(self.regions)
        if self.missing:
            data["missing"] = self.missing
        return data


@frozen
class Cost:
    """A job's cost on one target: its lines, the price per hour of the whole job (None where a price is
    missing) and the bound for `scheduling.timeout` (None without a timeout, or a price)."""

    target: str
    lines: tuple[Line, ...]
    timeout_s: int | None
    extra: tuple[str, ...] = field(default=())  # what the estimate leaves out (disks, storage, egress)
    free: str = ""  # why nothing is billed (a run on this machine); then the price is 0

    @property
    def missing(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(line.missing for line in self.lines if line.missing))

    @property
    def usd_per_hour(self) -> float | None:
        if self.free:
            return 0.0
        if self.missing or not self.lines:
            return None
        return round(sum(line.usd_per_hour or 0.0 for line in self.lines), 6)

    @property
    def bound_usd(self) -> float | None:
        per_hour = self.usd_per_hour
        if per_hour is None or self.timeout_s is None:
            return None
        return round(per_hour * self.timeout_s / 3600, 2)

    def sources(self) -> list[Source]:
        seen: dict[Source, None] = {}
        for line in self.lines:
            if line.price is not None:
                seen.setdefault(line.price.source)
        return list(seen)

    def notes(self) -> tuple[str, ...]:
        """What the render says about the cost, one line each."""
        if self.free:
            return (f"cost on {self.target}: nothing billed ({self.free})",)
        priced = [line for line in self.lines if line.price is not None]
        parts = [f"{line.need.label} at {money(line.price.usd_per_hour)}/h" for line in priced if line.price]
        if self.missing:
            head = f"cost on {self.target}: unknown: " + "; ".join(self.missing)
            if parts:
                head += " (priced: " + ", ".join(parts) + ")"
            return (head,)
        per_hour = self.usd_per_hour or 0.0
        head = f"cost on {self.target}: {money(per_hour)}/h ({', '.join(parts)})"
        if self.bound_usd is not None and self.timeout_s is not None:
            head += f"; at most {money(self.bound_usd)} for scheduling.timeout {hours(self.timeout_s)}"
        else:
            head += "; no bound: the job has no scheduling.timeout"
        for line in self.lines:
            if line.regions:
                head += f"; {line.need.item}: the highest price of {len(line.regions)} regions"
            elif line.price is not None and line.price.region != line.need.region:
                head += f"; {line.need.item}: the source states no region"
        dates = sorted({source.read for source in self.sources()})
        notes = [head + f" (list prices read {', '.join(dates)}; `crosstrain prices` shows their sources)"]
        notes += [f"cost on {self.target} leaves out {what}" for what in self.extra]
        return tuple(notes)

    def to_dict(self) -> dict[str, Any]:
        return {
            "target": self.target,
            "currency": CURRENCY,
            "usd_per_hour": self.usd_per_hour,
            "timeout_s": self.timeout_s,
            "bound_usd": self.bound_usd,
            "missing": list(self.missing),
            "lines": [line.to_dict() for line in self.lines],
            "leaves_out": list(self.extra),
            **({"free": self.free} if self.free else {}),
        }


def money(value: float) -> str:
    return f"${value:,.2f}" if value >= 1 else f"${value:.4f}".rstrip("0").rstrip(".")


def hours(seconds: int) -> str:
    return f"{seconds / 3600:g}h"


class PriceTable:
    """One platform's prices, as its package ships them (or as a refresh rewrote them)."""

    def __init__(self, prices: Iterable[Price], noun: str = "price") -> None:
        self.noun = noun
        self._by: dict[tuple[str, bool], list[Price]] = {}
        for price in prices:
            self._by.setdefault((price.item.lower(), price.spot), []).append(price)

    def __len__(self) -> int:
        return sum(len(v) for v in self._by.values())

    def prices(self) -> list[Price]:
        return [price for group in self._by.values() for price in group]

    def line(self, need: Need) -> Line:
        """The need priced, or why it cannot be. Never a price of another item, tier or (stated) region."""
        kind = "spot" if need.spot else "on-demand"
        found = self._by.get((need.item.lower(), need.spot), [])
        if need.region == ANY_REGION:
            if not found:
                return Line(need, None, f"no {kind} {self.noun} of {need.item} in crosstrain's table")
            top = max(found, key=lambda p: p.usd_per_hour)
            regions = tuple(sorted({p.region for p in found}))
            return Line(need, top, regions=regions if len(regions) > 1 else ())
        exact = [p for p in found if p.region == need.region]
        unstated = [p for p in found if p.region == ""]
        if exact or unstated:
            return Line(need, (exact or unstated)[0])
        elsewhere = sorted({p.region for p in found})
        where = f" (the table has it in {', '.join(elsewhere[:4])}{'...' if len(elsewhere) > 4 else ''})"
        place = f" in {need.region}" if need.region else ""
        return Line(need, None, f"no {kind} {self.noun} of {need.item}{place}" + (where if elsewhere else ""))


def cost(
    target: str, table: PriceTable, needs: Sequence[Need], timeout_s: int | None, extra: Sequence[str] = ()
) -> Cost:
    return Cost(target, tuple(table.line(need) for need in needs), timeout_s, tuple(extra))


def free(target: str, why: str, timeout_s: int | None) -> Cost:
    """The cost of a target that bills nothing (it runs on this machine)."""
    return Cost(target, (), timeout_s, free=why)


def unpriced(target: str, why: str, timeout_s: int | None) -> Cost:
    """A cost the table cannot give at all (the platform bills in a unit crosstrain has no price for)."""
    return Cost(target, (Line(Need(why, 1, ""), None, why),), timeout_s)


def cost_problems(cost: Cost, max_cost: float) -> list[Problem]:
    """Why `scheduling.max_cost` refuses the job: its bound exceeds it, or cannot be known."""
    at = "scheduling.max_cost"
    if cost.missing:
        return [
            Problem(
                at,
                f"cannot be held on {cost.target}: {'; '.join(cost.missing)}",
                "remove scheduling.max_cost for this target, or add the price (`crosstrain prices --refresh`)",
            )
        ]
    if cost.timeout_s is None:
        return [
            Problem(
                at, "bounds the cost for scheduling.timeout, and the job has none", "set scheduling.timeout, e.g. 8h"
            )
        ]
    bound = cost.bound_usd or 0.0
    if bound > max_cost:
        per_hour = cost.usd_per_hour or 0.0
        return [
            Problem(
                at,
                f"the job may cost {money(bound)} on {cost.target} ({money(per_hour)}/h for "
                f"scheduling.timeout {hours(cost.timeout_s)}), more than max_cost {money(max_cost)}",
                "raise scheduling.max_cost, shorten scheduling.timeout, or ask for fewer or smaller machines "
                "(or spot: true)",
            )
        ]
    return []


# -- the shipped data ---------------------------------------------------------------------------------------
def parse(data: Mapping[str, Any]) -> list[Price]:
    """A `prices.json` document: `{"sources": {KEY: {url, read, note?}}, "prices": [{item, region, spot,
    usd_per_hour, source: KEY}]}`. Raises ValueError naming the row that is wrong."""
    sources = {
        key: Source(str(s["url"]), str(s["read"]), str(s.get("note") or "")) for key, s in data["sources"].items()
    }
    prices = []
    for i, row in enumerate(data["prices"]):
        value = float(row["usd_per_hour"])
        if not math.isfinite(value) or value <= 0 or row["source"] not in sources:
            raise ValueError(f"prices[{i}] ({row.get('item')}) has no positive price or no known source")
        prices.append(
            Price(str(row["item"]), str(row.get("region") or ""), bool(row.get("spot")), value, sources[row["source"]])
        )
    return prices


def dump(prices: Iterable[Price]) -> dict[str, Any]:
    """The document `parse` reads, sources named s0, s1, ... in order of first use; rows sorted."""
    keys: dict[Source, str] = {}
    rows = []
    for price in sorted(prices, key=lambda p: (p.item, p.region, p.spot)):
        key = keys.setdefault(price.source, f"s{len(keys)}")
        rows.append(
            {
                "item": price.item,
                "region": price.region,
                "spot": price.spot,
                "usd_per_hour": price.usd_per_hour,
                "source": key,
            }
        )
    return {"currency": CURRENCY, "sources": {k: s.to_dict() for s, k in keys.items()}, "prices": rows}


@cache
def shipped(package: str) -> tuple[Price, ...]:
    """The prices a platform package ships (`<package>/prices.json`); none where it ships no file."""
    try:
        text = shipped_path(package).read_text(encoding="utf-8")
    except (FileNotFoundError, ModuleNotFoundError):
        return ()
    return tuple(parse(json.loads(text)))


def shipped_path(package: str) -> Path:
    """Where a platform package's prices file is, to be rewritten by a refresh: beside its `__init__.py` where the
    package is a folder (crosstrain's are: `importlib.resources` would cost a cold render 5 ms of imports), else
    where `importlib.resources` finds it (a plugin's module, or a package in a zip)."""
    folders = getattr(importlib.import_module(package), "__path__", None)
    if folders and Path(folders[0]).is_dir():
        return Path(folders[0]) / PRICES_FILE
    from importlib import resources

    return Path(str(resources.files(package).joinpath(PRICES_FILE)))


def table(package: str, noun: str = "price") -> PriceTable:
    return PriceTable(shipped(package), noun)
