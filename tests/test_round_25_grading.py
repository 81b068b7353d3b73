"""Round 25 (fixer F6), the grader: a record rewritten in place by a student's thread (C1), --course
that is no writable folder (C2), nbgrader without the venv on PATH (C3), System V IPC shared across
the fence (C4), a script in an image's width on the feedback page (C5), a student's hundreds of
notebooks identified one by one (C6), a compiled module or a sitecustomize.py left for later kernels
by an unfenced run (C7)."""
import ctypes
import io
import json
import os
import socket
import subprocess
import sys
from html.parser import HTMLParser

import nbformat
import pytest

import autograde
import fence
import homework
from execute_notebooks import INSTRUCTOR
from helpers import grading

CHAPTER = INSTRUCTOR / "00_tour.ipynb"
CELL, RIGHT = "ch00_ex3_check", 7_087_872   # the tour's exercise 3 and its answer


# ---------------------------------------------------------------- C1: a record, once written, is kept

REWRITER = f"""import json, os, threading, time
from helpers.tour import checks
layer_params = 1   # wrong
def rewrite():   # polls the records file; once the genuine record is there, puts the right answer in it
    path = os.environ["COURSE_GRADING"].split(":", 1)[1]
    while True:
        try:
            with open(path, "r+b") as file:
                lines = file.read().split(b"\\n")
                if any(b'"{CELL}"' in line for line in lines):
                    lines = [json.dumps({{**json.loads(line), "answer": {RIGHT}}}).encode()
                             if b'"{CELL}"' in line else line for line in lines]
                    file.seek(0); file.write(b"\\n".join(lines)); file.truncate()
                    return
        except (OSError, ValueError):
            pass
        time.sleep(0.0002)
threading.Thread(target=rewrite, daemon=True).start()
"""


def test_a_thread_that_rewrites_the_genuine_record_in_place_changes_nothing(tmp_path):
    """Red team round 25, C1: a student's thread rewrote the check's genuine record in the records file
    before the driver read it (the wrong answer 1 was judged as 7,087,872)."""
    _, cells = autograde.source_cells(autograde.Chapter.read(CHAPTER))
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(autograde.SETUP),
                                         nbformat.v4.new_code_cell(REWRITER), autograde.marked(cells[CELL], CELL),
                                         nbformat.v4.new_code_cell("x = 1")])
    folder = tmp_path / "mallory"
    status, _ = autograde.run(nb, folder, "record:{folder}/records.jsonl", timeout=240, cell_timeout=120,
                              fence=fence.choose_fence(unfenced=True))
    assert status == "ran to the end", status
    assert autograde.read_records(folder / "records.jsonl", [CELL], []) == [{"cell": CELL, "index": 0, "answer": 1}]


@pytest.fixture
def channel(monkeypatch):
    """A records channel as the driver hands it (a socket pair), sealed in this process as the kernel seals it:
    (the driver's end, the records path)."""
    driver, kernel = socket.socketpair()
    monkeypatch.setenv(grading.RECORDS_FD, str(kernel.fileno()))
    monkeypatch.setenv("COURSE_GRADING", "record:records.jsonl")
    monkeypatch.setitem(grading._SEALED, "mode", ("record", "records.jsonl"))
    monkeypatch.setitem(grading._SEALED, "channel", grading.records_channel())
    yield driver, "records.jsonl"
    driver.close()
    kernel.close()


def test_records_go_to_the_driver_s_channel_never_to_a_file(channel, tmp_path, monkeypatch):
    driver, path = channel
    monkeypatch.chdir(tmp_path)
    grading.append(path, {"cell": CELL, "index": 0, "answer": 1})
    assert driver.recv(1000) == (json.dumps({"cell": CELL, "index": 0, "answer": 1}) + "\n").encode()
    assert not (tmp_path / path).exists()


def test_a_channel_replaced_by_another_file_is_tampering(channel, tmp_path):
    assert grading.tampered() == []
    with open(tmp_path / "elsewhere", "w") as other:
        os.dup2(other.fileno(), int(os.environ[grading.RECORDS_FD]))   # records would now go to a file of theirs
    assert any(grading.RECORDS_FD in what for what in grading.tampered())


