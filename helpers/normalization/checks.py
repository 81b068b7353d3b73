"""Checks for chapter 08 (LayerNorm): a LayerNorm function, the learner's LayerNorm and
pre-norm Block modules against the cat model, the residual stream's lengths, and reading the
pre-LN / post-LN training curves.

Each check judges properties and reference values and says what is wrong
without printing the expected answer.
"""
import functools
import inspect

import numpy as np

from .. import exercises, grading
from .. import reference as ref
from .. import worlds
from ..exercises import Array, Function, Module, Wrong, as_whole, call, close_problems, exercise, narrow_float_problem, \
    numbers, slip
from ..errors import check_finite, check_number, check_positive_int, count, fail, shown, to_numpy
from ..heads.compute import check_shipped
from ..mlp.checks import float32_model, state_keys_sentence
from .compute import PLACEMENTS, check_curves, get_run, residual_names

# (x, gamma, beta, what) a layer_norm function is tried on.
LN_CASES = (
    ([0.054, 0.193, 0.865, 0.679, 0.475, 0.864], None, None, "the Primer's h²_last, γ = 1, β = 0"),
    ([0.054, 0.193, 0.865, 0.679, 0.475, 0.864], [2.253, 2.390, 2.512, 2.328, 2.723, 2.476],
     [-0.339, -0.496, -0.744, 0.154, -0.418, 0.055], "the Primer's h²_last with its γ and β"),
    ([[1.0, 2.0, 3.0, 4.0], [10.0, -10.0, 5.0, 0.0]], [1.0, 0.5, 2.0, 1.0], [0.0, 1.0, 0.0, -1.0],
     "a 2 × 4 matrix (each row on its own)"),
    ([0.500, 0.501, 0.499, 0.502], None, None, "a row with a tiny spread (variance about 10⁻⁶, where ε matters)"),
    ([[[1.0, 2.0, 4.0], [0.5, -0.5, 0.0]], [[3.0, 3.5, 2.0], [-2.0, 1.0, 7.0]]], [1.5, 1.0, 0.5], [0.0, -1.0, 1.0],
     "a batch of two 2 × 3 matrices, shape (2, 2, 3) (each row on its own)"),
)


def layer_norm_slip(out, x, g, b, with_affine):
    """The hint for a known LayerNorm mistake that gives ``out``, or None."""
    centred = x - x.mean(axis=-1, keepdims=True)
    if np.allclose(out, centred / x.std(axis=-1, ddof=1, keepdims=True) * g + b, atol=1e-3):
        return "you divided by the sample standard deviation (d - 1); LayerNorm divides by d"
    std = x.std(axis=-1, keepdims=True)
    if np.allclose(out, centred / std * g + b, atol=1e-3):
        return "you left out ε: add ε = 10⁻⁵ to the variance, inside the square root"
    if np.allclose(out, centred / (std + 1e-5) * g + b, atol=1e-3):
        return "ε goes inside the square root, added to the variance, not to the standard deviation"
    if with_affine and np.allclose(out, ref.layer_norm(x), atol=1e-3):
        return "the output ignores γ and β: multiply by γ, then add β"
    if np.allclose(out, ref.layer_norm(x) * b + g, atol=1e-3):
        return "γ and β are swapped: multiply by γ (gamma), then add β (beta)"
    if x.ndim > 1 and np.allclose(out, (x - x.mean(axis=0)) / np.sqrt(x.var(axis=0) + 1e-5) * g + b, atol=1e-3):
        return ("you normalised along axis 0, down the columns: each row is one vector, so take the "
                "mean and standard deviation along the last axis (axis=-1)")
    if x.ndim > 1 and np.allclose(out, (x - x.mean()) / np.sqrt(x.var() + 1e-5) * g + b, atol=1e-3):
        return ("you used one mean and one standard deviation for the whole array: take them "
                "along the last axis, row by row (keepdims=True)")
    return None


BROADCAST = ("could not be broadcast", "must match the size")   # NumPy's and PyTorch's words for it


def keepdim_hint(message, keep):
    """``message``, with the missing ``keep`` (keepdims=True / keepdim=True) named when it is a
    broadcasting error: a mean taken without it has lost its axis and no longer lines up with x."""
    if any(words in message for words in BROADCAST):
        return (f"{message} (the mean or the variance lost its last axis: take them with {keep}, "
                f"so that each row's statistic lines up with the row)")
    return message


