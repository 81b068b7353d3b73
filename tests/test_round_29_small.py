"""Round 29 (issue 31), readers A and B: values a check returns are the ones used (a NumPy seed, a learner's int
subclass as a reference loss), a kept cell whose exception cannot say its message, a cached attention table of
text, an empty weight matrix."""
import matplotlib
import numpy as np
import pytest
import torch

matplotlib.use("Agg")

from helpers import learner, recipes
from helpers.errors import CourseInputError
from helpers.heads import compute as heads
from helpers.normalization import compute as nz
from helpers.positions import compute as positions
from helpers.real import compute as real


class HInt(int):
    """An int whose conversions raise: only what a check returns may be used."""
    def __index__(self):
        raise RuntimeError("boom")

    def __int__(self):
        raise RuntimeError("boom")


def test_induction_batch_takes_a_numpy_seed():
    x, y = recipes.induction_batch(0, batch=4, seed=np.int64(2))
    same = recipes.induction_batch(0, batch=4, seed=2)
    assert torch.equal(x, same[0]) and torch.equal(y, same[1])


def test_plot_grid_draws_the_checked_reference_losses():
    import matplotlib.pyplot as plt

    curves = nz.load_curves()
    unigram, best = nz.reference_losses()
    fig = nz.plot_grid(curves, HInt(3), best)   # (its float() is 3.0: the checked value is drawn)
    plt.close("all")
    assert fig is not None


class Unreadable(Exception):
    def __str__(self):
        raise RuntimeError("no message")


def test_a_kept_cell_whose_exception_cannot_say_its_message(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("COURSE_MY_GPT", str(tmp_path / "my_gpt"))
    (tmp_path / "my_gpt").mkdir()
    (tmp_path / "my_gpt" / "rotate.py").write_text("import torch\nclass Unreadable(Exception):\n"
                                                   "    def __str__(self):\n        raise RuntimeError('x')\n"
                                                   "def rotate(x, start=0):\n    return x\nraise Unreadable()\n")
    assert learner.use("rotate", positions.rotate) is positions.rotate
    said = capsys.readouterr().out
    assert "the course's own" in said and "a message that could not be read" in said, said


@pytest.mark.parametrize("kind", ["str", "object"])
def test_head_view_refuses_a_cached_table_of_text(kind):
    cache = {}
    heads.head_view("cat", 0, 0, cache=cache)
    key = next(iter(cache))
    cache[key] = cache[key].astype(kind)
    with pytest.raises(CourseInputError, match=f"holds {np.dtype(kind) if kind == 'object' else '<U'}"):
        heads.head_view("cat", 0, 0, cache=cache)


@pytest.mark.parametrize("W", [np.zeros((0, 6)), torch.zeros(32, 0), torch.zeros(0, 0)])
def test_distinct_per_block_refuses_an_empty_matrix(W):
    with pytest.raises(CourseInputError, match="no axis empty"):
        real.distinct_per_block(W)


def test_patching_reads_a_layer_head_or_token_by_ints_own_method():
    from helpers import patching
    from helpers.model import Config, Transformer

    torch.manual_seed(0)
    model = Transformer(Config(vocab_size=10, d_model=8, n_heads=2, n_layers=2, d_ff=16, n_max=8))
    assert patching.check_layer(model, HInt(1)) == 1 and type(patching.check_layer(model, HInt(1))) is int
    assert patching.check_layer(model, np.int64(0)) == 0
    for bad in (True, np.bool_(True), 2, -1, 1.0, "1", torch.tensor(5)):
        with pytest.raises(CourseInputError, match="layer should be one of this model's layers"):
            patching.check_layer(model, bad)


def test_leak_refuses_too_many_positions_before_building_anything():
    from helpers.masking import compute as masking

    with pytest.raises(CourseInputError, match=r"^T should be at most 1,024 positions .* but got 1,025$"):
        masking.leak(d_model=6000, T=1025)
    assert set(masking.leak(T=1024, d_model=4)) == {"with_mask", "without_mask"}


@pytest.mark.parametrize("name, args", [("top_k_filter", (2,)), ("top_p_filter", (0.9,)), ("nucleus", (0.9,)),
                                        ("draws", (3, 0))])
def test_sampling_counts_an_expanded_distribution_before_copying_it(name, args):
    from helpers.sampling import compute as sampling

    with pytest.raises(CourseInputError, match=r"^probs \(a tensor of 1,000,000,000 numbers\) should need at most"):
        getattr(sampling, name)(torch.zeros(1).expand(10**9), *args)


def test_a_kept_import_that_ends_after_its_checks_fence_leaves_the_fences_stand_ins_behind_it(tmp_path):
    """An import of a kept cell runs inside a check's fence (Exercise.kept); stopped at its time limit, it may
    unwind after the fence has put back sys.setrecursionlimit. Its own put-back must not bring back the fence's
    stand-in (it did: every later setrecursionlimit in the process was refused, seen in a loaded test run)."""
    import os
    import sys

    from helpers import exercises, states

    target = tmp_path / "piece.py"
    target.write_text("def piece(x):\n    return x\n")
    real = sys.setrecursionlimit
    states.fenced_pids.append(os.getpid())   # the fence is up: its stand-in in place
    sys.setrecursionlimit = exercises._no_recursion_limit
    try:
        with learner._apart(target):
            states.fenced_pids.remove(os.getpid())   # the fence ends first and puts back the real one
            sys.setrecursionlimit = real
        after = sys.setrecursionlimit
    finally:
        sys.setrecursionlimit = real
        if os.getpid() in states.fenced_pids:
            states.fenced_pids.remove(os.getpid())
    assert after is real
