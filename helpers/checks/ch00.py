"""Checks for the tour (notebook 00)."""
import numpy as np

from . import array_problems, exercise, number_problems


@exercise("the shape of the layer-1 scores")
def scores_shape(answer, n_heads, T):
    """answer: a tuple (heads, queries, keys)."""
    try:
        shape = tuple(int(s) for s in answer)
    except (TypeError, ValueError):
        yield f"give the shape as a tuple of three whole numbers, like (1, 2, 3), not {answer!r}"
        return
    if len(shape) != 3:
        yield f"scores have three axes (heads, queries, keys), but your shape has {len(shape)}"
    elif shape[0] != n_heads:
        yield f"the first axis counts heads: this model has {n_heads}, your answer says {shape[0]}"
    elif shape[1:] != (T, T):
        yield (f"one score per (query, key) pair: the prompt has T={T} tokens, "
               f"so the last two axes should both be {T}, not {shape[1:]}")


@exercise("p(on) from the logits")
def p_on(answer, last_logits, on_id):
    """answer: a float, softmax(last_logits)[on_id]."""
    logits = np.asarray(last_logits, dtype=float)
    e = np.exp(logits - logits.max())
    expected = float(e[on_id] / e.sum())
    found = list(number_problems(answer, expected, "p(on)", atol=1e-4))
    if found and np.isclose(float(answer), np.exp(logits[on_id]), rtol=1e-3):
        yield "that is exp(logit) alone: divide by the sum of exp over all twenty logits"
    elif found and np.isclose(float(answer), logits[on_id], rtol=1e-3):
        yield "that is the logit itself: a probability is softmax of the logits"
    else:
        yield from found


@exercise("parameters in one layer")
def per_layer(answer, d_model, d_ff):
    """answer: an int, the parameters of one pre-LN layer with biases."""
    d = d_model
    attention, mlp, norms = 4 * d * d + 4 * d, d * d_ff + d_ff + d_ff * d + d, 2 * 2 * d
    expected = attention + mlp + norms
    try:
        value = int(answer)
    except (TypeError, ValueError):
        yield f"give a whole number, not {answer!r}"
        return
    hints = {
        expected - norms: "you left out the two LayerNorms (each has a scale and a shift of width d_model)",
        expected - 4 * d - d_ff - d: "you left out the biases (b_Q, b_K, b_V, b_O, b_1, b_2)",
        expected - attention: "you left out attention (W_Q, W_K, W_V, W_O and their biases)",
        expected - mlp: "you left out the MLP (W_1, b_1, W_2, b_2)",
    }
    if value != expected:
        yield hints.get(value, f"{value} is not it: add up W_Q, W_K, W_V, W_O, W_1, W_2, "
                               "every bias, and the two LayerNorms")
