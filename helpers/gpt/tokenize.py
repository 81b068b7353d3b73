"""Tokenizing Tiny Shakespeare for real (chapter 12, section 2): characters, then byte-level BPE.

* ``pretokenize(text)``: the words a byte-level BPE works inside (GPT-2's split; a space belongs to
  the word after it and is written ``Ġ``, a newline ``Ċ``), each a list of one-character symbols.
* ``merge_step(words)``: one BPE merge by hand, the course's own (the exercise's reference): count
  the adjacent pairs inside the words, merge the most frequent everywhere (a tie: the smallest pair
  in Python's order, the library's choice on single characters but not always on merged symbols).
* ``train_bpe(text, vocab_size)``: Hugging Face ``tokenizers``' byte-level BPE trained on ``text``
  (offline, in memory); ``merges(bpe)``; ``shorter(bpe, vocab_size)``: the same run stopped earlier
  (BPE's merges are learned one after another, so a smaller vocabulary is a prefix of a larger one).
* ``size_table(bpe, sizes, train_text, val_text)``: characters per token on the validation text and
  how many tokens the training text uses rarely, for each vocabulary size.
* ``pieces(bpe, text)`` and ``smollm2_pieces(text)``: how a text splits, ours beside SmolLM2's.
* ``BPETokenizer(bpe)``: a trained BPE with a CharTokenizer's methods (``vocab``, ``encode``,
  ``decode``, ``text``), so that a model of BPE tokens samples and traces as a character model does.
"""
import collections
import functools
import json
import re

from ..errors import check_ids_given, check_positive_int, check_text as check_string, count, fail, items_of, length, \
    shown

BYTES = 256            # a byte-level BPE starts from every byte value, so any text can be written
MAX_VOCAB = 65_536     # larger than any vocabulary worth training on one megabyte of text
RARE = 20              # a token the training text uses fewer times than this barely gets trained
MAX_CHARS = 2_000_000  # the longest text tokenized here in one call (the training text has about 1,000,000)


def check_text(text, name="the text"):
    """A non-empty string of at most MAX_CHARS characters that UTF-8 can write (no lone surrogate)."""
    check_string(text, name, empty=True, max_chars=MAX_CHARS)
    if not text:
        fail(f"{name} should hold at least one character to tokenize, but it is empty")
    return text


def check_token_ids(ids, vocab_size):
    """ids to decode (a list or a (T,) tensor of at most MAX_CHARS whole numbers, each in [0,
    vocab_size)) as a list of ints, else one sentence; the check of both tokenizers' decode."""
    import torch

    check_ids_given(ids, "the token ids", MAX_CHARS)
    if isinstance(ids, (list, tuple)) and not ids:
        return []
    try:
        ids = torch.as_tensor(ids)
    except Exception:   # noqa: BLE001 (a learner's entry may raise anything when read: its __index__, __len__)
        fail(f"expected token ids as a list or tensor of whole numbers (each from 0 to {vocab_size - 1}), "
             f"but got a {type(ids).__name__} that is not one")
    if ids.is_floating_point() or ids.is_complex() or ids.dtype == torch.bool or ids.dim() != 1 \
            or ids.layout != torch.strided or ids.device.type != "cpu":
        fail(f"expected token ids as a (T,) tensor of whole numbers, but got dtype {ids.dtype} "
             f"and shape {tuple(ids.shape)}" + ("" if ids.layout == torch.strided and ids.device.type == "cpu"
                                                else f" ({ids.layout}, on {ids.device.type})"))
    if len(ids) > MAX_CHARS:
        fail(f"expected at most {MAX_CHARS:,} token ids, but got {len(ids):,}")
    ids = ids.tolist()
    bad = [i for i in ids if not 0 <= i < vocab_size]
    if bad:
        fail(f"ids should lie in [0, {vocab_size}) for this vocabulary of {vocab_size} tokens, but got {bad[0]}")
    return ids


def pretokenize(text):
    """The words of ``text`` as byte-level BPE sees them: a list of lists of one-character symbols.

    GPT-2's split (Hugging Face's ByteLevel pre-tokenizer): letters, digits, punctuation and
    spaces make separate words, a space goes with the word after it; every byte is written as
    one printable character (a space as ``Ġ``, a newline as ``Ċ``). Merges never cross a word."""
    from tokenizers import pre_tokenizers

    check_text(text)
    split = pre_tokenizers.ByteLevel(add_prefix_space=False).pre_tokenize_str(text)
    return [list(word) for word, _ in split]


