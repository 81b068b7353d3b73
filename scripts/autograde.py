"""Grade a folder of submissions so that no student's code can change a grade or stop the class.

    python scripts/homework.py grade SUBMISSIONS     # the instructor's command; it calls grade() here

For every notebook handed in:

1. **Identify** its chapter by its content (the check cells it holds), not by its name, so a
   renamed file is graded and a chapter saved under another's name is graded as what it is.
2. **Assemble** it: the student's cells, with every check cell replaced by the instructor's
   own (hidden tests included), each preceded by ``helpers.grading.cell(<grade id>)``.
3. **Run** it in a process of its own, in a folder of its own, with a time and a memory limit,
   inside a fence: the run sees the whole machine read-only except its folder, does not see
   the solutions, the course folder or the submissions, has no network and no capability.
   The fence is bubblewrap (``bwrap``, Debian's package bubblewrap) where it works, else a
   user namespace through util-linux's ``unshare`` (``choose_fence`` tries each on a trial run).
   In that run the hidden tests only *record* each answer as data (helpers.grading); nothing
   is judged there.
4. **Judge** once per chapter: the instructor's notebook runs with its own arguments and judges
   every recorded answer (student code never runs there; function answers are replayed from
   what they returned on the check's inputs).
5. **Report**: one row per student and chapter, the score per exercise and, where something
   went wrong (a crash, a time-out, an exit, a second copy, a lost cell), what happened.

With neither fence, grading refuses before anything runs, unless the instructor passes
``--unfenced``: then the runs are still separate processes in separate folders with the same
limits, and the course's own files are fingerprinted before and restored after every run, but
a submission could read or write other files of the instructor's and reach the network. The
score table names the fence the submissions ran in (``fence``).
"""
import csv
import hashlib
import html
import json
import logging
import os
import re
import resource
import shutil
import signal
import stat
import subprocess
import sys
import threading
from dataclasses import dataclass, field
from pathlib import Path

import nbformat

from chapters import FIXED_ENV, ROOT, all_notebooks, nbgrader_meta, run_client
from fence import UNFENCED, FenceError, choose_fence, fence_prefix  # noqa: F401 (FenceError: homework.py's)

PROTECTED = ("helpers", "scripts", "instructor", "notebooks", "data", "grading/nbgrader_config.py")
TIMEOUT = 600            # seconds one submission may run, all cells together
CELL_TIMEOUT = 120       # seconds one cell may run
MEMORY_MB = 4096         # the run's data segment (RLIMIT_DATA); torch and numba map more, harmlessly
FILE_MB = 200            # the largest file a run may write
RESULT_MB = 50           # the largest records file or executed notebook the grader reads back
TAIL_KB = 64             # the end of a run's printed output the grader keeps (its last line says how it ended)
MAX_CELL_TEXT = 10_000   # characters of a student's cell source or output kept for the feedback page
MARKER = "import helpers.grading; helpers.grading.cell({!r})  # added by the grader\n"


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
    executed: object = None   # the notebook as it ran, for the feedback page

    @property
    def key(self):
        """A name for files and the judge: the student's id made safe, plus a hash of the path."""
        digest = hashlib.sha1(str(self.path).encode()).hexdigest()[:16]
        return re.sub(r"[^A-Za-z0-9_.-]", "_", self.student)[:40] + "-" + digest


def find_submissions(folder):
    """Every notebook in SUBMISSIONS/<student>/ (any depth), and sentences on what was skipped."""
    folder = Path(folder)
    found, skipped = [], []
    for student_dir in sorted(folder.iterdir()):
        if student_dir.is_symlink():
            skipped.append(f"{student_dir.name}: a link, not a folder of its own")
            continue
        if not student_dir.is_dir():
            skipped.append(f"{student_dir.name}: a file at the top level (expected one folder per student)")
            continue
        if student_dir.name.startswith("."):
            skipped.append(f"{student_dir.name}/: a hidden folder, not a student")
            continue
        notebooks = sorted(p for p in student_dir.rglob("*.ipynb") if ".ipynb_checkpoints" not in p.parts
                           and not any(part.startswith(".") for part in p.relative_to(student_dir).parts))
        links = [p for p in notebooks if p.is_symlink() or not p.is_file()]
        skipped += [f"{student_dir.name}/{p.name}: a link or not a regular file" for p in links]
        notebooks = [p for p in notebooks if p not in links]
        if not notebooks:
            skipped.append(f"{student_dir.name}/: no notebook inside")
        found += [Submission(student_dir.name, p) for p in notebooks]
    return found, skipped