def trace_points(trace, names):
    """The residual points ``names`` of ``trace`` (a check's own argument, not the answer) as float arrays of
    finite numbers, all of h0's shape, each with an axis of d numbers; else one sentence (CourseInputError)."""
    points = [check_finite(to_numpy(trace[name], f"trace's {name}"), f"trace's {name}") for name in names]
    shape = points[0].shape
    if not shape:
        fail("trace's h0 should be the residual vectors (T, d), but it is a single number")
    for name, point in zip(names, points):
        if point.shape != shape:
            fail(f"trace's {name} should have h0's shape {shape}, as every point of the stream has, but it has "
                 f"shape {point.shape}")
    return points


# Every LayerNorm the learner could hand the work to: the course's own (helpers.model's norm layers are torch's
# nn.LayerNorm and nn.RMSNorm), torch's, and the norms that give it on a centred row (an RMSNorm of x - mean is a
# LayerNorm) or give its divisor √(variance + ε) (patching.final_norm_scale). Each check names its own piece first.
COURSES_LAYER_NORMS = (
    "helpers.reference.layer_norm", "helpers.normalization.compute.LayerNorm",
    "helpers.normalization.compute.layer_norm_steps", "helpers.normalization.compute.layer_norm_by_hand",
    "helpers.normalization.compute.rms_norm", "helpers.patching.final_norm_scale",
    "torch.nn.modules.normalization.LayerNorm", "torch.nn.modules.normalization.RMSNorm",
    "torch.nn.functional.layer_norm", "torch.nn.functional.rms_norm", "torch.nn.functional.group_norm",
    "torch.nn.functional.instance_norm", "torch.nn.functional.batch_norm", "torch._refs.native_layer_norm",
    "torch._refs.nn.functional.layer_norm", "torch._refs.native_group_norm", "torch._refs.nn.functional.group_norm")

# torch's builtin normalisations (C functions, torch.layer_norm under F.layer_norm, and the dispatcher's ops), which an
# own= list cannot disarm (only a Python function has code to swap): each gives a LayerNorm for the right arguments
# (one group of a group norm, an instance norm of x as (N, 1, d), a batch norm of x transposed, the statistics
# batch_norm_stats gives), so a learner's function runs with them watched (``norms_watched``).
TORCH_NORMS = ("layer_norm", "native_layer_norm", "group_norm", "native_group_norm", "instance_norm", "batch_norm",
               "native_batch_norm", "_native_batch_norm_legit", "_native_batch_norm_legit_no_training",
               "_batch_norm_impl_index", "_batch_norm_with_update", "_batch_norm_no_update", "batch_norm_stats",
               "batch_norm_elemt", "rms_norm", "_fused_rms_norm")


@functools.cache
def torch_norms():
    """{id(entry point): its name} for TORCH_NORMS: torch.layer_norm (torch._VF's and torch._C._VariableFunctions'
    are the same object), and torch.ops.aten.layer_norm with each of its overloads (.default, .out)."""
    import torch

    found = {}
    for name in TORCH_NORMS:
        if hasattr(torch, name):
            found[id(getattr(torch, name))] = f"torch.{name}"
        if hasattr(torch.ops.aten, name):
            packet = getattr(torch.ops.aten, name)   # (kept by torch.ops, as each overload by its packet: ids stay)
            found[id(packet)] = f"torch.ops.aten.{name}"
            found.update({id(getattr(packet, overload)): f"torch.ops.aten.{name}.{overload}"
                          for overload in packet.overloads()})
    return found


