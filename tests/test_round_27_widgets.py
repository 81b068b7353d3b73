"""Round 27 (issue 31), reader A entries 2, 5, 6: plots.prob_bars refuses a highlight entry that is not a word (an
array compared element by element) in one sentence, and shows an unknown long word cut; a model loaded inside
torch.inference_mode() (inference tensors: no version counter) is keyed by model.weights_state through its numbers'
digest, so the explorers and head_view take it and still see an in-place change; frames.Frames drops an "update"
from the page (its controls, kinds and keep are the kernel's) with one log line."""
import io
import logging
from contextlib import redirect_stdout

import ipywidgets as widgets
import matplotlib
import matplotlib.pyplot as plt
import numpy as np
import pytest
import torch

from helpers import model as M
from helpers import plots, worlds
from helpers.errors import CourseInputError
from helpers.explorer import Explorer
from helpers.heads import compute as heads
from helpers.heads import explorer as heads_explorer
from helpers.tour import explorer as tour_explorer
from helpers.weights import load_cat

matplotlib.use("Agg")
P, VOCAB = np.array([0.1, 0.2, 0.3, 0.4]), ["a", "b", "c", "d"]


# Entry 2: prob_bars(highlight=...)

@pytest.mark.parametrize("entry", [np.array([1, 2]), np.array(["a", "b"]), torch.tensor([1, 2]), ["a"], None, 3])
def test_a_highlight_entry_that_is_not_a_word_is_one_sentence(entry):
    figures = plt.get_fignums()
    with pytest.raises(CourseInputError, match=r"^highlight should be a list of the vocabulary's words \(strings\), "
                                               r"but it holds [^\n]+$"):
        plots.prob_bars(P, VOCAB, highlight=[entry])
    assert plt.get_fignums() == figures   # refused before any figure is made


def test_an_unknown_long_word_is_cut_in_the_sentence():
    with pytest.raises(CourseInputError) as caught:
        plots.prob_bars(P, VOCAB, highlight=["a", "x" * 100_000, "zz"])
    sentence = str(caught.value)
    assert len(sentence) < 200 and "\n" not in sentence
    assert sentence == ("highlight should be a list of the vocabulary's words, but got words not in it: "
                        "a str of length 100000, 'zz'")


def test_a_highlight_that_is_not_a_list_names_its_type():
    with pytest.raises(CourseInputError, match=r"^highlight should be a list of the vocabulary's words, but got int$"):
        plots.prob_bars(P, VOCAB, highlight=3)


def bar_colors(ax):
    return [matplotlib.colors.to_hex(bar.get_facecolor()) for bar in ax.patches]


def test_the_highlighted_words_are_drawn_in_the_accent_colour():
    ax = plots.prob_bars(P, np.array(VOCAB), highlight=("b", "d"))   # a NumPy array of words too
    assert bar_colors(ax) == [plots.BASE, plots.ACCENT, plots.BASE, plots.ACCENT]
    plt.close(ax.figure)


def test_a_vocabulary_entry_that_is_not_a_string_is_never_highlighted():
    ax = plots.prob_bars(P, [np.array([1, 2]), "b", 3, "d"], highlight=["d"])   # no element-wise comparison
    assert bar_colors(ax) == [plots.BASE, plots.BASE, plots.BASE, plots.ACCENT]
    plt.close(ax.figure)


# Entry 5: a model loaded inside torch.inference_mode()

@pytest.fixture(scope="module")
def inference_cat():
    with torch.inference_mode():
        cat = load_cat()
    assert next(cat.parameters()).is_inference()
    return cat


