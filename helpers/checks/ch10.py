"""Checks for chapter 10 (ablation)."""
import numpy as np

from . import array_problems, close_problems, exercise


@exercise("the write-back with head 1 removed")
def write_back(answer, concat, W_O, d_k):
    """answer: concat @ W_O with head 1's rows of W_O zeroed, shape (T, d_model)."""
    concat, W_O = np.asarray(concat, float), np.asarray(W_O, float)
    kept = W_O.copy()
    kept[d_k:2 * d_k] = 0
    found = list(array_problems(answer, "the write-back", shape=(concat.shape[0], W_O.shape[1])))
    if found:
        yield from found
        return
    answer = np.asarray(answer, float)
    if np.allclose(answer, concat @ W_O):
        yield "that is the full write-back: zero head 1's rows of W_O first (rows d_k to 2·d_k)"
    elif np.allclose(answer, concat[:, d_k:] @ W_O[d_k:]):
        yield "that is head 1's own contribution, the part removed: keep the rest instead"
    else:
        yield from close_problems(answer, concat @ kept, "the write-back")


@exercise("the least collateral damage")
def least_damage(answer, bigram_by_head):
    """answer: the (layer, head) whose removal keeps the bigram accuracy highest."""
    best = max(bigram_by_head, key=bigram_by_head.get)
    try:
        pair = (int(answer[0]), int(answer[1]))
    except (TypeError, ValueError, IndexError):
        yield f"give a (layer, head) pair such as (0, 1), not {answer!r}"
        return
    if pair not in bigram_by_head:
        yield f"{pair} is not a head of this model; the heads are {sorted(bigram_by_head)}"
    elif pair != best:
        yield (f"removing L{pair[0]}H{pair[1]} leaves bigram accuracy at {bigram_by_head[pair]:.3f}; "
               "another head leaves it higher")


@exercise("Method 2 by hand, to the last bit")
def method2_logits(answer, reference):
    """answer: logits (T, V) of a copy with every W_O and b_O zeroed; reference: attention=False logits."""
    found = list(array_problems(answer, "your logits", shape=tuple(reference.shape)))
    if found:
        yield from found
        return
    answer = np.asarray(answer.detach() if hasattr(answer, "detach") else answer, float)
    diff = np.abs(answer - np.asarray(reference.detach(), float)).max()
    if diff > 0:
        yield (f"your logits differ from attention=False by up to {diff:.3g}; zero both W_O and b_O "
               "in every layer of the copy (an exact zero write-back gives identical logits)")
