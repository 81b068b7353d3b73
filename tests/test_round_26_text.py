"""Issue 31, round 26 (text): a learner's or a model's text is drawn as typed, never as matplotlib math.

matplotlib reads "$...$" in any text as math text: a word "$x^2$" was drawn as x², and a "$$" raised a raw
ValueError when the figure was drawn. Every text from a world, a prompt, a model's sample or a token now goes
through ``plots.literal``: the mlp and masking explorers over a world of one's own, chapter 08's stream and
step plots, chapter 01's word maps and the live run's sample (the sample is checked to be a text first).
"""
import matplotlib.pyplot as plt
import numpy as np
import pytest
import torch
from matplotlib.text import Text

from helpers.gpt import compute as gc
from helpers.geometry import compute as geometry
from helpers.masking import explorer as masking_explorer
from helpers.mlp import explorer as mlp_explorer
from helpers.model import Config, Transformer
from helpers.normalization import compute as nz
from helpers.worlds import Tokenizer, World

WORDS = ["$", "$$", "$x^2$", "\\", "<b>", "&amp;", "a\\$b"]   # math, an unclosed one, an escaped dollar, HTML


@pytest.fixture(autouse=True)
def no_figures_left():
    yield
    plt.close("all")


def drawn(fig):
    """Draw ``fig`` (a "$$" read as math raises here) and return what each of its texts shows, as
    matplotlib preprocesses it; every one must be plain text (no math, no TeX)."""
    fig.canvas.draw()
    shown = []
    for text in fig.findobj(lambda artist: isinstance(artist, Text)):
        s, math = text._preprocess_math(text.get_text())
        assert not math and not text.get_usetex(), text.get_text()
        shown.append(s)
    return shown


def own_world():
    vocab = ["<PAD>", "<BOS>", "<EOS>", "the", *WORDS]
    sentences = [["<BOS>", "the", w, v, "<EOS>"] for w in WORDS for v in WORDS[:3]]
    return World("mine", Tokenizer(vocab), sentences)


def own_model(V, n_layers=1):
    torch.manual_seed(0)
    return Transformer(Config(vocab_size=V, d_model=16, n_heads=2, n_layers=n_layers, d_ff=32, n_max=16))


def figure_of(explorer):
    """The figure an explorer's render draws on (held in its closure)."""
    from matplotlib.figure import Figure

    cells = [c.cell_contents for c in explorer.render.__closure__ or ()]
    for value in cells:
        for candidate in (value, getattr(value, "figure", None), getattr(value, "__self__", None)):
            if isinstance(candidate, Figure):
                return candidate
        inner = getattr(value, "__closure__", None) or ()
        for cell in inner:
            if isinstance(getattr(cell.cell_contents, "figure", None), Figure):
                return cell.cell_contents.figure
            if isinstance(cell.cell_contents, Figure):
                return cell.cell_contents
    raise AssertionError("no figure found")


# ------------------------------------------------------------ chapter 07: the mlp explorer

def test_the_probe_panel_draws_dollar_words_and_contexts_as_typed():
    fig, draw, _ = mlp_explorer.probe_panel(WORDS)
    result = dict(layer=0, unit=1, words=WORDS, means=np.arange(len(WORDS), dtype=float),
                  top_contexts=[("<BOS> the $x^2$", 1.5)], share=0.25, promotes=["$$", "<b>"])
    draw(result)
    shown = drawn(fig)
    assert set(WORDS) <= set(shown)
    title = next(s for s in shown if s.startswith("layer 0, unit 1"))
    assert "strongest after: <BOS> the $x^2$" in title and "promotes: $$, <b>" in title
    assert "$x^2$" in mlp_explorer.probe_title(result)   # the title's text itself stays as typed


def test_the_mlp_explorer_over_a_world_of_dollar_words_draws():
    world = own_world()
    explorer = mlp_explorer.explorer(own_model(len(world.tokenizer.vocab)), world, layer=0, unit=1)
    assert explorer.picture()[:4] == b"\x89PNG"          # a raw ValueError from the math parser before
    assert {"$$", "$x^2$"} <= set(drawn(figure_of(explorer)))


