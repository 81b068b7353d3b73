"""Measure the course against its budgets (DESIGN.md) and print a table. Nothing here is asserted.

    python scripts/benchmark.py                     # import time, cat-model training, every notebook
    python scripts/benchmark.py notebooks/00_tour.ipynb
    python scripts/benchmark.py --widgets            # only the widget update times

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


def optimizer_first_use():
    """Seconds of the one-time cost of a process's first torch optimizer (it imports torch._dynamo)."""
    import torch
    start = time.perf_counter()
    torch.optim.Adam([torch.nn.Parameter(torch.zeros(1))])
    return time.perf_counter() - start


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


def widget_explorers():
    """Each chapter's explorer, built as its notebook builds it (chapter 04 with the shipped model only)."""
    from helpers import worlds
    from helpers.ablation import explorer as ch10
    from helpers.geometry import explorer as ch01
    from helpers.heads import explorer as ch05
    from helpers.masking import explorer as ch04
    from helpers.mlp import explorer as ch07
    from helpers.normalization import compute as normalization
    from helpers.normalization import explorer as ch08
    from helpers.positions import explorer as ch06
    from helpers.qkv import explorer as ch02
    from helpers.sampling import explorer as ch09
    from helpers.scaling import explorer as ch03
    from helpers.tour import explorer as ch00
    from helpers.weights import load_cat, load_dragon
    cat, world = load_cat(), worlds.cat_world()
    dragon, dworld = load_dragon(), worlds.dragon_world(n=1)
    return {
        "00": lambda: ch00.explorer(cat, world), "01": ch01.explorer, "02": ch02.explorer,
        "03": ch03.explorer, "04": lambda: ch04.explorer({"shipped": cat}, world),
        "05": lambda: ch05.explorer(model="induction", layer=1, head=0),
        "06": lambda: ch06.explorer(cat, world), "07": lambda: ch07.explorer(cat, world),
        "08": lambda: ch08.explorer(normalization.load_curves()),
        "09": lambda: ch09.explorer(dragon, dworld, "<BOS> dragon drinks"),
        "10": lambda: ch10.explorer(cat, world),
    }


def controls(widget):
    """Every slider, dropdown, checkbox and toggle inside a widget tree."""
    import ipywidgets as w
    kinds = (w.IntSlider, w.FloatSlider, w.FloatLogSlider, w.SelectionSlider, w.Dropdown,
             w.Checkbox, w.ToggleButton, w.ToggleButtons, w.RadioButtons)
    if isinstance(widget, kinds):
        return [widget]
    return [c for child in getattr(widget, "children", ()) for c in controls(child)]


def another_value(control):
    """A different legal value for a control (the next option, or a step along a slider); None if none."""
    if hasattr(control, "options"):
        values = [o[1] if isinstance(o, tuple) else o for o in control.options]
        return values[(values.index(control.value) + 1) % len(values)] if len(values) > 1 else None
    if isinstance(control.value, bool):
        return not control.value
    step = getattr(control, "step", 1) or 1
    return control.value - step if control.value + step > control.max else control.value + step


def built_widgets(make):
    """Call an explorer factory; return the widgets it returned or displayed (stdout swallowed)."""
    import contextlib
    import io
    from unittest import mock

    import IPython.display
    import ipywidgets

    shown = []

    def record(*objs, **_):  # stands in for display(); returns a handle whose update() does nothing
        shown.extend(o for o in objs if isinstance(o, ipywidgets.Widget))
        return mock.MagicMock()

    with contextlib.redirect_stdout(io.StringIO()), mock.patch.object(IPython.display, "display", record):
        returned = make()
    return shown + ([returned] if returned is not None else [])


def widget_update_ms(make, repeats=5):
    """Median and worst milliseconds of one update (a control moved, its figure redrawn), over all
    controls, and the median CPU milliseconds of the kernel process (steadier on a loaded machine)."""
    import contextlib
    import io
    from unittest import mock

    import IPython.display

    found = [c for w in built_widgets(make) for c in controls(w) if another_value(c) is not None]
    times, cpu = [], []
    with contextlib.redirect_stdout(io.StringIO()), mock.patch.object(IPython.display, "display", mock.MagicMock()):
        for control in found:
            for _ in range(repeats):
                value = another_value(control)
                start, start_cpu = time.perf_counter(), time.process_time()
                control.value = value          # observers run here, synchronously
                cpu.append((time.process_time() - start_cpu) * 1000)
                times.append((time.perf_counter() - start) * 1000)
    return statistics.median(times), max(times), len(times), statistics.median(cpu)


def main(paths, widgets_only=False):
    if widgets_only:
        return print_widgets()
    rows = [("import helpers (median of 3)", import_seconds(), None, "< 1 s")]
    rows.append(("first torch optimizer (one-time)", optimizer_first_use(), None, "paid once per process"))
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
    print()
    print_widgets()


def print_widgets():
    """One row per chapter: how long moving one of its explorer's controls takes."""
    print(f"{'widget update (ms)':<32}{'median':>9}{'worst':>9}{'updates':>9}{'CPU med':>9}   budget")
    for chapter, make in widget_explorers().items():
        median, worst, n, cpu = widget_update_ms(make)
        print(f"{'chapter ' + chapter:<32}{median:>9.1f}{worst:>9.1f}{n:>9}{cpu:>9.1f}   < 50 ms (in-kernel < 20 ms)")


if __name__ == "__main__":
    args = [a for a in sys.argv[1:] if a != "--widgets"]
    main([Path(p) for p in args] or all_notebooks(), widgets_only="--widgets" in sys.argv)
