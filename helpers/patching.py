"""Capture, replace and patch inside any course Transformer: the ground floor that ablation
(chapter 10), the head scores (chapter 05) and the real model (chapter 11) share.

Everything goes through ``model(ids, replace={trace name: fn})``: capturing named tensors
(``capture``, ``head_outputs``), zero, mean and resample ablation (``ablation_replace``),
activation patching in both directions (``patch_heads``, ``patch_residual``), and reading the
residual stream (``logit_lens``, ``direct_logit_attribution``). Nothing here knows a world or
a task: the caller brings the prompts, the reference and the metric.
"""
import torch

from .errors import fail

# ------------------------------------------------------------ capture and replace

KINDS = ("zero", "mean", "resample")


def capture(model, ids, names, replace=None, **switches):
    """One forward pass on ids (B, T) -> (logits (B, T, V), {name: the batched tensor}), e.g.
    names=("L0.head_out",) gives (B, H, T, d_k). A tensor also in ``replace`` is captured after
    its replacement; switches go to the model."""
    got, hooks = {}, dict(replace or {})
    for name in names:
        inner = hooks.get(name, _same)
        hooks[name] = lambda x, name=name, inner=inner: got.setdefault(name, inner(x))
    with torch.no_grad():
        logits = model(ids, replace=hooks, **switches)
    return logits, got


def _same(x):
    return x


def head_outputs(model, ids):
    """{layer: (B, H, T, d_k)} every head's output (before W_O) on ids (B, T)."""
    names = [f"L{layer}.head_out" for layer in range(model.cfg.n_layers)]
    got = capture(model, ids, names)[1]
    return {layer: got[name] for layer, name in enumerate(names)}


def mean_head_outputs(model, ids, lengths=None, per_position=True):
    """{layer: (H, T, d_k)} each head's output averaged over the reference batch ids (B, T).

    lengths: (B,) real lengths of padded rows (position t of row b counts only if t < lengths[b]).
    per_position=False also averages over positions: (H, 1, d_k), the same at every position.
    """
    B, T = ids.shape
    lengths = torch.full((B,), T) if lengths is None else torch.as_tensor(lengths)
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
    if kind not in KINDS:
        fail(f"the ablation kind should be one of {KINDS}, but got {kind!r}")
    need = {"mean": means, "resample": source}.get(kind, ())
    if need is None:
        fail(f"{kind} ablation needs the {'means' if kind == 'mean' else 'source'} argument, but got None")
    by_layer = {}
    for layer, head in heads:
        by_layer.setdefault(layer, []).append(head)

    def swap(layer, chosen):
        def fn(x):
            x = x.clone()
            T = x.shape[2]
            for head in chosen:
                x[:, head] = 0.0 if kind == "zero" else (
                    means[layer][head, :T] if kind == "mean" else source[layer][:, head, :T])
            return x
        return fn
    return {f"L{layer}.head_out": swap(layer, chosen) for layer, chosen in by_layer.items()}


# ------------------------------------------------------------ activation patching

def restored_fraction(patched, clean, corrupt):
    """(patched - corrupt) / (clean - corrupt): 0 = nothing restored, 1 = all of it."""
    return (patched - corrupt) / (clean - corrupt)


def patch_heads(model, clean, corrupt, metric, watch=()):
    """Patch each head's clean output into the corrupted run, one head at a time, every head
    (and every sequence) in one batched pass.

    clean, corrupt: ids (T,) or (B, T), pairs of the same length. metric(out) -> (rows,) with
    out = {"logits": (rows, T, V), plus every name in ``watch``, batched}. Returns (layers, heads):
    the restored fraction of the metric's mean over the B pairs.
    """
    L, H = model.cfg.n_layers, model.cfg.n_heads
    clean_ids, corrupt_ids = _pair(model, clean, corrupt)
    B = clean_ids.shape[0]
    clean_out = head_outputs(model, clean_ids)

    def patch(layer):
        def fn(x):
            x = x.clone()
            for head in range(H):
                rows = slice((layer * H + head) * B, (layer * H + head + 1) * B)
                x[rows, head] = clean_out[layer][:, head]
            return x
        return fn
    replace = {f"L{l}.head_out": patch(l) for l in range(L)}
    patched = _measure(model, corrupt_ids.repeat(L * H, 1), metric, watch, replace).view(L, H, B).mean(-1)
    return restored_fraction(patched, *_ends(model, clean_ids, corrupt_ids, metric, watch))


def residual_names(model):
    """The residual-stream points, in order: h0, then each block's h_mid (if it has an MLP) and h."""
    names = ["h0"]
    for layer in range(model.cfg.n_layers):
        names += ([f"L{layer}.h_mid"] if model.cfg.d_ff else []) + [f"L{layer}.h"]
    return names


def patch_residual(model, clean, corrupt, metric, names=None, watch=()):
    """Patch the clean residual stream at one point and one position into the corrupted run.

    clean, corrupt: ids (T,) or (B, T). names: residual points (default: h0 and each block's
    output L{l}.h). Returns (len(names), T) restored fractions of the metric's mean over the B
    pairs, every (point, position) in one batched pass.
    """
    names = names or ["h0"] + [f"L{l}.h" for l in range(model.cfg.n_layers)]
    clean_ids, corrupt_ids = _pair(model, clean, corrupt)
    B, T = clean_ids.shape
    got = capture(model, clean_ids, names)[1]

    def patch(first, name):
        def fn(x):
            x = x.clone()
            for t in range(T):
                rows = slice((first + t) * B, (first + t + 1) * B)
                x[rows, t] = got[name][:, t]
            return x
        return fn
    replace = {name: patch(i * T, name) for i, name in enumerate(names)}
    patched = _measure(model, corrupt_ids.repeat(len(names) * T, 1), metric, watch, replace)
    patched = patched.view(len(names), T, B).mean(-1)
    return restored_fraction(patched, *_ends(model, clean_ids, corrupt_ids, metric, watch))


