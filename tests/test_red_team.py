"""Red team: bad input of every class, generated, against the public functions (issue 31, item 7).

``CLASSES`` holds the bad values, by class. ``TABLE`` holds one row per public function and
argument: how to call the function with that argument replaced by a bad value, and what it must
do then (``expect``):

* ``refuses``: raise CourseInputError whose message is one sentence (no line break, not
  longer than MAX_SENTENCE) saying what was expected and what arrived ("expected … but …",
  or "… should … but …"), and leave ``state()`` (when the row has one) as it was;
* any other callable: it is called with (value, result) and asserts what handling the value
  correctly means for that function (e.g. ``grading.encode`` keeps anything as bounded data).

Every generated value is tried on every row, except the values the row's ``valid`` says are
not bad input for that argument (a grade id may be the text 'False'); those are not counted.
To hold another module to the rule, append rows to TABLE:
``Row("module.function(arg)", call, expect, state=..., valid=...)``. The test prints the number
of bad inputs tried per class (``pytest -s`` shows it).
"""
import collections
import json
import logging
import math

import numpy as np
import pytest

from helpers.errors import CourseInputError

MAX_SENTENCE = 400


def nested_list(depth):
    value = [1]
    for _ in range(depth):
        value = [value]
    return value


def nested_dict(depth):
    value = {"kind": "more", "id": 1}
    for _ in range(depth):
        value = {"kind": "want", "state": value}
    return value


CLASSES = {
    "wrong type": [None, object(), b"bytes", 3j, {"a": 1}, print, {1, 2}],
    "out of range": [-1, -(2**63), 2**64, 10**9, -0.5],
    "NaN/inf": [float("nan"), float("inf"), float("-inf"), np.float32("nan"), np.float64("-inf")],
    "wrong shape": [[], [[1, 2], [3]], np.zeros((2, 3, 4)), (1,), [1, 2, 3, 4, 5, 6, 7]],
    "huge": ["x" * 10_000_000, [0.5] * 2_000_000, np.zeros(3_000_000), 10**2000],
    "nested": [nested_list(500), nested_dict(500), nested_list(5000)],
    "bools as ints": [True, False, np.bool_(True)],
    "strings 'False'": ["False", "0", "True", "none"],
    "lone surrogates": ["\ud800", "cat\udfff", ["\ud800", 0]],
}


class Row:
    """One public function and argument: call(value) with the bad value in place; expect;
    state(): a snapshot that a refusal must leave as it was; valid(value): not bad input here;
    raises: the exception a refusal is (the helpers' CourseInputError; the scripts' own)."""

    def __init__(self, name, call, expect="refuses", state=None, valid=None, raises=CourseInputError):
        self.name, self.call, self.expect, self.state, self.valid = name, call, expect, state, valid
        self.raises = raises


def scalar(v):
    """A JSON scalar as a page or a record holds one: None, a bool, an int, a finite float, a text."""
    return v is None or type(v) in (bool, int, str) or type(v) is float and math.isfinite(v)


def one_sentence(message):
    assert "\n" not in message and len(message) <= MAX_SENTENCE, message[:MAX_SENTENCE]
    assert " but " in message and ("expected" in message or "should" in message), message


# ---------------------------------------------------------------- helpers/grading.py

from helpers import grading  # noqa: E402


def encoded_as_bounded_data(value, result):
    """grading.encode keeps any answer as JSON data of bounded size, which decode rebuilds."""
    text = json.dumps(result)
    assert len(text) < 30 * 2**20
    again = grading.decode(json.loads(text))
    if isinstance(result, dict) and "unknown" in result:
        assert isinstance(again, grading.Unknown)


def fingerprinted(value, result):
    assert isinstance(result, str) and len(result) < 10_000


def grading_state():
    return dict(grading.STATE)


GRADING_ROWS = [
    Row("grading.cell(grade_id)", grading.cell, state=grading_state,
        valid=lambda v: isinstance(v, str) and 0 < len(v) <= 200 and v.isprintable()),
    Row("grading.encode(answer)", grading.encode, expect=encoded_as_bounded_data),
    Row("grading.fingerprint(x)", grading.fingerprint, expect=fingerprinted),
    Row("grading.decode(record)", grading.decode, valid=lambda v: scalar(v) and len(str(v)) <= 10**6),
    Row("grading.decode({'array': ...})", lambda v: grading.decode({"array": v, "shape": [2], "kind": "f"})),
    Row("grading.decode({'shape': ...})", lambda v: grading.decode({"array": [1.0, 2.0], "shape": v, "kind": "f"})),
    Row("grading.decode({'kind': ...})", lambda v: grading.decode({"array": [1.0, 2.0], "shape": [2], "kind": v})),
    Row("grading.decode({'float': ...})", lambda v: grading.decode({"float": v})),
    Row("grading.decode({'list': ...})", lambda v: grading.decode({"list": v}),
        valid=lambda v: isinstance(v, list) and len(v) <= 10**6 and all(scalar(x) for x in v)),
    Row("grading.decode({'dict': ...})", lambda v: grading.decode({"dict": v}), valid=lambda v: v == []),
    Row("grading.decode({'torch': ...})", lambda v: grading.decode({"torch": v})),
]


# ---------------------------------------------------------------- helpers/frames.py

pytest.importorskip("ipywidgets")
import ipywidgets as widgets  # noqa: E402

from helpers import frames  # noqa: E402


def controls():
    return {"slope": widgets.FloatSlider(value=1.0, min=0, max=2, step=0.5),
            "word": widgets.Dropdown(options=["a", "b"], value="b")}


def a_sentence(value, result):
    """check_message answers a bad message with one sentence (it returns it; the widget logs it)."""
    assert isinstance(result, str), result
    one_sentence(result)


def first_state(call):
    return lambda v: next(iter(call(v)))


def entry(v):
    """A state entry: a scalar (an int within what the page counts exactly), or a menu's [label, index]."""
    return (scalar(v) and not (type(v) is int and abs(v) >= 2**53) and not (type(v) is str and len(v) > 100_000)
            or isinstance(v, list) and len(v) == 2 and type(v[0]) is str and type(v[1]) is int and 0 <= v[1] < 2**53)


def key_entry(v):
    return scalar(v) or isinstance(v, (list, tuple)) and len(v) <= 2 and all(scalar(x) for x in v)


FRAMES_ROWS = [
    Row("frames.check_message(content)", lambda v: frames.check_message(v, [], ["value", "label"]), expect=a_sentence),
    Row("frames.check_message(content['state'])",
        lambda v: frames.check_message({"kind": "want", "state": v}, [], ["value", "label"]), expect=a_sentence),
    Row("frames.check_message(content['state'][0])",
        lambda v: frames.check_message({"kind": "want", "state": [v, ["b", 1]]}, [], ["value", "label"]),
        expect=a_sentence, valid=lambda v: entry(v) and not isinstance(v, list)),
    Row("frames.check_message(content['states'])",
        lambda v: frames.check_message({"kind": "forget", "states": v}, [], ["value", "label"]), expect=a_sentence,
        valid=lambda v: v == []),
    Row("frames.check_message(content['id'])", lambda v: frames.check_message({"kind": "more", "id": v}, []),
        expect=a_sentence, valid=lambda v: type(v) is int and 0 <= v < 2**53),
    Row("frames.check_message(content['lab'])", lambda v: frames.check_message({"kind": "hello", "lab": v}, []),
        expect=a_sentence, valid=lambda v: type(v) is bool),
    Row("frames.kind_of(control)", frames.kind_of),
    Row("frames.state_of(controls)", frames.state_of, valid=lambda v: v == []),
    Row("frames.key(state)", frames.key,
        valid=lambda v: isinstance(v, (list, tuple)) and len(v) <= 64 and all(key_entry(x) for x in v)),
    Row("frames.choices(control)", frames.choices),
    Row("frames.position(options, entry)", lambda v: frames.position(frames.choices(controls()["slope"]), v),
        valid=key_entry),
    Row("frames.likely_states(controls)", first_state(frames.likely_states)),
    Row("frames.likely_states(came_from)", first_state(lambda v: frames.likely_states(controls(), v)),
        valid=lambda v: v is None),
]

# ---------------------------------------------------------------- scripts/fence.py (the grader's)

import fence  # noqa: E402  (scripts/ is on pytest's pythonpath)

FENCE_ROWS = [
    Row("fence.choose_fence(unfenced)", fence.choose_fence, raises=TypeError, valid=lambda v: type(v) is bool),
    Row("fence.fence_prefix(fence)", lambda v: fence.fence_prefix(v, "/nowhere"), raises=ValueError),
]


# ---------------------------------------------------------------- scripts/homework.py (the instructor's)

import homework  # noqa: E402

HOMEWORK_ROWS = [
    Row("homework.find_chapter(name)", homework.find_chapter, raises=homework.HomeworkError,
        valid=lambda v: isinstance(v, str) and v.isdigit() and len(v) <= 2),   # '0' is chapter 00
]


# ---------------------------------------------------------------- helpers/model.py (the course's Transformer)

import torch  # noqa: E402

from helpers import reference, worlds  # noqa: E402
from helpers.model import ACTIVATIONS, MLP, NORM_KINDS, NORMS, POSITIONS, ROTARY_PAIRS, Attention, Block, Config, \
    KVCache, Transformer  # noqa: E402
from helpers.sampling import compute as sampling  # noqa: E402

SMALL = dict(vocab_size=10, d_model=8, n_heads=2, n_layers=2, d_ff=8, n_max=16)
MODEL = Transformer(Config(**SMALL), seed=0)
ROTARY = Transformer(Config(**SMALL, positions="rotary"), seed=0)
PROMPT = torch.tensor([1, 2, 3])
PROBS = torch.softmax(torch.tensor([2.0, 1.0, 0.0, -1.0]), -1)


def switch(v):
    """A switch's valid values: True and False; a NumPy bool counts (it comes from comparisons)."""
    return type(v) in (bool, np.bool_)


def number(v, low=-math.inf, high=math.inf, low_open=False):
    try:
        x = float(v)
    except (TypeError, ValueError, OverflowError):
        return False
    return type(v) not in (bool, np.bool_) and math.isfinite(x) and (low < x if low_open else low <= x) and x <= high


def whole(v, low, high):
    return type(v) in (int, np.int64) and low <= v <= high


def weights(model=MODEL):
    """A snapshot of every weight of the model (a refusal must change none)."""
    return tuple((name, t.detach().numpy().tobytes()) for name, t in model.state_dict().items())


def cache_of(cache):
    return (len(cache), tuple(t.detach().numpy().tobytes() for t in cache.k + cache.v if t is not None),
            None if cache.ids is None else tuple(cache.ids.reshape(-1).tolist()))


CACHE = KVCache(2)
with torch.no_grad():
    MODEL(PROMPT, cache=CACHE)


def ids_of(V):
    return lambda v: (isinstance(v, (list, tuple)) and len(v) > 0 and all(type(i) is int and 0 <= i < V for i in v))


def config_with(name):
    return lambda v: Config(**{**SMALL, name: v})


CONFIG_VALID = {
    "positions": lambda v: v in POSITIONS and type(v) is str, "norm": lambda v: v in NORMS and type(v) is str,
    "activation": lambda v: v in ACTIVATIONS and type(v) is str, "norm_kind": lambda v: v in NORM_KINDS and type(v) is str,
    "rotary_pairs": lambda v: v in ROTARY_PAIRS and type(v) is str, "bias": switch, "final_norm": switch,
    "norm_eps": lambda v: number(v, 1e-12, 1), "rotary_base": lambda v: number(v, 1, 1e12),
    "dropout": lambda v: number(v, 0, 0.999),
}
CONFIG_ROWS = [Row(f"Config({name})", config_with(name), valid=CONFIG_VALID.get(name))
               for name in ("vocab_size", "d_model", "n_heads", "n_layers", "d_ff", "n_max", "positions", "norm",
                            "final_norm", "bias", "activation", "n_kv_heads", "norm_kind", "norm_eps", "rotary_pairs",
                            "rotary_base", "dropout")]


SWITCH_VALID = {"causal": switch, "attention": switch, "positions": switch, "scaled": switch,
                "ablate_heads": lambda v: v == [], "replace": lambda v: v is None}


def forward_with(name, cache=False):
    def call(v):
        with torch.no_grad():
            return MODEL(PROMPT if not cache else torch.tensor([4]), **{name: v}, **({"cache": CACHE} if cache else {}))
    return call


