"""Measure the course against its budgets (DESIGN.md, "Budgets") and print every figure of the
ruling beside its budget, as ratios from one run where the machine's speed cancels. Nothing here
is asserted.

    python scripts/benchmark.py                     # every figure below, the chapters as learners open them
    python scripts/benchmark.py notebooks/00_tour.ipynb notebooks/02_qkv_by_hand.ipynb
    python scripts/benchmark.py --widgets            # only the explorers' in-kernel update times
    python scripts/benchmark.py --browser            # the explorers end to end in JupyterLab in headless Chromium,
                                                     # with what JupyterLab's kernel spent on each update
    python scripts/benchmark.py --browser --no-prefetch   # the same with no pictures sent ahead:
                                                     # every new value a round trip to the kernel
    python scripts/benchmark.py --cells 5            # where each chapter's time goes: its 5 slowest cells
    python scripts/benchmark.py --training           # only the capstone's training step against a plain loop

How each figure is measured:

* **The floor**: a notebook whose one cell imports torch and matplotlib's pyplot (the least a
  chapter with figures runs), executed headless in a fresh kernel like every chapter (nbclient,
  the fixed thread counts of scripts/execute_notebooks.py, wall-clock time from the kernel's
  start to its shutdown). It runs before the first chapter and after every chapter, so each
  chapter lies between two floors measured just before and just after it.
* **Each chapter**: the same headless execution, a fresh kernel, wall-clock; its ratio is its
  time over the mean of its two neighbouring floors. Budget 2.0 floors; 2.5 for the chapters that
  train or time something live (01, 08, 09) and for chapter 12 outside its live run (the code
  cells whose metadata says ``"course": {"live_run": true}``, timed cell by cell and left out of
  its figure; their own budget is 60 s). Peak memory: the kernel's high-water mark of resident
  memory (VmHWM), budget 1 GB, 1.5 GB for the chapters that load the real model and for the capstone (12).
* **The series**: the chapters' times summed over the sum of their neighbouring floors' means
  (chapter 12's live run left out); budget 1.8.
* **Chapter 02 against LLMs-from-scratch's chapter 3 notebook** (ch03/01_main-chapter-code/ch03.ipynb
  of github.com/rasbt/LLMs-from-scratch), the same kind of lesson written as a plain notebook:
  when a copy of it is on this machine ($COURSE_PEER_CH03, the path of that .ipynb), both are
  executed the same way, alternating (peer, 02, peer, 02), and the ratio is 02's total over the
  peer's; budget 1.0. The benchmark fetches nothing: without the copy it says it did not measure.
* **import helpers**: the median of 3 fresh interpreters timing the import; budget 1 s.
* **The real model**: each in a fresh interpreter that has imported torch. The first load on a
  machine: with an empty cache folder ($COURSE_CACHE pointed at a new temporary folder), the
  GGUF file read, dequantised and the float32 cache written; budget 1.5 s. Beside it, what the
  machine alone takes to fill a new file of the cache's size through a shared mapping, as the
  cache is written (a virtual machine can be slow to hand out memory it has never touched, and
  the first load cannot be faster than that). A later load: a second
  interpreter with the same cache folder, which maps the weights; budget 0.3 s. The tokenizer
  is built on its first use (its seconds are printed beside, outside the load). A 32-token
  forward pass (``helpers.real.compute.forward_seconds``); budget 0.5 s.
* **The cat model's training**: ``helpers.recipes.train_cat`` from scratch in this process, one
  thread, timed between two floors like a chapter; budget 2 floors. Beside it, whether the rebuild
  kept the shipped model's behaviour (``recipes.cat_rebuild_kept``: another CPU gets other weights,
  whose weakest copula type may sit under the course's 0.9 target that the shipped model meets).
* **The capstone's training step**: tokens per second of the course's loop
  (``helpers.gpt.train.train`` on the course's Transformer, the shipped model's config, batch and
  context, ``stop_after`` steps; its own count leaves the evaluations out) against a plain PyTorch
  loop of the same configuration written inline here (``PlainGPT``: nn.Linear, nn.LayerNorm, the same
  rotary turn, torch's fused attention, no trace, no switches; the same AdamW, windows, clipping and
  schedule), in this process, one thread, alternating (course, plain, course, plain, ...), 3 rounds of
  ``TRAINING_STEPS`` steps after one warm-up round each; the ratio is the plain loop's median over the
  course's. Budget 1.1. The peak memory of the process is printed beside.
* **Explorers in the kernel**: each chapter's explorer built as its notebook builds it; every
  control moved to another value 5 times and the redraw timed (compute and picture, nothing
  sent); the median, worst and CPU median in ms. Budget: median 20 ms for the course's own
  models, 50 ms for the real model (chapter 11). ``--browser`` times them end to end in a page.

The machine is shared and noisy: the ratios are the figures to read; say how loaded it was
(the load average is printed at the start and the end).
"""
import math
import os
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path

from browser import NOTEBOOK, kernel_eval, settle
from execute_notebooks import FIXED_ENV, ROOT, execute, kernel_env, learner_notebooks, make_client

