"""helpers.readout: a forward pass as text, and top-k tables."""
import numpy as np
import pytest
import torch

from helpers import readout


def test_format_matrix_one_labelled_row_per_line():
    text = readout.format_matrix(np.array([[1.0, 2.0], [3.0, -np.inf]]), ["a", "bb"])
    assert text.splitlines()[0].startswith("  a  [") and "-inf" in text.splitlines()[1]


def test_top_tokens_are_sorted_and_stable():
    rows = readout.top_tokens(torch.tensor([0.1, 0.6, 0.3]), ["x", "y", "z"], k=2)
    assert [r[1] for r in rows] == ["y", "z"] and rows[0][0] == 1


@pytest.mark.parametrize("call, words", [
    (lambda: readout.format_matrix(np.ones((3, 2)), ["a", "b"]), ["one label per row", "3 rows", "2 labels"]),
    (lambda: readout.format_matrix(np.ones((2, 2, 2))), ["1-D or 2-D", "(2, 2, 2)"]),
    (lambda: readout.top_tokens(torch.ones(3) / 3, ["x", "y", "z"], k=-1), ["k", "at least 1", "-1"]),
    (lambda: readout.top_tokens(torch.ones(3) / 3, ["x", "y"]), ["(2,)", "(3,)"]),
    (lambda: readout.print_trace({"h0": torch.ones(2, 2)}, names=["L9.q"]), ["'L9.q'", "h0"]),
])
def test_bad_input_is_refused_in_one_sentence(refused, call, words):
    refused(call, *words)


def test_format_matrix_refuses_past_its_stated_size_before_converting(refused, monkeypatch):
    converted = []
    monkeypatch.setattr(readout, "to_numpy", lambda *a: converted.append(1))
    refused(lambda: readout.format_matrix(torch.zeros(10_000, 10_000)), "at most 1,000 rows", "10,000 x 10,000")
    refused(lambda: readout.format_matrix(np.zeros(1_001)), "1,000 columns", "1 x 1,001")
    assert not converted


def test_format_matrix_takes_the_largest_size_it_states():
    assert len(readout.format_matrix(np.zeros((readout.MAX_ROWS, 3))).splitlines()) == readout.MAX_ROWS


@pytest.mark.parametrize("probs, words", [
    (torch.tensor([2.0, -1.0, 0.5]), ["probabilities", "1 negative", "logits"]),
    (torch.tensor([2.0, 1.0, 0.5]), ["sum to 3.5"]),
    (torch.tensor([0.5, float("nan"), 0.5]), ["NaN"]),
])
def test_print_top_refuses_logits_where_probabilities_belong_and_prints_nothing(refused, capsys, probs, words):
    refused(lambda: readout.print_top(probs, ["x", "y", "z"], k=2), *words)
    assert capsys.readouterr().out == ""


def test_top_tokens_refuses_k_beyond_the_vocabulary(refused):
    refused(lambda: readout.top_tokens(torch.ones(3) / 3, ["x", "y", "z"], k=4), "at most", "3 tokens", "4")
