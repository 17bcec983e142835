"""Write each platform's create-body schema (its package's `schema.json`) from the platform's own SDK definitions.

`python -m crosstrain.schemas.generate` rewrites them; `--check` fails when a committed copy differs from what the
installed (pinned) SDKs give. `targets.<target>.patch` is validated against these at render, where no cloud SDK may
be imported, so the schemas are derived once and shipped as package data:

each platform package's `schema.py` (`generate()`) derives its own from the platform's SDK, and says how.

A patch may not remove a required field, nor add a list element without one (`crosstrain.patch`).

The format (`crosstrain.patch` reads it): `{"root": NAME, "types": {NAME: NODE}}`, a NODE being `{"$ref": NAME}`,
`{"type": "object", "properties": {...}, "values": NODE, "read_only": [...], "required": [...], "discriminator":
{"property": P, "variants": {VALUE: NAME}}}`, `{"type": "array", "items": NODE}`, `{"type": "string", "enum": [...],
"format": F}` (F: int64, duration, iso-duration, timestamp, bytes), `{"type": "integer"|"number"|"boolean"|"any"}`.
"""

from __future__ import annotations

import importlib
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

Node = dict[str, Any]


def sdk_version(dist: str) -> str:
    from importlib import metadata  # here: the render path imports this module for `Node` alone

    return f"{dist} {metadata.version(dist)}"


def unreachable(found: dict[str, Node], root: str) -> set[str]:
    seen: set[str] = set()

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            ref = node.get("$ref")
            if isinstance(ref, str) and ref not in seen:
                seen.add(ref)
                walk(found[ref])
            for key, value in node.items():
                if key == "variants":
                    for name in value.values():
                        walk({"$ref": name})
                else:
                    walk(value)
        elif isinstance(node, list):
            for item in node:
                walk(item)

    walk({"$ref": root})
    return set(found) - seen


def text_of(schema: Node) -> str:
    return json.dumps(schema, indent=1, sort_keys=True, ensure_ascii=False) + "\n"


def schema_packages() -> dict[str, str]:
    """Each built-in platform that takes a patch -> its package, which holds `schema.py` and `schema.json`."""
    from crosstrain.registry import BUILTIN_BACKENDS, get_backend_class

    found = {name: get_backend_class(name).patch_schema for name in BUILTIN_BACKENDS}
    return {name: package for name, package in found.items() if package}


def main(argv: list[str]) -> int:
    from importlib import resources

    check = "--check" in argv
    stale = []
    for package in schema_packages().values():
        generate: Callable[[], Node] = importlib.import_module(f"{package}.schema").generate
        target = Path(str(resources.files(package).joinpath("schema.json")))
        text = text_of(generate())
        if check:
            if not target.exists() or target.read_text() != text:
                stale.append(str(target))
        else:
            target.write_text(text)
            print(f"wrote {target}")
    if stale:
        print(f"stale: {', '.join(stale)}; run `python -m crosstrain.schemas.generate`", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