os.environ.update(FIXED_ENV)  # before helpers (and torch) are imported, so training runs on one thread


def import_seconds(runs=3):
    """Median time of `import helpers` in a fresh interpreter."""
    code = "import time; t = time.perf_counter(); import helpers; print(time.perf_counter() - t)"
    times = [float(subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=kernel_env(), check=True,
                                  capture_output=True, text=True).stdout) for _ in range(runs)]
    return statistics.median(times)


def cat_training():
    """(seconds, figures) for training the cat-world model from scratch, as data/ rebuilds it."""
    from helpers import recipes, worlds
    model, _, seconds = recipes.train_cat(progress=False)
    return seconds, worlds.cat_targets(model, worlds.cat_world())


REAL_MODEL = ("import time, torch; torch.set_num_threads(1); t = time.perf_counter(); "
              "from helpers.real import compute as real; model, tok = real.load(); loaded = time.perf_counter(); "
              "tok.encode('The capital of France is'); "
              "print(loaded - t, time.perf_counter() - loaded, real.forward_seconds(model, 32))")


# What the first load cannot beat: a fresh interpreter fills a new file of the cache's size with
# floats through a shared mapping (the way the cache is written), so the machine's own cost of
# new pages in a file (a virtual machine may hand out never-touched memory slowly) is measured beside it.
FILL_PAGES = ("import mmap, os, sys, time, numpy as np; path, n = sys.argv[1], int(sys.argv[2]); "
              "t = time.perf_counter(); fd = os.open(path, os.O_RDWR | os.O_CREAT); os.ftruncate(fd, n); "
              "m = mmap.mmap(fd, n, flags=mmap.MAP_SHARED | getattr(mmap, 'MAP_POPULATE', 0)); "
              "a = np.frombuffer(m, dtype='<f4'); a[:] = 1.0; del a; m.close(); os.close(fd); "
              "print(time.perf_counter() - t); os.unlink(path)")


TRAINING_STEPS = 6
TRAINING_STEP_BUDGET = 1.1


def plain_gpt(cfg):
    """A minimal GPT of ``cfg`` (a helpers.model.Config) in plain PyTorch: what the course's
    Transformer computes in a training step, without its trace, switches and checks."""
    import torch
    import torch.nn.functional as F
    from torch import nn

    from helpers.model import rotate_pairs

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            d = cfg.d_model
            self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
            self.qkv, self.out = nn.Linear(d, 3 * d), nn.Linear(d, d)
            self.up, self.down = nn.Linear(d, cfg.d_ff), nn.Linear(cfg.d_ff, d)
            self.drop = nn.Dropout(cfg.dropout)

        def forward(self, h):
            B, T, d = h.shape
            q, k, v = (t.view(B, T, cfg.n_heads, -1).transpose(1, 2) for t in self.qkv(self.ln1(h)).split(d, dim=-1))
            if cfg.positions == "rotary":
                q, k = rotate_pairs(q, 0), rotate_pairs(k, 0)
            a = F.scaled_dot_product_attention(q, k, v, is_causal=True)   # dropout on the residual writes only, as the course's
            h = h + self.drop(self.out(a.transpose(1, 2).reshape(B, T, d)))
            return h + self.drop(self.down(F.gelu(self.up(self.ln2(h)))))

    class PlainGPT(nn.Module):
        def __init__(self):
            super().__init__()
            self.E = nn.Embedding(cfg.vocab_size, cfg.d_model)
            self.blocks = nn.Sequential(*(Block() for _ in range(cfg.n_layers)))
            self.ln, self.drop = nn.LayerNorm(cfg.d_model), nn.Dropout(cfg.dropout)

        def forward(self, ids):
            return self.ln(self.blocks(self.drop(self.E(ids)))) @ self.E.weight.T

    torch.manual_seed(0)
    return PlainGPT()


def plain_steps(model, train_ids, steps, batch, context, lr, warmup, min_lr, weight_decay, clip, seed, **_):
    """Tokens per second of ``steps`` plain training steps (the course loop's step, written out)."""
    import torch
    import torch.nn.functional as F

    from helpers.gpt.corpus import windows
    from helpers.gpt.train import BETAS, learning_rate

    decay = [p for p in model.parameters() if p.dim() >= 2]
    rest = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([dict(params=decay, weight_decay=weight_decay), dict(params=rest, weight_decay=0.0)],
                            lr=lr, betas=BETAS)
    generator = torch.Generator().manual_seed(seed)
    model.train()
    start = time.perf_counter()
    for step in range(TRAINING_STEPS):
        x, y = windows(train_ids, batch, context, generator)
        logits = model(x)
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
        for group in opt.param_groups:
            group["lr"] = learning_rate(step, lr, warmup, steps, min_lr)
        opt.step()
        loss.item()
    return TRAINING_STEPS * batch * context / (time.perf_counter() - start)


