"""Chapters as homework, with nbgrader: one command per instructor step.

    python scripts/homework.py exercises                 # every exercise: chapter, id, points, prompt
    python scripts/homework.py release 02 05             # student versions -> grading/release/<chapter>/<chapter>.ipynb
    python scripts/homework.py release --all             #   (every chapter that has exercises)
    python scripts/homework.py grade SUBMISSIONS         # autograde + feedback -> score table, grading/scores.csv
    python scripts/homework.py grade --unfenced SUBMISSIONS   # only where no fence works (see the instructor guide)

The chapters are written in instructor/ (nbgrader's source: solutions and hidden tests). The copies
a learner opens are in notebooks/, made from them by `learner_version` (scripts/chapters.py) whenever a chapter is
executed (scripts/execute_notebooks.py): each exercise comes before its solution, which waits in a
collapsed cell after the check.
A chapter is named by its number (02), its file stem (02_qkv_by_hand) or its path in instructor/ (a learner's
copy in notebooks/ is refused: its solutions wait in collapsed cells). An empty --course is refused.
SUBMISSIONS holds one folder per student with the chapters they hand in, as
SUBMISSIONS/<student>/<chapter>.ipynb (or nbgrader's own <student>/<chapter>/<chapter>.ipynb).
grading/ is nbgrader's course directory (its nbgrader_config.py is committed; the rest is generated).
"""
import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import nbformat

import autograde
from chapters import (CODE_STUB, MARKERS, SOLUTION_SUMMARY, TEXT_STUB, ROOT, _replace_regions,  # noqa: F401
                      all_notebooks, kernel_env, learner_version, nbgrader_meta, solution_lines, student_version)

GRADING = ROOT / "grading"
CONFIG = "nbgrader_config.py"


class HomeworkError(Exception):
    """A step could not be done; the message says why in one sentence."""


# ---------------------------------------------------------------- chapters and exercises

def find_chapter(name):
    """instructor/<chapter>.ipynb for '02', '02_qkv_by_hand', or its path (a path to any other notebook,
    such as the learner's copy in notebooks/, whose solutions wait in collapsed cells, is refused)."""
    if isinstance(name, Path):
        name = str(name)
    if not isinstance(name, str) or not 0 < len(name) <= 4096 or not name.isprintable():
        shown = (ascii(name) if len(ascii(name)) <= 60 else f"a text of {len(name):,} characters"
                 ) if isinstance(name, str) else f"a value of type {type(name).__name__}"
        raise HomeworkError(f"expected a chapter number, name or notebook path, but got {shown}")
    path = Path(name)
    if path.suffix == ".ipynb" and path.is_file():
        if path.resolve() not in [p.resolve() for p in all_notebooks()]:
            raise HomeworkError(f"expected a chapter in instructor/ (its number, name or path), but "
                                f"{autograde.escaped(path)} is another notebook (a learner's copy in notebooks/ "
                                f"holds the solutions: name the chapter {path.stem!r} instead)")
        return path.resolve()
    matches = [p for p in all_notebooks() if p.stem == name or p.stem.split("_")[0] == name.zfill(2)]
    if len(matches) != 1:
        known = ", ".join(p.stem for p in all_notebooks()) or "none yet"
        raise HomeworkError(f"expected a chapter number, name or notebook path, but {name[:60]!r} matches "
                            f"{len(matches)} notebooks (chapters: {known})")
    return matches[0]


def exercises(path):
    """The graded cells of a notebook: [(grade_id, points, prompt's first line)], in order."""
    nb = nbformat.read(path, as_version=4)
    found, prompt = [], ""
    for cell in nb.cells:
        meta = nbgrader_meta(cell)
        if cell.cell_type == "markdown" and not meta:
            lines = [line.replace("**", "").strip("# ") for line in cell.source.splitlines() if line.strip()]
            heads = [line for line in lines if re.match(r"Exercise \d+\s*[:.]", line)] or \
                [line for line in lines if re.match(r"Exercise \d", line)]   # (a heading before a line that names one)
            prompt = heads[0] if heads else lines[0] if lines else ""
        if meta.get("grade"):
            found.append((meta["grade_id"], meta.get("points", 0), prompt))
    return found


