"""Round 28 (issue 31), reader A entries 2, 4, 9, 10, 12, 13, 14: plots.check_label_list counts labels before it
lists them (a range of 60,000,000 labels is refused at once); plots' labels are read as readout.format_matrix reads
its row labels (a __str__ that raises: one sentence); heads.head_view refuses a cache entry that is not its table,
leaving the cache as it was; tour.step_rows refuses a trace entry without a token axis; a page's "index" update to
a control without options is refused, and any other failure on a page's message dropped with a log line;
weights.load shows a refused config's sentence whole; train_word2vec on one-word sentences names the sentences."""
import json
import logging
import shutil
import tracemalloc
from collections.abc import Sequence

import ipywidgets as widgets
import matplotlib
import matplotlib.pyplot as plt
import numpy as np
import pytest
import torch

from helpers import plots, readout, weights
from helpers.errors import CourseInputError
from helpers.explorer import Explorer
from helpers.geometry import compute as geometry
from helpers.heads import compute as heads
from helpers.heads import explorer as heads_explorer
from helpers.tour import compute as tour

matplotlib.use("Agg")
THIRDS = np.full(3, 1 / 3)


class BadStr:
    def __str__(self):
        raise RuntimeError("no text")


class BadLen(Sequence):
    """Labels whose length raises (not a list: a list's length is read by list's own)."""
    def __getitem__(self, i):
        return "abc"[i]

    def __len__(self):
        raise RuntimeError("no length")


class Lying(BadLen):
    """Labels that say there are 2 and list 3."""
    def __len__(self):
        return 2


# Entry 2: a range of labels is counted, never listed, before it is refused

CALLS = {
    "prob_bars": lambda labels: plots.prob_bars(THIRDS, labels),
    "heatmap_tokens": lambda labels: plots.attention_heatmap(np.eye(3), labels),
    "heatmap_keys": lambda labels: plots.attention_heatmap(np.eye(3), ["a", "b", "c"], keys=labels),
    "maps_figure_tokens": lambda labels: heads_explorer.maps_figure([np.eye(3)] * 2, labels, ["x", "y"]),
}
NAMES = {"prob_bars": "vocab", "heatmap_tokens": "tokens", "heatmap_keys": "keys",
         "maps_figure_tokens": "tokens"}


@pytest.mark.parametrize("call", CALLS)
@pytest.mark.parametrize("n", [60_000_000, 10**12, 10**20])
def test_a_range_of_too_many_labels_is_refused_before_it_is_listed(call, n):
    figures = plt.get_fignums()
    tracemalloc.start()
    try:
        with pytest.raises(CourseInputError, match=rf"^{NAMES[call]} should hold at most 1,000,000 \w+ \(this "
                                                   rf"course's limit\), one per [^\n]+, but holds {n:,}$"):
            CALLS[call](range(n))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 2**20   # bytes: nothing was listed
    assert plt.get_fignums() == figures


@pytest.mark.parametrize("call", CALLS)
def test_labels_whose_length_raises_are_one_sentence(call):
    with pytest.raises(CourseInputError, match=rf"^{NAMES[call]} should be a list of labels, one per [^\n]+, "
                                               r"but got a BadLen that raised RuntimeError when it was read$"):
        CALLS[call](BadLen())


@pytest.mark.parametrize("call", CALLS)
def test_labels_whose_length_lies_are_one_sentence(call):
    with pytest.raises(CourseInputError, match=rf"^{NAMES[call]} should be a list of labels, one per [^\n]+, "
                                               r"but got a Lying whose length \(2\) is not the number of labels it "
                                               r"lists$"):
        CALLS[call](Lying())


def test_a_short_range_of_labels_is_still_drawn():
    bars, heatmap = plots.prob_bars(THIRDS, range(3)), plots.attention_heatmap(np.eye(3), range(3))
    assert [t.get_text() for t in bars.get_xticklabels()] == ["0", "1", "2"]
    assert [t.get_text() for t in heatmap.get_yticklabels()] == ["0", "1", "2"]
    plt.close(bars.figure)
    plt.close(heatmap.figure)


# Entry 4: a label whose __str__ raises is one sentence, as in readout.format_matrix

