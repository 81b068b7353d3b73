"""Grade a folder of submissions so that no student's code can change a grade or stop the class.

    python scripts/homework.py grade SUBMISSIONS     # the instructor's command; it calls grade() here

For every notebook handed in:

1. **Identify** its chapter by its content (the check cells it holds), not by its name, so a
   renamed file is graded and a chapter saved under another's name is graded as what it is.
2. **Assemble** it: the student's cells, with every check cell replaced by the instructor's
   own (hidden tests included), each preceded by ``helpers.grading.cell(<grade id>)``, after a
   first cell of the grader's (SETUP) that imports the course's recording code, which notes itself
   as imported (``helpers.grading.seal``): a record made once a student's cell changed it
   (``helpers.grading.tampered``) counts for nothing, and the row says so (``read_records``). It
   notes IPython's hooks too (transformers, trace functions, its steps): each check cell then runs
   as written, and one a hook would have changed counts for nothing (``helpers.grading._transform``).
3. **Run** it in a process of its own, in a folder of its own, with a time and a memory limit,
   inside a fence: the run sees the whole machine read-only except its folder, does not see
   the repository (but the package, scripts/ and data/, bound back read-only), the course
   folder, the submissions nor anyone's home folder (fence.py: ``covered``, ``shown``), has no
   network and no capability, and its /proc and /sys are read-only (the kernel's settings too).
   The fence is bubblewrap (``bwrap``, Debian's package bubblewrap) where it works, else a
   user namespace through util-linux's ``unshare`` (``choose_fence`` tries each on a trial run).
   In that run the hidden tests only *record* each answer as data (helpers.grading); nothing
   is judged there. Records go to the process that drives the run (it runs no student code, and
   the kernel can neither read its memory nor reach its report) on a socket it hands the kernel,
   read as they are written: what was written there cannot be changed afterwards, as a file could
   be (``Attributor``). The student's code can write to that socket too, so the driver notes which
   cell was running when each record came: a record counts only when written while the check cell
   it names ran (``attributed``), and a check cell with two records for one grade call counts for
   nothing (``read_records``).
4. **Judge** once per chapter: the instructor's notebook runs with its own arguments and judges
   every recorded answer (student code never runs there; function answers are replayed from
   what they returned on the check's inputs).
5. **Report**: one row per student and chapter, the score per exercise and, where something
   went wrong (a crash, a time-out, an exit, a second copy, a lost cell), what happened.

What one student hands in is bounded for the class's sake: a notebook is parsed only when it is at
most MAX_SUBMISSION_MB (``read_submission``); at most MAX_COPIES copies of a chapter
run (the row says how many more were not); of each run the grader reads back only the records a
check can ask for (MAX_RECORD_INDEX, MAX_RECORD_CHARS, MAX_RECORD_CONTAINERS) and an executed
notebook of at most MAX_EXECUTED_OBJECTS objects, its outputs cut (``capped``), kept on disk until
its feedback page is written. Before the first submission runs, the chosen fence runs a trial of
what every run runs (``tried_fence``): a fence that hides the course (kept under /tmp, which every
fence covers) is refused in one sentence. A chapter whose judge fails even with no answers is said in
its rows; every other chapter is still graded.

With neither fence, grading refuses before anything runs, unless the instructor passes
``--unfenced``: then the runs are still separate processes in separate folders with the same
limits, and the course's own files are fingerprinted before and restored after every run, but
a submission could read or write other files of the instructor's and reach the network. The
score table names the fence the submissions ran in (``fence``).
"""
import contextlib
import csv
import hashlib
import html
import importlib.machinery
import json
import logging
import os
import re
import resource
import secrets
import select
import shutil
import signal
import socket
import stat
import subprocess
import sys
import threading
from dataclasses import dataclass, field
from pathlib import Path

import nbformat

from chapters import FIXED_ENV, ROOT, all_notebooks, nbgrader_meta, run_client
from fence import UNFENCED, FenceError, choose_fence, fence_prefix, sockets  # noqa: F401 (FenceError: homework.py's)

PROTECTED = ("helpers", "scripts", "instructor", "notebooks", "data", "grading/nbgrader_config.py")
TIMEOUT = 600            # seconds one submission may run, all cells together
CELL_TIMEOUT = 150       # seconds one cell may run: a long check's 120 s (exercises.LONG_CHECK_TIME_LIMIT), run once
                         # (helpers.grading.shown), and the cell's own work around it
MEMORY_MB = 4096         # the run's data segment (RLIMIT_DATA); torch and numba map more, harmlessly
FILE_MB = 200            # the largest file a run may write (in all, a run's folder has no limit but its time: a
#                          total needs a filesystem quota, which asks root and a disk mounted with project quotas, or
#                          a loop-mounted image, root again; a sized tmpfs would hold it in memory, and end with the
#                          fence, before the grader reads the executed notebook back)
RESULT_MB = 50           # the largest records file or executed notebook the grader reads back
TAIL_KB = 64             # the end of a run's printed output the grader keeps (its last line says how it ended)
MAX_CELL_TEXT = 10_000   # characters of a student's cell source or output kept for the feedback page
MARKER = "import helpers.grading; helpers.grading.cell({!r})  # added by the grader\n"
SETUP = ("import helpers.grading, helpers.exercises  # added by the grader: the course's recording code is noted "
         "before any cell of yours runs (helpers.grading.seal)")
MAX_COPIES = 3           # copies of one chapter run per student (the rest are not run; the row says so)
MAX_NOTEBOOKS = 40       # notebooks of one student read to identify them (the course's 13 graded chapters, 3 copies
#                          each, and one more; the rest are not read, a row says so: ``at_most``)
MAX_RECORD_INDEX = 20    # grade calls one check cell may make (the course's make one): larger indexes are not read
MAX_RECORD_CHARS = 20 * 2**20    # characters of recorded answers the grader keeps per submission
MAX_RECORD_CONTAINERS = 200_000  # lists and dicts of the recorded answers kept per submission (each costs memory)
# values (numbers, texts, lists, dicts, counted before parsing: ``values_in``) of the recorded answers kept per
# submission: a parsed short text costs about 59 bytes, a number 36, so the text budget alone let
# ["ab"] * 999_999 per check cost 220 MB; with this, at most about 100 MB beside the text
MAX_RECORD_VALUES = 1_500_000
MAX_OUTPUTS_PER_CELL = 100       # outputs of one cell kept for the feedback page (the rest: one line saying so)
MAX_OUTPUTS = 2_000              # outputs of one notebook kept for the feedback page
MAX_EXECUTED_OBJECTS = 100_000   # JSON objects of an executed notebook the grader reads back (else not shown)
MAX_SUBMISSION_MB = 20           # the largest notebook a student may hand in (a chapter with its outputs: under 1 MB)
MAX_SUBMISSION_CONTAINERS = 200_000   # lists and dicts of a handed-in notebook (counted before it is parsed)
REPORT_MB = 2 * RESULT_MB        # the driver's report of the records each cell wrote (RESULT_MB of them, as JSON)
CHECK = "course_grader_check"    # a cell's metadata key: the grade id of a check cell the grader put there
RECORDS_FD = "COURSE_RECORDS_FD"   # the kernel's environment: its end of the records channel (``Attributor``;
#                                    helpers.grading's name: the driver imports none of the course's recording code)


def escaped(text):
    """``text`` as the grader shows it (a student's folder or file name, a note or status quoting one):
    every character that is not printable (a newline, a tab, a terminal's escape sequence, a
    right-to-left mark, a name's undecodable byte) written as its escape (\\n, \\x1b, \\u202e), so no
    student-controlled name can forge a line of the score table or log, or drive the terminal."""
    text = str(text)
    return text if text.isprintable() else "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


def escaping(log):
    """``log`` (print, or the caller's own), each message shown ``escaped``."""
    return lambda message: log(escaped(message))


# ---- chapters and their exercises --------------------------------------------------------------


def visible(source):
    """A check cell's visible part (before its hidden tests), stripped."""
    return source.split("### BEGIN HIDDEN TESTS")[0].strip()


@dataclass
class Chapter:
    stem: str
    path: Path
    checks: dict      # grade id -> points, in order
    visible: dict     # grade id -> the visible source of its check cell

    @classmethod
    def read(cls, path):
        nb = nbformat.read(path, as_version=4)
        graded = [c for c in nb.cells if nbgrader_meta(c).get("grade") and c.cell_type == "code"]
        return cls(path.stem, path, {nbgrader_meta(c)["grade_id"]: nbgrader_meta(c).get("points", 0) for c in graded},
                   {nbgrader_meta(c)["grade_id"]: visible(c.source) for c in graded})


def graded_chapters():
    return [chapter for chapter in map(Chapter.read, all_notebooks()) if chapter.checks]


# ---- finding and identifying submissions ------------------------------------------------------


@dataclass(eq=False)
class Submission:
    student: str
    path: Path
    chapter: Chapter = None
    notes: list = field(default_factory=list)
    status: str = ""          # what happened when it ran
    problems: dict = field(default_factory=dict)   # grade id -> sentences (empty: right)
    kept: Path = None         # where the notebook as it ran is kept (``keep_executed``), for the feedback page

    @property
    def executed(self):
        """The notebook as it ran (outputs cut), read from disk when asked: a class's notebooks are
        never all held in the grader's memory at once. None when the run left none."""
        return read_executed(self.kept) if self.kept is not None else None

    @property
    def key(self):
        """A name for files and the judge: the student's id made safe, plus a hash of the path (its bytes as
        the file system has them: a name that is not UTF-8, as an unzipped cp437 name, stopped the class)."""
        digest = hashlib.sha1(os.fsencode(self.path)).hexdigest()[:16]
        return re.sub(r"[^A-Za-z0-9_.-]", "_", self.student)[:40] + "-" + digest