def identify(submission, chapters):
    """Set ``submission.chapter`` from the check cells it holds; return the notebook, or None."""
    try:
        nb = nbformat.read(submission.path, as_version=4)
        ids = {str(nbgrader_meta(c).get("grade_id")) for c in nb.cells if isinstance(nbgrader_meta(c), dict)}
        sources = {visible(c.source) for c in nb.cells if c.cell_type == "code"}
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


def source_cells(chapter):
    """The instructor's check cells (grade id -> cell), hidden tests included."""
    nb = nbformat.read(chapter.path, as_version=4)
    return nb, {nbgrader_meta(c)["grade_id"]: c for c in nb.cells if nbgrader_meta(c).get("grade_id") in chapter.checks}


def marked(cell, grade_id):
    """A copy of the instructor's check cell that tells the grader which exercise it is."""
    copy = nbformat.from_dict(json.loads(json.dumps(cell)))
    copy.source = MARKER.format(grade_id) + copy.source
    copy.outputs, copy.execution_count = [], None
    return copy


def assemble(submission, student_nb):
    """The student's notebook with every check cell put back as the instructor wrote it, where
    the student's cell with its grade id stands (or, without metadata, the last cell whose text
    is that check's)."""
    _, checks = source_cells(submission.chapter)
    by_text = {text: grade_id for grade_id, text in submission.chapter.visible.items()}
    code = [c for c in student_nb.cells if c.cell_type == "code"]
    place = {}
    for i, cell in enumerate(code):
        grade_id = nbgrader_meta(cell).get("grade_id")
        if grade_id in checks and grade_id not in place:
            place[grade_id] = i
    for i, cell in enumerate(code):
        grade_id = by_text.get(visible(cell.source))
        if grade_id in checks and grade_id not in {g for g, j in place.items() if nbgrader_meta(code[j])}:
            place[grade_id] = i   # the last copy of the check's text
    at = {i: grade_id for grade_id, i in place.items()}
    cells, i = [], -1
    for cell in student_nb.cells:
        if cell.cell_type == "code":
            i += 1   # the cell's index in ``code``
            if i in at:
                cells.append(marked(checks[at[i]], at[i]))
                continue
            if nbgrader_meta(cell).get("grade") or visible(cell.source) in by_text:
                continue   # another copy of a check cell: only one of each runs
            cell.outputs, cell.execution_count = [], None
        cells.append(cell)
    missing = [g for g in checks if g not in place]
    if missing:
        submission.notes.append(f"check cell(s) {', '.join(missing)} were deleted: those exercises score 0")
    student_nb.cells = cells
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
    """What a run must not see: the chapters (the instructor's with their solutions and hidden tests,
    the learner's with their solutions collapsed), the repository's history, the course folder
    (everyone's work and feedback) and the submissions."""
    paths = [Path(p).resolve() for p in (ROOT / "instructor", ROOT / "notebooks", ROOT / ".git", course, submissions)
             if p is not None]
    return [p for p in paths if not (ROOT / "helpers").resolve().is_relative_to(p)]   # never hide the package


def run_env(folder, grading):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("COURSE_", "JUPYTER", "IPYTHON"))}
    env.update(FIXED_ENV, COURSE_GRADING=grading, COURSE_DATA=str(ROOT / "data"), HOME=str(folder),
               JUPYTER_RUNTIME_DIR=str(folder / ".runtime"), IPYTHONDIR=str(folder / ".ipython"),
               MPLCONFIGDIR=str(folder / ".matplotlib"), NUMBA_CACHE_DIR=str(folder / ".numba"),
               TMPDIR=str(folder / ".tmp"),
               PYTHONPATH=str(ROOT), PYTHONDONTWRITEBYTECODE="1")
    env.pop("MPLBACKEND", None)
    return env


def limit_resources():
    """In the run's process: a memory limit, and no file larger than FILE_MB."""
    limit = MEMORY_MB * 2**20
    resource.setrlimit(resource.RLIMIT_DATA, (limit, limit))
    resource.setrlimit(resource.RLIMIT_FSIZE, (FILE_MB * 2**20, FILE_MB * 2**20))