def norms_watched(function):
    """``function`` (the learner's, or the grader's Recorder of it) as a function that runs it with torch's builtin
    normalisations (``torch_norms``) watched in its own thread (a TorchFunctionMode: a check calls it in a thread
    of its own): each one called is noted with the course's pieces that ran, so that the answer is refused as one
    made of F.layer_norm is (``exercises.courses_own_watched``). Its parameters' names stay readable, for a sentence
    about an input it changed (``grading._parameter_names``). Returned as it is outside a check, and when it is the
    judge's Replay (no learner's code runs in it) or a module passed for its class (a slip the check names). Known
    limits: torch's modes turned off (torch._C.DisableTorchFunction), and a thread the function starts, go unwatched."""
    import torch
    from torch.overrides import TorchFunctionMode

    watch = exercises._COURSES_OWN.get()
    if watch is None or issubclass(type(function), (grading.Replay, torch.nn.Module)):   # (by type: none of it runs)
        return function
    norms = torch_norms()

    class Watched(TorchFunctionMode):
        def __torch_function__(self, func, kinds, args=(), kwargs=None):
            name = norms.get(id(func))
            if name is not None and name not in watch["ran"]:
                watch["ran"].append(name)
            return func(*args, **(kwargs or {}))

    def watched(*args, **kwargs):
        with Watched():
            return function(*args, **kwargs)
    names = grading._parameter_names(function)
    if names:
        watched.__signature__ = inspect.Signature([inspect.Parameter(name, inspect.Parameter.POSITIONAL_OR_KEYWORD)
                                                   for name in names])
    return watched


@exercise("a LayerNorm function", answer=Function("a function of x, gamma and beta", own=COURSES_LAYER_NORMS))
def layer_norm_function(answer):
    """``answer`` is a function layer_norm(x, gamma, beta) normalising the last axis of x."""
    answer = norms_watched(answer)
    for x, gamma, beta, what in LN_CASES:
        x = np.asarray(x)
        d = x.shape[-1]
        g = np.ones(d) if gamma is None else np.asarray(gamma)
        b = np.zeros(d) if beta is None else np.asarray(beta)
        try:
            out = call(answer, x, g, b, what=f"on {what}")
        except Wrong as wrong:
            raise Wrong(keepdim_hint(str(wrong), "keepdims=True")) from None
        given, out = out, numbers(out, f"the output for {what}", shape=x.shape)
        expected = ref.layer_norm(x, g, b)
        if np.allclose(out, expected, atol=1e-3):
            continue
        hint = narrow_float_problem(given, out, expected, f"the output for {what}", 1e-3) or \
            layer_norm_slip(out, x, g, b, with_affine=gamma is not None)
        if hint:
            yield f"for {what} {hint}"
        else:
            yield from close_problems(out, expected, f"the output for {what}")
        return
    yield from eps_problems(answer)


# (x, gamma, beta, eps, what): an answer that takes eps is tried with one large enough to change the output
# visibly, so that one which writes 1e-5 in and never reads eps cannot pass
LN_EPS_CASE = (LN_CASES[1][0], LN_CASES[1][1], LN_CASES[1][2], 1.0, "the Primer's h²_last with its γ and β, eps=1.0")


def eps_problems(answer):
    """One sentence when ``answer`` takes an argument eps but ignores it (the exercise's layer_norm(x, gamma,
    beta) may also leave it out, with ε = 1e-5 written in: that one is not called with eps). eps goes by keyword,
    so that another fourth parameter (``axis=-1``) is never handed 1.0."""
    x, g, b, eps, what = (np.asarray(value) if i < 3 else value for i, value in enumerate(LN_EPS_CASE))
    try:
        out = call(answer, x, g, b, eps=eps, what=f"on {what}")
    except Wrong as wrong:
        if "unexpected keyword argument 'eps'" in str(wrong):   # no eps parameter: ε = 1e-5 as the exercise allows
            return
        raise
    out = numbers(out, f"the output for {what}", shape=x.shape)
    if np.allclose(out, ref.layer_norm(x, g, b, eps), atol=1e-3):
        return
    if np.allclose(out, ref.layer_norm(x, g, b), atol=1e-3):
        yield (f"for {what} the output is the one for eps=1e-5: your function ignored its eps argument; "
               "use eps inside the square root, √(variance + eps)")
    else:
        yield from close_problems(out, ref.layer_norm(x, g, b, eps), f"the output for {what}")


