"""Round 18, chapters 07, 08, 10 and 11: a learner's module that keeps a persistent buffer (eps, a constant)
was told "your function stopped ... with ValueError", as if their code had crashed, instead of what the
state_dict should hold; best_loss's entropy from counts was written twice (here, in a test); two different
`check_result`s; the checks of chapters 10 and 11 took a wrapper around the course's own implementation."""
from collections import Counter

import numpy as np
import pytest
import torch
from torch import nn

from helpers import patching
from helpers.ablation import checks as ablation_checks
from helpers.ablation import compute as ablation
from helpers.exercises import Function
from helpers.mlp import checks as mlp_checks
from helpers.mlp import explorer as mlp_explorer
from helpers.normalization import checks as nz_checks
from helpers.normalization import compute as nz
from helpers.real import checks as real_checks
from helpers.real import compute as real


def one_sentence(said):
    """The single sentence of a check's feedback, asserted to be one sentence with no word of a crash."""
    assert len(said) == 1, said
    sentence = said[0]
    assert "\n" not in sentence and ". " not in sentence, sentence
    assert "stopped" not in sentence and "ValueError" not in sentence, sentence
    return sentence


class BufferedLayerNorm(nn.Module):
    """A right LayerNorm that keeps eps as a persistent buffer."""

    def __init__(self, d, eps=1e-5):
        super().__init__()
        self.weight, self.bias = nn.Parameter(torch.ones(d)), nn.Parameter(torch.zeros(d))
        self.register_buffer("eps", torch.tensor(eps))

    def forward(self, x):
        centred = x - x.mean(-1, keepdim=True)
        return centred / torch.sqrt(x.var(-1, unbiased=False, keepdim=True) + self.eps) * self.weight + self.bias


# ------------------------------------------------------------ 1: a persistent buffer is named, not a crash

def test_layer_norm_with_eps_as_a_buffer_is_told_what_the_state_dict_should_hold(cat):
    sentence = one_sentence(nz_checks.layer_norm_module.feedback(BufferedLayerNorm, cat))
    for words in ("LayerNorm's state_dict should hold exactly the course's keys ['bias', 'weight']",
                  "also holds ['eps']", "persistent=False"):
        assert words in sentence, sentence


def test_mlp_with_a_buffer_is_told_what_the_state_dict_should_hold(cat, dragon):
    class MLP(nn.Module):
        def __init__(self, d_model, d_ff, bias=True):
            super().__init__()
            self.W_1, self.W_2 = nn.Parameter(torch.empty(d_model, d_ff)), nn.Parameter(torch.empty(d_ff, d_model))
            self.b_1, self.b_2 = nn.Parameter(torch.zeros(d_ff)), nn.Parameter(torch.zeros(d_model))
            self.register_buffer("root_two", torch.tensor(2.0).sqrt())

        def forward(self, x):
            z = x @ self.W_1 + self.b_1
            return z * (1 + torch.erf(z / self.root_two)) / 2 @ self.W_2 + self.b_2
    sentence = one_sentence(mlp_checks.mlp_module.feedback(MLP, cat, dragon))
    assert "MLP's state_dict should hold exactly the course's keys ['W_1', 'W_2', 'b_1', 'b_2']" in sentence
    assert "also holds ['root_two']" in sentence and "persistent=False" in sentence


def test_block_whose_layer_norms_keep_eps_as_a_buffer_is_told_what_the_state_dict_should_hold(cat):
    class Block(nn.Module):
        def __init__(self, d_model, n_heads, d_ff):
            super().__init__()
            self.ln1, self.ln2 = BufferedLayerNorm(d_model), BufferedLayerNorm(d_model)
            self.attn, self.mlp = nz.Block(d_model, n_heads, d_ff).attn, nz.Block(d_model, n_heads, d_ff).mlp

        def forward(self, h):
            h_mid = h + self.attn(self.ln1(h))
            return h_mid + self.mlp(self.ln2(h_mid))
    sentence = one_sentence(nz_checks.block_module.feedback(Block, cat))
    assert "Block's state_dict should hold exactly the course's keys" in sentence, sentence
    assert "also holds ['ln1.eps', 'ln2.eps']" in sentence and "persistent=False" in sentence, sentence
    assert "submodules are named" not in sentence   # nothing is missing: the names are right


