"""From logits to the next token: temperature, top-k, top-p, and the generation loop.

All functions take the logits of one position, shape (V,), as a torch tensor.
"""
import torch

from .errors import check_positive_int, fail
from .model import KVCache


def check_sampling(temperature=1.0, top_k=None, top_p=None, vocab_size=None):
    """Raise a one-sentence error for a temperature < 0, top_k < 1 or top_p outside (0, 1]."""
    if not isinstance(temperature, (int, float)) or temperature < 0:
        fail(f"temperature should be a number >= 0 (0 means greedy), but got {temperature!r}")
    if top_k is not None:
        check_positive_int(top_k, "top_k")
        if vocab_size is not None and top_k > vocab_size:
            fail(f"top_k can be at most the vocabulary size {vocab_size}, but got {top_k}")
    if top_p is not None and not (isinstance(top_p, (int, float)) and 0 < top_p <= 1):
        fail(f"top_p should lie in (0, 1], but got {top_p!r}")


def with_temperature(logits, temperature):
    """softmax(logits / temperature); temperature 0 puts all mass on the argmax."""
    check_sampling(temperature)
    logits = torch.as_tensor(logits, dtype=torch.float32)
    if temperature == 0:
        probs = torch.zeros_like(logits)
        probs[logits.argmax()] = 1.0
        return probs
    return torch.softmax(logits / temperature, dim=-1)


def top_k_filter(probs, k):
    """Keep the k most probable tokens, zero the rest, renormalise. probs: (V,)."""
    check_sampling(top_k=k, vocab_size=probs.shape[-1])
    kept = torch.zeros_like(probs)
    idx = torch.topk(probs, k).indices
    kept[idx] = probs[idx]
    return kept / kept.sum()


def nucleus(probs, p):
    """Ids of the smallest set of most-probable tokens whose mass reaches p (most probable first)."""
    check_sampling(top_p=p)
    order = torch.argsort(probs, descending=True, stable=True)
    cum = torch.cumsum(probs[order], dim=0)
    size = int(torch.searchsorted(cum, torch.tensor(p, dtype=cum.dtype) - 1e-7).item()) + 1
    return order[:min(size, len(order))]


def top_p_filter(probs, p):
    """Keep the nucleus (top-p set), zero the rest, renormalise. probs: (V,)."""
    kept = torch.zeros_like(probs)
    idx = nucleus(probs, p)
    kept[idx] = probs[idx]
    return kept / kept.sum()


def next_distribution(logits, temperature=1.0, top_k=None, top_p=None):
    """The distribution a sampler draws from: temperature, then top-k, then top-p. (V,) -> (V,)."""
    check_sampling(temperature, top_k, top_p, vocab_size=len(logits))
    probs = with_temperature(logits, temperature)
    if top_k is not None:
        probs = top_k_filter(probs, top_k)
    if top_p is not None:
        probs = top_p_filter(probs, top_p)
    return probs


def draw(probs, generator):
    """One token id drawn from probs (V,) with a seeded torch.Generator."""
    return int(torch.multinomial(probs, 1, generator=generator).item())


@torch.no_grad()
def generate(model, ids, max_new_tokens, temperature=1.0, top_k=None, top_p=None,
             seed=0, use_cache=True, stop_id=None):
    """Extend ids (T,) by up to max_new_tokens drawn one at a time; returns the longer (T',) ids.

    use_cache=True feeds only the newest token each step and keeps every layer's
    K and V in a KVCache; False re-runs the whole sequence. Both give the same tokens.
    """
    check_sampling(temperature, top_k, top_p, vocab_size=model.cfg.vocab_size)
    max_new_tokens = check_positive_int(max_new_tokens, "max_new_tokens")
    ids = model.check_ids(ids)
    if ids.dim() != 1:
        fail(f"generate takes one sequence of shape (T,), but got shape {tuple(ids.shape)}")
    g = torch.Generator().manual_seed(seed)
    cache = KVCache(model.cfg.n_layers) if use_cache else None
    step_input = ids
    for _ in range(max_new_tokens):
        logits = model(step_input, cache=cache)[-1] if use_cache else model(ids)[-1]
        token = draw(next_distribution(logits, temperature, top_k, top_p), g)
        ids = torch.cat([ids, torch.tensor([token])])
        step_input = ids[-1:]
        if token == stop_id:
            break
    return ids