ATTENTION = MODEL.blocks[0].attn
MODEL_ROWS = CONFIG_ROWS + [
    Row("Transformer(cfg, seed)", lambda v: Transformer(Config(**SMALL), seed=v),
        valid=lambda v: v is None or whole(v, 0, 2**32 - 1)),
    Row("Transformer(cfg, init)", lambda v: Transformer(Config(**SMALL), init=v)),
    Row("Transformer(cfg)", lambda v: Transformer(v)),
    Row("model(ids)", lambda v: MODEL(v), state=weights, valid=ids_of(10)),
    *[Row(f"model(ids, {name})", forward_with(name), state=weights, valid=switch)
      for name in ("trace", "causal", "attention", "positions", "scaled")],
    *[Row(f"model(ids, cache, {name})", forward_with(name, cache=True), state=lambda: cache_of(CACHE),
          valid=SWITCH_VALID[name])
      for name in ("causal", "attention", "positions", "scaled", "ablate_heads", "replace")],
    Row("model(ids, ablate_heads)", forward_with("ablate_heads"), valid=lambda v: v == []),
    Row("model(ids, cache)", forward_with("cache"), valid=lambda v: v is None),
    Row("model(ids, replace)", forward_with("replace"), valid=lambda v: v is None),
    *[Row(f"Attention(x, {name})", lambda v, name=name: ATTENTION(torch.zeros(1, 3, 8), **{name: v}), valid=switch)
      for name in ("causal", "positions", "scaled")],
    Row("Block.attention_part(h, attention)", lambda v: MODEL.blocks[0].attention_part(torch.zeros(1, 3, 8), attention=v),
        valid=switch),
    Row("KVCache(n_layers)", KVCache, valid=lambda v: whole(v, 1, 10_000)),
    # the parts, built and called on their own (red team round 3)
    *[Row(f"Attention({name})", lambda v, name=name: Attention(**{"d_model": 8, "n_heads": 2, name: v}),
          valid=ok) for name, ok in (("d_model", None), ("n_heads", None), ("bias", switch),
                                     ("rotary", lambda v: v is False or v is True), ("n_kv_heads", lambda v: v in (1, 2)),
                                     ("dropout", lambda v: number(v, 0, 0.999)))],
    *[Row(f"MLP({name})", lambda v, name=name: MLP(**{"d_model": 8, "d_ff": 8, name: v}),
          valid=ok) for name, ok in (("d_model", None), ("d_ff", None), ("bias", switch),
                                     ("activation", CONFIG_VALID["activation"]), ("dropout", CONFIG_VALID["dropout"]))],
    Row("Block(cfg)", Block),
    Row("Attention(x)", ATTENTION, state=weights),
    Row("Attention(x, ablate)", lambda v: ATTENTION(torch.zeros(1, 3, 8), ablate=v),
        valid=lambda v: isinstance(v, (list, tuple, set)) and all(whole(i, 0, 1) for i in v)),
    Row("Attention(x, start)", lambda v: ATTENTION(torch.zeros(1, 3, 8), start=v)),
    Row("Attention(x, layer, cache)", lambda v: ATTENTION(torch.zeros(1, 1, 8), cache=KVCache(2), layer=v),
        valid=lambda v: whole(v, 0, 1)),
    Row("Attention(x, keep)", lambda v: ATTENTION(torch.zeros(1, 3, 8), keep=v), valid=lambda v: v is None or callable(v)),
    Row("Block(h)", MODEL.blocks[0], state=weights),
    Row("Block.mlp_part(h_mid)", MODEL.blocks[0].mlp_part),
    Row("MLP(x)", MODEL.blocks[0].mlp),
    Row("Transformer.embed(ids)", MODEL.embed, valid=ids_of(10)),
    Row("Transformer.embed(start)", lambda v: MODEL.embed(PROMPT, start=v)),
    Row("Transformer.unembed(h)", MODEL.unembed),
]


# ---------------------------------------------------------------- helpers/sampling/compute.py

def generate_with(name):
    return lambda v: sampling.generate(MODEL, PROMPT, 3, **{name: v})


GENERATE_VALID = {
    "temperature": lambda v: number(v, 0, 1e300), "seed": lambda v: whole(v, 0, 2**32 - 1), "cache": switch,
    "use_cache": lambda v: v is None or switch(v), "stop_id": lambda v: v is None, "top_k": lambda v: v is None,
    "top_p": lambda v: v is None, "causal": lambda v: v is True or v == np.bool_(True) and type(v) is np.bool_,
    "attention": switch, "positions": switch, "scaled": switch, "ablate_heads": lambda v: v == [],
    "replace": lambda v: v is None,
}


def probs_valid(v):
    try:
        x = np.asarray(v, dtype=float)
    except (TypeError, ValueError, OverflowError, RecursionError):
        return False
    return type(v) not in (bool, np.bool_) and x.ndim == 1 and len(x) > 0 and (x >= 0).all() and abs(x.sum() - 1) < 1e-3


def logits_valid(v):
    try:
        x = np.asarray(v, dtype=float)
    except (TypeError, ValueError, OverflowError, RecursionError):
        return False
    return (type(v) not in (bool, np.bool_) and x.ndim == 1 and len(x) > 0 and np.isfinite(x).all()
            and not (len(x) > 1 and (x > 0).all() and abs(x.sum() - 1) < 1e-5))


SAMPLING_ROWS = [
    Row("generate(model)", lambda v: sampling.generate(v, PROMPT, 3)),
    Row("generate(ids)", lambda v: sampling.generate(MODEL, v, 3), valid=ids_of(10)),
    Row("generate(n_new)", lambda v: sampling.generate(MODEL, PROMPT, v), valid=lambda v: whole(v, 1, 1000)),
    *[Row(f"generate({name})", generate_with(name), valid=GENERATE_VALID[name]) for name in GENERATE_VALID],
    Row("generate(**unknown switch)", lambda v: sampling.generate(MODEL, PROMPT, 3, temprature=v)),
    Row("samples(n)", lambda v: sampling.samples(MODEL, PROMPT, 3, v), valid=lambda v: whole(v, 1, 1024)),
    Row("samples(seed)", lambda v: sampling.samples(MODEL, PROMPT, 3, 2, seed=v),
        valid=lambda v: whole(v, 0, 2**32 - 2)),
    Row("samples(n_new)", lambda v: sampling.samples(MODEL, PROMPT, v, 2), valid=lambda v: whole(v, 1, 1000)),
    Row("samples(stop_id)", lambda v: sampling.samples(MODEL, PROMPT, 3, 2, stop_id=v), valid=lambda v: v is None),
    Row("with_temperature(logits)", lambda v: sampling.with_temperature(v, 1.0), valid=logits_valid),
    Row("with_temperature(temperature)", lambda v: sampling.with_temperature([1.0, 2.0], v),
        valid=lambda v: number(v, 0, 1e30)),
    Row("next_distribution(logits)", lambda v: sampling.next_distribution(v), valid=logits_valid),
    Row("next_distribution(top_k)", lambda v: sampling.next_distribution([1.0, 2.0], top_k=v), valid=lambda v: v is None),
    Row("next_distribution(top_p)", lambda v: sampling.next_distribution([1.0, 2.0], top_p=v), valid=lambda v: v is None),
    Row("top_k_filter(probs)", lambda v: sampling.top_k_filter(v, 1), valid=probs_valid),
    Row("top_k_filter(k)", lambda v: sampling.top_k_filter(PROBS, v)),
    Row("nucleus(probs)", lambda v: sampling.nucleus(v, 0.9), valid=probs_valid),
    Row("nucleus(p)", lambda v: sampling.nucleus(PROBS, v)),
    Row("top_p_filter(probs)", lambda v: sampling.top_p_filter(v, 0.9), valid=probs_valid),
    Row("top_p_filter(p)", lambda v: sampling.top_p_filter(PROBS, v)),
    Row("draw(probs)", lambda v: sampling.draw(v, torch.Generator().manual_seed(0)), valid=probs_valid),
    Row("draw(generator)", lambda v: sampling.draw(PROBS, v)),
    Row("draws(probs)", lambda v: sampling.draws(v, 3, seed=0), valid=probs_valid),
    Row("draws(n)", lambda v: sampling.draws(PROBS, v, seed=0), valid=lambda v: whole(v, 1, 10**7)),
    Row("draws(seed)", lambda v: sampling.draws(PROBS, 3, seed=v), valid=lambda v: whole(v, 0, 2**32 - 1)),
]


# ---------------------------------------------------------------- helpers/worlds.py and helpers/reference.py

CAT = worlds.cat_world().tokenizer


def words_of(vocab):
    return lambda v: (type(v) is str and v.split() and all(w in vocab for w in v.split())
                      or isinstance(v, (list, tuple)) and v and all(type(w) is str and w in vocab for w in v))


def array_valid(v, finite=True, empty=False):
    try:
        x = np.asarray(v, dtype=float)
    except (TypeError, ValueError, OverflowError, RecursionError):
        return False
    return type(v) not in (bool, np.bool_) and (x.size > 0 or empty) and (np.isfinite(x).all() or not finite and
                                                               not np.isnan(x).any() and not np.isposinf(x).any())


WORLDS_ROWS = [
    Row("Tokenizer.encode(text)", CAT.encode, valid=words_of(CAT.vocab)),
    Row("Tokenizer.decode(ids)", CAT.decode, valid=lambda v: v == [] or whole(v, 0, 19) or ids_of(20)(v)),
    Row("induction_labels(ids)", worlds.induction_labels, valid=lambda v: v == [] or whole(v, 0, 36) or ids_of(37)(v)),
    Row("dragon_next(words)", worlds.dragon_next),
    Row("dragon_sample(n)", lambda v: worlds.dragon_sample(v, 4, 0), valid=lambda v: whole(v, 1, 10**5)),
    Row("dragon_sample(seed)", lambda v: worlds.dragon_sample(2, 4, v), valid=lambda v: whole(v, 0, 2**32 - 1)),
    Row("repeated_tokens(n)", lambda v: worlds.repeated_tokens(v, 4, 10, 0), valid=lambda v: whole(v, 1, 10**6)),
    Row("repeated_tokens(seed)", lambda v: worlds.repeated_tokens(2, 4, 10, v), valid=lambda v: whole(v, 0, 2**32 - 1)),
    Row("induction_prompt(length)", lambda v: worlds.induction_prompt(v, 0)),
]

REFERENCE_ROWS = [
    Row("reference.softmax(x)", reference.softmax, valid=lambda v: array_valid(v, finite=False)),
    Row("reference.softmax(axis)", lambda v: reference.softmax([1.0, 2.0], axis=v), valid=lambda v: v in (0, -1)
        and type(v) is int),
    Row("reference.causal_mask(T)", reference.causal_mask, valid=lambda v: whole(v, 1, 7000)),
    Row("reference.attention(causal)", lambda v: reference.attention(np.eye(2), np.eye(2), np.eye(2), causal=v),
        valid=switch),
    Row("reference.attention(scale)", lambda v: reference.attention(np.eye(2), np.eye(2), np.eye(2), scale=v),
        valid=switch),
    Row("reference.sinusoidal_positions(n)", lambda v: reference.sinusoidal_positions(v, 4), valid=lambda v: whole(v, 1, 10**6)),
    Row("reference.sinusoidal_positions(base)", lambda v: reference.sinusoidal_positions(4, 4, base=v),
        valid=lambda v: number(v, 1, 1e300, low_open=True)),
    Row("reference.gelu(x)", reference.gelu, valid=lambda v: array_valid(v, empty=True)),
    Row("reference.relu(x)", reference.relu, valid=lambda v: array_valid(v, empty=True)),
]


# ---------------------------------------------------------------- helpers/patching.py (chapters 05, 10, 11, 12)

from helpers import patching  # noqa: E402

CLEAN, CORRUPT = torch.tensor([1, 2, 3]), torch.tensor([1, 4, 3])
PAIR = torch.stack([CLEAN, CORRUPT])
MEANS = patching.mean_head_outputs(MODEL, PAIR)
SOURCE = patching.head_outputs(MODEL, PAIR)
PARTS_OF = patching.residual_parts(MODEL, CLEAN)[0]
ONE_HOT = torch.eye(10)[5]


def logit_gap(out):
    return out["logits"][:, -1, 5] - out["logits"][:, -1, 6]


def with_arg(fn, name, **fixed):
    return lambda v: fn(**{**fixed, name: v})


def empty(v):
    return isinstance(v, (list, tuple)) and len(v) == 0


PATCH = dict(model=MODEL, clean=CLEAN, corrupt=CORRUPT, metric=logit_gap)
PATCH_VALID = {"clean": ids_of(10), "corrupt": ids_of(10), "watch": empty, "direction": lambda v: False,
               "per_position": switch, "names": lambda v: v is None}