def test_weights_state_keys_an_inference_model_by_its_numbers(inference_cat, monkeypatch):
    cat = inference_cat
    # without the sums (a larger model), the digest alone must see the change
    monkeypatch.setattr(M, "DIGEST_NUMBERS", 0)
    for kwargs in ({}, {"strong": True}, {"exact": True}):
        assert M.weights_state(cat, **kwargs) == M.weights_state(cat, **kwargs)
        hash(M.weights_state(cat, **kwargs))
    monkeypatch.setattr(M, "STRONG_NUMBERS", 0)   # the strong key of a real model's size: no SHA-256 of all
    before = {name: M.weights_state(cat, **kwargs) for name, kwargs in
              (("plain", {}), ("strong", {"strong": True}), ("exact", {"exact": True}))}
    weight = next(cat.parameters())
    saved = weight.detach().clone()
    try:
        with torch.inference_mode():   # where an inference tensor changes in place, and no counter moves
            weight.mul_(1.5)
        after = {name: M.weights_state(cat, **kwargs) for name, kwargs in
                 (("plain", {}), ("strong", {"strong": True}), ("exact", {"exact": True}))}
        assert all(after[name] != before[name] for name in before)
    finally:
        with torch.inference_mode():
            weight.copy_(saved)
    assert M.weights_state(cat) == before["plain"]


def test_a_plain_model_is_still_keyed_by_its_version_counters():
    net = torch.nn.Linear(2, 2)
    before = M.tensor_version(net.weight)
    assert before == net.weight._version
    with torch.no_grad():
        net.weight.add_(0.0)
    assert M.tensor_version(net.weight) == before + 1


def test_the_tour_explorer_and_head_view_take_a_model_loaded_in_inference_mode(inference_cat):
    world = worlds.cat_world()
    with redirect_stdout(io.StringIO()):
        view = tour_explorer.explorer(inference_cat, world)
    assert view.picture()
    cache = {}
    heads.head_view(inference_cat, 0, 0, "<BOS> the cat sat", world, cache=cache)
    assert cache


def test_the_heads_explorer_made_inside_inference_mode(monkeypatch):
    monkeypatch.setattr(M, "_ROTARY_TABLES", {})   # the rotary table is made inside inference mode too
    with torch.inference_mode(), redirect_stdout(io.StringIO()):
        view = heads_explorer.explorer()
    assert view.picture()
    assert M._ROTARY_TABLES and not any(t.is_inference() for cos, sin, _ in M._ROTARY_TABLES.values()
                                        for t in (cos, sin))


# Entry 6: the page cannot set the Frames widget's own traits

pytest.importorskip("anywidget")


@pytest.fixture
def explorer():
    controls = {"slope": widgets.FloatSlider(value=1.0, min=0, max=2, step=0.5),
                "word": widgets.Dropdown(options=["a", "b"], value="b")}
    ex = Explorer(controls, lambda slope, word: b"\x89PNG picture")
    ex.sent_messages = []
    ex.frames.send = lambda content, buffers=None: ex.sent_messages.append(content)
    return ex


def traits(frames):
    return list(frames.kinds), frames.keep, list(frames.controls)


@pytest.mark.parametrize("state", [{"kinds": ["label"] * 3, "keep": -5}, {"controls": []}, {"keep": 10},
                                   {f"k{i}": i for i in range(50)}, "all", {}])
def test_an_update_from_the_page_is_dropped_with_a_log_line(explorer, caplog, state):
    frames = explorer.frames
    before = traits(frames)
    with caplog.at_level(logging.WARNING, logger="course.frames"):
        frames._handle_msg({"content": {"data": {"method": "update", "state": state, "buffer_paths": []}},
                            "buffers": []})
    assert traits(frames) == before
    lines = [r.getMessage() for r in caplog.records if r.name == "course.frames"]
    assert len(lines) == 1 and lines[0].startswith("explorer: a message from the page was dropped: expected no "
                                                   "change to the picture's settings")
    assert "\n" not in lines[0] and len(lines[0]) < 300


def test_after_a_dropped_update_the_explorer_still_answers_the_page(explorer, caplog):
    explorer.frames._handle_msg({"content": {"data": {"method": "update", "state": {"kinds": ["label"] * 3}}},
                                 "buffers": []})
    custom = {"content": {"data": {"method": "custom", "content": {"kind": "hello", "lab": True}}}, "buffers": []}
    explorer.frames._handle_msg(custom)
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="course.frames"):
        custom["content"]["data"]["content"] = {"kind": "want", "state": [1.5, ["a", 0]]}
        explorer.frames._handle_msg(custom)
    assert not [r for r in caplog.records if r.name == "course.frames"]   # not dropped as the wrong length
    assert explorer.sent_messages and explorer.sent_messages[-1]["kind"] == "frame"
