"""Capture, replace and patch inside any course Transformer: the ground floor that ablation
(chapter 10), the head scores (chapter 05) and the real model (chapter 11) share.

Everything goes through ``model(ids, replace={trace name: fn})``: capturing named tensors
(``capture``, ``head_outputs``), zero, mean and resample ablation (``ablation_replace``),
activation patching in both directions (``patch_heads``, ``patch_residual``), and reading the
residual stream (``logit_lens``, ``direct_logit_attribution``). Nothing here knows a world or
a task: the caller brings the prompts, the reference and the metric.
"""
import contextlib

import numpy as np
import torch

from .errors import CourseInputError, about_gib, check_choice, check_index, check_number, check_positive_int, \
    check_seed, check_switch, check_tensor, described, fail, gib, items_of, length, message_of, shown, to_numpy, whole
from .model import MAX_TRACE_BYTES, Config, Transformer, check_collection, check_replace, check_squares, eval_mode, \
    rotate_pairs, trace_names
from .states import course_modes, on_the_cpu

KINDS = ("zero", "mean", "resample")
MAX_PASS_BYTES = MAX_TRACE_BYTES   # 0.5 GiB: the most one batched pass here (patching, a lens) may hold
PER_HEAD = ("scores", "weights", "head_out")
SWITCHES = {"causal", "attention", "ablate_heads", "positions", "scaled"}   # what capture passes on to the model   # trace names with a heads axis: (B, H, T, ...)

# ------------------------------------------------------------ checks: every argument before any work


def check_model(model):
    """The model's Config: a course Transformer (or a model that carries a Config as .cfg and runs
    ``model(ids, replace=...)``, e.g. chapter 12's GPT)."""
    cfg = getattr(model, "cfg", None)
    if not isinstance(cfg, Config) or not callable(model):
        fail(f"model should be a course model (a helpers.model.Transformer), but got {shown(model)}")
    return cfg


def check_ids(model, ids, one=False, name="ids"):
    """Token ids of this model as a LongTensor (T,) or (B, T); one=True: a single sequence (T,)
    (a batch of one, (1, T), counts; a larger batch is refused, never flattened)."""
    check_model(model)
    ids = Transformer.check_ids(model, ids)
    if one:
        if ids.dim() == 2 and ids.shape[0] != 1:
            fail(f"{name} should be one sequence (T,), but got a batch of shape {tuple(ids.shape)}")
        ids = ids.reshape(-1)
    return ids


def _whole(value, low, high, name, what):
    if isinstance(value, torch.Tensor) and value.numel() == 1 and not value.is_floating_point() \
            and value.dtype != torch.bool:
        value = value.item()
    expected = f"{what}, a whole number from {low} to {high}"
    value = whole(value, name, expected)   # (read by int's own method: a learner's subclass may raise or lie)
    if not low <= value <= high:
        fail(f"{name} should be {expected}, but got {shown(value)}")
    return value


def check_layer(model, layer, name="layer"):
    """A layer of the model, 0 .. n_layers-1 (never clamped)."""
    return _whole(layer, 0, check_model(model).n_layers - 1, name, "one of this model's layers")


def check_head(model, pair, name="a head"):
    """A (layer, head) pair of the model, each in range."""
    if not isinstance(pair, (tuple, list)) or length(pair) != 2:
        fail(f"{name} should be a (layer, head) pair, but got {shown(pair)}")
    cfg, (layer, head) = check_model(model), items_of(pair)   # (a subclass's __len__ or __iter__ may lie or raise)
    return (check_layer(model, layer, f"{name}'s layer"),
            _whole(head, 0, cfg.n_heads - 1, f"{name}'s head", "one of this model's heads"))


def check_token_id(model, token_id, name="token_id"):
    """A token id of the model's vocabulary, 0 .. V-1: a bool, a float or -2 is refused, never read."""
    return _whole(token_id, 0, check_model(model).vocab_size - 1, name, "a token id of this model")


def check_names(model, names, what, per_head=True):
    """A list of trace names this model makes (per_head=False: none with a heads axis)."""
    if isinstance(names, (str, bytes)) or not isinstance(names, (list, tuple)):
        fail(f"{what} should be a list of trace names such as ['L0.h'], but got {shown(names)}")
    allowed, cfg = trace_names(check_model(model)), model.cfg
    names = items_of(names)   # (read by the built-ins: a subclass's __len__ or __iter__ may lie or raise)
    for name in names:
        if not isinstance(name, str) or name not in allowed:
            fail(f"{what} should name intermediates this model makes, such as 'L0.h' (layers 0..{cfg.n_layers - 1}), "
                 f"but got {shown(name)}")
        if not per_head and name.split(".")[-1] in PER_HEAD:
            fail(f"{what} should name (B, T, ...) points such as 'L0.h', but {name} has a heads axis")
    return names


def check_residual_names(model, names, what="names"):
    """A non-empty list of distinct residual-stream points of this model (``residual_names``: h0,
    L{l}.h_mid, L{l}.h), the points patch_residual and logit_lens read."""
    names, points = check_names(model, names, what, per_head=False), residual_names(model)
    for name in names:
        if name not in points:
            fail(f"{what} should be residual-stream points such as 'h0' or 'L0.h' (patching.residual_names(model)), "
                 f"but got {shown(name)}")
    if not names or len(set(names)) != len(names):
        fail(f"{what} should be a non-empty list of distinct residual points such as 'L0.h', but got {shown(names)}")
    return names


def check_metric(metric):
    if not callable(metric):
        fail(f"metric should be a function metric(out) -> one number per row, but got {shown(metric)}")
    return metric


def _kept_bytes(cfg, names, B, T):
    """About the float32 bytes the captured ``names`` keep for a batch (B, T)."""
    width = {"scores": cfg.n_heads * T, "weights": cfg.n_heads * T, "logits": cfg.vocab_size,
             "pre": cfg.d_ff, "gate": cfg.d_ff, "act": cfg.d_ff}
    return sum(4 * B * T * width.get(name.split(".")[-1], cfg.d_model) for name in names)


def check_memory(model, B, T, names=(), what="this call", extra=0):
    """Refuse up front a batched pass (B, T) that, with the ``names`` it keeps, would hold more
    than MAX_PASS_BYTES (``Config.pass_bytes``, an estimate from the sizes alone)."""
    cfg = check_model(model)
    need = cfg.pass_bytes(B, T) + _kept_bytes(cfg, names, B, T) + extra
    if need > MAX_PASS_BYTES:
        fail(f"{what} should need at most {gib(MAX_PASS_BYTES)} (this course's limit), but its "
             f"batched pass of {B:,} rows of {T:,} tokens would need {about_gib(need, MAX_PASS_BYTES)}: "
             "use fewer or shorter prompts")


