"""Round 27 (answers): a nested tensor refused in one sentence where a check or readout reads a shape first
(as_wholes, module_output, top_tokens, print_top, shifted_loss); masking.checks.mask reads row tensors that
require grad and names the learner's T; as_words takes a 1-D NumPy array of words and says plainly what arrived."""
import warnings

import numpy as np
import pytest
import torch

from helpers import exercises, readout
from helpers.errors import CourseInputError
from helpers.exercises import Wrong
from helpers.geometry import checks as geometry_checks
from helpers.masking import checks as masking_checks
from helpers.positions import compute as positions
from helpers.tour import checks as tour_checks

NESTED = "but got a nested tensor (rows of different lengths)"
LAYOUTS = pytest.mark.parametrize("layout", [torch.strided, torch.jagged], ids=["strided", "jagged"])


def nested(layout, dtype=torch.float32):
    with warnings.catch_warnings():   # torch's prototype warning for the strided layout
        warnings.simplefilter("ignore")
        return torch.nested.nested_tensor([torch.zeros(2, dtype=dtype), torch.zeros(3, dtype=dtype)], layout=layout)


def one_sentence(messages):
    assert len(messages) == 1 and "\n" not in messages[0] and "check itself failed" not in messages[0], messages
    return messages[0]


# ------------------------------------------------------------------ 1: nested tensors

@LAYOUTS
def test_a_nested_tensor_as_a_tuple_of_whole_numbers_is_refused_in_one_sentence(layout):
    with pytest.raises(Wrong, match="the shape should be a dense tensor .*" + NESTED.replace("(", r"\(").replace(")", r"\)")):
        exercises.as_wholes(nested(layout), "the shape")
    # (a jagged one is a NestedTensor subclass: the checks' screen of plain values names it first)
    assert "nested" in one_sentence(tour_checks.scores_shape.feedback(nested(layout), n_heads=2, T=5)).lower()
    assert "nested" in one_sentence(masking_checks.moved_positions.feedback(nested(layout), T=6, changed=2)).lower()
    assert exercises.as_wholes(torch.tensor([2, 5, 5]), "the shape") == (2, 5, 5)   # a dense tensor still read


@LAYOUTS
def test_top_tokens_and_print_top_refuse_nested_probs_or_logits(layout, capsys):
    vocab, probs = ["a", "b"], torch.tensor([0.5, 0.5])
    for call, name in [(lambda: readout.top_tokens(nested(layout), vocab, k=1), "probs"),
                       (lambda: readout.print_top(nested(layout), vocab, k=1), "probs"),
                       (lambda: readout.top_tokens(probs, vocab, k=1, logits=nested(layout)), "logits"),
                       (lambda: readout.print_top(probs, vocab, k=1, logits=nested(layout)), "logits")]:
        with pytest.raises(CourseInputError, match=f"^{name} should be a dense tensor .*nested tensor"):
            call()
    assert capsys.readouterr().out == ""   # nothing printed before the refusal
    with pytest.raises(CourseInputError, match=r"expected probabilities of shape \(2,\), but got \(3,\)"):
        readout.top_tokens(torch.ones(3) / 3, vocab)
    assert readout.top_tokens(probs, vocab, k=1, logits=torch.zeros(2)) == [(1, "a", 0.0, 0.5)]


@LAYOUTS
def test_shifted_loss_and_logits_name_a_nested_model_as_such(layout, refused):
    ids = torch.tensor([[1, 2]])
    refused(lambda: positions.shifted_loss(nested(layout), ids, ids, 0), "model", "Transformer", NESTED)
    refused(lambda: positions.shifted_logits(nested(layout), ids, 0), "model", "Transformer", NESTED)
    refused(lambda: positions.shifted_loss("cat", ids, ids, 0), "Transformer", "'cat'")


def test_a_module_whose_forward_returns_a_nested_tensor_is_told_so(cat):
    from helpers.mlp import checks as mlp_checks
    from helpers.weights import load_dragon

    class MLP(torch.nn.Module):
        def __init__(self, d_model, d_ff, bias=True):
            super().__init__()
            self.W_1, self.b_1 = torch.nn.Parameter(torch.zeros(d_model, d_ff)), torch.nn.Parameter(torch.zeros(d_ff))
            self.W_2, self.b_2 = torch.nn.Parameter(torch.zeros(d_ff, d_model)), torch.nn.Parameter(torch.zeros(d_model))

        def forward(self, x):
            return nested(torch.strided)

    message = one_sentence(mlp_checks.mlp_module.feedback(MLP, cat, load_dragon()))
    assert message.startswith("the output of forward on ") and NESTED in message


# ------------------------------------------------------------------ 7, 8: masking.checks.mask

def test_mask_reads_row_tensors_that_require_grad():
    right = np.triu(np.ones((5, 5)), 1)
    rows = [torch.tensor(row, dtype=torch.float32, requires_grad=True) for row in right]
    message = one_sentence(masking_checks.mask.feedback(rows, T=5))
    assert message.startswith("this mask holds numbers (float32), not True and False") and "j > i" not in message
    assert all(row.requires_grad and row.grad is None for row in rows)   # the answer left as it was
    assert masking_checks.mask.feedback([torch.tensor(row, dtype=torch.bool) for row in right], T=5) == []
    assert masking_checks.mask.feedback(list(right.astype(bool)), T=5) == []


@pytest.mark.parametrize("T", [1, 3, 7])
def test_mask_names_the_learners_T_in_its_dtype_hint(T):
    message = one_sentence(masking_checks.mask.feedback(np.triu(np.ones((T, T)), 1), T=T))
    assert f"(torch.ones({T}, {T}, dtype=torch.bool))" in message and "(5, 5" not in message


# ------------------------------------------------------------------ 9: as_words

def test_neighbours_takes_the_words_as_a_numpy_array_of_strings(glove):
    right = ["sea", "waters", "seas", "coast", "shores"]
    assert geometry_checks.neighbours.feedback(np.array(right), glove, "ocean", topn=5) == []
    order = np.array(right[::-1])   # judged like a list: the right words, in the wrong order
    assert one_sentence(geometry_checks.neighbours.feedback(order, glove, "ocean", topn=5)).startswith("the right words")


@pytest.mark.parametrize("answer, said", [
    (np.array([["sea", "seas"]]), "should be a list of words (strings), but got a ndarray of shape (1, 2)"),
    (torch.zeros(5), "should be a list of words (strings), but got a tensor of shape (5,)"),
    (list(range(50)), "should hold words (strings) only, but its entry 0 is 0, of type int"),
    (["sea", None], "should hold words (strings) only, but its entry 1 is None, of type NoneType"),
    ("sea", "should be a list of words (strings), but got 'sea'"),
    (np.broadcast_to(np.array(["sea"]), (10**8,)), "should be a short list (at most 10,000,000 words), but it holds 100,000,000"),
])
def test_as_words_says_plainly_what_arrived(answer, said):
    with pytest.raises(Wrong) as caught:
        exercises.as_words(answer, "your answer")
    assert str(caught.value) == "your answer " + said
    assert exercises.as_words(np.array(["a", "b"], dtype=object), "w") == ["a", "b"]
    assert exercises.as_words(("a", "b"), "w", length=2) == ["a", "b"]
