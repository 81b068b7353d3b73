"""Grading that a student's code cannot game or stop (scripts/autograde.py), on chapter 00.

One class of submissions is graded at once, each a way a real class goes wrong: left blank,
solved, one answer wrong, an answer of NaN, a grader patched from an answer cell, a write into
the instructor's checkout, exit() halfway, a loop that never ends, another chapter under this
chapter's name, two copies, a renamed file, lost cell metadata, a student id with a space, a
hidden folder. Each gets the row it deserves, and everyone else is still graded.

The fences (scripts/fence.py) are tried one by one on what a submission could do outside its
folder, and the grader's refusal on a machine with neither fence is run as an instructor meets it.
"""
import json
import os
import shutil
import socket
import subprocess
import sys
import textwrap

import nbformat
import pytest

import autograde
import fence
import homework
from execute_notebooks import INSTRUCTOR, ROOT
from test_homework import submission

CHAPTER = "00_tour"
SOURCE = INSTRUCTOR / f"{CHAPTER}.ipynb"
OTHER = INSTRUCTOR / "02_qkv_by_hand.ipynb"
PROTECTED = ROOT / "helpers" / "exercises.py"


def meta(cell):
    return cell.metadata.get("nbgrader", {})


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    course = tmp_path_factory.mktemp("course")
    released_path = homework.release([CHAPTER], course)[0]
    released = nbformat.read(released_path, as_version=4)
    ids = [meta(c)["grade_id"] for c in released.cells if meta(c).get("solution")]
    solved = {g: "solution" for g in ids}
    other_path = homework.release(["02"], course)[0]
    other = submission(other_path, OTHER, {meta(c)["grade_id"]: "solution" for c in
                                           nbformat.read(other_path, as_version=4).cells if meta(c).get("solution")})
    answered = lambda answers: submission(released_path, SOURCE, answers)  # noqa: E731
    wrong_everything = {g: f"{c.source.splitlines()[0].split('=')[0].strip()} = 12345"
                        for g in ids for c in released.cells if meta(c).get("grade_id") == g}
    stripped = answered(solved)
    for cell in stripped.cells:
        cell.metadata = {}
    early_check = answered(solved)   # the check line pasted above its answer cell too
    answer_at = next(i for i, c in enumerate(early_check.cells) if meta(c).get("grade_id") == "ch00_ex2_answer")
    early_check.cells.insert(answer_at, nbformat.v4.new_code_cell("checks.next_prob(p_ran_by_hand, last_logits, ran_id)"))
    plans = {
        "blank": {CHAPTER: released},
        "solved": {CHAPTER: answered(solved)},
        "wrong": {CHAPTER: answered({**solved, "ch00_ex2_answer": "p_ran_by_hand = np.exp(last_logits[ran_id])"})},
        "nan": {CHAPTER: answered({**solved, "ch00_ex2_answer": "p_ran_by_hand = float('nan')"})},
        "patcher": {CHAPTER: answered({**wrong_everything, "ch00_ex1_answer":
                    "from helpers.exercises import Exercise\nExercise.grade = lambda self, *a, **k: None\n"
                    "import helpers.grading\nhelpers.grading.handle = lambda *a, **k: None\nscores_shape = (9, 9, 9)"})},
        "writer": {CHAPTER: answered({**solved, "ch00_ex1_answer":
                   f"try:\n    open({str(PROTECTED)!r}, 'a').write('\\nExercise.feedback = lambda *a, **k: []\\n')\n"
                   "except OSError as error:\n    print('refused:', error)\n" + "scores_shape = (2, 5, 5)"})},
        "leaver": {CHAPTER: answered({**solved, "ch00_ex2_answer": "import os\nos._exit(0)"})},
        "looper": {CHAPTER: answered({**solved, "ch00_ex3_answer": "while True:\n    pass"})},
        "mixup": {CHAPTER: other},
        "twice": {CHAPTER: answered(solved), "00_tour (1)": released},
        "escaper": {CHAPTER: answered({**solved, "ch00_ex1_answer":
                    "import subprocess\nsubprocess.run(['mount', '-o', 'remount,bind,rw', '/'])\n"
                    f"for target in [{str(PROTECTED)!r}, {str(SOURCE)!r}]:\n"
                    "    try:\n        open(target, 'a').write('# changed')\n    except OSError as error:\n"
                    "        print('refused:', error)\nscores_shape = (2, 5, 5)"})},
        "peeker": {CHAPTER: answered({**solved, "ch00_ex2_answer":
                   f"import json\ntry:\n    solution = json.load(open({str(SOURCE)!r}))\n"
                   "except OSError:\n    solution = None\np_ran_by_hand = None if solution is None else 0.5"})},
        "mallory": {CHAPTER: answered({**solved, "ch00_ex1_answer": "scores_shape = frozenset([frozenset()])"})},
        "saboteur": {CHAPTER: answered({**solved, "ch00_ex1_answer":
                     "import os\nos.mkdir('executed.ipynb')\nos.mkfifo('records.jsonl')\nscores_shape = (2, 5, 5)"})},
        "early": {CHAPTER: early_check},
        "nester": {CHAPTER: answered({**solved, "ch00_ex1_answer":   # a record the judge's kernel cannot read back
                   "import os\nrecords = os.environ['COURSE_GRADING'].split(':', 1)[1]\n"
                   "for index in range(8):\n    open(records, 'a').write('{\"cell\": \"ch00_ex1_check\", "
                   "\"index\": %d, \"answer\": %s%s}\\n' % (index, '[' * 975, ']' * 975))\n"
                   "scores_shape = (2, 5, 5)"})},
        "ann lee": {"tour": answered(solved)},                                   # a space, a renamed file
        "a_student_with_a_very_long_identifier_0123456789": {CHAPTER: stripped},  # lost metadata
    }
    folder = course / "handed_in"
    for student, files in plans.items():
        (folder / student).mkdir(parents=True)
        for name, nb in files.items():
            nbformat.write(nb, folder / student / f"{name}.ipynb")
    (folder / "linked").symlink_to(folder / "solved")
    (folder / ".hidden").mkdir()
    nbformat.write(answered(solved), folder / ".hidden" / f"{CHAPTER}.ipynb")
    before = PROTECTED.read_bytes(), SOURCE.read_bytes()
    table = homework.grade(folder, course, log=lambda *a: None, cell_timeout=15, unfenced=FENCE == fence.UNFENCED)
    return dict(course=course, table=table, rows={(r["student"], r["chapter"]): r for r in table},
                protected_unchanged=(PROTECTED.read_bytes(), SOURCE.read_bytes()) == before)


