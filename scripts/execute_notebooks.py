"""Execute the course notebooks in a fresh kernel, and save or check their outputs.

    python scripts/execute_notebooks.py                     # every chapter, outputs written in place
    python scripts/execute_notebooks.py instructor/00_tour.ipynb
    python scripts/execute_notebooks.py --check             # execute in memory, compare with the committed outputs

A chapter is written once, in instructor/ (nbgrader's source, with solutions and hidden tests).
Saving it also writes and executes the learner's copy in notebooks/ (scripts/chapters.py
`learner_version`: each exercise before its solution, the solution one click away);
--check checks both.

The tests import `execute`, `differences` and `all_notebooks` from here.
"""
import argparse
import json
import os
import re
import sys
import tempfile
from pathlib import Path

import nbformat
from nbclient import NotebookClient
from nbclient.exceptions import CellExecutionError, CellTimeoutError, DeadKernelError

# (the tests, the browser and the benchmark import these names from here too)
from chapters import (FIXED_ENV, INSTRUCTOR, LEARNER, ROOT, all_notebooks, kernel_env,  # noqa: F401
                      learner_copy, learner_notebooks, learner_version, run_client)

CELL_TIMEOUT = 120  # seconds
WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"
WIDGET_STATE = "application/vnd.jupyter.widget-state+json"
COMPARED_TEXT = ("text/plain", "text/html", "text/markdown")


def make_client(path, nb=None):
    """A nbclient client for the notebook at `path` (or for `nb`, as if it lay there), run with cwd = its folder."""
    path = Path(path)
    nb = nbformat.read(path, as_version=4) if nb is None else nb
    return NotebookClient(nb, timeout=CELL_TIMEOUT, kernel_name="python3", record_timing=False,
                          resources={"metadata": {"path": str(path.parent)}})


def execute(path, client=None):
    """Run the notebook top to bottom in a fresh kernel; return it tidied. Raises CellExecutionError."""
    client = client or make_client(path)
    with tempfile.TemporaryDirectory(prefix="my_gpt-") as pieces:   # each run starts with no kept pieces
        run_client(client, env={**kernel_env(), "COURSE_MY_GPT": pieces})
    return tidy(client.nb)


def tidy(nb):
    """Make a saved notebook the same file on every run: merged streams, no timing metadata, fixed widget ids."""
    for cell in nb.cells:
        cell.metadata.pop("execution", None)
        if cell.cell_type == "code":
            cell.outputs = merge_streams(cell.outputs)
    return renumber_widgets(nb)


def merge_streams(outputs):
    """Merge each run of consecutive stream outputs into one stdout then one stderr output.

    The kernel flushes stdout and stderr on timers, so their chunks and order vary between runs;
    a carriage return overwrites its line as a terminal would (progress bars keep their last state).
    """
    merged, run = [], {}
    for out in outputs + [None]:
        if out is not None and out.output_type == "stream":
            run[out.name] = run.get(out.name, "") + out.text
            continue
        for name in ("stdout", "stderr"):
            if name in run:
                text = re.sub(r"[^\n]*\r(?=[^\n])", "", run[name])
                merged.append(nbformat.v4.new_output("stream", name=name, text=text))
        run = {}
        if out is not None:
            merged.append(out)
    return merged


def renumber_widgets(nb):
    """Replace the kernel's random widget model ids by counters, in order of first appearance."""
    ids = [out.data[WIDGET_VIEW]["model_id"] for cell in nb.cells for out in cell.get("outputs", [])
           if WIDGET_VIEW in out.get("data", {})]
    ids += list(nb.metadata.get("widgets", {}).get(WIDGET_STATE, {}).get("state", {}))
    text = json.dumps(nb)
    for number, model_id in enumerate(dict.fromkeys(ids)):
        text = text.replace(model_id, f"{number:032x}")
    return nbformat.from_dict(json.loads(text))


def sanitize(text):
    """Blank what legitimately changes between runs: memory addresses and progress-bar timing."""
    text = re.sub(r"0x[0-9a-fA-F]{6,}", "0x…", text)
    return re.sub(r"\[\d\d:\d\d[^\]\n]*\]", "[time]", text)  # tqdm's [00:02<00:00, 412.3it/s]