def training_step_ratio(rounds=3):
    """(course tokens/s, plain tokens/s, plain/course ratio of the medians, peak MB), alternating."""
    import resource

    from helpers.gpt import corpus, shipped
    from helpers.gpt.train import train
    from helpers.model import Transformer

    text = corpus.load_text()
    tokenizer = corpus.CharTokenizer(text)
    train_ids, val_ids = (tokenizer.encode(part) for part in corpus.split(text))
    recipe = dict(shipped.TRAINING, eval_every=10 ** 6, eval_batches=1)

    def course():
        model = Transformer(shipped.CONFIG, seed=0, init=shipped.INIT)
        return train(model, train_ids, val_ids, **recipe, stop_after=TRAINING_STEPS)[-1]["tokens_per_second"]

    def plain():
        return plain_steps(plain_gpt(shipped.CONFIG), train_ids, **recipe)

    course(), plain()   # warm-up: first calls, allocator, AdamW's imports
    ours, theirs = [], []
    for _ in range(rounds):
        ours.append(course())
        theirs.append(plain())
    mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return statistics.median(ours), statistics.median(theirs), statistics.median(theirs) / statistics.median(ours), mb


def add_training_step(table):
    ours, theirs, ratio, mb = training_step_ratio()
    table.add("capstone training step: course / plain loop", None,
              f"{ratio:.2f} x ({ours:,.0f} vs {theirs:,.0f} tok/s)", f"<= {TRAINING_STEP_BUDGET:g} x",
              ratio <= TRAINING_STEP_BUDGET, mb=mb)


def real_model():
    """{first, later: (seconds to load the real model, seconds of the tokenizer's first use),
    forward: seconds of one 32-token forward pass, fill: (seconds, bytes) of FILL_PAGES for a file
    of the cache's size, left out when no cache was written}, each in a fresh interpreter: the first load with an empty cache folder, the
    later one with the cache it wrote."""
    import tempfile

    found = {}
    with tempfile.TemporaryDirectory(prefix="course-cache-") as cache:
        for run in ("first", "later"):
            out = subprocess.run([sys.executable, "-c", REAL_MODEL], cwd=ROOT, env={**kernel_env(), "COURSE_CACHE": cache},
                                 check=True, capture_output=True, text=True).stdout.split()
            found[run] = float(out[0]), float(out[1])
            found["forward"] = float(out[2])
        size = sum(os.path.getsize(os.path.join(root, name)) for root, _, names in os.walk(cache)
                   for name in names if name.endswith(".f32"))
        if size:   # none when the first load could not write its cache (it then says nothing)
            found["fill"] = float(subprocess.run([sys.executable, "-c", FILL_PAGES, os.path.join(cache, "fill"),
                                                  str(size)], check=True, capture_output=True, text=True).stdout), size
    return found


def kernel_peak_mb(client):
    with open(f"/proc/{client.km.provisioner.process.pid}/status") as status:
        line = next(line for line in status if line.startswith("VmHWM:"))
    return int(line.split()[1]) / 1024


def floor_notebook():
    """The floor every chapter pays: a notebook whose one cell imports torch and matplotlib's pyplot."""
    import nbformat
    return nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("import torch\nimport matplotlib.pyplot as plt")])


# The browser's floor: an explorer whose render only hands back the next of two pictures
# drawn beforehand (chapter 04's size in pixels and about its size in bytes), so an update
# costs the round trip through the kernel and JupyterLab and the picture's replacement in
# the page, and no computing.
FLOOR_EXPLORER = """import itertools

import ipywidgets as widgets
import numpy as np
from helpers.explorer import new_figure, png, show

pictures = []
for seed in (0, 1):
    fig = new_figure((7.6, 6.9))
    ax = fig.add_subplot()
    fig.colorbar(ax.imshow(np.random.default_rng(seed).random((10, 10)), cmap="Blues"), ax=ax)
    ax.set_xticks(range(10), [f"word {i}" for i in range(10)], rotation=45, ha="right")
    ax.set_title(f"picture {seed}")
    pictures.append(png(fig))
turn = itertools.cycle((1, 0))
print([len(p) for p in pictures], "bytes")
show({"t": widgets.IntSlider(value=0, min=0, max=100, description="t")}, lambda t: pictures[next(turn)])"""


def floor_explorer_notebook():
    """A notebook whose one cell shows the floor explorer (FLOOR_EXPLORER)."""
    import nbformat
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(FLOOR_EXPLORER)])
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    return nb


def run_notebook(path, nb=None, cells=None):
    """(seconds, peak MB, seconds of its live run) for one notebook (or `nb` run as if it lay at
    `path`) in a fresh kernel; the live run is its code cells marked ``"course": {"live_run": true}``.
    cells, if a list, receives (seconds, cell index, first line) for every code cell run."""
    client = make_client(path, nb)
    peaks, started, live = [], [0.0], [0.0]

    def before_each_cell(**_):
        started[0] = time.perf_counter()

    def after_each_cell(cell, cell_index, **_):  # the kernel is still alive here; its high-water mark only grows
        seconds = time.perf_counter() - started[0]
        peaks.append(kernel_peak_mb(client))
        if cell.metadata.get("course", {}).get("live_run"):
            live[0] += seconds
        if cells is not None:
            cells.append((seconds, cell_index, cell.source.split("\n")[0]))

    client.on_cell_start, client.on_cell_executed = before_each_cell, after_each_cell
    start = time.perf_counter()
    execute(path, client)
    return time.perf_counter() - start, max(peaks, default=0.0), live[0]