def row(graded, student, chapter=CHAPTER):
    return graded["rows"][(student, chapter)]


def test_blank_solved_and_wrong(graded):
    assert row(graded, "blank")["score"] == 0
    assert row(graded, "solved")["score"] == row(graded, "solved")["max_score"] == 4
    wrong = row(graded, "wrong")
    assert wrong["score"] == 3 and wrong["ch00_ex2_check"] == 0
    assert "divide by the sum of exp" in wrong["why"]["ch00_ex2_check"]


def test_nan_is_wrong_and_says_so(graded):
    nan = row(graded, "nan")
    assert nan["score"] == 3 and "NaN" in nan["why"]["ch00_ex2_check"]


def test_patching_the_grader_in_the_students_kernel_gains_nothing(graded):
    assert row(graded, "patcher")["score"] == 0


FENCE = fence.choose_fence(unfenced=True)   # what this machine's grading runs in
FENCED = FENCE != fence.UNFENCED


def test_a_write_into_the_checkout_is_refused_or_undone(graded):
    assert graded["protected_unchanged"]
    writer = row(graded, "writer")
    if FENCED:   # refused: its own answers still count
        assert writer["score"] == 4
    else:        # undone, and that submission is not graded
        assert writer["score"] == 0 and "restored" in writer["notes"]
    assert row(graded, "solved")["score"] == 4          # nobody else's grade moved


def test_exit_and_endless_loops_stop_only_their_own_notebook(graded):
    leaver = row(graded, "leaver")
    assert leaver["score"] == 1 and "process ended" in leaver["notes"]
    looper = row(graded, "looper")
    assert looper["score"] == 2 and "longer than 15 s" in looper["notes"]


def test_another_chapter_under_this_name_is_graded_as_what_it_is(graded):
    mixup = row(graded, "mixup", "02_qkv_by_hand")
    assert mixup["score"] == mixup["max_score"] > 0 and "holds 02_qkv_by_hand" in mixup["notes"]


def test_two_copies_the_best_counts_and_the_row_says_so(graded):
    twice = row(graded, "twice")
    assert twice["score"] == 4 and "2 copies" in twice["notes"]


def test_renamed_files_lost_metadata_and_any_student_id_are_still_graded(graded):
    renamed = row(graded, "ann lee")
    assert renamed["score"] == 4 and "tour.ipynb" in renamed["notes"]
    stripped = row(graded, "a_student_with_a_very_long_identifier_0123456789")
    assert stripped["score"] == 4 and "metadata" in stripped["notes"]


