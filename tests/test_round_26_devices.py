"""Round 26 (devices): a public function gives a learner's cell the same answer inside
``with torch.device("meta"):``, after ``torch.set_default_device("meta")`` and under
``torch.autocast("cpu", dtype=torch.bfloat16)`` as in a plain cell (the tensors it makes itself stay on the CPU),
and a refusal is the same sentence in each."""
import contextlib

import numpy as np
import pytest
import torch

from helpers import patching, worlds
from helpers.ablation import compute as ablation
from helpers.errors import CourseInputError
from helpers.mlp import compute as mlp
from helpers.sampling import compute as sampling
from helpers.weights import load_cat, load_induction


@pytest.fixture(scope="module")
def cat():
    return load_cat(), worlds.cat_world()


@pytest.fixture(scope="module")
def induction():
    return load_induction()


@contextlib.contextmanager
def default_meta():
    torch.set_default_device("meta")
    try:
        yield
    finally:
        torch.set_default_device(None)   # (put back for every later test: no default device at all; "cpu" would
                                         # keep a device mode that copies a later test's meta tensors)


MODES = {"meta": lambda: torch.device("meta"), "set_default_device": default_meta,
         "autocast": lambda: torch.autocast("cpu", dtype=torch.bfloat16)}


def answer(call):
    """What a cell sees: the value (tensors as device, dtype and numbers) or the refusal's sentence."""
    try:
        out = call()
    except CourseInputError as error:
        return "refused: " + str(error)
    return summary(out)


def summary(out):
    if isinstance(out, torch.Tensor):
        return (out.device.type, out.dtype, tuple(out.shape), out.tolist() if out.device.type == "cpu" else None)
    if isinstance(out, (tuple, list)):
        return tuple(summary(x) for x in out)
    if isinstance(out, dict):
        return {k: summary(v) for k, v in out.items()}
    if isinstance(out, np.ndarray):
        return ("array", out.dtype, out.tolist())
    return out


def logits_of(model, world):
    return model(world.tokenizer.encode("<BOS> the cat sat"))[-1]


CASES = {   # name: function of (cat, world, induction) -> a call of no arguments
    "next_distribution": lambda c, w, i: lambda: sampling.next_distribution(logits_of(c, w), 0.8, top_k=5, top_p=0.9),
    "with_temperature": lambda c, w, i: lambda: sampling.with_temperature(logits_of(c, w), 0.7),
    "with_temperature, a list": lambda c, w, i: lambda: sampling.with_temperature([2.0, 1.0, 0.0], 0.5),
    "top_k_filter": lambda c, w, i: lambda: sampling.top_k_filter(torch.softmax(logits_of(c, w), -1), 3),
    "nucleus": lambda c, w, i: lambda: sampling.nucleus(torch.softmax(logits_of(c, w), -1), 0.9),
    "top_p_filter": lambda c, w, i: lambda: sampling.top_p_filter([0.5, 0.3, 0.2], 0.7),
    "draws": lambda c, w, i: lambda: sampling.draws([0.5, 0.3, 0.2], 20, seed=1),
    "generate from encode": lambda c, w, i: lambda: sampling.generate(c, w.tokenizer.encode("<BOS> the cat"), 3, seed=0),
    "a world's encode": lambda c, w, i: lambda: w.tokenizer.encode("<BOS> the cat"),
    "token_ids of a tensor": lambda c, w, i: (lambda ids: lambda: worlds.token_ids(ids, 20))(torch.tensor([1, 2, 3])),
    "composition_baseline": lambda c, w, i: lambda: patching.composition_baseline(8, 2, draws=20),
    "induction_pairs": lambda c, w, i: lambda: ablation.induction_pairs(3, 5, i.cfg.vocab_size, 0),
    "cat_ablation resample": lambda c, w, i: lambda: ablation.cat_ablation(c, w, [(0, 0)], "resample", draws=3),
    "apply_block_mlp, an array": lambda c, w, i: lambda: mlp.apply_block_mlp(
        c, 0, np.linspace(-1, 1, 4 * c.cfg.d_model).reshape(4, c.cfg.d_model)),
    "apply_block_mlp, a list": lambda c, w, i: lambda: mlp.apply_block_mlp(c, 0, [[0.5] * c.cfg.d_model] * 2),
    "refused: nucleus p": lambda c, w, i: lambda: sampling.nucleus([0.5, 0.5], 1.5),
    "refused: composition_baseline d_k": lambda c, w, i: lambda: patching.composition_baseline(2, 8),
}


@pytest.mark.parametrize("mode", list(MODES))
@pytest.mark.parametrize("case", list(CASES))
def test_the_same_answer_in_a_meta_block_a_meta_default_and_under_autocast(cat, induction, case, mode):
    call = CASES[case](*cat, induction)
    plain = answer(call)
    assert "'meta'" not in repr(plain) and plain is not None
    assert case.startswith("refused") == str(plain).startswith("refused")
    with MODES[mode]():
        got = answer(call)
    assert got == plain
    assert torch.get_default_device().type == "cpu" and not torch.is_autocast_enabled("cpu")


def test_the_named_sentence_stays_the_same_inside_a_meta_block():
    with torch.device("meta"), pytest.raises(CourseInputError, match=r"^top_p should lie in \(0, 1\], but got 1\.5$"):
        sampling.nucleus([0.5, 0.5], 1.5)


def test_a_model_loaded_inside_a_meta_block_holds_its_weights(cat):
    with torch.device("meta"):
        inside = load_cat()
    assert inside.E.device.type == "cpu" and torch.equal(inside.E, cat[0].E)


@pytest.mark.parametrize("mode", list(MODES))
def test_an_explorer_built_and_moved_inside_a_mode_draws_the_plain_picture(mode):
    from helpers.heads import explorer as heads_explorer
    from helpers.scaling import explorer as scaling_explorer
    for make, move in ((lambda: heads_explorer.explorer(model="induction", layer=1, head=0), dict(head=1)),
                       (scaling_explorer.explorer, dict(d=16.0))):
        plain = make().set(**move).picture()
        with MODES[mode]():
            inside = make().set(**move).picture()
        assert inside == plain
