"""Global states a learner's code may change for every later cell, saved and put back: the random
generators of Python, NumPy and torch, and torch's default dtype. The exercise checks keep them
around a learner's call (helpers.exercises), and so does the import of a kept piece (helpers.learner).
And a tensor's state in short (``digest``), by which a check and an explorer tell a changed tensor."""
import random
import sys
import zlib

import numpy as np


def random_states():
    """The random states of ``random``, NumPy and torch (if imported), saved now; returns a function
    that puts them back (a learner's function that seeds them leaves later cells' draws alone)."""
    states = [(random.setstate, random.getstate()), (np.random.set_state, np.random.get_state())]
    torch = sys.modules.get("torch")
    if torch is not None:
        states.append((torch.set_rng_state, torch.get_rng_state()))

    def put_back():
        for put, state in states:
            put(state)
    return put_back


def default_dtype(dtype):
    """torch's default dtype: set it to ``dtype`` (None: float32) and return the one before; None
    and nothing set when torch was never imported (the chapters without it)."""
    torch = sys.modules.get("torch")
    if torch is None:
        return None
    before = torch.get_default_dtype()
    torch.set_default_dtype(dtype or torch.float32)
    return before


def digest(tensor):
    """A tensor's shape, dtype and the CRC-32 of its bytes: equal digests, equal tensors (but for a
    chance of 1 in 4 billion; CRC-32 reads the real model's 538 MB in about half SHA-1's time)."""
    tensor = tensor.detach().cpu()
    if str(tensor.dtype) == "torch.bfloat16":   # (NumPy has no bfloat16: its bits, read as int16)
        tensor = tensor.view(sys.modules["torch"].int16)
    arr = tensor.numpy()
    shape, flipped = arr.shape, not arr.flags.c_contiguous and arr.T.flags.c_contiguous
    arr = arr.T if flipped else np.ascontiguousarray(arr)   # a transposed weight is hashed as it is stored
    return shape, flipped, arr.dtype, zlib.crc32(arr.reshape(-1).view(np.uint8))