def test_the_table_fits_long_ids_and_hidden_folders_get_a_word(graded):
    text = autograde.text_table(graded["table"])
    long_line = next(line for line in text.splitlines() if line.startswith("a_student_with_a_very_long"))
    assert "4/4" in long_line
    assert any(r["notes"].startswith("skipped: .hidden") for r in graded["table"])


def test_scores_csv_and_feedback_pages(graded):
    lines = (graded["course"] / "scores.csv").read_text().splitlines()
    assert lines[0].startswith("student,chapter,score,max_score,")
    assert len(lines) == len(graded["table"]) + 1
    page = (graded["course"] / "feedback" / "wrong" / CHAPTER / f"{CHAPTER}.html").read_text()
    assert "divide by the sum of exp" in page


def test_grading_again_after_removing_a_submission_just_works(graded, tmp_path):
    folder = tmp_path / "handed_in"
    for student in ("solved", "wrong"):
        shutil.copytree(graded["course"] / "handed_in" / student, folder / student)
    shutil.rmtree(folder / "wrong")
    again = homework.grade(folder, graded["course"], log=lambda *a: None, cell_timeout=15, unfenced=not FENCED)
    assert [(r["student"], r["score"]) for r in again] == [("solved", 4)]


def test_records_are_data_never_code(graded):
    records = list((graded["course"] / "work").rglob("records.json*"))
    assert records
    for path in records:
        for line in path.read_text().splitlines():
            json.loads(line)


@pytest.mark.skipif(not FENCED, reason="neither bubblewrap nor a user namespace works on this machine")
def test_under_the_fence_even_root_cannot_write_or_read_the_solutions(graded):
    assert graded["protected_unchanged"]
    assert row(graded, "escaper")["score"] == 4
    peeker = row(graded, "peeker")
    assert peeker["score"] == 3 and "not answered" in peeker["why"]["ch00_ex2_check"]


def test_an_answer_the_judge_cannot_rebuild_costs_only_that_exercise(graded):
    mallory = row(graded, "mallory")
    assert mallory["score"] == 3 and mallory["ch00_ex1_check"] == 0


def test_a_record_nested_too_deep_is_left_out_and_the_class_is_still_graded(graded):
    """A record nested 975 deep was read by the grader but not by the judge's kernel, whose failure
    stopped the grading of the whole class; it is left out, and the real record counts."""
    assert row(graded, "nester")["score"] == 4 and row(graded, "solved")["score"] == 4
    assert autograde.too_deep([[[]]], limit=2) and not autograde.too_deep({"a": [1]}, limit=2)


def test_a_judge_that_fails_for_the_class_judges_each_submission_alone(tmp_path, fake_grader):
    """Whatever makes the judge's run fail for the class (one student's records), everyone else is
    still judged, one by one, and the one it fails for is named."""
    chapter = autograde.Chapter("00_tour", SOURCE, {"a_check": 1}, {})
    subs = [autograde.Submission(name, tmp_path / f"{name}.ipynb", chapter) for name in ("ann", "bad", "cy")]

    def judge(chapter, records, work, hidden, fence):
        if any(key.startswith("bad") for key in records) or broken:
            raise RuntimeError("judging 00_tour did not finish cleanly")
        return {key: {"a_check": []} for key in records}

    fake_grader('{"cell": "a_check", "index": 0, "answer": 1}\n', judge)
    broken = False
    autograde.grade_submissions(subs, tmp_path / "work", log=lambda *a: None, fence=autograde.UNFENCED)
    assert [autograde.score(sub)[0] for sub in subs] == [1, 0, 1]
    assert "could not be judged" in subs[1].status
    broken = True   # a judge that fails with no records at all: the course's fault, raised once, not per student
    with pytest.raises(RuntimeError, match="did not finish cleanly"):
        autograde.grade_submissions(subs, tmp_path / "work", log=lambda *a: None, fence=autograde.UNFENCED)


def test_files_left_in_the_run_folder_do_not_stop_the_grader(graded):
    # (round 25: records go on a channel to the driver, not to the file the fifo took: its right answers count)
    assert row(graded, "saboteur")["score"] == 4
    assert row(graded, "solved")["score"] == 4


def test_a_pasted_copy_of_a_check_does_not_replace_the_real_one(graded):
    assert row(graded, "early")["score"] == 4


def test_a_linked_student_folder_is_skipped_with_a_word(graded):
    assert any(r["notes"].startswith("skipped: linked") for r in graded["table"])