@exercise("the norm of the residual vectors", answer=Array())
def residual_norms(answer, trace, n_layers):
    """``answer`` (2 * n_layers + 1, T): the norm ‖v‖ of each position's residual vector at
    h0, L0.h_mid, L0.h, L1.h_mid, ... of ``trace``."""
    n_layers = check_positive_int(n_layers, "n_layers")
    if not isinstance(trace, dict):
        fail(f"trace should be a model's trace (the dict of model(ids, trace=True)), but got {shown(trace)}")
    names = residual_names(min(n_layers, 1000))
    missing = [name for name in names if name not in trace]
    if n_layers > 1000 or missing:
        fail(f"n_layers should be the traced model's number of layers, but the trace has no {missing[0] if missing else 'L1000.h'} "
             f"for n_layers={count(n_layers)}")
    stream = np.stack(trace_points(trace, names))     # (points, T, d)
    expected = np.linalg.norm(stream, axis=-1)
    if answer.shape != expected.shape:
        hint = ("; take the norm over the d_model numbers of each vector (the last axis)"
                if answer.shape == (len(names), stream.shape[-1]) else "")
        raise Wrong(f"norms should have shape {expected.shape}, but it has shape {answer.shape}{hint}")
    if np.allclose(answer, expected ** 2, atol=1e-3) and not np.allclose(expected, 1):
        yield "these are squared norms: take the square root"
    else:
        yield from close_problems(answer, expected, "norms")


def first_below(loss, threshold):
    """The first step (counting from 0) at which loss < threshold, or None."""
    below = np.flatnonzero(np.asarray(loss) < threshold)
    return int(below[0]) if len(below) else None


@exercise("the step at which each placement first gets below the threshold")
def steps_to_threshold(answer, curves, n_layers, lr, threshold):
    """``answer`` is a dict {"pre": step, "post": step, "none": step}: the first step
    (from 0) at which that run's loss is below ``threshold``, or None if it never is."""
    threshold = check_number(threshold, "threshold")
    for norm in PLACEMENTS:
        get_run(check_curves(curves), norm, n_layers, lr)   # each run there, before the answer is judged
    if not isinstance(answer, dict):
        raise Wrong(f"the answer should be a dict with keys {PLACEMENTS}, but it is a {type(answer).__name__}")
    if set(answer) != set(PLACEMENTS):
        raise Wrong(f"the dict should have exactly the keys {PLACEMENTS}, but it has {shown(tuple(answer))}")
    for norm in PLACEMENTS:
        loss = get_run(curves, norm, n_layers, lr)["loss"]
        expected, given = first_below(loss, threshold), answer[norm]
        if given is None or expected is None:
            if given is not expected:
                yield (f"'{norm}': " + ("this run does get below the threshold"
                                        if expected is not None else
                                        "this run never gets below the threshold: give None"))
            continue
        given = as_whole(given, f"'{norm}'")
        if given == expected + 1:
            yield f"'{norm}' is one too large: count steps from 0, as Python indexes the list"
        elif given != expected:
            yield f"'{norm}' is not the first step below {threshold}"


# ------------------------------------------------------------ the learner's LayerNorm and Block

MODULE_ATOL = 1e-4   # float32 rounding moves these outputs by about 1e-6; every slip below by far more
MODULE_PROMPTS = ("<BOS> the red cat sat on the mat", "<BOS> the big dog ran on the floor")
N_HEADS = 2           # the cat model's
TINY = 0.003          # h0 scaled by this has a variance near ε, where ε matters
LARGE_EPS = 1.0       # a LayerNorm(d, eps) built with this on h0 differs visibly from one that uses 1e-5


def cat_traces(cat):
    """The cat model's traces on MODULE_PROMPTS (same length, so they stack into a batch)."""
    import torch

    tokenizer = worlds.Tokenizer(worlds.CAT_VOCAB)
    with torch.no_grad():
        return [cat(tokenizer.encode(prompt), trace=True) for prompt in MODULE_PROMPTS]


def layer_norm_cases(cat):
    """[(what, args, state, x, expected)] for the learner's LayerNorm: each of the cat model's
    LayerNorms (ln1, ln2 of both layers) on the vectors it normalised on real prompts, one case
    unbatched (T, d), the others (B, T, d); and layer 0's ln1 on h0 scaled down to a variance near ε."""
    import torch

    traces = cat_traces(cat)
    d = cat.cfg.d_model
    cases = []
    for layer in range(cat.cfg.n_layers):
        block = cat.blocks[layer]
        for ln, source in (("ln1", "h0" if layer == 0 else f"L{layer - 1}.h"), ("ln2", f"L{layer}.h_mid")):
            x = torch.stack([trace[source] for trace in traces])
            expected = torch.stack([trace[f"L{layer}.{ln}"] for trace in traces])
            if not cases:   # the first: one sequence, (T, d)
                x, expected = x[0], expected[0]
            what = f"layer {layer}'s {ln} on {source} (x of shape {tuple(x.shape)})"
            cases.append((what, (d,), getattr(block, ln).state_dict(), x, expected))
    ln1 = cat.blocks[0].ln1
    x = TINY * torch.stack([trace["h0"] for trace in traces])
    with torch.no_grad():
        expected = ln1(x)
    cases.append((f"layer 0's ln1 on h0 scaled by {TINY} (a variance near ε = 1e-5, where ε matters)",
                  (d,), ln1.state_dict(), x, expected))
    return cases