# A printed number: an optional sign, digits with an optional fraction, an optional exponent.
NUMBER = re.compile(r"(?<![\w.])[-−]?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?(?:[eE][-+]?\d+)?(?![\w])")


def tolerance(cell):
    """The tolerance a code cell declares for its printed numbers, or None.

    Declared in the cell's metadata as ``"course": {"tolerance": {"abs": 0.02, "why": "..."}}``;
    a declaration without a reason is refused (ValueError): every tolerance is justified.
    """
    declared = cell.metadata.get("course", {}).get("tolerance")
    if declared is None:
        return None
    if not isinstance(declared.get("abs"), (int, float)) or not str(declared.get("why", "")).strip():
        raise ValueError(f"a tolerance needs a number 'abs' and a reason 'why', but the cell declares {declared}")
    return declared


def summary(out):
    """What must be identical between the committed output and a re-run: (kind, texts by part).

    Texts are compared as a skeleton (every number replaced by #) plus the list of numbers."""
    if out.output_type == "stream":
        return ("stream", out.name), {"text": sanitize(out.text)}
    if out.output_type == "error":
        return ("error", out.ename), {"evalue": sanitize(out.evalue)}
    texts = {mime: sanitize(value) for mime, value in out.data.items() if mime in COMPARED_TEXT}
    # image bytes and widget ids: present or not, never compared
    return (out.output_type, tuple(sorted(out.data))), texts


def as_float(token):
    return float(token.replace("−", "-").replace(",", ""))


def number_differences(was, now, allowed):
    """Sentences for each number of ``now`` that differs from ``was`` (texts of the same skeleton)."""
    found = []
    for a, b, where in zip(NUMBER.findall(was), NUMBER.findall(now), NUMBER.finditer(was)):
        if a == b:
            continue
        delta = abs(as_float(a) - as_float(b))
        if allowed is not None and delta <= allowed["abs"]:
            continue
        context = was[max(0, where.start() - 40):where.end() + 20].replace("\n", " ⏎ ")
        found.append(f"    {a} (committed) is {b} in the re-run: moved by {delta:.3g}, in “…{context}…”\n"
                     f"      {explain(a, b, delta, allowed)}")
    return found


def explain(a, b, delta, allowed):
    """Whether another CPU path can explain the move of a printed number from a to b."""
    if allowed is not None:
        return (f"beyond this cell's declared tolerance of {allowed['abs']:g} ({allowed['why']}): "
                "a real change, or the tolerance is too tight")
    scale = max(abs(as_float(a)), abs(as_float(b)), 1e-30)
    if delta / scale < 1e-4:
        return ("a move in the last printed digits: float rounding differs between CPU paths "
                f"(this run: {cpu_path()}); print fewer digits, or a bound, where float32 cannot hold them")
    return ("too large for float rounding alone: the computation changed, or depends chaotically on "
            "rounding (redesign the claim, or declare and justify a tolerance on this cell)")


def cpu_path():
    """The kernels this process's torch and NumPy pick (what a forced path changes)."""
    parts = [f"ATEN_CPU_CAPABILITY={os.environ.get('ATEN_CPU_CAPABILITY', 'native')}"]
    for name in ("NPY_DISABLE_CPU_FEATURES", "OPENBLAS_CORETYPE"):
        if os.environ.get(name):
            parts.append(f"{name}={os.environ[name]}")
    return ", ".join(parts)


def output_differences(was, now, allowed):
    """Sentences describing how the outputs ``now`` of a cell differ from ``was`` (each a summary)."""
    if [kind for kind, _ in was] != [kind for kind, _ in now]:
        return [f"    committed outputs {[k for k, _ in was]}, re-run outputs {[k for k, _ in now]}"]
    found = []
    for (kind, texts_was), (_, texts_now) in zip(was, now):
        for part in texts_was.keys() | texts_now.keys():
            a, b = texts_was.get(part, ""), texts_now.get(part, "")
            if a == b:
                continue
            if NUMBER.sub("#", a) != NUMBER.sub("#", b):
                found.append(f"    the {part} text differs beyond its numbers:\n"
                             f"      committed: {a[:300]!r}\n      re-run:    {b[:300]!r}")
            else:
                found += number_differences(a, b, allowed)
    return found