def test_the_score_table_names_the_fence_the_submissions_ran_in(graded):
    ran = [r for r in graded["table"] if r["chapter"] not in ("-", "?")]
    assert ran and all(r["fence"] == FENCE for r in ran)
    assert all(r["fence"] == "" for r in graded["table"] if r["chapter"] == "-")   # skipped: nothing ran
    assert "fence" in (graded["course"] / "scores.csv").read_text().splitlines()[0].split(",")
    assert autograde.text_table(graded["table"]).splitlines()[-1] == f"the submissions ran in: {FENCE}"


# ---------------------------------------------------------------- each fence, and none

# What a submission might try outside its folder: write a file beside it and into a hidden folder,
# read that folder's secret, make the root file system writable again, reach a server on the
# machine's own loopback (so nothing leaves the machine), connect to a unix socket outside its
# folder (as a docker socket under /run or /tmp), find a disk device to write to. It
# prints one word per attempt.
ATTEMPTS = textwrap.dedent("""
    import os, socket, stat, subprocess, sys
    outside, hidden, port, unix = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
    def attempt(name, action):
        try:
            action()
            print(name, "done")
        except OSError:
            print(name, "refused")
    attempt("own", lambda: open("mine.txt", "w").write("x"))
    subprocess.run(["mount", "-o", "remount,bind,rw", "/"], capture_output=True)
    attempt("outside", lambda: open(outside, "w").write("x"))
    attempt("hidden-write", lambda: open(hidden + "/planted.txt", "w").write("x"))
    attempt("hidden-read", lambda: open(hidden + "/secret.txt").read())
    attempt("network", lambda: socket.create_connection(("127.0.0.1", port), timeout=5).close())
    def unix_socket():
        with socket.socket(socket.AF_UNIX) as client:
            client.settimeout(5)
            client.connect(unix)
    attempt("unix-socket", unix_socket)
    disks = [name for name in os.listdir("/dev") if stat.S_ISBLK(os.lstat("/dev/" + name).st_mode)]
    print("disks", "seen" if disks else "none")
""")


@pytest.mark.parametrize("which", [fence.BUBBLEWRAP, fence.USER_NAMESPACE, fence.UNFENCED])
def test_a_fence_keeps_a_run_to_its_folder_and_off_the_network(which, tmp_path):
    why = None if which == fence.UNFENCED else fence.fence_works(which)
    if why is not None:
        pytest.skip(f"the {which} fence does not work on this machine: {why}")
    folder, hidden = tmp_path / "work" / "run", tmp_path / "hidden"
    folder.mkdir(parents=True)
    hidden.mkdir()
    (hidden / "secret.txt").write_text("the solutions")
    with socket.socket() as server, socket.socket(socket.AF_UNIX) as unix:
        server.bind(("127.0.0.1", 0))
        server.listen()
        unix.bind(str(tmp_path / "docker.sock"))   # under /tmp, outside the run's folder
        unix.listen()
        command = fence.fence_prefix(which, folder, [hidden]) + [
            sys.executable, "-c", ATTEMPTS, str(tmp_path / "outside.txt"), str(hidden), str(server.getsockname()[1]),
            str(tmp_path / "docker.sock")]
        done = subprocess.run(command, cwd=folder, capture_output=True, text=True, timeout=120)
    said = dict(line.split() for line in done.stdout.splitlines())
    assert said.get("own") == "done", done.stdout + done.stderr
    expected = "done" if which == fence.UNFENCED else "refused"   # unfenced: the control, everything goes through
    tried = ("outside", "hidden-read", "network", "unix-socket")
    assert {k: said[k] for k in tried} == dict.fromkeys(tried, expected), done.stdout + done.stderr
    assert (tmp_path / "outside.txt").exists() == (which == fence.UNFENCED)
    assert which == fence.UNFENCED or said["disks"] == "none"   # no disk device to write to, even as root
    # a write into a hidden folder is refused, or lands in the empty cover (bubblewrap's is writable), never there
    assert sorted(p.name for p in hidden.iterdir()) == ["planted.txt", "secret.txt"][which != fence.UNFENCED:]


