"""Round 17, chapter 04 (masking) and the reference implementations: every table a call makes is counted
before the work (mask_after_softmax, apply_mask, layer_norm and the rest of reference.py, causal_attention,
OneHead), and the dragon world (no <PAD>, no <EOS>) is answered by future_reading and sample_sentences."""
import numpy as np
import pytest
import torch

from helpers import reference as ref
from helpers import worlds
from helpers.masking import compute as masking


@pytest.fixture
def counted(monkeypatch):
    """counted(module): the list of byte counts ``module``'s check_bytes is asked for from now on."""
    def spy_on(module):
        needs, real = [], module.check_bytes

        def spy(need, *args, **kwargs):
            needs.append(need)
            return real(need, *args, **kwargs)
        monkeypatch.setattr(module, "check_bytes", spy)
        return needs
    return spy_on


def expanded(*shape, dtype=torch.float32):
    """A tensor of ``shape`` that stores one number."""
    return torch.full((1,), 0.5, dtype=dtype).expand(*shape)


# ------------------------------------------------------------------ mask_after_softmax (finding 1)

def test_mask_after_softmax_refuses_what_its_tables_need(refused):
    refused(lambda: masking.mask_after_softmax(np.broadcast_to(0.0, (7_000, 7_000))),
            "mask_after_softmax", "T=7,000", "GiB", "T <=")


def test_mask_after_softmax_counts_every_table(counted):
    needs = counted(masking)
    masking.mask_after_softmax(np.zeros((40, 40)))
    assert max(needs) >= masking.AFTER_SOFTMAX_BYTES * 40 * 40 >= 35 * 40 * 40


def test_mask_after_softmax_numbers_unchanged():
    scores = torch.randn(6, 6, generator=torch.Generator().manual_seed(0))
    after = masking.mask_after_softmax(scores)
    assert torch.equal(after["before"], torch.softmax(masking.apply_mask(scores), dim=-1))
    zeroed = torch.softmax(scores, dim=-1).masked_fill(masking.causal_mask(6), 0.0)
    assert torch.equal(after["zeroed"], zeroed)
    assert torch.equal(after["renormalised"], zeroed / zeroed.sum(-1)[:, None])


# ------------------------------------------------------------------ reference.py (finding 2)

def test_layer_norm_refuses_what_its_tables_need(refused):
    refused(lambda: ref.layer_norm(np.broadcast_to(0.5, (10_000, 10_000))), "layer_norm", "GiB")


def test_layer_norm_counts_its_tables_and_gamma_beta(counted):
    needs = counted(ref)
    ref.layer_norm(np.ones((10, 20)), np.ones(20), np.zeros(20))
    assert max(needs) >= ref.LAYER_NORM_BYTES * 200 + 8 * 40 and ref.LAYER_NORM_BYTES >= 17


def test_layer_norm_refuses_a_huge_gamma_before_copying_it(refused):
    x = np.broadcast_to(0.5, (1, 50_000_000))   # 0.8 GiB of work on x and 0.75 GiB for gamma and beta as float64
    refused(lambda: ref.layer_norm(x, expanded(50_000_000), expanded(50_000_000)), "layer_norm", "GiB")


def test_layer_norm_numbers_unchanged():
    x = np.random.default_rng(0).normal(size=(4, 7)) * 3 + 1
    gamma, beta = np.linspace(0.5, 2, 7), np.linspace(-1, 1, 7)
    mean, var = x.mean(-1, keepdims=True), x.var(-1, keepdims=True)
    assert np.array_equal(ref.layer_norm(x, gamma, beta), (x - mean) / np.sqrt(var + 1e-5) * gamma + beta)


@pytest.mark.parametrize("call, per_number", [
    (lambda: ref.relu(np.ones((10, 10))), 17),
    (lambda: ref.merge_heads(np.ones((2, 5, 10))), 16),
    (lambda: ref.apply_mask(np.ones((4, 5, 5)), np.zeros((5, 5))), 16),
    (lambda: ref.rotate_pairs(np.ones((10, 10)), np.arange(10)), 41),
])
def test_reference_counts_its_tables(counted, call, per_number):
    needs = counted(ref)
    call()
    assert needs and max(needs) >= per_number * 100


def test_attention_counts_its_inputs_and_masks(counted):
    needs = counted(ref)
    Q = np.ones((6, 4))
    ref.attention(Q, Q, Q, causal=True, mask=np.zeros((6, 6)))
    assert max(needs) >= 8 * 3 * 24 + 32 * 6 * (6 + 4) + 2 * ref.MASK_BYTES * 36