PATH = dict(PATCH, sender=(0, 1), receivers=[(1, 0)])
PATCHING_ROWS = [
    Row("patching.capture(model)", lambda v: patching.capture(v, PROMPT, ["L0.h"])),
    Row("patching.capture(ids)", lambda v: patching.capture(MODEL, v, ["L0.h"]), valid=ids_of(10)),
    Row("patching.capture(names)", lambda v: patching.capture(MODEL, PROMPT, v), valid=empty),
    Row("patching.capture(stop_after)", lambda v: patching.capture(MODEL, PROMPT, ["L0.h"], stop_after=v),
        valid=lambda v: v is None),
    Row("patching.capture(replace)", lambda v: patching.capture(MODEL, PROMPT, ["L0.h"], replace=v),
        valid=lambda v: v is None or v == {}),
    Row("patching.head_outputs(ids)", lambda v: patching.head_outputs(MODEL, v), valid=ids_of(10)),
    Row("patching.mean_head_outputs(ids)", lambda v: patching.mean_head_outputs(MODEL, v), valid=ids_of(10)),
    Row("patching.mean_head_outputs(lengths)", lambda v: patching.mean_head_outputs(MODEL, PAIR, lengths=v),
        valid=lambda v: v is None),
    Row("patching.mean_head_outputs(per_position)", lambda v: patching.mean_head_outputs(MODEL, PAIR, per_position=v),
        valid=switch),
    Row("patching.ablation_replace(heads)", lambda v: MODEL(PROMPT, replace=patching.ablation_replace(v, "zero")),
        state=weights, valid=empty),
    Row("patching.ablation_replace(kind)", lambda v: patching.ablation_replace([(0, 1)], v, MEANS, SOURCE)),
    Row("patching.ablation_replace(means)", lambda v: MODEL(PROMPT, replace=patching.ablation_replace([(0, 1)], "mean", v))),
    Row("patching.ablation_replace(means[0])",
        lambda v: MODEL(PROMPT, replace=patching.ablation_replace([(0, 1)], "mean", {0: v}))),
    Row("patching.ablation_replace(source[0])",
        lambda v: MODEL(PROMPT, replace=patching.ablation_replace([(0, 1)], "resample", source={0: v}))),
    Row("patching.normalised(clean)", lambda v: patching.normalised(0.5, v, 0.0),
        valid=lambda v: number(v) and float(v) != 0.0),
    Row("patching.normalised(corrupt)", lambda v: patching.normalised(0.5, 1.0, v),
        valid=lambda v: number(v) and float(v) != 1.0),
    *[Row(f"patching.patch_heads({name})", with_arg(patching.patch_heads, name, **PATCH), valid=PATCH_VALID.get(name))
      for name in ("model", "clean", "corrupt", "metric", "watch", "direction", "per_position")],
    *[Row(f"patching.patch_residual({name})", with_arg(patching.patch_residual, name, **PATCH),
          valid=PATCH_VALID.get(name)) for name in ("model", "clean", "corrupt", "metric", "names", "watch", "direction")],
    *[Row(f"patching.metric_ends({name})", with_arg(patching.metric_ends, name, **PATCH), valid=PATCH_VALID.get(name))
      for name in ("clean", "corrupt", "metric", "watch")],
    *[Row(f"patching.path_patch({name})", with_arg(patching.path_patch, name, **PATH), valid=PATCH_VALID.get(name))
      for name in ("sender", "receivers", "parts", "metric", "watch", "direction")],
    *[Row(f"patching.attribution_patch({name})", with_arg(patching.attribution_patch, name, **PATCH),
          valid=PATCH_VALID.get(name)) for name in ("model", "clean", "corrupt", "metric", "watch")],
    Row("patching.logit_lens(ids)", lambda v: patching.logit_lens(MODEL, v), valid=ids_of(10)),
    Row("patching.logit_lens(names)", lambda v: patching.logit_lens(MODEL, CLEAN, v), valid=lambda v: v is None),
    Row("patching.token_lens(ids)", lambda v: patching.token_lens(MODEL, v, 5), valid=ids_of(10)),
    Row("patching.token_lens(token_id)", lambda v: patching.token_lens(MODEL, CLEAN, v), valid=lambda v: whole(v, 0, 9)),
    Row("patching.final_norm_scale(h)", lambda v: patching.final_norm_scale(MODEL, v)),
    Row("patching.residual_parts(ids)", lambda v: patching.residual_parts(MODEL, v), valid=ids_of(10)),
    Row("patching.residual_parts(position)", lambda v: patching.residual_parts(MODEL, CLEAN, v),
        valid=lambda v: whole(v, -3, 2)),
    Row("patching.attribute(parts)", lambda v: patching.attribute(MODEL, v, ONE_HOT, 1.0)),
    Row("patching.attribute(direction)", lambda v: patching.attribute(MODEL, PARTS_OF, v, 1.0)),
    Row("patching.attribute(scale)", lambda v: patching.attribute(MODEL, PARTS_OF, ONE_HOT, v),
        valid=lambda v: number(v, 0, math.inf, low_open=True)),
    Row("patching.direct_logit_attribution(direction)", lambda v: patching.direct_logit_attribution(MODEL, CLEAN, v)),
    Row("patching.direct_logit_attribution(position)",
        lambda v: patching.direct_logit_attribution(MODEL, CLEAN, ONE_HOT, position=v), valid=lambda v: whole(v, -3, 2)),
    Row("patching.direct_logit_attribution(scale)",
        lambda v: patching.direct_logit_attribution(MODEL, CLEAN, ONE_HOT, scale=v),
        valid=lambda v: v is None or number(v, 0, math.inf, low_open=True)),
    Row("patching.direct_effects(ids)", lambda v: patching.direct_effects(MODEL, v, PAIR)),
    Row("patching.direct_effects(targets)", lambda v: patching.direct_effects(MODEL, PAIR, v)),
    Row("patching.direct_effects(replace)", lambda v: patching.direct_effects(MODEL, PAIR, PAIR, replace=v),
        valid=lambda v: v is None or v == {}),
    Row("patching.direct_effects(scale)", lambda v: patching.direct_effects(MODEL, PAIR, PAIR, scale=v),
        valid=lambda v: v is None or number(v, 0, math.inf, low_open=True)),
    Row("patching.head_circuits(layer)", lambda v: patching.head_circuits(MODEL, v, 0), valid=lambda v: whole(v, 0, 1)),
    Row("patching.head_circuits(head)", lambda v: patching.head_circuits(MODEL, 0, v), valid=lambda v: whole(v, 0, 1)),
    Row("patching.head_circuits(fold_ln)", lambda v: patching.head_circuits(MODEL, 0, 0, v), valid=switch),
    Row("patching.composition_score(left)", lambda v: patching.composition_score(v, torch.eye(2))),
    Row("patching.composition_score(right)", lambda v: patching.composition_score(torch.eye(2), v)),
    Row("patching.composition_scores(sender)", lambda v: patching.composition_scores(MODEL, v, (1, 0))),
    Row("patching.composition_scores(receiver)", lambda v: patching.composition_scores(MODEL, (0, 0), v)),
    Row("patching.composition_scores(offset)", lambda v: patching.composition_scores(ROTARY, (0, 0), (1, 0), offset=v),
        valid=lambda v: v is None or whole(v, 0, 15)),
    Row("patching.head_circuits(offset, no rotary)", lambda v: patching.head_circuits(MODEL, 0, 0, offset=v),
        valid=lambda v: v is None),
    Row("patching.composition_baseline(d_model)", lambda v: patching.composition_baseline(v, 4, draws=2),
        valid=lambda v: whole(v, 4, 4096)),
    Row("patching.composition_baseline(d_k)", lambda v: patching.composition_baseline(8, v, draws=2),
        valid=lambda v: whole(v, 1, 8)),
    Row("patching.composition_baseline(draws)", lambda v: patching.composition_baseline(8, 4, draws=v),
        valid=lambda v: whole(v, 1, 1000)),
    Row("patching.composition_baseline(seed)", lambda v: patching.composition_baseline(8, 4, draws=2, seed=v),
        valid=lambda v: whole(v, 0, 2**32 - 1)),
]


TABLE = GRADING_ROWS + FRAMES_ROWS + FENCE_ROWS + HOMEWORK_ROWS + MODEL_ROWS + SAMPLING_ROWS + WORLDS_ROWS \
    + REFERENCE_ROWS + PATCHING_ROWS


# ---------------------------------------------------------------- helpers/real, helpers/gpt, chapter 01's explorer

import functools  # noqa: E402

from helpers.geometry import explorer as geometry_explorer  # noqa: E402
from helpers.gpt import compute as gpt, corpus, tokenize as tk, train as gtrain  # noqa: E402
from helpers.real import circuit, smollm2  # noqa: E402
from helpers.real import compute as real  # noqa: E402


def text_ok(max_chars):
    """Text a tokenizer takes: a non-blank str of at most max_chars characters that UTF-8 can write."""
    def ok(v):
        if not isinstance(v, str) or not v.strip() or len(v) > max_chars:
            return False
        try:
            return bool(v.encode("utf-8"))
        except UnicodeEncodeError:
            return False
    return ok


def some(ok, most):
    """A non-empty list or tuple of at most ``most`` items, each ok."""
    return lambda v: isinstance(v, (list, tuple)) and 0 < len(v) <= most and all(ok(x) for x in v)


@functools.lru_cache(maxsize=1)
def smol():
    """The real model and tokenizer, loaded on first use (mapped from the course's cache: a refusal
    before the pass touches no weight)."""
    return real.load()


def with_smol(fn):
    return lambda v: fn(*smol(), v)


def fact_ids():
    return torch.tensor(smol()[1].encode(real.FACT))


try:
    smollm2.gguf_path()
    HAVE_SMOL = True
except CourseInputError:
    HAVE_SMOL = False

REAL_TEXT = text_ok(real.MAX_TEXT_CHARS)
V_SMOL = 49152
REAL_ROWS = [
    Row("smollm2.Tokenizer.encode(text)", lambda v: smol()[1].encode(v),
        valid=lambda v: v in ("", " ") or text_ok(real.MAX_TEXT_CHARS)(v)),
    Row("real.tokens(text)", lambda v: real.tokens(smol()[1], v), valid=REAL_TEXT),
    Row("real.next_logits(prompt)", with_smol(real.next_logits), valid=REAL_TEXT),
    Row("real.norm_view(text)", with_smol(real.norm_view), valid=REAL_TEXT),
    Row("real.rotary_view(text)", with_smol(real.rotary_view), valid=REAL_TEXT),
    Row("real.prompt_view(prompt)", with_smol(real.prompt_view), valid=REAL_TEXT),
    Row("real.logit_lens(ids)", lambda v: real.logit_lens(smol()[0], v, 5), valid=ids_of(V_SMOL)),
    Row("real.logit_lens(token_id)", lambda v: real.logit_lens(smol()[0], fact_ids(), v),
        valid=lambda v: whole(v, 0, V_SMOL - 1)),
    *[Row(f"real.rotary_view({name})", lambda v, name=name: real.rotary_view(*smol(), **{name: v}), valid=ok)
      for name, ok in (("layer", lambda v: whole(v, 0, 29)), ("head", lambda v: whole(v, 0, 8)),
                       ("query", lambda v: whole(v, -8, 7)), ("key", lambda v: whole(v, -8, 7)),
                       ("n", lambda v: whole(v, 1, 7000)))],
    Row("real.swiglu_view(layer)", lambda v: real.swiglu_view(*smol(), layer=v), valid=lambda v: whole(v, 0, 29)),
    Row("real.rotary_orders(layer)", lambda v: real.rotary_orders(smol()[0], fact_ids(), layer=v),
        valid=lambda v: whole(v, 0, 29)),
    *[Row(f"real.continuations({name})",
          lambda v, name=name: real.continuations(smol()[0], fact_ids(), **{"n_new": 2, "seeds": (0,), name: v}), valid=ok)
      for name, ok in (("n_new", lambda v: whole(v, 1, 1000)), ("seeds", some(lambda s: s is None or whole(s, 0, 2**32 - 1), 64)),
                       ("temperature", lambda v: number(v, 0)),
                       ("top_p", lambda v: v is None or number(v, 0, 1, low_open=True)))],
    *[Row(f"real.kv_timing({name})", lambda v, name=name: real.kv_timing(smol()[0], fact_ids(), **{name: v}), valid=ok)
      for name, ok in (("new_tokens", lambda v: whole(v, 1, 1000)), ("repeats", lambda v: whole(v, 1, 100)),
                       ("warm_up", switch))],
    Row("real.temperature_view(temperatures)", lambda v: real.temperature_view(*smol(), temperatures=v),
        valid=some(lambda t: number(t, 0, low_open=True), 64)),
    Row("real.temperature_view(k)", lambda v: real.temperature_view(*smol(), k=v), valid=lambda v: whole(v, 1, V_SMOL)),
    Row("real.prompt_view(k)", lambda v: real.prompt_view(*smol(), "Hello", k=v), valid=lambda v: whole(v, 1, V_SMOL)),
    Row("real.patching_view(answers)", lambda v: real.patching_view(*smol(), answers=v)),
    Row("real.patching_view(layers)", lambda v: real.patching_view(*smol(), layers=v),
        valid=lambda v: v is None or some(lambda layer: whole(layer, 0, 29), 10**9)(v)),
    Row("real.best_heads(scores)", lambda v: real.best_heads(v, 1)),
    Row("real.best_heads(k)", lambda v: real.best_heads(torch.zeros(3, 2), v), valid=lambda v: whole(v, 1, 6)),
    Row("real.first_top_layer(lens)", real.first_top_layer),
    Row("real.top_tokens(probs)", lambda v: real.top_tokens(smol()[1], v)),
    Row("real.top_tokens(k)", lambda v: real.top_tokens(smol()[1], torch.full((10,), 0.1), v),
        valid=lambda v: whole(v, 1, 10)),
    Row("real.kv_bytes_per_token(cfg)", real.kv_bytes_per_token),
    Row("real.kv_bytes_per_token(bytes_per_number)", lambda v: real.kv_bytes_per_token(smol()[0].cfg, v),
        valid=lambda v: number(v, 0, 8, low_open=True)),
    Row("real.parameter_formula(cfg)", real.parameter_formula),
    Row("real.memory_mb(path)", lambda v: real.memory_mb(smol()[0], path=v), valid=lambda v: v is None),
    Row("real.distinct_per_block(W)", real.distinct_per_block),
    Row("real.distinct_per_block(block)", lambda v: real.distinct_per_block(torch.zeros(64, 2), v),
        valid=lambda v: v in (1, 2, 4, 8, 16, 32, 64) and type(v) is int),
    *[Row(f"circuit.random_repeats({name})",
          lambda v, name=name: circuit.random_repeats(**{**dict(n=2, length=3, vocab_size=V_SMOL, seed=0), name: v}),
          valid=ok)
      for name, ok in (("n", lambda v: whole(v, 1, 10**4)), ("length", lambda v: whole(v, 2, 10**3)),
                       ("vocab_size", lambda v: whole(v, 102, 2**31)), ("seed", lambda v: whole(v, 0, 2**32 - 1)))],
    Row("circuit.within(gap)", circuit.within, valid=lambda v: number(v, 0)),
    Row("circuit.logit_difference(answers)", lambda v: circuit.logit_difference(torch.zeros(2, 5), v)),
    Row("circuit.copy_effects(heads_off)",
        lambda v: circuit.copy_effects(smol()[0], circuit.random_repeats(1, 3, V_SMOL, 0), v), valid=empty),
    *[Row(f"circuit.patch_grid({name})", lambda v, name=name: circuit.patch_grid(
        smol()[0], fact_ids()[None], fact_ids()[None], **{"answers": torch.tensor([[5, 6]]), name: v}),
        valid=lambda v, ok=ok: v is None or ok(v))
      for name, ok in (("answers", lambda v: False), ("layers", some(lambda l: whole(l, 0, 29), 10**9)),
                       ("positions", some(lambda p: whole(p, 0, 4), 10**9)))],
    # red team round 4
    Row("real.tokens(tok)", lambda v: real.tokens(v, "abc")),
    Row("real.top_tokens(tok)", lambda v: real.top_tokens(v, torch.full((V_SMOL,), 1 / V_SMOL))),
    Row("real.forward_seconds(repeats)", lambda v: real.forward_seconds(smol()[0], T=2, repeats=v),
        valid=lambda v: whole(v, 1, 100)),
    Row("real.file_order(W)", lambda v: real.file_order(v, 2)),
    Row("real.file_order(n_heads)", lambda v: real.file_order(torch.zeros(2, 8), v),
        valid=lambda v: whole(v, 1, 4) and 8 % (2 * v) == 0),
    Row("circuit.run_from(layer)", lambda v: circuit.run_from(smol()[0], torch.zeros(1, 2, 576), v),
        valid=lambda v: whole(v, 0, 29)),
    Row("circuit.run_from(h)", lambda v: circuit.run_from(smol()[0], v, 29)),
    Row("circuit.random_heads(k)", lambda v: circuit.random_heads(smol()[0].cfg, v), valid=lambda v: whole(v, 1, 270)),
    Row("circuit.random_heads(avoid)", lambda v: circuit.random_heads(smol()[0].cfg, 1, avoid=v), valid=empty),
    Row("circuit.fact_batch(pairs)", lambda v: circuit.fact_batch(smol()[1], v, circuit.CAPITALS)),
    Row("circuit.fact_batch(capitals)", lambda v: circuit.fact_batch(smol()[1], [("France", "Italy")], v)),
]

