"""Chapters as homework, with nbgrader: one command per instructor step.

    python scripts/homework.py exercises                 # every exercise: chapter, id, points, prompt
    python scripts/homework.py release 02 05             # student versions -> grading/release/<chapter>/<chapter>.ipynb
    python scripts/homework.py release --all             #   (every chapter that has exercises)
    python scripts/homework.py grade SUBMISSIONS         # autograde + feedback -> score table, grading/scores.csv

The chapters are written in instructor/ (nbgrader's source: solutions and hidden tests). The copies
a learner opens are in notebooks/, made from them by `learner_version` whenever a chapter is
executed (scripts/execute_notebooks.py): each exercise comes before its solution, which waits in a
collapsed cell after the check.
A chapter is named by its number (02), its file stem (02_qkv_by_hand) or its path.
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
from pathlib import Path

import nbformat

from autograde import nbgrader_meta
from execute_notebooks import FIXED_ENV, ROOT, all_notebooks

GRADING = ROOT / "grading"
CONFIG = "nbgrader_config.py"
MARKERS = {"solution": ("### BEGIN SOLUTION", "### END SOLUTION"),
           "hidden": ("### BEGIN HIDDEN TESTS", "### END HIDDEN TESTS")}
CODE_STUB = "# YOUR CODE HERE"  # the same stub as grading/nbgrader_config.py
TEXT_STUB = "YOUR ANSWER HERE"
SOLUTION_SUMMARY = "Solution (open it after you have tried)"


class HomeworkError(Exception):
    """A step could not be done; the message says why in one sentence."""


# ---------------------------------------------------------------- chapters and exercises

def find_chapter(name):
    """instructor/<chapter>.ipynb for '02', '02_qkv_by_hand', or a path to a notebook."""
    path = Path(name)
    if path.suffix == ".ipynb" and path.is_file():
        return path.resolve()
    matches = [p for p in all_notebooks() if p.stem == name or p.stem.split("_")[0] == name.zfill(2)]
    if len(matches) != 1:
        known = ", ".join(p.stem for p in all_notebooks()) or "none yet"
        raise HomeworkError(f"expected a chapter number, name or notebook path, but {name!r} matches "
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
            prompt = next((line for line in lines if re.match(r"Exercise \d", line)), lines[0] if lines else "")
        if meta.get("grade"):
            found.append((meta["grade_id"], meta.get("points", 0), prompt))
    return found


def graded_chapters():
    """Every chapter notebook with at least one graded cell."""
    return [path for path in all_notebooks() if exercises(path)]


# ---------------------------------------------------------------- the student version, without nbgrader

def _replace_regions(source, markers, stub):
    """Replace each marked region (marker lines included) by `stub` lines at the marker's indent."""
    begin, end = markers
    lines, inside = [], False
    for line in source.splitlines():
        if begin in line:
            inside = True
            indent = line[:len(line) - len(line.lstrip())]
            lines += [indent + stub_line for stub_line in stub]
        elif end in line:
            inside = False
        elif not inside:
            lines.append(line)
    return "\n".join(lines)


def student_version(nb):
    """A copy of the notebook as nbgrader releases it: no solutions, no hidden tests, no outputs.

    Solution regions become '# YOUR CODE HERE' (code) or 'YOUR ANSWER HERE' (markdown);
    hidden-test regions disappear. tests/test_homework.py checks this equals nbgrader's release.
    """
    nb = nbformat.from_dict(nb)
    for cell in nb.cells:
        meta = nbgrader_meta(cell)
        if meta.get("solution"):
            stub = [CODE_STUB] if cell.cell_type == "code" else [TEXT_STUB]
            cell.source = _replace_regions(cell.source, MARKERS["solution"], stub)
        if meta.get("grade") and cell.cell_type == "code":
            cell.source = _replace_regions(cell.source, MARKERS["hidden"], [])
        if cell.cell_type == "code":
            cell.outputs, cell.execution_count = [], None
    nb.metadata.pop("widgets", None)
    return nb


def solution_lines(source):
    """The lines inside the solution markers of a cell's source."""
    begin, end = MARKERS["solution"]
    lines, inside = [], False
    for line in source.splitlines():
        if begin in line or end in line:
            inside = begin in line
        elif inside:
            lines.append(line)
    return lines


