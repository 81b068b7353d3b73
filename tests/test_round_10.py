"""Round 10 of the red team (a fifth reader, given only the notebooks and helpers/): a learner's
tokenizer is read through one checked door, undefined softmaxes and overflowing sums are refused,
an attention or MLP built alone holds numbers, a model in training mode samples as in eval mode, a
subclass of the course's piece with no forward of its own is not the learner's, and a model handed
to a check is left as it was."""
import numpy as np
import pytest
import torch

from helpers import reference as ref
from helpers.ablation import explorer as ablation_explorer
from helpers.gpt import checks as gpt_checks, compute as gpt
from helpers.heads import checks as heads_checks, compute as heads, explorer as heads_explorer
from helpers.mlp import checks as mlp_checks, compute as mlp
from helpers.model import MLP, Attention, Block, Config, Transformer
from helpers.normalization import checks as norm_checks, compute as norm
from helpers.sampling import compute as sampling, explorer as sampling_explorer


class Tokenizer:
    """A learner's tokenizer over the dragon world's words, each of its three parts replaceable."""

    def __init__(self, world, vocab=None, encode=None, decode=None):
        self.vocab = list(world.tokenizer.vocab) if vocab is None else vocab
        self.encode = encode or world.tokenizer.encode
        self.decode = decode or world.tokenizer.decode


ODD_TOKENIZERS = {   # part -> (what it gives, words of the sentence)
    "encode None": (dict(encode=lambda text: None), "encode", "None"),
    "encode floats": (dict(encode=lambda text: [0.5, 1.5]), "encode", "0.5"),
    "encode bools": (dict(encode=lambda text: [True, False]), "encode", "True"),
    "encode nested": (dict(encode=lambda text: [[1, 2]]), "encode", "[[1, 2]]"),
    "encode negative": (dict(encode=lambda text: [-1, 2]), "encode", "-1"),
    "decode a number": (dict(decode=lambda ids: 5), "decode", "5"),
    "decode numbers": (dict(decode=lambda ids: [1] * len(ids)), "decode", "[1"),
    "decode a lone surrogate": (dict(decode=lambda ids: ["\ud800"] * len(ids)), "decode", "one text per id"),
    "decode too long": (dict(decode=lambda ids: "x" * 300_000), "decode", "300000"),
    "vocab a number": (dict(vocab=0), "vocab", "0"),
    "vocab of surrogates": (dict(vocab=["\ud800"] * 10), "vocab", "token texts"),
}


@pytest.mark.parametrize("odd", sorted(ODD_TOKENIZERS))
def test_round_10_the_sampling_explorer_reads_a_learners_tokenizer_through_one_checked_door(odd, dragon, dragon_world,
                                                                                              refused):
    parts, part, shown = ODD_TOKENIZERS[odd]
    tokenizer = Tokenizer(dragon_world, **parts)
    refused(lambda: sampling_explorer.explorer(dragon, tokenizer).picture(), part, shown)


@pytest.mark.parametrize("odd", ["encode None", "encode floats", "encode negative", "decode a number",
                                 "decode a lone surrogate", "vocab of surrogates"])
def test_round_10_the_heads_and_ablation_explorers_read_a_learners_tokenizer_so_too(odd, dragon, dragon_world, refused):
    parts, part, shown = ODD_TOKENIZERS[odd]
    tokenizer = Tokenizer(dragon_world, **parts)
    refused(lambda: heads_explorer.explorer(dragon, 0, 0, tokenizer=tokenizer, prompts=["<BOS> dragon"]).picture(),
            part, shown)
    refused(lambda: ablation_explorer.explorer(dragon, tokenizer, prompts=["<BOS> dragon"]).picture(), part)


def test_round_10_a_right_learners_tokenizer_still_draws(dragon, dragon_world):
    one_text = Tokenizer(dragon_world, decode=lambda ids: " ".join(dragon_world.tokenizer.decode(ids)))
    state = sampling.prompt_state(dragon, one_text, "<BOS> dragon drinks", room=4)
    out = sampling.slide(dragon, one_text, "<BOS> dragon drinks", n_continuations=2, length=4, state=state)
    assert all(isinstance(text, str) and text for text in out["continuations"])
    assert all(len(tokens) == 4 for tokens in out["continuation_tokens"])   # one text per id, decoded id by id
    ids, tokens = heads.prompt_tokens(dragon, Tokenizer(dragon_world), "<BOS> dragon drinks")
    assert tokens == dragon_world.tokenizer.decode(ids)


def test_round_10_softmax_of_a_row_with_every_score_hidden_is_refused(refused):
    refused(lambda: ref.softmax(np.array([[-np.inf, -np.inf], [0.0, 0.0]])), "all -inf", "1 of 2")
    assert np.allclose(ref.softmax(np.array([[-np.inf, 0.0], [0.0, 0.0]])), [[0, 1], [0.5, 0.5]])


def test_round_10_attention_names_Q_and_K_when_their_scores_overflow_and_refuses_NaN(refused):
    X = np.random.default_rng(0).normal(size=(3, 4))
    refused(lambda: ref.attention(X * 1e200, X * 1e200, X), "Q and K", "overflow")
    refused(lambda: ref.attention(X, X, np.where(X > 0, np.nan, X)), "V should hold finite numbers")