def pair_counts(words):
    """{(a, b): how often symbol a stands just before symbol b inside a word}, over all words."""
    check_words(words)
    counts = collections.Counter()
    for word in words:
        for a, b in zip(word, word[1:]):
            counts[a, b] += 1
    return counts


def check_words(words):
    """A list of words, each a list of symbols (strings), as ``pretokenize`` gives."""
    ok = lambda w: isinstance(w, list) and all(type(a) is str for a in w)
    bad = words if not isinstance(words, list) else next((w for w in words if not ok(w)), ok)
    if bad is not ok:
        fail(f"expected words as a list of lists of symbols (strings), as pretokenize gives, but got "
             f"{type(words).__name__} {shown(words)}" + ("" if bad is words else f" holding {shown(bad)}"))
    return words


def merge_step(words):
    """One BPE merge: (the pair merged, the words after merging it).

    words: a list of words, each a list of symbols (strings), in the order of the text. Count every
    pair of neighbouring symbols inside each word (in "a a a" the pair (a, a) stands twice); take
    the most frequent, on a tie the smallest pair in Python's order (``min``); then replace, in
    every word, each occurrence of that pair, read left to right, by one symbol a + b.

    Ties and the library: the ``tokenizers`` trainer breaks a tie by token id, the smallest (id of
    a, id of b), where the 256 byte symbols come first in the order of their characters and each
    merged symbol gets the next id as it is made. Between pairs of single characters (the first
    merge, and every tie in the check's small cases) the two orders agree; once a merged
    symbol ties with another pair they may not ('bc' sorts before 'Ġz' in Python's order, but a
    'Ġz' made earlier has the smaller id), and the words alone do not say in which order merged
    symbols were made: so ``merge_step`` repeated can part from ``train_bpe`` at such a tie.
    """
    counts = pair_counts(words)
    if not counts:
        fail("expected words with a pair of neighbouring symbols to merge, but no word has two symbols left")
    best = max(counts.values())
    pair = min(p for p, n in counts.items() if n == best)
    merged = []
    for word in words:
        out, i = [], 0
        while i < len(word):
            if i + 1 < len(word) and (word[i], word[i + 1]) == pair:
                out.append(word[i] + word[i + 1])
                i += 2
            else:
                out.append(word[i])
                i += 1
        merged.append(out)
    return pair, merged


def check_vocab_size(vocab_size):
    """A vocabulary size a byte-level BPE can have: the 256 bytes, and at most MAX_VOCAB."""
    vocab_size = check_positive_int(vocab_size, "vocab_size")
    if not BYTES <= vocab_size <= MAX_VOCAB:
        fail(f"vocab_size should be from {BYTES} (the bytes a byte-level BPE starts from) to {MAX_VOCAB:,}, "
             f"but got {count(vocab_size)}")
    return vocab_size


# The library's BPE training costs time in proportion to the square of each word's length in bytes
# (merging a pair inside a word shifts the rest of the word): about 7e-10 s of CPU per byte squared
# here, so one word of 100,000 bytes (a text without spaces) takes about 7 s, and 300,000 more than a
# minute. MAX_WORD_WORK keeps the worst text train_bpe accepts to about 10 s of CPU on this machine
# (about 25 s when the machine is busy), with room for a slower one. Ordinary text is far below it:
# Tiny Shakespeare's 1,000,000 characters make about 100,000,000 (short words counted as 4 bytes a character).
MAX_WORD_WORK = 10**10
# where no word of GPT-2's split can cross: before a space, tab or newline that follows a character
# that is not a space (a word holds spaces only as its first character or in a run of spaces); the
# pieces between are each one word or more, so their squared lengths bound the words'
SPLIT = re.compile(r"\S(?=[\t-\r ])")


def word_work(text):
    """An upper bound on train_bpe's work on ``text``: the sum, over the pieces between the places
    no word can cross (SPLIT), of the piece's length in bytes squared; and the longest piece's length."""
    work, longest, start = 0, 0, 0
    for end in (*(m.end() for m in SPLIT.finditer(text)), len(text)):
        n = 4 * (end - start) if end - start <= 16 else len(text[start:end].encode("utf-8"))
        work, longest, start = work + n * n, max(longest, n), end
    return work, longest


