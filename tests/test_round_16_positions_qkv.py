"""Red team round 16, chapters 02 (QKV by hand) and 06 (positions): every Config option of a model is
handled or refused (bias=False, n_kv_heads, an RMSNorm, rotary positions); results that would overflow
float64 are refused, not returned as inf; the positions explorer offers prompts of the model's own world;
dicts handed back to a function (layers, score terms, a view, a query result) are checked by their values."""
import time

import numpy as np
import pytest
import torch

from helpers import weights, worlds
from helpers.model import Config, Transformer
from helpers.positions import compute as pos
from helpers.positions import explorer as pos_explorer
from helpers.qkv import compute as qkv
from helpers.qkv import explorer as qkv_explorer


def small_model(**options):
    """A 1-layer model of 8 numbers a token with the Config ``options``, its weights nudged off their start."""
    cfg = dict(vocab_size=10, d_model=8, n_heads=2, n_layers=1, d_ff=0)
    model = Transformer(Config(**{**cfg, **options}), init="unit")
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.1 * torch.randn(p.shape, generator=g))
    return model


OPTIONS = [dict(bias=False), dict(n_kv_heads=1), dict(norm_kind="rmsnorm"),
           dict(n_heads=4, n_kv_heads=2, bias=False, norm_kind="rmsnorm", positions="learned")]


# --- finding 1: every Config option ----------------------------------------------------------------

@pytest.mark.parametrize("options", OPTIONS, ids=str)
def test_head_slices_give_every_heads_own_output_for_every_option(options):
    model = small_model(**options)
    ids = torch.tensor([1, 2, 3, 4, 5])
    with torch.no_grad():
        trace = model(ids, trace=True)
    attn = model.blocks[0].attn
    for head in range(attn.n_heads):
        slices = qkv.head_slices(attn, head)
        assert all(t.numel() for t in slices.values())   # (n_kv_heads=1 gave empty key and value slices)
        out = qkv.attention_head(trace["L0.ln1"], *slices.values())
        assert torch.allclose(out.float(), trace["L0.head_out"][head], atol=1e-5)


def test_head_slices_refuse_what_is_no_attention_or_no_head(refused):
    attn = small_model().blocks[0].attn
    refused(lambda: qkv.head_slices(object(), 0), "attn should be", "object")
    refused(lambda: qkv.head_slices(attn, True), "head should be", "True")
    refused(lambda: qkv.head_slices(attn, 2), "head should be", "0 to 1")


@pytest.mark.parametrize("options", OPTIONS, ids=str)
def test_score_terms_add_up_to_the_models_scores_for_every_option(options):
    model = small_model(**options)
    ids = torch.tensor([1, 2, 3, 4, 5])
    terms = pos.score_terms(model, ids)
    with torch.no_grad():
        scores = model(ids, trace=True, causal=False)["L0.scores"].double().numpy()
    assert np.abs(sum(terms.values()) - scores).max() < 1e-5
    if not model.cfg.bias and model.cfg.norm_kind == "rmsnorm":   # nothing constant left in q or k
        assert np.abs(terms[("constant", "constant")]).max() == 0


def test_score_terms_refuses_a_call_past_its_memory(refused):
    model = Transformer(Config(vocab_size=10, d_model=512, n_heads=512, n_layers=1, d_ff=0, n_max=1024))
    refused(lambda: pos.score_terms(model, torch.zeros(1024, dtype=torch.long)), "score_terms", "GiB", "fewer tokens")


def test_cat_head_cases_refuse_a_rotary_model_and_run_others_in_eval_mode(refused):
    world = worlds.cat_world()
    rotary = Transformer(Config(vocab_size=20, d_model=8, n_heads=2, n_layers=1, d_ff=0, positions="rotary"))
    refused(lambda: qkv.cat_head_cases(rotary, world), "rotary")
    model = Transformer(Config(vocab_size=20, d_model=8, n_heads=2, n_layers=1, d_ff=0, dropout=0.5, n_kv_heads=1,
                               bias=False))
    model.train()
    for case in qkv.cat_head_cases(model, world, prompts=["<BOS> the cat sat"]):
        slices = [case[name] for name in ("W_Q", "W_K", "W_V", "b_Q", "b_K", "b_V")]
        assert torch.allclose(qkv.attention_head(case["x"], *slices).float(), case["expected"], atol=1e-5)
    assert model.training   # put back as it was
    refused(lambda: qkv.cat_head_cases(model, world, prompts=["<BOS> the cat"] * 101), "at most 100 prompts")


# --- finding 2: no inf returned ---------------------------------------------------------------------

def test_rope_scores_refuse_q_and_k_whose_scores_overflow(refused):
    refused(lambda: pos.rope_scores([1e200, 1e200], [1e200, 1e200], 3), "q and k", "scale them down")
    refused(lambda: pos.rope_scores([1e300, 0.0], [1e10, 0.0], 3), "|q|·|k|")
    S = pos.rope_scores([1e150, 0.0], [1e150, 0.0], 3)
    assert np.isfinite(S).all() and S[0, 0] == pytest.approx(1e300)


