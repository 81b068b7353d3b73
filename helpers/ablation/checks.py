"""Chapter 10's exercise checks (ablation)."""
import numpy as np

from ..errors import to_numpy
from ..exercises import (Array, Function, Number, Wrong, as_array, as_wholes, call, close_problems,
                         exercise, number_problems, slip)


@exercise("the write-back with head 1 removed",
          answer=Array(shape=lambda concat, W_O: (np.shape(concat)[0], np.shape(W_O)[1])))
def write_back(answer, concat, W_O, d_k):
    """answer: concat @ W_O with head 1's rows of W_O zeroed, (T, d_model);
    concat: (T, h·d_k); W_O: (h·d_k, d_model)."""
    concat, W_O = to_numpy(concat, "concat"), to_numpy(W_O, "W_O")
    kept = W_O.copy()
    kept[d_k:2 * d_k] = 0
    found = list(close_problems(answer, concat @ kept, "the write-back"))
    if found:
        yield slip(answer, [
            (concat @ W_O, "that is the full write-back: zero head 1's rows of W_O first (rows d_k to 2·d_k)"),
            (concat[:, d_k:2 * d_k] @ W_O[d_k:2 * d_k],
             "that is head 1's own contribution, the part removed: keep the rest instead"),
        ]) or found[0]


@exercise("Method 2 by hand, to the last bit", answer=Array(shape=lambda reference: tuple(reference.shape)))
def method2_logits(answer, reference):
    """answer: logits (T, V) of a copy with every W_O and b_O zeroed; reference: attention=False logits (T, V)."""
    diff = np.abs(answer - to_numpy(reference, "reference")).max()
    if diff > 0:
        yield (f"your logits differ from attention=False by up to {diff:.3g}; zero both W_O and b_O "
               "in every layer of the copy (an exact zero write-back gives identical logits)")


@exercise("mean ablation of one head", answer=Function("a function of x, a (B, H, T, d_k) head output"))
def mean_ablation(answer, x, reference, head):
    """answer(x) -> x with head ``head``'s output replaced by its per-position mean over the
    reference head outputs; x: (B, H, T, d_k), reference: (B_ref, H, T, d_k)."""
    import torch
    x, reference = torch.as_tensor(x), torch.as_tensor(reference)
    out = as_array(call(answer, x, what="on the test batch"), "the returned head output", shape=tuple(x.shape))
    expected = x.clone()
    expected[:, head] = reference[:, head].mean(0)

    def with_head(value, which=head):
        y = x.clone()
        y[:, which] = value
        return y.numpy()
    found = list(close_problems(out, expected.numpy(), "the returned head output"))
    if found:
        everyone = reference.mean(0).expand_as(x).numpy()
        yield slip(out, [
            (x.numpy(), "nothing was replaced: set head {0}'s slice x[:, {0}] to the mean and return the result"
             .format(head)),
            (with_head(0.0), "that is zero ablation: put the mean of the reference outputs in place of the head's, not 0"),
            (with_head(reference[:, head].mean((0, 1))),
             "that mean is taken over the positions too: average over the reference sequences only "
             "(axis 0), one mean per position"),
            (with_head(x[:, head].mean(0)),
             "that mean is over the batch being ablated: take it over the reference outputs instead"),
            (everyone, "every head was replaced: replace only head {}'s slice".format(head)),
            (with_head(reference[:, 1 - head].mean(0)) if x.shape[1] == 2 else x.numpy() + 1e9,
             "that replaces the right slice by the other head's mean: average reference[:, {}]".format(head)),
        ]) or found[0]


@exercise("one head patched", answer=Number())
def patched_fraction(answer, model, world, clean, corrupt, head):
    """answer: the fraction of the logit difference (animal minus surface adjectives) restored when
    ``head``'s (layer, head) clean output on prompt ``clean`` is patched into the run on ``corrupt``."""
    from . import compute
    tok, metric = world.tokenizer, compute.logit_difference(world)
    clean_ids, corrupt_ids = tok.encode(clean), tok.encode(corrupt)
    every = compute.patch_heads(model, clean_ids, corrupt_ids, metric)          # (layers, heads)
    expected = float(every[head])
    if abs(answer - expected) <= 1e-3:
        return
    clean_value, corrupt_value = compute._ends(model, clean_ids[None], corrupt_ids[None], metric, ())
    patched = expected * (clean_value - corrupt_value) + corrupt_value
    reverse = float(compute.patch_heads(model, corrupt_ids, clean_ids, metric)[head])
    hint = slip(answer, [
        (patched, "that is the patched run's logit difference itself: turn it into the fraction of the "
                  "way from the corrupted run's value to the clean run's"),
        (1 - expected, "that is the fraction still missing: measure how far the patch moved the corrupted "
                       "value towards the clean one"),
        (patched - corrupt_value, "that is the change the patch made: divide by the whole gap, clean minus corrupted"),
        (reverse, "that patches the other way, the corrupted head output into the clean run: run the "
                  "corrupted prompt and put the clean head output in"),
    ] + [(float(every[l, h]), f"that is what patching L{l}H{h} restores: patch head {head[1]} of layer "
                              f"{head[0]}, x[:, {head[1]}] of \"L{head[0]}.head_out\"")
         for l in range(every.shape[0]) for h in range(every.shape[1]) if (l, h) != tuple(head)])
    yield hint or next(number_problems(answer, expected, "the restored fraction"))


@exercise("one row of the logit lens", answer=Array(shape=lambda trace: tuple(trace["logits"].shape)))
def lens_row(answer, trace, point, model):
    """answer (T, V): the final LayerNorm, then the unembedding E^T, applied to ``trace[point]``,
    one residual point (T, d_model) of ``model``'s trace."""
    import torch
    with torch.no_grad():
        h = trace[point]
        expected = model.unembed(h).numpy()
        found = list(close_problems(answer, expected, "the lens row"))
        if not found:
            return
        others = [name for name in trace if name.endswith(("h_mid", ".h")) and name != point] + ["h0"]
        slips = [((h @ model.E.T).numpy(), "these are h @ E.T without the final LayerNorm: the read-out "
                                          "normalises first (model.final_ln)"),
                 (torch.softmax(model.unembed(h), -1).numpy(),
                  "these are probabilities: the lens row asked for is the logits, before the softmax")]
        slips += [(model.unembed(trace[name]).numpy(),
                   f"that is the lens of {name}: take the residual point {point}") for name in others]
    yield slip(answer, slips) or found[0]
