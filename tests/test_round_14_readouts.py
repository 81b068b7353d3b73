"""Red team round 14 (report A), entries 4, 12, 17, 18 and 19: format_matrix listed its row labels before
counting them (a raw error on a 0-d tensor, GBs for range(10**9)); plot_cosines drew on any ``ax`` unchecked;
prob_bars drew a "distribution" that did not sum to 1; print_top printed logits beside probabilities they are
not the softmax of; weights.save wrote over the course's shipped models."""
import os
import shutil
import time
from pathlib import Path

import matplotlib
import numpy as np
import pytest
import torch

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from helpers import plots, readout, weights  # noqa: E402
from helpers.geometry import compute as geometry  # noqa: E402

LOGITS = torch.tensor([2.0, 1.0, 0.0, -1.0])
PROBS = torch.softmax(LOGITS, -1)
FOUR = ["on", "is", "cat", "dog"]


@pytest.fixture(autouse=True)
def close_figures():
    yield
    plt.close("all")


# ----------------------------------------------------------------- entry 4: row labels counted before listed

@pytest.mark.parametrize("labels", [torch.tensor(3.0), np.array(3.0), 3, "ab", (w for w in "ab")])
def test_row_labels_without_a_length_are_refused_in_a_sentence(refused, labels):
    refused(lambda: readout.format_matrix(np.ones((2, 2)), row_labels=labels), "row_labels", "list of labels")


@pytest.mark.parametrize("labels, said", [
    (range(10**12), "1,000,000,000,000 labels"),
    (range(10**20), "labels"),                      # too long for len() itself
    (torch.zeros(1).expand(10**12), "1,000,000,000,000 labels"),
])
def test_long_row_labels_are_counted_not_listed(refused, labels, said):
    start = time.monotonic()
    refused(lambda: readout.format_step("h0", torch.ones(2, 2), tokens=labels), "one label per row", "2 rows", said)
    refused(lambda: readout.format_step("L0.q", torch.ones(3, 2, 2), tokens=labels), "2 rows")   # per head
    assert time.monotonic() - start < 2


def test_print_trace_refuses_long_tokens_before_printing(refused, capsys):
    refused(lambda: readout.print_trace({"h0": torch.ones(2, 2)}, tokens=range(10**9)), "2 rows")
    assert capsys.readouterr().out == ""


def test_a_length_that_lies_and_a_label_too_long_are_refused(refused):
    class Lying(list):
        def __len__(self):
            return 2

    refused(lambda: readout.format_matrix(np.ones((2, 2)), Lying(["a", "b", "c"])), "2 rows", "3 labels")
    refused(lambda: readout.format_matrix(np.ones((2, 2)), ["a", "b" * 10**6]), "row label", "at most 100")


def test_row_labels_of_every_kind_with_a_length_still_label_the_rows():
    for labels in (["a", "bb"], ("a", "bb"), np.array(["a", "bb"]), torch.tensor([1, 2]), range(2)):
        lines = readout.format_matrix(np.ones((2, 2)), labels).splitlines()
        assert len(lines) == 2 and str(list(labels)[1]) in lines[1]
    assert readout.format_matrix(np.ones((2, 2))).splitlines()[0].startswith("   [")


# ----------------------------------------------------------------- entry 12: plot_cosines' ax

def test_plot_cosines_refuses_an_array_of_axes(refused):
    _, axes = plt.subplots(1, 2)
    refused(lambda: geometry.plot_cosines(np.eye(3), ["cat", "dog", "mat"], ax=axes), "ax", "matplotlib Axes",
            "shape (2,)")
    refused(lambda: geometry.plot_cosines(np.eye(3), ["cat", "dog", "mat"], ax="left"), "ax", "'left'")
    assert geometry.plot_cosines(np.eye(3), ["cat", "dog", "mat"], ax=axes[1]) is axes[1]


# ----------------------------------------------------------------- entry 17: prob_bars' distribution sums to 1

def test_prob_bars_refuses_exponentials_divided_by_their_largest(refused):
    e = torch.exp(LOGITS - LOGITS.max())
    wrong = e / e.max()                                  # each in [0, 1], summing to 1.5
    said = refused(lambda: plots.prob_bars(wrong, FOUR), "probs should be probabilities", "sum to 1.5", "softmax")
    assert "logits=" not in said                         # prob_bars has no logits to pass
    refused(lambda: readout.top_tokens(wrong, FOUR), "sum to 1.5")   # the one check, shared
    refused(lambda: plots.prob_bars(np.array([0.2, 0.2, 0.2]), ["a", "b", "c"]), "sum to 0.6")
    assert not plt.get_fignums()                         # refused before a figure is made