class Skipped(str):
    """One sentence on what was skipped, with the name of the student's folder it is in as data
    (``student``): a folder's name may hold ':' or '/', so it is never parsed back out of the sentence."""

    def __new__(cls, student, sentence):
        line = super().__new__(cls, sentence)
        line.student = student
        return line


MAX_FOLDER_DEPTH = 20   # folders below a student's own that are searched for notebooks (nbgrader's layout: 1)


def notebooks_in(folder, limit=MAX_FOLDER_DEPTH):
    """(paths, deeper): the entries named *.ipynb in ``folder`` and its folders down to ``limit``
    levels below it, in name order, hidden ones (.ipynb_checkpoints too) left out and links not
    followed; ``deeper``: how many folders lay below the limit, not searched. os.walk goes top down
    and is pruned at the limit, so it recurses at most ``limit`` deep: Path.rglob recursed once per
    level, and one student's folder 1,200 deep stopped the whole class (RecursionError)."""
    found, deeper = [], 0
    for here, folders, files in os.walk(folder):
        here = Path(here)
        found += [here / name for name in folders + files if name.endswith(".ipynb") and not name.startswith(".")]
        folders[:] = sorted(name for name in folders if not name.startswith("."))
        if len(here.relative_to(folder).parts) >= limit:
            deeper, folders[:] = deeper + len(folders), []
    return sorted(found), deeper


def find_submissions(folder):
    """Every notebook in SUBMISSIONS/<student>/ (down to MAX_FOLDER_DEPTH folders below it: ``notebooks_in``),
    and sentences on what was skipped (``Skipped``: each names its student's folder as data)."""
    folder = Path(folder)
    found, skipped = [], []
    for student_dir in sorted(folder.iterdir()):
        said = lambda sentence, student=student_dir.name: skipped.append(Skipped(student, sentence))  # noqa: E731
        if student_dir.is_symlink():
            said(f"{student_dir.name}: a link, not a folder of its own")
            continue
        if not student_dir.is_dir():
            said(f"{student_dir.name}: a file at the top level (expected one folder per student)")
            continue
        if student_dir.name.startswith("."):
            said(f"{student_dir.name}/: a hidden folder, not a student")
            continue
        notebooks, deeper = notebooks_in(student_dir)
        if deeper:
            said(f"{student_dir.name}/: {deeper} folder{'s' if deeper > 1 else ''} nested more than "
                 f"{MAX_FOLDER_DEPTH} deep {'were' if deeper > 1 else 'was'} not searched for notebooks "
                 f"(at most {MAX_FOLDER_DEPTH} folders deep per student)")
        links = [p for p in notebooks if p.is_symlink() or not p.is_file()]
        for p in links:
            said(f"{student_dir.name}/{p.name}: a link or not a regular file")
        notebooks = [p for p in notebooks if p not in links]
        if not notebooks:
            said(f"{student_dir.name}/: no notebook inside")
        mine = first_copies([Submission(student_dir.name, p) for p in notebooks], lambda sub: sub.path.name.lower(),
                            "named {}")
        found += at_most(mine, student_dir.name, skipped)
    return found, skipped


def at_most(mine, student, skipped):
    """The first MAX_NOTEBOOKS of one student's notebooks (the shallowest first, in name order), the
    rest said in one line of ``skipped``: each is read and parsed to be identified (``identify``),
    and a 10 MB notebook of tiny outputs takes seconds, so a student's hundreds of them would stall
    the class before any run (red team round 25)."""
    first = sorted(mine, key=lambda sub: (len(sub.path.parts), str(sub.path)))
    left, kept = first[MAX_NOTEBOOKS:], set(first[:MAX_NOTEBOOKS])
    if left:
        named = ", ".join(str(Path(*sub.path.parts[-2:])) for sub in left[:3]) + (", …" if len(left) > 3 else "")
        skipped.append(Skipped(student, f"{student}/: {len(mine)} notebooks handed in: only the first {MAX_NOTEBOOKS} "
                               f"were read (at most {MAX_NOTEBOOKS} per student; not read: {named})"))
    return [sub for sub in mine if sub in kept]


def first_copies(subs, group, what="of {}"):
    """At most MAX_COPIES of ``subs`` per ``group(sub)`` (one student's): the shallowest first, in
    name order; each kept copy's notes say how many more were not run (so one student's 200 copies
    of a chapter cannot stall the class: each run may take TIMEOUT)."""
    groups = {}
    for sub in sorted(subs, key=lambda sub: (len(sub.path.parts), str(sub.path))):
        groups.setdefault(group(sub), []).append(sub)
    kept = set()   # (by identity: a student's thousands of notebooks are not compared pairwise)
    for name, copies in groups.items():
        if len(copies) > MAX_COPIES:
            left = copies[MAX_COPIES:]
            named = ", ".join(str(Path(*sub.path.parts[-2:])) for sub in left[:3]) + (", …" if len(left) > 3 else "")
            for sub in copies[:MAX_COPIES]:
                sub.notes.append(f"{len(copies)} copies {what.format(name)} handed in: only the first {MAX_COPIES} "
                                 f"were run (at most {MAX_COPIES} per chapter; not run: {named})")
        kept.update(copies[:MAX_COPIES])
    return [sub for sub in subs if sub in kept]


class SubmissionError(Exception):
    """A handed-in file the grader does not read (too large, not a regular file): one sentence."""


class Submitted:
    """A handed-in notebook as nbformat.read reads it (``read_submission``): its text, read only when
    it is a regular file of at most MAX_SUBMISSION_MB holding at most MAX_SUBMISSION_CONTAINERS lists
    and dicts (a notebook of 80 MB cost the grader 5.9 GiB once parsed); else SubmissionError, one
    sentence, before anything is parsed."""

    def __init__(self, path):
        self.path = path

    def read(self):
        info = os.lstat(self.path)
        if not stat.S_ISREG(info.st_mode):
            raise SubmissionError("the notebook should be a regular file, but it is a link or a special file")
        if info.st_size > MAX_SUBMISSION_MB * 2**20:
            raise SubmissionError(f"the notebook should be at most {MAX_SUBMISSION_MB} MB, but it is "
                                  f"{info.st_size / 2**20:,.1f} MB (clear its outputs and hand it in again)")
        text = read_result(self.path, MAX_SUBMISSION_MB)
        found = containers_in(text)
        if found > MAX_SUBMISSION_CONTAINERS:
            raise SubmissionError(f"the notebook should hold at most {MAX_SUBMISSION_CONTAINERS:,} lists and dicts, "
                                  f"but it holds {found:,} (clear its outputs and hand it in again)")
        return text


def read_submission(path, checked=True):
    """The notebook a student handed in at ``path`` (nbformat's, as version 4), bounded as ``Submitted``
    says; unless ``checked``, not checked against nbformat's schema (``identify``: nbformat.read only
    logs what that finds, and it took 5 of the 7 s a notebook of 190,000 tiny outputs costs, while
    every one of a student's notebooks is read to be identified)."""
    if checked:
        return nbformat.read(Submitted(path), as_version=4)
    return nbformat.convert(nbformat.reader.reads(Submitted(path).read()), 4)


def identify(submission, chapters):
    """Set ``submission.chapter`` from the check cells it holds; return the notebook, or None."""
    try:
        nb = read_submission(submission.path, checked=False)
        ids = {str(nbgrader_meta(c).get("grade_id")) for c in nb.cells if isinstance(nbgrader_meta(c), dict)}
        sources = {visible(c.source) for c in nb.cells if c.cell_type == "code"}
    except SubmissionError as error:
        submission.status = f"not graded: {error}"
        return None
    except Exception as error:
        submission.status = f"not a readable notebook ({type(error).__name__})"
        return None
    best = max(chapters, key=lambda ch: (len(ids & set(ch.checks)), len(sources & set(ch.visible.values()))))
    if not ids & set(best.checks) and not sources & set(best.visible.values()):
        submission.status = "not one of the course's chapters (none of its check cells is there)"
        return None
    submission.chapter = best
    name = submission.path.stem
    if name != best.stem:
        other = next((ch.stem for ch in chapters if ch.stem == name), None)
        submission.notes.append(f"named {submission.path.name}, but it holds {best.stem}" if other
                                else f"graded as {best.stem} (the file is named {submission.path.name})")
    if not ids & set(best.checks):
        submission.notes.append("its cells lost their grading metadata: check cells found by their text")
    return nb


# ---- assembling a notebook to run -------------------------------------------------------------


def grade_id_of(cell):
    """A cell's nbgrader grade id when it is a text, else None (a hand-edited or merged notebook's
    list or dict is no grade id: that cell is the student's own)."""
    grade_id = nbgrader_meta(cell).get("grade_id")
    return grade_id if isinstance(grade_id, str) else None


CHECKS_IMPORT = re.compile(r"^from (helpers\.\w+) import ([^#\n]*)", re.M)   # from helpers.qkv import checks, ...
GRADE_CALL = re.compile(r"^(\s*)([A-Za-z_]\w*)\.([A-Za-z_]\w*)\.grade\(", re.M)   # a hidden line: checks.NAME.grade(
SEALED_CHECK = '__import__("sys").modules["helpers.grading"].sealed_check({!r}, {!r})'   # (not the learner's names)