@pytest.mark.parametrize("call, name", [
    (lambda: plots.prob_bars(THIRDS, [BadStr(), "b", "c"]), "each word of the vocabulary shown"),
    (lambda: plots.attention_heatmap(np.eye(3), [BadStr(), "b", "c"]), "each token label"),
    (lambda: plots.attention_heatmap(np.eye(3), ["a", "b", "c"], keys=["a", BadStr(), "c"]), "each key label"),
    (lambda: plots.attention_off_heatmap(["a", BadStr()]), "each token label"),
    (lambda: heads_explorer.maps_figure([np.eye(2)] * 2, ["a", BadStr()], ["x", "y"]), "each token label"),
    (lambda: plots.cell_numbers(plt.subplots()[1], [["1", BadStr()]], [["black", "black"]]), "each label"),
])
def test_a_label_whose_text_cannot_be_read_is_one_sentence(call, name):
    figures = plt.get_fignums()
    with pytest.raises(CourseInputError, match=rf"^{name} should be text, but got a BadStr whose text could not "
                                               r"be read$"):
        call()
    for number in set(plt.get_fignums()) - set(figures):   # cell_numbers' own Axes, made by the test
        plt.close(number)
    with pytest.raises(CourseInputError, match=r"^each row label should be text, but got a BadStr whose text could "
                                               r"not be read$"):   # the same words as format_matrix's
        readout.format_matrix(np.ones((2, 2)), row_labels=[BadStr(), "b"])


def test_maps_figure_refuses_a_bad_label_before_any_figure_is_made():
    figures = plt.get_fignums()
    with pytest.raises(CourseInputError, match="each token label should be text"):
        heads_explorer.maps_figure([np.eye(2)] * 2, ["a", BadStr()], ["x", "y"])
    assert plt.get_fignums() == figures


# Entry 9: head_view(cache=) holding something that is not its table

@pytest.fixture
def filled_cache():
    cache = {}
    heads.head_view("cat", layer=0, head=0, cache=cache)
    return cache


@pytest.mark.parametrize("entry, said", [
    ("garbage", r"but it holds 'garbage'$"),
    (np.zeros((1, 1, 1, 1)), r"but its table for this prompt has shape \(1, 1, 1, 1\), not \(2, 2, 8, 8\)$"),
    (np.full((2, 2, 8, 8), np.nan), r"but its table for this prompt holds NaN or inf$"),
])
def test_a_cache_entry_that_is_not_the_prompts_table_is_refused_and_kept(filled_cache, entry, said):
    key = next(iter(filled_cache))
    filled_cache[key] = entry
    other = ("elsewhere", (1, 2))
    filled_cache[other] = np.zeros(3)   # another prompt's entry, left as it is
    before = list(filled_cache.items())
    with pytest.raises(CourseInputError, match=r"^cache should be None or a dict of head_view's attention tables "
                                               rf"\(the explorer's\), {said}"):
        heads.head_view("cat", layer=0, head=0, cache=filled_cache)
    assert [(k, id(v)) for k, v in filled_cache.items()] == [(k, id(v)) for k, v in before]


def test_a_cache_entry_elsewhere_that_is_not_a_table_is_refused(filled_cache):
    filled_cache["mine"] = {"a": 1}
    with pytest.raises(CourseInputError, match=r"^cache should be None or a dict of head_view's attention tables "
                                               r"\(the explorer's\), but it holds \{'a': 1\}$"):
        heads.head_view("cat", layer=1, head=1, cache=filled_cache)


def test_a_good_cache_is_still_read_and_kept_newest(filled_cache):
    key = next(iter(filled_cache))
    table = filled_cache[key]
    filled_cache["older"] = np.zeros(2)
    view = heads.head_view("cat", layer=1, head=1, cache=filled_cache)
    assert list(filled_cache) == ["older", key] and filled_cache[key] is table
    assert np.array_equal(view["weights"], table[1, 1])


# Entry 10: tour.step_rows on a trace entry without a token axis

@pytest.fixture
def trace(cat, cat_world):
    return cat(cat_world.tokenizer.encode("<BOS> the cat is"), trace=True)


@pytest.mark.parametrize("cut", [lambda x: x[-1], lambda x: x[None, None], lambda x: x[0, 0]])
def test_a_trace_entry_without_a_token_axis_is_one_sentence(trace, cut):
    trace["L0.q"] = cut(trace["L0.q"])
    shape = tuple(trace["L0.q"].shape)
    with pytest.raises(CourseInputError, match=r"^trace\['L0.q'\] should be \(T, width\), or \(heads, T, width\) "
                                               rf"per head, as model\(ids, trace=True\) gives it, but has shape "
                                               rf"{__import__('re').escape(str(shape))}$"):
        tour.step_rows(trace, 0, -1, ["q"])