CHARS = corpus.CharTokenizer()
IDS = CHARS.encode(corpus.load_text()[:3000])
TINY = gpt.GPT(65, 16, 2, 1, 32, 32)
GPT_TEXT = text_ok(tk.MAX_CHARS)
TRAIN = dict(model=TINY, train_ids=IDS[:2000], val_ids=IDS[2000:], steps=2, batch=2, context=16, warmup=1,
             eval_every=1, eval_batches=1)
GPT_ROWS = [
    Row("corpus.windows(batch)", lambda v: corpus.windows(IDS, v, 16, torch.Generator().manual_seed(0)),
        valid=lambda v: whole(v, 1, 10**5)),
    Row("GPT.forward(ids)", TINY),
    Row("gpt.unigram_loss(val_ids)", lambda v: gpt.unigram_loss(IDS, v)),
    Row("gpt.sample_text(n_new)", lambda v: gpt.sample_text(TINY, CHARS, "A", v), valid=lambda v: whole(v, 1, 5000)),
    Row("gpt.samples_at(temperatures)", lambda v: gpt.samples_at(TINY, CHARS, "A", 2, v),
        valid=some(lambda t: number(t, 0, low_open=True), 64)),
    Row("gpt.samples_at(n_new)", lambda v: gpt.samples_at(TINY, CHARS, "A", v, [1.0]), valid=lambda v: whole(v, 1, 5000)),
    Row("gpt.spread_loss(every)", lambda v: gpt.spread_loss(TINY, IDS, context=16, every=v),
        valid=lambda v: whole(v, 1, 10**5000)),
    Row("gtrain.estimate_loss(model)", lambda v: gtrain.estimate_loss(v, IDS, 16)),
    Row("gtrain.estimate_loss(batch)", lambda v: gtrain.estimate_loss(TINY, IDS, 16, batches=1, batch=v),
        valid=lambda v: whole(v, 1, 10**4)),
    *[Row(f"gtrain.train({name})", lambda v, name=name: gtrain.train(**{**TRAIN, name: v}), state=lambda: weights(TINY),
          valid=ok)
      for name, ok in (("steps", lambda v: whole(v, 2, 10**5000)), ("batch", lambda v: whole(v, 1, 10**3)),
                       ("context", lambda v: whole(v, 1, 32)), ("lr", lambda v: number(v, 0, low_open=True)),
                       ("clip", lambda v: number(v, 0, low_open=True)),
                       ("eval_every", lambda v: whole(v, 1, 10**5000)), ("callback", lambda v: v is None or callable(v)),
                       ("seed", lambda v: whole(v, 0, 2**32 - 1)))],
    Row("tk.pretokenize(text)", tk.pretokenize, valid=GPT_TEXT),
    Row("tk.train_bpe(text)", lambda v: tk.train_bpe(v, 300), valid=GPT_TEXT),
    Row("tk.smollm2_pieces(text)", tk.smollm2_pieces, valid=GPT_TEXT),
    Row("tk.pair_counts(words)", tk.pair_counts,
        valid=lambda v: isinstance(v, list) and all(isinstance(w, list) and all(type(a) is str for a in w) for w in v)),
    Row("tk.merge_step(words)", tk.merge_step),
    Row("tk.show_split(parts)", lambda v: tk.show_split("name", v),
        valid=lambda v: isinstance(v, list) and all(isinstance(p, str) for p in v)),
    Row("gpt.sample_text(tokenizer)", lambda v: gpt.sample_text(TINY, v, "A", 2)),   # red team round 4
    Row("corpus.CharTokenizer(text)", corpus.CharTokenizer, valid=lambda v: v is None or text_ok(10**8)(v)),
]

GEOMETRY_ROWS = [Row(f"geometry_explorer.explorer({name})", lambda v, name=name: geometry_explorer.explorer(**{name: v}),
                     valid=lambda v, name=name: number(v, *((-180, 180) if name.startswith("angle") else (0.5, 5))))
                 for name in ("angle_a", "norm_a", "angle_b", "norm_b")]

TABLE += (REAL_ROWS if HAVE_SMOL else []) + GPT_ROWS + GEOMETRY_ROWS

# ---------------------------------------------------------------- chapters 01-04 (geometry, qkv, scaling, masking)

from helpers import weights as shipped  # noqa: E402
from helpers.geometry import checks as geometry_checks, compute as geometry  # noqa: E402
from helpers.masking import checks as masking_checks, compute as masking  # noqa: E402
from helpers.qkv import compute as qkv  # noqa: E402
from helpers.scaling import checks as scaling_checks, compute as scaling  # noqa: E402

CAT, CAT_WORLD = shipped.load_cat(), worlds.cat_world()
KV = geometry.load_glove(n_words=1000)
WORDS = [["the", "cat", "sat"], ["the", "dog", "ran"]]


def torch_rng():
    """The global torch generator's state (leak and dropout_demo seed it: a refusal must not)."""
    return torch.random.get_rng_state().numpy().tobytes()


def cell_refused(value, result):
    """A check given a bad argument in its check cell answers with the cell's one sentence, not 'please report it'."""
    assert len(result) == 1 and result[0].startswith("the check cannot use what the check cell gives it"), result
    assert "\n" not in result[0] and len(result[0]) <= 2 * MAX_SENTENCE, result[0][:MAX_SENTENCE]


def check_row(name, check, answer, given, arg, valid=None):
    return Row(f"{name}({arg})", lambda v: check.feedback(answer, **{**given, arg: v}), expect=cell_refused, valid=valid)


def seeds_list(most):
    return lambda v: isinstance(v, (list, tuple)) and 1 <= len(v) <= most and all(whole(x, 0, 2**32 - 1) for x in v)


def scores_1d(v, least=1):
    """Not bad input: a 1-D list of at least ``least`` finite numbers (no bools, no texts)."""
    return isinstance(v, (list, tuple)) and len(v) >= least and all(number(x) for x in v)


def softmax_output(v):
    """Not bad input: a softmax's output, 1-D numbers >= 0 that sum to 1."""
    return scores_1d(v) and all(x >= 0 for x in v) and abs(sum(v) - 1) < 1e-6


SQUARE = np.arange(9.0).reshape(3, 3)
GEOMETRY_CHECK_CASES = [
    ("geometry_checks.neighbours", geometry_checks.neighbours, ["a"] * 5, dict(kv=KV, word="king", topn=5),
     {"kv": None, "word": lambda v: v in KV.key_to_index, "topn": lambda v: whole(v, 1, 999)}),
    ("geometry_checks.analogy_direction", geometry_checks.analogy_direction, np.ones(50) / np.sqrt(50),
     dict(kv=KV, a="king", minus="man", plus="woman"),
     {"kv": None, "a": lambda v: v in KV.key_to_index, "minus": lambda v: v in KV.key_to_index,
      "plus": lambda v: v in KV.key_to_index}),
    ("geometry_checks.kept_fractions", geometry_checks.kept_fractions, np.ones(4),
     dict(high=SQUARE[:, :2].repeat(2, 0)[:4] + np.arange(4)[:, None], low=np.eye(4)[:, :2], k=2),
     {"high": None, "low": None, "k": lambda v: whole(v, 1, 3)}),
    ("scaling_checks.typical_size", scaling_checks.typical_size, 3.0, dict(d=512), {"d": lambda v: whole(v, 1, 10**12)}),
    ("scaling_checks.jacobian", scaling_checks.jacobian, np.zeros((3, 3)), dict(weights=[0.2, 0.3, 0.5]), {"weights": softmax_output}),
    ("scaling_checks.gradient_wrt_raw", scaling_checks.gradient_wrt_raw, 0.1, dict(scores=[1.0, 2.0, 3.0], index=2, divide_by=8.0),
     {"scores": lambda v: scores_1d(v, 3), "index": lambda v: whole(v, 0, 2), "divide_by": lambda v: number(v, 0, low_open=True)}),
    ("masking_checks.mask", masking_checks.mask, np.zeros((5, 5), bool), dict(T=5), {"T": lambda v: whole(v, 1, 1000)}),
    ("masking_checks.masked_weight", masking_checks.masked_weight, 0.3, dict(scores=SQUARE, query=1, key=0),
     {"scores": None, "query": lambda v: whole(v, 0, 2), "key": lambda v: whole(v, 0, 1)}),
    ("masking_checks.renormalised", masking_checks.renormalised, np.eye(3), dict(zeroed=np.tril(np.ones((3, 3))) / 3),
     {"zeroed": None}),
    ("masking_checks.moved_positions", masking_checks.moved_positions, [1, 2], dict(T=4, changed=1),
     {"T": lambda v: whole(v, 2, 1000), "changed": lambda v: whole(v, 0, 3)}),
]