def checks_modules(nb):
    """{name: module} of the course's checks a notebook imports by name (``from helpers.qkv import
    compute as qkv, checks``: {"checks": "helpers.qkv.checks"})."""
    names = {}
    for cell in nb.cells:
        for package, imported in CHECKS_IMPORT.findall(cell.source if cell.cell_type == "code" else ""):
            for part in imported.strip("()\\ ").split(","):
                name, _, alias = (word.strip() for word in part.partition(" as "))
                if name == "checks":
                    names[alias or name] = f"{package}.checks"
    return names


def sealed_calls(source, modules):
    """A check cell's text with each hidden grade call (``checks.NAME.grade(...)``) reaching the course's
    check through the sealed recording module (helpers.grading.sealed_check), not through the notebook's
    name ``checks``: a learner's function the visible line runs may rebind that name, and a grade call
    that did nothing would leave room for a record of the learner's own (red team round 30)."""
    head, mark, hidden = source.partition("### BEGIN HIDDEN TESTS")
    swap = lambda m: (m.group(1) + SEALED_CHECK.format(modules[m.group(2)], m.group(3)) + ".grade("
                      if m.group(2) in modules else m.group(0))
    return head + mark + GRADE_CALL.sub(swap, hidden)


def source_cells(chapter):
    """The instructor's check cells (grade id -> cell), hidden tests included, their grade calls
    reaching the course's checks as sealed (``sealed_calls``)."""
    nb = nbformat.read(chapter.path, as_version=4)
    modules = checks_modules(nb)
    checks = {nbgrader_meta(c)["grade_id"]: c for c in nb.cells if nbgrader_meta(c).get("grade_id") in chapter.checks}
    for cell in checks.values():
        cell.source = sealed_calls(cell.source, modules)
    return nb, checks


def marked(cell, grade_id):
    """A copy of the instructor's check cell that tells the grader which exercise it is."""
    copy = nbformat.from_dict(json.loads(json.dumps(cell)))
    copy.source = MARKER.format(grade_id) + copy.source
    copy.metadata[CHECK] = grade_id   # (``checks_at``: the records written while it runs are its own)
    copy.outputs, copy.execution_count = [], None
    return copy


LEFT_OUT = "*(another copy of a check cell was here: the grader left it out, as only one copy of each runs)*"


def assemble(submission, student_nb):
    """The student's notebook with every check cell put back as the instructor wrote it, where
    the last of the student's cells with its grade id stands (or, without metadata, the last code
    cell whose text is that check's): a copy pasted above the answer does not run before it. Other
    copies are left out (a Markdown line in their place, so every cell keeps its number in the student's
    notebook), and the row's notes say so. A check cell turned into Markdown or Raw (a
    slip: "M" in command mode) is found by its grade id too, and put back as code, as nbgrader
    puts back a graded cell's type; the row's notes say so."""
    _, checks = source_cells(submission.chapter)
    by_text = {text: grade_id for grade_id, text in submission.chapter.visible.items()}
    by_meta, by_source = {}, {}   # grade id -> the cells holding it (by metadata; by text, code cells only)
    for i, cell in enumerate(student_nb.cells):
        if grade_id_of(cell) in checks:
            by_meta.setdefault(grade_id_of(cell), []).append(i)
        if cell.cell_type == "code" and by_text.get(visible(cell.source)) in checks:
            by_source.setdefault(by_text[visible(cell.source)], []).append(i)
    taken = {i for copies in by_meta.values() for i in copies}
    place = {}
    for grade_id in checks:
        copies = by_meta.get(grade_id) or [i for i in by_source.get(grade_id, []) if i not in taken]
        if copies:
            place[grade_id] = copies[-1]
        found = len(set(by_meta.get(grade_id, [])) | set(by_source.get(grade_id, [])))
        if found > 1:
            submission.notes.append(f"check cell {grade_id} was found {found} times: the last copy was graded, "
                                    "the others were left out")
    at = {i: grade_id for grade_id, i in place.items()}
    cells = []
    for i, cell in enumerate(student_nb.cells):
        cell.metadata.pop(CHECK, None)   # only the grader's own check cells carry it
        if i in at:
            if cell.cell_type != "code":
                kind = {"markdown": "Markdown", "raw": "Raw"}.get(cell.cell_type, "another kind of cell")
                submission.notes.append(f"check cell {at[i]} had been turned into {kind}: it was put back as code "
                                        "and graded")
            cells.append(marked(checks[at[i]], at[i]))
            continue
        if cell.cell_type == "code":
            if nbgrader_meta(cell).get("grade") or visible(cell.source) in by_text:   # another copy of a check cell:
                cells.append(nbformat.v4.new_markdown_cell(LEFT_OUT))   # only one of each runs (in its place: the
                continue                                                # cells after it keep the student's numbers)
            cell.outputs, cell.execution_count = [], None
        cells.append(cell)
    missing = [g for g in checks if g not in place]
    if missing:
        submission.notes.append(f"check cell(s) {', '.join(missing)} were deleted: those exercises score 0")
    student_nb.cells = [nbformat.v4.new_code_cell(SETUP)] + cells   # first: sealed before a cell of theirs runs
    student_nb.metadata.pop("widgets", None)
    return student_nb


def judge_notebook(chapter):
    """The instructor's notebook with every check cell marked."""
    nb, checks = source_cells(chapter)
    nb.cells = [marked(c, nbgrader_meta(c)["grade_id"]) if nbgrader_meta(c).get("grade_id") in checks else c
                for c in nb.cells]
    return nb


# ---- running one notebook, fenced in ----------------------------------------------------------


def hidden_paths(course, submissions=None):
    """What a run must not see: the whole repository (the chapters, the instructor's with their
    solutions and hidden tests, the learner's with their solutions collapsed, the tests, its
    history), the course folder (everyone's work, scores and feedback) and the submissions, each
    hidden whole even when it holds the package (--course at the repository or above it): the
    fence binds back read-only only what a run needs (``needed_paths``)."""
    paths = (ROOT, ROOT / "instructor", ROOT / "notebooks", ROOT / ".git", course, submissions)
    return [Path(p).resolve() for p in paths if p is not None]


NEEDED = ("helpers", "scripts", "data")   # what a run reads of the repository: the package, this script, the data


def needed_paths():
    """The folders of the repository a run reads (NEEDED), bound back read-only over what is hidden."""
    return [(ROOT / name).resolve() for name in NEEDED]


# What a run takes of the grader's environment (``run_env``): the rest (tokens, keys, a cloud's credentials)
# never reaches the student's code, which could print it onto its own feedback page (red team round 28).
PASSED = ("PATH", "LANG", "LANGUAGE", "TZ", "LD_LIBRARY_PATH")   # programs, the locale, the interpreter's libraries
PASSED_PREFIXES = ("LC_", "ATEN_", "NPY_", "OPENBLAS_", "MKL_", "OMP_")   # the locale; the CPU path of torch and NumPy


def run_env(folder, grading):
    """A run's environment: only PASSED and PASSED_PREFIXES of the grader's, then the course's own."""
    env = {k: v for k, v in os.environ.items() if k in PASSED or k.startswith(PASSED_PREFIXES)}
    env.update(FIXED_ENV, COURSE_GRADING=grading, COURSE_DATA=str(ROOT / "data"), HOME=str(folder),
               JUPYTER_RUNTIME_DIR=str(folder / ".runtime"), IPYTHONDIR=str(folder / ".ipython"),
               MPLCONFIGDIR=str(folder / ".matplotlib"), NUMBA_CACHE_DIR=str(folder / ".numba"),
               TMPDIR=str(folder / ".tmp"),
               # torch's optimizers import torch._dynamo, whose cache lies under /tmp unless told (the fence
               # covers /tmp: in CI the instructor's chapter 12 failed on /tmp/torchinductor_root)
               TORCHINDUCTOR_CACHE_DIR=str(folder / ".tmp" / "torchinductor"),
               TRITON_CACHE_DIR=str(folder / ".tmp" / "triton"),
               # no user site (its usercustomize would run in every kernel); ROOT's own top level: ``snapshot``
               PYTHONPATH=str(ROOT), PYTHONDONTWRITEBYTECODE="1", PYTHONNOUSERSITE="1")
    return env   # (no MPLBACKEND: the kernel's inline backend saves figures)


def limit_resources():
    """In the run's process: a memory limit, no file larger than FILE_MB, and killed when the grader ends
    (``dies_with_parent``)."""
    limit = MEMORY_MB * 2**20
    resource.setrlimit(resource.RLIMIT_DATA, (limit, limit))
    resource.setrlimit(resource.RLIMIT_FSIZE, (FILE_MB * 2**20, FILE_MB * 2**20))
    dies_with_parent()


def dies_with_parent():
    """Have the kernel send this process SIGKILL when the grader's thread that started it ends, however it
    ends (Linux's prctl PR_SET_PDEATHSIG; kept across exec). The user-namespace fence's unshare ignores
    SIGTERM and outlived a grader stopped by Ctrl-C, its run going on with no total time limit (red team
    round 28); killed, it kills the run's whole process namespace (--kill-child)."""
    import ctypes

    try:
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL, 0, 0, 0)   # PR_SET_PDEATHSIG
    except (OSError, AttributeError):   # not Linux: no fence, nothing to tie
        pass