def graded_chapters():
    """Every chapter notebook with at least one graded cell."""
    return [path for path in all_notebooks() if exercises(path)]


# ---------------------------------------------------------------- nbgrader steps

def nbgrader_env():
    """The environment nbgrader and its kernels run in: fixed threads, the course's data folder, and
    this interpreter's folder first on PATH (nbgrader runs alembic, a script installed beside it: a
    venv's python called by its path, the venv not activated, would not find it)."""
    path = os.pathsep.join([os.path.dirname(sys.executable), os.environ.get("PATH", os.defpath)])
    return kernel_env(COURSE_DATA=str(ROOT / "data"), PATH=path)


def run_nbgrader(course, *args):
    """Run `nbgrader <args>` in the course directory. On failure, HomeworkError says why in one
    sentence (the line of nbgrader's log that does: ``said``), and the gradebook is put back as it
    was (a gradebook.db half made by a failed first call made the next call behave otherwise)."""
    gradebook = Path(course) / "gradebook.db"
    before = gradebook.read_bytes() if gradebook.is_file() else None
    run = subprocess.run([sys.executable, "-m", "nbgrader", *args], cwd=course, env=nbgrader_env(),
                         capture_output=True, text=True)
    if run.returncode != 0:
        if before is None:
            gradebook.unlink(missing_ok=True)
        else:
            gradebook.write_bytes(before)
        raise HomeworkError(f"expected nbgrader {' '.join(args)} to succeed, but it failed with "
                            f"{said(run.stdout + run.stderr)}")
    return run.stderr


def said(log):
    """Why a tool failed, from its ``log``: the last exception of a traceback, else its last error
    line, else its last line (at most 300 characters, shown ``escaped``)."""
    lines = [line.strip() for line in log.splitlines() if line.strip()]
    errors = [line for line in lines if re.match(r"[\w.]+(Error|Exception|Exit)\b.*", line)]
    line = (errors or [line for line in lines if "ERROR" in line] or lines or ["no message (exit code only)"])[-1]
    return autograde.escaped(line[:300])


def course_path(course):
    """``course`` (--course) as a full path; an empty one (Path("") is the current folder: an unset
    variable) is refused in one sentence."""
    if isinstance(course, str) and not course.strip():
        raise HomeworkError(f"expected --course to be a folder the grader can write, but got the empty path {course!r}")
    return Path(course).resolve()


def course_dir(course=GRADING):
    """The nbgrader course directory, with the committed config copied in if it is elsewhere; a path
    that is no folder the grader can make and write: HomeworkError, one sentence."""
    course = course_path(course)
    refused = f"expected --course to be a folder the grader can write, but {autograde.escaped(course)}"
    if course.exists() and not course.is_dir():
        raise HomeworkError(f"{refused} is a file")
    try:
        course.mkdir(parents=True, exist_ok=True)
        tempfile.TemporaryFile(dir=course).close()   # (written and gone)
        if not (course / CONFIG).exists():
            shutil.copy(GRADING / CONFIG, course / CONFIG)
    except OSError as error:
        raise HomeworkError(f"{refused} cannot be written ({error.strerror or type(error).__name__})") from None
    return course


def release(chapters, course=GRADING):
    """Make the student version of each chapter with `nbgrader generate_assignment`.

    Returns the released notebooks, course/release/<chapter>/<chapter>.ipynb.
    """
    course_path(course)
    paths = [find_chapter(str(chapter)) for chapter in chapters]   # (all checked before the course folder is made)
    course = course_dir(course)
    released = []
    for path in paths:
        source = course / "source" / path.stem
        shutil.rmtree(source, ignore_errors=True)
        source.mkdir(parents=True)
        shutil.copy(path, source / path.name)
        run_nbgrader(course, "generate_assignment", path.stem, "--force")
        released.append(course / "release" / path.stem / path.name)
    return released


