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
    workers get them in, and the order of a run on one worker. The tests of STAND_INS get the
    fixture ``courses_own_allowed``."""
    items.sort(key=lambda item: -expected_seconds(group(item.nodeid)))
    for item in items:
        if item.nodeid.split("[")[0] in STAND_INS and hasattr(item, "fixturenames"):
            item.fixturenames.append("courses_own_allowed")


# Tests whose stand-in for a learner's right answer is the course's own piece, called from a function of
# the test's (``lambda *a: sampling.generate(*a)``) or subclassed: they test what a check says of other
# things (a slip, a dtype, a model left as it was). A learner's such answer is refused by the rule these
# tests are let past (exercises._no_courses_own), which tests/test_round_17_courses_own.py tests.
STAND_INS = {f"tests/{name}" for name in """
test_gpt.py::test_the_merge_check_passes_the_right_step_and_says_not_answered
test_round_14_sampling.py::test_the_right_loops_still_pass_live_and_from_their_record
test_round_14_fence.py::test_a_model_a_learners_class_reaches_by_name_is_put_back
test_gpt.py::test_the_gpt_check_passes_the_course_gpt_and_says_not_answered
test_gpt.py::test_the_loop_check_passes_the_course_loop_and_says_not_answered
test_gpt.py::test_the_merge_check_names_a_string_replace_merge_inside_a_longer_symbol
test_gpt.py::test_the_gpt_check_leaves_the_cat_model_as_it_was_whatever_the_class_does
test_sampling.py::test_a_right_generate_that_calls_the_course_generate_passes
test_heads.py::test_the_right_module_passes_and_the_course_module_too
test_normalization.py::test_layer_norm_module_check_passes_right_classes_and_waits_for_the_skeleton
test_normalization.py::test_block_module_check_passes_right_classes_and_waits_for_the_skeleton
test_qkv.py::test_checks_pass_right_and_explain_wrong
test_qkv.py::test_checks_accept_torch_tensors
test_mlp.py::test_mlp_module_check_passes_right_classes_and_waits_for_the_skeleton
test_scaling.py::test_layer_scores_passes_the_right_piece_and_keeps_it_for_chapter_03
test_masking.py::test_the_causal_attention_check_passes_the_right_piece_and_waits_for_the_skeleton
test_positions.py::test_sinusoidal_positions_check_passes_the_right_piece_and_names_each_slip
test_positions.py::test_rotate_check_passes_the_right_piece_and_names_each_slip
test_round_15_grading.py::test_a_merge_step_with_numpy_strings_is_right_in_the_judge_as_it_is_live
test_round_10.py::test_round_10_a_model_handed_to_a_check_is_left_as_it_was
test_round_14_sampling.py::test_what_the_wrapper_returns_is_the_wrapper_never_the_real_model
test_round_16_mlp_norm.py::test_round_16_module_checks_pass_a_right_answer_for_a_half_precision_model
test_round_14_fence.py::test_a_partial_of_the_learners_own_function_is_judged_and_not_kept_with_a_sentence
test_checks_round_9.py::test_round_9_multi_head_names_an_output_of_true_and_false
test_checks_round_9.py::test_round_9_generate_loop_names_true_and_false_and_ids_outside_the_vocabulary
test_round_14_checks.py::test_a_wider_dtype_still_passes
test_round_13_positions_heads.py::test_a_right_rotate_passes_on_an_induction_model_changed_by_an_earlier_cell
test_round_11_checks.py::test_round_11_a_top_p_that_puts_dropped_tokens_below_0_is_not_a_distribution
test_round_11_checks.py::test_round_11_every_resource_limit_a_learners_function_sets_is_put_back
test_round_11_checks.py::test_round_11_faulthandlers_watchdog_a_learners_function_arms_is_cancelled
test_round_11_checks.py::test_round_11_the_collector_and_threads_stack_size_are_put_back
test_round_11_checks.py::test_round_11_the_root_logger_and_torchs_warn_always_are_put_back
test_round_11_checks.py::test_round_11_tqdm_and_ipywidgets_replaced_by_a_learners_function_are_put_back
test_round_11_checks.py::test_round_11_the_judge_sees_an_input_changed_in_place_as_the_live_check_does
test_round_11_checks.py::test_round_11_a_record_whose_changed_inputs_are_not_places_is_refused
test_round_13_readouts.py::test_the_patch_grid_check_calls_the_metric_only_inside_a_bounded_call
test_round_14_sampling.py::test_a_record_whose_counts_are_not_counts_is_refused
""".split()}


@pytest.fixture
def late(monkeypatch):
    """The live run's LATE_SECONDS set to learner_loops.LATE for one test (rounds 25 and 26 use it for all theirs)."""
    from learner_loops import LATE
    from helpers.gpt import compute
    monkeypatch.setattr(compute, "LATE_SECONDS", LATE)


@pytest.fixture
def courses_own_allowed(monkeypatch):
    """The rule that refuses the course's own piece as an answer, let past (STAND_INS only)."""
    from helpers import exercises
    monkeypatch.setattr(exercises, "_no_courses_own", lambda watch: None)


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