def attempt(run, *args):
    """run(*args), or the exception it raised (a chapter that fails is reported, and the run goes on)."""
    try:
        return run(*args)
    except Exception as error:
        return error


def floor_seconds(path):
    """One floor (floor_notebook), executed as if it lay beside `path`."""
    return run_notebook(path, floor_notebook())[0]


def alternating(path, runs):
    """[floor, run 1, floor, run 2, ..., floor]: run(...) for each of `runs`, each between two floors
    (the one after a run is the one before the next). Returns (floors, results)."""
    floors, results = [floor_seconds(path)], []
    for run in runs:
        results.append(run())
        floors.append(floor_seconds(path))
    return floors, results


def print_cells(paths, n):
    """Where each chapter's time goes: each chapter between two floors, its total, its ratio and its n slowest cells."""
    floor = floor_seconds(paths[0])
    for path in paths:
        cells = []
        seconds, _, _ = run_notebook(path, cells=cells)
        after = floor_seconds(path)
        own = sum(c[0] for c in cells)
        print(f"{Path(path).stem}: {seconds:.2f} s = {seconds / ((floor + after) / 2):.2f} floors of {floor:.2f} and "
              f"{after:.2f} s (its cells {own:.2f} s, the kernel's start and stop {seconds - own:.2f} s)")
        for cell_seconds, index, first_line in sorted(cells, reverse=True)[:n]:
            print(f"  {cell_seconds:6.2f} s  cell {index:>3}  {first_line[:80]}")
        floor = after


def widget_explorers():
    """Each chapter's explorer, built as its notebook builds it (chapter 04 with the shipped model only),
    after the notebooks' setup (one thread, seeds, the course's plot style)."""
    import helpers
    helpers.setup_notebook()
    return explorer_factories()


def explorer_factories():
    """{chapter: a function that builds and shows its explorer and returns it}, as the notebooks
    build them (chapter 04 with the shipped model only). tests/test_explorer.py uses them too."""
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
    from helpers.real import compute as real
    from helpers.real import explorer as ch11
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
        "11": lambda: ch11.explorer(*real.load()),
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
    if hasattr(control, "base"):   # a log slider: min, max and step are exponents of its base
        exponent = math.log(control.value, control.base)
        return control.base ** (exponent - step if exponent + step > control.max else exponent + step)
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


CAPSTONE = "12"   # the chapter that trains the learner's own GPT: DESIGN.md's 1.5 GB, as for the real model


def memory_budget_mb(path):
    """1,536 MB for a notebook whose code imports helpers.real, or for the capstone; 1,024 MB else (DESIGN.md:
    "no notebook above 1 GB (1.5 GB with the real model or the capstone)")."""
    import nbformat
    real = any("helpers.real" in cell.source for cell in nbformat.read(path, as_version=4).cells
               if cell.cell_type == "code")
    return 1536 if real or Path(path).name.startswith(CAPSTONE + "_") else 1024


# Chapters that train or time something live: 2.5 floors (12: outside its live run); every other 2.0.
LIVE_CHAPTERS = {"01": 2.5, "08": 2.5, "09": 2.5, "12": 2.5}
CHAPTER_BUDGET, SERIES_BUDGET, PEER_BUDGET, TRAINING_BUDGET = 2.0, 1.8, 1.0, 2.0
IMPORT_BUDGET, FIRST_LOAD_BUDGET, LOAD_BUDGET, FORWARD_BUDGET = 1.0, 1.5, 0.3, 0.5
LIVE_RUN_BUDGET = 60.0
PEER_ENV = "COURSE_PEER_CH03"   # the path of LLMs-from-scratch's ch03/01_main-chapter-code/ch03.ipynb


class Table:
    """Rows of (what, seconds, peak MB, figure, budget, met), each printed as soon as it is measured."""

    def __init__(self):
        print(f"{'what':<44}{'seconds':>9}{'peak MB':>9}  {'figure':<34}{'budget':<34}met", flush=True)

    def add(self, what, seconds=None, figure="", budget="", met=None, mb=None):
        shown = "" if seconds is None else f"{seconds:.3f}"
        verdict = "" if met is None else "yes" if met else "NO"
        print(f"{what:<44}{shown:>9}{'' if mb is None else f'{mb:.0f}':>9}  {figure:<34}{budget:<34}{verdict}", flush=True)


def load_average():
    try:
        return " ".join(open("/proc/loadavg").read().split()[:3])
    except OSError:
        return "unknown"


