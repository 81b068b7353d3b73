"""Chapter 10's exercise checks (ablation)."""
import numpy as np

from ..errors import to_numpy
from ..exercises import Array, as_wholes, close_problems, exercise, slip


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


@exercise("the least collateral damage")
def least_damage(answer, bigram_by_head):
    """answer: the (layer, head) whose removal keeps the bigram accuracy highest;
    bigram_by_head: {(layer, head): accuracy}."""
    pair = as_wholes(answer, "the (layer, head) pair", length=2)
    if pair not in bigram_by_head:
        yield f"{pair} is not a head of this model; the heads are {sorted(bigram_by_head)}"
    elif bigram_by_head[pair] < max(bigram_by_head.values()):
        yield (f"removing L{pair[0]}H{pair[1]} leaves bigram accuracy at {bigram_by_head[pair]:.3f}; "
               "another head leaves it higher")


@exercise("Method 2 by hand, to the last bit", answer=Array(shape=lambda reference: tuple(reference.shape)))
def method2_logits(answer, reference):
    """answer: logits (T, V) of a copy with every W_O and b_O zeroed; reference: attention=False logits (T, V)."""
    diff = np.abs(answer - to_numpy(reference, "reference")).max()
    if diff > 0:
        yield (f"your logits differ from attention=False by up to {diff:.3g}; zero both W_O and b_O "
               "in every layer of the copy (an exact zero write-back gives identical logits)")