def _values(values, rows):
    """The metric's output checked: a tensor (rows,) of finite numbers."""
    if not isinstance(values, torch.Tensor) or tuple(values.shape) != (rows,):
        got = f"shape {tuple(values.shape)}" if isinstance(values, torch.Tensor) else shown(values)
        fail(f"metric(out) should return one number per row, a tensor of shape ({rows},), but returned {got}")
    if not values.is_floating_point():
        fail(f"metric(out) should return floating-point numbers (a mean of them is taken), but returned dtype "
             f"{values.dtype}: make them floats with .float()")
    bad = int((~torch.isfinite(values)).sum())
    if bad:
        fail(f"metric(out) should return finite numbers, but returned NaN or infinity in {bad} of its {rows} rows")
    return values


# ------------------------------------------------------------ capture and replace


class _Stop(BaseException):
    """Raised inside a forward pass once everything asked for has been captured (no Exception: the
    model turns an Exception from a replace function into a sentence, and this one is no error)."""


@on_the_cpu
def capture(model, ids, names, replace=None, stop_after=None, **switches):
    """One forward pass on ids (B, T) -> (logits (B, T, V), {name: the batched tensor}), e.g.
    names=("L0.head_out",) gives (B, H, T, d_k). ``replace``: None or a dict {trace name: function
    of one tensor} (the model's switch; anything else is refused); a tensor also in ``replace`` is
    captured after its replacement; switches go to the model. With ``stop_after`` (one of ``names``) the pass
    stops as soon as that tensor is made: nothing after it is computed, and logits is None."""
    names = check_names(model, names, "names")
    if stop_after is not None and not (isinstance(stop_after, str) and stop_after in names):
        fail(f"stop_after should be one of the names captured, {shown(names)}, or None, but got {shown(stop_after)}")
    ids = check_ids(model, ids)
    replace = check_replace(model.cfg, replace)   # a dict {trace name: function of one tensor}, or None
    check_memory(model, *(ids.shape if ids.dim() == 2 else (1, ids.shape[0])), names, "capture")
    unknown = sorted(set(switches) - SWITCHES)
    if unknown:
        fail(f"capture's switches should be among the model's {sorted(SWITCHES)}, but got {shown(unknown)}")
    got, hooks = {}, dict(replace)
    for name in names:
        inner = hooks.get(name, _same)

        def hook(x, name=name, inner=inner):
            y = got.setdefault(name, inner(x))
            if name == stop_after:
                raise _Stop
            return y
        hooks[name] = hook
    try:
        with torch.no_grad(), measured_mode(model):
            return model(ids, replace=hooks, **switches), got
    except _Stop:
        return None, got


def measured_mode(model):
    """The mode every pass here runs in: a torch module in eval mode (``model.eval_mode``: no dropout, so a
    measure gives one answer for one model and draws nothing from torch's global generator; afterwards, also
    after an error, each module back in its own mode); anything else (a callable with a Config) as it is."""
    return eval_mode(model) if isinstance(model, torch.nn.Module) else contextlib.nullcontext(model)


def _same(x):
    return x


@on_the_cpu
def head_outputs(model, ids):
    """{layer: (B, H, T, d_k)} every head's output (before W_O) on ids (B, T)."""
    names = [f"L{layer}.head_out" for layer in range(check_model(model).n_layers)]
    got = capture(model, ids, names)[1]
    return {layer: got[name] for layer, name in enumerate(names)}


@on_the_cpu
def mean_head_outputs(model, ids, lengths=None, per_position=True):
    """{layer: (H, T, d_k)} each head's output averaged over the reference batch ids (B, T).

    lengths: (B,) real lengths of padded rows (position t of row b counts only if t < lengths[b]); with
    per_position, one row at least runs to the end (T), so that every position has a mean.
    per_position=False also averages over positions: (H, 1, d_k), the same at every position.
    """
    ids = check_ids(model, ids)
    ids = ids[None] if ids.dim() == 1 else ids
    per_position = check_switch(per_position, "per_position")
    B, T = ids.shape
    if lengths is None:
        lengths = torch.full((B,), T)
    else:
        got = to_numpy(lengths, "lengths")
        if got.shape != (B,) or not (got == np.round(got)).all() or got.min() < 1 or got.max() > T:
            fail(f"lengths should be ({B},) whole numbers from 1 to {T}, one per row of ids, but got {shown(lengths)}")
        if per_position and got.max() < T:
            fail(f"lengths should give at least one row the full length {T} (a position no row reaches has no mean), "
                 f"but the longest is {int(got.max())}")
        lengths = torch.as_tensor(got.astype(np.int64))
    real = (torch.arange(T)[None] < lengths[:, None]).float()[:, None, :, None]   # (B, 1, T, 1)
    out = {}
    for layer, x in head_outputs(model, ids).items():
        if per_position:
            out[layer] = (x * real).sum(0) / real.sum(0)
        else:
            out[layer] = (x * real).sum((0, 2))[:, None] / real.sum()
    return out


def ablation_replace(heads, kind="zero", means=None, source=None):
    """The ``replace`` dict that ablates ``heads`` ((layer, head) pairs) in one forward pass.

    Each head's output (B, H, T, d_k) is replaced by 0 (zero), by means[layer][head, :T] from
    ``mean_head_outputs`` (mean), or by source[layer][:, head, :T] from ``head_outputs`` on
    other prompts, (B or 1, H, >= T, d_k) (resample).
    """
    check_choice(kind, "the ablation kind", KINDS)
    need = {"mean": means, "resample": source}.get(kind)
    if kind != "zero" and need is None:
        fail(f"{kind} ablation should get the {'means' if kind == 'mean' else 'source'} argument, but got None")
    if kind != "zero" and not isinstance(need, dict):
        fail(f"{'means' if kind == 'mean' else 'source'} should be a dict {{layer: tensor}}, but got {shown(need)}")
    if isinstance(heads, (str, bytes, dict)) or not isinstance(heads, (list, tuple, set, frozenset)):
        fail(f"heads should be a list of (layer, head) pairs, but got {shown(heads)}")
    by_layer = {}
    for given in check_collection(heads, "heads", "a list of (layer, head) pairs"):   # (read by the built-ins)
        pair = items_of(given) if isinstance(given, (tuple, list)) else ()
        if len(pair) != 2 or any(
                isinstance(i, (bool, np.bool_)) or not isinstance(i, (int, np.integer)) or i < 0 for i in pair):
            fail(f"heads should hold (layer, head) pairs of whole numbers from 0, but got {shown(given)}")
        by_layer.setdefault(int(pair[0]), []).append(int(pair[1]))

    def swap(layer, chosen):
        def fn(x):
            _check_swap(x, layer, chosen, kind, means if kind == "mean" else source)
            x = x.clone()
            T = x.shape[2]
            for head in chosen:
                x[:, head] = 0.0 if kind == "zero" else (
                    means[layer][head, :T] if kind == "mean" else source[layer][:, head, :T])
            return x
        return fn
    return {f"L{layer}.head_out": swap(layer, chosen) for layer, chosen in by_layer.items()}