def grade(submissions, course=GRADING, log=print, unfenced=False, **limits):
    """Grade a folder of submissions (scripts/autograde.py says how); return the score rows.

    Without a fence on this machine it refuses before anything runs, unless ``unfenced``."""
    if isinstance(submissions, str) and not submissions.strip():   # (Path("") is the current folder: an unset variable)
        raise HomeworkError(f"expected a folder of submissions (one sub-folder per student), but got the empty "
                            f"path {submissions!r}")
    submissions = Path(submissions).resolve()
    course_path(course)
    if not submissions.is_dir():
        raise HomeworkError(f"expected a folder of submissions (one sub-folder per student), "
                            f"but {submissions} is not a folder")
    if not autograde.notebooks_in(submissions, autograde.MAX_FOLDER_DEPTH + 1)[0]:   # (rglob recursed per level)
        raise HomeworkError(f"expected <student>/<chapter>.ipynb files in {submissions}, but found none")
    course = course_dir(course)   # (made only once the submissions are known good: a refused call writes nothing)
    try:
        return autograde.grade(submissions, course, log=log, unfenced=unfenced, **limits)
    except autograde.FenceError as error:
        raise HomeworkError(str(error)) from None
    except Exception as error:   # the grader's own failure: one sentence, never a traceback
        raise HomeworkError(f"expected grading to finish, but it stopped with {type(error).__name__}: "
                            f"{autograde.escaped(str(error)[:300])}") from None   # (it may quote a file's name)


# ---------------------------------------------------------------- command line

def shown(path):
    """A path relative to the current folder when it is inside it."""
    return path.relative_to(Path.cwd()) if path.is_relative_to(Path.cwd()) else path


def list_exercises(args):
    for path in graded_chapters():
        for grade_id, points, prompt in exercises(path):
            print(f"{path.stem:<22}{grade_id:<20}{points:>3g} pt   {prompt}")


def release_step(args):
    if not args.chapters and not args.all:
        raise HomeworkError("name the chapters to release (e.g. 02 05), or pass --all")
    if args.chapters and args.all:   # (--all released every chapter, the named ones silently ignored)
        named = ", ".join(ascii(c[:40]) for c in args.chapters[:5]) + (", ..." if len(args.chapters) > 5 else "")
        raise HomeworkError(f"expected either chapters to release or --all, but got both ({named} and --all)")
    for path in release(graded_chapters() if args.all else args.chapters, args.course):
        print(f"student version: {shown(path)}")


def grade_step(args):
    print(autograde.text_table(grade(args.submissions, args.course, unfenced=args.unfenced)))
    course = Path(args.course).resolve()
    print(f"\nscore table: {shown(course / 'scores.csv')}\nfeedback:    {shown(course / 'feedback')}/<student>/<chapter>/")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--course", default=str(GRADING), help="nbgrader course directory (default grading/)")
    steps = parser.add_subparsers(dest="step", required=True)
    steps.add_parser("exercises", help="list every exercise").set_defaults(run=list_exercises)
    rel = steps.add_parser("release", help="make student versions")
    rel.add_argument("chapters", nargs="*")
    rel.add_argument("--all", action="store_true", help="every chapter with exercises")
    rel.set_defaults(run=release_step)
    gra = steps.add_parser("grade", help="autograde a folder of submissions")
    gra.add_argument("submissions")
    gra.add_argument("--unfenced", action="store_true",
                     help="where neither bubblewrap nor a user namespace works: run the submissions without a "
                          "fence (they can read and change your files and reach the network)")
    gra.set_defaults(run=grade_step)
    args = parser.parse_args(argv)
    try:
        args.run(args)
    except HomeworkError as error:
        print(f"✗ {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