def test_round_10_rotate_pairs_refuses_NaN_and_angles_that_overflow(refused):
    refused(lambda: ref.rotate_pairs(np.full((2, 4), np.nan), [0, 1]), "x should hold finite numbers")
    refused(lambda: ref.rotate_pairs(np.ones((1, 4)), [1e308]), "each position should be at most", "1e+308")
    refused(lambda: ref.rotate_pairs(np.ones((1, 4)), [1e308], base=1e-10), "base should be > 1")   # (round 25)


def test_round_10_token_ids_too_large_or_ragged_are_named_as_such(refused):
    model = Transformer(Config(vocab_size=20, d_model=16, n_heads=2, n_layers=1, d_ff=32))
    refused(lambda: model([2**70]), "[0, 20)", "too large for a 64-bit integer")
    refused(lambda: model([[1, 2], [3]]), "rows of different lengths")


def test_round_10_logits_with_every_token_ruled_out_are_named_as_such(refused):
    refused(lambda: sampling.with_temperature(torch.full((3,), -float("inf")), 1.0), "at least one token", "all 3")


def test_round_10_mlp_forward_names_the_argument_holding_NaN_and_refuses_an_overflow(refused):
    x, W_1, b_1, W_2 = np.array([[0.5, 1.0]]), np.ones((2, 3)), np.zeros(3), np.ones((3, 2))
    refused(lambda: mlp.mlp_forward(x, W_1, b_1, W_2, np.array([np.nan, 0.0])), "b_2", "1 of its 2")
    refused(lambda: mlp.mlp_forward(np.array([[np.nan, 1.0]]), W_1, b_1, W_2, np.zeros(2)), "x should", "1 of its 2")
    refused(lambda: mlp.mlp_forward(x * 1e300, W_1 * 1e300, b_1, W_2, np.zeros(2)), "x @ W_1 + b_1", "overflows")


def test_round_10_unigram_loss_counts_a_broadcast_view_before_it_reads_it(refused):
    refused(lambda: norm.unigram_loss(np.broadcast_to(np.int64(1), (15000, 15000))), "at most 10,000,000",
            "(15000, 15000)")


def test_round_10_generate_on_a_model_in_training_mode_samples_as_in_eval_mode():
    model = Transformer(Config(vocab_size=10, d_model=16, n_heads=2, n_layers=2, d_ff=32, n_max=32, dropout=0.5),
                        init="unit").train()
    runs = [sampling.generate(model, [1, 2], 10, seed=0).tolist() for _ in range(3)]
    assert runs[0] == runs[1] == runs[2] == sampling.generate(model.eval(), [1, 2], 10, seed=0).tolist()
    model.train()
    sampling.generate(model, [1, 2], 3)
    assert model.training and all(m.training for m in model.modules())   # its mode is its own again


def test_round_10_attention_mlp_and_block_built_alone_hold_seeded_numbers():
    torch.manual_seed(0)
    before = torch.get_rng_state()
    a, b = Attention(64, 4), Attention(64, 4)
    assert torch.equal(torch.get_rng_state(), before)   # the global generator is left alone
    assert all(torch.equal(p, q) for p, q in zip(a.parameters(), b.parameters()))
    assert not torch.equal(Attention(64, 4, seed=1).W_Q, a.W_Q)
    assert torch.isfinite(a(torch.randn(1, 3, 64))).all() and float(a.W_Q.detach().std()) == pytest.approx(1 / 8, rel=0.1)
    assert torch.isfinite(MLP(8, 32)(torch.randn(2, 8))).all() and float(MLP(8, 32).W_2.detach().std()) > 0.1
    block = Block(Config(vocab_size=10, d_model=16, n_heads=2, n_layers=1, d_ff=32))
    assert torch.isfinite(block(torch.randn(1, 3, 16))).all()
    cfg = Config(vocab_size=10, d_model=16, n_heads=2, n_layers=2, d_ff=32)
    assert all(torch.equal(p, q) for p, q in zip(Transformer(cfg, seed=3).parameters(),   # a model's own draws only
                                                   Transformer(cfg, seed=3).parameters()))


BARE_SUBCLASSES = [   # (check, the course's class, the check's other arguments by fixture name)
    (norm_checks.layer_norm_module, norm.LayerNorm, ("cat",)),
    (norm_checks.block_module, norm.Block, ("cat",)),
    (mlp_checks.mlp_module, mlp.MLP, ("cat", "dragon")),
    (heads_checks.multi_head, heads.MultiHeadAttention, ()),
    (gpt_checks.gpt_module, gpt.GPT, ("cat",)),
]


@pytest.mark.parametrize("check, course, fixtures", BARE_SUBCLASSES, ids=lambda v: getattr(v, "__name__", ""))
def test_round_10_a_subclass_of_the_courses_piece_without_a_forward_of_its_own_is_not_the_learners(
        check, course, fixtures, request):
    args = [request.getfixturevalue(name) for name in fixtures]
    said = check.feedback(type(course.__name__, (course,), {}), *args)
    assert len(said) == 1 and "its __init__ and forward are the course's own" in said[0], said


def test_round_10_a_model_handed_to_a_check_is_left_as_it_was(cat):
    E = cat.E.detach().clone()

    class LayerNorm(norm.LayerNorm):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            with torch.no_grad():
                cat.E.mul_(2.0)   # the notebook's cat, a global to the learner's cell

        def forward(self, x):
            return norm.LayerNorm.forward(self, x)

    assert norm_checks.layer_norm_module.feedback(LayerNorm, cat) == []
    assert torch.equal(cat.E, E)
