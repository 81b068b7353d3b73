"""The tour's exercise checks (chapter 00)."""
import numpy as np

from ..errors import to_numpy
from ..exercises import Number, Whole, as_wholes, exercise, number_problems


@exercise("the shape of the layer-1 scores")
def scores_shape(answer, n_heads, T):
    """answer: the shape of ``L1.scores``, a tuple (heads, queries, keys)."""
    shape = as_wholes(answer, "the shape")
    if len(shape) != 3:
        yield f"scores have three axes (heads, queries, keys), but your shape has {len(shape)}"
    elif shape[0] != n_heads:
        yield f"the first axis counts heads: this model has {n_heads}, your answer says {shape[0]}"
    elif shape[1:] != (T, T):
        yield (f"one score per (query, key) pair: the prompt has T={T} tokens, "
               f"so the last two axes should both be {T}, not {shape[1:]}")


@exercise("p(on) from the logits", answer=Number())
def p_on(answer, last_logits, on_id):
    """answer: softmax(last_logits)[on_id], one number; last_logits: (V,)."""
    logits = to_numpy(last_logits, "last_logits")
    e = np.exp(logits - logits.max())
    found = list(number_problems(answer, float(e[on_id] / e.sum()), "p(on)", atol=1e-4))
    if not found:
        return
    if np.isclose(answer, np.exp(logits[on_id]), rtol=1e-3):
        yield "that is exp(logit) alone: divide by the sum of exp over all twenty logits"
    elif np.isclose(answer, logits[on_id], rtol=1e-3):
        yield "that is the logit itself: a probability is softmax of the logits"
    else:
        yield from found


@exercise("parameters in one layer", answer=Whole())
def per_layer(answer, d_model, d_ff):
    """answer: the parameters of one pre-LN layer with biases, a whole number."""
    d = d_model
    attention, mlp, norms = 4 * d * d + 4 * d, d * d_ff + d_ff + d_ff * d + d, 2 * 2 * d
    expected = attention + mlp + norms
    if answer == expected:
        return
    slips = [
        (expected - norms, "you left out the two LayerNorms (each has a scale and a shift of width d_model)"),
        (expected - 4 * d - d_ff - d, "you left out the biases (b_Q, b_K, b_V, b_O, b_1, b_2)"),
        (expected - attention, "you left out attention (W_Q, W_K, W_V, W_O and their biases)"),
        (expected - mlp, "you left out the MLP (W_1, b_1, W_2, b_2)"),
    ]
    named = [hint for value, hint in slips if value == answer]
    # a hint only when exactly one mistake gives this count (otherwise it could name the wrong one)
    yield named[0] if len(named) == 1 else (f"{answer} is not it: add up W_Q, W_K, W_V, W_O, W_1, W_2, "
                                            "every bias, and the two LayerNorms")
