"""Round 15, the grading tools (helpers/grading.py, scripts/autograde.py): the record of an answer
keeps each tensor's and array's dtype and exact values (an int64 count, a bool tensor, a float64
table) and each NumPy scalar as what it is (np.str_ as text), so the judge says what the live check
said; every name a student controls (a folder, a file, a note quoting one) is shown escaped in the
score table, the CSV, the log and the feedback pages, so none forges a row or drives the terminal."""
import csv
import json
import shutil

import numpy as np
import pytest
import torch

import autograde
from execute_notebooks import INSTRUCTOR
from helpers import grading


def judged(exercise, answer, *args):
    """What the judge says of ``answer``: recorded as the student's kernel records it, sent as JSON."""
    recorded = json.loads(json.dumps(grading.record_answer(exercise, answer, args, {})))
    return list(exercise.feedback(grading.decode(recorded), *args))


def again(x):
    """``x`` recorded and read back, through JSON."""
    return grading.decode(json.loads(json.dumps(grading.encode(x))))


# ---------------------------------------------------------------- B2: tensors keep dtype and values


def test_an_int64_count_three_off_is_wrong_in_the_judge_as_it_is_live():
    """Red team round 15 (B2): an exact int64 tensor three parameters off was recorded as float32,
    rounded onto the right count: live ✗, graded ✓."""
    from helpers.mlp import checks

    d, n = 12288, 96
    for answer in (torch.tensor(8 * d * d * n + 3), torch.tensor(8 * d * d * n), torch.tensor(True),
                   torch.tensor(8 * d * d * n, dtype=torch.float32), np.array(8 * d * d * n + 3),
                   np.int32(7), np.float32(8 * d * d * n)):
        live = list(checks.gpt3_mlp.feedback(answer))
        assert judged(checks.gpt3_mlp, answer) == live, answer
    assert judged(checks.gpt3_mlp, torch.tensor(8 * d * d * n + 3))   # ✗, as live


@pytest.mark.parametrize("tensor", [
    torch.tensor(2**62 + 3), torch.tensor([True, False]), torch.tensor([0.1, float("nan")], dtype=torch.float64),
    torch.tensor([255, 0], dtype=torch.uint8), torch.tensor([-2**31], dtype=torch.int32),
    torch.tensor([1.5, -2.0], dtype=torch.bfloat16), torch.tensor([0.1], dtype=torch.float16),
    torch.zeros(0, 3, dtype=torch.int64), torch.tensor([[1.0, float("inf")]], requires_grad=True),
])
def test_a_tensor_comes_back_with_its_dtype_shape_and_exact_values(tensor):
    back = again(tensor)
    assert torch.is_tensor(back) and back.dtype == tensor.dtype and back.shape == tensor.shape
    assert torch.equal(back.isnan(), tensor.detach().isnan()) if tensor.is_floating_point() else True
    kept = ~tensor.detach().isnan() if tensor.is_floating_point() else torch.ones_like(tensor, dtype=torch.bool)
    assert torch.equal(back[kept], tensor.detach()[kept])


@pytest.mark.parametrize("array", [
    np.array([2**63 - 1, -5]), np.array([2**64 - 1], dtype=np.uint64), np.array([0.1, np.inf], dtype=np.float32),
    np.array([[True], [False]]), np.arange(3, dtype=">i8"), np.array(["a", "bc"]),
])
def test_an_array_comes_back_with_its_dtype_and_exact_values(array):
    back = again(array)
    assert isinstance(back, np.ndarray) and back.dtype == array.dtype.newbyteorder("=") and back.shape == array.shape
    assert np.array_equal(back, array)


def test_an_object_array_comes_back_item_by_item():
    """An object array of numbers, which the live check reads as numbers, was recorded as unknown."""
    array = np.array([[1, 2.5], [np.int64(2**60), "x"]], dtype=object)
    back = again(array)
    assert back.dtype == object and back.shape == (2, 2) and back.tolist() == array.tolist()


