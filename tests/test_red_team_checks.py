"""Red team (issue 31) for the explorers, the exercise checks' calls and sampling's slide: rows in
the form of tests/test_red_team.py (its Row, CLASSES and rule), each bad value tried on each row.

An explorer refuses a bad constructor argument with one sentence, before it draws or shows
anything, and a bad control value (``Explorer.set``, or a control's ``.value`` set directly) with
one sentence, leaving every control as it was (compared with a fresh explorer's)."""
import collections

import numpy as np
import pytest

pytest.importorskip("ipywidgets")

from test_red_team import CLASSES, Row, describe, is_valid, one_sentence, switch, whole  # noqa: E402

from helpers import worlds  # noqa: E402
from helpers.errors import CourseInputError  # noqa: E402
from helpers.heads import explorer as heads  # noqa: E402
from helpers.masking import explorer as masking  # noqa: E402
from helpers.qkv import explorer as qkv  # noqa: E402
from helpers.sampling import explorer as sampling_explorer  # noqa: E402
from helpers.scaling import explorer as scaling  # noqa: E402
from helpers.tour import explorer as tour  # noqa: E402
from helpers.weights import load_cat, load_dragon  # noqa: E402

CAT, CAT_WORLD = load_cat(), worlds.cat_world()
DRAGON, DRAGON_WORLD = load_dragon(), worlds.dragon_world()
BUILT = {}   # one explorer of each kind, built once with right arguments: the controls' rows move it


def built(kind):
    if kind not in BUILT:
        BUILT[kind] = {"heads": lambda: heads.explorer("induction"), "scaling": lambda: scaling.explorer(),
                       "qkv": lambda: qkv.explorer(), "masking": lambda: masking.explorer({"cat": CAT}, CAT_WORLD),
                       "tour": lambda: tour.explorer(CAT, CAT_WORLD),
                       "sampling": lambda: sampling_explorer.explorer(DRAGON, DRAGON_WORLD)}[kind]()
    return BUILT[kind]


def controls_state(kind):
    return lambda: tuple(sorted(built(kind).values().items()))


def text_valid(v):
    return isinstance(v, str) and len(v) <= 2000


CONSTRUCTOR_ROWS = [
    Row("heads.explorer(layer)", lambda v: heads.explorer("induction", layer=v), valid=lambda v: v is None or whole(v, 0, 1)),
    Row("heads.explorer(head)", lambda v: heads.explorer("induction", head=v), valid=lambda v: whole(v, 0, 3)),
    Row("heads.explorer(prompts)", lambda v: heads.explorer("induction", prompts=v), valid=lambda v: v is None),
    Row("scaling.explorer(d)", lambda v: scaling.explorer(d=v),
        valid=lambda v: type(v) in (int, float) and 2 <= v <= 1024),
    Row("scaling.explorer(scaled)", lambda v: scaling.explorer(scaled=v), valid=switch),
    Row("qkv.explorer(token)", lambda v: qkv.explorer(token=v)),
    Row("masking.explorer(models)", lambda v: masking.explorer(v, CAT_WORLD)),
    Row("masking.explorer(causal)", lambda v: masking.explorer({"cat": CAT}, CAT_WORLD, causal=v), valid=switch),
    Row("masking.explorer(prompt)", lambda v: masking.explorer({"cat": CAT}, CAT_WORLD, prompt=v), valid=text_valid),
    Row("tour.explorer(model)", lambda v: tour.explorer(v, CAT_WORLD)),
    Row("tour.explorer(world)", lambda v: tour.explorer(CAT, v)),
    Row("tour.explorer(prompt)", lambda v: tour.explorer(CAT, CAT_WORLD, prompt=v), valid=text_valid),
    Row("sampling.explorer(length)", lambda v: sampling_explorer.explorer(DRAGON, DRAGON_WORLD, length=v),
        valid=lambda v: v is None or whole(v, 1, 125)),
    Row("sampling.explorer(prompts)", lambda v: sampling_explorer.explorer(DRAGON, DRAGON_WORLD, prompts=v),
        valid=lambda v: v is None),   # None: the default prompt
]


def control_row(kind, name, valid=None):
    return Row(f"{kind} explorer.set({name})", lambda v: built(kind).set(**{name: v}), state=controls_state(kind),
               valid=valid)