def differences(committed, executed):
    """Describe, cell by cell, where the executed notebook's outputs differ from the committed ones.

    Text, integers written as text, shapes and token sequences must be identical; a number may
    move only within a tolerance its cell declares (see ``tolerance``)."""
    code = lambda nb: [cell for cell in nb.cells if cell.cell_type == "code"]
    old, new = code(committed), code(executed)
    if len(old) != len(new):
        return [f"{len(old)} code cells committed, {len(new)} executed"]
    found = []
    for number, (a, b) in enumerate(zip(old, new), 1):
        was = [summary(o) for o in merge_streams(a.outputs)]
        now = [summary(o) for o in merge_streams(b.outputs)]
        problems = output_differences(was, now, tolerance(a))
        if problems:
            first = a.source.splitlines()[0][:60] if a.source else ""
            found.append(f"code cell {number} ({first!r}):\n" + "\n".join(problems))
    return found


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("notebooks", nargs="*", help="chapters in instructor/ (default: every one)")
    parser.add_argument("--check", action="store_true", help="compare with the committed outputs, write nothing")
    args = parser.parse_args(argv)
    paths, refused = chapter_paths(args.notebooks)
    if refused:
        print(f"✗ {refused}")
        return 1
    ok = True
    for path in paths:   # (a chapter that fails is said, and the others still run)
        done = run(path, nbformat.read(path, as_version=4), args.check)
        if args.check:
            done &= run(learner_copy(path), nbformat.read(learner_copy(path), as_version=4), True)
        elif done:   # (the learner's copy of a chapter saved)
            done = run(learner_copy(path), learner_version(nbformat.read(path, as_version=4)), False)
        ok &= done
    return 0 if ok else 1


def chapter_paths(names):
    """(paths, None) of the chapters named (every one when none is), or (None, the sentence refusing them):
    each name must be an existing .ipynb file right in instructor/, as written (Path drops a trailing '/', so
    "instructor/00_tour.ipynb/" was run; a missing chapter ended in a FileNotFoundError traceback)."""
    if not names:
        return all_notebooks(), None
    expected = "expected chapters in instructor/ (.ipynb files; the learner's copies in notebooks/ are made from them)"
    outside = [name for name in names if Path(name).resolve().parent != INSTRUCTOR]
    if outside:
        return None, f"{expected}, but got {', '.join(map(ascii, outside))}"
    odd = [name for name in names if name.endswith(("/", os.sep)) or Path(name).suffix != ".ipynb"]
    if odd:
        return None, f"{expected}, but {', '.join(map(ascii, odd))} {'is' if len(odd) == 1 else 'are'} not named as one"
    missing = [name for name in names if not Path(name).is_file()]
    if missing:
        return None, f"{expected}, but {', '.join(map(ascii, missing))} {'is not a file' if len(missing) == 1 else 'are not files'} there"
    return [Path(name).resolve() for name in names], None


def run(path, nb, check):
    """Execute `nb` as if it lay at `path`; compare with the file there (check) or save it there. A cell that
    raises (its error shown), runs past CELL_TIMEOUT or kills the kernel (one line each) gives False, and the
    chapters after it still run (``main``)."""
    client, started, shown = make_client(path, nb), [], Path(path).relative_to(ROOT)
    # (the cell running when it stopped: its execution count in the file is the committed one)
    client.on_cell_start = lambda cell_index, **_: started.append(cell_index)
    try:
        executed = execute(path, client)
    except CellExecutionError as error:
        print(f"✗ {path}: error while executing\n{error}")
        return False
    except (CellTimeoutError, DeadKernelError) as error:
        code = [i for i, cell in enumerate(nb.cells) if cell.cell_type == "code"]
        at = f"code cell {code.index(started[-1]) + 1}" if started and started[-1] in code else "a cell"
        timed_out = isinstance(error, CellTimeoutError)
        print(f"✗ {shown}: {at} ran longer than {CELL_TIMEOUT} s and was stopped" if timed_out else
              f"✗ {shown}: the kernel died in {at} (out of memory, or a crash)")
        return False
    if check:
        diffs = differences(nbformat.read(path, as_version=4), executed)
        print(f"✗ {shown}: outputs differ\n" + "\n".join(diffs) if diffs else f"✓ {shown}: outputs match")
        return not diffs
    nbformat.write(executed, path)
    print(f"✓ {shown}: executed and saved")
    return True


if __name__ == "__main__":
    sys.exit(main())