def run(nb, folder, grading, timeout=TIMEOUT, cell_timeout=CELL_TIMEOUT, files=None, hidden=(), fence=UNFENCED):
    """Execute ``nb`` in ``folder`` (made afresh, with ``files``: {name: text}) under ``fence``.

    grading: the kernel's COURSE_GRADING, with {folder} for the folder. Returns (status, the
    executed notebook or None)."""
    shutil.rmtree(folder, ignore_errors=True)
    (folder / ".tmp").mkdir(parents=True)
    for name, text in (files or {}).items():
        (folder / name).write_text(text)
    nbformat.write(nb, folder / "notebook.ipynb")
    command = fence_prefix(fence, folder, hidden) + [sys.executable, str(Path(__file__).resolve()), "_execute",
                                                str(folder / "notebook.ipynb"), str(folder / "executed.ipynb"),
                                                str(cell_timeout)]
    process = subprocess.Popen(command, cwd=folder, env=run_env(folder, grading.format(folder=folder)),
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                               preexec_fn=limit_resources, start_new_session=True)
    tail = Tail(process.stdout)
    try:
        process.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()
        status = f"stopped after {timeout} s (the time limit)"
    else:
        try:   # what the run left running (a process that holds the pipe): the session is the run's
            os.killpg(process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        tail.join(10)
        last = [line for line in tail.text().splitlines() if line.startswith("grader:")]
        status = last[-1][len("grader:"):].strip() if last else f"the run ended with exit code {process.returncode}"
    text = read_result(folder / "executed.ipynb")
    try:
        executed = nbformat.reads(text, as_version=4) if text else None
    except Exception:
        executed = None
    return status, executed


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


def read_result(path):
    """The text of a file a run left, if it is a regular file (no link, no pipe) under RESULT_MB; else ''."""
    try:
        info = os.lstat(path)
        if not stat.S_ISREG(info.st_mode) or info.st_size > RESULT_MB * 2**20:
            return ""
        descriptor = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
        with os.fdopen(descriptor, "rb") as file:
            return file.read(RESULT_MB * 2**20).decode("utf-8", errors="replace")
    except OSError:
        return ""


def execute(path, out_path, cell_timeout):
    """Inside the fence: run every cell (errors allowed), save the result, say how it ended."""
    from nbclient import NotebookClient
    from nbclient.exceptions import CellTimeoutError, DeadKernelError

    nb = nbformat.read(path, as_version=4)
    client = NotebookClient(nb, timeout=cell_timeout, kernel_name="python3", allow_errors=True,
                            record_timing=False, resources={"metadata": {"path": str(Path(path).parent)}})
    try:
        run_client(client)
        errors = [i for i, c in enumerate(nb.cells, 1) if c.cell_type == "code"
                  and any(o.output_type == "error" for o in c.get("outputs", []))]
        status = "ran to the end" + (f" (cell {errors[0]} raised an error)" if errors else "")
    except DeadKernelError:
        ran = [i for i, c in enumerate(nb.cells, 1) if c.cell_type == "code" and c.get("execution_count")]
        status = f"the notebook's process ended (exit() or a crash) after cell {ran[-1] if ran else 0}"
    except CellTimeoutError:
        ran = [i for i, c in enumerate(nb.cells, 1) if c.cell_type == "code" and c.get("execution_count")]
        status = f"cell {ran[-1] if ran else 1} ran longer than {cell_timeout} s and was stopped there"
    nbformat.write(nb, out_path)
    print(f"grader: {status}", flush=True)


# ---- the course's own files, before and after every run ---------------------------------------


def snapshot():
    """{path: bytes} of every file the grading depends on."""
    files = {}
    for name in PROTECTED:
        base = ROOT / name
        for path in ([base] if base.is_file() else base.rglob("*")):
            if path.is_file() and "__pycache__" not in path.parts and ".ipynb_checkpoints" not in path.parts:
                files[path] = path.read_bytes()
    return files


def restore(before):
    """Put back every protected file a run changed or removed; return their names."""
    after = snapshot()
    changed = [p for p, data in before.items() if after.get(p) != data] + [p for p in after if p not in before]
    for path in changed:
        if path in before:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(before[path])
        else:
            path.unlink()
    return [str(p.relative_to(ROOT)) for p in changed]


# ---- grading ---------------------------------------------------------------------------------


MAX_RECORD_DEPTH = 100   # lists and dicts an answer may nest (as a check screens a learner's answer)


def read_records(path, cells):
    """The answers a run recorded for the check cells ``cells`` (a list), one per (cell, index):
    the first wins; anything malformed is left out, and so is an answer nested deeper than
    MAX_RECORD_DEPTH (the judge's kernel, deeper in its own stack, could not read it back)."""
    records, seen = [], set()
    for line in read_result(path).splitlines():
        try:
            entry = json.loads(line)
            key = (entry["cell"], entry["index"])
            if not (isinstance(key[0], str) and key[0] in cells and type(key[1]) is int) or key in seen \
                    or too_deep(entry.get("answer")):
                continue
        except (ValueError, TypeError, KeyError, RecursionError, AttributeError):
            continue
        seen.add(key)
        records.append({"cell": key[0], "index": key[1], "answer": entry.get("answer")})
    return records


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


def grade_submissions(submissions, work, log=print, hidden=(), fence=None, **limits):
    """Run every submission, then judge each chapter once; fill in status and problems.

    hidden: folders the runs must not see. fence: one of BUBBLEWRAP, USER_NAMESPACE, UNFENCED
    (choose_fence's, when None). limits: timeout and cell_timeout (seconds)."""
    fence = fence or choose_fence()
    records = {}
    for n, sub in enumerate(submissions, 1):
        folder = work / sub.chapter.stem / sub.key
        try:
            nb = assemble(sub, nbformat.read(sub.path, as_version=4))
            fenced = fence != UNFENCED   # a fenced run cannot write the course's files at all
            before = None if fenced else snapshot()
            sub.status, sub.executed = run(nb, folder, "record:{folder}/records.jsonl", hidden=hidden, fence=fence,
                                           **limits)
            changed = [] if fenced else restore(before)
            if changed:
                sub.status = f"changed the course's files ({', '.join(changed[:3])}): restored, and not graded"
                continue
            records[sub] = read_records(folder / "records.jsonl", set(sub.chapter.checks))
        except Exception as error:   # one submission never stops the class
            sub.status = f"could not be graded ({type(error).__name__}: {str(error)[:100]})"
            continue
        finally:
            shutil.rmtree(folder, ignore_errors=True)
        log(f"  ran {n}/{len(submissions)}: {sub.student} {sub.chapter.stem}: {sub.status}")
    for chapter in {sub.chapter.stem: sub.chapter for sub in records}.values():
        mine = [sub for sub in records if sub.chapter is chapter]
        try:
            verdicts = judge(chapter, {sub.key: records[sub] for sub in mine}, work, hidden, fence)
        except Exception as error:   # one student's records never stop the class: each is judged alone
            judge(chapter, {}, work, hidden, fence)   # unless it fails with none: the course's fault, said as it is
            log(f"  judging {chapter.stem} failed ({str(error)[:200]}); judging each submission alone")
            verdicts = {}
            for sub in mine:
                try:
                    verdicts.update(judge(chapter, {sub.key: records[sub]}, work, hidden, fence))
                except Exception as alone:
                    sub.status = f"its answers could not be judged ({type(alone).__name__}: {str(alone)[:100]})"
        for sub in mine:
            sub.problems = verdicts.get(sub.key, {})
    return submissions


def judge(chapter, records, work, hidden=(), fence=UNFENCED):
    """Run the instructor's notebook once, judging everyone's records: {key: {grade id: sentences}}."""
    folder = work / chapter.stem / "_judge"
    status, _ = run(judge_notebook(chapter), folder, "judge:{folder}/records.json:{folder}/verdicts.jsonl",
                    files={"records.json": json.dumps(records)}, hidden=hidden, fence=fence)
    if not status.startswith("ran to the end") or "raised" in status:
        raise RuntimeError(f"judging {chapter.stem} did not finish cleanly: {status} (see {folder})")
    problems = {key: {} for key in records}
    for line in (folder / "verdicts.jsonl").read_text().splitlines() if (folder / "verdicts.jsonl").exists() else []:
        verdict = json.loads(line)
        problems[verdict["student"]].setdefault(verdict["cell"], []).extend(verdict["problems"])
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
    for line in skipped:
        table.append(dict(student=line.split("/")[0].split(":")[0], chapter="-", score=0, max_score=0,
                          file="", notes="skipped: " + line, fence="", why={}, submission=None))
    return table


def write_csv(table, path):
    columns = list(dict.fromkeys(k for row in table for k in row if k not in ("why", "submission")))
    with open(path, "w", newline="") as file:
        writer = csv.DictWriter(file, fieldnames=columns, restval="", extrasaction="ignore")
        writer.writeheader()
        writer.writerows(table)


def text_table(table):
    """The score table as aligned text, one line per row, widths fitted to the names."""
    width = max([len("student")] + [len(r["student"]) for r in table]) + 2
    chapter_width = max([len("chapter")] + [len(r["chapter"]) for r in table]) + 2
    lines = [f"{'student':<{width}}{'chapter':<{chapter_width}}{'score':>7}   per exercise; notes"]
    for r in table:
        cells = [f"{key.split('_')[1]} {r[key]:g}" for key in r if key.endswith("_check")]
        score_text = f"{r['score']:g}/{r['max_score']:g}" if r["max_score"] else "-"
        lines.append(f"{r['student']:<{width}}{r['chapter']:<{chapter_width}}{score_text:>7}   "
                     + "  ".join(cells) + (f"   {r['notes']}" if r["notes"] else ""))
    fences = sorted({r["fence"] for r in table if r.get("fence")})
    if fences:
        lines.append(f"\nthe submissions ran in: {', '.join(fences)}")
    return "\n".join(lines)


def capped(nb):
    """A copy of ``nb`` whose cell sources and text outputs are at most MAX_CELL_TEXT characters."""
    nb = nbformat.from_dict(json.loads(json.dumps(nb)))
    cut = lambda text: text if len(text) <= MAX_CELL_TEXT else text[:MAX_CELL_TEXT] + "\n… (cut)"  # noqa: E731
    for cell in nb.cells:
        cell.source = cut(str(cell.get("source", "")))
        for out in cell.get("outputs", []):
            if "text" in out:
                out.text = cut(str(out.text))
            for mime, value in out.get("data", {}).items():
                if isinstance(value, str) and not mime.startswith("image/"):
                    out.data[mime] = cut(value)
    return nb


def write_feedback(row, folder):
    """One HTML page per student and chapter: the score, each exercise's verdict, the notebook."""
    from nbconvert import HTMLExporter

    sub = row["submission"]
    folder.mkdir(parents=True, exist_ok=True)
    items = []
    for grade_id, worth in sub.chapter.checks.items():
        ok = row[grade_id] == worth
        items.append(f"<li>{'✓' if ok else '✗'} <b>{html.escape(grade_id)}</b> {row[grade_id]:g}/{worth:g}"
                     + ("" if ok else f": {html.escape(row['why'].get(grade_id, ''))}") + "</li>")
    head = (f"<h1>{html.escape(sub.chapter.stem)}: {row['score']:g}/{row['max_score']:g}</h1>"
            f"<p>{html.escape(row['student'])}, {html.escape(sub.path.name)}</p><ul>{''.join(items)}</ul>"
            + (f"<p>{html.escape(row['notes'])}</p>" if row["notes"] else ""))
    body = ""
    executed = sub.executed
    if executed is not None:
        exporter = HTMLExporter(sanitize_html=True)
        exporter.log.setLevel(logging.ERROR)   # not "alternative text is missing" for every figure
        try:
            body, _ = exporter.from_notebook_node(capped(executed))
        except Exception as error:
            body = f"<p>(the notebook could not be shown: {html.escape(type(error).__name__)})</p>"
    page = folder / f"{sub.chapter.stem}.html"
    page.write_text(body.replace("<body", f"<body><div class='grader'>{head}</div><div", 1) if body else head)
    return page


def grade(submissions_folder, course, log=print, unfenced=False, **limits):
    """The whole grading: find, identify, run, judge, report. Returns the table's rows.

    Refuses (FenceError) before anything runs when no fence works here, unless ``unfenced``
    (the instructor's --unfenced). limits: timeout and cell_timeout (seconds) for each run."""
    fence = choose_fence(unfenced)
    log(f"fence: {fence}")
    submissions_folder, course = Path(submissions_folder), Path(course)
    chapters = graded_chapters()
    found, skipped = find_submissions(submissions_folder)
    runnable = [sub for sub in found if identify(sub, chapters) is not None]
    work = course / "work"
    grade_submissions(runnable, work, log, hidden=hidden_paths(course, submissions_folder), fence=fence, **limits)
    table = rows(found, skipped, fence)
    write_csv(table, course / "scores.csv")
    for row in table:
        if row["submission"] is not None and row["submission"].chapter is not None:
            try:
                write_feedback(row, course / "feedback" / row["student"] / row["chapter"])
            except Exception as error:
                log(f"  no feedback page for {row['student']} {row['chapter']}: {type(error).__name__}")
    return table


if __name__ == "__main__":
    if sys.argv[1:2] == ["_execute"]:
        execute(sys.argv[2], sys.argv[3], int(sys.argv[4]))