def main(paths, widgets_only=False):
    if widgets_only:
        return print_widgets()
    print(f"load average (1, 5, 15 min) at the start: {load_average()} on {os.cpu_count()} cores", flush=True)
    table = Table()
    seconds = import_seconds()
    table.add("import helpers (median of 3)", seconds, f"{seconds:.2f} s", f"< {IMPORT_BUDGET:g} s", seconds < IMPORT_BUDGET)
    real = real_model()
    (first, first_tok), (later, later_tok) = real["first"], real["later"]
    table.add("real model: first load (writes the cache)", first, f"{first:.2f} s (+{first_tok:.2f} tok)",
              f"<= {FIRST_LOAD_BUDGET:g} s", first <= FIRST_LOAD_BUDGET)
    if "fill" in real:
        fill, size = real["fill"]
        table.add(f"  this machine alone: {size / 2**20:,.0f} MiB of new file pages", fill, f"{fill:.2f} s",
                  "what the first load cannot beat")
    else:
        table.add("  this machine alone: not measured (no cache was written)")
    table.add("real model: a later load (maps the cache)", later, f"{later:.2f} s (+{later_tok:.2f} tok)",
              f"<= {LOAD_BUDGET:g} s", later <= LOAD_BUDGET)
    table.add("real model: 32-token forward pass", real["forward"], f"{real['forward']:.2f} s",
              f"<= {FORWARD_BUDGET:g} s", real["forward"] <= FORWARD_BUDGET)

    floors, results = alternating(paths[0], [cat_training] + [lambda path=path: attempt(run_notebook, path) for path in paths])
    (training, figures), chapters = results[0], results[1:]
    around = lambda i: (floors[i] + floors[i + 1]) / 2   # the floors either side of run i
    ratio = training / around(0)
    from helpers import recipes, worlds   # (imported by cat_training already)
    kept, weakest = recipes.cat_rebuild_kept(figures), figures["copula_min_p_class"]
    met = "the course's targets met" if worlds.cat_targets_met(figures) else "behaviour kept" if kept else "NOT kept"
    table.add(f"cat model training ({met}; weakest copula type {weakest:.3f})", training, f"{ratio:.2f} floors",
              f"<= {TRAINING_BUDGET:g} floors, behaviour kept", ratio <= TRAINING_BUDGET and kept)
    add_training_step(table)
    table.add("floors (min / median / max of "
              f"{len(floors)})", statistics.median(floors), f"{min(floors):.2f} / {max(floors):.2f} s",
              "the unit of the ratios")
    total = total_floors = 0.0
    ran = 0
    for i, (path, result) in enumerate(zip(paths, chapters), 1):
        if isinstance(result, Exception):
            last = re.sub(r"\x1b\[[0-9;]*m", "", str(result)).strip().splitlines()[-1]   # without the traceback's colours
            table.add(Path(path).stem, None, "did not run: " + last[:60], "", False)
            continue
        seconds, mb, live = result
        chapter = Path(path).stem[:2]
        budget = LIVE_CHAPTERS.get(chapter, CHAPTER_BUDGET)
        counted = seconds - live
        ratio = counted / around(i)
        memory = memory_budget_mb(path)
        outside = f" outside its {live:.0f} s live run" if live else ""
        table.add(Path(path).stem, counted, f"{ratio:.2f} floors{outside}",
                  f"<= {budget:g} floors, < {memory} MB", ratio <= budget and mb < memory, mb=mb)
        if live:
            table.add(f"  {Path(path).stem}: its live run", live, f"{live:.1f} s", f"<= {LIVE_RUN_BUDGET:g} s",
                      live <= LIVE_RUN_BUDGET)
        total, total_floors, ran = total + counted, total_floors + around(i), ran + 1
    ratio = total / max(total_floors, 1e-9)
    table.add(f"series ({ran} of {len(paths)} chapters)", total, f"{ratio:.2f} x its floors",
              f"<= {SERIES_BUDGET:g} x the sum of its floors", ratio <= SERIES_BUDGET)
    peer(paths, table)
    print()
    print_widgets()
    print(f"\nload average (1, 5, 15 min) at the end: {load_average()}")


def peer(paths, table):
    """Chapter 02 against LLMs-from-scratch's chapter 3 notebook, alternating (peer, 02, peer, 02), if a copy is here."""
    ours = next((Path(path) for path in paths if Path(path).stem.startswith("02_")), None)
    copy = os.environ.get(PEER_ENV)
    what = "chapter 02 / LLMs-from-scratch ch03.ipynb"
    if ours is None:
        return
    if not copy or not Path(copy).is_file():
        table.add(what, None, "not measured", f"<= {PEER_BUDGET:g}", None)
        print(f"chapter 02 against LLMs-from-scratch's chapter 3 notebook: NOT MEASURED, no copy of it on this machine "
              f"(${PEER_ENV} {'is not set' if not copy else f'names {copy}, which is not a file'}). Set it to the path of "
              "ch03/01_main-chapter-code/ch03.ipynb from a clone of github.com/rasbt/LLMs-from-scratch; the "
              "benchmark fetches nothing.")
        return
    import nbformat
    peer_nb = nbformat.read(copy, as_version=4)
    times = {"peer": 0.0, "ours": 0.0}
    for _ in range(2):
        times["peer"] += run_notebook(Path(copy), peer_nb)[0]
        times["ours"] += run_notebook(ours)[0]
    ratio = times["ours"] / times["peer"]
    table.add(what, times["ours"] / 2, f"{ratio:.2f} (peer {times['peer'] / 2:.2f} s)", f"<= {PEER_BUDGET:g}",
              ratio <= PEER_BUDGET)


