"""Shared test set-up: fixed thread counts, a headless plot backend, each notebook executed once a session,
and the groups that keep a notebook's tests (and each other test file) on one worker when the tests
run in parallel (scripts/test.py, with pytest-xdist)."""
import os

# Before numpy or torch load anywhere: one BLAS/OpenMP thread makes results identical run to run.
os.environ.update(OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", MPLBACKEND="Agg")
# A check that passes keeps the learner's piece in my_gpt/ (helpers.learner): in the tests, in a
# folder of the session's own, never in the checkout.
if not os.environ.get("COURSE_MY_GPT"):
    import atexit
    import shutil
    import tempfile
    os.environ["COURSE_MY_GPT"] = tempfile.mkdtemp(prefix="my_gpt-tests-")
    atexit.register(shutil.rmtree, os.environ["COURSE_MY_GPT"], True)

import functools  # noqa: E402
import re  # noqa: E402
from pathlib import Path  # noqa: E402

import pytest  # noqa: E402

import execute_notebooks  # noqa: E402  (scripts/ is on pytest's pythonpath)
from sandboxed import run_like_binder  # noqa: E402


@pytest.fixture(scope="session")
def executed():
    """executed(path) -> the notebook re-run in a fresh kernel; runs each notebook once per session.

    A learner's copy (notebooks/) runs as a learner meets it on Binder, offline and under 2 GiB
    (tests/sandboxed.py), so the one run serves tests/test_notebooks.py and tests/test_offline.py;
    executed.binder(path) -> that run's facts (network attempts, memory, the error if any)."""
    @functools.cache
    def run(path):
        if path.parent == execute_notebooks.LEARNER:
            return run_like_binder(path)
        try:
            return dict(nb=execute_notebooks.execute(path), error=None)
        except Exception as error:  # kept, so every test of this notebook reports it
            return dict(nb=None, error=error)

    def get(path):
        result = run(Path(path))
        if result["error"] is not None:
            pytest.fail(f"{Path(path).name} does not execute:\n{result['error']}", pytrace=False)
        return result["nb"]
    get.binder = lambda path: run(Path(path))
    return get


# ---- running in parallel: a notebook's tests (their parameter is the notebook, "instructor/..." or
# ---- "notebooks/...") form one group, so the worker that executes it once serves all of them; every
# ---- other test file is one group, so its module- and session-scoped fixtures are made once.
# ---- pytest-xdist's own xdist_group marks cannot do it under pytest 9 (it renames the node id
# ---- through an attribute pytest 9 no longer reads), so the grouping is a scheduler of our own.

NOTEBOOK_PARAMETER = re.compile(r"\[((?:instructor|notebooks)/[^\]/]+)\]$")


def group(nodeid):
    """The group of a test: its notebook ("notebooks/02_qkv_by_hand"), else its file."""
    found = NOTEBOOK_PARAMETER.search(nodeid)
    return found.group(1) if found else nodeid.split("::")[0]


try:
    from xdist.scheduler import LoadScopeScheduling
except ImportError:   # pytest-xdist is not installed: the tests run one after another, longest groups first
    LoadScopeScheduling = None

if LoadScopeScheduling is not None:
    class ByGroup(LoadScopeScheduling):
        """pytest-xdist's scheduler by scope, with ``group`` as the scope: whole groups go to a worker
        as it becomes free, in the order of the collection (with --no-loadscope-reorder)."""

        def _split_scope(self, nodeid):
            return group(nodeid)

    def pytest_xdist_make_scheduler(config, log):
        return ByGroup(config, log)


def pytest_collection_modifyitems(items):
    """The groups that take longest first, so the last ones to finish are short: the order the
    workers get them in, and the order of a run on one worker."""
    items.sort(key=lambda item: -expected_seconds(group(item.nodeid)))


# Rough seconds each group took in one run of every test on two cores, the machine shared (pytest
# --durations, summed by group; a notebook group by its folder and chapter number). Only the order
# depends on them; a group not named here is a unit-test file of a few seconds.
SLOW = {"test_real.py": 200, "test_autograde.py": 150, "test_heads.py": 100, "test_recipes.py": 95,
        "notebooks/11": 60, "test_scaling.py": 65, "test_browser.py": 55, "notebooks/09": 45, "test_geometry.py": 45,
        "notebooks/08": 35, "instructor/01": 35, "instructor/11": 31, "test_homework.py": 30, "notebooks/10": 27,
        "notebooks/01": 25, "notebooks/03": 25, "test_positions.py": 25, "notebooks/05": 24, "test_masking.py": 24,
        "notebooks/04": 22, "notebooks/07": 21, "instructor/05": 18, "instructor/00": 18, "notebooks/02": 17,
        "notebooks/06": 17, "test_packaging.py": 16, "instructor/09": 16, "test_training.py": 14, "notebooks/00": 14,
        "instructor/08": 13, "instructor/10": 12, "instructor/06": 12, "instructor/04": 9, "instructor/03": 9,
        "instructor/07": 8, "instructor/02": 8}


def expected_seconds(name):
    folder, _, stem = name.rpartition("/")
    return SLOW.get(f"{folder}/{stem[:2]}" if folder in ("instructor", "notebooks") else Path(name).name, 0)


@pytest.fixture(scope="session")
def pixels():
    """pixels(png_bytes) -> the picture as an (H, W, 3) uint8 array of RGB, decoded by PIL."""
    import io

    import numpy as np
    from PIL import Image

    return lambda picture: np.asarray(Image.open(io.BytesIO(picture)).convert("RGB"))


# ---- the shipped models and worlds, loaded once a session. Never modify them in a test:
# ---- take copy.deepcopy(...) first (a test that zeroes weights would change every later test).

@pytest.fixture(scope="session")
def cat():
    """The shipped cat-world model (data/cat)."""
    from helpers.weights import load_cat
    return load_cat()


@pytest.fixture(scope="session")
def cat_world():
    """The cat world: grammar, tokenizer, sentence types and split."""
    from helpers.worlds import cat_world as make
    return make()


@pytest.fixture(scope="session")
def dragon():
    """The shipped dragon-world model (data/dragon)."""
    from helpers.weights import load_dragon
    return load_dragon()


@pytest.fixture(scope="session")
def dragon_world():
    """The dragon world with its tokenizer (one sentence: the tokenizer is what tests need)."""
    from helpers.worlds import dragon_world as make
    return make(n=1)


@pytest.fixture(scope="session")
def induction():
    """The shipped attention-only induction model (data/induction)."""
    from helpers.weights import load_induction
    return load_induction()


@pytest.fixture(scope="session")
def glove():
    """The shipped GloVe subset as gensim KeyedVectors."""
    from helpers.geometry.compute import load_glove
    return load_glove()


@pytest.fixture
def refused():
    """refused(call, *words): call() raises a CourseInputError of one sentence holding every word."""
    from helpers.errors import CourseInputError

    def check(call, *words):
        with pytest.raises(CourseInputError) as caught:
            call()
        message = str(caught.value)
        assert "\n" not in message and message.count(". ") == 0, message
        for word in words:
            assert word in message, (word, message)
        return message
    return check



@pytest.fixture
def fake_grader(monkeypatch):
    """fake_grader(records, judge): autograde's runs each write ``records`` (lines of JSON) as the
    student's records and ``judge`` judges them; nothing runs a notebook."""
    import autograde

    def use(records, judge):
        def run(nb, folder, grading, **kwargs):
            folder.mkdir(parents=True, exist_ok=True)
            (folder / "records.jsonl").write_text(records)
            return "ran to the end", None
        monkeypatch.setattr(autograde, "run", run)
        monkeypatch.setattr(autograde, "judge", judge)
        monkeypatch.setattr(autograde, "assemble", lambda sub, nb: nb)
        monkeypatch.setattr(autograde.nbformat, "read", lambda *a, **k: None)
    return use
