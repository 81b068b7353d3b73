"""Red team round 15 (chapter 05, heads): reader A entries 4, 5, 21, 22, 23 and the heads explorer's part
of reader B entry 5. maps_figure raised raw TypeErrors on maps, tokens or titles that are no lists and on
a first_copy of text, and drew the first copy's line anywhere (NaN, -5, 10**6, True, 2.5); intermediates and
torch_differences cast every x to float32, so a float16 or bfloat16 layer refused x in its own dtype with
a sentence naming float32; the heads explorer's attention cache was capped by count only (about 48 MB a
long prompt of a deep model, kept for 256 prompts); the course's MultiHeadAttention met x of another
dtype with a raw RuntimeError; a prompt such as "\\n", one token of a character model, was refused as
empty by head_view and the heads explorer."""
import warnings

import numpy as np
import pytest
import torch

from helpers.gpt.corpus import CharTokenizer
from helpers.heads import compute as heads
from helpers.heads import explorer
from helpers.model import Config, Transformer
from helpers.weights import load_cat

W = torch.full((4, 4), 0.25)
TOKENS = "<BOS> the cat sat".split()


@pytest.fixture(autouse=True)
def _quiet():
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    plt.close("all")   # (an earlier test in the same worker may have left figures: each test counts its own)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        yield
    import matplotlib.pyplot as plt
    plt.close("all")


def open_figures():
    import matplotlib.pyplot as plt
    return len(plt.get_fignums())


# ------------------------------------------------------------------ A4, A5: maps_figure's arguments

@pytest.mark.parametrize("kwargs, words", [
    (dict(maps=[W, W], tokens=TOKENS, titles=None), ("titles should be a list", "None")),
    (dict(maps=[W, W], tokens=None, titles=["a", "b"]), ("tokens should be a list", "None")),
    (dict(maps=None, tokens=TOKENS, titles=["a", "b"]), ("maps should be a list", "None")),
    (dict(maps=W, tokens=TOKENS, titles=["a", "b"]), ("maps should be a list", "tensor")),
    (dict(maps=[W, W], tokens=TOKENS, titles="ab"), ("titles should be a list", "'ab'")),
    (dict(maps=[W, W], tokens=TOKENS, titles=["a", "b"], first_copy="8"), ("first_copy", "'8'")),
    (dict(maps=[W, W], tokens=TOKENS, titles=["a", "b"], first_copy=[2]), ("first_copy", "[2]")),
    (dict(maps=[W, W], tokens=[], titles=["a", "b"]), ("tokens should hold 1 to 256", "0")),
    (dict(maps=[W, W[:3]], tokens=TOKENS, titles=["a", "b"]), ("(4, 4)", "map 1 has shape (3, 4)")),
])
def test_maps_figure_refuses_arguments_that_are_no_lists_in_one_sentence(refused, kwargs, words):
    refused(lambda: explorer.maps_figure(**kwargs), *words)
    assert open_figures() == 0


@pytest.mark.parametrize("first_copy", [float("nan"), -5, 0, 3, 10**6, True, 2.5, np.float64(1.0)])
def test_maps_figure_refuses_a_first_copy_whose_line_is_not_inside_the_map(refused, first_copy):
    """A 4-token map: the line goes under row 1 or 2, with rows of the map on both sides."""
    refused(lambda: explorer.maps_figure([W, W], TOKENS, ["a", "b"], first_copy=first_copy),
            "first_copy should be None or a whole number from 1 to 2")
    refused(lambda: explorer.maps_figure([np.eye(2)] * 2, ["a", "b"], ["a", "b"], first_copy=1),
            "first_copy should be None for maps of 2 tokens")
    assert open_figures() == 0


def test_maps_figure_draws_the_line_under_the_first_copy():
    for first_copy in (1, 2, np.int64(2)):
        fig = explorer.maps_figure([W, W], TOKENS, ["a", None], first_copy=first_copy)
        ax = fig.axes[0]
        assert ax.lines[0].get_ydata()[0] == first_copy + 0.5
        assert ax.get_legend().get_texts()[0].get_text() == "below the line: the second copy"


def test_maps_figure_leaves_no_figure_open_when_a_map_is_refused_while_drawing(refused):
    refused(lambda: explorer.maps_figure([W, W * float("nan")], TOKENS, ["a", "b"]), "finite")
    refused(lambda: explorer.maps_figure([W, -W], TOKENS, ["a", "b"]), ">= 0")
    assert open_figures() == 0


# ------------------------------------------------------------------ A21: a layer in float16, bfloat16, float64

@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float64])
def test_intermediates_and_torch_differences_compute_in_the_layers_dtype(dtype):
    attn = load_cat().to(dtype).blocks[0].attn
    x = torch.randn(1, 3, attn.W_Q.shape[0], generator=torch.Generator().manual_seed(0))
    kept = heads.intermediates(attn, x.to(dtype))   # x in the layer's own dtype
    with torch.no_grad():
        assert kept["attn"].dtype == dtype and torch.equal(kept["attn"], attn(x.to(dtype)))
    assert torch.equal(heads.intermediates(attn, x)["attn"], kept["attn"])   # float32 x: read in the layer's dtype
    assert torch.equal(heads.intermediates(attn, x.tolist())["attn"], kept["attn"])
    differences = heads.torch_differences(attn, x.to(dtype))
    assert max(differences.values()) < (1e-12 if dtype == torch.float64 else 0.1)