def test_prob_bars_takes_a_distribution_to_rounding():
    assert len(plots.prob_bars(PROBS, FOUR).patches) == 4
    assert len(plots.prob_bars(PROBS.half(), FOUR).patches) == 4
    assert len(plots.prob_bars(torch.softmax(torch.randn(300), -1).bfloat16(), [f"w{i}" for i in range(300)],
                               top=20).patches) == 20
    assert len(plots.prob_bars(np.array([0.999, 1e-4, 1e-12]), ["on", "dog", "ran"], log=True).patches) == 3


# ----------------------------------------------------------------- entry 18: print_top's logits are the probs'

@pytest.mark.parametrize("other", [LOGITS.flip(0), LOGITS * 3, torch.zeros(4)])
def test_print_top_refuses_logits_that_are_not_the_probs(refused, capsys, other):
    refused(lambda: readout.print_top(PROBS, FOUR, k=2, logits=other), "logits should be the logits whose softmax is "
            "probs", "softmax(logits) gives")
    assert capsys.readouterr().out == ""


@pytest.mark.parametrize("other, said", [
    (torch.tensor([float("inf"), 1.0, 0.0, -1.0]), "+inf"),
    (torch.full((4,), -float("inf")), "every logit -inf"),
])
def test_print_top_refuses_logits_without_a_softmax(refused, other, said):
    refused(lambda: readout.top_tokens(PROBS, FOUR, 2, logits=other), "logits should be", said)


def test_print_top_takes_the_probs_own_logits_to_rounding(capsys):
    masked = LOGITS.clone()
    masked[3] = -float("inf")
    for probs, logits in ((PROBS, LOGITS), (PROBS, LOGITS + 5), (PROBS.double(), LOGITS.numpy()),
                          (torch.softmax(masked, -1), masked), (torch.softmax(LOGITS.half().float(), -1).half(),
                                                                LOGITS.half()),
                          (torch.softmax(LOGITS * 4, -1).bfloat16(), (LOGITS * 4).bfloat16())):
        readout.print_top(probs, FOUR, k=2, logits=logits)
    assert capsys.readouterr().out.count("rank") == 6


def test_print_top_refuses_another_positions_logits_of_the_cat_model(refused, capsys):
    from helpers import worlds
    tok, model = worlds.cat_world().tokenizer, weights.load_cat()
    trace = model(tok.encode("<BOS> the cat sat"), trace=True)
    probs = trace["probs"][-1].detach()
    refused(lambda: readout.print_top(probs, tok.vocab, logits=trace["logits"][0].detach()), "softmax(logits) gives",
            "where probs has")
    assert capsys.readouterr().out == ""
    readout.print_top(probs, tok.vocab, logits=trace["logits"][-1].detach())   # chapter 00's own call
    assert "on" in capsys.readouterr().out


# ----------------------------------------------------------------- entry 19: save keeps off the shipped models

@pytest.fixture
def course_data(tmp_path, monkeypatch):
    """A copy of data/cat as the course's data folder (COURSE_DATA): what a refused save must leave as it was."""
    folder = tmp_path / "data"
    shutil.copytree(weights.data_dir() / "cat", folder / "cat")
    monkeypatch.setenv("COURSE_DATA", str(folder))
    return folder


def contents(folder):
    return {p: p.read_bytes() for p in sorted(Path(folder).rglob("*")) if p.is_file()}


def test_save_refuses_a_stem_inside_the_course_data(refused, course_data, tmp_path, monkeypatch):
    model, before = weights.load_cat(), contents(course_data)
    with torch.no_grad():
        model.E.mul_(0.0)
    for stem in (course_data / "cat" / "model", course_data / "mine", tmp_path / "elsewhere" / ".." / "data" / "x",
                 str(course_data / "dragon" / "model")):
        refused(lambda: weights.save(model, stem, card={"note": "mine"}), "stem should be a path outside the course's "
                "data folder", "my_model")
    monkeypatch.chdir(tmp_path)                                # a relative stem, from the notebook's folder
    refused(lambda: weights.save(model, "data/cat/model"), "outside the course's data folder")
    assert contents(course_data) == before
    assert float(weights.load_cat().E.detach().abs().max()) > 0      # the shipped model is still the cat model


def test_save_writes_beside_the_data_and_the_build_scripts_write_into_it(refused, course_data, tmp_path):
    model = weights.load_cat()
    weights.save(model, tmp_path / "my_model")                # beside data/, not in it
    weights.save(model, tmp_path / "data_mine" / "model")     # a name that only starts like it
    assert weights.load(tmp_path / "my_model").cfg == model.cfg
    refused(lambda: weights.save(model, course_data / "cat" / "model", shipped="yes"), "shipped", "switch")
    with torch.no_grad():
        model.E.mul_(0.5)
    weights.save(model, course_data / "cat" / "model", shipped=True)   # data/build_*.py
    assert torch.equal(weights.load_cat().E, model.E)
    assert os.environ["COURSE_DATA"] == str(course_data)
