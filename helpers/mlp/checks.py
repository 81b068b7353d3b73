"""Chapter 07's exercise checks: exact GELU, one token through the MLP, the learner's MLP
module against the shipped models' MLPs, GPT-3's MLP parameters, the unit that fires for a word.

Each check judges properties and reference values and says what is wrong without
printing the expected answer.
"""
import copy
import math
import re

import numpy as np
import torch

from .. import reference as ref
from .. import worlds
from ..exercises import (Array, Module, Whole, as_array, as_whole, close_problems, exercise, gradient_problems,
                         module_problems, rounded_by_dtype, slip)
from ..errors import as_array as numbers, check_text, fail
from ..heads.compute import check_shipped
from .compute import MODELS, check_layer, mlp_forward, model_parameters, unit_means


def gelu_tanh(x):
    """The tanh approximation of GELU (GPT-2's original code), for recognising it."""
    return 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3)))


def normal_cdf(x):
    """Φ(x), the standard normal distribution function, elementwise."""
    return 0.5 * (1 + np.vectorize(math.erf)(np.asarray(x, dtype=float) / math.sqrt(2)))


def shape_of(x):
    """The shape of the check's input x (an array of finite numbers), else one sentence."""
    x = numbers(x, "x")
    if x.size == 0:
        fail(f"x should hold at least one number, but it has shape {x.shape}")
    if not np.isfinite(x).all():
        fail(f"x should hold finite numbers, but it holds {int((~np.isfinite(x)).sum())} NaN or infinite entries")
    return x.shape


@exercise("exact GELU", answer=Array(shape=shape_of))
def gelu_values(act, x):
    """``act`` (same shape as x): x * Phi(x) with Phi the standard normal CDF."""
    shape_of(x)
    x = as_array(x, "x")
    if np.allclose(act, ref.gelu(x), atol=2e-5, rtol=0):
        return
    hint = slip(act, [(gelu_tanh(x), "that is the tanh approximation of GELU; use the exact x·Φ(x) "
                                     "with Φ(x) = (1 + erf(x/√2)) / 2"),
                      (ref.relu(x), "that is ReLU: GELU lets negative inputs through as small negative numbers"),
                      (x / (1 + np.exp(-1.702 * x)), "that is the sigmoid approximation x·σ(1.702x); "
                                                     "use the exact x·Φ(x)"),
                      (normal_cdf(x), "that is Φ(x) alone: multiply by x")], atol=2e-5)
    if hint:
        yield hint
    else:
        yield from close_problems(act, ref.gelu(x), "act", atol=2e-5)


@exercise("one token through the MLP block", answer=Array(shape=shape_of))
def mlp_row(out, x, W_1, b_1, W_2, b_2, unnormed=None):
    """``out`` (d,): GELU(x W_1 + b_1) W_2 + b_2 for one row x (d,); ``unnormed``, if given, is
    the same row before the LayerNorm (the trace's h_mid), to name its use in place of x."""
    x, W_1, W_2 = numbers(x, "x", 1), numbers(W_1, "W_1", 2), numbers(W_2, "W_2", 2)
    b_1, b_2 = numbers(b_1, "b_1", 1), numbers(b_2, "b_2", 1)
    d, d_ff = len(x), len(b_1)
    if W_1.shape != (d, d_ff) or W_2.shape != (d_ff, d) or b_2.shape != (d,):
        fail(f"W_1, b_1, W_2, b_2 should be (d, d_ff), (d_ff,), (d_ff, d), (d,) for x of {d} numbers, but have "
             f"{W_1.shape}, {b_1.shape}, {W_2.shape}, {b_2.shape}")
    if unnormed is not None and numbers(unnormed, "unnormed", 1).shape != (d,):
        fail(f"unnormed should be None or a row of {d} numbers like x, but has shape {np.shape(unnormed)}")
    def variant(activation="gelu", drop_b1=False, drop_b2=False, row=x):
        return mlp_forward(row, W_1, np.zeros(len(b_1)) if drop_b1 else b_1, W_2,
                           np.zeros(len(b_2)) if drop_b2 else b_2, activation)["out"]

    right = variant()
    if np.allclose(out, right, atol=1e-4, rtol=0):
        return
    hint = slip(out, [(variant("relu"), "you used ReLU; the cat model's MLP uses exact GELU"),
                      (variant("none"), "there is no activation between W_1 and W_2: apply GELU to the "
                                        "(d_ff,) pre-activation"),
                      (variant(drop_b1=True), "b_1 is missing: add it to x @ W_1 before GELU"),
                      (variant(drop_b2=True), "b_2 is missing: add it after the contraction by W_2"),
                      (np.asarray(x, dtype=float) + right, "that is x + MLP(x): adding the residual is the block's "
                                                           "job (chapter 08); out is only what the MLP adds")]
                     + ([(variant(row=unnormed), "that is the MLP of the row before the LayerNorm (h_mid); the MLP "
                                                 "reads x_sat, the row after layer 0's second LayerNorm (ln2)")]
                        if unnormed is not None else []), atol=1e-4)
    if hint:
        yield hint
    else:
        yield from close_problems(out, right, "out", atol=1e-4)


