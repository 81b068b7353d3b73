"""Round 25 (reader B: 12, 13, 14). Ambient torch modes: a cell inside ``with torch.no_grad():``,
``torch.inference_mode()``, ``with torch.device("meta"):`` (notebook 07 teaches it for shapes), after
``torch.set_default_device``/``torch.set_grad_enabled(False)``, or inside ``torch.autocast("cpu", ...)``. The
gradient-taking functions raised raw errors or blamed a training step; the course's functions made their own
tensors on the meta device and blamed the learner's CPU ids; the exercise checks marked the instructor's own
answers wrong. One mechanism now: ``states.course_modes``."""
import contextlib
import json
import math
import re

import numpy as np
import pytest
import torch
from torch import nn

from helpers import patching, states
from helpers.errors import CourseInputError
from helpers.gpt import compute as gc
from helpers.gpt import corpus
from helpers.gpt import train as gtrain
from helpers.model import Config, Transformer
from helpers.normalization import compute as nz
from helpers.sampling import compute as sampling

AMBIENT = {
    "no_grad": torch.no_grad,
    "grad_disabled": lambda: torch.set_grad_enabled(False),
    "inference_mode": torch.inference_mode,
    "meta_device": lambda: torch.device("meta"),
    "autocast": lambda: torch.autocast("cpu", dtype=torch.bfloat16),
}


@contextlib.contextmanager
def default_device(device):
    """torch.set_default_device(device) for the block, put back after."""
    torch.set_default_device(device)
    try:
        yield
    finally:
        torch.set_default_device(None)


def modes():
    return (torch.is_grad_enabled(), torch.is_inference_mode_enabled(), torch.is_autocast_enabled("cpu"),
            torch.get_default_device().type)


@pytest.mark.parametrize("ambient", sorted(AMBIENT))
def test_course_modes_sets_the_course_modes_and_puts_the_ambient_ones_back(ambient):
    with AMBIENT[ambient]():
        before = modes()
        with states.course_modes():
            assert modes() == (True, False, False, "cpu")
            assert torch.zeros(2).device.type == "cpu"
        assert modes() == before
        with states.course_modes(grad=False):   # a measure: grad mode left as the caller set it
            assert modes()[0] == before[0] and modes()[2:] == (False, "cpu")
        assert modes() == before
    with default_device("meta"), states.course_modes():
        assert torch.ones(1).device.type == "cpu"
    assert torch.is_grad_enabled()


def test_a_function_that_takes_gradients_is_refused_in_one_sentence_inside_inference_mode():
    with torch.inference_mode(), pytest.raises(CourseInputError, match=r"should be called outside "
                                               r"torch.inference_mode\(\) \(it takes gradients\)"):
        with states.course_modes(name="layer_gradients"):
            pass


def test_layer_gradients_and_run_stack_under_no_grad_give_what_they_give_outside():
    outside = nz.layer_gradients("pre", n_layers=2, seed=0)
    with torch.no_grad():
        inside = nz.layer_gradients("pre", n_layers=2, seed=0)
    assert inside["loss"] == outside["loss"] and np.array_equal(inside["grads"], outside["grads"])
    run = nz.run_stack("pre", 2, 0.01, 3)
    torch.set_grad_enabled(False)
    try:
        again = nz.run_stack("pre", 2, 0.01, 3)
    finally:
        torch.set_grad_enabled(True)
    assert np.array_equal(run["loss"], again["loss"])


@pytest.fixture(scope="module")
def chars():
    tokenizer = corpus.CharTokenizer(corpus.load_text())
    return tokenizer, tokenizer.encode(corpus.load_text()[:20000])


def small_gpt(chars):
    return Transformer(Config(vocab_size=len(chars[0].vocab), d_model=16, n_heads=2, n_layers=1, d_ff=32, n_max=32))