def layer_norm_eps_case(cat):
    """(what, args, state, x, expected): layer 0's ln1 built as LayerNorm(d, eps=LARGE_EPS), on h0 of
    MODULE_PROMPTS: a LayerNorm that ignores its eps (1e-5 written in) is far off."""
    import torch

    x = torch.stack([trace["h0"] for trace in cat_traces(cat)])
    d, ln1 = cat.cfg.d_model, cat.blocks[0].ln1
    with torch.no_grad():
        expected = torch.nn.functional.layer_norm(x, (d,), ln1.weight, ln1.bias, LARGE_EPS)
    return (f"layer 0's ln1 built as LayerNorm({d}, eps={LARGE_EPS}) on h0", (d, LARGE_EPS), ln1.state_dict(), x,
            expected)


def layer_norm_variants(state, x, eps=1e-5):
    """[(the output a known LayerNorm mistake gives, the sentence that names it)], in float64, for a
    LayerNorm built with ``eps`` (another than 1e-5: the first slip is an eps ignored)."""
    w, b = state["weight"].double().numpy(), state["bias"].double().numpy()
    x = x.double().numpy()
    ignored = [] if eps == 1e-5 else [(
        (x - x.mean(axis=-1, keepdims=True)) / np.sqrt(x.var(axis=-1, keepdims=True) + 1e-5) * w + b,
        f"the output is the one for eps=1e-5: your LayerNorm ignored its eps argument ({eps}); keep it, "
        "self.eps = eps, and use it in forward, √(variance + self.eps)")]

    def norm(axis=-1, ddof=0, where="inside"):
        mean = x.mean(axis=axis, keepdims=True)
        var = x.var(axis=axis, ddof=ddof, keepdims=True)
        scale = {"inside": np.sqrt(var + eps), "outside": np.sqrt(var) + eps, "none": np.sqrt(var),
                 "no_root": var + eps}[where]
        return (x - mean) / scale

    z = norm()
    variants = [(norm(axis=-2) * w + b, "you normalised over the tokens (axis -2): LayerNorm takes the mean and "
                                        "variance of each vector's d features, over the last axis (dim=-1)"),
                (norm(axis=None) * w + b, "you took one mean and one variance over the whole tensor: take them per "
                                          "vector, over the last axis (dim=-1, keepdim=True)"),
                (norm(ddof=1) * w + b, "you used the unbiased variance (dividing by d - 1, torch.var's default): "
                                       "LayerNorm divides by d (unbiased=False, or the mean of the squares)"),
                (norm(where="none") * w + b, "ε is missing: divide by √(variance + ε), with ε = self.eps"),
                (norm(where="outside") * w + b, "ε is outside the square root: it goes inside, √(variance + ε), "
                                                "not √variance + ε"),
                (norm(where="no_root") * w + b, "you divided by the variance (+ ε) itself: divide by its square "
                                                "root, the standard deviation"),
                (z * b + w, "weight and bias are swapped: multiply by weight (γ), then add bias (β)"),
                (z, "weight and bias are not applied: return z * weight + bias"),
                (z * w, "bias (β) is not added: return z * weight + bias"),
                (z + b, "weight (γ) is not applied: return z * weight + bias"),
                ((z + b) * w, "bias is added before weight multiplies: scale first, then shift, "
                              "z * weight + bias, not (z + bias) * weight"),
                (x / np.sqrt((x ** 2).mean(axis=-1, keepdims=True) + eps) * w + b,
                 "that is RMSNorm (x divided by its root mean square, no mean subtracted): LayerNorm first "
                 "subtracts each vector's mean, then divides by √(variance + ε)")]
    variants = ignored + variants
    if x.ndim == 3:   # over the tokens, with the batch axis counted as the first
        variants.insert(1, (norm(axis=0) * w + b, "you normalised over the batch (axis 0): LayerNorm takes the "
                                                  "mean and variance over the last axis (dim=-1)"))
    return variants


