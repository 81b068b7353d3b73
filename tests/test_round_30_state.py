"""Round 30 (issue 31), state a call leaves for later cells: a function the learner's loop replaces in a live run
(``gpt.logits_of = ...``, ``F.cross_entropy = ...``) is put back after it (``switches_kept``, through
``exercises.torch_globals``), so a later run is not refused with a sentence that blames the model; t-SNE and UMAP put
back torch's thread count and the native pools' (UMAP's numba, started after scikit-learn's OpenMP, set torch's 1 to
2), also when they fail."""
import subprocess
import sys

import matplotlib
import numpy as np
import pytest
import torch
import torch.nn.functional as F

matplotlib.use("Agg")

from helpers.errors import CourseInputError
from helpers.geometry import compute as geometry
from helpers.gpt import compute as gc
from helpers.gpt import corpus
from learner_loops import LIVE, small_gpt

pytestmark = pytest.mark.usefixtures("late")   # LATE_SECONDS = LATE in every test


@pytest.fixture(scope="module")
def ids():
    ids = corpus.CharTokenizer().encode(corpus.load_text()[:5000])
    gc.step_seconds(small_gpt(), ids, 2, 8)   # warm-up: a fresh process's first passes are slow on a loaded machine
    torch.optim.AdamW(small_gpt().parameters())   # (its first imports torch._dynamo: seconds, not inside a run)
    return ids


def replacing_loop(model, *args):
    """A learner's loop that replaces a course function and one of torch's, then trains with the course's loop."""
    gc.logits_of = lambda *a, **k: None
    F.cross_entropy = lambda *a, **k: torch.tensor(0.0, requires_grad=True)
    return gc.train_loop(model, *args)


def test_live_run_puts_back_the_functions_the_loop_replaced(ids):
    logits_of, cross_entropy = gc.logits_of, F.cross_entropy
    try:
        with pytest.raises(CourseInputError):   # (its own loop calls the replaced logits_of: refused)
            gc.live_run(replacing_loop, small_gpt(), ids, ids, corpus.CharTokenizer(), **LIVE)
        assert gc.logits_of is logits_of and F.cross_entropy is cross_entropy
        run = gc.live_run(gc.train_loop, small_gpt(), ids, ids, corpus.CharTokenizer(), **LIVE)   # a later run
        assert run["done"] >= 1
    finally:
        gc.logits_of, F.cross_entropy = logits_of, cross_entropy


def test_switches_kept_puts_back_a_replaced_function_after_an_error():
    softmax = torch.softmax
    with pytest.raises(RuntimeError), gc.switches_kept():
        torch.softmax = None
        raise RuntimeError("the loop stopped")
    assert torch.softmax is softmax


def failing_fit(*args, **kwargs):
    """A map's work that changes the thread counts, as UMAP's numba does, then fails."""
    from threadpoolctl import ThreadpoolController

    torch.set_num_threads(2)
    ThreadpoolController().limit(limits=3)   # (every native pool: OpenMP's, OpenBLAS's)
    raise RuntimeError("the map failed")


@pytest.mark.parametrize("method", ["t-SNE", "UMAP"])
def test_a_map_puts_back_the_thread_counts_also_when_it_fails(monkeypatch, method):
    from threadpoolctl import threadpool_info

    monkeypatch.setattr(geometry, "import_umap", failing_fit)   # (UMAP's first step)
    monkeypatch.setattr("threadpoolctl.threadpool_limits", failing_fit)   # (t-SNE's, after its import)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        pools = {pool["filepath"]: pool["num_threads"] for pool in threadpool_info()}
        points = np.random.default_rng(0).normal(size=(20, 4))
        with pytest.raises(RuntimeError, match="the map failed"):
            geometry.project(points, method)
        assert torch.get_num_threads() == 1
        after = {pool["filepath"]: pool["num_threads"] for pool in threadpool_info()}
        assert {path: after[path] for path in pools} == pools   # (a library the call loaded keeps its own)
    finally:
        torch.set_num_threads(threads)


MAPS = """
import numpy as np, torch
import helpers
helpers.setup_notebook()
from helpers.geometry import compute as geometry
before = torch.get_num_threads()   # (torch's threads started, as by any earlier cell's torch: numba's then set theirs)
points = np.random.default_rng(0).normal(size=(40, 5))
geometry.tsne_2d(points)
geometry.umap_2d(points)
print(before, torch.get_num_threads())
"""


def test_tsne_then_umap_leave_torch_on_one_thread():
    run = subprocess.run([sys.executable, "-c", MAPS], capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-2000:]
    assert run.stdout.split()[-2:] == ["1", "1"], run.stdout