def test_the_driver_attributes_what_came_on_the_channel_to_the_cell_that_ran():
    out = io.StringIO()
    attributor = autograde.Attributor(True, out)
    attributor.start(cell_index=3)
    attributor.kernel_end.sendall(b'{"a": 1}\n{"b": ')   # a line and a fragment: the fragment waits for its end
    attributor.start(cell_index=4)
    attributor.kernel_end.sendall(b'2}\n')
    attributor.close()
    assert [(c["at"], c["lines"]) for c in map(json.loads, out.getvalue().splitlines())] == [
        (3, '{"a": 1}\n'), (4, '{"b": 2}\n')]


# ---------------------------------------------------------------- C2, C3: the instructor's commands


@pytest.mark.parametrize("step", [["grade", "SUBS"], ["release", "02"]])
@pytest.mark.parametrize("course", ["a_file", "a_file/inside", "/proc/1"])
def test_a_course_that_is_no_writable_folder_is_one_sentence(tmp_path, capsys, course, step):
    (tmp_path / "a_file").write_text("x")
    (tmp_path / "subs" / "alice").mkdir(parents=True)
    (tmp_path / "subs" / "alice" / "00_tour.ipynb").write_text("{}")
    course = course if course.startswith("/") else str(tmp_path / course)
    assert homework.main(["--course", course, *[str(tmp_path / "subs") if s == "SUBS" else s for s in step]]) == 1
    said = capsys.readouterr().err.strip()
    assert said.startswith("✗ expected --course to be a folder the grader can write, but ") and "\n" not in said, said


def test_nbgrader_finds_the_tools_beside_this_python():
    assert homework.nbgrader_env()["PATH"].split(os.pathsep)[0] == os.path.dirname(sys.executable)


def test_a_failed_nbgrader_call_is_one_sentence_and_leaves_no_gradebook(tmp_path, monkeypatch):
    """Red team round 25, C3: alembic not found printed nbgrader's 30-line log with a traceback, and left a
    gradebook.db behind on which the next call behaved otherwise."""
    monkeypatch.setattr(homework, "nbgrader_env", lambda: {**os.environ, "PATH": str(tmp_path / "nothing")})
    course = tmp_path / "course"
    with pytest.raises(homework.HomeworkError) as caught:
        homework.release(["02"], course)
    said = str(caught.value)
    assert said.startswith("expected nbgrader generate_assignment") and "\n" not in said and "alembic" in said, said
    assert not (course / "gradebook.db").exists()


# ---------------------------------------------------------------- C4: IPC of its own in each fence

KEY = 0x52543235 + os.getpid() % 1000
MAKE_SEGMENT = f"""import ctypes
libc = ctypes.CDLL(None, use_errno=True)
print("made", libc.shmget({KEY}, 4096, 0o1000 | 0o600) >= 0)"""


@pytest.mark.parametrize("which", [fence.BUBBLEWRAP, fence.USER_NAMESPACE])
def test_a_shared_memory_segment_made_in_a_run_is_not_seen_outside(tmp_path, which):
    """Red team round 25, C4: a System V segment made in a fenced run outlived it, and the next run read it."""
    if fence.fence_works(which) is not None:
        pytest.skip(f"no {which} here")
    libc = ctypes.CDLL(None, use_errno=True)
    try:
        done = subprocess.run(fence.fence_prefix(which, tmp_path) + [sys.executable, "-c", MAKE_SEGMENT], cwd=tmp_path,
                              capture_output=True, text=True, timeout=60)
        assert "made True" in done.stdout, done.stdout + done.stderr
        assert libc.shmget(KEY, 0, 0) < 0
    finally:
        segment = libc.shmget(KEY, 0, 0)
        if segment >= 0:
            libc.shmctl(segment, 0, None)   # IPC_RMID


# ---------------------------------------------------------------- C5: no script on a feedback page

PNG = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg=="


class Handlers(HTMLParser):
    """Every on* attribute of a page."""

    def __init__(self):
        super().__init__()
        self.found = []

    def handle_starttag(self, tag, attrs):
        self.found += [(tag, name, value) for name, value in attrs if name.startswith("on")]


