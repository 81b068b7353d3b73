"""Shared test set-up: fixed thread counts, a headless plot backend, each notebook executed once a session."""
import os

# Before numpy or torch load anywhere: one BLAS/OpenMP thread makes results identical run to run.
os.environ.update(OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", MPLBACKEND="Agg")

import functools  # noqa: E402

import pytest  # noqa: E402

import execute_notebooks  # noqa: E402  (scripts/ is on pytest's pythonpath)


@pytest.fixture(scope="session")
def executed():
    """executed(path) -> the notebook re-run in a fresh kernel; runs each notebook once per session."""
    @functools.cache
    def run(path):
        try:
            return execute_notebooks.execute(path), None
        except Exception as error:  # kept, so every test of this notebook reports it
            return None, error

    def get(path):
        nb, error = run(path)
        if error is not None:
            pytest.fail(f"{path.name} does not execute:\n{error}", pytrace=False)
        return nb
    return get


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
