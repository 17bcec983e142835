"""`python -m tests.corpus.tally`: each case's computed verdict, and the tally per platform."""

from __future__ import annotations

import sys
from collections import Counter

from tests.corpus.cases import PLATFORMS, VERDICTS, load_cases
from tests.corpus.platforms import compare


def main() -> int:
    tally: Counter[tuple[str, str]] = Counter()
    mismatches = 0
    for case in load_cases():
        verdict, found, _ = compare(case)
        same = verdict == case.verdict and (verdict == "REFUSED" or found == case.differences)
        note = "" if same else f"MISMATCH: expected {case.verdict}"
        mismatches += not same
        tally[case.platform, verdict] += 1
        print(f"{case.name:50} {verdict:11} {note}")
    print()
    print(f"{'platform':12}" + "".join(f"{v:>12}" for v in VERDICTS) + f"{'total':>8}")
    for platform in PLATFORMS:
        counts = [tally[platform, v] for v in VERDICTS]
        print(f"{platform:12}" + "".join(f"{c:>12}" for c in counts) + f"{sum(counts):>8}")
    totals = [sum(tally[p, v] for p in PLATFORMS) for v in VERDICTS]
    print(f"{'all':12}" + "".join(f"{c:>12}" for c in totals) + f"{sum(totals):>8}")
    return 1 if mismatches else 0


if __name__ == "__main__":
    sys.exit(main())
