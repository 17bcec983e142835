"""Write docs/job.schema.json from the code (`--check`: fail if the committed copy differs)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from crosstrain.schema import job_schema

TARGET = Path(__file__).with_name("job.schema.json")


def main() -> int:
    text = json.dumps(job_schema(), indent=2, ensure_ascii=False) + "\n"
    if "--check" in sys.argv:
        if not TARGET.exists() or TARGET.read_text() != text:
            print(f"{TARGET} is stale: run `python docs/generate.py`", file=sys.stderr)
            return 1
        print(f"{TARGET} is up to date")
        return 0
    TARGET.write_text(text)
    print(f"wrote {TARGET}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