def test_a_float32_table_is_right_and_a_float64_one_wrong_in_the_judge_as_live():
    """sinusoidal_positions must return float32 (live: "return float32" for float64); the record read
    every tensor back as float64, so the judge refused the right float32 table."""
    from helpers import weights
    from helpers.positions import checks

    def table(n, d, dtype):   # the learner's own table, as the instructor's sinusoidal_positions builds it
        p = torch.arange(n, dtype=dtype)[:, None]
        w = 10000 ** (-torch.arange(0, d, 2, dtype=dtype) / d)
        pe = torch.zeros(n, d, dtype=dtype)
        pe[:, 0::2], pe[:, 1::2] = torch.sin(p * w), torch.cos(p * w)
        return pe

    def right(n, d):
        return table(n, d, torch.float32)

    def wide(n, d):
        return table(n, d, torch.float64)

    cat = weights.load_cat()
    assert list(checks.sinusoidal_positions.feedback(right, cat)) == []
    assert judged(checks.sinusoidal_positions, right, cat) == []
    live = list(checks.sinusoidal_positions.feedback(wide, cat))
    assert live and "float64" in live[0]
    assert judged(checks.sinusoidal_positions, wide, cat) == live


def test_a_change_of_one_to_a_large_whole_number_input_is_seen():
    """The fingerprint read tensors as float32: 2**30 + 1 looked like 2**30, so a learner's change of
    one to an int64 input went unrecorded (the judge's replay then missed what the live check saw)."""
    ids = torch.tensor([2**30, 5])
    before = grading.fingerprint(ids)
    ids[0] += 1
    assert grading.fingerprint(ids) != before
    array = np.array([2**60, 5])
    before = grading.fingerprint(array)
    array[0] += 1
    assert grading.fingerprint(array) != before


@pytest.mark.parametrize("record, words", [
    ({"array": [True, 1], "shape": [2], "kind": "bool"}, ["True or False", "1"]),
    ({"array": [300], "shape": [1], "kind": "int8"}, ["from -128 to 127", "300"]),
    ({"array": [1.5], "shape": [1], "kind": "int64"}, ["whole number", "1.5"]),
    ({"array": [1.0], "shape": [1], "kind": "complex64"}, ["kind", "complex64"]),
    ({"array": [1], "shape": [], "kind": "str"}, ["texts"]),
    ({"torch": {"array": ["a"], "shape": [1], "kind": "str"}}, ["kind", "str"]),
    ({"numpy": [1], "kind": "float32"}, ["array entry"]),
    ({"objects": [1, 2], "shape": [3]}, ["3 items", "2"]),
])
def test_a_malformed_record_of_an_array_is_refused_in_one_sentence(refused, record, words):
    refused(lambda: grading.decode(record), "expected", *words)


# ---------------------------------------------------------------- B6: NumPy scalars as what they are


def test_a_merge_step_with_numpy_strings_is_right_in_the_judge_as_it_is_live():
    """Red team round 15 (B6): np.str_ was recorded as "an array of <U1", so the judge said "could
    not be judged" of a right merge_step the live check took."""
    from helpers.gpt import checks, corpus
    from helpers.gpt import tokenize as tk

    def merge_step(words):   # the course's step, its symbols handed back as NumPy strings
        pair, merged = tk.merge_step(words)
        return tuple(np.array(pair)), [list(np.array(word)) for word in merged]

    text = corpus.load_text()[:30000]
    assert list(checks.merge_step.feedback(merge_step, text)) == []
    assert judged(checks.merge_step, merge_step, text) == []


@pytest.mark.parametrize("scalar", [
    np.float32(0.1), np.float16(65504), np.bool_(True), np.int8(-3), np.uint64(2**64 - 1), np.int32(7),
    np.float32("nan"), np.longdouble(1.5),
])
def test_a_numpy_scalar_comes_back_as_the_same_scalar(scalar):
    back = again(scalar)
    assert type(back) is type(scalar) and (back == scalar or back != back and scalar != scalar)


def test_numpy_s_text_and_python_kinds_come_back_as_the_plain_values_the_checks_read():
    """np.str_ is a str, np.float64 a float, np.int64 reads as int: recorded as those (no tag per item,
    so a list of them costs the grader's bounds nothing more than plain values)."""
    values = [np.str_("ab"), np.float64(0.1), np.int64(2**62 + 1)]
    assert again(values) == ["ab", 0.1, 2**62 + 1]
    assert json.dumps(grading.encode([np.str_("a")] * 1000 + [np.int64(3)] * 1000)).count("{") == 1   # the list's


def test_numpy_scalars_no_check_takes_are_recorded_as_unknown():
    for scalar in (np.complex128(1j), np.bytes_(b"a"), np.datetime64("2020-01-01")):
        assert isinstance(again(scalar), grading.Unknown)


# ---------------------------------------------------------------- B11: names shown escaped

