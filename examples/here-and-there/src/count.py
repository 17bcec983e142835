"""Reads every file of the input folder and writes what this rank counted to the output folder."""

import argparse
import os
from pathlib import Path

parser = argparse.ArgumentParser()
parser.add_argument("--data", type=Path, required=True)
parser.add_argument("--out", type=Path, required=True)
options = parser.parse_args()

rank = int(os.environ["RANK"])
lines = sum(len(path.read_text().splitlines()) for path in sorted(options.data.iterdir()) if path.is_file())
(options.out / f"rank-{rank}.txt").write_text(f"{lines}\n")
print(f"rank {rank} of {os.environ['WORLD_SIZE']}: {lines} lines in {options.data}")