def test_check_layer_input_refuses_what_the_layers_dtype_cannot_hold_and_names_it(refused):
    attn = load_cat().half().blocks[0].attn
    d = attn.W_Q.shape[0]
    refused(lambda: heads.intermediates(attn, torch.full((1, 3, d), 1e5)), "torch.float16", "65,504", "1e+05")
    refused(lambda: heads.intermediates(attn, torch.full((1, 3, d), 10**10, dtype=torch.long)), "65,504", "1e+10")
    refused(lambda: heads.intermediates(attn, torch.ones(1, 3, d, dtype=torch.bool)), "True/False")
    message = refused(lambda: heads.intermediates(attn, torch.full((1, 3, d), 300.0)), "float16", "300")
    assert "float32" not in message


# ------------------------------------------------------------------ A23: MultiHeadAttention and x's dtype

@pytest.mark.parametrize("x", [torch.randn(1, 3, 6, dtype=torch.float64), torch.randn(1, 3, 6).half(),
                               torch.ones(1, 3, 6, dtype=torch.long)])
def test_multi_head_attention_refuses_x_of_another_dtype_in_one_sentence(refused, x):
    module = heads.MultiHeadAttention(6, 2)
    refused(lambda: module(x), "x should have the weights' dtype torch.float32", f"but has dtype {x.dtype}")


def test_multi_head_attention_takes_x_of_its_own_dtype_and_counts_its_scores(refused):
    module = heads.MultiHeadAttention(6, 2).double()
    assert module(torch.randn(2, 3, 6, dtype=torch.float64)).dtype == torch.float64
    refused(lambda: heads.MultiHeadAttention(6, 2)(torch.zeros(1, 30_000, 6)), "1.5 GiB", "30,000 tokens")


# ------------------------------------------------------------------ A22: the explorer's cache, by bytes

def test_the_attention_cache_is_capped_by_bytes(monkeypatch, cat, cat_world):
    table = heads.head_view(cat, 0, 0, "<BOS> the cat sat on the mat", cat_world, cache={})   # (2, 2, 7, 7)
    one = 2 * 2 * 7 * 7 * np.dtype(table["weights"].dtype).itemsize
    monkeypatch.setattr(heads, "MAX_CACHE_BYTES", 3 * one, raising=False)
    cache, words = {}, ["cat", "dog", "mat", "red", "big", "sat"]
    for i, word in enumerate(words):
        heads.head_view(cat, 0, 0, f"<BOS> the {word} sat on the mat", cat_world, cache=cache)
        assert sum(t.nbytes for t in cache.values()) <= 3 * one and len(cache) == min(i + 1, 3)
    assert [key[1][2] for key in cache] == [cat_world.tokenizer.encode(w)[0].item() for w in words[-3:]]
    monkeypatch.setattr(heads, "MAX_CACHE_BYTES", one - 1)   # one table alone too large: computed, not kept
    cache = {}
    assert heads.head_view(cat, 0, 0, "<BOS> the cat sat on the mat", cat_world, cache=cache)["weights"].shape == (7, 7)
    assert cache == {}


def test_a_view_is_a_copy_the_cache_keeps_apart(cat, cat_world):
    cache = {}
    view = heads.head_view(cat, 0, 0, "<BOS> the cat sat", cat_world, cache=cache)
    kept = view["weights"].copy()
    view["weights"][:] = 7.0
    assert np.array_equal(heads.head_view(cat, 0, 0, "<BOS> the cat sat", cat_world, cache=cache)["weights"], kept)


# ------------------------------------------------------------------ B5: a newline alone is a prompt

@pytest.fixture(scope="module")
def char_model():
    chars = CharTokenizer("ab\n cd:")
    model = Transformer(Config(vocab_size=len(chars.vocab), d_model=8, n_heads=2, n_layers=1, d_ff=16, n_max=16),
                        seed=0).eval()
    return model, chars


def test_a_prompt_of_one_whitespace_token_is_a_prompt(char_model):
    model, chars = char_model
    view = heads.head_view(model, 0, 0, "\n", chars)
    assert view["tokens"] == ["\n"] and view["weights"].shape == (1, 1)
    assert heads.head_view(model, 0, 1, " ", chars)["tokens"] == [" "]
    shown = explorer.explorer(model, layer=0, head=0, tokenizer=chars, prompts=["\n", "ab:"])
    assert shown.controls["prompt"].options == ("\n", "ab:")


def test_only_a_prompt_that_gives_no_token_is_refused_and_the_sentence_says_so(char_model, refused):
    model, chars = char_model
    refused(lambda: heads.head_view(model, 0, 0, "", chars), "at least one token", "'' gives none")
    refused(lambda: explorer.explorer(model, 0, 0, chars, prompts=["", "ab"]), "at least one token", "'' gives none")
    refused(lambda: explorer.explorer(model, 0, 0, chars, prompts=[5]), "a non-empty list of texts", "[5]")
    refused(lambda: heads.head_view(model, 0, 0, 5, chars), "the prompt should be a string", "5")