CONTROL_ROWS = [
    control_row("heads", "layer", lambda v: whole(v, 0, 1)), control_row("heads", "head", lambda v: whole(v, 0, 3)),
    control_row("heads", "model"), control_row("heads", "prompt"),
    control_row("scaling", "d", lambda v: type(v) in (int, float) and 2 <= v <= 1024),
    control_row("scaling", "scaled", switch),
    control_row("qkv", "token"), control_row("qkv", "q0", lambda v: type(v) in (int, float) and -3 <= v <= 3),
    control_row("qkv", "scale", switch), control_row("qkv", "causal", switch),
    control_row("masking", "causal", switch), control_row("masking", "prompt", text_valid),
    control_row("masking", "model"),
    control_row("tour", "layer"), control_row("tour", "head"), control_row("tour", "attention", switch),
    control_row("tour", "prompt", text_valid),
    control_row("sampling", "temperature", lambda v: type(v) in (int, float) and 0 <= v <= 3),
    control_row("sampling", "top_k", lambda v: whole(v, 1, 10)),
    control_row("sampling", "top_p", lambda v: type(v) in (int, float) and 0.05 <= v <= 1),
    control_row("sampling", "seed", lambda v: whole(v, 0, 50)),
]

# the real model's explorer (chapter 11, SmolLM2): every constructor argument and control refused, never clamped
from helpers.real import compute as real_compute, explorer as real_explorer  # noqa: E402

REAL, REAL_TOK = real_compute.load()
REAL_SHOWN = []   # one real explorer, built once with right arguments


def real_built():
    if not REAL_SHOWN:
        REAL_SHOWN.append(real_explorer.explorer(REAL, REAL_TOK))
    return REAL_SHOWN[0]


def prompt_valid(v):
    return text_valid(v) and bool(v.strip()) and v.isprintable()


REAL_EXPLORER_ROWS = [
    Row("real.explorer(model)", lambda v: real_explorer.explorer(v, REAL_TOK)),
    Row("real.explorer(tok)", lambda v: real_explorer.explorer(REAL, v)),
    Row("real.explorer(layer)", lambda v: real_explorer.explorer(REAL, REAL_TOK, layer=v), valid=lambda v: whole(v, 0, 29)),
    Row("real.explorer(head)", lambda v: real_explorer.explorer(REAL, REAL_TOK, head=v), valid=lambda v: whole(v, 0, 8)),
    Row("real.explorer(prompt)", lambda v: real_explorer.explorer(REAL, REAL_TOK, prompt=v), valid=prompt_valid),
    Row("real explorer.set(layer)", lambda v: real_built().set(layer=v), valid=lambda v: whole(v, 0, 29),
        state=lambda: tuple(sorted(real_built().values().items()))),
    Row("real explorer.set(head)", lambda v: real_built().set(head=v), valid=lambda v: whole(v, 0, 8),
        state=lambda: tuple(sorted(real_built().values().items()))),
    Row("real explorer.set(prompt)", lambda v: real_built().set(prompt=v), valid=text_valid,
        state=lambda: tuple(sorted(real_built().values().items()))),
]

TABLE = CONSTRUCTOR_ROWS + CONTROL_ROWS + REAL_EXPLORER_ROWS
CASES = [(row, cls, i) for row in TABLE for cls in CLASSES for i in range(len(CLASSES[cls]))
         if not is_valid(row, CLASSES[cls][i])]
COUNTS = collections.Counter()


@pytest.mark.parametrize("row, cls, i", CASES, ids=[f"{r.name}-{c}-{i}" for r, c, i in CASES])
def test_bad_input_to_an_explorer_gets_its_sentence(row, cls, i):
    value = CLASSES[cls][i]
    before = row.state() if row.state else None
    COUNTS[cls] += 1
    with pytest.raises(CourseInputError) as refused:
        row.call(value)
    one_sentence(str(refused.value))
    if row.state:
        assert row.state() == before, f"{row.name} changed its state on {describe(value)}"


@pytest.mark.parametrize("kind, name, value", [("heads", "layer", 99), ("heads", "head", -1), ("scaling", "d", 10**7),
                                               ("sampling", "top_k", 0), ("qkv", "q0", 7.0)])
def test_a_control_set_directly_out_of_range_is_refused_not_clamped(kind, name, value):
    shown = built(kind)
    before = shown.values()
    with pytest.raises(CourseInputError):
        shown.controls[name].value = value
    assert shown.values() == before


def test_a_refused_control_leaves_the_explorer_as_a_fresh_one():
    shown = heads.explorer("induction")
    with pytest.raises(CourseInputError):
        shown.set(layer=1, head=99)     # the good value is not set either: all are checked first
    assert shown.values() == heads.explorer("induction").values()
    assert shown.picture() == heads.explorer("induction").picture()


def test_zz_counts_per_class():
    lines = [f"{cls:<18}{COUNTS[cls]:>5}" for cls in CLASSES]
    print("\nred team (explorers), bad inputs per class:\n" + "\n".join(lines)
          + f"\n{'total':<18}{sum(COUNTS.values()):>5}")