MODULE_ATOL = 1e-4   # float32 rounding moves these outputs by 2e-6 at most; the tanh GELU by 7e-4 or more
MODULE_PROMPTS = {"cat": ("<BOS> the cat sat on the mat", "<BOS> the big dog is"),
                  "dragon": ("<BOS> wizard mixes glowing potion dragon drinks",)}


def float32_model(model):
    """``model`` itself when its weights are float32, else a float32 copy of it: a module check's expected
    outputs are what the learner's float32 module computes from the same weights (a bfloat16 or float16
    model's own pass rounds every step, by far more than MODULE_ATOL)."""
    if next(model.parameters()).dtype == torch.float32:
        return model
    return copy.deepcopy(model).float()


def module_cases(cat, dragon):
    """The inputs the learner's MLP class is run on, from the shipped models on real prompts:
    [(what, args, state, x, expected)], x the input of a layer's MLP (its trace's ``ln2``) and
    expected what the model's own MLP wrote (``mlp``). One case is unbatched (T, d), one a batch
    of two sequences (2, 5, d), one a single row (d,), one has bias=False (the cat's layer-0 matrices without b_1, b_2; expected computed from them)."""
    import torch

    cases = []
    tokenizers = {"cat": worlds.Tokenizer(worlds.CAT_VOCAB), "dragon": worlds.Tokenizer(worlds.DRAGON_VOCAB)}
    for name, model in (("cat", cat), ("dragon", dragon)):
        args = (model.cfg.d_model, model.cfg.d_ff)
        for p, prompt in enumerate(MODULE_PROMPTS[name]):
            with torch.no_grad():
                trace = model(tokenizers[name].encode(prompt), trace=True)
            for layer in range(model.cfg.n_layers) if p == 0 else (1,):
                x, expected = trace[f"L{layer}.ln2"], trace[f"L{layer}.mlp"]
                if p == 0:   # a batch of one, (1, T, d), as a block calls it
                    x, expected = x[None], expected[None]
                what = f"the {name} model's layer {layer} on '{prompt}' (x of shape {tuple(x.shape)})"
                cases.append((what, args, model.blocks[layer].mlp.state_dict(), x, expected))
    with torch.no_grad():   # the cat's layer 1 on two prompts at once, (2, 5, d), and on one row, (d,)
        traces = [cat(tokenizers["cat"].encode(prompt), trace=True) for prompt in MODULE_PROMPTS["cat"]]
    x, expected = (torch.stack([trace[f"L1.{name}"][-5:] for trace in traces]) for name in ("ln2", "mlp"))
    state, args_cat = cat.blocks[1].mlp.state_dict(), (cat.cfg.d_model, cat.cfg.d_ff)
    cases.append((f"the cat model's layer 1 on a batch of both cat prompts' last 5 tokens (x of shape "
                  f"{tuple(x.shape)})", args_cat, state, x, expected))
    cases.append((f"one row, token 3 of the cat model's layer 1 on '{MODULE_PROMPTS['cat'][0]}' (x of shape "
                  f"({cat.cfg.d_model},))", args_cat, state, traces[0]["L1.ln2"][3], traces[0]["L1.mlp"][3]))
    state = {key: value for key, value in cat.blocks[0].mlp.state_dict().items() if key.startswith("W_")}
    x = cases[0][3]
    with torch.no_grad():
        expected = torch.nn.functional.gelu(x @ state["W_1"]) @ state["W_2"]
    cases.append(("the cat model's layer-0 matrices with bias=False", (6, 8, False), state, x, expected))
    # in float32, as the learner's class makes its weights, whatever dtype the models were given in (model.double())
    return [(what, args, {k: v.float() for k, v in state.items()}, x.float(), expected.float())
            for what, args, state, x, expected in cases]