def test_printed_difference_refuses_an_overflow_and_a_misplaced_minus_inf(refused):
    refused(lambda: qkv.printed_difference([1e308], [-1e308]), "finite differences", "overflow")
    refused(lambda: qkv.printed_difference([[0.0, -np.inf]], [[0.0, 0.5]]), "-inf", "same entries", "(0, 1)")
    refused(lambda: qkv.printed_difference([0.5], [-np.inf]), "-inf", "same entries")
    assert qkv.printed_difference([[1.0, -np.inf]], [[1.25, -np.inf]]) == 0.25
    assert qkv.printed_difference([1e308], [1e308]) == 0.0


def test_softmax_share_and_query_step_refuse_what_overflows(refused):
    refused(lambda: qkv.softmax_share([1e300, 1.0], 0, d=1e-300), "scores / √d", "larger d")
    refused(lambda: qkv.softmax_share([np.nan, 1.0], 0), "scores", "finite")
    refused(lambda: qkv.softmax_share([-np.inf, -np.inf], 0), "at least one key")
    assert qkv.softmax_share([-np.inf, 1.0], 1, d=4) == 1.0
    refused(lambda: qkv.query_step([1e200, 1e200], [[1e200, 1e200]], [[1.0]]), "finite scores", "query and the keys")


def test_the_spreads_and_shares_refuse_scores_whose_sums_overflow(refused):
    refused(lambda: pos.diagonal_spread([[1e308, 0.0], [0.0, -1e308]]), "S", "size at most")
    refused(lambda: pos.off_offset(np.array([[1e308, 0.0], [1e308, 1e308]])), "S", "1e+100")
    refused(lambda: pos.shift_free(np.array([[1e308, 0.0], [-1e308, 1e308]])), "S", "1e+100")
    assert pos.diagonal_spread([[1e300, 0.0], [0.0, -1e300]]) == 2e300


def test_term_shares_refuse_scores_with_nothing_to_share(cat, cat_world, refused):
    one = pos.score_terms(cat, cat_world.tokenizer.encode("<BOS>"))
    every = {"all": [(a, b) for a in pos.PARTS for b in pos.PARTS]}
    refused(lambda: pos.term_shares(one, every), "not a function of the offset", "head 0")


def test_rotate_refuses_nan_and_entries_whose_turn_overflows(refused):
    refused(lambda: pos.rotate(torch.full((1, 1, 2, 2), float("nan"))), "x", "finite")
    refused(lambda: pos.rotate(torch.full((1, 1, 2, 2), 3e38)), "x", "float32")
    assert torch.isfinite(pos.rotate(torch.full((1, 1, 2, 2), 1e38))).all()


# --- finding 3: the explorer's menu -----------------------------------------------------------------

def test_the_positions_explorer_offers_prompts_its_own_model_takes(cat, cat_world):
    dragon, dragon_world = weights.load_dragon(), worlds.dragon_world()
    menu = pos.prompts_for(dragon, dragon_world)
    assert len(menu) == pos.MAX_MENU
    for prompt in menu:   # each one a view (it refused every prompt of its old menu)
        assert pos.next_token_view(dragon, dragon_world, prompt, seed=2)["words"][0] == "<BOS>"
    assert pos.prompts_for(cat, cat_world) == pos.PROMPTS   # the cat's menu as before


def test_a_world_of_its_own_gets_prompts_from_its_sentences(refused):
    vocab = ["<BOS>", "a", "b", "c"]
    world = worlds.World("abc", worlds.Tokenizer(vocab), [["<BOS>", "a", "b", "c"], ["<BOS>", "c", "a"]])
    model = Transformer(Config(vocab_size=4, d_model=8, n_heads=2, n_layers=1, d_ff=0))
    assert pos.prompts_for(model, world) == ("<BOS> a b", "<BOS> a b c", "<BOS> c a")
    bare = worlds.World("bare", worlds.Tokenizer(vocab), [["a", "b", "c"]])
    refused(lambda: pos.prompts_for(model, bare), "bare world", "<BOS>")


def test_the_explorer_refuses_a_prompt_of_another_world(refused):
    dragon, dragon_world = weights.load_dragon(), worlds.dragon_world()
    refused(lambda: pos_explorer.explorer(dragon, dragon_world, prompt=pos.PROMPTS[0]), "prompt should be one of",
            "wizard")


# --- finding 4: values, not only keys ---------------------------------------------------------------