def module_problems(run, cases, variants, name, what_it_does, error=str):
    """Run the learner's module ``run`` on each case; yield one sentence for the first that
    is wrong (a named slip from ``variants(state, x)`` when one matches)."""
    yield from exercises.module_problems(
        run, cases, name, f"{name}(...)", f"fill in __init__ and forward ({what_it_does})", what_it_does,
        lambda gap: f"the output differs from the cat model's own by up to {gap:.2g}; compute {what_it_does} step by step",
        variants, MODULE_ATOL, error=str if error is str else lambda sentence, args: error(sentence))


@exercise("your LayerNorm module", answer=Module("an nn.Module class LayerNorm(d, eps=1e-5)",
          own=("helpers.normalization.compute.LayerNorm", *COURSES_LAYER_NORMS)), keeps="08")
def layer_norm_module(run, cat):
    """``run``: the learner's class LayerNorm as a ``run(args, state, *inputs)``. It must equal
    the cat model's four LayerNorms (their state_dicts loaded by name: weight, bias) on the
    vectors they normalised on real prompts, and on a row whose variance is near ε, to MODULE_ATOL."""
    check_shipped(cat, "cat")
    cases = layer_norm_cases(float32_model(cat)) + [layer_norm_eps_case(float32_model(cat))]
    eps_of = {id(x): args[1] for _, args, _, x, _ in cases if len(args) > 1}   # (the case built with another eps)
    variants = lambda state, x: layer_norm_variants(state, x, eps_of.get(id(x), 1e-5))  # noqa: E731
    problems = list(module_problems(norms_watched(run), cases, variants,
                                    "LayerNorm", "(x - mean) / √(variance + ε) * weight + bias over the last axis",
                                    layer_norm_error))
    if problems:
        yield from problems
        return
    from .compute import LayerNorm   # the course's, whose gradients the learner's must give
    _, args, state, x, _ = cases[1]
    yield from exercises.gradient_problems(run, LayerNorm, args, state, (x,), "LayerNorm")


def block_cases(cat):
    """[(what, args, state, h, expected)] for the learner's Block: each layer of the cat model
    (its state_dict loaded by name) on the stream it read on real prompts, (1, T, d) and
    (2, T, d), against the stream it wrote (trace L{i}.h)."""
    import torch

    traces = cat_traces(cat)
    args = (cat.cfg.d_model, cat.cfg.n_heads, cat.cfg.d_ff)
    cases = []
    for layer in range(cat.cfg.n_layers):
        source = "h0" if layer == 0 else f"L{layer - 1}.h"
        for batch in (traces[:1], traces):
            h = torch.stack([trace[source] for trace in batch])
            expected = torch.stack([trace[f"L{layer}.h"] for trace in batch])
            cases.append((f"layer {layer} on {source} (h of shape {tuple(h.shape)})", args,
                          cat.blocks[layer].state_dict(), h, expected))
    return cases