CHAPTERS_01_04_ROWS = [
    Row("geometry.cosine(a)", lambda v: geometry.cosine(v, [1.0, 2.0])),
    Row("geometry.cosine(b)", lambda v: geometry.cosine([1.0, 2.0], v)),
    Row("geometry.vector_pair(angle_a)", lambda v: geometry.vector_pair(angle_a=v), valid=number),
    Row("geometry.vector_pair(norm_b)", lambda v: geometry.vector_pair(norm_b=v), valid=lambda v: number(v, 0, low_open=True)),
    Row("geometry.train_word2vec(sentences)", lambda v: geometry.train_word2vec(v, epochs=1)),
    Row("geometry.train_word2vec(vector_size)", lambda v: geometry.train_word2vec(WORDS, vector_size=v, epochs=1),
        valid=lambda v: whole(v, 1, 10**7)),
    Row("geometry.train_word2vec(window)", lambda v: geometry.train_word2vec(WORDS, window=v, epochs=1),
        valid=lambda v: whole(v, 1, 10**6)),
    Row("geometry.train_word2vec(epochs)", lambda v: geometry.train_word2vec(WORDS, epochs=v), valid=lambda v: whole(v, 1, 10_000)),
    Row("geometry.train_word2vec(seed)", lambda v: geometry.train_word2vec(WORDS, seed=v, epochs=1),
        valid=lambda v: whole(v, 0, 2**32 - 1)),
    Row("geometry.train_word2vec(sample)", lambda v: geometry.train_word2vec(WORDS, sample=v, epochs=1), valid=lambda v: number(v, 0, 1)),
    Row("geometry.train_word2vec_seeds(seeds)", lambda v: geometry.train_word2vec_seeds(WORDS, v, epochs=1), valid=seeds_list(100)),
    Row("geometry.project(method)", lambda v: geometry.project(SQUARE, v)),
    Row("geometry.project(seed)", lambda v: geometry.project(SQUARE, "PCA", v), valid=lambda v: whole(v, 0, 2**32 - 1)),
    Row("geometry.random_map(n)", geometry.random_map, valid=lambda v: whole(v, 1, 10**8)),
    Row("geometry.map_runs(seeds)", lambda v: geometry.map_runs({"points": SQUARE, "k": 1, "coords": {}}, v),
        valid=seeds_list(100)),
    Row("geometry.analogy(exclude_inputs)", lambda v: geometry.analogy(KV, "king", "man", "woman", exclude_inputs=v), valid=switch),
    Row("geometry.neighbourhood_kept(k)", lambda v: geometry.neighbourhood_kept(SQUARE, SQUARE[:, :2], v), valid=lambda v: whole(v, 1, 2)),
    Row("qkv.three_words_query(token)", lambda v: qkv.three_words_query(token=v)),
    Row("qkv.three_words_query(query)", lambda v: qkv.three_words_query(query=v), valid=lambda v: v is None),
    Row("qkv.three_words_query(scale)", lambda v: qkv.three_words_query(scale=v), valid=switch),
    Row("qkv.three_words_query(causal)", lambda v: qkv.three_words_query(causal=v), valid=switch),
    Row("qkv.attention_steps(causal)", lambda v: qkv.attention_steps(SQUARE, SQUARE, SQUARE, SQUARE, causal=v), valid=switch),
    Row("qkv.softmax_share(index)", lambda v: qkv.softmax_share([1.0, 2.0], v), valid=lambda v: whole(v, -2, 1)),
    Row("qkv.softmax_share(d)", lambda v: qkv.softmax_share([1.0, 2.0], 0, v),
        valid=lambda v: v is None or number(v, 0, low_open=True)),
    Row("scaling.dot_spread(dims)", lambda v: scaling.dot_spread(v, n=16),
        valid=lambda v: whole(v, 1, 10**6) or isinstance(v, (list, tuple)) and 1 <= len(v) <= 64 and all(whole(d, 1, 10**6) for d in v)),
    Row("scaling.dot_spread(n)", lambda v: scaling.dot_spread((2,), n=v), valid=lambda v: whole(v, 1, 10**6)),
    Row("scaling.dot_spread(seed)", lambda v: scaling.dot_spread((2,), n=16, seed=v), valid=lambda v: whole(v, 0, 2**32 - 1)),
    Row("scaling.gradient_by_dim(n_queries)", lambda v: scaling.gradient_by_dim((2,), n_queries=v), valid=lambda v: whole(v, 1, 1000)),
    Row("scaling.gradient_by_dim(seed)", lambda v: scaling.gradient_by_dim((2,), n_queries=4, seed=v),
        valid=lambda v: whole(v, 0, 2**32 - 1)),
    Row("scaling.six_keys(seed)", lambda v: scaling.six_keys(seed=v), valid=lambda v: whole(v, 0, 2**32 - 1)),
    Row("scaling.softmax_jacobian(weights)", scaling.softmax_jacobian, valid=softmax_output),
    Row("scaling.weight_gradient(index)", lambda v: scaling.weight_gradient([1.0, 2.0, 3.0], v), valid=lambda v: whole(v, 0, 2)),
    Row("scaling.weight_gradient(divide_by)", lambda v: scaling.weight_gradient([1.0, 2.0, 3.0], 0, v),
        valid=lambda v: number(v, 0, low_open=True)),
    Row("scaling.explore(scaled)", lambda v: scaling.explore(4, v), valid=switch),
    Row("scaling.train_with_and_without_scaling(seeds)", lambda v: scaling.train_with_and_without_scaling(v, steps=1),
        valid=lambda v: isinstance(v, (list, tuple)) and 1 <= len(v) <= 20 and all(whole(x, 0, 2**32 - 1) for x in v)),
    Row("scaling.train_with_and_without_scaling(steps)", lambda v: scaling.train_with_and_without_scaling((0,), steps=v),
        valid=lambda v: whole(v, 1, 10_000)),
    Row("scaling.train_with_and_without_scaling(lr)", lambda v: scaling.train_with_and_without_scaling((0,), steps=1, lr=v),
        valid=lambda v: number(v, 0, low_open=True)),
    Row("scaling.train_with_and_without_scaling(stop_after)",
        lambda v: scaling.train_with_and_without_scaling((0,), steps=2, stop_after=v), valid=lambda v: v is None or whole(v, 1, 2)),
    Row("masking.causal_mask(T)", masking.causal_mask, valid=lambda v: whole(v, 1, 10_000)),
    Row("masking.lecture_mask(T)", masking.lecture_mask, valid=lambda v: whole(v, 1, 10_000)),
    Row("masking.apply_mask(scores)", masking.apply_mask),
    Row("masking.apply_mask(mask)", lambda v: masking.apply_mask(SQUARE, v), valid=lambda v: v is None),
    Row("masking.causal_attention(q)", lambda v: masking.causal_attention(v, torch.zeros(1, 1, 4, 2), torch.zeros(1, 1, 4, 2))),
    Row("masking.sample_sentences(n)", lambda v: masking.sample_sentences(CAT, CAT_WORLD, n=v), valid=lambda v: whole(v, 1, 10_000)),
    Row("masking.sample_sentences(seed)", lambda v: masking.sample_sentences(CAT, CAT_WORLD, n=2, seed=v),
        valid=lambda v: whole(v, 0, 2**32 - 2)),
    Row("masking.sample_sentences(causal)", lambda v: masking.sample_sentences(CAT, CAT_WORLD, n=2, causal=v), valid=switch),
    Row("masking.attention_maps(causal)", lambda v: masking.attention_maps(CAT, CAT_WORLD, "<BOS> the cat", causal=v), valid=switch),
    Row("masking.prefix_scores(causal)", lambda v: masking.prefix_scores(CAT, CAT_WORLD, causal=v), valid=switch),
    Row("masking.train_without_mask(seed)", lambda v: masking.train_without_mask(CAT_WORLD, seed=v, steps=1),
        valid=lambda v: whole(v, 0, 2**32 - 1)),
    Row("masking.train_without_mask(steps)", lambda v: masking.train_without_mask(CAT_WORLD, steps=v), valid=lambda v: whole(v, 1, 5_000)),
    Row("masking.leak(seed)", lambda v: masking.leak(seed=v), state=torch_rng, valid=lambda v: whole(v, 0, 2**32 - 1)),
    Row("masking.leak(d_model)", lambda v: masking.leak(d_model=v), state=torch_rng, valid=lambda v: whole(v, 1, 4000)),
    Row("masking.leak(T)", lambda v: masking.leak(T=v), state=torch_rng, valid=lambda v: whole(v, 1, 4000)),
    Row("masking.dropout_demo(p)", lambda v: masking.dropout_demo(p=v), state=torch_rng, valid=lambda v: number(v, 0, 0.999)),
    Row("masking.dropout_demo(n)", lambda v: masking.dropout_demo(n=v), state=torch_rng, valid=lambda v: whole(v, 1, 10**8)),
    Row("masking.dropout_demo(seed)", lambda v: masking.dropout_demo(seed=v), state=torch_rng, valid=lambda v: whole(v, 0, 2**32 - 1)),
] + [check_row(name, check, answer, given, arg, valid) for name, check, answer, given, args in GEOMETRY_CHECK_CASES
     for arg, valid in args.items()]

# ---------------------------------------------------------------- chapters 05-08 (heads, positions, mlp, normalization)

from helpers import weights as shipped  # noqa: E402
from helpers.heads import checks as k05, compute as h05  # noqa: E402
from helpers.mlp import checks as k07, compute as m07  # noqa: E402
from helpers.normalization import checks as k08, compute as n08, explorer as e08  # noqa: E402
from helpers.positions import checks as k06, compute as p06  # noqa: E402

CAT_0508 = shipped.load_cat()
CURVES = n08.load_curves()
CAT_TRACE = CAT_0508(torch.tensor([0, 1, 2]), trace=True)
X3 = np.array([1.0, 2.0, 4.0])
FEW = {"tokens": np.array(["a", "b"]), "next": np.array(["b", "a"]), "contexts": np.array(["a", "a b"]),
       "act": {0: np.zeros((2, 3))}}   # a collect_activations dict of one layer, two positions


def check_refused(value, result):
    """An exercise check given a bad argument of its own: one sentence saying the cell gave it what it cannot use."""
    assert len(result) == 1 and result[0].startswith("the check cannot use what the check cell gives it"), result
    one_sentence(result[0])


def even_width(most):
    return lambda v: whole(v, 2, most) and v % 2 == 0


WORLD_0508 = worlds.cat_world()
SLIP_CASE = h05.module_cases()[0]
SLIP_ARGS = {"x": SLIP_CASE["x"], "state": SLIP_CASE["state"], "n_heads": SLIP_CASE["args"][1], "slip": None}
REFERENCE_LOSSES = (3.0, 1.0)   # a unigram and a best loss (what nz.reference_losses gives, near enough)


def losses_valid(v):
    """A run's losses: a non-empty 1-D array of numbers (NaN counts: a diverged step), not True/False."""
    try:
        x = np.asarray(v)
        as_float = np.asarray(v, dtype=float)
    except (TypeError, ValueError, OverflowError, RecursionError):
        return False
    return type(v) not in (bool, np.bool_) and x.dtype.kind in "iuf" and as_float.ndim == 1 and len(as_float) > 0


def any_number(v):
    """significant's value: any real number a float holds, NaN and inf included."""
    try:
        float(v)
    except (TypeError, ValueError, OverflowError):
        return False
    return type(v) not in (bool, np.bool_) and isinstance(v, (int, float, np.integer, np.floating))