# ------------------------------------------------------------ chapter 04: the masking explorer

def test_the_masking_maps_draw_dollar_words_and_the_next_word_as_typed():
    draw = masking_explorer.maps_view(1, 2, size=8)
    T = 4
    weights = torch.tril(torch.ones(T, T)) / torch.arange(1, T + 1)[:, None]
    draw(dict(words=["<BOS>", "$$", "$x^2$", "a\\$b"], weights=weights.expand(1, 2, T, T).clone(), next="$$",
              p_next=0.5, causal=True))
    shown = drawn(draw.figure)
    assert {"$$", "$x^2$", "a\\$b"} <= set(shown)
    assert any(s.endswith("next word: $$ (0.50)") for s in shown)


def test_the_masking_explorer_over_a_world_of_dollar_words_draws():
    world = own_world()
    explorer = masking_explorer.explorer({"mine": own_model(len(world.tokenizer.vocab), 2)}, world,
                                         prompt="<BOS> the $ $$ $x^2$")
    assert explorer.picture()[:4] == b"\x89PNG"
    explorer.set(prompt="<BOS> the \\ <b> &amp;")
    assert explorer.picture()[:4] == b"\x89PNG" and explorer.message.value == ""


# ------------------------------------------------------------ chapter 08: the stream and the steps

def test_plot_stream_draws_dollar_tokens_names_and_title_as_typed():
    fig, ax = plt.subplots()
    nz.plot_stream(ax, ["h0", "$L0$"], np.ones((2, len(WORDS))), WORDS, "my $$ model")
    shown = drawn(fig)
    assert [t.get_text() for t in ax.get_legend().get_texts()] == [t.replace("$", r"\$") for t in WORDS]
    assert set(WORDS) <= set(shown) and "$L0$" in shown and "my $$ model" in shown


def test_plot_stream_lists_a_token_that_starts_with_an_underscore():
    fig, ax = plt.subplots()
    nz.plot_stream(ax, ["h0", "L0.h"], np.ones((2, 3)), ["_", "_x", "a"], "title")
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["_", "_x", "a"]   # legend() alone drops two
    assert [line.get_label() for line in ax.lines] == ["_", "_x", "a"]


def test_plot_steps_draws_dollar_labels_as_typed():
    x = [1.0, 2.0, 4.0]
    fig = nz.plot_steps(x, nz.layer_norm_steps(x), labels=["$a$", "$$", "\\"])
    assert {"$a$", "$$", "\\"} <= set(drawn(fig))


# ------------------------------------------------------------ chapter 01: the word maps' groups

def test_plot_maps_draws_dollar_group_names_as_typed():
    n = 6
    result = dict(words=[f"w{i}" for i in range(n)], labels=["$g$", "$$", "x"] * 2,
                  coords={"PCA": np.random.default_rng(0).normal(size=(n, 2))}, kept={"PCA": np.full(n, 0.5)},
                  agreement={"PCA": 0.5}, k=2, seed=0)
    assert {"$g$", "$$"} <= set(drawn(geometry.plot_maps(result)))


# ------------------------------------------------------------ chapter 12: the live run's sample

def test_the_live_runs_sample_is_drawn_as_the_model_wrote_it():
    run = gc.LiveRun(10, seconds=60)
    sample = "ROMEO: it costs $$ and $x^2$,\nsays a\\$b <b>&amp;"
    run.finish(sample)
    assert run.sample == sample
    assert sample in drawn(run.fig)


def test_the_live_run_refuses_a_sample_that_is_not_a_text(refused):
    run = gc.LiveRun(10, seconds=60)
    refused(lambda: run.finish(["not", "a", "text"]), "sample should be a string", "but got list")
    assert run.sample is None and not run.finished     # nothing kept, the bar still open
    run.finish(None)
    assert run.finished and run.sample is None