def fake_path(tmp_path, userns):
    """A PATH without bwrap; with util-linux's unshare, mount and setpriv when ``userns``, else an
    unshare that fails as it does on a kernel that refuses user namespaces."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in ("mount", "setpriv") + (("unshare",) if userns else ()):
        (bin_dir / tool).symlink_to(shutil.which(tool))
    if not userns:
        (bin_dir / "unshare").write_text("#!/bin/sh\necho 'unshare: unshare failed: Operation not permitted' >&2\n"
                                         "exit 1\n")
        (bin_dir / "unshare").chmod(0o755)
    return str(bin_dir)


def test_without_bubblewrap_the_user_namespace_is_the_fence(tmp_path, monkeypatch):
    if fence.fence_works(fence.USER_NAMESPACE) is not None:
        pytest.skip(f"user namespaces do not work here: {fence.fence_works(fence.USER_NAMESPACE)}")
    monkeypatch.setenv("PATH", fake_path(tmp_path, userns=True))
    assert fence.fence_works(fence.BUBBLEWRAP) == "bwrap is not installed"
    assert fence.choose_fence() == fence.USER_NAMESPACE


def test_with_neither_fence_grading_refuses_unless_told_it_is_unfenced(tmp_path, monkeypatch):
    """As an instructor meets it: no bwrap on PATH, an unshare the kernel refuses. Nothing runs."""
    student = tmp_path / "handed_in" / "eve"
    student.mkdir(parents=True)
    marker = tmp_path / "it_ran.txt"
    nb = nbformat.read(SOURCE, as_version=4)
    nb.cells.insert(0, nbformat.v4.new_code_cell(f"open({str(marker)!r}, 'w').write('ran')"))
    nbformat.write(nb, student / f"{CHAPTER}.ipynb")
    env = {**os.environ, "PATH": fake_path(tmp_path, userns=False)}
    done = subprocess.run([sys.executable, str(ROOT / "scripts" / "homework.py"), "--course", str(tmp_path / "course"),
                           "grade", str(tmp_path / "handed_in")], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 1 and not marker.exists() and not (tmp_path / "course" / "work").exists()
    sentence = done.stderr.strip()
    assert sentence.count("\n") == 0 and sentence.startswith("✗ expected a fence around the students' code")
    assert "bwrap is not installed" in sentence and "Operation not permitted" in sentence
    assert "pass --unfenced" in sentence
    monkeypatch.setenv("PATH", env["PATH"])
    with pytest.raises(fence.FenceError, match="neither works on this machine"):
        fence.choose_fence()
    assert fence.choose_fence(unfenced=True) == fence.UNFENCED


def test_the_user_namespace_fence_grades_a_class(tmp_path, monkeypatch):
    """The chapter's kernel runs in the user-namespace fence (its loopback up), an escaper gains
    nothing, and the score table says which fence ran."""
    if FENCE == fence.USER_NAMESPACE or fence.fence_works(fence.USER_NAMESPACE) is not None:
        pytest.skip("the class above already ran in the user namespace" if FENCE == fence.USER_NAMESPACE
                    else "user namespaces do not work here")
    monkeypatch.setattr(autograde, "choose_fence", lambda unfenced=False: fence.USER_NAMESPACE)
    course = tmp_path / "course"
    released = homework.release([CHAPTER], course)[0]
    ids = [meta(c)["grade_id"] for c in nbformat.read(released, as_version=4).cells if meta(c).get("solution")]
    escaper = submission(released, SOURCE, {**{g: "solution" for g in ids}, "ch00_ex1_answer":
                         "import subprocess\nsubprocess.run(['mount', '-o', 'remount,bind,rw', '/'])\n"
                         f"for target in [{str(PROTECTED)!r}, {str(SOURCE)!r}]:\n"
                         "    try:\n        open(target, 'a').write('# changed')\n    except OSError as error:\n"
                         "        print('refused:', error)\nscores_shape = (2, 5, 5)"})
    (tmp_path / "handed_in" / "escaper").mkdir(parents=True)
    nbformat.write(escaper, tmp_path / "handed_in" / "escaper" / f"{CHAPTER}.ipynb")
    before = PROTECTED.read_bytes(), SOURCE.read_bytes()
    table = homework.grade(tmp_path / "handed_in", course, log=lambda *a: None, cell_timeout=60)
    assert (PROTECTED.read_bytes(), SOURCE.read_bytes()) == before
    assert [(r["student"], r["score"], r["fence"]) for r in table] == [("escaper", 4, fence.USER_NAMESPACE)]


def test_round_9_a_run_s_output_is_read_to_its_end_but_only_its_tail_is_kept():
    """A submission that printed gigabytes (os.write(1, ...) in a loop) filled the grader's own
    memory, read whole by communicate(): the grader keeps only the last TAIL_KB of it."""
    flood = ("import os, sys\nchunk = b'x' * 2**20\nfor _ in range(64): os.write(1, chunk)\n"
             "print('grader: ran to the end', flush=True)\n")
    process = subprocess.Popen([sys.executable, "-c", flood], stdout=subprocess.PIPE)
    tail = autograde.Tail(process.stdout)
    process.wait(timeout=60)
    tail.join(10)
    assert len(tail.kept) <= autograde.TAIL_KB * 1024 and tail.text().rstrip().endswith("grader: ran to the end")