def module_variants(state, x):
    """[(the output a known mistake gives, the sentence that names it)] for one case, in float64."""
    W_1, W_2 = (state[key].double().numpy() for key in ("W_1", "W_2"))
    b_1, b_2 = (state[key].double().numpy() if key in state else 0.0 for key in ("b_1", "b_2"))
    x = x.double().numpy()
    pre = x @ W_1 + b_1
    right = ref.gelu(pre) @ W_2 + b_2
    return [(ref.relu(pre) @ W_2 + b_2, "that is ReLU between W_1 and W_2; the course's MLP uses GELU, z·Φ(z)"),
            (gelu_tanh(pre) @ W_2 + b_2, "that is the tanh approximation of GELU; use the exact z·Φ(z), "
                                         "with Φ(z) = (1 + erf(z/√2)) / 2 (torch.erf, or F.gelu without approximate)"),
            (pre / (1 + np.exp(-1.702 * pre)) @ W_2 + b_2, "that is the sigmoid approximation z·σ(1.702z) of GELU; "
                                                            "use the exact z·Φ(z)"),
            (pre @ W_2 + b_2, "there is no activation between W_1 and W_2: apply GELU to x @ W_1 + b_1"),
            (pre / (1 + np.exp(-pre)) @ W_2 + b_2, "that is SiLU, z·σ(z) (Llama's activation, section 5); the "
                                                   "course's MLP uses GELU, z·Φ(z)"),
            ((ref.gelu(x @ W_1) + b_1) @ W_2 + b_2, "b_1 is added after GELU; it goes inside: "
                                                     "GELU(x @ W_1 + b_1) @ W_2 + b_2"),
            (ref.gelu(pre @ W_2 + b_2), "GELU is applied after W_2; it goes between: GELU(x @ W_1 + b_1) @ W_2 + b_2"),
            (ref.gelu(pre @ W_2) + b_2, "GELU is applied after W_2; it goes between: GELU(x @ W_1 + b_1) @ W_2 + b_2"),
            (ref.gelu(pre) @ W_2, "b_2 is left out: add it after the product with W_2"),
            (ref.gelu(x @ W_1) @ W_2 + b_2, "b_1 is left out: add it to x @ W_1 before GELU"),
            (x + right, "that is x + MLP(x): adding the residual is the block's job (chapter 08); "
                        "the MLP returns only what it adds to the stream")]


def sorted_rows(a):
    """The rows (last axis) of ``a`` as one (n, d) array in lexicographic order, rounded to 4
    decimals so that rows equal up to rounding sort alike."""
    rows = np.asarray(a, dtype=float).reshape(-1, a.shape[-1])
    return rows[np.lexsort(np.round(rows, 4).T[::-1])]


STATE_KEYS = re.compile(r"its parameters should be named (\[[^\]]*\]), but (?:(\[[^\]]*\]) are missing)?(?: and )?"
                        r"(?:(\[[^\]]*\]) are extra)?(?: \(([^:]*): a buffer saved)?")


def state_keys_sentence(message, name, advice=""):
    """One sentence for a learner's module ``name`` whose state_dict does not hold the course's keys (so the
    trained weights cannot load by name), or None when ``message`` says something else. ``message`` is the
    stop the check reported ("... its parameters should be named [...], but [...] are missing and [...] are
    extra (eps: a buffer saved ...)"): a refusal of the keys, not a crash of the learner's code, so the
    sentence says what is expected and what the module holds; ``advice`` follows when keys are missing."""
    found = STATE_KEYS.search(message)
    if found is None:
        return None
    keys, missing, extra, buffers = found.groups()
    holds = " and ".join(([f"lacks {missing}"] if missing else []) + ([f"also holds {extra}"] if extra else []))
    sentence = (f"your {name}'s state_dict should hold exactly the course's keys {keys}, so that the trained "
                f"weights load by name, but it {holds}")
    if buffers:
        sentence += (f" ({buffers}: a buffer, which the state_dict saves; register it with persistent=False, or keep "
                     f"it as a plain attribute)")
    if missing and advice:
        sentence += f": {advice}"
    return sentence