def test_an_image_s_width_cannot_put_a_script_on_the_feedback_page(tmp_path):
    """Red team round 25, C5: nbconvert writes an image's width into an unquoted attribute."""
    image = lambda meta: nbformat.v4.new_output("display_data", data={"image/png": PNG}, metadata=meta)  # noqa: E731
    cell = nbformat.v4.new_code_cell("x = 1", outputs=[
        image({"image/png": {"width": "1 onload=alert(1)", "height": "2 onerror=alert(2)"}}),
        image({"width": "3 onload=alert(3)", "image/png": {"width": 40, "height": 30}})])
    nb = nbformat.v4.new_notebook(cells=[cell])
    (tmp_path / "executed.ipynb").write_text(json.dumps(nb))
    chapter = autograde.Chapter.read(CHAPTER)
    sub = autograde.Submission("eve", CHAPTER, chapter, kept=tmp_path / "executed.ipynb")
    row = dict(student="eve", score=0, max_score=3, notes="", why={}, submission=sub,
               **dict.fromkeys(chapter.checks, 0))
    page = autograde.write_feedback(row, tmp_path / "feedback").read_text()
    parser = Handlers()
    parser.feed(page)
    assert parser.found == [], parser.found
    assert "width=40" in page or 'width="40"' in page   # (a plain number is still shown)


# ---------------------------------------------------------------- C6: a student's notebooks are bounded


def test_a_student_s_notebooks_are_read_up_to_a_bound(tmp_path):
    """Red team round 25, C6: each of a student's notebooks was read (seconds each) before any bound."""
    mine = tmp_path / "mallory"
    mine.mkdir()
    for n in range(autograde.MAX_NOTEBOOKS + 5):
        (mine / f"copy_{n:03d}.ipynb").write_text("{}")
    found, skipped = autograde.find_submissions(tmp_path)
    assert len(found) == autograde.MAX_NOTEBOOKS
    assert [line for line in skipped if "not read" in line and f"only the first {autograde.MAX_NOTEBOOKS}" in line]
    assert {sub.path.name for sub in found} == {f"copy_{n:03d}.ipynb" for n in range(autograde.MAX_NOTEBOOKS)}


# ---------------------------------------------------------------- C7: what later kernels import


@pytest.fixture
def course_root(tmp_path, monkeypatch):
    """A course ROOT of its own: helpers/ with a compiled module, data/."""
    (tmp_path / "helpers" / "__pycache__").mkdir(parents=True)
    (tmp_path / "helpers" / "__init__.py").write_text("")
    (tmp_path / "helpers" / "grading.py").write_text("x = 1\n")
    (tmp_path / "helpers" / "__pycache__" / "grading.cpython-311.pyc").write_bytes(b"genuine")
    (tmp_path / "data").mkdir()
    (tmp_path / "README.md").write_text("kept")
    monkeypatch.setattr(autograde, "ROOT", tmp_path)
    return tmp_path


def test_a_compiled_module_or_a_module_left_at_the_top_is_removed(course_root):
    """Red team round 25, C7: an unfenced run's helpers/__pycache__/grading.*.pyc was imported by every later
    kernel (snapshot skipped __pycache__); a ROOT/sitecustomize.py would have run in each."""
    before = autograde.snapshot()
    (course_root / "helpers" / "__pycache__" / "grading.cpython-311.pyc").write_bytes(b"forged")
    (course_root / "helpers" / "__pycache__" / "errors.cpython-311.pyc").write_bytes(b"forged")
    for name in ("sitecustomize.py", "usercustomize.py", "json.py", "evil.pth"):
        (course_root / name).write_text("import os\n")
    (course_root / "numpy").mkdir()
    (course_root / "numpy" / "__init__.py").write_text("")
    (course_root / "notes.txt").write_text("the instructor's own")   # (nothing Python imports)
    changed = autograde.restore(before)
    assert sorted(changed) == ["evil.pth", "json.py", "numpy", "numpy/__init__.py", "sitecustomize.py",
                               "usercustomize.py"], changed
    assert sorted(p.name for p in course_root.iterdir()) == ["README.md", "data", "helpers", "notes.txt"]
    assert sorted(p.name for p in (course_root / "helpers" / "__pycache__").iterdir()) == ["grading.cpython-311.pyc"]
    assert (course_root / "helpers" / "__pycache__" / "grading.cpython-311.pyc").read_bytes() == b"genuine"


def test_kernels_have_no_user_site(tmp_path):
    assert autograde.run_env(tmp_path, "")["PYTHONNOUSERSITE"] == "1"