def _check_swap(x, layer, chosen, kind, given):
    """Before a head is swapped: each head in range of x (B, H, T, d_k), the means (H, >= T or 1, d_k)
    or the source (B or 1, H, >= T, d_k) of that layer there, finite."""
    B, H, T, d_k = x.shape
    if max(chosen) >= H:
        fail(f"a head to ablate should be one of layer {layer}'s heads 0..{H - 1}, but got head {max(chosen)}")
    if kind == "zero":
        return
    name = "means" if kind == "mean" else "source"
    t = given.get(layer) if isinstance(given, dict) else None
    if not isinstance(t, torch.Tensor):
        fail(f"{name} should hold a tensor for layer {layer} (from {'mean_head_outputs' if kind == 'mean' else 'head_outputs'}), "
             f"but got {shown(t)}")
    want = (H, T, d_k) if kind == "mean" else (B, H, T, d_k)
    fits = t.dim() == len(want) and (t.shape[-3] == H and t.shape[-1] == d_k and (t.shape[-2] >= T or kind == "mean"
                                     and t.shape[-2] == 1) and (kind == "mean" or t.shape[0] in (1, B)))
    if not fits:
        fail(f"{name}[{layer}] should have shape {want} (or more positions), but has {tuple(t.shape)}")
    if not torch.isfinite(t).all():
        fail(f"{name}[{layer}] should hold finite numbers, but holds NaN or infinity")


# ------------------------------------------------------------ activation patching

@on_the_cpu
def normalised(value, clean, corrupt):
    """The normalised metric (value - corrupt) / (clean - corrupt): 0 = the corrupted run's value,
    1 = the clean run's. For a logit difference this is the normalised logit difference.
    Undefined when the two runs give the same value (it would divide by zero): refused."""
    clean, corrupt = (_finite(x, name) for x, name in ((clean, "the clean value"), (corrupt, "the corrupted value")))
    if not (isinstance(value, torch.Tensor) and value.is_floating_point()
            or isinstance(value, np.ndarray) and value.dtype.kind == "f"):   # a grid of patched values is taken as it is
        value = _finite(value, "the value")
    if clean == corrupt:
        fail(f"the normalised metric divides by (clean - corrupted), so the two runs should give different values, "
             f"but both give {clean:.6g}: choose a corrupted prompt that changes the metric")
    return divided_by_gap(value - corrupt, clean - corrupt)


@on_the_cpu
def divided_by_gap(x, gap):
    """x / gap (the metric's clean - corrupted gap, not 0), else one sentence when the quotient overflows
    to inf (a gap too small for the float type): never an inf or NaN passed on as a number."""
    with np.errstate(divide="ignore", over="ignore", invalid="ignore"):   # an overflow is said below, not warned
        out = x / gap
    finite = torch.isfinite(out).all() if isinstance(out, torch.Tensor) else np.isfinite(out).all()
    if not finite:
        fail(f"the normalised metric should be finite, but dividing by the gap between the clean and corrupted "
             f"values, {gap:.3g}, overflows: choose a corrupted prompt that changes the metric more")
    return out


def _finite(x, name):
    """A number (or a one-element tensor) as a finite float."""
    if isinstance(x, torch.Tensor) and x.numel() == 1 and x.dtype != torch.bool:
        x = x.item()
    return check_number(x, name)


restored_fraction = normalised   # the older name: in denoising, the fraction of the gap the patch restores

DIRECTIONS = ("denoise", "noise")   # clean into the corrupted run (sufficient?); corrupted into the clean run (necessary?)


def _direction(clean_ids, corrupt_ids, direction):
    """(source ids, base ids): where the patched activations come from, and the run they go into."""
    check_choice(direction, "the patching direction", DIRECTIONS)
    return (clean_ids, corrupt_ids) if direction == "denoise" else (corrupt_ids, clean_ids)


@on_the_cpu
def patch_heads(model, clean, corrupt, metric, watch=(), direction="denoise", per_position=False):
    """Patch one head's output (at every position, or at one position) from one run into the other,
    every head (and position, and sequence) in one batched pass.

    clean, corrupt: ids (T,) or (B, T), pairs of the same length. metric(out) -> (rows,) with
    out = {"logits": (rows, T, V), plus every name in ``watch``, batched}. direction: "denoise"
    puts the clean output into the corrupted run (is this head's output enough to bring the answer
    back?), "noise" puts the corrupted output into the clean run (does the answer need it?).
    Returns (layers, heads), or (layers, heads, T) per position: the metric's mean over the B
    pairs, normalised (0 = the corrupted run, 1 = the clean run), in both directions.
    """
    L, H = check_model(model).n_layers, model.cfg.n_heads
    check_metric(metric)
    watch = check_names(model, watch, "watch")
    per_position = check_switch(per_position, "per_position")
    clean_ids, corrupt_ids = _pair(model, clean, corrupt)
    source_ids, base_ids = _direction(clean_ids, corrupt_ids, direction)
    B, T = clean_ids.shape
    check_memory(model, L * H * (T if per_position else 1) * B, T, watch, "patch_heads")
    source = head_outputs(model, source_ids)
    cells = [(l, h, t) for l in range(L) for h in range(H) for t in (range(T) if per_position else [None])]

    def patch(layer):
        def fn(x):
            x = x.clone()
            for i, (l, h, t) in enumerate(cells):
                if l == layer:
                    rows = slice(i * B, (i + 1) * B)
                    if t is None:
                        x[rows, h] = source[layer][:, h]
                    else:
                        x[rows, h, t] = source[layer][:, h, t]
            return x
        return fn
    replace = {f"L{l}.head_out": patch(l) for l in range(L)}
    patched = _measure(model, base_ids.repeat(len(cells), 1), metric, watch, replace).view(len(cells), B).mean(-1)
    out = normalised(patched, *metric_ends(model, clean_ids, corrupt_ids, metric, watch))
    return out.view(L, H, T) if per_position else out.view(L, H)


def residual_names(model):
    """The residual-stream points, in order: h0, then each block's h_mid (if it has an MLP) and h."""
    cfg, names = check_model(model), ["h0"]
    for layer in range(cfg.n_layers):
        names += ([f"L{layer}.h_mid"] if cfg.d_ff else []) + [f"L{layer}.h"]
    return names


@on_the_cpu
def patch_residual(model, clean, corrupt, metric, names=None, watch=(), direction="denoise"):
    """Patch the residual stream at one point and one position from one run into the other
    (``direction`` as in ``patch_heads``: "denoise" clean into corrupted, "noise" the reverse).

    clean, corrupt: ids (T,) or (B, T). names: residual points (default: h0 and each block's
    output L{l}.h). Returns (len(names), T): the metric's mean over the B pairs, normalised
    (0 = the corrupted run, 1 = the clean run), every (point, position) in one batched pass.
    """
    check_model(model)
    names = ["h0"] + [f"L{l}.h" for l in range(model.cfg.n_layers)] if names is None else \
        check_residual_names(model, names)
    check_metric(metric)
    watch = check_names(model, watch, "watch")
    clean_ids, corrupt_ids = _pair(model, clean, corrupt)
    source_ids, base_ids = _direction(clean_ids, corrupt_ids, direction)
    B, T = clean_ids.shape
    check_memory(model, len(names) * T * B, T, watch, "patch_residual")
    got = capture(model, source_ids, names)[1]

    def patch(first, name):
        def fn(x):
            x = x.clone()
            for t in range(T):
                rows = slice((first + t) * B, (first + t + 1) * B)
                x[rows, t] = got[name][:, t]
            return x
        return fn
    replace = {name: patch(i * T, name) for i, name in enumerate(names)}
    patched = _measure(model, base_ids.repeat(len(names) * T, 1), metric, watch, replace)
    patched = patched.view(len(names), T, B).mean(-1)
    return normalised(patched, *metric_ends(model, clean_ids, corrupt_ids, metric, watch))


