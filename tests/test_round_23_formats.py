"""Round 23, chapters 07-12's compute: a learner's whole number past 4,300 digits quoted in a refusal (Python
refuses to write such an int as text, so the sentence itself raised ValueError), a count's sentence naming
arguments its function does not have, checked ints thrown away for the raw argument, and learner values
read by NumPy outside errors.to_numpy (a tensor with grad raised RuntimeError)."""
import numpy as np
import pytest
import torch

from helpers.ablation import compute as ablation
from helpers.gpt import compute as gpt, corpus, shipped, tokenize as tk, train as course_train
from helpers.mlp import compute as mlp
from helpers.normalization import compute as nz
from helpers.sampling import compute as sampling

HUGE = 10**5000   # 16,610 bits: str(HUGE) raises ValueError (the int-to-text limit of 4,300 digits)
BITS = "16,610 bits"
TEXT = "the quick brown fox jumps over the lazy dog " * 20


# ---------------------------------------------------------------- 1. huge whole numbers in sentences

def test_huge_counts_of_the_sampling_counts_are_refused_in_a_sentence(refused, dragon):
    cfg = dragon.cfg
    refused(lambda: sampling.macs_by_part(cfg, HUGE), "n_new + n_seen", BITS)
    refused(lambda: sampling.macs_by_part(cfg, 1, HUGE), "n_new + n_seen", BITS)
    refused(lambda: sampling.forward_macs(cfg, 1, HUGE), "n_new + n_seen", BITS)
    refused(lambda: sampling.generation_macs(cfg, HUGE, 3, True), "prompt_len + new_tokens", BITS)
    assert BITS in sampling.settings_text(1.0, HUGE, None)   # no vocabulary to bound it: shown, cut short
    assert sampling.settings_text(0.7, 5, 0.9) == "T = 0.70,  top-k 5,  top-p 0.90"


def test_generation_macs_names_its_own_arguments(refused, dragon):
    said = refused(lambda: sampling.generation_macs(dragon.cfg, 10_000_000, 3, use_cache=True),
                   "prompt_len + new_tokens", "10,000,002")
    assert "n_seen" not in said and "n_new" not in said
    refused(lambda: sampling.generation_macs(dragon.cfg, 10_000_000, 3, use_cache=False), "prompt_len + new_tokens")
    assert sampling.generation_macs(dragon.cfg, 9_999_998, 3, use_cache=True) > 0   # the last pass: 10**7 tokens


def test_huge_sizes_of_a_layer_are_refused_in_a_sentence(refused):
    refused(lambda: mlp.layer_parameters(8, 32, n_heads=HUGE), "n_heads dividing d", BITS)
    refused(lambda: mlp.layer_parameters(8, 32, n_kv_heads=HUGE), "n_kv_heads dividing n_heads", BITS)
    refused(lambda: mlp.layer_parameters(HUGE, 32, n_heads=3), "n_heads dividing d", BITS)
    refused(lambda: mlp.layer_parameters(8, 32, experts=HUGE, active=HUGE + 1), "active", BITS)
    refused(lambda: mlp.MLP(HUGE, 4), "MLP(", BITS)


def test_huge_depths_of_the_normalization_grid_are_refused(refused):
    refused(lambda: nz.run_key("none", HUGE, 0.03), "n_layers", "at most 64", BITS)
    refused(lambda: nz.run_key("none", 65, 0.03), "n_layers", "at most 64", "65")
    assert nz.run_key("pre", 8, 0.03) == "pre/8/0.03"
    curves = nz.load_curves()
    refused(lambda: nz.get_run(curves, "pre", HUGE, 0.03), "n_layers", BITS)
    odd = dict(curves, depths=[2, HUGE])
    refused(lambda: nz.get_run(odd, "pre", 2, 0.03), "each of curves' depths", BITS)


def test_curves_steps_past_the_limit_are_said_with_a_count(refused):
    curves = nz.load_curves()
    wrong = dict(curves, steps=HUGE)
    refused(lambda: nz.check_runs(wrong, full=True), "curves' steps=", BITS)


