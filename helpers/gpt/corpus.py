"""Tiny Shakespeare, the capstone's real text (chapter 12): the shipped copy, the split and characters.

* ``load_text()``: the text of ``data/shakespeare/tinyshakespeare.txt``, its sha256 checked.
* ``split(text)``: the first 90 % for training, the last 10 % for validation (as nanoGPT splits it,
  so our losses compare with theirs).
* ``CharTokenizer``: one token per character; the vocabulary is the 65 sorted characters of the
  whole text.
* ``windows(ids, batch, context, generator)``: random training windows and their next tokens.
"""
import hashlib

import numpy as np
import torch

from ..errors import check_bytes, count, check_positive_int, check_text, fail
from ..files import read_bytes
from ..weights import data_dir
from .tokenize import MAX_CHARS, check_token_ids

SHA256 = "86c4e6aa9db7c042ec79f339dcb96d42b0075e16b8fc2e86bf0ca57e2dc565ed"
CHARACTERS = 1_115_394    # the length of the text, in characters
TRAIN_SHARE = 0.9


def text_path():
    """Where the shipped copy lives: data/shakespeare/tinyshakespeare.txt."""
    return data_dir() / "shakespeare" / "tinyshakespeare.txt"


MAX_TEXT_BYTES = 8 * 2**20   # what load_text reads at most (Tiny Shakespeare has 1,115,394 bytes)


def load_text(path=None):
    """The whole of Tiny Shakespeare as one string (1,115,394 characters), from the shipped copy
    (or ``path``), after checking that its bytes are the file the course was built on (sha256)."""
    path = text_path() if path is None else path
    data = read_bytes(path, "the Tiny Shakespeare text", MAX_TEXT_BYTES)
    digest = hashlib.sha256(data).hexdigest()
    if digest != SHA256:
        fail(f"expected Tiny Shakespeare with sha256 {SHA256[:12]} (and 52 more hex digits), but {path} has "
             f"sha256 {digest[:12]} ({len(data):,} bytes): it is another file or a damaged copy")
    return data.decode("utf-8")


def split(text):
    """(training text, validation text): the first 90 % of ``text`` and the last 10 %."""
    if not isinstance(text, str):
        fail(f"split expected the text as a string, but got {type(text).__name__}")
    if len(text) < 2:
        fail(f"split expected a text of at least 2 characters, but got {len(text)}")
    cut = int(TRAIN_SHARE * len(text))
    return text[:cut], text[cut:]


class CharTokenizer:
    """One token per character. ``vocab``: the sorted distinct characters of ``text`` (index = id;
    no text: the whole of Tiny Shakespeare);
    ``ids``: character -> id. ``encode(text)`` -> LongTensor (T,); ``decode(ids)`` -> one string per
    token; ``text(ids)`` -> the string itself. For Tiny Shakespeare the vocabulary has 65 characters:
    newline, space, punctuation, digits... in code-point order.
    """

    def __init__(self, text=None):
        text = load_text() if text is None else text
        if not isinstance(text, str) or not text:
            fail(f"a character tokenizer's text should be a non-empty string (its vocabulary is the text's "
                 f"characters), but got {'an empty string' if isinstance(text, str) else type(text).__name__}")
        check_text(text, "the tokenizer's text", empty=True)   # a lone surrogate is no character
        self.vocab = sorted(set(text))
        self.ids = {ch: i for i, ch in enumerate(self.vocab)}
        self.table = np.full(ord(self.vocab[-1]) + 1, -1, dtype=np.int64)   # code point -> id (-1: none)
        self.table[[ord(ch) for ch in self.vocab]] = np.arange(len(self.vocab))

    def __len__(self):
        return len(self.vocab)

    def __repr__(self):
        return f"CharTokenizer({len(self)} characters)"

    def encode(self, text):
        """The ids of the characters of ``text`` (at most MAX_CHARS of them): a LongTensor (T,)."""
        if not isinstance(text, str):
            fail(f"the text to encode should be a string, but got {type(text).__name__}")
        if len(text) > MAX_CHARS:
            fail(f"the text to encode should be at most {MAX_CHARS:,} characters, but got {len(text):,}")
        unknown = sorted(set(text) - self.ids.keys())
        if unknown:
            fail(f"the text should use only this tokenizer's {len(self)} characters, but it holds {len(unknown)} others: "
                 f"{''.join(unknown)[:20]!r}")
        points = np.frombuffer(text.encode("utf-32-le"), dtype=np.uint32)   # every character known: in the table
        return torch.from_numpy(self.table[points])

    def decode(self, ids):
        """One string per id (each a single character)."""
        ids = self._check(ids)
        return [self.vocab[i] for i in ids]

    def text(self, ids):
        """The characters of ``ids`` joined into one string."""
        return "".join(self.decode(ids))

    def _check(self, ids):
        return check_token_ids(ids, len(self))


def windows(ids, batch, context, generator):
    """``batch`` random windows of the token ids: x (batch, context) and y (batch, context), y the
    next token after each of x's (x shifted by one). Starts are drawn uniformly with ``generator``
    (a seeded torch.Generator), so the same generator state gives the same windows."""
    ids = check_ids(ids)
    batch, context = check_positive_int(batch, "batch"), check_positive_int(context, "context")
    if context >= len(ids):
        fail(f"the text should be at least {count(context + 1)} tokens long for context={count(context)} (one window and "
             f"its next token), but this one has {len(ids)}")
    if not isinstance(generator, torch.Generator):
        fail(f"generator should be a seeded torch.Generator, but got {type(generator).__name__}")
    check_bytes(24 * batch * (context + 1), f"{count(batch)} windows of {count(context)} tokens", "use a smaller batch")
    starts = torch.randint(len(ids) - context, (batch,), generator=generator)
    rows = starts[:, None] + torch.arange(context + 1)
    chunk = ids[rows]
    return chunk[:, :-1], chunk[:, 1:]


def check_ids(ids, name="the token ids"):
    """A non-empty (T,) LongTensor of at most MAX_CHARS token ids (>= 0)."""
    if not isinstance(ids, torch.Tensor) or ids.dim() != 1 or ids.is_floating_point() or ids.is_complex() \
            or ids.dtype == torch.bool:
        what = f"a tensor of dtype {ids.dtype} and shape {tuple(ids.shape)}" if isinstance(ids, torch.Tensor) \
            else type(ids).__name__
        fail(f"{name} should be a (T,) tensor of whole numbers (tokenizer.encode(text)), but got {what}")
    if len(ids) == 0:
        fail(f"{name} should hold the ids of a non-empty text, but got none")
    if len(ids) > MAX_CHARS:
        fail(f"{name} should hold at most {MAX_CHARS:,} ids (twice Tiny Shakespeare), but got {len(ids):,}")
    if int(ids.min()) < 0:
        fail(f"{name} should be >= 0, but include {int(ids.min())}")
    return ids.long()
