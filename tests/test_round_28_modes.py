"""Round 28, fixer "modes" (reader A entries 5-8): the course's NumPy functions run with underflow ignored whatever
``np.seterr`` a cell set (softmax's exp of a far score is 0, not a FloatingPointError); score_path_gradients and the
training functions of chapters 03, 04 and 06 work inside torch.inference_mode() (their own work outside it, the mode
put back after); and ``learner.use`` puts back what a kept cell changes for the whole process (torch's switches, the
course's functions and constants), as the check that kept it does."""
import math
import sys

import numpy as np
import pytest
import torch

from helpers import learner, weights, worlds
from helpers import reference as ref
from helpers.errors import CourseInputError
from helpers.masking import compute as masking
from helpers.positions import compute as positions
from helpers.qkv import compute as qkv
from helpers.scaling import compute as scaling


# Entry 5: np.seterr(all="raise")

X = np.random.default_rng(0).standard_normal((4, 8)) * 30
RAW = scaling.six_keys()

SEVERE = {   # ordinary calls whose NumPy work underflows (scores spread far apart, tiny numbers)
    "ref.softmax": lambda: ref.softmax([1000.0, -1000.0, 0.0]),
    "ref.softmax axis 0": lambda: ref.softmax(X * 100, axis=0),
    "ref.attention": lambda: ref.attention(X, X, X, causal=True),
    "ref.attention tiny": lambda: ref.attention(X * 1e-155, X * 1e-155, X),
    "ref.layer_norm tiny": lambda: ref.layer_norm(np.array([[1e-300, 2e-300, 3e-300]])),
    "ref.gelu": lambda: ref.gelu(np.array([-1e10, -38.0, -1e-310, 0.0, 3.0])),
    "ref.rotate_pairs": lambda: ref.rotate_pairs(X * 1e-300, np.arange(4) * 1000, base=1e12),
    "ref.sinusoidal_positions": lambda: ref.sinusoidal_positions(50, 512, base=1e12),
    "qkv.attention_steps": lambda: qkv.attention_steps(X * 10, np.eye(8), np.eye(8), np.eye(8), causal=True),
    "qkv.attention_steps tiny": lambda: qkv.attention_steps(X * 1e-155, np.eye(8), np.eye(8), np.eye(8)),
    "qkv.softmax_share": lambda: qkv.softmax_share([100.0, -700.0], 0),
    "qkv.softmax_share tiny": lambda: qkv.softmax_share([1e-310, 0.0], 0, d=4),
    "qkv.query_step": lambda: qkv.query_step(X[0] * 1e-155, X * 1e-155, X, visible=2),
    "qkv.printed_difference": lambda: qkv.printed_difference(np.array([0.1234567, 1e-300]), [0.123, 0.0]),
    "scaling.softmax_jacobian": lambda: scaling.softmax_jacobian(ref.softmax(RAW * 100)),
    "scaling.weight_gradient": lambda: scaling.weight_gradient(100 * RAW, 2),
    "scaling.weight_gradient tiny": lambda: scaling.weight_gradient([1e-310, 0.0], 0, divide_by=3.0),
    "scaling.jacobian_size": lambda: scaling.jacobian_size(ref.softmax(np.stack([RAW, RAW * 100]))),
    "scaling.gradient_by_dim": lambda: scaling.gradient_by_dim(dims=(2, 768, 4096), n_queries=50),
    "scaling.explore": lambda: scaling.explore(1024, False),
    "scaling.dot_spread": lambda: scaling.dot_spread(dims=(2, 768), n=200),
    "scaling.adam_trajectory": lambda: scaling.adam_trajectory(np.ones((5, 3)) * 1e-300),
    "scaling.log_fit": lambda: scaling.log_fit([2, 4, 8], [1e-300, 2.0, 3.0]),
}


def flat(result):
    """The numbers of a result (an array, a float, dicts and lists of them), flat."""
    if isinstance(result, dict):
        return np.concatenate([flat(v) for v in result.values() if not isinstance(v, (bool, str))] or [np.zeros(0)])
    if isinstance(result, (list, tuple)):
        return np.concatenate([flat(v) for v in result] or [np.zeros(0)])
    return np.asarray(result, dtype=float).ravel()


@pytest.mark.parametrize("name", sorted(SEVERE))
def test_the_course_numpy_functions_run_under_seterr_raise_and_give_the_plain_results(name):
    plain = flat(SEVERE[name]())
    with np.errstate(all="raise"):
        under_raise = flat(SEVERE[name]())
        assert np.geterr() == dict(divide="raise", over="raise", under="raise", invalid="raise")   # the cell's, kept
    assert np.array_equal(plain, under_raise, equal_nan=True)


def test_softmax_under_seterr_raise_gives_exact_zeros_for_far_scores():
    with np.errstate(all="raise"):
        assert ref.softmax([1000.0, -1000.0, 0.0]).tolist() == [1.0, 0.0, 0.0]
        assert qkv.softmax_share([100.0, -700.0], 0) == 1.0
        got = scaling.weight_gradient(100 * RAW, 2)
    assert got == scaling.weight_gradient(100 * RAW, 2)


def test_a_refusal_under_seterr_raise_is_still_one_sentence():
    with np.errstate(all="raise"), pytest.raises(CourseInputError, match="^x should hold numbers or -inf"):
        ref.softmax([0.0, math.nan])


# Entries 6 and 7: inside torch.inference_mode()

@pytest.fixture(scope="module")
def cat_world_batch():
    cat, world = weights.load_cat(), worlds.cat_world()
    return cat, world, world.batch(world.train[:4])


