"""Rebuild runs.json: chapter 03's six trainings, with and without the division by √d_k.

    python data/scaling/build.py

Runs helpers.scaling.compute.train_with_and_without_scaling(**SCALING_RUNS) (the widened
cat-world model, d_k = 32, three seeds, 300 full-batch Adam steps each, one CPU thread) and
writes every run's loss at every step and its two measurements before the first update to
runs.json beside this script. About 15 s on one core.
"""
import json
import platform
import time
from pathlib import Path

import torch

from helpers.scaling.compute import SCALING_RUNS, train_with_and_without_scaling


def main():
    start = time.perf_counter()
    runs = train_with_and_without_scaling(**SCALING_RUNS)
    shipped = dict(recipe={**SCALING_RUNS, "seeds": list(SCALING_RUNS["seeds"])},
                   built_with=f"torch {torch.__version__}, {platform.machine()}, "
                              f"{torch.backends.cpu.get_cpu_capability()} kernels",
                   runs=[{**run, "losses": [float(x) for x in run["losses"]], "final": float(run["final"])}
                         for run in runs])
    path = Path(__file__).resolve().parent / "runs.json"
    path.write_text(json.dumps(shipped, indent=1) + "\n")
    print(f"wrote {path} ({len(runs)} runs) in {time.perf_counter() - start:.0f} s")


if __name__ == "__main__":
    main()