def _pair(model, clean, corrupt):
    """clean and corrupt ids as (B, T) each, of one shape."""
    clean, corrupt = (check_ids(model, x, name=name) for x, name in ((clean, "clean"), (corrupt, "corrupt")))
    clean, corrupt = (x[None] if x.dim() == 1 else x for x in (clean, corrupt))
    if clean.shape != corrupt.shape:
        fail(f"clean and corrupted ids should have one shape, but got {tuple(clean.shape)} and "
             f"{tuple(corrupt.shape)}")
    if torch.equal(clean, corrupt):
        fail("the clean and corrupted ids should differ (patching measures what the difference changes, and the "
             "normalised metric divides by it), but they are the same tokens")
    return clean, corrupt


def _measure(model, ids, metric, watch, replace):
    """metric of one pass with ``replace`` (and the ``watch`` names captured): (B,)."""
    logits, got = capture(model, ids, watch, replace)
    return _values(_metric_of(metric, {**got, "logits": logits}), ids.shape[0])


def _metric_of(metric, out):
    """metric(out); an error inside the caller's metric told as one sentence (the model is untouched)."""
    try:
        return metric(out)
    except CourseInputError:   # a sentence already (a course metric that names what it expected)
        raise
    except Exception as error:   # noqa: BLE001 — the caller's function; its error becomes a sentence
        said = " ".join(message_of(error, 200).split())   # the learner's own words, on one line
        fail(f"metric(out) should return one number per row, but it raised {type(error).__name__}: {said}")


@on_the_cpu
def metric_ends(model, clean, corrupt, metric, watch=()):
    """(mean metric of the clean runs, of the corrupted runs), floats: the two ends of the
    normalised scale. clean, corrupt: ids (B, T) of one shape; metric and watch as in ``patch_heads``."""
    clean, corrupt = _pair(model, clean, corrupt)
    check_metric(metric)
    watch = check_names(model, watch, "watch")
    check_memory(model, *clean.shape, watch, "metric_ends")   # (named for the caller)
    return tuple(float(_measure(model, ids, metric, watch, {}).mean()) for ids in (clean, corrupt))


# ------------------------------------------------------------ logit lens and direct logit attribution

@on_the_cpu
def logit_lens(model, ids, names=None):
    """(names, logits (P, T, V)): the final norm and the unembedding applied to each residual point
    (default ``residual_names``) of one sequence ids (T,). The last point gives the model's logits."""
    ids = check_ids(model, ids, one=True)
    names = residual_names(model) if names is None else check_residual_names(model, names)
    cfg, T = model.cfg, ids.shape[0]
    check_memory(model, 1, T, names, "logit_lens", extra=4 * len(names) * T * cfg.vocab_size)
    got = capture(model, ids.view(1, -1), names)[1]
    check_finite_stream(got, names)
    with torch.no_grad():
        return names, check_finite_logits(torch.stack([model.unembed(got[name][0]) for name in names]))


def check_finite_stream(got, names):
    """One sentence when a point of the residual stream (``got[name]``, captured) holds NaN or inf, naming the
    first one in ``names``' order; a check of what the pass made anyway (not a scan of every weight)."""
    for name in names:
        if not bool(torch.isfinite(got[name]).all()):
            fail(f"the residual stream should hold finite numbers, but at {name} it holds NaN or inf: the model's "
                 "weights hold NaN or inf, or its numbers overflow")


def check_finite_logits(logits):
    """``logits`` (..., V), what the read-out made, else one sentence (the stream was finite: the final norm's
    or the unembedding's weights hold NaN or inf, or the product overflows)."""
    if not bool(torch.isfinite(logits).all()):
        fail("the read-out's logits should be finite numbers, but hold NaN or inf: the model's final norm or "
             "unembedding E holds NaN or inf, or the product overflows")
    return logits


@on_the_cpu
def token_lens(model, ids, token_id):
    """What the read-out would say after each layer, at the last position of ids (T,), about one
    token: dict(layers (list of ints, -1 first: the embedding), p (the probability of token_id),
    rank (0 = top), top (the top token id)), lists per layer. The residual stream after the
    embedding and after each block goes through the final norm and the tied unembedding.
    token_id: 0 .. V-1 (a bool, a float or a negative id is refused, never read)."""
    ids = check_ids(model, ids, one=True)
    token_id = check_token_id(model, token_id)
    names = ["h0"] + [f"L{layer}.h" for layer in range(model.cfg.n_layers)]
    got = capture(model, ids.view(1, -1), names, stop_after=names[-1])[1]
    check_finite_stream(got, names)
    with torch.no_grad():                # the read-out of the last position only: (layers + 1, V)
        logits = check_finite_logits(model.unembed(torch.stack([got[name][0, -1] for name in names])))
    probs = torch.softmax(logits, dim=-1)
    rank = (logits > logits[:, token_id:token_id + 1]).sum(-1)
    return dict(layers=list(range(-1, model.cfg.n_layers)), p=probs[:, token_id].tolist(),
                rank=rank.tolist(), top=logits.argmax(-1).tolist())


@on_the_cpu
def final_norm_scale(model, h):
    """The final norm's divisor for residual rows h (..., d_model) -> (..., 1): LayerNorm's
    sqrt(var(h) + eps) (the variance over d_model, biased), RMSNorm's sqrt(mean(h^2) + eps);
    None for a model without a final norm."""
    cfg = check_model(model)
    if not isinstance(h, torch.Tensor) or not h.is_floating_point() or h.dim() == 0 or h.shape[-1] != cfg.d_model:
        fail(f"h should be residual rows, a float tensor (..., {cfg.d_model}), but got "
             + described(h, "h"))
    if not check_tensor(h, "h").isfinite().all():   # (float8, in which torch computes almost nothing: refused)
        fail("h should hold finite numbers (residual rows), but holds NaN or infinity")
    ln = model.final_ln
    if ln is None:
        return None
    if h.numel():
        check_squares(h, "h", h.dtype)   # its variance, in h's own dtype, would be inf
    eps = final_norm_eps(ln, h.dtype)
    if isinstance(ln, torch.nn.RMSNorm):
        return torch.sqrt(h.pow(2).mean(-1, keepdim=True) + eps)
    return torch.sqrt(h.var(-1, unbiased=False, keepdim=True) + eps)


def final_norm_eps(ln, dtype):
    """The ε a final norm ``ln`` adds under its square root: its own, or (an RMSNorm made with eps=None)
    the machine epsilon of ``dtype``."""
    return ln.eps if ln.eps is not None else torch.finfo(dtype).eps


SCALE_SLACK = 0.99   # a divisor computed in float16 or float32 may round a hair below √ε