CHAPTERS_05_08_ROWS = [
    # red team round 4
    Row("heads.head_view(cache)", lambda v: h05.head_view("cat", cache=v), valid=lambda v: v is None or isinstance(v, dict)),
    Row("mlp.MLP.forward(x)", m07.MLP(6, 8)),
    Row("mlp.value_readout(top)", lambda v: m07.value_readout(CAT_0508, 0, 0, top=v), valid=lambda v: whole(v, 1, 20)),
    Row("normalization.LayerNorm.forward(x)", n08.LayerNorm(4)),
    Row("normalization.gamma_for_range(z)", lambda v: n08.gamma_for_range(v, np.zeros(2), 1.0)),
    Row("normalization.unigram_loss(targets)", n08.unigram_loss,
        valid=lambda v: isinstance(v, (list, tuple)) and 0 < len(v) and all(type(i) is int and i >= 0 for i in v)),
    Row("positions.shifted_loss(targets)", lambda v: p06.shifted_loss(CAT_0508, torch.tensor([[1, 2]]), v, 0)),
    Row("heads.even_weights(T)", h05.even_weights, valid=lambda v: whole(v, 1, 11_585)),
    Row("heads.attention_parameters(d_model)", h05.attention_parameters, valid=lambda v: whole(v, 1, math.inf)),
    Row("heads.attention_parameters(bias)", lambda v: h05.attention_parameters(4, v), valid=switch),
    Row("heads.MultiHeadAttention(bias)", lambda v: h05.MultiHeadAttention(4, 2, v), valid=switch),
    Row("heads.MultiHeadAttention(d_model)", lambda v: h05.MultiHeadAttention(v, 1), valid=lambda v: whole(v, 1, 64)),
    Row("heads.head_view(layer)", lambda v: h05.head_view("cat", layer=v), valid=lambda v: whole(v, 0, 1)),
    Row("heads.head_view(head)", lambda v: h05.head_view("cat", head=v), valid=lambda v: whole(v, 0, 1)),
    Row("heads.checks.split(n_heads)", lambda v: k05.split.feedback(np.zeros((1, 3, 2, 2)), np.zeros((1, 2, 6)), v),
        check_refused, valid=lambda v: whole(v, 1, 6) and 6 % v == 0),
    Row("heads.checks.split(q)", lambda v: k05.split.feedback(np.zeros((1, 3, 2, 2)), v, 3), check_refused),
    Row("positions.sinusoidal_positions(n)", lambda v: p06.sinusoidal_positions(v, 8),
        valid=lambda v: whole(v, 1, 16_777_216)),
    Row("positions.sinusoidal_positions(d)", lambda v: p06.sinusoidal_positions(4, v), valid=even_width(33_554_432)),
    Row("positions.rope_scores(n)", lambda v: p06.rope_scores(np.ones(4), np.ones(4), v), valid=lambda v: whole(v, 1, 14_188)),
    Row("positions.permutation_matrix(perm)", p06.permutation_matrix),
    Row("positions.offset_rotation(k)", lambda v: p06.offset_rotation(v, 4), valid=number),
    Row("positions.offset_rotation(d)", lambda v: p06.offset_rotation(1, v), valid=even_width(14_188)),
    Row("positions.offset_rotation(base)", lambda v: p06.offset_rotation(1, 4, v),
        valid=lambda v: number(v, 0, math.inf, low_open=True)),
    Row("positions.random_attention(seed)", lambda v: p06.random_attention(2, v), valid=lambda v: whole(v, 0, 2**32 - 1)),
    Row("positions.attention_stack(causal)", lambda v: p06.attention_stack(np.ones((2, 2)), [], causal=v), valid=switch),
    *[Row(f"positions.order_demo({name})", lambda v, name=name: p06.order_demo(["a", "b"], ["b", "a"], **{name: v}),
          valid=switch) for name in ("causal", "positions")],
    Row("positions.scramble(seed)", lambda v: p06.scramble(["<BOS>", "a", "b", "c"], v), valid=lambda v: whole(v, 0, 2**32 - 1)),
    Row("positions.scramble(keep_last)", lambda v: p06.scramble(["<BOS>", "a", "b", "c"], 1, v), valid=switch),
    Row("positions.position_task(n)", p06.position_task, valid=lambda v: whole(v, 1, 11_184_810)),
    Row("positions.position_task(seed)", lambda v: p06.position_task(2, seed=v), valid=lambda v: whole(v, 0, 2**32 - 1)),
    Row("positions.position_probe(steps)", lambda v: p06.position_probe(0, steps=v), valid=lambda v: whole(v, 1, 10_000)),
    Row("positions.position_probe(causal)", lambda v: p06.position_probe(0, causal=v), valid=switch),
    Row("positions.position_probe(seed)", p06.position_probe, valid=lambda v: whole(v, 0, 2**32 - 1)),
    Row("positions.shifted_logits(shift)", lambda v: p06.shifted_logits(CAT_0508, torch.zeros(1, 3, dtype=torch.long), v),
        valid=lambda v: whole(v, 0, 1_000_000)),
    Row("positions.checks.offset_rotation(k)", lambda v: k06.offset_rotation.feedback(np.eye(6), v, 6), check_refused,
        valid=lambda v: whole(v, 1, 10_000)),
    Row("positions.checks.offset_rotation(d)", lambda v: k06.offset_rotation.feedback(np.eye(6), 2, v), check_refused,
        valid=even_width(1024)),
    Row("positions.checks.unscrambled(perm)", lambda v: k06.unscrambled.feedback(np.zeros((3, 2)), np.ones((3, 2)), v),
        check_refused),
    Row("positions.checks.sinusoidal_positions(cat)", lambda v: k06.sinusoidal_positions.feedback(lambda n, d: None, v),
        check_refused),
    Row("mlp.mlp_weights(layer)", lambda v: m07.mlp_weights(CAT_0508, v), valid=lambda v: whole(v, 0, 1)),
    Row("mlp.block_counts(layer)", lambda v: m07.block_counts(CAT_0508, v), valid=lambda v: whole(v, 0, 1)),
    Row("mlp.layer_parameters(bias)", lambda v: m07.layer_parameters(4, bias=v), valid=switch),
    Row("mlp.layer_parameters(ffn)", lambda v: m07.layer_parameters(4, ffn=v), valid=lambda v: v in ("gelu", "swiglu")),
    Row("mlp.layer_shares(active)", lambda v: m07.layer_shares("GPT-3", active=v), valid=switch),
    Row("mlp.MLP(bias)", lambda v: m07.MLP(4, 8, bias=v), valid=switch),
    Row("mlp.unit_profile(unit)", lambda v: m07.unit_profile(FEW, 0, v, ["a"]), valid=lambda v: whole(v, 0, 2)),
    Row("mlp.unit_means(layer)", lambda v: m07.unit_means(FEW, v, ["a"]), valid=lambda v: whole(v, 0, 0)),
    Row("mlp.checks.strongest_unit(layer)", lambda v: k07.strongest_unit.feedback(1, FEW, v, "a"), check_refused,
        valid=lambda v: whole(v, 0, 0)),
    Row("mlp.checks.gelu_values(x)", lambda v: k07.gelu_values.feedback(np.zeros(3), v), check_refused,
        valid=array_valid),
    Row("normalization.layer_norm_steps(eps)", lambda v: n08.layer_norm_steps(X3, eps=v), valid=lambda v: number(v, 0)),
    Row("normalization.rms_norm(eps)", lambda v: n08.rms_norm(X3, eps=v), valid=lambda v: number(v, 0, math.inf, low_open=True)),
    Row("normalization.LayerNorm(eps)", lambda v: n08.LayerNorm(3, eps=v), valid=lambda v: number(v, 0, math.inf, low_open=True)),
    Row("normalization.rounding_spread(n)", lambda v: n08.rounding_spread(X3, X3, X3, n=v),
        valid=lambda v: whole(v, 1, 8_388_608)),
    Row("normalization.rounding_spread(seed)", lambda v: n08.rounding_spread(X3, X3, X3, n=2, seed=v),
        valid=lambda v: whole(v, 0, 2**32 - 1)),
    Row("normalization.rounding_spread(half_width)", lambda v: n08.rounding_spread(X3, X3, X3, v, n=2),
        valid=lambda v: number(v, 0)),
    *[Row(f"normalization.train_stack({name})",
          lambda v, name=name: n08.train_stack(**{**dict(norm="pre", n_layers=2, lr=0.01, steps=1), name: v}), valid=ok)
      for name, ok in (("norm", lambda v: v in n08.PLACEMENTS), ("n_layers", lambda v: whole(v, 1, 64)),
                       ("lr", lambda v: number(v, 0, math.inf, low_open=True)), ("steps", lambda v: whole(v, 1, 10_000)),
                       ("seed", lambda v: whole(v, 0, 2**32 - 1)), ("batch", lambda v: v is None),
                       ("stop_after", lambda v: v is None or whole(v, 1, math.inf)))],
    Row("normalization.layer_gradients(seed)", lambda v: n08.layer_gradients("pre", 2, seed=v),
        valid=lambda v: whole(v, 0, 2**32 - 1)),
    Row("normalization.stack_view(n_layers)", lambda v: n08.stack_view(CURVES, v), valid=lambda v: v in (2, 4, 8, 12)),
    Row("normalization.stack_view(lr)", lambda v: n08.stack_view(CURVES, 8, v),
        valid=lambda v: number(v) and any(np.isclose(float(v), x) for x in CURVES["lrs"])),
    Row("normalization.explorer(n_layers)", lambda v: e08.explorer(CURVES, n_layers=v),
        valid=lambda v: type(v) is int and v in (2, 4, 8, 12)),
    Row("normalization.checks.residual_norms(n_layers)",
        lambda v: k08.residual_norms.feedback(np.zeros((5, 3)), CAT_TRACE, v), check_refused, valid=lambda v: whole(v, 1, 2)),
    Row("normalization.checks.steps_to_threshold(lr)",
        lambda v: k08.steps_to_threshold.feedback({"pre": 1, "post": 1, "none": 1}, CURVES, 8, v, 1.0), check_refused,
        valid=lambda v: number(v) and any(np.isclose(float(v), x) for x in CURVES["lrs"])),
    Row("normalization.checks.steps_to_threshold(threshold)",
        lambda v: k08.steps_to_threshold.feedback({"pre": 1, "post": 1, "none": 1}, CURVES, 8, 0.03, v), check_refused,
        valid=number),
    Row("normalization.checks.layer_norm_module(cat)", lambda v: k08.layer_norm_module.feedback(torch.nn.Module, v),
        check_refused),
    Row("positions.next_token_view(world)", lambda v: p06.next_token_view(CAT_0508, v, "<BOS> the cat")),
    Row("positions.next_token_view(model)", lambda v: p06.next_token_view(v, WORLD_0508, "<BOS> the cat")),
    Row("positions.model_order_demo(world)", lambda v: p06.model_order_demo(CAT_0508, v, ["the", "cat"], ["cat", "the"])),
    Row("positions.score_terms(ids)", lambda v: p06.score_terms(CAT_0508, v), valid=ids_of(20)),
    Row("mlp.collect_activations(sentences)", lambda v: m07.collect_activations(CAT_0508, WORLD_0508, v),
        valid=lambda v: v is None),
    Row("mlp.collect_activations(world)", lambda v: m07.collect_activations(CAT_0508, v, [["<BOS>", "the"]])),
    *[Row(f"heads.slipped_attention({name})", lambda v, name=name: h05.slipped_attention(**{**SLIP_ARGS, name: v}),
          valid=ok) for name, ok in (("x", lambda v: False), ("state", lambda v: False),
                                     ("n_heads", lambda v: whole(v, 1, 6) and 6 % v == 0), ("slip", lambda v: v is None))],
    Row("normalization.layer_norm_by_hand(x)", lambda v: n08.layer_norm_by_hand(v, X3, X3)),
    Row("normalization.run_outcome(loss)", lambda v: n08.run_outcome(v, *REFERENCE_LOSSES), valid=losses_valid),
    Row("normalization.run_outcome(near)", lambda v: n08.run_outcome([1.0], *REFERENCE_LOSSES, v),
        valid=lambda v: number(v, 0)),
    Row("normalization.final_text(unigram)", lambda v: n08.final_text([1.0], "pre", 2, v, 1.0), valid=lambda v: number(v, 0)),
    Row("normalization.final_text(loss)", lambda v: n08.final_text(v, "none", 8, *REFERENCE_LOSSES), valid=losses_valid),
    Row("normalization.learning_state(loss)", lambda v: n08.learning_state(v, 3.0), valid=losses_valid),
    Row("normalization.learning_state(unigram)", lambda v: n08.learning_state([1.0], v), valid=lambda v: number(v, 0)),
    Row("normalization.significant(value)", n08.significant, valid=any_number),
    Row("normalization.significant(digits)", lambda v: n08.significant(3.14159, v), valid=lambda v: whole(v, 1, 17)),
    Row("normalization.outcomes(curves)", lambda v: n08.outcomes(v, *REFERENCE_LOSSES)),
    Row("normalization.outcomes(best)", lambda v: n08.outcomes(CURVES, 3.0, v), valid=lambda v: number(v, 0)),
    Row("normalization.outcome_counts(found)", lambda v: n08.outcome_counts(v, "pre")),
    Row("normalization.outcome_counts(norm)", lambda v: n08.outcome_counts({}, v), valid=lambda v: v in n08.PLACEMENTS),
]

# ---------------------------------------------------------------- chapters 09-11 (sampling, ablation, real): explorers and checks

from helpers.real import checks as real_checks  # noqa: E402
from helpers.sampling import checks as sampling_checks  # noqa: E402
from helpers.weights import load_cat, load_dragon  # noqa: E402


def problems_of(check, *args):
    """A check's own sentences for these arguments, its refusal of a bad one raised (not shown)."""
    return list(check.problems(*args))


def kv_bytes_with(i):
    return lambda v: problems_of(sampling_checks.kv_bytes, 100, *[v if j == i else 4 for j in range(5)])


REPEATS = circuit.random_repeats(4, 10, V_SMOL, seed=0)
KV_NAMES = ("n_layers", "T", "n_heads", "d_k", "bytes_per_element")

from helpers.ablation import checks as k10, compute as a10  # noqa: E402
from helpers import patching as patching10  # noqa: E402

CAT_10 = load_cat()
TOK_10 = WORLD_0508.tokenizer
LENS_ARGS = {"trace": CAT_10(TOK_10.encode("<BOS> the dog sat"), trace=True), "point": "L0.h", "model": CAT_10}
DROP_ARGS = dict(zip(("model", "task_ids", "class_ids", "reference_ids", "off_task_ids"),
                     (CAT_10, *a10.copula_prompts(WORLD_0508)[:2], a10.copula_prompts(WORLD_0508)[0],
                      a10.rule_reference(WORLD_0508, "all"))))
GRID_ARGS = {"model": CAT_10, "clean_ids": TOK_10.encode("<BOS> the dog was"),
             "corrupt_ids": TOK_10.encode("<BOS> the floor was"), "metric": a10.logit_difference(WORLD_0508)}
ATTRIBUTION_ARGS = {"model": CAT_10, "parts": patching10.residual_parts(CAT_10, TOK_10.encode("<BOS> the cat is"))[0],
                    "direction": torch.ones(20), "scale": 1.0}
ABLATION_CHECK_CASES = (
    ("lens_row", k10.lens_row, np.zeros((4, 20)), LENS_ARGS, {}),
    ("mean_ablation_drop", k10.mean_ablation_drop, lambda *a: None, DROP_ARGS, {}),
    ("patch_grid", k10.patch_grid, lambda *a: None, GRID_ARGS, {}),
    ("direct_attribution", k10.direct_attribution, lambda *a: None, ATTRIBUTION_ARGS,
     {"scale": lambda v: number(v, 0, math.inf, low_open=True)}),
)
CHAPTERS_09_11_ROWS = [
    *[Row(f"sampling.checks.kv_bytes({name})", kv_bytes_with(i), valid=lambda v: whole(v, 1, 10**9))
      for i, name in enumerate(KV_NAMES)],
    Row("sampling.checks.tempered(logits)", lambda v: problems_of(sampling_checks.tempered, np.array([0.5, 0.5]), v, 1.0),
        valid=lambda v: logits_valid(v) or probs_valid(v)),
    Row("sampling.checks.tempered(temperature)", lambda v: problems_of(sampling_checks.tempered, np.array([0.5, 0.5]),
                                                                       [1.0, 1.0], v), valid=lambda v: number(v, 0, low_open=True)),
    Row("sampling.checks.generate_loop(cat)", lambda v: problems_of(sampling_checks.generate_loop, print, v, load_dragon())),
    Row("sampling.checks.generate_loop(dragon)", lambda v: problems_of(sampling_checks.generate_loop, print, load_cat(), v)),
    Row("real.checks.layer_parameters(cfg)", lambda v: problems_of(real_checks.layer_parameters, lambda cfg: 0, v)),
    *([Row(f"real.checks.head_scan({name})",
           lambda v, i=i: problems_of(real_checks.head_scan, lambda m, ids, L: None,
                                      *[v if j == i else a for j, a in enumerate((smol()[0], REPEATS[0], 10))]),
           valid=(lambda v: type(v) is int and v == 10) if name == "length" else None)
       for i, name in enumerate(("model", "ids", "length"))] if HAVE_SMOL else []),
    *([Row(f"real.checks.kv_growth({name})",
           lambda v, i=i: problems_of(real_checks.kv_growth, lambda m, ids: None,
                                      *[v if j == i else a for j, a in enumerate((smol()[0], REPEATS[0]))]),
           valid=ids_of(V_SMOL) if name == "ids" else None)
       for i, name in enumerate(("model", "ids"))] if HAVE_SMOL else []),
    *([Row(f"real.checks.ablated_copy_loss({name})",
           lambda v, i=i: problems_of(real_checks.ablated_copy_loss, print,
                                      *[v if j == i else a for j, a in enumerate((smol()[0], REPEATS, [(4, 0)]))]))
       for i, name in enumerate(("model", "seqs", "heads_off"))] if HAVE_SMOL else []),
    *[Row(f"ablation.checks.{title}({name})",
          lambda v, check=check, answer=answer, args=args, name=name: check.feedback(answer, **{**args, name: v}),
          check_refused, valid=valid.get(name)) for title, check, answer, args, valid in ABLATION_CHECK_CASES
      for name in args],
]

# ---------------------------------------------------------------- the model's capture, the cat lab, readout, the GPT's loop

from helpers import readout  # noqa: E402