def block_variants(state, h):
    """[(the output a known mistake in the block's wiring gives, the sentence that names it)]."""
    import torch

    from .compute import Block

    block = Block(h.shape[-1], N_HEADS, state["mlp.W_1"].shape[1])
    block.load_state_dict(state)
    ln1, attn, ln2, mlp = block.ln1, block.attn, block.ln2, block.mlp
    with torch.no_grad():
        mid = h + attn(ln1(h))                 # the right h_mid
        bare = attn(ln1(h))                    # h_mid without its residual
        post = ln1(h + attn(h))                # post-norm's h_mid
        normed = ln1(h) + attn(ln1(h))         # the residual around ln1(h)
        swapped = h + attn(ln2(h))
        plain = h + attn(h)
        wired = [
            (ln2(post + mlp(post)), "that is post-norm (a LayerNorm after each addition): the block is pre-norm, "
                                    "h_mid = h + attn(ln1(h)), then h_mid + mlp(ln2(h_mid))"),
            (mlp(ln2(bare)), "both residual additions are missing: h_mid = h + attn(ln1(h)), and the output is "
                             "h_mid + mlp(ln2(h_mid))"),
            (bare + mlp(ln2(bare)), "the attention part has no residual: h_mid = h + attn(ln1(h)), "
                                    "not attn(ln1(h))"),
            (mlp(ln2(mid)), "the MLP part has no residual: return h_mid + mlp(ln2(h_mid)), not mlp(ln2(h_mid))"),
            (h + mlp(ln2(mid)), "the MLP part adds to h, not to h_mid: return h_mid + mlp(ln2(h_mid))"),
            (mid + mlp(ln2(h)), "the MLP reads h instead of h_mid (a parallel block): it reads ln2(h_mid), "
                                "after the attention part has written"),
            (mid + mlp(ln1(mid)), "ln1 is used twice: the MLP part reads ln2(h_mid), through its own LayerNorm"),
            (swapped + mlp(ln1(swapped)), "ln1 and ln2 are swapped: ln1 comes before the attention, ln2 before "
                                          "the MLP"),
            (normed + mlp(ln2(normed)), "the residual adds ln1(h), not h: h_mid = h + attn(ln1(h)); the stream "
                                        "itself goes around the sub-block"),
            (ln2(normed) + mlp(ln2(normed)), "the residual adds the normalised vector, not the stream: "
                                             "h_mid = h + attn(ln1(h)), then h_mid + mlp(ln2(h_mid))"),
            (plain + mlp(plain), "there is no LayerNorm: the sub-blocks read ln1(h) and ln2(h_mid)"),
            (mid, "the MLP part is missing: return h_mid + mlp(ln2(h_mid))"),
        ]
        first = h + mlp(ln2(h))                # the MLP before the attention
        wired += [
            (first + attn(ln1(first)), "the MLP comes before the attention: attention first, "
                                       "h_mid = h + attn(ln1(h)), then h_mid + mlp(ln2(h_mid))"),
            (ln2(mid + mlp(ln2(mid))), "the output goes through ln2 once more: a pre-norm block returns the "
                                       "stream itself, h_mid + mlp(ln2(h_mid)), unnormalised (the one norm "
                                       "after the last layer is the model's final LayerNorm, not the block's)"),
        ]
    return [(wrong.double().numpy(), hint) for wrong, hint in wired]


def layer_norm_error(message):
    """A sentence for a learner's LayerNorm that stopped with ``message``: state_dict keys that are not the
    course's (``state_keys_sentence``), or a lost axis (``keepdim_hint``)."""
    return state_keys_sentence(
        message, "LayerNorm", advice="name them weight and bias and make them parameters, self.weight = "
        "nn.Parameter(torch.ones(d)) and self.bias = nn.Parameter(torch.zeros(d)) (a plain tensor attribute is not "
        "in the state_dict, so the trained values cannot load into it)") or keepdim_hint(message, "keepdim=True")


def block_error(message):
    """A sentence for a learner's Block that stopped with ``message``: state_dict keys that are not the
    course's (``state_keys_sentence``), naming the submodules when keys are missing."""
    return state_keys_sentence(
        message, "Block", advice="the block's submodules are named ln1, attn, ln2 and mlp (a LayerNorm(d_model), a "
        "MultiHeadAttention(d_model, n_heads), a LayerNorm(d_model) and an MLP(d_model, d_ff))") or message


@exercise("your pre-norm block", answer=Module("an nn.Module class Block(d_model, n_heads, d_ff)",
          own=("helpers.normalization.compute.Block", "helpers.model.Block")), keeps="08")
def block_module(run, cat):
    """``run``: the learner's class Block as a ``run(args, state, *inputs)``. It must equal the
    cat model's two layers (their state_dicts loaded by name) on the stream they read on real
    prompts, one sequence and a batch of two, to MODULE_ATOL."""
    check_shipped(cat, "cat")
    cases = block_cases(float32_model(cat))
    problems = list(module_problems(run, cases, block_variants, "Block",
                                    "h_mid = h + attn(ln1(h)), then h_mid + mlp(ln2(h_mid))", block_error))
    if problems:
        yield from problems
        return
    from .compute import Block   # the course's, whose gradients the learner's must give
    _, args, state, h, _ = cases[1]
    yield from exercises.gradient_problems(run, Block, args, state, (h,), "Block")