@on_the_cpu
def smallest_scale(model):
    """The smallest divisor the model's final norm can have, √ε (its divisor is √(var + ε), or an
    RMSNorm's √(mean(h²) + ε)), less SCALE_SLACK for rounding; 0.0 for a model without a final norm."""
    ln = model.final_ln
    return 0.0 if ln is None else SCALE_SLACK * final_norm_eps(ln, model.E.dtype) ** 0.5


@on_the_cpu
def residual_parts(model, ids, position=-1):
    """(parts, h): what each part of ``model`` writes into the residual stream at ``position`` of
    ids (T,), and the final residual row h (d_model,) that the final norm reads.

    parts: an ordered dict of (d_model,) vectors, {"embedding", "L0H0", ..., "L0 b_O", "L0 MLP",
    ...} (no b_O entry when the model has no attention bias, no MLP entry when it has no MLP);
    their sum is h. Pre-norm or no-norm models only: a post-norm block rescales the stream.
    """
    cfg = check_model(model)
    if cfg.norm == "post":
        fail("direct logit attribution needs the residual stream to be a sum of parts: a pre-norm or "
             "no-norm model, but this one is post-LN (each block normalises its own output)")
    names = ["h0"] + [f"L{l}.{n}" for l in range(cfg.n_layers) for n in ("head_out", "mlp") if
                      n != "mlp" or cfg.d_ff] + [f"L{cfg.n_layers - 1}.h"]
    ids = check_ids(model, ids)
    if ids.dim() != 1:
        fail(f"direct logit attribution reads one sequence: ids of shape (T,), but got {tuple(ids.shape)}")
    T = ids.shape[0]
    position = _whole(position, -T, T - 1, "position", f"a position of these {T} tokens")
    got = {k: v[0, ..., position, :] if k.endswith("head_out") else v[0, position]
           for k, v in capture(model, ids.view(1, -1), names)[1].items()}
    parts, d_k = {"embedding": got["h0"]}, cfg.d_k
    with torch.no_grad():
        for layer, block in enumerate(model.blocks):
            attn = block.attn
            for head in range(cfg.n_heads):
                parts[f"L{layer}H{head}"] = got[f"L{layer}.head_out"][head] @ attn.W_O[head * d_k:(head + 1) * d_k]
            if attn.b_O is not None:
                parts[f"L{layer} b_O"] = attn.b_O.detach()
            if cfg.d_ff:
                parts[f"L{layer} MLP"] = got[f"L{layer}.mlp"]
    return parts, got[f"L{cfg.n_layers - 1}.h"]


BIAS_PARTS = (" b_O", "final-norm bias")   # the names of the parts that are constants, not computed writes


@on_the_cpu
def attribute(model, parts, direction, scale):
    """{name: float} each part's direct contribution to direction · logits, the final norm's scale
    frozen at ``scale`` (a number or a (1,) tensor: ``final_norm_scale`` of the run to explain).

    A LayerNorm centres each part (subtracts its mean over d_model), divides it by the scale and
    multiplies by gamma; an RMSNorm only divides and multiplies (it does not centre); then the tied
    unembedding reads it along direction. A LayerNorm's beta adds the "final-norm bias" entry.
    """
    cfg, ln = check_model(model), model.final_ln
    direction = check_direction(model, direction)
    if not isinstance(parts, dict) or not parts or not all(
            isinstance(p, torch.Tensor) and p.shape == (cfg.d_model,) and p.is_floating_point() for p in parts.values()):
        fail(f"parts should be a dict {{name: (d_model,) = ({cfg.d_model},) tensor}} as residual_parts gives, "
             f"but got {shown(parts)}")
    bad = [name for name, p in parts.items() if not bool(check_tensor(p, f"the part {shown(name)}").isfinite().all())]
    if bad:
        fail(f"parts should hold finite numbers, but the part {shown(bad[0])} holds NaN or inf")
    if scale is None and ln is not None:
        fail("scale should be the final norm's frozen divisor (final_norm_scale of the run to explain), but got None")
    scale = check_scale(model, scale, (1,))
    parts = {name: p.detach().to(model.E.dtype) for name, p in parts.items()}   # (as direction is)
    with torch.no_grad():
        u = model.E.T @ direction                                      # (d_model,)
        if ln is None:
            return check_finite_terms({name: float(p @ u) for name, p in parts.items()})
        centre = not isinstance(ln, torch.nn.RMSNorm)
        gamma = ln.weight if ln.weight is not None else torch.ones(cfg.d_model)
        out = {name: float(((p - p.mean() if centre else p) / scale * gamma) @ u) for name, p in parts.items()}
        if getattr(ln, "bias", None) is not None:
            out["final-norm bias"] = float(ln.bias @ u)
    return check_finite_terms(out)


def check_finite_terms(terms):
    """``terms`` ({name: a number or a tensor}, direct contributions), else one sentence naming the first
    that overflowed to inf or NaN (parts, a direction or weights too large for the model's float type)."""
    for name, value in terms.items():
        if not bool(torch.isfinite(torch.as_tensor(value)).all()):
            fail(f"each direct contribution should be a finite number, but {shown(name)}'s overflows to NaN or inf: "
                 "the parts, the direction or the model's weights are too large for its float type")
    return terms


def check_direction(model, direction):
    """direction as a finite float tensor (V,) of the model's dtype."""
    V = check_model(model).vocab_size
    if isinstance(direction, torch.Tensor):
        arr = direction.detach()
        if arr.is_complex() or arr.dtype == torch.bool:
            fail(f"direction should hold real numbers, one per vocabulary entry, but has dtype {arr.dtype}")
        arr = arr.to(model.E.dtype)
    else:
        arr = torch.as_tensor(to_numpy(direction, "direction"), dtype=model.E.dtype)
    if tuple(arr.shape) != (V,):
        fail(f"direction should be one weight per vocabulary entry, shape ({V},), but got {tuple(arr.shape)}")
    if not torch.isfinite(arr).all():
        fail("direction should hold finite numbers, but holds NaN or infinity")
    return arr


def check_scale(model, scale, shape):
    """A frozen final-norm scale for ``model``: a positive finite number (returned as a float: a huge int
    would not divide a tensor), or a tensor that broadcasts to ``shape``; None passes. No entry may be
    smaller than the norm's smallest divisor, √ε (``smallest_scale``): dividing by less could only
    inflate the parts, and by a tiny number overflow. A tensor is returned in the model's dtype (as
    ``check_direction`` returns direction); a float8 one is refused."""
    if scale is None:
        return None
    smallest = smallest_scale(model)
    if not isinstance(scale, torch.Tensor):
        scale = check_number(scale, "scale", low=0, low_open=True)
        if scale < smallest:
            too_small(f"{scale:.3g}", smallest)
        return scale
    if scale.is_complex() or scale.dtype == torch.bool:
        fail(f"scale should hold real numbers (a norm's divisor), but has dtype {scale.dtype}")
    t, shape = check_tensor(scale, "scale").detach(), tuple(shape)
    # it fits when, lined up from the right, each of its sizes is 1 or the size it meets (written out:
    # torch.broadcast_shapes imports a quarter of a second of torch on its first call)
    fits = t.dim() <= len(shape) and all(n in (1, m) for n, m in zip(t.shape[::-1], shape[::-1]))
    if not fits:
        fail(f"scale should have a shape that fits {tuple(shape)}, but has shape {tuple(t.shape)}")
    if t.numel() == 0 or not (torch.isfinite(t) & (t > 0)).all():
        fail(f"scale should be positive and finite (a norm's divisor), but got {shown(scale)}")
    if float(t.min()) < smallest:
        too_small(f"a tensor whose smallest entry is {float(t.min()):.3g}", smallest)
    return t.to(model.E.dtype)


