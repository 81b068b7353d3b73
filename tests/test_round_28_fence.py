"""Round 28 (reader C, entries 1, 2, 3, 9, 10): a student folder named with a byte that is not UTF-8 stopped the
whole class's grading; the instructor's environment (tokens, keys) reached every run; under the user-namespace
fence a stopped grader left its run going; feedback pages of the last run outlived a regrade; and both fences let
a run make a nested user namespace, though fence.py said they could not."""
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import nbformat
import pytest

import autograde
import fence
from execute_notebooks import INSTRUCTOR

CHAPTER = autograde.Chapter.read(INSTRUCTOR / "02_qkv_by_hand.ipynb")
CAROL = os.fsdecode(b"carol\xff")   # a folder name as unzip leaves a cp437 name: not UTF-8


# ---------------------------------------------------------------- 1. a name that is not UTF-8


def test_a_name_that_is_not_utf8_has_a_key_and_is_shown_escaped():
    carol = autograde.Submission(CAROL, Path("/subs") / CAROL / "02_qkv_by_hand.ipynb")
    other = autograde.Submission("carol_", Path("/subs/carol_/02_qkv_by_hand.ipynb"))
    assert carol.key.startswith("carol_-") and carol.key != other.key
    assert autograde.escaped(CAROL) == "carol\\udcff"   # (its byte 0xff, as Python reads a name that is not UTF-8)


def test_a_submission_that_fails_before_it_runs_gets_its_own_row_and_the_others_go_on(tmp_path, monkeypatch):
    """Its key was computed outside the per-submission try: one failure stopped the class."""
    class Unnamed(autograde.Submission):
        @property
        def key(self):
            raise UnicodeEncodeError("utf-8", "\udcff", 0, 1, "surrogates not allowed")

    ran = []
    monkeypatch.setattr(autograde, "run", lambda *a, **k: ran.append(a) or ("ran", None))
    first = Unnamed(CAROL, tmp_path / CAROL / "02_qkv_by_hand.ipynb", CHAPTER)
    second = autograde.Submission(CAROL, tmp_path / CAROL / "missing.ipynb", CHAPTER)   # its own failure, after
    subs = autograde.grade_submissions([first, second], tmp_path / "work", log=lambda *a: None,
                                       fence=fence.UNFENCED)
    assert first.status.startswith("could not be graded (UnicodeEncodeError") and ran == []
    assert second.status.startswith("could not be graded (FileNotFoundError")
    table = autograde.rows(subs, [])
    assert [(row["student"], row["score"]) for row in table] == [(CAROL, 0)]   # the best of the two copies
    autograde.write_csv(table, tmp_path / "scores.csv")
    assert "carol\\udcff" in (tmp_path / "scores.csv").read_text() and "carol\\udcff" in autograde.text_table(table)
    page = autograde.write_feedback(table[0], tmp_path / "feedback" / CAROL / CHAPTER.stem)
    assert "carol\\udcff" in page.read_text()


# ---------------------------------------------------------------- 2. the run's environment


def test_a_run_gets_none_of_the_grader_s_secrets_but_the_cpu_path(tmp_path, monkeypatch):
    for name, value in dict(RT28_SECRET_TOKEN="hunter2", AWS_SECRET_ACCESS_KEY="k", GITHUB_TOKEN="t",
                            PYTHONSTARTUP="/x.py", ATEN_CPU_CAPABILITY="default", NPY_DISABLE_CPU_FEATURES="X86_V3",
                            OPENBLAS_CORETYPE="Sandybridge", LC_ALL="C.UTF-8", MPLBACKEND="Agg").items():
        monkeypatch.setenv(name, value)
    env = autograde.run_env(tmp_path, "record")
    assert not {"RT28_SECRET_TOKEN", "AWS_SECRET_ACCESS_KEY", "GITHUB_TOKEN", "PYTHONSTARTUP", "MPLBACKEND"} & set(env)
    assert (env["ATEN_CPU_CAPABILITY"], env["NPY_DISABLE_CPU_FEATURES"], env["OPENBLAS_CORETYPE"], env["LC_ALL"]) == (
        "default", "X86_V3", "Sandybridge", "C.UTF-8")
    assert env["HOME"] == str(tmp_path) and env["PATH"] == os.environ["PATH"] and env["COURSE_GRADING"] == "record"
    assert all(env[name] == value for name, value in autograde.FIXED_ENV.items())


def test_a_secret_in_the_grader_s_environment_is_absent_in_the_run(tmp_path, monkeypatch):
    monkeypatch.setenv("RT28_SECRET_TOKEN", "hunter2")
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(
        "import os\nprint('secret', os.environ.get('RT28_SECRET_TOKEN'), 'home', os.environ['HOME'] == os.getcwd())")])
    status, executed = autograde.run(nb, tmp_path / "run", "", cell_timeout=60, fence=fence.UNFENCED)
    assert status == "ran to the end", status
    assert executed.cells[0].outputs[0]["text"] == "secret None home True\n"


# ---------------------------------------------------------------- 3. a stopped grader stops its run

