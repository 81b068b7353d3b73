"""Measure the course against its budgets (DESIGN.md) and print a table. Nothing here is asserted.

    python scripts/benchmark.py                     # import time, cat-model training, every notebook
    python scripts/benchmark.py notebooks/00_tour.ipynb

Each notebook runs in a fresh kernel with the fixed thread counts; its peak memory is the
kernel process's high-water mark of resident memory (VmHWM in /proc/<pid>/status).
"""
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

from execute_notebooks import FIXED_ENV, ROOT, all_notebooks, execute, kernel_env, make_client

os.environ.update(FIXED_ENV)  # before helpers (and torch) are imported, so training runs on one thread


def import_seconds(runs=3):
    """Median time of `import helpers` in a fresh interpreter."""
    code = "import time; t = time.perf_counter(); import helpers; print(time.perf_counter() - t)"
    times = [float(subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=kernel_env(), check=True,
                                  capture_output=True, text=True).stdout) for _ in range(runs)]
    return statistics.median(times)


def cat_training():
    """(seconds, targets met?) for training the cat-world model from scratch, as data/ rebuilds it."""
    from helpers import recipes, worlds
    model, _, seconds = recipes.train_cat(progress=False)
    return seconds, worlds.cat_targets_met(worlds.cat_targets(model, worlds.cat_world()))


def kernel_peak_mb(client):
    with open(f"/proc/{client.km.provisioner.process.pid}/status") as status:
        line = next(line for line in status if line.startswith("VmHWM:"))
    return int(line.split()[1]) / 1024


def run_notebook(path):
    """(seconds, peak MB) for one notebook in a fresh kernel."""
    client = make_client(path)
    peaks = []

    def after_each_cell(**_):  # the kernel is still alive here; its high-water mark only grows
        peaks.append(kernel_peak_mb(client))

    client.on_cell_complete = after_each_cell
    start = time.perf_counter()
    execute(path, client)
    return time.perf_counter() - start, max(peaks, default=0.0)


def main(paths):
    rows = [("import helpers (median of 3)", import_seconds(), None, "< 1 s")]
    seconds, met = cat_training()
    rows.append(("cat model training", seconds, None, "< 5 s; targets " + ("met" if met else "NOT met")))
    total = 0.0
    for path in paths:
        seconds, mb = run_notebook(path)
        total += seconds
        rows.append((Path(path).stem, seconds, mb, "< 20 s, < 1024 MB"))
    rows.append(("series total", total, None, "< 120 s"))

    print(f"{'what':<32}{'seconds':>9}{'peak MB':>9}   budget")
    for what, seconds, mb, budget in rows:
        print(f"{what:<32}{seconds:>9.3f}{'' if mb is None else f'{mb:.0f}':>9}   {budget}")


if __name__ == "__main__":
    main([Path(p) for p in sys.argv[1:]] or all_notebooks())