def test_attention_stack_checks_every_layers_values(refused):
    X, eye = np.ones((3, 2)), np.eye(2)
    layer = {"W_Q": eye, "W_K": eye, "W_V": eye}
    refused(lambda: pos.attention_stack(X, [{"W_Q": eye}]), "layers should be", "W_K")
    refused(lambda: pos.attention_stack(X, [{**layer, "W_K": "a"}]), "layer 0's W_K", "text")
    refused(lambda: pos.attention_stack(X, [{**layer, "W_K": eye > 0}]), "layer 0's W_K", "True/False")
    refused(lambda: pos.attention_stack(X, [{**layer, "W_V": np.full((2, 2), np.nan)}]), "layer 0's W_V", "finite")
    refused(lambda: pos.attention_stack(X, [layer, {**layer, "W_K": np.eye(3)}]), "layer 1's W_K", "(2, 2)")
    refused(lambda: pos.attention_stack(np.full((3, 2), np.nan), [layer]), "X", "finite")
    zero = np.zeros((2, 2))   # (scores of 0: the values pass on, and the residual doubles past float64)
    refused(lambda: pos.attention_stack(np.full((3, 2), 1.5e308), [{**layer, "W_Q": zero, "W_K": zero}]),
            "layer 0", "overflow")
    refused(lambda: pos.attention_stack(np.ones((2000, 50)), [{n: np.eye(50) for n in layer}] * 100),
            "at most 10,000,000,000")
    assert np.allclose(pos.attention_stack(X, [layer]), 2 * X)


def test_term_shares_and_spread_without_check_the_pairs_they_are_given(cat, cat_world, refused):
    terms = pos.score_terms(cat, cat_world.tokenizer.encode("<BOS> the cat sat"))
    pairs = [(a, b) for a in pos.PARTS for b in pos.PARTS]
    refused(lambda: pos.term_shares(terms, {"all": [5, *pairs]}), "each of the pairs", "5")
    refused(lambda: pos.spread_without(terms, [("word",)]), "each of the pairs", "('word',)")
    as_lists = pos.term_shares(terms, {"all": [list(p) for p in pairs], "none": []})
    assert np.allclose(as_lists["all"], 1) and np.all(as_lists["none"] == 0)
    big = {pair: value * 1e200 for pair, value in terms.items()}
    refused(lambda: pos.spread_without(big, []), "at most 1e+100")


def test_the_views_drawn_are_checked_by_their_values(cat, cat_world, refused):
    view = pos.next_token_view(cat, cat_world, pos.PROMPTS[0])
    vocab = cat_world.tokenizer.vocab
    refused(lambda: pos_explorer.view_title({}, True), "view should be", "next_token_view")
    refused(lambda: pos_explorer.view_figure({**view, "probs": view["probs"][:3]}, vocab), "view['probs']", "(3,)")
    refused(lambda: pos_explorer.view_figure({**view, "p_top": float("nan")}, vocab), "view['p_top']", "nan")
    refused(lambda: pos_explorer.view_figure({**view, "top": "wizard"}, vocab), "view['top']", "wizard")
    refused(lambda: pos_explorer.view_title(view, 1), "positions", "True or False")
    refused(lambda: pos_explorer.view_panel("abc"), "vocab", "list of words")
    assert pos_explorer.view_title(view, True).startswith(pos.PROMPTS[0])


def test_the_query_view_checks_the_result_it_draws(refused):
    _, draw = qkv_explorer.query_view()
    result = qkv.three_words_query("cat")
    refused(lambda: draw({}), "result should be", "three_words_query")
    refused(lambda: draw({**result, "token": "dog"}), "result['token']", "dog")
    refused(lambda: draw({**result, "query": [1.0, np.nan]}), "result['query']", "finite")
    refused(lambda: draw({**result, "weights": [1.0, 1.0, 1.0]}), "result['weights']", "sum to 3")
    refused(lambda: draw({**result, "visible": True}), "result['visible']", "True")
    refused(lambda: draw({**result, "scale": 1}), "result['scale']", "True or False")
    refused(lambda: qkv_explorer.fmt("ab"), "v", "text")
    refused(lambda: qkv_explorer.vector_groups([[1.0, 2.0]], ["a", "b"]), "one name per vector")
    refused(lambda: qkv_explorer.point(None, [1.0, 2.0]), "moving_arrow")
    refused(lambda: qkv_explorer.draw_fixed_arrows(None, [[1.0, 2.0]], ["a"], "red", 3.0), "ax", "Axes")
    assert draw(result)[:4] == b"\x89PNG"
    assert qkv_explorer.fmt([0.4, -0.001]) == "[0.40, 0.00]"


def test_match_permutation_runs_in_linear_time():
    words = [f"w{i}" for i in range(50_000)]
    start = time.perf_counter()
    perm = pos.match_permutation(words, words[::-1])   # (the old search, a scan per word, took minutes on this)
    assert time.perf_counter() - start < 20
    assert perm[0] == 49_999 and perm[-1] == 0
    assert list(pos.match_permutation(["a", "b", "a"], ["a", "a", "b"])) == [0, 2, 1]


def test_the_unscrambled_check_refuses_a_y_holding_nan():
    from helpers.positions import checks

    Y = np.array([[np.nan, 1.0], [2.0, 3.0]])
    (sentence,) = checks.unscrambled.feedback(np.eye(2), Y, [1, 0])
    assert "Y should hold finite numbers" in sentence
    assert checks.unscrambled.feedback(np.eye(2)[::-1], np.eye(2), [1, 0]) == []