def test_score_path_gradients_inside_inference_mode_gives_what_it_gives_outside(cat_world_batch):
    cat, world, batch = cat_world_batch
    outside = scaling.score_path_gradients(cat, batch, layer=0)
    with torch.inference_mode():
        inside = scaling.score_path_gradients(cat, batch, layer=0)
        made_inside = world.batch(world.train[:4])   # inference tensors
        assert made_inside[0].is_inference()
        again = scaling.score_path_gradients(cat, made_inside, layer=0)
        assert torch.is_inference_mode_enabled() and not torch.is_grad_enabled()   # the mode put back
    assert inside == outside == again
    assert all(p.grad is None for p in cat.parameters())


def test_score_path_gradients_refuses_a_model_loaded_inside_inference_mode_in_one_sentence(cat_world_batch):
    _, _, batch = cat_world_batch
    with torch.inference_mode():
        loaded = weights.load_cat()
    for mode in (torch.inference_mode, torch.no_grad):
        with mode(), pytest.raises(CourseInputError, match=r"^the model's parameters should be made outside "
                                   r"torch.inference_mode\(\) \(score_path_gradients takes their gradients\), but "
                                   r"they were made inside it: load the model again outside it$"):
            scaling.score_path_gradients(loaded, batch)


def test_the_training_functions_run_inside_inference_mode_as_outside():
    world = worlds.cat_world()
    calls = {
        "position_probe": lambda: positions.position_probe(0, steps=3, n=16),
        "train_with_and_without_scaling": lambda: scaling.train_with_and_without_scaling(seeds=(0,), steps=3),
        "train_without_mask": lambda: masking.train_without_mask(world, steps=3),
    }
    for name, call in calls.items():
        outside = call()
        rng = torch.get_rng_state()
        with torch.inference_mode():
            inside = call()
            assert torch.is_inference_mode_enabled(), name
        assert torch.equal(rng, torch.get_rng_state()), name
        if name == "train_without_mask":
            (model_out, losses_out), (model_in, losses_in) = outside, inside
            assert losses_out == losses_in and not any(p.is_inference() for p in model_in.parameters())
            assert all(torch.equal(a, b) for a, b in zip(model_out.parameters(), model_in.parameters()))
        elif name == "train_with_and_without_scaling":
            assert [run["final"] for run in outside] == [run["final"] for run in inside]
        else:
            assert outside == inside


def test_a_bad_argument_inside_inference_mode_is_named_as_before():
    with torch.inference_mode():
        with pytest.raises(CourseInputError, match="^steps should be"):
            positions.position_probe(0, steps=0)
        assert torch.is_inference_mode_enabled()   # (put back after the refusal too)


# Entry 8: learner.use and a kept cell's process-wide changes

SIDE_EFFECTS = ("torch.use_deterministic_algorithms(True)\n"
                "torch.set_float32_matmul_precision('medium')\n"
                "ref.softmax = lambda x, axis=-1: x\n"
                "import helpers.qkv.compute as qkv\n"
                "qkv.IT_SCORES[0] = 99.0\n"
                "def double(x):\n    return 2 * x\n")


@pytest.fixture
def store(tmp_path, monkeypatch):
    monkeypatch.setenv("COURSE_MY_GPT", str(tmp_path / "my_gpt"))
    (tmp_path / "my_gpt").mkdir()
    softmax, scores = ref.softmax, list(qkv.IT_SCORES)
    deterministic, precision = torch.are_deterministic_algorithms_enabled(), torch.get_float32_matmul_precision()
    yield tmp_path / "my_gpt"
    ref.softmax = softmax   # (as they were, also when a test fails)
    qkv.IT_SCORES[:] = scores
    torch.use_deterministic_algorithms(deterministic)
    torch.set_float32_matmul_precision(precision)


def switches():
    return (torch.are_deterministic_algorithms_enabled(), torch.get_float32_matmul_precision(), ref.softmax,
            list(qkv.IT_SCORES))


@pytest.mark.parametrize("broken", [False, True])
def test_use_puts_back_the_switches_functions_and_constants_a_kept_cell_changes(store, capsys, broken):
    (store / "double.py").write_text(learner.HEADER.format(name="double", chapter="02") + SIDE_EFFECTS
                                     + ("raise ValueError('broken')\n" if broken else ""))
    before = switches()
    piece = learner.use("double", course="course's")
    assert switches() == before
    if broken:
        assert piece == "course's" and "does not run (ValueError: broken)" in capsys.readouterr().out
    else:
        assert piece(3) == 6 and "double: yours" in capsys.readouterr().out


def test_keep_puts_them_back_too(store, tmp_path):
    cell = tmp_path / "cell.py"   # the learner's cell, run once as the notebook ran it
    cell.write_text("import torch\nfrom helpers import reference as ref\n" + SIDE_EFFECTS)
    before = switches()
    namespace = {"__name__": "cell"}
    exec(compile(cell.read_text(), str(cell), "exec"), namespace)
    torch.use_deterministic_algorithms(before[0])   # (the cell's own run, undone here)
    torch.set_float32_matmul_precision(before[1])
    ref.softmax, qkv.IT_SCORES[:] = before[2], before[3]
    learner.keep(namespace["double"], "02")
    assert switches() == before and (store / "double.py").is_file()


def test_use_still_finds_the_module_it_imported_last(store):
    (store / "double.py").write_text(learner.HEADER.format(name="double", chapter="02") + SIDE_EFFECTS)
    first = learner.use("double", course=None, quiet=True)
    before = switches()
    second = learner.use("double", course=None, quiet=True)   # imported anew, not put back to the first import
    assert switches() == before and second is not first
    assert sys.modules[learner.module_name(store / "double.py")].double is second