def module_error(message, args):
    """A sentence for a learner's MLP that stopped with ``message``, naming a transposed
    weight when the message shows one, and keys that are not the course's (``state_keys_sentence``)."""
    missing = re.search(r"\[([^\]]*)\] are missing", message)
    if missing and "are extra" not in message:
        names = missing.group(1).replace("'", "")
        return (f"loading the trained weights failed: your MLP has no parameters {names} (a tensor kept as a "
                "plain attribute is not a parameter, so load_state_dict cannot fill it); wrap each in "
                "nn.Parameter: self.W_1 = nn.Parameter(torch.empty(d_model, d_ff))")
    if len(args) == 3 and "are extra" in message and "b_" in message:
        return ("with bias=False the MLP has no b_1 and b_2 (only W_1 and W_2): create the biases only when "
                "bias is True, and add them in forward only when they exist")
    keys = state_keys_sentence(message, "MLP")
    if keys:
        return keys
    shape = re.search(r"its (W_\d) should have shape \((\d+), (\d+)\).*but it has \((\d+), (\d+)\)", message)
    if shape and shape.group(2, 3) == shape.group(5, 4):
        name = shape.group(1)
        return (f"{name} is declared transposed, {tuple(int(n) for n in shape.group(4, 5))}: the course stores "
                f"W_1 as (d_model, d_ff) and W_2 as (d_ff, d_model) and multiplies rows by them, x @ W_1")
    if "cannot be multiplied" in message or "Expected size for first two dimensions" in message:
        return ("a matrix product's shapes do not fit (a weight used transposed?): W_1 is (d_model, d_ff) and "
                "is used as x @ W_1, with no .T (F.linear and nn.Linear transpose their weight); " + message)
    return message


@exercise("your MLP module", answer=Module("an nn.Module class MLP(d_model, d_ff, bias=True)",
          own=("helpers.mlp.compute.MLP", "helpers.model.MLP", "helpers.mlp.compute.mlp_forward",
               "helpers.mlp.compute.apply_block_mlp")), keeps="07")
def mlp_module(run, cat, dragon):
    """``run``: the learner's class MLP as a ``run(args, state, *inputs)`` (helpers.exercises.Module).
    It must equal the shipped cat and dragon models' MLPs (their state_dicts loaded by name) on
    real prompts, to MODULE_ATOL, and also work with bias=False."""
    check_shipped(cat, "cat")
    check_shipped(dragon, "dragon")
    cases = module_cases(float32_model(cat), float32_model(dragon))
    problems = list(module_problems(
        run, cases, "MLP", "MLP(6, 8)",
        "create W_1, b_1, W_2, b_2 in __init__ and return the MLP's output in forward", "the MLP's output",
        lambda gap: (f"the output differs from the model's own MLP by up to {gap:.2g}; "
                     "compute GELU(x @ W_1 + b_1) @ W_2 + b_2, step by step"),
        module_variants, MODULE_ATOL, error=module_error, shape_note=" (..., d_model)", misplaced=misplaced_rows))
    if problems:
        yield from problems
        return
    from .compute import MLP   # the course's, whose gradients the learner's must give
    _, args, state, x, _ = cases[0]
    yield from gradient_problems(run, MLP, args, state, (x,), "MLP")


def misplaced_rows(out, want):
    """The sentence for an output whose rows are all right but in other places, else None."""
    if out.ndim > 1 and np.allclose(sorted_rows(out), sorted_rows(want), atol=MODULE_ATOL, rtol=0):
        return ("every output row is one the model's MLP gives, but in the wrong place: rows were "
                "moved between positions or sequences (a reshape or transpose across the batch?); the MLP "
                "works on each row alone, and x @ W_1 already works on any (..., d_model)")
    return None


ROUNDED_FIGURES = (2, 8)   # the significant figures a rounded count keeps: 1.2e11 to 1.1596412e11


def a_rounding(total, right):
    """Whether the whole number ``total`` is ``right`` written to fewer significant figures (ROUNDED_FIGURES):
    rounded, cut or rounded up at its last nonzero digit, e.g. 1.16e11 or 115,964,000,000 for 115,964,116,992,
    but not a count a few parameters off (a forgotten bias) that only lies near it."""
    if total <= 0:
        return False
    figures = str(total).rstrip("0")
    zeros = len(str(total)) - len(figures)
    low, high = ROUNDED_FIGURES
    return zeros > 0 and low <= len(figures) <= high and abs(total - right) < 10 ** zeros