def too_small(got, smallest):
    """The sentence for a frozen scale (``got``: how it reads) below the final norm's smallest divisor."""
    fail(f"scale should be at least √ε = {smallest / SCALE_SLACK:.3g} (the final norm's divisor √(var + ε) is never "
         f"smaller: final_norm_scale gives it), but got {got}")


@on_the_cpu
def direct_logit_attribution(model, ids, direction, position=-1, scale=None):
    """Each part's direct contribution to direction · logits at ``position`` of ids (T,).

    direction: (V,) weights over the vocabulary (a one-hot for one logit; +1/2, -1/2 ... for a
    difference). The assumption: the final norm's scale is frozen at one run's value (default:
    this run's own, ``final_norm_scale``; give the clean run's ``scale`` when explaining a patched
    run), which makes the norm linear, so the parts add up. Returns an ordered dict {"embedding",
    "L0H0", ..., "L0 b_O", "L0 MLP", ..., "final-norm bias": float} (see ``residual_parts``,
    ``attribute``); with the run's own scale its sum equals direction · logits, and the sum of
    the entries whose names end in ``BIAS_PARTS`` is the part no input changes. Works for
    LayerNorm and RMSNorm (the real model), pre-norm or no-norm models.
    """
    check_direction(model, direction)   # both before the pass
    check_scale(model, scale, (1,))
    parts, h = residual_parts(model, ids, position)
    if scale is None:
        scale = final_norm_scale(model, h)
    return attribute(model, parts, direction, scale)


def direct_effects_kept(model, B, T):
    """What ``direct_effects`` keeps of a pass (B, T) as its memory check counts it: (trace names, extra bytes),
    the streams and every head's output; also for a caller's check up front, in the caller's name."""
    cfg = model.cfg
    return ["L0.h"] * (2 * cfg.n_layers + 4), 4 * B * T * cfg.n_layers * cfg.n_heads * cfg.d_k


@on_the_cpu
def direct_effects(model, ids, targets, replace=None, scale=None):
    """Every part's direct contribution to one logit per position, for a batch, in one run.

    ids: (B, T); targets: (B, T) the token whose logit is read at each position (e.g. the next
    token). The run applies ``replace`` (an ablation, say); each part's write goes through the
    final norm with its scale frozen (this run's own by default, or ``scale`` (B, T, 1), e.g. the
    clean run's) and is read along the target's row of E, as ``attribute`` does for one position
    and one direction. Returns dict(terms: {"embedding", "L0H0", ..., "L0 b_O", "L0 MLP", ...,
    "final-norm bias": (B, T)} in ``residual_parts``' order, summing to the target's logit with the
    run's own scale; heads (B, layers, heads, T) the heads' terms; scale (B, T, 1); outputs
    {layer: (B, H, T, d_k)} every head's output in that run; h (B, T, d_model) the final residual
    stream). With one head ablated, a head whose term grows writes more when it is gone: a backup
    head (ARENA 1.4's test of the name movers' backups).
    """
    cfg, ln = check_model(model), model.final_ln
    ids = check_ids(model, ids)
    targets = check_ids(model, targets, name="targets")
    if ids.dim() != 2 or targets.shape != ids.shape:
        fail(f"ids and targets should be (B, T) of one shape, but got {tuple(ids.shape)} and {tuple(targets.shape)}")
    B, T = ids.shape
    scale = check_scale(model, scale, (B, T, 1))
    names, extra = direct_effects_kept(model, B, T)
    check_memory(model, B, T, names, "direct_effects", extra=extra)
    if cfg.norm == "post":
        fail("direct effects need the residual stream to be a sum of parts: a pre-norm or no-norm model, "
             "but this one is post-LN")
    last = f"L{cfg.n_layers - 1}.h"
    names = ["h0"] + [f"L{l}.{n}" for l in range(cfg.n_layers) for n in ("head_out", "mlp") if n != "mlp" or cfg.d_ff]
    got = capture(model, ids, names + [last], replace, stop_after=last)[1]
    with torch.no_grad():
        if scale is None:
            scale = final_norm_scale(model, got[last])
        read = model.E[targets]                                          # (B, T, d_model)
        if ln is not None:
            gamma = ln.weight if ln.weight is not None else torch.ones(cfg.d_model)
            read = read * gamma / scale
            if not isinstance(ln, torch.nn.RMSNorm):                     # LayerNorm centres each write
                read = read - read.mean(-1, keepdim=True)
        terms, heads = {"embedding": (got["h0"] * read).sum(-1)}, []
        for layer, block in enumerate(model.blocks):
            attn = block.attn
            W_O = attn.W_O.view(cfg.n_heads, cfg.d_k, cfg.d_model)
            heads.append(torch.einsum("bhtk,hkd,btd->bht", got[f"L{layer}.head_out"], W_O, read))
            terms.update({f"L{layer}H{h}": heads[-1][:, h] for h in range(cfg.n_heads)})
            if attn.b_O is not None:
                terms[f"L{layer} b_O"] = read @ attn.b_O
            if cfg.d_ff:
                terms[f"L{layer} MLP"] = (got[f"L{layer}.mlp"] * read).sum(-1)
        if getattr(ln, "bias", None) is not None:
            terms["final-norm bias"] = (model.E[targets] @ ln.bias).expand_as(terms["embedding"]).clone()
    return dict(terms=check_finite_terms(terms), heads=torch.stack(heads, 1), scale=scale, h=got[last],
                outputs={l: got[f"L{l}.head_out"] for l in range(cfg.n_layers)})


# ------------------------------------------------------------ path patching and composition scores

PARTS = ("q", "k", "v")