def test_a_huge_layer_of_the_induction_metric_is_refused(refused):
    refused(lambda: ablation.induction_attention(8, layer=HUGE), "layer", BITS)
    refused(lambda: ablation.induction_attention(8, layer=1000), "layer", "0 to 999", "1000")
    assert callable(ablation.induction_attention(8, layer=np.int32(1)))


def test_huge_vocabulary_sizes_of_the_bpe_are_refused(refused):
    refused(lambda: tk.train_bpe(TEXT, HUGE), "vocab_size", BITS)
    bpe = tk.train_bpe(TEXT, 260)
    refused(lambda: tk.shorter(bpe, HUGE), "vocab_size", BITS)
    refused(lambda: tk.shorter(bpe, 10**6), "vocab_size", "1,000,000")
    assert type(tk.check_vocab_size(np.int64(300))) is int


def test_huge_windows_and_contexts_are_refused(refused):
    ids = torch.randint(0, 65, (3000,), generator=torch.Generator().manual_seed(0))
    g = torch.Generator().manual_seed(0)
    refused(lambda: corpus.windows(ids, 4, HUGE, g), "context=", BITS)
    model = shipped.load_model()
    refused(lambda: course_train.check_context(model, HUGE, 100), "context=", BITS)


def test_spread_loss_with_a_huge_every_keeps_the_first_window_as_documented():
    model = shipped.load_model()
    ids = torch.randint(0, 65, (3000,), generator=torch.Generator().manual_seed(0))
    huge, past = gpt.spread_loss(model, ids, every=HUGE), gpt.spread_loss(model, ids, every=12)
    assert huge["windows"] == past["windows"] == 1 and huge["loss"] == past["loss"]


def test_copy_rule_lengths_past_the_context_are_refused_with_a_count(refused):
    model = shipped.load_model()
    ids = torch.randint(0, 65, (3000,), generator=torch.Generator().manual_seed(0))
    refused(lambda: gpt.spread_windows(model, ids, 32, 8, [1, HUGE]), "lengths", "context=32", BITS)


def test_a_learner_vocabulary_past_any_size_is_said_with_a_count(refused):
    class Cfg:
        vocab_size, d_model, n_heads, n_layers, n_max, d_ff = HUGE, 8, 2, 1, 16, 32

    model = torch.nn.Linear(2, 2)
    model.cfg = Cfg()
    refused(lambda: course_train.check_vocabulary(model, torch.tensor([1])), "vocab_size=", BITS)


# ---------------------------------------------------------------- 1b. checked ints used, not the raw argument

def test_kv_cache_bytes_counts_numpy_int32_sizes_without_wrapping():
    sizes = [np.int32(v) for v in (64, 4096, 64, 128, 4)]
    assert sampling.kv_cache_bytes(*sizes) == 2 * 64 * 4096 * 64 * 128 * 4 == 17_179_869_184


def test_sampling_uses_the_checked_numbers(dragon):
    logits = torch.tensor([2.0, 1.0, 0.5, -1.0])
    assert torch.equal(sampling.next_distribution(logits, np.float32(0.0), top_k=np.int32(2)),
                       sampling.next_distribution(logits, 0.0, top_k=2))
    settings = sampling.slider_settings(np.float64(0.7), np.int64(3), np.float64(0.9), 10)
    assert settings == (0.7, 3, 0.9) and [type(v) for v in settings] == [float, int, float]


# ---------------------------------------------------------------- 2. learner values read through to_numpy

def grad_loss():
    return torch.tensor([2.0, 1.5, 1.2], requires_grad=True) * 1.0   # losses kept as tensors, with their graph


def test_losses_with_grad_are_read_by_the_normalization_helpers():
    unigram, best = nz.reference_losses()
    plain = [2.0, 1.5, 1.2]
    assert nz.learning_state(grad_loss(), unigram) == nz.learning_state(plain, unigram)
    assert nz.final_text(grad_loss(), "pre", 8, unigram, best) == nz.final_text(plain, "pre", 8, unigram, best)
    assert nz.run_outcome(grad_loss(), unigram, best) == nz.run_outcome(plain, unigram, best)