@exercise("the parameters in GPT-3's MLP blocks")
def gpt3_mlp(total):
    """``total``: the number of parameters in all 96 MLP blocks of GPT-3 (d = 12,288,
    d_ff = 4d), weights W_1 and W_2; with or without the biases b_1, b_2 is accepted. One whole number
    (302.9 is refused, not rounded; a float type too narrow for the count, float32, is named as such;
    the count written to fewer significant figures, 1.16e11, is named as rounded)."""
    d, n = MODELS["GPT-3"]["d"], MODELS["GPT-3"]["n_layers"]
    right = (8 * d * d * n, model_parameters("GPT-3")["mlp"])
    given, total = total, as_whole(total, "your answer")   # 302.9 parameters: refused, not rounded
    if total in right:
        return
    rounded = rounded_by_dtype(given, right[0])
    if rounded:
        yield rounded
        return
    if any(a_rounding(total, r) for r in right):
        yield (f"{total:.4g} is the count rounded; give it exactly, to the last parameter (Python's integers "
               "are exact: 96 · 2 · d · 4d)")
        return
    near = {4 * d * d * n: "that counts only one of the two matrices (W_1 is d × 4d; W_2 is 4d × d)",
            8 * d * d: "that is one layer; GPT-3 has 96",
            12 * d * d * n: "that is attention and MLP together; count W_1 and W_2 only",
            2 * d * d * n: "d_ff is 4d, not d: each matrix is d × 4d"}
    for wrong, sentence in near.items():
        if abs(total - wrong) <= 1e-3 * wrong:
            yield sentence
            return
    both = "count both biases, b_1 (4d) and b_2 (d) in each layer, or neither"
    slips = {(8 * d * d + 4 * d) * n: f"that counts b_1 but not b_2: {both}",
             (8 * d * d + d) * n: f"that counts b_2 but not b_1: {both}",
             (8 * d * d + 2 * d) * n: "that counts the LayerNorm before the MLP (2d in each layer): it is the "
                                      "block's, not the MLP's; count W_1 and W_2 (with or without their biases)",
             (8 * d * d + 7 * d) * n: "that counts the LayerNorm before the MLP (2d in each layer) too: it is the "
                                      "block's, not the MLP's; count W_1, W_2, b_1 and b_2 only"}
    if total in slips:
        yield slips[total]
    elif any(abs(total - r) <= 1e-3 * r for r in right):   # a whole number a few parameters off, not a rounding
        yield (f"{total:,} is close, but {'too large' if total > right[0] else 'too small'}: count W_1 (d × 4d) "
               f"and W_2 (4d × d) in each of the 96 layers, then {both}")
    else:
        yield (f"{total:.4g} is {'too large' if total > right[0] else 'too small'}: "
               "count 2 · d · d_ff per layer, then times 96")


@exercise("the hidden unit that fires most for a word", answer=Whole())
def strongest_unit(unit, collected, layer, word):
    """``unit``: the unit of ``layer`` whose mean activation over positions holding ``word``
    is the largest."""
    layer = check_layer(collected, layer)
    check_text(word, "word", max_chars=100)
    means = unit_means(collected, layer, [word])[0]
    before = np.asarray(collected["next"]) == word        # the positions just before the word
    if not 0 <= unit < len(means):
        yield f"layer {layer} has units 0 to {len(means) - 1}, but the answer is {unit}"
    elif unit != int(np.argmax(means)) and before.any() and \
            unit == int(np.argmax(np.asarray(collected["act"][layer])[before].mean(axis=0))):
        yield (f"that unit has the smallest mean over the positions holding '{word}'"
               if unit == int(np.argmin(means)) else f"that unit fires little at the positions holding '{word}'") + (
               f" (it is the largest just before them, where the next word is '{word}'): select the positions "
               f"with collected['tokens'] == '{word}' and take the largest mean")
    elif unit == int(np.argmin(means)):
        yield "that unit is the one that fires least for this word: take the largest mean, not the smallest"
    elif unit != int(np.argmax(means)):
        yield (f"unit {unit} fires for '{word}' (mean {means[unit]:.2f}), but another unit fires more: "
               "average each unit over the positions holding the word, then take the largest")
