"""Round 31 (issue 31), reader B: chapter 08's LayerNorm checks passed an answer made of torch's builtin LayerNorm
(torch.layer_norm, the op under F.layer_norm; entry 2); generate let use_cache override a cache it never checked
(entry 3); greedy_limit checked nothing (entry 4); induction_batch took any vocab_size (entry 5)."""
import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

from helpers import grading, recipes
from helpers.normalization import checks as norm_checks
from helpers.sampling import checks as sampling_checks
from helpers.sampling import compute as sampling


# ---------------------------------------------------------------- entry 2: torch's builtin LayerNorms are refused

def tensors(x, gamma, beta):
    x = torch.as_tensor(x)
    return x, torch.as_tensor(gamma, dtype=x.dtype), torch.as_tensor(beta, dtype=x.dtype)


def via_layer_norm(x, gamma, beta, eps=1e-5):
    x, g, b = tensors(x, gamma, beta)
    return torch.layer_norm(x, x.shape[-1:], g, b, eps).numpy()


def via_native(x, gamma, beta, eps=1e-5):
    x, g, b = tensors(x, gamma, beta)
    return torch.native_layer_norm(x, x.shape[-1:], g, b, eps)[0].numpy()


def via_group_norm(x, gamma, beta, eps=1e-5):   # one group: a LayerNorm of each row
    x, g, b = tensors(x, gamma, beta)
    return (F.group_norm(x.reshape(-1, x.shape[-1]), 1, eps=eps).reshape(x.shape) * g + b).numpy()


def via_aten(x, gamma, beta, eps=1e-5):
    x, g, b = tensors(x, gamma, beta)
    return torch.ops.aten.native_layer_norm.default(x, list(x.shape[-1:]), g, b, eps)[0].numpy()


def via_rms_norm(x, gamma, beta, eps=1e-5):   # an RMSNorm of the centred row
    x, g, b = tensors(x, gamma, beta)
    return (torch.rms_norm(x - x.mean(-1, keepdim=True), x.shape[-1:], g, eps) + b).numpy()


@pytest.mark.parametrize("answer, name", [
    (via_layer_norm, "torch.layer_norm"), (via_native, "torch.native_layer_norm"),
    (via_group_norm, "torch.nn.functional.group_norm"), (via_aten, "torch.ops.aten.native_layer_norm.default"),
    (via_rms_norm, "torch.rms_norm")])
def test_the_layer_norm_function_check_refuses_torchs_builtin_norms(answer, name):
    said = norm_checks.layer_norm_function.feedback(answer)
    assert said == [f"the answer should be a function of x, gamma and beta that you write, but it ran torch's own "
                    f"{name}: write your own in the answer cell"], said


class BuiltinLayerNorm(nn.Module):
    def __init__(self, d, eps=1e-5):
        super().__init__()
        self.eps, self.weight, self.bias = eps, nn.Parameter(torch.ones(d)), nn.Parameter(torch.zeros(d))

    def forward(self, x):
        return torch.layer_norm(x, x.shape[-1:], self.weight, self.bias, self.eps)


def test_the_layer_norm_module_check_refuses_torchs_builtin_layer_norm(cat):
    said = norm_checks.layer_norm_module.feedback(BuiltinLayerNorm, cat)
    assert len(said) == 1 and "it ran torch's own torch.layer_norm: write your own" in said[0], said


def test_the_graders_record_of_a_builtin_layer_norm_is_refused_too():
    recorder = grading.Recorder(via_layer_norm)
    said = norm_checks.layer_norm_function.feedback(recorder)
    assert recorder.refused is not None and "torch's own torch.layer_norm" in recorder.refused
    assert said == [recorder.refused]


# ---------------------------------------------------------------- entry 3: generate checks cache and use_cache

@pytest.fixture(scope="module")
def prompt(cat_world):
    return cat_world.tokenizer.encode("<BOS> the cat sat")


def test_generate_checks_cache_when_use_cache_is_given(cat, prompt, refused):
    refused(lambda: sampling.generate(cat, prompt, 3, cache="banana", use_cache=True), "cache is a switch", "banana")


def test_generate_refuses_cache_false_with_use_cache_true(cat, prompt, refused):
    refused(lambda: sampling.generate(cat, prompt, 3, cache=False, use_cache=True),
            "use_cache is the old name of cache", "cache=False and use_cache=True")
    # only the old name given: it counts, as it did
    assert torch.equal(sampling.generate(cat, prompt, 3, use_cache=False),
                       sampling.generate(cat, prompt, 3, cache=False))


def test_generate_names_use_cache_when_it_set_the_cache(cat, prompt, refused):
    said = refused(lambda: sampling.generate(cat, prompt, 3, use_cache=True, causal=False),
                   "expected use_cache=False with causal=False, but got use_cache=True")
    assert "got cache=True" not in said


# ---------------------------------------------------------------- entry 4: greedy_limit checks its logits

def test_greedy_limit_checks_its_logits(refused):
    refused(lambda: sampling.greedy_limit(torch.tensor([1.0, float("nan")])), "logits should be finite numbers")
    refused(lambda: sampling.greedy_limit([[1.0, 2.0]]), "shape (V,)")
    assert sampling.greedy_limit([1.0, 3.0, 3.0]).tolist() == [0.0, 0.5, 0.5]   # (a list, as with_temperature takes)
    assert sampling.greedy_limit([0.0, -float("inf")]).tolist() == [1.0, 0.0]


def test_the_tempered_check_refuses_the_unchecked_greedy_limit():
    def tempered(logits, T):
        logits = np.asarray(logits, dtype=float)
        if T == 0:
            return sampling._greedy_limit(torch.as_tensor(logits)).numpy()
        z = logits / T - (logits / T).max()
        return np.exp(z) / np.exp(z).sum()

    said = sampling_checks.tempered_function.feedback(tempered)
    assert len(said) == 1 and "the course's own helpers.sampling.compute._greedy_limit" in said[0], said


# ---------------------------------------------------------------- entry 5: induction_batch's vocab_size has a bound

def test_induction_batch_refuses_a_vocab_size_past_2_to_the_31(refused):
    refused(lambda: recipes.induction_batch(0, batch=4, vocab_size=2**63), "vocab_size should be at most 2**31",
            "9223372036854775808")
    refused(lambda: recipes.induction_batch(0, batch=4, vocab_size=2**31 + 1), "at most 2**31")
    inputs, _ = recipes.induction_batch(0, batch=4, vocab_size=2**31)
    assert int(inputs.max()) < 2**31