def check_word_work(text):
    """Refuse up front a training text whose words are too long to train on in about a minute."""
    work, longest = word_work(text)
    if work > MAX_WORD_WORK:
        fail(f"the training text's words should be short enough to train on in about a minute (the sum of "
             f"their lengths in bytes squared at most {MAX_WORD_WORK:,}, as in one word of "
             f"{int(MAX_WORD_WORK ** 0.5):,} bytes), but got {work:,} (its longest word, or run of words with no "
             f"space or newline between them, has {longest:,} bytes): put spaces or newlines in it")


def train_bpe(text, vocab_size):
    """A byte-level BPE (Hugging Face ``tokenizers``) trained on ``text`` up to ``vocab_size`` tokens:
    the 256 bytes, then vocab_size - 256 merges, learned in memory (nothing is read or written).
    A text whose words are too long to train on in about a minute is refused up front (``word_work``
    above MAX_WORD_WORK: one word of 100,000 bytes, a text without spaces, is the most)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    check_text(text, "the training text")
    check_vocab_size(vocab_size)
    check_word_work(text)
    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)
    bpe.train_from_iterator([text], trainer=trainer)
    return bpe


def check_bpe(bpe):
    """A trained BPE (a Hugging Face Tokenizer with a BPE model, as train_bpe returns it); return it."""
    from tokenizers import Tokenizer, models

    if isinstance(bpe, BPETokenizer):   # a model's tokenizer (shipped.load_tokenizer()): the BPE inside it
        bpe = bpe.bpe
    if not isinstance(bpe, Tokenizer) or not isinstance(bpe.model, models.BPE):
        fail(f"bpe should be a trained BPE tokenizer (train_bpe's), but got {shown(bpe)}")
    return bpe


MAX_SIZES = 16   # the most vocabulary sizes size_table compares (each tokenizes every distinct word once)


def check_sizes(sizes):
    """A list of 1 to MAX_SIZES vocabulary sizes (``check_vocab_size`` each); return them as ints."""
    if not isinstance(sizes, (list, tuple, range)) or not 1 <= length(sizes) <= MAX_SIZES:
        fail(f"sizes should be a list of 1 to {MAX_SIZES} vocabulary sizes, such as (256, 1024), but got {shown(sizes)}")
    sizes = sizes if isinstance(sizes, range) else items_of(sizes)   # (a subclass's __len__ or __iter__ may raise)
    return [check_vocab_size(size) for size in sizes]


def _parts(bpe):
    """(tokens in id order, merges as pairs) of a trained BPE."""
    model = json.loads(check_bpe(bpe).to_str())["model"]
    return sorted(model["vocab"], key=model["vocab"].get), [tuple(m) for m in model["merges"]]


class BPETokenizer:
    """A trained byte-level BPE used as a model's tokenizer, with a CharTokenizer's methods:
    ``vocab`` (each token's text, in id order), ``encode(text)`` -> LongTensor (T,), ``decode(ids)``
    -> one string per token, ``text(ids)`` -> the string itself (the bytes of the tokens, decoded)."""

    def __init__(self, bpe):
        self.bpe = bpe = check_bpe(bpe)
        self.vocab = [bpe.decode([i]) for i in range(bpe.get_vocab_size())]

    def __len__(self):
        return len(self.vocab)

    def __repr__(self):
        return f"BPETokenizer({len(self):,} tokens)"

    def encode(self, text):
        """The token ids of ``text``: a LongTensor (T,)."""
        import torch

        return torch.tensor(self.bpe.encode(check_text(text)).ids, dtype=torch.long)

    def _ids(self, given):
        return check_token_ids(given, len(self.vocab))

    def decode(self, ids):
        """One string per token id (a token that holds part of a character's bytes shows as �)."""
        return [self.vocab[i] for i in self._ids(ids)]

    def text(self, ids):
        """The text the ids stand for, the tokens' bytes joined before decoding."""
        return self.bpe.decode(self._ids(ids))


def merges(bpe):
    """The merges of ``bpe`` in the order they were learned, each a pair of strings."""
    return _parts(bpe)[1]


def shorter(bpe, vocab_size):
    """The BPE of the same run stopped at ``vocab_size`` tokens: the bytes and its first merges."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers

    vocab_size = check_vocab_size(vocab_size)
    tokens, pairs = _parts(bpe)
    if vocab_size > len(tokens):
        fail(f"vocab_size should be at most the {len(tokens):,} tokens this BPE was trained to (train a larger one), "
             f"but got {count(vocab_size)}")
    small = Tokenizer(models.BPE({t: i for i, t in enumerate(tokens[:vocab_size])}, pairs[:vocab_size - BYTES]))
    small.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    small.decoder = decoders.ByteLevel()
    return small


# GPT-2's split, written for Python's re (a letter is [^\W\d_]); tests/test_gpt.py checks that it
# splits Tiny Shakespeare exactly as the library's pre-tokenizer does, in a fraction of its time
WORD = re.compile(r"'s|'t|'re|'ve|'m|'ll|'d| ?[^\W\d_]+| ?\d+| ?(?:[^\s\w]|_)+|\s+(?!\S)|\s+")


def word_counts(text):
    """collections.Counter {word of ``text`` as GPT-2's split cuts it (plain text): how often}."""
    check_text(text)
    return collections.Counter(WORD.findall(text))


@functools.lru_cache(maxsize=1)
def byte_table():
    """GPT-2's table {byte value: the printable character byte-level BPE writes it as}: the printable
    bytes stand for themselves, the others (a space, a newline, ...) take the characters from 256 on,
    in order (so a space is ``Ġ``, a newline ``Ċ``)."""
    table = {b: chr(b) for b in (*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1),
                                  *range(ord("®"), ord("ÿ") + 1))}
    for extra, b in enumerate(b for b in range(256) if b not in table):
        table[b] = chr(256 + extra)
    return table


def word_ids(bpe, words):
    """[the token ids of each word] for words of GPT-2's split (plain text): the BPE model applied to
    each word's bytes written as byte-level BPE writes them, as ``bpe.encode`` does after splitting."""
    table, model = byte_table(), bpe.model
    return [[t.id for t in model.tokenize("".join(table[b] for b in word.encode("utf-8")))] for word in words]


def size_table(bpe, sizes, train_text, val_text):
    """One row per vocabulary size: dict(size, merges (size - 256), chars_per_token on ``val_text``,
    rare: how many of the size's tokens ``train_text`` uses fewer than RARE times). BPE works inside
    words, so each distinct word of the two texts is tokenized once per size, and counted as often
    as it occurs."""
    import numpy as np

    bpe = check_bpe(bpe)
    sizes = check_sizes(sizes)
    train_words, val_words = word_counts(train_text), word_counts(val_text)
    words = list(dict.fromkeys([*train_words, *val_words]))
    in_train = np.array([train_words[w] for w in words])
    in_val = np.array([val_words[w] for w in words])
    rows = []
    for size in sizes:
        encoded = word_ids(shorter(bpe, size), words)
        lengths = np.array([len(e) for e in encoded])
        ids = np.fromiter((i for e in encoded for i in e), dtype=np.int64, count=int(lengths.sum()))
        uses = np.bincount(ids, weights=np.repeat(in_train, lengths), minlength=size)
        rows.append(dict(size=size, merges=size - BYTES, chars_per_token=len(val_text) / int((lengths * in_val).sum()),
                         rare=int((uses < RARE).sum())))
    return rows


def pieces(bpe, text):
    """How ``bpe`` splits ``text``: each token as the text it stands for (a space shown as a space)."""
    bpe, text = check_bpe(bpe), check_text(text)
    return [bpe.decode([i]) for i in bpe.encode(text).ids]


def smollm2_pieces(text):
    """How SmolLM2's own tokenizer (49,152 tokens, read from the installed model file, no download)
    splits ``text``."""
    check_text(text)
    tok = smollm2_tokenizer()
    return tok.pieces(tok.encode(text)), len(tok.vocab)


@functools.lru_cache(maxsize=1)
def smollm2_tokenizer():
    """SmolLM2's tokenizer, built once from the installed model file's vocabulary and merges."""
    from ..real import smollm2

    return smollm2.Tokenizer(smollm2.read())


def show_split(name, parts):
    """One line: the name, how many tokens, and the tokens between bars."""
    if not isinstance(name, str) or not isinstance(parts, list) or not all(isinstance(p, str) for p in parts):
        fail(f"show_split should be given a name (a string) and the pieces (a list of strings), but got "
             f"{type(name).__name__} and {type(parts).__name__} {shown(parts)}")
    return f"{name:<22} {len(parts):>2} tokens  |" + "|".join(parts).replace("\n", "⏎") + "|"