CAT_WORLD = worlds.cat_world()
CAT_MODEL = Transformer(Config(vocab_size=len(CAT_WORLD.tokenizer), d_model=8, n_heads=2, n_layers=1, d_ff=8), seed=0)
FOUR = ["a", "b", "c", "d"]
LOOP = dict(model=TINY, train_ids=IDS[:2000], val_ids=IDS[2000:], steps=2, batch=2, context=16, lr=1e-3, warmup=1,
            min_lr=1e-4, clip=1.0, eval_every=1, eval_batches=1)


def small_matrix(v):
    """What format_matrix writes: a real array of at most 2 axes and 1,000 x 1,000 numbers (NaN and inf shown)."""
    try:
        x = np.asarray(v, dtype=float)
    except (TypeError, ValueError, OverflowError, RecursionError):
        return False
    return type(v) not in (bool, np.bool_) and x.ndim <= 2 and all(n <= 1000 for n in x.shape)


def labels_for(rows):
    return lambda v: not isinstance(v, (str, bytes)) and hasattr(v, "__len__") and len(v) == rows


SHARED_ROWS = [
    Row("model(ids, **unknown switch)", lambda v: MODEL(PROMPT, casual=v), state=weights),
    Row("patching.capture(replace[name])", lambda v: patching.capture(MODEL, PROMPT, ["L0.h"], replace={"L0.h": v})),
    Row("circuit.capture(replace)", lambda v: circuit.capture(MODEL, PAIR, ["L0.h"], replace=v),
        valid=lambda v: v is None or v == {}),
    Row("circuit.capture(replace[name])", lambda v: circuit.capture(MODEL, PAIR, ["L0.h"], replace={"L0.h": v})),
    Row("readout.format_matrix(x)", readout.format_matrix, valid=small_matrix),
    Row("readout.format_matrix(row_labels)", lambda v: readout.format_matrix(np.ones((2, 2)), v),
        valid=lambda v: v is None or labels_for(2)(v)),
    Row("readout.format_matrix(decimals)", lambda v: readout.format_matrix(np.ones((2, 2)), decimals=v),
        valid=lambda v: whole(v, 0, 20)),
    Row("readout.format_step(name)", lambda v: readout.format_step(v, torch.ones(2, 2)), valid=lambda v: type(v) is str),
    Row("readout.format_step(x)", lambda v: readout.format_step("L0.q", v)),
    Row("readout.print_trace(trace)", readout.print_trace, valid=lambda v: v == {}),
    Row("readout.print_trace(names)", lambda v: readout.print_trace({"h0": torch.ones(2, 2)}, names=v),
        valid=lambda v: v is None or v == []),
    Row("readout.top_tokens(probs)", lambda v: readout.top_tokens(v, FOUR, 2),
        valid=lambda v: probs_valid(v) and len(v) == 4),
    Row("readout.top_tokens(vocab)", lambda v: readout.top_tokens(PROBS, v, 2),
        valid=lambda v: isinstance(v, (list, tuple)) and len(v) == 4),
    Row("readout.top_tokens(k)", lambda v: readout.top_tokens(PROBS, FOUR, v), valid=lambda v: whole(v, 1, 4)),
    Row("readout.top_tokens(logits)", lambda v: readout.top_tokens(PROBS, FOUR, 2, logits=v),
        valid=lambda v: v is None or array_valid(v, finite=False) and np.shape(v) == (4,)),
    Row("readout.print_top(probs)", lambda v: readout.print_top(v, FOUR, 2), valid=lambda v: probs_valid(v) and len(v) == 4),
    Row("worlds.next_token_probs(model)", lambda v: worlds.next_token_probs(v, CAT_WORLD, [["<BOS>"]])),
    Row("worlds.next_token_probs(world)", lambda v: worlds.next_token_probs(CAT_MODEL, v, [["<BOS>"]])),
    Row("worlds.next_token_probs(prompts)", lambda v: worlds.next_token_probs(CAT_MODEL, CAT_WORLD, v)),
    Row("worlds.next_token_probs(**unknown switch)",
        lambda v: worlds.next_token_probs(CAT_MODEL, CAT_WORLD, [["<BOS>"]], casual=v)),
    Row("GPT.forward(**unknown switch)", lambda v: TINY(IDS[:5], causal=v)),
    Row("gpt.evaluate(batches)", lambda v: gpt.evaluate(TINY, IDS, 16, v, 2, 0), valid=lambda v: whole(v, 1, 1000)),
    Row("gpt.evaluate(train_mode)", lambda v: gpt.evaluate(TINY, IDS, 16, 1, 2, 0, train_mode=v), valid=switch),
    Row("gtrain.learning_rate(steps)", lambda v: gtrain.learning_rate(0, 1e-3, 0, v, 1e-4),
        valid=lambda v: whole(v, 1, 100_000)),
    *[Row(f"gpt.train_loop({name})", lambda v, name=name: gpt.train_loop(**{**LOOP, name: v}), state=lambda: weights(TINY),
          valid=ok)
      for name, ok in (("model", None), ("train_ids", None), ("steps", lambda v: whole(v, 2, 100_000)),
                       ("batch", lambda v: whole(v, 1, 10**3)), ("context", lambda v: whole(v, 1, 32)),
                       ("lr", lambda v: number(v, 1e-4)), ("warmup", lambda v: whole(v, 0, 1)),
                       ("min_lr", lambda v: number(v, 0, 1e-3)), ("clip", lambda v: number(v, 0, low_open=True)),
                       ("eval_every", lambda v: whole(v, 1, 10**5000)), ("eval_batches", lambda v: whole(v, 1, 1000)),
                       ("seed", lambda v: whole(v, 0, 2**32 - 1)), ("callback", lambda v: v is None or callable(v)),
                       ("slip", lambda v: v is None or v in gpt.LOOP_SLIPS and type(v) is str))],
    *([Row("real.patching_view(the same answer twice)", lambda v: real.patching_view(*smol(), answers=(v, v)))]
      if HAVE_SMOL else []),
    # helpers/worlds.py and helpers/gpt/compute.py (redshared2)
    *[Row(f"worlds.{fn.__name__}(sentences)", lambda v, fn=fn: fn(CAT_MODEL, CAT_WORLD, v), valid=lambda v: v is None)
      for fn in (worlds.copula_report, worlds.slot_accuracy, worlds.rule_accuracy)],
    *[Row(f"worlds.{fn.__name__}(world)", lambda v, fn=fn: fn(CAT_MODEL, v))
      for fn in (worlds.copula_report, worlds.cat_targets)],
    *[Row(f"worlds.{fn.__name__}(sentences)", fn)
      for fn in (worlds.decisions, worlds.entropy_floor, worlds.best_possible_accuracy)],
    Row("World.batch(sentences)", CAT_WORLD.batch),
    Row("worlds.adjectives_of(noun)", worlds.adjectives_of),
    Row("worlds.induction_vocab(vocab_size)", worlds.induction_vocab, valid=lambda v: whole(v, 1, 37)),
    Row("worlds.token_ids(V)", lambda v: worlds.token_ids([1], v), valid=lambda v: whole(v, 2, 10**5000)),
    Row("worlds.induction_prompt(n_max)", lambda v: worlds.induction_prompt(4, 0, n_max=v),
        valid=lambda v: whole(v, 9, 10**5000)),
    Row("worlds.induction_prompt(vocab_size)", lambda v: worlds.induction_prompt(4, 0, vocab_size=v),
        valid=lambda v: whole(v, 2, 2**63 - 1)),
    Row("worlds.repeated_tokens(vocab_size)", lambda v: worlds.repeated_tokens(2, 4, v, 0),
        valid=lambda v: whole(v, 2, 2**63 - 1)),
    Row("gpt.cat_world_case(cat)", gpt.cat_world_case),
    Row("gpt.slipped_logits(cat)", lambda v: gpt.slipped_logits(v, CAT_WORLD.tokenizer.encode("<BOS> the cat"), "no_positions")),
    Row("gpt.slipped_logits(ids)", lambda v: gpt.slipped_logits(CAT_MODEL, v, "no_positions"), valid=ids_of(20)),
    Row("gpt.slipped_logits(slip)", lambda v: gpt.slipped_logits(CAT_MODEL, CAT_WORLD.tokenizer.encode("<BOS> the"), v)),
    Row("gpt.optimizer_for(model)", lambda v: gpt.optimizer_for(v, 1e-3)),
    Row("gpt.optimizer_for(lr)", lambda v: gpt.optimizer_for(TINY, v), valid=lambda v: number(v, 0, 10, low_open=True)),
    Row("gpt.optimizer_for(weight_decay)", lambda v: gpt.optimizer_for(TINY, 1e-3, v), valid=lambda v: number(v, 0, 10)),
    Row("gpt.optimizer_for(slip)", lambda v: gpt.optimizer_for(TINY, 1e-3, slip=v),
        valid=lambda v: v is None or type(v) is str and v in gpt.LOOP_SLIPS),
    Row("gpt.sample_text(prompt)", lambda v: gpt.sample_text(TINY, CHARS, v, 2),
        valid=lambda v: type(v) is str and 0 < len(v) <= 100_000 and set(v) <= set(CHARS.ids)),
    Row("gpt.sample_text(temperature)", lambda v: gpt.sample_text(TINY, CHARS, "A", 2, temperature=v),
        valid=lambda v: number(v, 0, 1e300)),
    Row("gpt.sample_text(context)", lambda v: gpt.sample_text(TINY, CHARS, "A", 2, context=v),
        valid=lambda v: v is None or whole(v, 1, 32)),
    Row("gpt.step_seconds(trials)", lambda v: gpt.step_seconds(TINY, IDS, 2, 16, trials=v), valid=lambda v: whole(v, 1, 100)),
]

# ---------------------------------------------------------------- red team round 3: the limits of time

from helpers import training  # noqa: E402
from helpers.gpt import shipped as gpt_shipped  # noqa: E402
SMALL_BPE = tk.BPETokenizer(tk.train_bpe(CHARS.text(IDS), 300))
from helpers.heads import explorer as heads_explorer  # noqa: E402
from helpers.masking import explorer as masking_explorer  # noqa: E402

CAT_BATCH = CAT_WORLD.batch(CAT_WORLD.train[:4])
LIVE = dict(loop=gpt.train_loop, model=TINY, train_ids=IDS[:2000], val_ids=IDS[2000:], tokenizer=CHARS, batch=2,
            context=16, lr=1e-3, warmup=1, min_lr=1e-4, clip=1.0, eval_every=1, eval_batches=1)
MAPS = [np.eye(3)] * 2
TIME_ROWS = [
    Row("training.train(steps)", lambda v: training.train(CAT_MODEL, CAT_BATCH, steps=v, progress=False),
        state=lambda: weights(CAT_MODEL)),
    Row("training.train(batches)", lambda v: training.train(CAT_MODEL, v, steps=1, progress=False),
        state=lambda: weights(CAT_MODEL)),
    Row("gpt.live_run(seconds)", lambda v: gpt.live_run(**LIVE, seconds=v), state=lambda: weights(TINY)),
    Row("sampling.step_seconds(repeats)", lambda v: sampling.step_seconds(MODEL, [2], repeats=v),
        valid=lambda v: whole(v, 1, 100)),
    Row("sampling.step_seconds(lengths)", lambda v: sampling.step_seconds(MODEL, v, repeats=1),
        valid=lambda v: isinstance(v, (list, tuple)) and 0 < len(v) <= 20 and all(whole(T, 2, 16) for T in v)),
    *[Row(f"masking.maps_view({name})", lambda v, name=name: masking_explorer.maps_view(**{name: v}))
      for name in ("n_layers", "n_heads", "size")],
    Row("heads.maps_figure(grid)", lambda v: heads_explorer.maps_figure(MAPS, "abc", ["x", "y"], grid=v)),
    Row("heads.maps_figure(size)", lambda v: heads_explorer.maps_figure(MAPS, "abc", ["x", "y"], size=v)),
    Row("heads.maps_figure(numbers)", lambda v: heads_explorer.maps_figure(MAPS, "abc", ["x", "y"], numbers=v),
        valid=switch),
    Row("heads.maps_figure(maps)", lambda v: heads_explorer.maps_figure([v, v], "abc", ["x", "y"])),
]


# ---------------------------------------------------------------- red team round 3: the limits of memory

from helpers import recipes  # noqa: E402
from helpers.tour import compute as tour  # noqa: E402

MEMORY_ROWS = [
    Row("tour.first_losses(seeds)", lambda v: tour.first_losses(CAT_MODEL.cfg, CAT_WORLD, v, "small"),
        valid=lambda v: isinstance(v, (list, tuple)) and 1 <= len(v) <= 100 and all(whole(s, 0, 2**32 - 1) for s in v)),
    Row("geometry.knn(points)", lambda v: geometry.knn(v, 1)),
    Row("normalization.residual_names(n_layers)", n08.residual_names, valid=lambda v: whole(v, 1, 1000)),
    Row("positions.random_attention(n_layers)", lambda v: p06.random_attention(4, 0, n_layers=v),
        valid=lambda v: whole(v, 1, 1000)),
    *[Row(f"recipes.induction_batch({name})", lambda v, name=name: recipes.induction_batch(**{"step": 0, name: v}),
          valid=ok) for name, ok in (("step", lambda v: whole(v, 0, 2**64 - 1 - 10_000)), ("batch", lambda v: whole(v, 1, 4096)),
                                     ("seed", lambda v: whole(v, 0, 2**32 - 1)))],
    Row("normalization.load_curves(path)", n08.load_curves, valid=lambda v: v is None),
    Row("corpus.load_text(path)", corpus.load_text, valid=lambda v: v is None),
    Row("grading.recorded_answers(path)", grading.recorded_answers),
]