def test_the_gpt_runs_are_refused_by_name_inside_inference_mode_and_run_under_no_grad(chars):
    tokenizer, ids = chars
    model = small_gpt(chars)
    kept = {name: p.clone() for name, p in model.state_dict().items()}
    calls = {
        "step_seconds": lambda: gc.step_seconds(model, ids, 2, 16),
        "train": lambda: gtrain.train(model, ids[:15000], ids[15000:], steps=2, batch=2, context=16, warmup=0,
                                      eval_every=1, eval_batches=1),
        "train_loop": lambda: gc.train_loop(model, ids[:15000], ids[15000:], 2, 2, 16, 1e-3, 0, 1e-4, 1.0, 1, 1),
        "live_run": lambda: gc.live_run(gc.train_loop, model, ids[:15000], ids[15000:], tokenizer, batch=2, context=16,
                                        lr=1e-3, warmup=1, min_lr=1e-4, clip=1.0, eval_every=2, eval_batches=1,
                                        seconds=12, sample_chars=10),
    }
    for name, call in calls.items():
        with torch.inference_mode(), pytest.raises(CourseInputError, match=rf"^{name} should be called outside "
                                                   r"torch.inference_mode\(\)"):
            call()
    assert all(torch.equal(p, kept[name]) for name, p in model.state_dict().items())
    with torch.no_grad():
        log = gtrain.train(model, ids[:15000], ids[15000:], steps=2, batch=2, context=16, warmup=0, eval_every=1,
                           eval_batches=1)
        losses, _ = gc.train_loop(model, ids[:15000], ids[15000:], 2, 2, 16, 1e-3, 0, 1e-4, 1.0, 1, 1)
    assert math.isfinite(log[-1]["val_loss"]) and all(math.isfinite(loss) for loss in losses)


def test_attribution_patch_runs_under_no_grad_and_is_refused_by_name_inside_inference_mode():
    model = Transformer(Config(vocab_size=11, d_model=8, n_heads=2, n_layers=1, d_ff=0, norm="none",
                               final_norm=False))
    model.reset_parameters(seed=2)
    clean, corrupt = torch.tensor([[1, 2, 3, 4]]), torch.tensor([[1, 5, 3, 6]])
    metric = lambda out: out["logits"][:, -1, 7] - out["logits"][:, -1, 2]
    outside = patching.attribution_patch(model, clean, corrupt, metric)
    with torch.no_grad():
        assert torch.equal(patching.attribution_patch(model, clean, corrupt, metric), outside)
    with torch.inference_mode(), pytest.raises(CourseInputError, match=r"^attribution_patch should be called outside "
                                               r"torch.inference_mode\(\)"):
        patching.attribution_patch(model, clean, corrupt, metric)


@pytest.mark.parametrize("ambient", ["meta_device", "set_default_device", "autocast"])
def test_the_measures_of_a_model_give_inside_a_default_device_or_autocast_what_they_give_outside(cat, cat_world,
                                                                                                ambient):
    ids = cat_world.tokenizer.encode("<BOS> the cat sat")
    calls = {
        "logit_lens": lambda: patching.logit_lens(cat, ids)[1],
        "generate": lambda: sampling.generate(cat, ids, 3, seed=0),
        "residual_norms": lambda: nz.residual_norms(cat, ids)[1],
    }
    outside = {name: call() for name, call in calls.items()}
    block = default_device("meta") if ambient == "set_default_device" else AMBIENT[ambient]()
    with block:
        inside = {name: call() for name, call in calls.items()}
    for name in calls:
        got, want = (torch.as_tensor(np.asarray(x) if not isinstance(x, torch.Tensor) else x)
                     for x in (inside[name], outside[name]))
        assert got.device.type == "cpu" and torch.equal(got, want), name


def instructor_piece(notebook, marker, names):
    """The instructor notebook's own solution cell (its SOLUTION markers dropped), run in a fresh namespace."""
    nb = json.load(open(f"instructor/{notebook}"))
    src = next("".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "code" and marker in "".join(c["source"]))
    namespace = dict(names)
    exec(compile(re.sub(r"^\s*### (BEGIN|END) SOLUTION\n", "", src, flags=re.M), "<solution>", "exec"), namespace)
    return namespace


@pytest.mark.parametrize("ambient", ["meta_device", "autocast", "inference_mode"])
def test_a_check_gives_the_instructors_mlp_a_tick_inside_any_ambient_mode(cat, dragon, ambient):
    from helpers.mlp import checks as mlp_checks
    solution = instructor_piece("07_mlp.ipynb", "class MLP(nn.Module)", {"torch": torch, "nn": nn, "math": math,
                                                                           "np": np})
    with AMBIENT[ambient]():
        found = mlp_checks.mlp_module.feedback(solution["MLP"], cat, dragon)
        still = modes()
    assert found == [], found
    assert still == {"meta_device": (True, False, False, "meta"), "autocast": (True, False, True, "cpu"),
                     "inference_mode": (False, True, False, "cpu")}[ambient]
