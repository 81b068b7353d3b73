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