def test_missing_and_renamed_keys_say_what_the_course_expects(cat):
    class LayerNorm(nn.Module):   # gamma and beta instead of weight and bias
        def __init__(self, d, eps=1e-5):
            super().__init__()
            self.gamma, self.beta, self.eps = nn.Parameter(torch.ones(d)), nn.Parameter(torch.zeros(d)), eps

        def forward(self, x):
            return x
    sentence = one_sentence(nz_checks.layer_norm_module.feedback(LayerNorm, cat))
    assert "lacks ['bias', 'weight'] and also holds ['beta', 'gamma']" in sentence, sentence
    assert "name them weight and bias and make them parameters" in sentence, sentence


# ------------------------------------------------------------ 2: the entropy from counts, written once

def test_entropy_of_counts_is_best_losss_own():
    assert nz.entropy_of_counts([Counter(a=1, b=1)]) == pytest.approx(np.log(2))
    assert nz.entropy_of_counts([Counter(a=3), Counter(a=1, b=1, c=2)]) == pytest.approx(
        (0 + np.log(4) + np.log(4) + 2 * np.log(2)) / 7)
    sentences = [["<BOS>", "a", "b"], ["<BOS>", "a", "c"], ["<BOS>", "d", "b"]]
    # prefixes: <BOS> -> a, a, d; <BOS> a -> b, c; <BOS> d -> b
    assert nz.best_loss(sentences) == pytest.approx(
        nz.entropy_of_counts([Counter(a=2, d=1), Counter(b=1, c=1), Counter(b=1)]))


# ------------------------------------------------------------ 3: check_result says what it checks

def test_the_probe_explorers_check_names_the_probe(refused):
    assert not hasattr(mlp_explorer, "check_result") and not hasattr(mlp_explorer, "check_words")   # geometry's are others
    refused(lambda: mlp_explorer.check_bar_words([], "words"), "a list of 1 to 100 words")
    refused(lambda: mlp_explorer.check_probe_result({"layer": 0}), "mlp.probe(model, world, collected, layer, unit)")


# ------------------------------------------------------------ 4: chapters 10 and 11 refuse the course's own piece

FUNCTION_CHECKS = [(module, name) for module in (ablation_checks, real_checks) for name in dir(module)
                   if isinstance(getattr(getattr(module, name), "answer", None), Function)]


@pytest.mark.parametrize("module, name", FUNCTION_CHECKS, ids=[name for _, name in FUNCTION_CHECKS])
def test_every_function_exercise_of_chapters_10_and_11_names_the_courses_own(module, name):
    assert len(FUNCTION_CHECKS) == 8
    assert getattr(module, name).answer.own, name


def refused_as_the_courses(said, piece):
    assert len(said) == 1 and "that you write, but it ran the course's own" in said[0] and piece in said[0], said


def test_a_wrapper_around_the_courses_patching_is_refused(cat, cat_world):
    tok, metric = cat_world.tokenizer, ablation.logit_difference(cat_world)
    said = ablation_checks.patch_grid.feedback(
        lambda model, clean, corrupt, metric: patching.patch_heads(model, clean, corrupt, metric, per_position=True),
        cat, tok.encode("<BOS> the dog was"), tok.encode("<BOS> the floor was"), metric)
    refused_as_the_courses(said, "helpers.patching.patch_heads")


def test_a_wrapper_around_the_courses_parameter_count_is_refused(cat):
    said = real_checks.layer_parameters.feedback(lambda cfg: real.parameter_formula(cfg)["per_layer"], cat.cfg)
    refused_as_the_courses(said, "helpers.real.compute.parameter_formula")


def test_a_wrapper_around_chapter_07s_layer_count_is_refused(cat):
    from helpers.mlp import compute as mlp

    def layer_parameters(cfg):   # the course's count, with the norms taken out when there are none
        count = mlp.layer_parameters(cfg.d_model, cfg.d_ff, cfg.bias, cfg.n_heads, cfg.kv_heads, cfg.activation,
                                     "rms" if cfg.norm_kind == "rmsnorm" else "layer")
        return count["total"] - (count["norms"] if cfg.norm == "none" else 0)
    refused_as_the_courses(real_checks.layer_parameters.feedback(layer_parameters, cat.cfg),
                           "helpers.mlp.compute.layer_parameters")