@pytest.mark.parametrize("read", [n08.load_curves, corpus.load_text, grading.recorded_answers])
@pytest.mark.parametrize("path, words", [("/dev/zero", "regular file"), ("/etc/hostname", "hostname"),
                                         ("/no/such/file", "/no/such/file")])
def test_a_file_a_learner_names_is_read_only_if_regular_small_and_right(read, path, words):
    """/dev/zero was read until memory ran out and another file's text gave a JSONDecodeError (red team
    round 3): a device is refused before it is opened, a file of the wrong kind with a sentence."""
    with pytest.raises(CourseInputError) as refused:
        read(path)
    one_sentence(str(refused.value))
    assert words in str(refused.value)


def test_attention_too_large_for_memory_is_refused_before_it_is_computed():
    """10**5 rows of X (80 GB of scores) and T = 20,000 (1.6 GB) were tracebacks (red team round 3)."""
    X, W = np.zeros((10**5, 2)), np.zeros((2, 2))
    with pytest.raises(CourseInputError, match="attention_steps on 100,000 rows of X should need at most 1.5 GiB"):
        qkv.attention_steps(X, W, W, W)
    q = torch.zeros(1, 1, 20_000, 1)
    with pytest.raises(CourseInputError, match="causal attention on 20,000 queries and 20,000 keys"):
        masking.causal_attention(q, q, q)
    with pytest.raises(CourseInputError, match="points should have 1 to 5,000 rows, but has 100,000"):
        geometry.knn(np.zeros((100_000, 2)), 3)
    with pytest.raises(CourseInputError, match="seeds should be a list of 1 to 100 seeds"):
        tour.first_losses(CAT_MODEL.cfg, CAT_WORLD, range(10**12), "small")


# ---------------------------------------------------------------- red team round 3: the tour's compute

CAT_SENTENCES = CAT_WORLD.train[:4]
TOUR_ROWS = [
    *[Row(f"tour.{fn.__name__}(model)", lambda v, fn=fn, rest=rest: fn(v, CAT_WORLD, *rest))
      for fn, rest in ((tour.prompt_view, ("<BOS> the cat",)), (tour.top_next, ("<BOS> the",)), (tour.copula_splits, ()),
                       (tour.mean_loss, ()), (tour.logit_spread, ()))],
    *[Row(f"tour.{fn.__name__}(world)", lambda v, fn=fn, rest=rest: fn(CAT_0508, v, *rest))
      for fn, rest in ((tour.prompt_view, ("<BOS> the cat",)), (tour.top_next, ("<BOS> the",)), (tour.copula_splits, ()),
                       (tour.mean_loss, ()))],
    Row("tour.copula_splits(the dragon world)", lambda v: tour.copula_splits(v, worlds.dragon_world()),
        valid=lambda v: False),
    Row("tour.prompt_view(prompt)", lambda v: tour.prompt_view(CAT_0508, CAT_WORLD, v)),
    Row("tour.prompt_view(attention)", lambda v: tour.prompt_view(CAT_0508, CAT_WORLD, "<BOS> the", attention=v),
        valid=switch),
    Row("tour.top_next(prompt)", lambda v: tour.top_next(CAT_0508, CAT_WORLD, v)),
    Row("tour.top_next(k)", lambda v: tour.top_next(CAT_0508, CAT_WORLD, "<BOS> the", k=v), valid=lambda v: whole(v, 1, 20)),
    Row("tour.mean_loss(sentences)", lambda v: tour.mean_loss(CAT_0508, CAT_WORLD, v), valid=lambda v: v is None),
    Row("tour.step_rows(trace)", lambda v: tour.step_rows(v, 0, 1, ["q"])),
    Row("tour.step_rows(position)", lambda v: tour.step_rows(CAT_TRACE, 0, v, ["q"]), valid=lambda v: whole(v, -3, 2)),
    Row("tour.step_rows(steps)", lambda v: tour.step_rows(CAT_TRACE, 0, 1, v), valid=lambda v: v == [] or v == ()),
    Row("tour.followers(sentences)", lambda v: tour.followers(v, "the")),
    Row("tour.followers(context)", lambda v: tour.followers(CAT_SENTENCES, v)),
]

# ---------------------------------------------------------------- red team round 3: tracebacks in compute helpers

X4, W4 = torch.zeros(3, 4), torch.zeros(4, 2)
COMPUTE_ROWS = [
    Row("geometry.arrows_figure(vectors)", geometry.arrows_figure),
    Row("geometry.arrows_figure(vectors[name])", lambda v: geometry.arrows_figure({"a": v}),
        valid=lambda v: array_valid(v) and np.shape(v) == (2,)),
    Row("geometry.arrows_figure(limit)", lambda v: geometry.arrows_figure({"a": (1, 2)}, limit=v),
        valid=lambda v: v is None or number(v, 0, low_open=True)),
    Row("geometry.pca_2d(points)", geometry.pca_2d),
    Row("qkv.attention_head(x)", lambda v: qkv.attention_head(v, W4, W4, W4, *[torch.zeros(2)] * 3)),
    Row("masking.count_within(values)", lambda v: masking.count_within(v, 0, 1),
        valid=lambda v: array_valid(v, finite=False, empty=True) and np.ndim(v) == 1),
    Row("masking.count_within(low)", lambda v: masking.count_within([0.5], v, 1),
        valid=lambda v: number(v) or type(v) in (float, np.float64) and math.isinf(v)),
    Row("masking.share_valid(sentences)", lambda v: masking.share_valid(v, CAT_WORLD)),
    Row("masking.share_valid(world)", lambda v: masking.share_valid(CAT_SENTENCES, v)),
    Row("masking.no_mask_stem(folder)", lambda v: masking.no_mask_stem(0, folder=v),
        valid=lambda v: v is None or type(v) is str and "\x00" not in v),
    Row("training.cosine_lr(steps)", lambda v: training.cosine_lr(0, v, 1e-3), valid=lambda v: whole(v, 1, 10**5000)),
    Row("training.cosine_lr(step)", lambda v: training.cosine_lr(v, 10, 1e-3), valid=lambda v: whole(v, 0, 10)),
    Row("training.timed(fn)", lambda v: training.timed(v), valid=callable),
    Row("patching.normalised(value)", lambda v: patching.normalised(v, 1.0, 0.0),
        valid=lambda v: number(v) or isinstance(v, np.ndarray) and v.dtype.kind == "f"),
    Row("patching.head_outputs(model)", lambda v: patching.head_outputs(v, PAIR)),
    Row("reference.layer_norm(eps)", lambda v: reference.layer_norm(np.ones((2, 3)), eps=v),
        valid=lambda v: number(v, 0, low_open=True)),
    Row("gpt.circuit_birth(history)", gpt.circuit_birth),
    Row("gpt.circuit_birth(share)", lambda v: gpt.circuit_birth(
        {"steps": [0, 1], "scores": np.ones((2, 1, 1)), "second": [2.0, 1.0]}, share=v), valid=lambda v: number(v, 0, 1, True)),
    Row("tokenize.merges(bpe)", tk.merges),
    Row("tokenize.pieces(bpe)", lambda v: tk.pieces(v, "ab")),
    Row("gpt.shipped.whole_text_loss(context)", lambda v: gpt_shipped.whole_text_loss(TINY, IDS[:100], context=v),
        valid=lambda v: whole(v, 1, 32)),
    Row("gpt.copy_rule(lengths)", lambda v: gpt.copy_rule(TINY, IDS[:200], v, context=16),
        valid=lambda v: isinstance(v, (list, tuple)) and len(v) > 0 and all(whole(k, 1, 16) for k in v)),
    Row("gpt.copy_rule(context)", lambda v: gpt.copy_rule(TINY, IDS[:200], [1, 2], context=v),
        valid=lambda v: whole(v, 2, 32)),
    Row("gpt.copy_rule(every)", lambda v: gpt.copy_rule(TINY, IDS[:200], [1], context=16, every=v),
        valid=lambda v: type(v) in (int, np.int64) and v >= 1),   # past the last window: the first alone
    Row("gpt.shipped.load_model(tokens)", gpt_shipped.load_model, valid=lambda v: v in ("characters", "bpe")),
    Row("gpt.shipped.load_log(tokens)", gpt_shipped.load_log, valid=lambda v: v in ("characters", "bpe")),
    Row("gpt.shipped.text_losses(tokenizer)", lambda v: gpt_shipped.text_losses(TINY, v, CHARS.text(IDS[:100])),
        valid=lambda v: False),
    Row("gpt.shipped.text_losses(text)", lambda v: gpt_shipped.text_losses(TINY, CHARS, v, context=16),
        valid=lambda v: isinstance(v, str) and len(v) > 16 and set(v) <= set(CHARS.vocab)),
    Row("tokenize.BPETokenizer(bpe)", tk.BPETokenizer),
    *[Row(f"tokenize.BPETokenizer.{name}(ids)", lambda v, name=name: getattr(SMALL_BPE, name)(v),
          valid=lambda v: isinstance(v, (list, tuple)) and all(whole(i, 0, len(SMALL_BPE) - 1) for i in v)
          or isinstance(v, torch.Tensor) and v.dim() == 1 and not v.is_floating_point() and v.dtype != torch.bool
          and bool(((v >= 0) & (v < len(SMALL_BPE))).all())) for name in ("text", "decode")],
    Row("tokenize.BPETokenizer.encode(text)", lambda v: SMALL_BPE.encode(v),
        valid=lambda v: isinstance(v, str) and 0 < len(v) <= tk.MAX_CHARS and not any(0xD800 <= ord(c) < 0xE000 for c in v)),
    Row("ablation.copy_log_prob(length)", lambda v: a10.copy_log_prob(torch.zeros(2, 9, dtype=torch.long), v),
        valid=lambda v: whole(v, 4, 4)),
    Row("ablation.resample_donors(lengths)", lambda v: a10.resample_donors(v, 0),
        valid=lambda v: array_valid(v) and np.ndim(v) == 1 and 2 <= len(v) <= 10_000
        and list(np.asarray(v, dtype=float)).count(max(v)) > 1),
    *[Row(f"ablation.donor_draws({name})", lambda v, name=name: a10.donor_draws(**{**dict(n=3, pool=3, draws=2, seed=0), name: v}),
          valid=ok) for name, ok in (("n", lambda v: whole(v, 1, 3)), ("pool", lambda v: whole(v, 3, 10**4)),
                                     ("draws", lambda v: whole(v, 1, 10**4)), ("seed", lambda v: whole(v, 0, 2**32 - 1)),
                                     ("avoid_self", switch), ("same", lambda v: v is None))],
    Row("weights.card(stem)", shipped.card),
    Row("weights.load(stem)", shipped.load),
    Row("weights.save(model)", lambda v: shipped.save(v, "/nonexistent-course-folder/model")),
    Row("weights.save(card)", lambda v: shipped.save(CAT_MODEL, "/nonexistent-course-folder/model", card=v),
        valid=lambda v: v is None or isinstance(v, dict)),   # (a valid card is not tried: it would be written)
    Row("ablation.copula_prompts(world)", a10.copula_prompts),   # red team round 4
    Row("ablation.copula_figures(rows)", lambda v: a10.copula_figures(CAT_MODEL, CAT_WORLD, rows=v),
        valid=lambda v: v is None or whole(v, 1, 10_000)),
    Row("ablation.induction_attention(length)", a10.induction_attention, valid=lambda v: whole(v, 1, 511)),
    Row("masking.maps_view(...)(maps)", masking_explorer.maps_view(2, 2)),
    Row("masking.mask_after_softmax(scores)", masking.mask_after_softmax),
    *[Row(f"worlds.{fn.__name__}(the dragon world on the cat model)", lambda v, fn=fn: fn(CAT_MODEL, worlds.dragon_world()),
          valid=lambda v: False) for fn in (worlds.copula_report, worlds.slot_accuracy)],
]

TABLE += CHAPTERS_01_04_ROWS + CHAPTERS_05_08_ROWS + CHAPTERS_09_11_ROWS + SHARED_ROWS + TIME_ROWS + MEMORY_ROWS \
    + TOUR_ROWS + COMPUTE_ROWS


def is_valid(row, value):
    try:
        return row.valid is not None and bool(row.valid(value))
    except Exception:   # noqa: BLE001 — a value the predicate cannot even look at is bad input
        return False


CASES = [(row, cls, i) for row in TABLE for cls in CLASSES for i in range(len(CLASSES[cls]))
         if not is_valid(row, CLASSES[cls][i])]
COUNTS = collections.Counter()


def describe(value):
    text = repr(value) if not isinstance(value, (str, list, bytes)) or len(value) < 40 else f"{type(value).__name__}[{len(value)}]"
    return text[:60]


@pytest.mark.parametrize("row, cls, i", CASES, ids=[f"{r.name}-{c}-{i}" for r, c, i in CASES])
def test_bad_input_gets_its_sentence_or_is_handled(row, cls, i, caplog):
    value = CLASSES[cls][i]
    before = row.state() if row.state else None
    COUNTS[cls] += 1
    with caplog.at_level(logging.WARNING):
        if row.expect == "refuses":
            with pytest.raises(row.raises) as refused:
                row.call(value)
            one_sentence(str(refused.value))
        else:
            row.expect(value, row.call(value))
    if row.state:
        assert row.state() == before, f"{row.name} changed its state on {describe(value)}"


def test_zz_counts_per_class():
    """Prints how many bad inputs each class had (run after the table: pytest keeps file order)."""
    lines = [f"{cls:<18}{COUNTS[cls]:>5}" for cls in CLASSES]
    print("\nred team, bad inputs per class:\n" + "\n".join(lines) + f"\n{'total':<18}{sum(COUNTS.values()):>5}")
    if COUNTS:
        assert set(COUNTS) <= set(CLASSES)