def test_bool_losses_are_still_refused(refused):
    refused(lambda: nz.check_loss([True, False]), "loss should hold numbers", "True/False")


def test_curves_whose_runs_hold_tensors_with_grad_are_read():
    curves = nz.load_curves()
    copied = dict(curves, runs={key: {name: torch.tensor(values, requires_grad=True) * 1.0 for name, values in run.items()}
                                for key, run in curves["runs"].items()})
    unigram, best = nz.reference_losses()
    assert nz.outcomes(copied, unigram, best) == nz.outcomes(curves, unigram, best)
    got, expected = nz.get_run(copied, "pre", 8, 0.03), nz.get_run(curves, "pre", 8, 0.03)
    assert np.allclose(got["loss"], expected["loss"]) and got["loss"].dtype == np.float64
    assert nz.stack_view(copied)["text"] == nz.stack_view(curves)["text"]
    for table in (nz.final_losses(copied), nz.final_losses(curves)):
        assert set(table) == set(curves["lrs"])
    nz.plot_grid(copied)
    nz.plot_residual(copied, copied, depths=[2, 4])


def test_figures_read_learner_tensors_with_grad():
    x = [1.0, 2.0, 0.5, 3.0]
    steps = nz.layer_norm_steps(x)
    with_grad = dict(steps, z=torch.tensor(steps["z"], requires_grad=True) * 1.0,
                     out=torch.tensor(steps["out"], requires_grad=True) * 1.0)
    nz.plot_steps(x, with_grad, printed=torch.tensor(steps["out"], requires_grad=True) * 1.0)
    grads = nz.layer_gradients("pre", 2)
    nz.plot_init({"pre": {name: torch.tensor(np.asarray(v), requires_grad=True) * 1.0 if name != "loss" else v
                          for name, v in grads.items()}})


def test_unit_selectivity_reads_where_through_to_numpy(refused, cat, cat_world):
    collected = mlp.collect_activations(cat, cat_world)
    n = len(collected["act"][0])
    where = np.arange(n) % 2 == 0
    expected = mlp.unit_selectivity(collected, 0, 0, where)
    assert mlp.unit_selectivity(collected, 0, 0, torch.tensor(where)) == expected
    assert mlp.unit_selectivity(collected, 0, 0, where.tolist()) == expected
    refused(lambda: mlp.unit_selectivity(collected, 0, 0, (torch.ones(n, requires_grad=True),)),
            "where should be", "booleans")
    refused(lambda: mlp.unit_selectivity(collected, 0, 0, torch.ones(n, requires_grad=True)),
            "where should be", "booleans", "dtype torch.float32")
    refused(lambda: mlp.unit_selectivity(collected, 0, 0, where[:-1]), "where should be", f"{n} booleans")

    class Raises:
        def __array__(self, *args, **kwargs):
            raise ZeroDivisionError

    refused(lambda: mlp.unit_selectivity(collected, 0, 0, [Raises()] * n), "where should be", "booleans")


def test_circuit_lines_and_figure_read_a_history_with_grad():
    history = gpt.induction_history(shipped.load_log())
    birth = gpt.circuit_birth(history)
    with_grad = dict(history, scores=torch.tensor(history["scores"], requires_grad=True) * 1.0)
    assert gpt.circuit_lines(with_grad, birth) == gpt.circuit_lines(history, birth)
    gpt.circuit_figure(with_grad, birth)


@pytest.mark.parametrize("entry", [ZeroDivisionError, KeyError])
def test_token_ids_whose_entries_raise_are_refused(refused, entry):
    class Rows(list):   # a row whose length cannot be read: torch.as_tensor raises what __len__ raises
        def __len__(self):
            raise entry

    refused(lambda: tk.check_token_ids([Rows([1, 2])], 300), "token ids")
    refused(lambda: nz.unigram_loss([Rows([1, 2])]), "targets")
