"""The tour's compute: what one prompt looks like inside the cat model."""
import torch


def prompt_view(model, world, prompt, attention=True):
    """Everything the tour's explorer draws for one prompt (a string of the world's words).

    Returns dict(tokens: T words, probs: (V,) next-token distribution after the last
    token, weights: (L, h, T, T) every head's attention weights, zeros with attention
    off, attention: the switch). An unknown word raises CourseInputError.
    """
    ids = world.tokenizer.encode(prompt)
    L, H, T = model.cfg.n_layers, model.cfg.n_heads, len(ids)
    with torch.no_grad():
        trace = model(ids, trace=True, attention=attention)
    weights = torch.stack([trace[f"L{layer}.weights"] for layer in range(L)]) if attention \
        else torch.zeros(L, H, T, T)
    return dict(tokens=world.tokenizer.decode(ids), probs=trace["probs"][-1], weights=weights,
                attention=attention)