def learner_version(nb):
    """The copy a learner opens: the student version, with each exercise's solution one click away.

    After each graded check cell comes a markdown cell holding, collapsed, the solution code of the
    answer cells before it. Outputs are cleared; scripts/execute_notebooks.py runs the copy.
    """
    student, solutions, cells = student_version(nb), [], []
    for original, cell in zip(nb.cells, student.cells):
        cells.append(cell)
        meta = nbgrader_meta(original)
        if meta.get("solution"):
            solutions += solution_lines(original.source) + [""]
        if meta.get("grade") and solutions:
            code = "\n".join(solutions).strip("\n")
            text = f"<details><summary>{SOLUTION_SUMMARY}</summary>\n\n```python\n{code}\n```\n\n</details>"
            shown = nbformat.v4.new_markdown_cell(text, id=f"{meta['grade_id']}-solution"[-64:])
            shown.metadata["course"] = {"solution_of": meta["grade_id"]}
            cells.append(shown)
            solutions = []
    student.cells = cells
    return student


# ---------------------------------------------------------------- nbgrader steps

def nbgrader_env():
    """The environment nbgrader's kernels run in: fixed threads, the course's data folder."""
    env = {**os.environ, **FIXED_ENV, "COURSE_DATA": str(ROOT / "data")}
    env.pop("MPLBACKEND", None)
    return env


def run_nbgrader(course, *args):
    """Run `nbgrader <args>` in the course directory; raise HomeworkError with its log on failure."""
    run = subprocess.run([sys.executable, "-m", "nbgrader", *args], cwd=course, env=nbgrader_env(),
                         capture_output=True, text=True)
    if run.returncode != 0:
        raise HomeworkError(f"nbgrader {' '.join(args)} failed:\n{run.stdout}\n{run.stderr}")
    return run.stderr


def course_dir(course=GRADING):
    """The nbgrader course directory, with the committed config copied in if it is elsewhere."""
    course = Path(course).resolve()
    course.mkdir(parents=True, exist_ok=True)
    if not (course / CONFIG).exists():
        shutil.copy(GRADING / CONFIG, course / CONFIG)
    return course


def release(chapters, course=GRADING):
    """Make the student version of each chapter with `nbgrader generate_assignment`.

    Returns the released notebooks, course/release/<chapter>/<chapter>.ipynb.
    """
    course = course_dir(course)
    released = []
    for chapter in chapters:
        path = find_chapter(str(chapter))
        source = course / "source" / path.stem
        shutil.rmtree(source, ignore_errors=True)
        source.mkdir(parents=True)
        shutil.copy(path, source / path.name)
        run_nbgrader(course, "generate_assignment", path.stem, "--force")
        released.append(course / "release" / path.stem / path.name)
    return released


def grade(submissions, course=GRADING, log=print, **limits):
    """Grade a folder of submissions (scripts/autograde.py says how); return the score rows."""
    import autograde

    submissions, course = Path(submissions).resolve(), course_dir(course)
    if not submissions.is_dir():
        raise HomeworkError(f"expected a folder of submissions (one sub-folder per student), "
                            f"but {submissions} is not a folder")
    if not any(submissions.rglob("*.ipynb")):
        raise HomeworkError(f"expected <student>/<chapter>.ipynb files in {submissions}, but found none")
    return autograde.grade(submissions, course, log=log, **limits)


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
    for path in release(graded_chapters() if args.all else args.chapters, args.course):
        print(f"student version: {shown(path)}")


def grade_step(args):
    import autograde

    if not shutil.which("bwrap"):
        print("note: bubblewrap (bwrap) is not installed, so submissions run without a file-system and "
              "network fence (see the instructor guide)", file=sys.stderr)
    print(autograde.text_table(grade(args.submissions, args.course)))
    course = args.course.resolve()
    print(f"\nscore table: {shown(course / 'scores.csv')}\nfeedback:    {shown(course / 'feedback')}/<student>/<chapter>/")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--course", type=Path, default=GRADING, help="nbgrader course directory (default grading/)")
    steps = parser.add_subparsers(dest="step", required=True)
    steps.add_parser("exercises", help="list every exercise").set_defaults(run=list_exercises)
    rel = steps.add_parser("release", help="make student versions")
    rel.add_argument("chapters", nargs="*")
    rel.add_argument("--all", action="store_true", help="every chapter with exercises")
    rel.set_defaults(run=release_step)
    gra = steps.add_parser("grade", help="autograde a folder of submissions")
    gra.add_argument("submissions", type=Path)
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