def print_widgets():
    """One row per chapter: how long moving one of its explorer's controls takes."""
    print(f"{'explorer update in the kernel (ms)':<36}{'median':>9}{'worst':>9}{'updates':>9}{'CPU med':>9}   "
          f"{'budget':<20}met")
    for chapter, make in widget_explorers().items():
        median, worst, n, cpu = widget_update_ms(make)
        budget = 50 if chapter == "11" else 20
        print(f"{'chapter ' + chapter:<36}{median:>9.1f}{worst:>9.1f}{n:>9}{cpu:>9.1f}   "
              f"{f'median <= {budget} ms':<20}{'yes' if median <= budget else 'NO'}"
              + ("   (the real model)" if chapter == "11" else ""))


# ---------------------------------------------------------------- end to end, in a browser

# In the page: note the time of every input event the explorer's cell receives (the key
# press, pointer down or choice the browser delivers, not the moment the driver was
# asked for it), and every time its picture is replaced wait until the new image is decoded
# and the next frame starts (it is on screen then), and note that time too.
WATCH = """el => {
    const key = () => {
        const img = el.querySelector('img');
        const src = img ? (img.getAttribute('src') || '') : '';
        return src.length + src.slice(-48);
    };
    el.__key = key;
    el.__painted = [];
    el.__inputs = [];
    el.__values = [];
    if (el.__watching) return;
    el.__watching = true;
    for (const kind of ['keydown', 'pointerdown', 'input', 'change'])   // e.timeStamp: when it happened
        el.addEventListener(kind, e => el.__inputs.push(e.timeStamp), true);
    for (const readout of el.querySelectorAll('.widget-readout'))   // a slider's number changed
        new MutationObserver(() => el.__values.push(performance.now()))
            .observe(readout, {subtree: true, childList: true, characterData: true});
    new MutationObserver(() => {
        const img = el.querySelector('img');
        if (!img) return;
        const now = key();
        img.decode().catch(() => null).then(() => requestAnimationFrame(() => {
            if (key() !== now) return;                 // replaced again before it was shown
            const last = el.__painted.length ? el.__painted[el.__painted.length - 1][1] : el.__before;
            if (last !== now) el.__painted.push([performance.now(), now, img.dataset.from || 'kernel']);
        }));
    }).observe(el, {subtree: true, childList: true, attributes: true, attributeFilter: ['src']});
}"""
LATE = "el => { const f = el.querySelector('.course-explorer-frames'); return (f && f.dataset.late) || '0'; }"
RESET = "el => { el.__painted = []; el.__inputs = []; el.__values = []; el.__before = el.__key(); }"
SEEN = "el => [el.__inputs, el.__painted, el.__values]"


def explorer_cells(page):
    """The code cells that hold an explorer: widget controls and a picture."""
    cells = page.locator(".jp-CodeCell", has=page.locator(".widget-box"))
    return [cells.nth(i) for i in range(cells.count()) if cells.nth(i).locator("img").count()]


def one_step_actions(cell):
    """(name, act) for each control of an explorer: one click, choice or key press changes one value."""
    actions = []
    for kind, selector in (("toggle", "button.widget-toggle-button, .widget-toggle-buttons button"),
                           ("checkbox", ".widget-checkbox input"), ("slider", ".widget-slider .noUi-handle")):
        found = cell.locator(selector)
        for i in range(found.count()):
            control = found.nth(i)
            act = (lambda c=control: (c.focus(), c.press("ArrowRight"))) if kind == "slider" else control.click
            actions.append((kind, act))
    selects = cell.locator(".widget-dropdown select")
    for i in range(selects.count()):
        select = selects.nth(i)
        options = select.locator("option").all_inner_texts()

        def choose(s=select, options=options):
            now = s.input_value()
            values = s.evaluate("el => Array.from(el.options).map(o => o.value)")
            s.select_option(values[(values.index(now) + 1) % len(values)])
        if len(options) > 1:
            actions.append(("dropdown", choose))
    return actions


def timed(page, cell, act, quiet_ms=1500, timeout_ms=10_000):
    """Run act(); return (ms from its first input event (key press, pointer down, choice) to
    the last new picture painted, ms from the last change of a slider's number to that picture
    (None if no number changed; negative if the last number was never drawn), pictures
    painted, where the last came from: 'page' if the page held it, 'kernel' if it was drawn
    for this move), or None if no input arrived or no new picture came."""
    handle = cell.element_handle()
    page.evaluate(RESET, handle)
    act()
    waited = 0
    while waited < timeout_ms:
        page.wait_for_timeout(100)
        waited += 100
        painted = page.evaluate(SEEN, handle)[1]
        if painted and page.evaluate("performance.now()") - painted[-1][0] > quiet_ms:
            break
    inputs, painted, values = page.evaluate(SEEN, handle)
    if not (inputs and painted):
        return None
    return (painted[-1][0] - inputs[0], (painted[-1][0] - values[-1]) if values else None, len(painted),
            painted[-1][2])