def test_step_rows_still_reads_rows_and_heads(trace):
    rows = tour.step_rows(trace, 0, -1, ["q", "head_out"])
    assert torch.equal(rows["q"], trace["L0.q"][-1])
    assert torch.equal(rows["head_out"], trace["L0.head_out"][:, -1].reshape(-1))


# Entry 12: an "index" update from the page to a control that has no options

pytest.importorskip("anywidget")


@pytest.fixture
def explorer():
    controls = {"n": widgets.IntSlider(value=2, min=0, max=5), "on": widgets.Checkbox(value=True),
                "text": widgets.Text(value="the cat"), "word": widgets.Dropdown(options=["a", "b"], value="b")}
    return Explorer(controls, lambda n, on, text, word: b"\x89PNG picture")


@pytest.mark.parametrize("name", ["n", "on", "text"])
def test_an_index_update_to_a_control_without_options_is_refused_quietly(explorer, name):
    before = explorer.values()
    explorer.controls[name].set_state({"index": 0})   # raises nothing: ipywidgets would show its traceback
    assert explorer.values() == before
    assert "should change only its value (or a menu&#x27;s index), but it changes [&#x27;index&#x27;]" \
        in explorer.message.value


def test_a_menu_still_takes_an_index_from_the_page(explorer):
    explorer.controls["word"].set_state({"index": 0})
    assert explorer.values()["word"] == "a"


def test_any_other_failure_on_a_pages_update_is_dropped_with_a_log_line(explorer, caplog, monkeypatch):
    def broken(self, sync_data):
        raise RuntimeError("ipywidgets failed")

    monkeypatch.setattr(widgets.IntSlider, "set_state", broken)
    before = explorer.values()
    with caplog.at_level(logging.WARNING, logger="course.frames"):
        explorer.controls["n"].set_state({"value": 3})
    assert explorer.values() == before
    lines = [r.getMessage() for r in caplog.records if r.name == "course.frames"]
    assert lines == ["explorer: a control's message from the page was dropped (RuntimeError: ipywidgets failed)"]


# Entry 13: weights.load shows a refused config's sentence whole

def test_load_shows_the_configs_refusal_whole(tmp_path):
    src = weights.data_dir() / "cat" / "model"
    meta = json.loads(src.with_suffix(".json").read_text())
    meta["config"] = {**meta["config"], "vocab_size": 10**9, "d_model": 10**5}
    stem = tmp_path / "huge"
    stem.with_suffix(".json").write_text(json.dumps(meta))
    shutil.copy(src.with_suffix(".safetensors"), stem.with_suffix(".safetensors"))
    with pytest.raises(CourseInputError, match=r"^expected huge.json to hold a model's config as JSON, but it cannot "
                                               r"be read \(CourseInputError: a course model should fit in 1.5 GiB "
                                               r"[^\n]*, but this Config needs \d+ of them\)$"):
        weights.load(stem)


def test_load_still_names_pythons_own_error(tmp_path):
    src = weights.data_dir() / "cat" / "model"
    meta = json.loads(src.with_suffix(".json").read_text())
    meta["config"] = [1, 2]   # not a mapping: Python's TypeError
    stem = tmp_path / "odd"
    stem.with_suffix(".json").write_text(json.dumps(meta))
    shutil.copy(src.with_suffix(".safetensors"), stem.with_suffix(".safetensors"))
    with pytest.raises(CourseInputError, match=r"^expected odd.json to hold a model's config as JSON, but it cannot "
                                               r"be read \(TypeError: [^\n]*must be a mapping, not list\)$"):
        weights.load(stem)


# Entry 14: train_word2vec on one-word sentences

@pytest.mark.parametrize("window", [1, 2, 0])
def test_one_word_sentences_are_refused_naming_the_sentences(window):
    with pytest.raises(CourseInputError, match=r"^sentences should hold at least one sentence of two or more words "
                                               r"\(a word learns from the words around it\), but every sentence has "
                                               r"one word$"):
        geometry.train_word2vec([["cat"], ["dog"]], window=window, epochs=1)


def test_a_window_too_wide_is_still_refused_naming_the_window():
    with pytest.raises(CourseInputError, match=r"^window should be at most 1 \(words either side of a word, and the "
                                               r"longest sentence has 2 words\), but got 2$"):
        geometry.train_word2vec([["cat", "sat"], ["dog"]], window=2, epochs=1)