def run(nb, folder, grading, timeout=TIMEOUT, cell_timeout=CELL_TIMEOUT, files=None, hidden=(), fence=UNFENCED):
    """Execute ``nb`` in ``folder`` (made afresh, with ``files``: {name: text}) under ``fence``.

    grading: the kernel's COURSE_GRADING, with {folder} for the folder. Returns (status, the
    executed notebook or None). With ``record:<file>``, <file> holds afterwards only the records
    ``attributed`` to the check cell that was running when each was written (the kernel sends them
    to the driver on a channel of its own, and the driver reports them, cell by cell, on a pipe of
    its own: ``Attributor``); whatever the run itself left at <file> is never read."""
    shutil.rmtree(folder, ignore_errors=True)
    (folder / ".tmp").mkdir(parents=True)
    for name, text in (files or {}).items():   # a text, or a file copied (a class's records)
        shutil.copyfile(text, folder / name) if isinstance(text, Path) else (folder / name).write_text(text)
    nbformat.write(nb, folder / "notebook.ipynb")
    report_out, report_in = os.pipe()
    command = fence_prefix(fence, folder, hidden, needed_paths()) + [
        sys.executable, str(Path(__file__).resolve()), "_execute", str(folder / "notebook.ipynb"),
        str(folder / "executed.ipynb"), str(cell_timeout), str(report_in)]
    try:
        process = subprocess.Popen(command, cwd=folder, env=run_env(folder, grading.format(folder=folder)),
                                   stdout=subprocess.PIPE, stderr=subprocess.STDOUT, pass_fds=(report_in,),
                                   preexec_fn=limit_resources, start_new_session=True)
    except BaseException:
        os.close(report_out)
        raise
    finally:
        os.close(report_in)   # the driver's alone: the pipe ends when it does
    report, tail = Report(os.fdopen(report_out, "rb")), Tail(process.stdout)
    try:
        process.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()
        status = f"stopped after {timeout} s (the time limit)"
    except BaseException:   # the grader stopped (Ctrl-C): the run ends with it, now
        try:
            os.killpg(process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        process.wait()
        raise
    else:
        try:   # what the run left running (a process that holds the pipe): the session is the run's
            os.killpg(process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        tail.join(10)
        last = [line for line in tail.text().splitlines() if line.startswith("grader:")]
        status = last[-1][len("grader:"):].strip() if last else f"the run ended with exit code {process.returncode}"
    report.join(10)
    kind, _, records = grading.format(folder=folder).partition(":")
    if kind == "record" and records:
        write_records(Path(records), attributed(report.text(), checks_at(nb)))
    return status, read_executed(folder / "executed.ipynb")


def checks_at(nb):
    """{position in nb.cells: grade id} of the check cells the grader put in ``nb`` (``marked``)."""
    return {i: cell.metadata[CHECK] for i, cell in enumerate(nb.cells) if isinstance(cell.metadata.get(CHECK), str)}


def attributed(report, checks):
    """The lines the records file keeps, from the driver's ``report`` ({"at": a cell's position,
    "lines": the records written while it ran, "cut": true when the driver could not read them all,
    "unsealed": the numbers of its lines without the driver's token}, one JSON line per cell): each
    record written while the check cell it names was running (``checks``: {position: grade id}). First
    come the grader's own lines, which ``read_records``
    puts in the row's notes: for each check named by a record some other cell wrote (student code
    forging a record), {"left_out": sentence}; for each check cell whose records are not what the
    course writes, {"unsound": grade id}: a line that does not parse or is past the bounds
    ``read_records`` keeps (a fragment glued to a record), a record of another form
    (``written_by_course``) or one the course's code did not write (a line "unsealed": without the driver's
    token, ``Attributor.sealed``), a record of the course's form naming another check (a grade call of this
    cell, its key changed), records not numbered 0, 1, 2, ... in the order written (each grade call of
    a check cell records the next index: two records for one grade call break it), records cut short,
    or records written by a cell that then stopped with an error, a crash or a time-out ("failed": the
    genuine record may never have come). Such a cell's answers count for nothing, whatever the budgets
    (any other line naming another check is only left out; ``judge`` refuses a number it never asks for)."""
    kept, elsewhere, unsound, made = [], {}, set(), {}   # made: grade id -> how many records its check cell wrote
    for chunk in lines(report):
        try:
            chunk = json.loads(chunk)
            at, text, unsealed = chunk["at"], chunk["lines"], set(chunk.get("unsealed", ()))
        except (ValueError, TypeError, KeyError, RecursionError, AttributeError):
            continue   # (the last one cut by REPORT_MB)
        check = checks.get(at) if isinstance(at, int) else None
        if check is not None and (chunk.get("cut") or chunk.get("failed") or not isinstance(text, str)):
            unsound.add(check)   # (failed: the cell stopped half-way, after records were written)
        for number, line in enumerate(lines(text if isinstance(text, str) else "")):
            entry = parsed(line)
            named = entry.get("cell") if entry is not None and isinstance(entry.get("cell"), str) else None
            if check is not None and named == check and written_by_course(entry):
                if number in unsealed or entry["index"] != made.get(check, 0):   # a line of the learner's code; the
                    unsound.add(check)                # k-th grade call of a check cell records index k
                made[check] = made.get(check, 0) + 1
                kept.append(line)
            elif named in checks.values() and named != check:
                elsewhere[named] = elsewhere.get(named, 0) + 1
                if check is not None and written_by_course(entry):   # a grade call of this check cell, recorded
                    unsound.add(check)                                 # under another check's name (STATE changed)
            elif check is not None:
                unsound.add(check)
    notes = [f"{n} record(s) for {grade_id} written by another cell than its check were left out" for
             grade_id, n in elsewhere.items()]
    return ([json.dumps({"left_out": note}) + "\n" for note in notes]
            + [json.dumps({"unsound": grade_id}) + "\n" for grade_id in sorted(unsound)] + kept)


RECORD_FORMS = ({"cell", "index", "check", "answer"}, {"cell", "index", "answer", "tampered"})   # grading.handle's


def written_by_course(entry):
    """Whether a parsed record line has the form the course writes (``helpers.grading.handle``,
    ``helpers.grading.cell``): one of RECORD_FORMS, its index a whole number from 0."""
    return set(entry) in RECORD_FORMS and type(entry["index"]) is int and entry["index"] >= 0


def parsed(line):
    """The JSON object a whole record line holds, or None: a line past the bounds ``read_records``
    keeps (counted before it is parsed), without its newline, not JSON, or no object."""
    if (len(line) > MAX_RECORD_CHARS or containers_in(line) > MAX_RECORD_CONTAINERS
            or values_in(line) > MAX_RECORD_VALUES or not line.endswith("\n")):
        return None
    try:
        entry = json.loads(line)
    except (ValueError, RecursionError):
        return None
    return entry if isinstance(entry, dict) else None


def write_records(path, kept):
    """``kept`` (lines) written to ``path``, in place of whatever the run left there (a file, a link,
    a pipe or a folder of the student's)."""
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    path.unlink(missing_ok=True)
    with open(path, "x") as file:
        file.writelines(kept)


def read_executed(path):
    """The executed notebook a run left at ``path``, its outputs cut as ``capped`` cuts them, or None
    (none, unreadable, or more than MAX_EXECUTED_OBJECTS JSON objects: the run writes this file, and
    600,000 tiny outputs in 44 MB would cost the grader a gigabyte once parsed)."""
    text = read_result(path)
    if not text or text.count("{") > MAX_EXECUTED_OBJECTS:
        return None
    try:
        return capped(nbformat.reads(text, as_version=4))
    except Exception:
        return None


class Tail(threading.Thread):
    """Reads a run's output to its end, keeping only its last TAIL_KB: a submission that prints
    gigabytes (os.write(1, ...) in a loop) must not fill the grader's own memory."""

    def __init__(self, stream):
        super().__init__(daemon=True)
        self.stream, self.kept = stream, b""
        self.start()

    def run(self):
        for chunk in iter(lambda: self.stream.read1(2**16), b""):
            self.kept = (self.kept + chunk)[-TAIL_KB * 1024:]

    def text(self):
        return self.kept.decode("utf-8", errors="replace")


class Report(Tail):
    """Reads the driver's report to its end, keeping its first REPORT_MB (the rest is read, not kept)."""

    def run(self):
        self.kept = bytearray()
        for chunk in iter(lambda: self.stream.read1(2**16), b""):
            if len(self.kept) < REPORT_MB * 2**20:
                self.kept += chunk
        self.stream.close()


def read_result(path, limit_mb=RESULT_MB):
    """The text of a file a run left, if it is a regular file (no link, no pipe) under ``limit_mb``; else ''."""
    try:
        info = os.lstat(path)
        if not stat.S_ISREG(info.st_mode) or info.st_size > limit_mb * 2**20:
            return ""
        descriptor = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
        with os.fdopen(descriptor, "rb") as file:
            return file.read(limit_mb * 2**20).decode("utf-8", errors="replace")
    except OSError:
        return ""


def execute(path, out_path, cell_timeout, report_fd):
    """Inside the fence: run every cell (errors allowed), save the result, say how it ended; report
    on ``report_fd`` (a pipe the kernel never holds) the records each cell wrote (``Attributor``)."""
    from nbclient import NotebookClient
    from nbclient.exceptions import CellTimeoutError, DeadKernelError

    os.set_inheritable(report_fd, False)
    undumpable()   # before the kernel starts
    kind, _, records = os.environ.get("COURSE_GRADING", "").partition(":")
    attributor = Attributor(kind == "record" and bool(records), os.fdopen(report_fd, "w", encoding="utf-8"))
    handed = () if attributor.kernel_end is None else (attributor.kernel_end.fileno(),)
    os.environ.pop(RECORDS_FD, None)
    os.environ.update({RECORDS_FD: str(fd) for fd in handed})   # (the kernel's environment is this one's)
    nb = nbformat.read(path, as_version=4)
    client = NotebookClient(nb, timeout=cell_timeout, kernel_name="python3", allow_errors=True,
                            record_timing=False, resources={"metadata": {"path": str(Path(path).parent)}},
                            on_cell_start=attributor.start, on_cell_error=attributor.error)
    try:   # (cells numbered as the student's notebook numbers them: the grader's setup cell, first, is cell 0)
        run_client(client, pass_fds=handed)
        errors = [i for i, c in enumerate(nb.cells) if c.cell_type == "code"
                  and any(o.output_type == "error" for o in c.get("outputs", []))]
        status = "ran to the end" + (f" (cell {errors[0]} raised an error)" if errors else "")
    except DeadKernelError:   # (the cell running then: the Attributor's, as a count may be the file's, the judge's)
        attributor.error()
        status = "the notebook's process ended (exit() or a crash) " + (
            "as it started" if attributor.at is None else f"in cell {attributor.at}")
    except CellTimeoutError:
        attributor.error()
        status = f"cell {attributor.at} ran longer than {cell_timeout} s and was stopped there"
    finally:
        attributor.close()
    nbformat.write(capped(nb), out_path)
    print(f"grader: {status}", flush=True)


def undumpable():
    """Make this process non-dumpable (Linux's prctl): another process of the same user without
    CAP_SYS_PTRACE (the notebook's kernel, in every fence) can then neither read its memory nor
    open its files through /proc/<pid>/fd, so it cannot write the driver's report."""
    import ctypes

    try:
        ctypes.CDLL(None, use_errno=True).prctl(4, 0, 0, 0, 0)   # PR_SET_DUMPABLE, 0
    except (OSError, AttributeError):   # not Linux: the fence is Linux's, so the run is unfenced anyway
        pass


class Attributor:
    """The driver's record keeping (``execute``, which runs no student code): the records reach the
    driver as they are written, on a channel no one can rewrite, and as each cell starts, what came
    since the last cell started is reported as that cell's, one JSON line {"at": its position,
    "lines": text} on ``report``; so a record is known by the cell that was running when it was
    written, whatever cell it names (``attributed``).

    The channel: one end of a unix socket pair, handed to the kernel when it starts (its descriptor
    number in COURSE_RECORDS_FD, ``kernel_end``); the course's recording code seals it before any cell
    of the student's runs and writes every record there (helpers.grading.append). A socket is a
    stream: whatever is written to it can only come after what was written before, and once written
    it is the driver's (a thread here reads it as it comes, ``listen``). So a student's thread that
    watches for the genuine record cannot change it, as it could change a records file in place
    before the driver read it (red team round 25): it can only write more, and a second record for a
    grade call, a line of another form or a fragment glued to the genuine one costs that check its
    answers (``attributed``). Nor can it write a record of its own: the driver first writes a token on
    the channel, which the course's code reads before any cell of the learner's (helpers.grading.seal),
    every record starts with it, and ``sealed`` reports the number of each other line ("unsealed").
    Opening /proc/self/fd/N of a socket fails, so the kernel gets no reading
    end of it, and the driver never writes to it. The driver keeps at most RESULT_MB of what it reads
    (the rest is read, not kept, and the cell is reported "cut": its check counts for nothing). A cell
    that stopped with an error, a crash or a time-out (``error``) is reported with "failed": true
    (its check's genuine record may never have been written)."""

    def __init__(self, recording, report):
        self.report, self.at, self.sent, self.failed = report, None, 0, False
        self.pending, self.cut, self.done = bytearray(), False, False   # pending: read, not yet reported
        self.lock = threading.Lock()   # a read and a cell's start never interleave (``listen``, ``start``)
        self.channel = self.kernel_end = None
        self.token = secrets.token_hex(16).encode() if recording else b""   # (what starts the course's records)
        if recording:
            self.channel, self.kernel_end = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
            self.channel.sendall(self.token + b"\n")   # (read by the course's code before any cell of the learner's)
            self.channel.setblocking(False)
            threading.Thread(target=self.listen, daemon=True).start()

    def start(self, cell=None, cell_index=None, **_):
        with self.lock:
            self.send()
            self.at, self.failed = cell_index, False

    def error(self, cell=None, cell_index=None, **_):
        """nbclient's hook when a cell ends with an error (and ``execute``'s, on a crash or a time-out)."""
        self.failed = True

    def flush(self):
        """Report what came since the last cell started (at the end of the run)."""
        with self.lock:
            self.send()

    def close(self):
        """The run is over: report what is left, then close the channel."""
        self.flush()
        self.done = True
        for end in (self.channel, self.kernel_end):
            if end is not None:
                end.close()

    def listen(self):
        """The channel's reader (a thread): waits for data, then reads it under the lock, so what a
        cell wrote is never read after the next cell started (a kernel blocked on a full socket
        would otherwise wait for the next cell's start, which never comes)."""
        while not self.done:
            try:
                ready, _, _ = select.select([self.channel], [], [], 0.5)
            except (OSError, ValueError):   # closed
                return
            if ready:
                with self.lock:
                    if self.done or not self.receive():
                        return

    def receive(self):
        """Read all the channel holds now (never waits), keeping at most RESULT_MB in all; False
        once it is closed. With the lock held."""
        while True:
            try:
                data = self.channel.recv(2**16)
            except BlockingIOError:
                return True
            except OSError:
                return False
            if not data:
                return False
            room = max(0, RESULT_MB * 2**20 - self.sent - len(self.pending))
            self.pending += data[:room]
            self.cut = self.cut or len(data) > room

    def sealed(self, data):
        """(``data``, whole lines, with the token taken off each line the course's code wrote: it starts with
        it, helpers.grading.append; the numbers of the other lines, from 0): lines a learner's code wrote on
        the channel, in the course's form or not, which ``attributed`` counts as no record."""
        if not self.token:
            return data, []
        kept, unsealed = bytearray(), []
        for number, line in enumerate(data.split(b"\n")[:-1]):   # (data ends with its last line's newline)
            sealed = line.startswith(self.token)
            kept += (line[len(self.token):] if sealed else line) + b"\n"
            unsealed += [] if sealed else [number]
        return bytes(kept), unsealed

    def send(self):
        """Report the complete lines read since the last cell started as that cell's (a line not yet
        ended waits for the next report). With the lock held."""
        if self.channel is not None:
            self.receive()
        end = self.pending.rfind(b"\n") + 1
        (text, unsealed), cut = self.sealed(self.pending[:end]), self.cut
        text = text.decode("utf-8", errors="replace")
        del self.pending[:end]
        self.sent, self.cut = self.sent + end, False
        if (text or cut) and self.at is not None:
            try:
                chunk = {"at": self.at, "lines": text, "cut": cut, "failed": self.failed}
                self.report.write(json.dumps({**chunk, "unsealed": unsealed} if unsealed else chunk,
                                             ensure_ascii=False) + "\n")
                self.report.flush()
            except OSError:   # the grader stopped reading (it stopped the run)
                pass


# ---- the course's own files, before and after every run ---------------------------------------


def snapshot():
    """{path: bytes} of every file the grading depends on: each file of the PROTECTED folders, their
    compiled modules (__pycache__) among them, and each entry of ROOT's top level that Python imports
    (``importable``: ROOT is every kernel's PYTHONPATH, ahead of the standard library and site-packages,
    so a run that left a sitecustomize.py, a json.py or a numpy/ package there would run its code in
    every later kernel and judge); a folder such an entry is maps to None, a link to its target."""
    files = {}
    tops = [path for path in ROOT.iterdir() if path.name not in PROTECTED and importable(path)]
    for base in [ROOT / name for name in PROTECTED] + tops:
        if base.is_symlink():
            files[base] = os.readlink(base)
        elif base.is_dir():
            files[base] = None
            if base in tops and not any(base.glob("__init__.*")):
                continue   # (a folder without __init__, such as tests/: known by name, its files not read)
            files.update((path, path.read_bytes()) for path in base.rglob("*")
                         if path.is_file() and ".ipynb_checkpoints" not in path.parts)
        elif base.is_file():
            files[base] = base.read_bytes()
    return files


MODULE_ENDINGS = (*importlib.machinery.all_suffixes(), ".pth")   # .py, .pyc, an extension's .so; a .pth file


def importable(path):
    """Whether ``path``, an entry of ROOT's top level, is what Python finds there as a module: a Python
    name and then a module's ending (MODULE_ENDINGS), a folder of that name (a package, or without an
    __init__ a namespace package: an empty triton/ makes torch think triton is installed), or a link of
    such a name."""
    stem = path.name.split(".")[0]
    if not stem.isidentifier():
        return False
    if path.is_dir() and not path.is_symlink():
        return path.name == stem
    return path.is_symlink() or path.name[len(stem):] in MODULE_ENDINGS


def restore(before):
    """Put back every protected file a run changed or removed and remove what it added (``snapshot``);
    return their names. A compiled module (under __pycache__) is put back too, but not named: no kernel
    of a later run has read it then, and another process of the instructor's may write one meanwhile."""
    after = snapshot()
    changed = [p for p, data in before.items() if after.get(p, ...) != data] + [p for p in after if p not in before]
    for path in sorted(changed, key=lambda p: len(p.parts)):   # a folder before what it holds
        remove(path)
        if path in before:
            put_back(path, before[path])
    return [str(p.relative_to(ROOT)) for p in changed if "__pycache__" not in p.parts]


def remove(path):
    """Remove ``path`` (a file, a link or a folder), and any link on the way to it from ROOT (a protected
    folder replaced by a link would take what is put back elsewhere)."""
    for parent in reversed(path.relative_to(ROOT).parents[:-1]):   # (not ROOT itself)
        if (ROOT / parent).is_symlink():
            (ROOT / parent).unlink()
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    elif path.is_symlink() or path.exists():
        path.unlink()


def put_back(path, kept):
    """``path`` as ``snapshot`` kept it: a folder (None), a link (its target) or a file (its bytes)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    if kept is None:
        path.mkdir()
    elif isinstance(kept, str):
        path.symlink_to(kept)
    else:
        path.write_bytes(kept)


# ---- grading ---------------------------------------------------------------------------------


MAX_RECORD_DEPTH = 100   # lists and dicts an answer may nest (as a check screens a learner's answer)


TAMPERED = ("more than one answer was recorded for one grade call of this check, or a line the course does not "
            "write (a record written by the notebook's own code, an answer under a number or name the check does "
            "not use, or a check cell that stopped after recording?), so none of them counts")
OVER_BUDGET = (f"its answer was not kept: the grader keeps at most {MAX_RECORD_CHARS:,} characters and "
               f"{MAX_RECORD_VALUES:,} values (numbers, texts, lists) of one notebook's recorded answers, and the "
               f"answers before it used them up")
CHANGED = ("the notebook's own code changed the course's recording code, or how IPython runs a check cell, before "
           "this check ran (helpers.grading.tampered), so none of its answers counts")


def read_records(path, cells, notes=None):
    """The answers a run recorded for the check cells ``cells`` (a list), one per (cell, index);
    anything malformed is left out, and so is an answer nested deeper than MAX_RECORD_DEPTH (the
    judge's kernel, deeper in its own stack, could not read it back). A check cell with two records
    for one (cell, index), or named by an {"unsound": grade id} line (``attributed``), was tampered
    with: each of its answers is recorded as unknown (TAMPERED, which the judge says), and ``notes``
    (a list) says so, as it says each {"left_out": sentence} line. So does a check cell whose record
    says the course's recording code was changed ({"tampered": what}, helpers.grading.tampered): each
    of its answers is CHANGED.

    The file is student-written, so what the grader keeps of it is bounded: only the keys a check
    can ask for (an index below MAX_RECORD_INDEX: a record of a check under a larger one makes that
    check tampered with), MAX_RECORD_CONTAINERS lists and dicts, MAX_RECORD_VALUES values and
    MAX_RECORD_CHARS characters in all (a line is counted before it is parsed). A line past these
    budgets is not parsed, and ``notes`` says so (OVER_BUDGET), but its key, read from its start as
    the course writes it (``key_of``), still counts for the test of two records for one grade call."""
    records, seen, tampered, changed, kept, containers, values = [], set(), set(), {}, 0, 0, 0
    notes, over = [] if notes is None else notes, set()
    for line in lines(read_result(path)):
        if (kept + len(line) > MAX_RECORD_CHARS or containers + containers_in(line) > MAX_RECORD_CONTAINERS
                or values + values_in(line) > MAX_RECORD_VALUES):
            key = key_of(line)   # None: a line that is no record of the course's
            if key is not None and key in seen:
                tampered.add(key[0])
            elif key is not None and key[0] in cells:
                over.add(key[0])
            seen.add(key)
            continue
        try:
            entry = json.loads(line)
            if set(entry) == {"left_out"} and isinstance(entry["left_out"], str):
                notes.append(entry["left_out"][:300])
                continue
            if set(entry) == {"unsound"} and entry["unsound"] in cells:
                tampered.add(entry["unsound"])
                continue
            key = (entry["cell"], entry["index"])
            if not (isinstance(key[0], str) and key[0] in cells):
                continue
            if "tampered" in entry:   # the course's recording code was changed (helpers.grading.tampered)
                what = entry["tampered"]
                changed[key[0]] = [str(w)[:80] for w in what[:3]] if isinstance(what, list) else []
            if not (type(key[1]) is int and 0 <= key[1] < MAX_RECORD_INDEX) or key in seen:
                tampered.add(key[0])   # two records for one grade call, or a number no check cell reaches
                continue
            seen.add(key)
            if too_deep(entry.get("answer")):
                continue
        except (ValueError, TypeError, KeyError, RecursionError, AttributeError):
            continue
        kept, containers, values = kept + len(line), containers + containers_in(line), values + values_in(line)
        records.append({"cell": key[0], "index": key[1], "answer": entry.get("answer")})
    tampered &= set(cells)
    notes += [f"{cell}: {OVER_BUDGET}" for cell in sorted(over - tampered - set(changed))]
    notes += [f"{cell}: {TAMPERED}" for cell in sorted(tampered - set(changed))]
    notes += [f"{cell}: {CHANGED} ({', '.join(what) or 'its code'})" for cell, what in sorted(changed.items())]
    return [{**record, "answer": {"unknown": CHANGED if record["cell"] in changed else TAMPERED}}
            if record["cell"] in tampered | set(changed) else record for record in records]


KEY = re.compile(r'\{"cell": ("(?:[^"\\]|\\.){0,400}"), "index": (\d{1,6})[,}]')   # how json.dumps starts a record


def key_of(line):
    """(grade id, index) read from the start of a record line as the course writes it (json.dumps of
    {"cell": ..., "index": ..., ...}), without parsing the rest; None when it does not start so."""
    match = KEY.match(line)
    if match is None:
        return None
    try:
        return json.loads(match.group(1)), int(match.group(2))
    except ValueError:
        return None


def containers_in(line):
    """An upper bound on the lists and dicts a JSON line holds (counted before it is parsed)."""
    return line.count("[") + line.count("{")


def values_in(line):
    """An upper bound on the values (numbers, texts, lists, dicts, each key) a JSON line holds, counted
    before it is parsed: each but the first follows a comma, a colon or an opening bracket."""
    return 1 + line.count(",") + line.count(":") + containers_in(line)


def lines(text):
    """The lines of ``text``, one at a time (no copy of the whole text)."""
    start = 0
    while start < len(text):
        end = text.find("\n", start)
        end = len(text) if end < 0 else end + 1
        yield text[start:end]
        start = end


def too_deep(value, limit=MAX_RECORD_DEPTH):
    """Whether a JSON value nests lists and dicts more than ``limit`` deep (walked without recursion)."""
    stack = [(value, 0)]
    while stack:
        value, depth = stack.pop()
        if isinstance(value, (list, dict)):
            if depth >= limit:
                return True
            stack.extend((item, depth + 1) for item in (value.values() if isinstance(value, dict) else value))
    return False


def keep_executed(executed, path):
    """``executed`` (capped already) written to ``path``, for its feedback page at the end; its path,
    or None. On disk, not in memory: a class's notebooks would add up in the grader's process."""
    if executed is None:
        return None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        nbformat.write(executed, path)
    except Exception:   # a notebook the run left malformed: its page shows no notebook, its grade is as it is
        return None
    return path


def kept_on_disk(records, path):
    """``records`` (``read_records``'s) written to ``path`` as JSON; its path. On disk, not in memory:
    every submission's would add up in the grader's process before judging."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(records))
    return path


class OnDisk(dict):
    """{key: path of ``kept_on_disk``}, read as {key: records}: each submission's records parsed only
    when asked for (``text``: unparsed), so judging a chapter never holds the class's at once."""

    def __getitem__(self, key):
        return json.loads(self.text(key))

    def text(self, key):
        return Path(super().__getitem__(key)).read_text()

    def items(self):
        return ((key, self[key]) for key in self)

    def values(self):
        return (self[key] for key in self)


def grade_submissions(submissions, work, log=print, hidden=(), fence=None, **limits):
    """Run every submission, then judge each chapter once; fill in status and problems.

    hidden: folders the runs must not see. fence: one of BUBBLEWRAP, USER_NAMESPACE, UNFENCED
    (choose_fence's, when None). limits: timeout and cell_timeout (seconds)."""
    fence, log = fence or choose_fence(), escaping(log)
    records = {}
    for n, sub in enumerate(submissions, 1):
        folder = None
        try:   # (everything of one submission's, its key too: its failure is its own row's)
            folder = work / sub.chapter.stem / sub.key
            nb = assemble(sub, read_submission(sub.path))
            fenced = fence != UNFENCED   # a fenced run cannot write the course's files at all
            before = None if fenced else snapshot()
            sub.status, executed = run(nb, folder, "record:{folder}/records.jsonl", hidden=hidden, fence=fence,
                                       **limits)
            sub.kept = keep_executed(executed, work / "_executed" / f"{sub.key}.ipynb")
            del executed
            changed = [] if fenced else restore(before)
            if changed:
                sub.status = f"changed the course's files ({', '.join(changed[:3])}): restored, and not graded"
                continue
            records[sub] = kept_on_disk(read_records(folder / "records.jsonl", set(sub.chapter.checks), sub.notes),
                                        work / "_records" / f"{sub.key}.json")
        except SubmissionError as error:   # (changed since it was identified)
            sub.status = f"not graded: {error}"
            continue
        except Exception as error:   # one submission never stops the class
            sub.status = f"could not be graded ({type(error).__name__}: {str(error)[:100]})"
            continue
        finally:
            if folder is not None:
                shutil.rmtree(folder, ignore_errors=True)
        log(f"  ran {n}/{len(submissions)}: {sub.student} {sub.chapter.stem}: {sub.status}")
    failed = []   # chapters whose judge fails with no records at all: the course's fault, said at the end
    for chapter in {sub.chapter.stem: sub.chapter for sub in records}.values():
        mine = [sub for sub in records if sub.chapter is chapter]
        try:
            verdicts = judge(chapter, OnDisk({sub.key: records[sub] for sub in mine}), work, hidden, fence)
        except Exception as error:   # one student's records never stop the class: each is judged alone
            try:
                judge(chapter, {}, work, hidden, fence)   # unless it fails with none: the course's fault
            except Exception as own:
                failed.append(f"{chapter.stem}: {str(own)[:200]}")
                log(f"  ✗ judging {chapter.stem} failed even with no answers ({str(own)[:200]}): none of its "
                    "submissions is judged")
                for sub in mine:
                    sentence = f"not judged: the instructor's {chapter.stem} did not run cleanly in the grader"
                    sub.notes.append(sentence)
                    sub.problems = {grade_id: [sentence] for grade_id in chapter.checks}
                continue
            log(f"  judging {chapter.stem} failed ({str(error)[:200]}); judging each submission alone")
            verdicts = {}
            for sub in mine:
                try:
                    verdicts.update(judge(chapter, OnDisk({sub.key: records[sub]}), work, hidden, fence))
                except Exception as alone:
                    sub.status = f"its answers could not be judged ({type(alone).__name__}: {str(alone)[:100]})"
        for sub in mine:
            records[sub].unlink(missing_ok=True)   # (judged: its records are no longer needed)
            sub.problems = verdicts.get(sub.key, {})
            sub.notes += [f"{grade_id}: {TAMPERED}" for grade_id, said in sub.problems.items()
                          if said == [TAMPERED] and f"{grade_id}: {TAMPERED}" not in sub.notes]
    if failed:   # every other chapter is judged; each row of these says so
        raise JudgeError(f"judging failed for {len(failed)} chapter(s), with no answers at all (the course's "
                         f"fault, not a student's): {'; '.join(failed)}", submissions)
    return submissions


class JudgeError(RuntimeError):
    """The instructor's notebook of a chapter did not run cleanly in the grader even with no answers;
    raised after every other chapter was judged (``submissions``: all of them, each row's notes say so)."""

    def __init__(self, message, submissions=()):
        super().__init__(message)
        self.submissions = submissions


def judge(chapter, records, work, hidden=(), fence=UNFENCED):
    """Run the instructor's notebook once, judging everyone's records: {key: {grade id: sentences}}. A check
    with a record the judge never asked for (an index past its grade calls) is TAMPERED, whatever was judged.
    Its time limits, per cell and in all, are one run's (CELL_TIMEOUT, TIMEOUT) for the instructor's answers and
    one more for each submission judged: a check cell judges the whole class, and no student code runs here."""
    folder, everyone = work / chapter.stem / "_judge", json.dumps(records)
    if isinstance(records, OnDisk):   # written one submission's records at a time, from disk
        everyone = work / chapter.stem / "_records.json"
        everyone.parent.mkdir(parents=True, exist_ok=True)
        with open(everyone, "w") as file:
            for n, key in enumerate(records):
                file.write(("{" if n == 0 else ", ") + f"{json.dumps(key)}: " + records.text(key))
            file.write("}" if records else "{}")
    runs = 1 + len(records)   # (the instructor's own, then each submission's)
    status, _ = run(judge_notebook(chapter), folder, "judge:{folder}/records.json:{folder}/verdicts.jsonl",
                    timeout=TIMEOUT * runs, cell_timeout=CELL_TIMEOUT * runs, files={"records.json": everyone},
                    hidden=hidden, fence=fence)
    if not status.startswith("ran to the end") or "raised" in status:
        raise RuntimeError(f"judging {chapter.stem} did not finish cleanly: {status} (see {folder})")
    problems, asked = {key: {} for key in records}, set()
    for line in (folder / "verdicts.jsonl").read_text().splitlines() if (folder / "verdicts.jsonl").exists() else []:
        verdict = json.loads(line)
        problems[verdict["student"]].setdefault(verdict["cell"], []).extend(verdict["problems"])
        asked.add((verdict["student"], verdict["cell"], verdict["index"]))
    for key, recorded in records.items():   # a record under a number no grade call of the check asks for
        for cell in {r["cell"] for r in recorded if (key, r["cell"], r["index"]) not in asked}:
            problems[key][cell] = [TAMPERED]   # (the genuine answer may be that one, the judged one forged)
    return problems


def score(sub):
    """(score, max, {grade id: points}, {grade id: first sentence})."""
    points, why = {}, {}
    for grade_id, worth in sub.chapter.checks.items():
        problems = sub.problems.get(grade_id)
        if problems is None:
            points[grade_id], why[grade_id] = 0, "no answer was recorded (its check did not run)"
        else:
            points[grade_id] = worth if not problems else 0
            if problems:
                why[grade_id] = problems[0]
    return sum(points.values()), sum(sub.chapter.checks.values()), points, why


def rows(submissions, skipped, fence=""):
    """One row per student and chapter (the best of several copies), plus rows for what failed;
    a row whose notebook ran names the fence it ran in."""
    best = {}
    for sub in submissions:
        if sub.chapter is None:
            continue
        mine = best.setdefault((sub.student, sub.chapter.stem), [])
        mine.append(sub)
    table = []
    for (student, stem), subs in sorted(best.items()):
        top = max(subs, key=lambda s: score(s)[0])
        total, worth, points, why = score(top)
        notes = list(top.notes)
        if top.status and not top.status.startswith("ran to the end"):
            notes.append(top.status)
        elif "raised" in top.status:
            notes.append(top.status.replace("ran to the end ", ""))
        if len(subs) > 1:
            others = ", ".join(f"{s.path.name} {score(s)[0]:g}/{worth:g}" for s in subs if s is not top)
            notes.append(f"{len(subs)} copies handed in; the best counts ({top.path.name}; others: {others})")
        table.append(dict(student=student, chapter=stem, score=total, max_score=worth, **points,
                          file=str(top.path.name), notes="; ".join(notes), fence=fence, why=why, submission=top))
    for sub in submissions:
        if sub.chapter is None:
            table.append(dict(student=sub.student, chapter="?", score=0, max_score=0, file=sub.path.name,
                              notes=sub.status, fence="", why={}, submission=sub))
    for line in skipped:   # (its student's folder as data: a name may hold ':' or '/')
        table.append(dict(student=line.student, chapter="-", score=0, max_score=0,
                          file="", notes="skipped: " + line, fence="", why={}, submission=None))
    return table


FORMULA_STARTS = ("=", "+", "-", "@")   # a spreadsheet reads a cell starting so as a formula (tab and CR: escaped)


def inert(text):
    """``text`` as a cell of a table the grader writes (``escaped``), with an apostrophe put before a
    leading = + - or @: a student's file named '=HYPERLINK(...).ipynb' must not become a live formula
    when the instructor opens scores.csv in a spreadsheet."""
    text = escaped(text)
    return "'" + text if text.startswith(FORMULA_STARTS) else text


def write_csv(table, path):
    """The score table as CSV at ``path``: one row per student and chapter, every text cell ``inert``."""
    columns = list(dict.fromkeys(k for row in table for k in row if k not in ("why", "submission")))
    with open(path, "w", newline="") as file:
        writer = csv.DictWriter(file, fieldnames=columns, restval="", extrasaction="ignore")
        writer.writeheader()
        writer.writerows({k: inert(v) if isinstance(v, str) else v for k, v in row.items()} for row in table)


def text_table(table):
    """The score table as aligned text, one line per row, widths fitted to the names; every name and
    note shown ``escaped`` (a student's file name with a newline in it would forge a row)."""
    names = [(escaped(r["student"]), escaped(r["chapter"]), escaped(r["notes"])) for r in table]
    width = max([len("student")] + [len(student) for student, _, _ in names]) + 2
    chapter_width = max([len("chapter")] + [len(chapter) for _, chapter, _ in names]) + 2
    lines = [f"{'student':<{width}}{'chapter':<{chapter_width}}{'score':>7}   per exercise; notes"]
    for r, (student, chapter, notes) in zip(table, names):
        cells = [f"{escaped(key.split('_')[1])} {r[key]:g}" for key in r if key.endswith("_check")]
        score_text = f"{r['score']:g}/{r['max_score']:g}" if r["max_score"] else "-"
        lines.append(f"{student:<{width}}{chapter:<{chapter_width}}{score_text:>7}   "
                     + "  ".join(cells) + (f"   {notes}" if notes else ""))
    fences = sorted({r["fence"] for r in table if r.get("fence")})
    if fences:
        lines.append(f"\nthe submissions ran in: {', '.join(fences)}")
    return "\n".join(lines)


LEFT_OUT = "outputs left out by the grader"


def capped(nb):
    """A copy of ``nb`` whose cell sources and text outputs are at most MAX_CELL_TEXT characters,
    with at most MAX_OUTPUTS_PER_CELL outputs per cell and MAX_OUTPUTS in all (a line says how many
    more were left out)."""
    nb = nbformat.from_dict(json.loads(json.dumps(nb)))
    cut = lambda text: text if len(text) <= MAX_CELL_TEXT else text[:MAX_CELL_TEXT] + "\n… (cut)"  # noqa: E731
    left = MAX_OUTPUTS
    for cell in nb.cells:
        cell.source = cut(str(cell.get("source", "")))
        outputs = cell.get("outputs", [])
        cut_already = bool(outputs) and isinstance(outputs, list) and LEFT_OUT in str(outputs[-1].get("text", ""))
        if isinstance(outputs, list) and len(outputs) - cut_already > min(MAX_OUTPUTS_PER_CELL, left):
            shown = max(0, min(MAX_OUTPUTS_PER_CELL, left))
            cell.outputs = outputs[:shown] + [nbformat.v4.new_output(
                "stream", name="stdout", text=f"… ({len(outputs) - shown:,} more {LEFT_OUT})\n")]
            outputs = cell.outputs
        left -= len(outputs) - cut_already if isinstance(outputs, list) else 0
        for out in outputs:
            if "text" in out:
                out.text = cut(str(out.text))
            for mime, value in out.get("data", {}).items():
                if isinstance(value, str) and not mime.startswith("image/"):
                    out.data[mime] = cut(value)
    return nb


SIZES = ("width", "height")   # what a feedback page shows of an output's metadata (``shown_metadata``)


def shown_metadata(nb):
    """``nb`` (a copy, for a feedback page), each output's metadata cut to an image's width and height,
    kept only when each is a plain number, and without the notebook's widget state. nbconvert's
    template writes width and height into an unquoted attribute (width={{ width }}) and its sanitizer
    reads HTML and Markdown outputs only, so a text there ("1 onload=...") put a live script on the
    page (red team round 25); what else the template reads there (a file name, a background) is
    left out. The run writes the executed notebook, so all of it is the student's."""
    nb.metadata.pop("widgets", None)
    for cell in nb.cells:
        outputs = cell.get("outputs")
        for out in outputs if isinstance(outputs, list) else []:
            if isinstance(out, dict) and "metadata" in out:
                out["metadata"] = sizes_of(out["metadata"])
    return nb


def sizes_of(metadata):
    """{mime: {width, height}} and the top level's width and height of an output's ``metadata``, each
    a plain number from 0 (no bool, NaN, text); nothing else."""
    if not isinstance(metadata, dict):
        return {}
    number = lambda value: type(value) in (int, float) and 0 <= value < float("inf")   # noqa: E731
    kept = {mime: {key: value[key] for key in SIZES if number(value.get(key))} for mime, value in metadata.items()
            if isinstance(mime, str) and mime.startswith("image/") and isinstance(value, dict)}
    kept = {mime: size for mime, size in kept.items() if size}
    return {**kept, **{key: metadata[key] for key in SIZES if number(metadata.get(key))}}


def write_feedback(row, folder):
    """One HTML page per student and chapter: the score, each exercise's verdict, the notebook."""
    from nbconvert import HTMLExporter

    sub = row["submission"]
    folder.mkdir(parents=True, exist_ok=True)
    shown = lambda text: html.escape(escaped(text))   # noqa: E731 (names and sentences a student may control)
    items = []
    for grade_id, worth in sub.chapter.checks.items():
        ok = row[grade_id] == worth
        items.append(f"<li>{'✓' if ok else '✗'} <b>{shown(grade_id)}</b> {row[grade_id]:g}/{worth:g}"
                     + ("" if ok else f": {shown(row['why'].get(grade_id, ''))}") + "</li>")
    head = (f"<h1>{shown(sub.chapter.stem)}: {row['score']:g}/{row['max_score']:g}</h1>"
            f"<p>{shown(row['student'])}, {shown(sub.path.name)}</p><ul>{''.join(items)}</ul>"
            + (f"<p>{shown(row['notes'])}</p>" if row["notes"] else ""))
    body = ""
    executed = sub.executed   # read from disk, for this page only
    if executed is not None:
        exporter = HTMLExporter(sanitize_html=True)
        exporter.log.setLevel(logging.ERROR)   # not "alternative text is missing" for every figure
        try:
            body, _ = exporter.from_notebook_node(shown_metadata(capped(executed)))
        except Exception as error:
            body = f"<p>(the notebook could not be shown: {html.escape(type(error).__name__)})</p>"
    page = folder / f"{sub.chapter.stem}.html"
    page.write_text(body.replace("<body", f"<body><div class='grader'>{head}</div><div", 1) if body else head)
    return page


def cleared(folder, chapters):
    """Remove the feedback pages an earlier run wrote in ``folder`` (<student>/<chapter>/<chapter>.html, as
    ``write_feedback`` names them, for ``chapters``), then the folders left empty, and nothing else: grading
    again regrades from scratch, and a page of last run's score must not outlive a hand-in that now fails."""
    stems = {chapter.stem for chapter in chapters}
    for student in (folder.iterdir() if folder.is_dir() and not folder.is_symlink() else ()):
        for stem in stems if student.is_dir() and not student.is_symlink() else ():
            page = student / stem / f"{stem}.html"
            if page.parent.is_dir() and not page.parent.is_symlink():
                with contextlib.suppress(OSError):   # (a folder in its place, or one that holds more, stays)
                    page.unlink(missing_ok=True)
                    page.parent.rmdir()
        with contextlib.suppress(OSError):
            student.rmdir()


TRIAL = ("import os, pathlib, helpers, helpers.grading\n"
         "assert pathlib.Path(os.environ['COURSE_DATA']).is_dir(), 'the course data folder is not there'\n"
         "print('the course is here')")


def tried_fence(fence, work, hidden, unfenced=False, log=print):
    """``fence``, once a trial run in it has run what every run runs (this script, the kernel, the
    course's package and data, all seen through the fence); else, when ``unfenced``, UNFENCED; else
    FenceError, one sentence, before any submission runs (a fence covers SOCKET_DIRS: a course kept
    under /tmp would be hidden from every run)."""
    if fence == UNFENCED:
        return fence
    trial = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(TRIAL)])
    folder = work / "_fence_trial"
    try:
        status, executed = run(trial, folder, "", timeout=FENCE_TRIAL_SECONDS, cell_timeout=FENCE_TRIAL_SECONDS,
                               hidden=hidden, fence=fence)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    shown = "".join(str(o.get("text", "")) for c in (executed.cells if executed else []) for o in c.get("outputs", []))
    if status.startswith("ran to the end") and "raised" not in status and "the course is here" in shown:
        return fence
    if unfenced:
        log(f"  the {fence} fence hides the course from its runs ({status}): running unfenced, as asked")
        return UNFENCED
    under = next((d for d in sockets() if ROOT.is_relative_to(d)), None)
    why = (f"the course is at {ROOT}, under {under}, which the fence covers" if under
           else f"its trial run ended: {status[:160]}")
    raise FenceError(f"expected the {fence} fence to let a run see the course's own files (scripts/, helpers/, "
                     f"data/), but it hides them ({why}), so no submission was run: keep the course outside "
                     f"{', '.join(sockets())}, or pass --unfenced to run the submissions without a fence")


FENCE_TRIAL_SECONDS = 120   # the trial run of a fence with the course in it (a kernel start, one cell)


def grade(submissions_folder, course, log=print, unfenced=False, **limits):
    """The whole grading: find, identify, run, judge, report. Returns the table's rows.

    Refuses (FenceError) before anything runs when no fence works here, or when the fence's trial
    run cannot see the course (``tried_fence``), unless ``unfenced`` (the instructor's --unfenced).
    A chapter whose judge fails is said in its rows and the log; the others are still graded.
    limits: timeout and cell_timeout (seconds) for each run."""
    fence, log = choose_fence(unfenced), escaping(log)
    submissions_folder, course = Path(submissions_folder), Path(course)
    hidden, work = hidden_paths(course, submissions_folder), course / "work"
    fence = tried_fence(fence, work, hidden, unfenced, log)
    log(f"fence: {fence}")
    chapters = graded_chapters()
    found, skipped = find_submissions(submissions_folder)
    runnable = [sub for sub in found if identify(sub, chapters) is not None]
    kept = set(first_copies(runnable, lambda sub: (sub.student, sub.chapter.stem), "of {0[1]}"))
    found = [sub for sub in found if sub in kept or sub.chapter is None]
    runnable = [sub for sub in runnable if sub in kept]
    try:
        grade_submissions(runnable, work, log, hidden=hidden, fence=fence, **limits)
    except JudgeError as error:   # those chapters' rows say so; every other chapter's scores are kept
        log(f"✗ {error}")
    table = rows(found, skipped, fence)
    write_csv(table, course / "scores.csv")
    cleared(course / "feedback", chapters)   # this run's pages only, beside this run's scores.csv
    for row in table:
        if row["submission"] is not None and row["submission"].chapter is not None:
            try:
                write_feedback(row, course / "feedback" / row["student"] / row["chapter"])
            except Exception as error:
                log(f"  no feedback page for {row['student']} {row['chapter']}: {type(error).__name__}")
    return table


if __name__ == "__main__":
    if sys.argv[1:2] == ["_execute"]:
        execute(sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5]))