def drag(page, cell, steps=15, px=6):
    """Drag the first slider of an explorer by steps × px, about one move per frame as a hand
    drags; (ms from the slider's last new number to the last picture, pictures painted) or None.
    A backlog of stale redraws would show as a long wait after the slider stopped."""
    handle = cell.locator(".widget-slider .noUi-handle").first
    box = handle.bounding_box()
    x, y = box["x"] + box["width"] / 2, box["y"] + box["height"] / 2

    def act():
        page.mouse.move(x, y)
        page.mouse.down()
        for i in range(1, steps + 1):
            page.mouse.move(x + i * px, y)
            page.wait_for_timeout(16)
    seen = timed(page, cell, act)
    page.mouse.up()
    return None if seen is None or seen[1] is None else seen[1:3]


def browser_updates(paths, *, moves=5, prefetch=True):
    """Per chapter, after the floor explorer's row: (name, ms from input to painted picture
    for each single move, the slider-drag figures, (wall ms, CPU ms) the kernel spent on each
    single move's update, or None if that could not be read, how many single moves the page
    answered from its own pictures, ms waited for the kernel to send its likely pictures
    before the single moves and before the drag, how often that wait timed out, the first
    moves (ms, where the picture came from: made before any waiting, a learner who moves
    at once), the CPU ms of each picture the kernel drew ahead, or None, how many pictures the
    page swapped in before their decode finished (frames.js: after a second)).

    prefetch=False: the kernel sends no pictures ahead (every new value is a round trip); the
    floor explorer never does, so its row is the round trip with nothing computed."""
    import tempfile

    import nbformat
    from browser import chromium, lab_server, open_and_run

    rows = []
    with tempfile.TemporaryDirectory() as home, lab_server(home) as lab, chromium() as browser:
        floor = Path(home) / "notebooks" / "floor_explorer.ipynb"
        nbformat.write(floor_explorer_notebook(), floor)
        for path in [floor, *paths]:
            timed_in_kernel(Path(home) / "notebooks" / Path(path).name, prefetch and path != floor)
            page = open_and_run(browser, lab, Path(path).name)
            times, drags, kernel, from_page, first, late = [], [], [], 0, [], 0
            waits, reads = [], []   # each settle's (ms, timed out); each read of the kernel's notes
            for cell in explorer_cells(page):
                cell.locator("img:visible").last.scroll_into_view_if_needed()   # the picture, as a learner sees it
                page.evaluate(WATCH, cell.element_handle())
                actions = one_step_actions(cell)
                if actions:   # the first move, at once: the kernel has had no time to send anything ahead
                    seen = timed(page, cell, actions[0][1], quiet_ms=600)
                    if seen is not None:
                        first.append((seen[0], seen[3]))
                waits.append(settle(page, cell))
                reads.append(kernel_updates(page))                    # the first move's: not a single move
                for kind, act in actions:
                    for _ in range(moves if kind == "slider" else 2):
                        seen = timed(page, cell, act, quiet_ms=600)
                        if seen is not None:
                            times.append(seen[0])
                            from_page += seen[3] == "page"
                reads.append(kernel_updates(page))                    # the single moves' updates
                kernel = None if reads[-1] is None or kernel is None else kernel + reads[-1][0]
                if cell.locator(".widget-slider .noUi-handle").count():
                    waits.append(settle(page, cell))
                    seen = drag(page, cell)
                    if seen is not None:
                        drags.append(seen)
                reads.append(kernel_updates(page))
                late += int(cell.evaluate(LATE))
            page.evaluate(f"() => {NOTEBOOK}.sessionContext.shutdown()")   # its memory back before the next
            page.close()
            ahead = None if None in reads else [ms for read in reads for ms in read[1]]
            rows.append((Path(path).stem, times, drags, kernel, from_page, sum(w[0] for w in waits),
                         sum(w[1] for w in waits), first, ahead, late))
    return rows


# A first cell put into the benchmark's own copy of each notebook (never the course's): every
# Explorer.update that draws a picture (render, PNG and the picture sent to the page) notes
# its wall-clock and CPU milliseconds in the kernel JupyterLab runs. Updates whose picture
# the page already held draw nothing and are not noted. Each picture sent ahead (Explorer.more)
# notes its CPU milliseconds apart.
KERNEL_TIMER = """import time as _time
import helpers.explorer as _explorer
_updates = []   # (wall ms, CPU ms) of each update that drew
_ahead = []     # CPU ms of each picture drawn ahead
def _timed_update(self, change=None, _update=_explorer.Explorer.update):
    renders, wall, cpu = self.renders, _time.perf_counter(), _time.thread_time()
    _update(self, change)
    if self.renders != renders:   # a new picture (not values already shown or held, not an error sentence)
        _updates.append((1000 * (_time.perf_counter() - wall), 1000 * (_time.thread_time() - cpu)))
def _timed_more(self, id=None, _more=_explorer.Explorer.more):
    sent, cpu = len(self.sent), _time.thread_time()
    _more(self, id)
    if len(self.sent) != sent:
        _ahead.append(1000 * (_time.thread_time() - cpu))
_explorer.Explorer.update = _timed_update
_explorer.Explorer.more = _timed_more"""
NO_PREFETCH = """
import helpers.frames
helpers.frames.PREFETCH_LIMIT = 0   # this copy: no pictures sent ahead, every new value a round trip"""

