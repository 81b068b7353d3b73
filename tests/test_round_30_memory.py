"""Round 30 (issue 31), reader A, entries 1 and 2: memory counted before it is spent. dot_spread's chunk loop kept
small results between 6 MB chunks, and the heap grew by about 4 MB a chunk (3 GiB at n=10**6, d=768); to_numpy
converted a nested list before counting it (a 0.3 MB list of one shared row took 150 s and 3 GiB to be refused)."""
import os
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest

from helpers.errors import CourseInputError, to_numpy

ROOT = __file__.rsplit("/tests/", 1)[0]


def peak_growth(code):
    """GiB the peak resident memory of a fresh Python grows by while it runs ``code`` (after its imports), with glibc
    taking blocks up to 32 MB from its heap, as it does once a freed large block has raised its threshold (which
    depends on what ran before: a notebook's kernel gets there)."""
    script = textwrap.dedent(f"""
        import sys
        sys.path.insert(0, {ROOT!r})
        import numpy as np, torch
        from helpers import errors
        from helpers.scaling import compute as scaling
        def peak():
            return next(int(line.split()[1]) for line in open("/proc/self/status") if line.startswith("VmHWM"))
        before = peak()
        try:
            {code}
        except errors.CourseInputError:
            pass
        print((peak() - before) / 2**20)
    """)
    env = {**os.environ, "MALLOC_MMAP_THRESHOLD_": str(32 * 2**20)}
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300, env=env)
    assert done.returncode == 0, done.stderr
    return float(done.stdout.split()[-1])


def test_dot_spread_keeps_its_memory_flat_at_d_768():
    grown = peak_growth("scaling.dot_spread(dims=(768,), n=200_000)")   # (it grew by 0.56 GiB)
    assert grown < 0.15, grown


class Liar(list):
    """A list whose __len__ says it holds one entry."""
    def __len__(self):
        return 1


@pytest.mark.parametrize("make", [lambda row: [row] * 15_000, lambda row: (tuple(row),) * 15_000,
                                  lambda row: Liar([Liar(row)] * 15_000), lambda row: [[row] * 150] * 100],
                         ids=["shared rows", "tuples", "a list subclass whose __len__ lies", "three deep"])
def test_to_numpy_counts_a_nested_list_before_converting_it(make):
    x = make([0.5] * 15_000)   # 225,000,000 numbers: 1.7 GiB as float64, from a list of 0.1 MB
    start = time.perf_counter()
    with pytest.raises(CourseInputError, match=r"x \(an array of 225,000,000 numbers\) should need at most 1\.5 GiB"):
        to_numpy(x, "x")
    assert time.perf_counter() - start < 2


def test_to_numpy_counts_a_list_of_arrays_before_copying_them():
    grown = peak_growth("errors.to_numpy([np.zeros(10**6)] * 300, 'x')")   # (2.4 GiB copied, then refused)
    assert grown < 0.2, grown