def _pair(model, clean, corrupt):
    """clean and corrupt ids as (B, T) each, of one shape."""
    clean, corrupt = (model.check_ids(x) for x in (clean, corrupt))
    clean, corrupt = (x[None] if x.dim() == 1 else x for x in (clean, corrupt))
    if clean.shape != corrupt.shape:
        fail(f"clean and corrupted ids should have one shape, but got {tuple(clean.shape)} and "
             f"{tuple(corrupt.shape)}")
    return clean, corrupt


def _measure(model, ids, metric, watch, replace):
    """metric of one pass with ``replace`` (and the ``watch`` names captured): (B,)."""
    logits, got = capture(model, ids, watch, replace)
    return metric({**got, "logits": logits})


def _ends(model, clean, corrupt, metric, watch):
    """(mean metric of the clean runs, of the corrupted runs), floats."""
    return tuple(float(_measure(model, ids, metric, watch, {}).mean()) for ids in (clean, corrupt))


# ------------------------------------------------------------ logit lens and direct logit attribution

def logit_lens(model, ids, names=None):
    """(names, logits (P, T, V)): the final norm and the unembedding applied to each residual point
    (default ``residual_names``) of one sequence ids (T,). The last point gives the model's logits."""
    names = names or residual_names(model)
    got = capture(model, model.check_ids(ids).view(1, -1), names)[1]
    with torch.no_grad():
        return names, torch.stack([model.unembed(got[name][0]) for name in names])


def final_norm_scale(model, h):
    """The final norm's divisor for residual rows h (..., d_model) -> (..., 1): LayerNorm's
    sqrt(var(h) + eps) (the variance over d_model, biased), RMSNorm's sqrt(mean(h^2) + eps);
    None for a model without a final norm."""
    ln = model.final_ln
    if ln is None:
        return None
    eps = ln.eps if ln.eps is not None else torch.finfo(h.dtype).eps
    if isinstance(ln, torch.nn.RMSNorm):
        return torch.sqrt(h.pow(2).mean(-1, keepdim=True) + eps)
    return torch.sqrt(h.var(-1, unbiased=False, keepdim=True) + eps)


def residual_parts(model, ids, position=-1):
    """(parts, h): what each part of ``model`` writes into the residual stream at ``position`` of
    ids (T,), and the final residual row h (d_model,) that the final norm reads.

    parts: an ordered dict of (d_model,) vectors, {"embedding", "L0H0", ..., "L0 b_O", "L0 MLP",
    ...} (no b_O entry when the model has no attention bias, no MLP entry when it has no MLP);
    their sum is h. Pre-norm or no-norm models only: a post-norm block rescales the stream.
    """
    cfg = model.cfg
    if cfg.norm == "post":
        fail("direct logit attribution needs the residual stream to be a sum of parts: a pre-norm or "
             "no-norm model, but this one is post-LN (each block normalises its own output)")
    names = ["h0"] + [f"L{l}.{n}" for l in range(cfg.n_layers) for n in ("head_out", "mlp") if
                      n != "mlp" or cfg.d_ff] + [f"L{cfg.n_layers - 1}.h"]
    ids = model.check_ids(ids)
    if ids.dim() != 1:
        fail(f"direct logit attribution reads one sequence: ids of shape (T,), but got {tuple(ids.shape)}")
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


def attribute(model, parts, direction, scale):
    """{name: float} each part's direct contribution to direction · logits, the final norm's scale
    frozen at ``scale`` (a number or a (1,) tensor: ``final_norm_scale`` of the run to explain).

    A LayerNorm centres each part (subtracts its mean over d_model), divides it by the scale and
    multiplies by gamma; an RMSNorm only divides and multiplies (it does not centre); then the tied
    unembedding reads it along direction. A LayerNorm's beta adds the "final-norm bias" entry.
    """
    cfg, ln = model.cfg, model.final_ln
    direction = torch.as_tensor(direction, dtype=model.E.dtype)
    if direction.shape != (cfg.vocab_size,):
        fail(f"direction should be one weight per vocabulary entry, shape ({cfg.vocab_size},), "
             f"but got {tuple(direction.shape)}")
    with torch.no_grad():
        u = model.E.T @ direction                                      # (d_model,)
        if ln is None:
            return {name: float(p @ u) for name, p in parts.items()}
        centre = not isinstance(ln, torch.nn.RMSNorm)
        gamma = ln.weight if ln.weight is not None else torch.ones(cfg.d_model)
        out = {name: float(((p - p.mean() if centre else p) / scale * gamma) @ u) for name, p in parts.items()}
        if getattr(ln, "bias", None) is not None:
            out["final-norm bias"] = float(ln.bias @ u)
    return out


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
    parts, h = residual_parts(model, ids, position)
    if scale is None:
        scale = final_norm_scale(model, h)
    return attribute(model, parts, direction, scale)