# The kernel's notes so far, and the lists emptied.
KERNEL_READ = "(_updates.copy(), _ahead.copy(), _updates.clear(), _ahead.clear())[:2]"


def timed_in_kernel(path, prefetch=True):
    """Put KERNEL_TIMER (and NO_PREFETCH unless prefetch) before the first cell of the notebook
    at ``path`` (a copy being measured)."""
    import nbformat
    nb = nbformat.read(path, as_version=4)
    nb.cells.insert(0, nbformat.v4.new_code_cell(KERNEL_TIMER + ("" if prefetch else NO_PREFETCH)))
    nbformat.write(nb, path)


def kernel_updates(page):
    """([(wall ms, CPU ms) of each picture the page's kernel drew for a move], [CPU ms of each
    picture it drew ahead]) since the last call, as KERNEL_TIMER noted them; None if they could
    not be read."""
    import ast
    text = kernel_eval(page, KERNEL_READ)
    try:
        return None if text is None else tuple(list(notes) for notes in ast.literal_eval(text))
    except (ValueError, SyntaxError):
        return None


def print_browser(paths, prefetch=True):
    """The table: the floor explorer first (the round trip a picture costs with nothing
    computed, the unit the chapters' rows can be read against), then every chapter.

    'first' is each explorer's first move, made as soon as its picture is on screen (ms, and
    how many of them the page answered itself). Then the kernel sends its likely pictures
    ('ahead': how many, their CPU seconds, the seconds waited, '!' if a wait hit its 30 s
    limit) and the single moves and the drag are timed: 'median' and 'worst' from input to
    painted picture, 'from page' the moves the page answered itself, 'kernel' the wall-clock
    and CPU milliseconds the kernel spent drawing for the moves it was asked for ('?' if they
    could not be read), 'late' the pictures swapped in before their decode finished."""
    print("explorers' pictures sent ahead:", "yes" if prefetch else "no (--no-prefetch)")
    print(f"{'in the browser (ms)':<30}{'first':>7}{'page':>5}{'ahead: n':>9}{'CPU s':>7}{'waited s':>9}"
          f"{'median':>8}{'worst':>7}{'moves':>6}{'from page':>10}{'drag: last':>11}{'pictures':>9}"
          f"{'kernel: med':>12}{'worst':>7}{'CPU med':>8}{'n':>4}{'late':>5}   budget")
    for name, times, drags, kernel, from_page, waited, timed_out, first, ahead, late in browser_updates(
            paths, prefetch=prefetch):
        name = "floor: a picture, no compute" if name == "floor_explorer" else name
        median = f"{statistics.median(times):.0f}" if times else "-"
        worst = f"{max(times):.0f}" if times else "-"
        last = max((d[0] for d in drags), default=None)
        shown = max((d[1] for d in drags), default=None)
        last = "-" if last is None else "missed" if last < 0 else f"{last:.0f}"   # missed: last number never drawn
        if kernel:
            wall, cpu = zip(*kernel)
            in_kernel = (f"{statistics.median(wall):.0f}", f"{max(wall):.0f}", f"{statistics.median(cpu):.0f}",
                         len(kernel))
        else:
            in_kernel = ("?",) * 3 + (0,) if kernel is None else ("-",) * 3 + (0,)
        cold = f"{statistics.median(f[0] for f in first):.0f}" if first else "-"
        cold_page = sum(f[1] == "page" for f in first)
        n_ahead, cpu_ahead = ("?", "?") if ahead is None else (len(ahead), f"{sum(ahead) / 1000:.1f}")
        print(f"{name:<30}{cold:>7}{cold_page:>5}{n_ahead:>9}{cpu_ahead:>7}{waited / 1000:>8.1f}{'!' if timed_out else ' '}"
              f"{median:>8}{worst:>7}{len(times):>6}{from_page:>10}{last:>11}{'-' if shown is None else shown:>9}"
              f"{in_kernel[0]:>12}{in_kernel[1]:>7}{in_kernel[2]:>8}{in_kernel[3]:>4}{late:>5}"
              "   < 50 median, < 100 worst; a drag of 15 moves: its last picture within 100 ms of the slider's last number")


if __name__ == "__main__":
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    n_cells = int(args.pop(0)) if "--cells" in sys.argv and args and args[0].isdigit() else 5
    paths = [Path(p) for p in args] or learner_notebooks()
    if "--browser" in sys.argv:
        print_browser(paths, prefetch="--no-prefetch" not in sys.argv)
    elif "--cells" in sys.argv:
        print_cells(paths, n_cells)
    elif "--training" in sys.argv:
        print(f"load average (1, 5, 15 min) at the start: {load_average()} on {os.cpu_count()} cores", flush=True)
        add_training_step(Table())
        print(f"load average (1, 5, 15 min) at the end: {load_average()}")
    else:
        main(paths, widgets_only="--widgets" in sys.argv)