def test_attention_refuses_inputs_too_big_together_before_copying(refused):
    X = expanded(2, 40_000_000)   # each passes to_numpy's count alone (0.6 GiB as float64), the three do not
    refused(lambda: ref.attention(X, X, X), "Q, K and V", "GiB")


def test_apply_mask_reference_refuses_a_result_too_big(refused):
    refused(lambda: ref.apply_mask(np.broadcast_to(0.0, (4, 7_000, 7_000)), np.zeros((7_000, 7_000), dtype=bool)),
            "apply_mask", "GiB")


def test_rotate_pairs_refuses_before_copying_positions(refused):
    x = np.broadcast_to(1.0, (10_000_000, 2))   # 0.8 GiB of work; the positions given would add 0.9 GiB
    refused(lambda: ref.rotate_pairs(x, expanded(120_000_000)), "rotate_pairs", "GiB")


# ------------------------------------------------------------------ masking.apply_mask (finding 4)

def test_apply_mask_counts_its_copy_tests_and_result(refused):
    refused(lambda: masking.apply_mask(expanded(4, 7_000, 7_000, dtype=torch.float16)), "apply_mask", "GiB")


def test_apply_mask_count_per_score(counted):
    needs = counted(masking)
    masking.apply_mask(torch.zeros(2, 5, 5, dtype=torch.float16))
    assert max(needs) >= (2 * 4 + 3) * 50
    needs.clear()
    masking.apply_mask(np.zeros((2, 5, 5)), np.zeros((5, 5)))
    assert max(needs) >= (8 + 2 * 4 + 3) * 50 + ref.MASK_BYTES * 25


def test_apply_mask_keeps_its_dtypes():
    assert masking.apply_mask(torch.zeros(3, 3, dtype=torch.float64)).dtype == torch.float64
    assert masking.apply_mask(torch.zeros(3, 3, dtype=torch.float16)).dtype == torch.float32
    assert masking.apply_mask(np.zeros((3, 3))).dtype == torch.float32


def test_causal_attention_refuses_copies_too_big_together(refused):
    q = expanded(1, 1, 2, 60_000_000, dtype=torch.float16)   # three float32 copies: 1.3 GiB, and their tests
    refused(lambda: masking.causal_attention(q, q, q), "q, k and v", "GiB")


def test_one_head_counts_its_tables(refused):
    module = masking.OneHead(4, 1_000_000)
    refused(lambda: module(expanded(60, 8, 4)), "OneHead", "GiB")


# ------------------------------------------------------------------ the dragon world (finding 3)

@pytest.fixture(scope="module")
def dragon():
    from helpers.weights import load_dragon
    return load_dragon(), worlds.dragon_world(n=3)


def test_future_reading_answers_the_dragon_world(dragon):
    model, world = dragon
    found = masking.future_reading(model, world)
    shape = (model.cfg.n_layers, model.cfg.n_heads)
    assert found["future"].shape == found["next_key"].shape == shape
    assert 0 <= found["next_word"] <= 1 and 0 <= found["own_word"] <= 1
    assert bool(((0 <= found["future"]) & (found["future"] <= 1 + 1e-6)).all())


def test_future_reading_rows_are_the_positions_before_a_word():
    world = worlds.cat_world()   # the rows read from the targets are those read from <PAD> before
    inputs, targets = world.batch(world.train)
    assert torch.equal(targets[:, :-1] != -100, inputs[:, 1:] != world.tokenizer.ids["<PAD>"])


def test_sample_sentences_answers_the_dragon_world(dragon):
    model, world = dragon
    sentences = masking.sample_sentences(model, world, n=2, max_len=6)
    assert len(sentences) == 2
    for words in sentences:   # no <EOS> to stop at: max_len words each
        assert len(words) == 6 and words[0] == "<BOS>" and set(words) <= set(world.tokenizer.vocab)


def test_sample_sentences_refuses_a_world_without_bos(dragon, refused):
    model, world = dragon
    vocab = ["<START>" if w == "<BOS>" else w for w in world.tokenizer.vocab]
    other = worlds.World("renamed", worlds.Tokenizer(vocab), [["<START>", "dragon"]])
    refused(lambda: masking.sample_sentences(model, other, n=2), "<BOS>", "renamed")