@on_the_cpu
def path_patch(model, clean, corrupt, metric, sender, receivers, parts=PARTS, watch=(), direction="denoise",
               freeze=()):
    """Path patching: the sender head's output, taken from the source run, reaches each receiver
    head only through one of its inputs (its query, key or value); every other path stays as in
    the base run (``direction``: "denoise" clean into corrupted, "noise" the reverse).

    sender: (layer, head); receivers: [(layer, head)] in later layers, all in one layer. One run of
    the base ids with the sender's output replaced (and every head of the layers in between frozen
    at the base run's outputs; MLPs recomputed) records the receivers' inputs; then each
    (receiver, part) is put alone into an otherwise untouched base run, all in one batched pass.
    With grouped-query attention a key or value patch reaches every query head of its group.
    freeze: MLP outputs ("L{l}.mlp", l before the receivers' layer) also held at the base run's
    values in the sender's run, so the path sender -> MLP -> receiver is cut (a direct path).
    Returns {(receiver, part): the metric's mean over the pairs, normalised (0 = the corrupted
    run, 1 = the clean run)}.
    """
    cfg = check_model(model)
    check_metric(metric)
    watch = check_names(model, watch, "watch")
    sender = check_head(model, sender, "the sender")
    if isinstance(receivers, (str, bytes, dict)) or not isinstance(receivers, (list, tuple)) or not length(receivers):
        fail(f"receivers should be a non-empty list of (layer, head) pairs, but got {shown(receivers)}")
    receivers = [check_head(model, r, "a receiver") for r in items_of(receivers)]   # (read by the built-ins)
    layers = {r[0] for r in receivers}
    if len(layers) != 1 or not 0 <= sender[0] < min(layers) < cfg.n_layers:
        fail(f"path patching needs receivers in one layer after the sender's layer {sender[0]}, but got {receivers}")
    if isinstance(parts, (str, bytes)) or not isinstance(parts, (list, tuple)) or not length(parts):
        fail(f"parts should be a non-empty list of a receiver's inputs {PARTS}, but got {shown(parts)}")
    parts = items_of(parts)   # (each a plain str: a subclass's __len__, __iter__ or __eq__ may lie or raise)
    bad = [p for p in parts if not isinstance(p, str) or p not in PARTS]
    if bad:
        fail(f"each of parts should be one of a receiver's inputs {PARTS}, but got {shown(bad)}")
    reader = layers.pop()
    freeze = _mlps_before(model, freeze, reader)
    clean_ids, corrupt_ids = _pair(model, clean, corrupt)
    source_ids, base_ids = _direction(clean_ids, corrupt_ids, direction)
    B, d_k = clean_ids.shape[0], cfg.d_k
    check_memory(model, len(receivers) * len(parts) * B, clean_ids.shape[1], watch, "path_patch")
    group = cfg.n_heads // (cfg.n_kv_heads or cfg.n_heads)
    source, base = head_outputs(model, source_ids), head_outputs(model, base_ids)

    def sender_swap(x):
        x = x.clone()
        x[:, sender[1]] = source[sender[0]][:, sender[1]]
        return x
    replace = {f"L{sender[0]}.head_out": sender_swap}
    replace.update({f"L{m}.head_out": (lambda x, m=m: base[m]) for m in range(sender[0] + 1, reader)})
    held = capture(model, base_ids, freeze)[1] if freeze else {}
    replace.update({name: (lambda x, name=name: held[name]) for name in freeze})
    seen = capture(model, base_ids, [f"L{reader}.{p}" for p in parts], replace)[1]
    cells = [(r, p) for r in receivers for p in parts]

    def patch(part):
        def fn(x):
            x = x.clone()
            for i, (r, p) in enumerate(cells):
                if p == part:
                    col = r[1] if part == "q" else r[1] // group
                    cols = slice(col * d_k, (col + 1) * d_k)
                    x[i * B:(i + 1) * B, :, cols] = seen[f"L{reader}.{part}"][:, :, cols]
            return x
        return fn
    patched = _measure(model, base_ids.repeat(len(cells), 1), metric, watch,
                       {f"L{reader}.{p}": patch(p) for p in parts})
    values = normalised(patched.view(len(cells), B).mean(-1), *metric_ends(model, clean_ids, corrupt_ids, metric, watch))
    return {cell: float(v) for cell, v in zip(cells, values)}


def _mlps_before(model, names, layer):
    """``names``: a list of MLP outputs "L{l}.mlp" of layers before ``layer`` (path_patch's freeze)."""
    names = check_names(model, names, "freeze", per_head=False)
    for name in names:
        if not name.endswith(".mlp") or int(name[1:].split(".")[0]) >= layer:
            fail(f"freeze should name MLP outputs before the receivers' layer {layer}, such as 'L0.mlp', "
                 f"but got {shown(name)}")
    return names


