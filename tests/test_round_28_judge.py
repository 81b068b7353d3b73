"""Round 28, the grader's record and judge (reader C, entries 4 to 8): a check cell runs the learner's
function once under the grader (the visible line's run is recorded for the grade call); the judge says
"called on other inputs" of a wrong answer on a model the student's notebook changed; a function given
to a value check, an input changed in place and an exception whose message cannot be read are judged
with the live check's own sentences."""
import json

import numpy as np
import pytest
import torch

from helpers import exercises, grading, reference as ref
from helpers.qkv import checks


@pytest.fixture
def recording(tmp_path, monkeypatch):
    """The grader's record run in this process: (its records file, the records it holds)."""
    path = tmp_path / "records.jsonl"
    monkeypatch.setenv("COURSE_GRADING", f"record:{path}")
    monkeypatch.setitem(grading.STATE, "cell", None)
    monkeypatch.setitem(grading.STATE, "index", 0)
    monkeypatch.setattr(grading, "_PENDING", [])
    return path, lambda: [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def counted_attention(calls, in_place=False):
    """A right attention(Q, K, V, causal) that counts its calls (and, with ``in_place``, scales Q in place)."""
    def attention(Q, K, V, causal=False):
        calls.append(1)
        scores = Q @ K.T / np.sqrt(Q.shape[-1])
        if causal:
            scores = np.where(np.triu(np.ones(scores.shape, bool), 1), -np.inf, scores)
        w = ref.softmax(scores)
        if in_place:
            Q *= 1.0001
        return w @ V, w
    return attention


def judged_again(exercise, record):
    """What the judge says of ``record`` (through JSON, as the grader passes it)."""
    return grading.judged(exercise, json.loads(json.dumps(record)), (), {})


# ---------------------------------------------------------------- 4: one run per check cell


def test_a_check_cell_under_the_grader_runs_the_learner_s_function_once(recording, capsys):
    path, records = recording
    calls = []
    attention = counted_attention(calls)
    grading.cell("ch02_ex4_check")
    assert checks.attention_function(attention)   # the visible line: shown as ever
    visible = len(calls)
    checks.attention_function.grade(attention)   # the hidden line: records the visible line's run
    assert visible > 0 and len(calls) == visible
    assert "✓ scaled dot-product attention in NumPy: correct" in capsys.readouterr().out
    [record] = records()
    assert record["cell"] == "ch02_ex4_check" and record["index"] == 0 and "function" in record["answer"]
    assert len(record["answer"]["function"]) == visible
    assert judged_again(checks.attention_function, record["answer"]) == []


def test_a_grade_call_with_other_arguments_or_in_another_cell_runs_the_check_itself(recording):
    path, records = recording
    calls = []
    attention, other = counted_attention(calls), counted_attention([])
    grading.cell("ch02_ex4_check")
    checks.attention_function(attention)
    visible = len(calls)
    checks.attention_function.grade(other)   # not the visible line's answer: recorded by its own run
    assert len(calls) == visible
    grading.cell("ch02_ex4_check")
    checks.attention_function(attention)
    grading.cell("ch02_ex5_check")   # another cell: the visible line's record is not its own
    checks.attention_function.grade(attention)
    assert len(calls) == 3 * visible
    assert [r["index"] for r in records()] == [0, 0]


def test_the_visible_line_under_the_grader_says_what_it_says_live(recording, capsys, monkeypatch):
    attention = counted_attention([], in_place=True)
    grading.cell("ch02_ex4_check")
    checks.attention_function(attention)
    recorded = capsys.readouterr().out
    monkeypatch.delenv("COURSE_GRADING")
    checks.attention_function(attention)
    live = capsys.readouterr().out
    assert "your function changed Q in place" in live and recorded == live


# ---------------------------------------------------------------- 5: a model changed in the student's kernel


@exercises.exercise("a model's weight sum", answer=exercises.Function("a function total(net)"))
def total_check(answer, net):
    got = exercises.as_number(exercises.call(answer, net, what="on the net"), "total")
    if abs(got - float(net.weight.detach().sum())) > 1e-5:
        yield "your total is not the sum of the net's weights"


def total(net):
    return float(net.weight.detach().sum())


def test_a_wrong_answer_on_a_model_the_notebook_changed_is_said_to_come_of_other_inputs():
    torch.manual_seed(0)
    net = torch.nn.Linear(3, 1)
    fresh = torch.nn.Linear(3, 1)
    fresh.load_state_dict(net.state_dict())
    right = json.loads(json.dumps(grading.record_answer(total_check, total, (net,), {})))
    assert grading.judged(total_check, right, (fresh,), {}) == []
    with torch.no_grad():   # the student's earlier cell: the model changed in place, and left so
        net.weight.mul_(3.0)
    assert total_check.feedback(total, net) == []
    record = json.loads(json.dumps(grading.record_answer(total_check, total, (net,), {})))
    assert [place for place, _ in record["models"]] == [0]
    [said] = grading.judged(total_check, record, (fresh,), {})
    assert said.startswith("your function was called on other inputs in the student's kernel: the check cell's "
                           "model net held other weights there than in the instructor's notebook")
    assert "\n" not in said


def test_a_wrong_answer_on_the_same_model_keeps_the_check_s_own_sentence():
    torch.manual_seed(0)
    net, other = torch.nn.Linear(3, 1), torch.nn.Linear(3, 1)
    record = grading.record_answer(total_check, lambda n: 0.0, (net,), {})   # (wrong on any model)
    said = grading.judged(total_check, json.loads(json.dumps(record)), (net,), {})
    assert said == ["your total is not the sum of the net's weights"]
    assert grading.judged(total_check, json.loads(json.dumps(record)), (other,), {})[0].startswith(
        "your function was called on other inputs")


@pytest.mark.parametrize("forged, said", [
    ({"function": [], "type": "no name"}, "expected a recorded function's type name, but the record holds the text"),
    ({"function": [], "type": 3}, "expected a recorded function's type name, but the record holds 3"),
    ({"function": [], "models": [[0]]}, "expected the digests of a recorded function's models"),
    ({"function": [], "models": "x"}, "expected the digests of a recorded function's models"),
    ({"function": [], "extra": 1}, "expected a tagged record with one of the keys"),
])
def test_a_forged_function_record_is_refused_in_one_sentence(forged, said):
    with pytest.raises(grading.RecordError, match=said) as refused:
        grading.decode(forged)
    assert "\n" not in str(refused.value)


# ---------------------------------------------------------------- 6, 7, 8: the live check's sentences


def test_a_function_given_to_a_value_check_is_judged_as_a_function():
    answer = lambda: 0.09   # noqa: E731
    live = checks.weight_cat_on_the.feedback(answer)
    assert live == ["your answer should be one number, but it is a function"]
    assert judged_again(checks.weight_cat_on_the, grading.record_answer(checks.weight_cat_on_the, answer, (), {})) == live


def test_an_input_changed_in_place_is_named_by_the_judge_as_by_the_live_check():
    attention = counted_attention([], in_place=True)
    live = checks.attention_function.feedback(attention)
    judged = judged_again(checks.attention_function, grading.record_answer(checks.attention_function, attention, (), {}))
    assert "your function changed Q in place" in live[0] and judged == live


def test_a_forged_parameter_name_is_refused_in_one_sentence():
    record = grading.record_answer(checks.attention_function, counted_attention([], in_place=True), (), {})
    record["function"][0]["names"] = ["Q; rm -rf"]
    [said] = judged_again(checks.attention_function, record)
    assert "expected the function's parameter names (a list of names)" in said and "\n" not in said


class Odd(Exception):
    def __str__(self):
        raise RuntimeError("no text")


def test_an_exception_whose_message_cannot_be_read_is_judged_as_the_live_check_says():
    def attention(Q, K, V, causal=False):
        raise Odd()
    live = checks.attention_function.feedback(attention)
    judged = judged_again(checks.attention_function, grading.record_answer(checks.attention_function, attention, (), {}))
    assert "with Odd: (a message that could not be read)" in live[0] and judged == live


def test_an_exception_without_a_message_is_judged_as_the_live_check_says():
    def attention(Q, K, V, causal=False):
        raise KeyError()
    live = checks.attention_function.feedback(attention)
    judged = judged_again(checks.attention_function, grading.record_answer(checks.attention_function, attention, (), {}))
    assert live[0].endswith("with KeyError") and judged == live