FORGED = "07_mlp\nalice             07_mlp       5\u22155   ex1 1  ex2 1  ex3 1  ex4 1  ex5 1\x1b[2J\u202e\nx.ipynb"
STUDENT = "eve\x1b]0;owned\x07\nalice"


def hostile_folder(tmp_path):
    (tmp_path / "subs" / "bob").mkdir(parents=True)
    shutil.copy(INSTRUCTOR / "07_mlp.ipynb", tmp_path / "subs" / "bob" / FORGED)
    (tmp_path / "subs" / STUDENT).mkdir()
    shutil.copy(INSTRUCTOR / "07_mlp.ipynb", tmp_path / "subs" / STUDENT / "07_mlp.ipynb")
    (tmp_path / "subs" / STUDENT / "notes\n.txt.ipynb").mkdir()   # a folder named as a notebook: skipped
    return tmp_path / "subs"


def clean(text):
    """No control character, no line of its own: what an escaped name leaves."""
    return all(c.isprintable() for c in text)


def test_a_file_name_with_a_newline_does_not_forge_a_row_of_the_score_table(tmp_path):
    """Red team round 15 (B11): the notes printed the file name raw, so a newline in it printed a
    forged row "alice 07_mlp 5/5" under bob's real 0/5 (escape sequences passed the same way)."""
    found, skipped = autograde.find_submissions(hostile_folder(tmp_path))
    chapters = autograde.graded_chapters()
    for sub in found:
        autograde.identify(sub, chapters)
        sub.status = "ran to the end"
    table = autograde.rows(found, skipped)
    lines = autograde.text_table(table).splitlines()
    assert len(lines) == 1 + len(table) and all(clean(line) for line in lines)
    assert not any(line.startswith("alice") for line in lines)
    assert any("07_mlp\\nalice" in line and "\\x1b[2J\\u202e" in line for line in lines)
    assert any(line.startswith("eve\\x1b]0;owned\\x07\\nalice") for line in lines)


def test_the_csv_the_log_and_the_feedback_pages_show_names_escaped(tmp_path, monkeypatch):
    """The instructor's CSV, the grader's log and each feedback page quote the same names."""
    monkeypatch.setattr(autograde, "choose_fence", lambda unfenced=False: autograde.UNFENCED)
    said = []
    monkeypatch.setattr(autograde, "grade_submissions",
                        lambda subs, work, log, **k: [log(f"  ran {sub.student}: {sub.path.name}") for sub in subs])
    (tmp_path / "course").mkdir()
    table = autograde.grade(hostile_folder(tmp_path), tmp_path / "course", log=said.append)
    assert said and all(clean(line) for line in said) and any("eve\\x1b" in line for line in said)
    with open(tmp_path / "course" / "scores.csv", newline="") as file:
        cells = [cell for row in csv.reader(file) for cell in row]
    assert all(clean(cell) for cell in cells) and any("07_mlp\\nalice" in cell for cell in cells)
    pages = list((tmp_path / "course" / "feedback").rglob("*.html"))
    assert len(pages) == len([r for r in table if r["submission"] is not None and r["submission"].chapter])
    for page in pages:
        text = page.read_text()
        assert "\x1b" not in text and "\u202e" not in text and "\x07" not in text, text[:300]
    assert any("07_mlp\\nalice" in page.read_text() for page in pages)


def test_escaped_keeps_printable_names_as_they_are():
    for name in ("alice", "José Ñúñez", "李雷", "o'brien \\n", "a b"):
        assert autograde.escaped(name) == name
    assert autograde.escaped("a\tb\r\x00\udcff") == "a\\tb\\r\\x00\\udcff"


def test_the_grader_s_own_failure_quotes_a_name_escaped(tmp_path, monkeypatch):
    """homework.py's one sentence for a failed grading quoted the error raw (it may name a file)."""
    import homework

    (tmp_path / "subs" / "bob").mkdir(parents=True)
    (tmp_path / "subs" / "bob" / "07_mlp.ipynb").write_text("{}")

    def fails(*args, **kwargs):
        raise OSError(f"cannot read {FORGED}")

    monkeypatch.setattr(autograde, "grade", fails)
    with pytest.raises(homework.HomeworkError) as caught:
        homework.grade(tmp_path / "subs", tmp_path / "course")
    assert clean(str(caught.value)) and "07_mlp\\nalice" in str(caught.value)