@on_the_cpu
def head_circuits(model, layer, head, fold_ln=True, offset=None):
    """(W_QK, W_OV), each (d_model, d_model), of one head, as row vectors use them: a query row x_q
    and a key row x_k score x_q W_QK x_kᵀ (W_QK = W_Q,h W_K,hᵀ), a source row x writes x W_OV
    (W_OV = W_V,h W_O,h). fold_ln: the head's own LayerNorm γ folded into W_Q, W_K, W_V (diag(γ) W)
    and W_O's rows centred (a write's mean over d_model is removed by the next LayerNorm anyway),
    as TransformerLens's fold_ln and center_writing_weights do (its fold_ln also centres W_Q, W_K,
    W_V by default; not done here).

    offset (rotary models only): the query's position minus the key's, δ. Rotary positions turn a
    query at i by R(i) and a key at j by R(j), so the score is x_q W_Q R(i) R(j)ᵀ W_Kᵀ x_kᵀ =
    x_q W_Q R(δ) W_Kᵀ x_kᵀ; with an offset W_QK is that, W_Q R(δ) W_Kᵀ. None: R left out (the
    rotation at δ = 0, the identity)."""
    cfg = check_model(model)
    layer, head = check_head(model, (layer, head))
    fold_ln = check_switch(fold_ln, "fold_ln")
    rotation = None if offset is None else rotary_rotation(model, offset)
    block, d_k = model.blocks[layer], cfg.d_k
    attn, group = block.attn, cfg.n_heads // (cfg.n_kv_heads or cfg.n_heads)
    q = slice(head * d_k, (head + 1) * d_k)
    kv = slice((head // group) * d_k, (head // group + 1) * d_k)
    with torch.no_grad():
        W_Q, W_K, W_V, W_O = attn.W_Q[:, q], attn.W_K[:, kv], attn.W_V[:, kv], attn.W_O[q]
        if fold_ln and cfg.norm == "pre" and getattr(block.ln1, "weight", None) is not None:
            gamma = block.ln1.weight[:, None]
            W_Q, W_K, W_V = gamma * W_Q, gamma * W_K, gamma * W_V
        if fold_ln and cfg.norm_kind == "layernorm":
            W_O = W_O - W_O.mean(-1, keepdim=True)
        if rotation is not None:
            W_Q = W_Q @ rotation
        return W_Q @ W_K.T, W_V @ W_O


@on_the_cpu
def rotary_rotation(model, offset):
    """R(δ), (d_k, d_k): the matrix rotary positions multiply a row (a query or key of one head) by
    at position δ, so that rotate_pairs(x, δ) = x R(δ) for the model's rotary base and pairing.
    R(i) R(j)ᵀ = R(i − j): a query at i meets a key at j through R(i − j) alone."""
    cfg = check_model(model)
    if cfg.positions != "rotary":
        fail(f"offset should be given only for a model with rotary positions (its W_QK depends on the "
             f"query-key offset), but this model's positions are {shown(cfg.positions)}")
    offset = check_index(offset, "offset (the query's position minus the key's)", cfg.n_max)
    rows = torch.eye(cfg.d_k)[:, None, None, :]                  # each basis row as a (1, 1, d_k) sequence
    return rotate_pairs(rows, offset, base=cfg.rotary_base, pairs=cfg.rotary_pairs)[:, 0, 0, :]


@on_the_cpu
def composition_score(left, right):
    """‖left · right‖_F / (‖left‖_F ‖right‖_F) (Elhage et al. 2021; TransformerLens's
    ``utils.composition_scores``): 1 when the two matrices line up completely, about
    1/sqrt(d_model) scale for unrelated ones."""
    for m, name in ((left, "left"), (right, "right")):
        if not isinstance(m, torch.Tensor) or m.dim() != 2 or not m.is_floating_point():
            fail(f"{name} should be a float matrix (a 2-D tensor), but got "
                 + described(m, name))
        if m.numel() == 0 or not torch.isfinite(m).all() or not bool((m != 0).any()):
            fail(f"{name} should be a finite, non-zero matrix (the score divides by its norm), but it is not")
    if left.shape[1] != right.shape[0]:
        fail(f"left @ right needs left's columns to match right's rows, but got {tuple(left.shape)} and {tuple(right.shape)}")
    return float(torch.linalg.norm(left @ right) / (torch.linalg.norm(left) * torch.linalg.norm(right)))


@on_the_cpu
def composition_scores(model, sender, receiver, fold_ln=True, offset=None):
    """dict(q, k, v): how much the sender head's write (its W_OV) feeds the receiver's query side
    (W_OV · W_QK), key side (W_OV · W_QKᵀ) and value (W_OV · W_OV of the receiver), as
    TransformerLens's ``all_composition_scores`` modes "Q", "K", "V" compute them (they leave
    rotary positions out). offset (rotary models): the receiver's W_QK at that query-key offset δ,
    W_Q R(δ) W_Kᵀ (``head_circuits``); the V-score does not depend on it."""
    sender, receiver = check_head(model, sender, "the sender"), check_head(model, receiver, "the receiver")
    if sender[0] >= receiver[0]:
        fail(f"the sender should sit in an earlier layer than the receiver, but got {sender} and {receiver}")
    _, ov1 = head_circuits(model, *sender, fold_ln=fold_ln)
    qk2, ov2 = head_circuits(model, *receiver, fold_ln=fold_ln, offset=offset)
    return dict(q=composition_score(ov1, qk2), k=composition_score(ov1, qk2.T), v=composition_score(ov1, ov2))


MAX_BASELINE_WORK = 2e10   # draws x d_model^2 x d_k: the products composition_baseline may multiply


@on_the_cpu
def composition_baseline(d_model, d_k, draws=200, seed=0):
    """The composition score of random low-rank matrices of the same shapes (each a product of two
    Gaussian (d_model, d_k) and (d_k, d_model) factors): (mean, standard deviation) over ``draws``
    seeded draws (2 at least: the spread is their standard deviation), the level an unrelated pair of heads
    reaches."""
    d_model, d_k = check_positive_int(d_model, "d_model"), check_positive_int(d_k, "d_k")
    draws = check_positive_int(draws, "draws (their standard deviation needs two)", minimum=2)
    seed = check_seed(seed)
    if d_k > d_model or d_model > 4096 or draws > 100_000 or draws * d_model * d_model * d_k > MAX_BASELINE_WORK:
        fail(f"d_k should be at most d_model, d_model at most 4,096 and draws x d_model^2 x d_k at most "
             f"{MAX_BASELINE_WORK:.0e} (a few seconds), but got d_model={shown(d_model)}, d_k={shown(d_k)}, draws={shown(draws)}")
    g = torch.Generator().manual_seed(seed)
    scores = []
    for _ in range(draws):
        a, b, c, d = (torch.randn(*shape, generator=g) for shape in
                      ((d_model, d_k), (d_k, d_model), (d_model, d_k), (d_k, d_model)))
        scores.append(composition_score(a @ b, c @ d))
    scores = torch.tensor(scores)
    return float(scores.mean()), float(scores.std())


# ------------------------------------------------------------ attribution patching

@course_modes(name="attribution_patch")   # (under no_grad too: it takes gradients)
def attribution_patch(model, clean, corrupt, metric, watch=()):
    """Attribution patching: the first-order (gradient) estimate of ``patch_heads(...,
    per_position=True)`` in the denoising direction, from one forward and one backward pass.

    For each head and position: (clean output - corrupted output) · ∂metric/∂output at the
    corrupted run, summed over d_k, averaged over the pairs, divided by the gap (clean - corrupted
    metric). Returns (layers, heads, T), on the same normalised scale (0 = the corrupted run,
    1 = the clean run) as the exact patching it estimates.
    """
    L = check_model(model).n_layers
    check_metric(metric)
    watch = check_names(model, watch, "watch")
    clean_ids, corrupt_ids = _pair(model, clean, corrupt)
    B, T = clean_ids.shape
    check_memory(model, B, T, watch, "attribution_patch", extra=B * model.cfg.trace_bytes(T))
    clean_out, corrupt_out = head_outputs(model, clean_ids), {}
    deltas, seen = {}, {}

    def nudge(layer):
        def fn(x):
            corrupt_out[layer] = x.detach()
            deltas[layer] = torch.zeros_like(x, requires_grad=True)
            return x + deltas[layer]
        return fn
    replace = {w: (lambda x, w=w: seen.setdefault(w, x)) for w in watch}
    for l in range(L):   # a watched head_out is seen as nudged, so the metric's gradient reaches the nudge
        name = f"L{l}.head_out"
        replace[name] = (lambda x, f=nudge(l), w=name: seen.setdefault(w, f(x))) if name in watch else nudge(l)
    with torch.enable_grad(), measured_mode(model):
        logits = model(corrupt_ids, replace=replace)
        grads = _gradients(_values(_metric_of(metric, {**seen, "logits": logits}), B).sum(), [deltas[l] for l in range(L)])
    clean_value, corrupt_value = metric_ends(model, clean_ids, corrupt_ids, metric, watch)
    estimate = torch.stack([(g * (clean_out[l] - corrupt_out[l])).sum(-1).mean(0) for l, g in enumerate(grads)])
    normalised(0.0, clean_value, corrupt_value)        # refuses a zero gap before dividing by it
    return divided_by_gap(estimate, clean_value - corrupt_value)


def _gradients(total, deltas):
    """d total / d each of ``deltas`` (tensors shaped like head_out, (B, H, T, d_k)); zeros for a delta
    the metric does not reach. One sentence when the metric's value carries no gradient (detached,
    made through .item() or NumPy, or a constant) or its gradient is not finite."""
    if not total.requires_grad:
        fail("metric(out) should be a differentiable torch function of out['logits'] (attribution patching "
             "follows its gradient), but its value carries no gradient: compute it with torch operations on "
             "out['logits'] (or the watched names), with no .detach(), .item() or NumPy")
    grads = torch.autograd.grad(total, deltas, allow_unused=True)
    grads = [torch.zeros_like(d) if g is None else g for g, d in zip(grads, deltas)]
    bad = sum(int((~torch.isfinite(g)).sum()) for g in grads)
    if bad:
        fail(f"metric(out) should have a finite gradient (attribution patching follows it), but its gradient "
             f"holds NaN or infinity in {bad:,} places: avoid operations such as sqrt or log at 0")
    return grads