GRADER = textwrap.dedent("""
    import sys
    from pathlib import Path
    import nbformat, autograde
    cell = ("import time, itertools\\nfor i in itertools.count():\\n"
            "    open('alive.txt', 'w').write(str(i))\\n    time.sleep(0.1)")
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(cell)])
    autograde.run(nb, Path(sys.argv[1]), "", hidden=autograde.hidden_paths(Path(sys.argv[2])), fence=sys.argv[3])
""")


def in_folder(folder):
    """The processes whose working folder is ``folder`` (the run's, seen from the machine)."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            if os.readlink(f"/proc/{pid}/cwd") == str(folder):
                found.append(int(pid))
        except OSError:
            pass
    return found


@pytest.mark.parametrize("stop", [signal.SIGINT, signal.SIGKILL], ids=["SIGINT", "SIGKILL"])
def test_a_stopped_grader_leaves_no_run_in_the_user_namespace_fence(tmp_path, stop):
    why = fence.fence_works(fence.USER_NAMESPACE)
    if why is not None:
        pytest.skip(f"user namespaces do not work here: {why}")
    folder = tmp_path / "run"
    env = {**os.environ, "PYTHONPATH": str(Path(autograde.__file__).parent)}
    grader = subprocess.Popen([sys.executable, "-c", GRADER, str(folder), str(tmp_path / "course"),
                               fence.USER_NAMESPACE], env=env)
    try:
        deadline = time.monotonic() + 120
        while not (folder / "alive.txt").exists() and time.monotonic() < deadline and grader.poll() is None:
            time.sleep(0.2)
        assert (folder / "alive.txt").exists() and in_folder(folder), "the run never started"
        grader.send_signal(stop)
        grader.wait(timeout=30)
        deadline = time.monotonic() + 20   # (a generous bound: the kernel takes its SIGKILL at once)
        while in_folder(folder) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert in_folder(folder) == []
        seen = (folder / "alive.txt").read_text()
        time.sleep(1)
        assert (folder / "alive.txt").read_text() == seen
    finally:
        if grader.poll() is None:
            grader.kill()
        for pid in in_folder(folder):   # (this test's own leftovers, by their ids)
            os.kill(pid, signal.SIGKILL)


# ---------------------------------------------------------------- 9. a regrade leaves no stale page


def test_a_regrade_removes_last_run_s_pages_and_nothing_else(tmp_path, monkeypatch):
    course, subs = tmp_path / "course", tmp_path / "subs"
    stem = CHAPTER.stem
    stale = course / "feedback" / "alice" / stem / f"{stem}.html"
    stale.parent.mkdir(parents=True)
    stale.write_text("<h1>6/6</h1>")
    gone_with = course / "feedback" / "dave" / stem / f"{stem}.html"   # a student no longer handed in
    gone_with.parent.mkdir(parents=True)
    gone_with.write_text("<h1>6/6</h1>")
    own = [course / "feedback" / "alice" / "notes.txt", course / "feedback" / "bob" / stem / "comments.html",
           course / "feedback" / "bob" / "99_other" / "99_other.html", course / "feedback" / "README.md"]
    for path in own:   # the instructor's own files, and a page of no chapter of the course: kept
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("mine")
    (subs / "alice").mkdir(parents=True)
    (subs / "alice" / f"{stem}.ipynb").write_text('{"not": "a notebook"')
    monkeypatch.setattr(autograde, "choose_fence", lambda unfenced=False: fence.UNFENCED)
    table = autograde.grade(subs, course, log=lambda *a: None)
    assert [(row["student"], row["chapter"], row["score"]) for row in table] == [("alice", "?", 0)]
    assert not stale.exists() and not gone_with.parent.parent.exists()
    assert all(path.read_text() == "mine" for path in own)


# ---------------------------------------------------------------- 10. no nested user namespace

NESTED = ("import ctypes\nlibc = ctypes.CDLL(None, use_errno=True)\n"
          "print('nested', libc.unshare(0x10000000 | 0x00020000), ctypes.get_errno())")   # CLONE_NEWUSER | CLONE_NEWNS


@pytest.mark.parametrize("which", [fence.BUBBLEWRAP, fence.USER_NAMESPACE])
def test_neither_fence_lets_a_run_make_a_user_namespace(which, tmp_path):
    why = fence.fence_works(which)
    if why is not None:
        pytest.skip(f"the {which} fence does not work here: {why}")
    if which == fence.BUBBLEWRAP and not fence.disables_userns(fence.shutil.which("bwrap")):
        pytest.skip("this bubblewrap is older than 0.8 (no --disable-userns)")
    before = Path("/proc/sys/user/max_user_namespaces").read_text()
    folder = tmp_path / "run"
    folder.mkdir()
    done = subprocess.run(fence.fence_prefix(which, folder, [tmp_path / "hidden"]) + [sys.executable, "-c", NESTED],
                          cwd=folder, capture_output=True, text=True, timeout=60)
    assert done.stdout.split()[:2] == ["nested", "-1"], done.stdout + done.stderr
    assert Path("/proc/sys/user/max_user_namespaces").read_text() == before   # the machine's own limit untouched
