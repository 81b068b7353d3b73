"""Round 30 (issue 31), reader B entries 1-3: a float64 frozen scale or float64 parts are cast to the model's dtype
(as direction is), float8 and long double inputs torch cannot compute in are refused in one sentence, and a
learner's list whose __len__ raises is read by the built-ins (``errors.length``, ``items_of``)."""
import functools

import matplotlib
import numpy as np
import pytest
import torch

matplotlib.use("Agg")

from helpers import patching
from helpers.ablation import compute as ablation
from helpers.ablation import explorer as ablation_explorer
from helpers.gpt import tokenize as tk
from helpers.normalization import compute as nz
from helpers.real import circuit
from helpers.real import compute as real
from helpers.sampling import compute as sampling
from helpers.sampling import explorer as sampling_explorer

F8 = torch.float8_e4m3fn


class L(list):
    """A learner's list whose __len__ raises (list(), bool() and len() ask it)."""
    def __len__(self):
        raise RuntimeError("my __len__")


@functools.lru_cache(maxsize=1)
def smol():
    return real.load()


def parts_of(cat, cat_world):
    ids = cat_world.tokenizer.encode("<BOS> the big cat")
    parts, h = patching.residual_parts(cat, ids)
    direction = torch.zeros(cat.cfg.vocab_size)
    direction[3] = 1
    return ids, parts, h, direction


# ------------------------------------------------------------ 1: a float64 scale or parts

def test_attribute_casts_a_float64_scale_and_float64_parts(cat, cat_world):
    ids, parts, h, direction = parts_of(cat, cat_world)
    scale = patching.final_norm_scale(cat, h)
    want = patching.attribute(cat, parts, direction, scale)
    by_scale = patching.attribute(cat, parts, direction, scale.double())
    by_parts = patching.attribute(cat, {k: v.double() for k, v in parts.items()}, direction, scale)
    assert by_scale == pytest.approx(want, rel=1e-5) and by_parts == pytest.approx(want, rel=1e-5)


def test_direct_logit_attribution_and_direct_effects_take_a_float64_scale(cat, cat_world):
    ids, _, _, direction = parts_of(cat, cat_world)
    single = torch.tensor([2.0])
    assert patching.direct_logit_attribution(cat, ids, direction, scale=single.double()) == pytest.approx(
        patching.direct_logit_attribution(cat, ids, direction, scale=single), rel=1e-5)
    B = ids[None]
    got = patching.direct_effects(cat, B, B, scale=torch.full((1, B.shape[1], 1), 2.0, dtype=torch.float64))
    assert got["scale"].dtype == cat.E.dtype


# ------------------------------------------------------------ 2: float8 and long double

def test_final_norm_scale_and_attribute_refuse_float8(cat, cat_world, refused):
    _, parts, h, direction = parts_of(cat, cat_world)
    refused(lambda: patching.final_norm_scale(cat, h.to(F8)), "h should be", "float8")
    refused(lambda: patching.attribute(cat, parts, direction, torch.tensor([2.0]).to(F8)), "scale", "float8")
    refused(lambda: patching.attribute(cat, {k: v.to(F8) for k, v in parts.items()}, direction, 2.0),
            "the part", "float8")


def test_best_heads_refuses_float8_and_long_double(refused):
    refused(lambda: real.best_heads(torch.ones(2, 3).to(F8), 2), "scores", "float8")
    refused(lambda: real.best_heads(np.ones((2, 3), np.longdouble), 2), "scores", str(np.dtype(np.longdouble)))
    refused(lambda: real.distinct_per_block(np.ones((32, 2), np.longdouble)), "W", str(np.dtype(np.longdouble)))
    assert real.best_heads(np.array([[0.0, 2.0, 1.0]]), 2) == [(0, 1), (0, 2)]


# ------------------------------------------------------------ 3: a list whose __len__ raises

def test_step_seconds_and_the_sampling_explorer_read_a_list_by_the_built_ins(dragon, dragon_world, capsys):
    from helpers import worlds

    assert sampling.step_seconds(dragon, L([4, 8]), repeats=1)["lengths"] == [4, 8]
    sampling_explorer.explorer(dragon, worlds.dragon_world(), L(["<BOS> dragon drinks"]))
    capsys.readouterr()


def test_normalization_plots_read_a_list_by_the_built_ins():
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots()
    nz.plot_stream(ax, L(["h0", "L0.h_mid"]), [[1.0, 2.0], [1.0, 2.0]], L(["a", "b"]), "t")
    x = np.array([1.0, 2.0, 4.0])
    nz.plot_steps(x, nz.layer_norm_steps(x), labels=L(["a", "b", "c"]))
    curves, plain = nz.load_curves(), nz.load_plain_curves()
    nz.plot_residual(curves, plain, depths=L([2, 4]))
    plt.close("all")
    assert nz.best_loss(L([L(["a", "b"]), ["a", "c"]])) == pytest.approx(nz.best_loss([["a", "b"], ["a", "c"]]))


def test_patching_reads_heads_and_parts_by_the_built_ins(induction):
    from helpers.ablation.compute import induction_pairs

    got = patching.composition_scores(induction, L([0, 0]), (1, 0))
    assert got == patching.composition_scores(induction, (0, 0), (1, 0))
    clean, corrupt = induction_pairs(2, 4, 16, seed=1)
    metric = lambda out: out["logits"][:, -1, 0]
    cells = patching.path_patch(induction, clean, corrupt, metric, (0, 1), L([L([1, 0])]), parts=L(["q", "v"]))
    assert set(cells) == {((1, 0), "q"), ((1, 0), "v")}
    assert patching.ablation_replace(L([L([0, 1])])).keys() == {"L0.head_out"}
    assert patching.check_names(induction, L(["L0.h"]), "names") == ["L0.h"]


def test_the_real_chapter_reads_lists_by_the_built_ins():
    model, tok = smol()
    assert real.first_top_layer(dict(layers=L([-1, 0]), rank=L([1, 0]))) == 0
    assert real.check_temperatures(L([0.5, 1.0])) == [0.5, 1.0]
    assert real.check_layers(model, L([0, 1])) == [0, 1]
    assert len(real.continuations(model, tok.encode("The cat"), 1, seeds=L([0, None]))) == 2
    view = real.patching_view(model, tok, answers=L([" Paris", " Rome"]), layers=L([0]))
    assert view["layers"] == [0]
    clean, corrupt, answers = circuit.fact_batch(tok, L([L(["France", "Italy"])]), circuit.CAPITALS)
    assert clean.shape[0] == corrupt.shape[0] == answers.shape[0] == 1
    assert circuit.random_heads(model.cfg, 2, avoid=L([L([0, 0])])) and circuit.check_head(model, L([1, 2]), "h") == (1, 2)


def test_size_table_logit_difference_and_the_ablation_explorer_read_lists_by_the_built_ins(cat, cat_world, capsys):
    bpe = tk.train_bpe("the cat sat on the mat " * 50, 260)
    assert [row["size"] for row in tk.size_table(bpe, L([256, 258]), "the cat", "the mat")] == [256, 258]
    assert callable(ablation.logit_difference(cat_world, up=L(["big", "small"]), down=L(["red", "blue"])))
    ablation_explorer.explorer(cat, cat_world, L(ablation_explorer.PROMPTS[:2]))
    ablation_explorer.explorer(cat, cat_world.tokenizer, L(ablation_explorer.PROMPTS))
    capsys.readouterr()
