"""The causal mask: build it, apply it, and measure what it prevents.

* ``causal_mask`` and ``apply_mask``: torch.triu and masked_fill, as in seed 003.
* ``seed_example``: seed 003's "the cat sat" with hand-picked W_q, W_k, W_v.
* ``mask_after_softmax``: what goes wrong when the mask comes after the softmax.
* ``SeedAttention`` and ``leak``: seed 003's "seeing the leak", number for number.
* ``generate``, ``prefix_scores``, ``sample_sentences``: how a model trained with
  or without the mask behaves when it has to generate.
* ``attention_maps``: every head's weights for a prompt, mask on or off.
"""
import math

import torch
import torch.nn.functional as F
from torch import nn

from .errors import check_positive_int, fail
from .sampling.compute import generate as generate_loop


def causal_mask(T):
    """(T, T) bool: True strictly above the diagonal, the keys a query may NOT see."""
    T = check_positive_int(T, "T")
    return torch.triu(torch.ones(T, T, dtype=torch.bool), diagonal=1)


def apply_mask(scores, mask=None):
    """scores (..., T, T) with -inf where ``mask`` (default: the causal mask) is True."""
    scores = torch.as_tensor(scores, dtype=torch.float32)
    if scores.dim() < 2 or scores.shape[-1] != scores.shape[-2]:
        fail(f"scores should end in a square (T, T) table, but have shape {tuple(scores.shape)}")
    mask = causal_mask(scores.shape[-1]) if mask is None else torch.as_tensor(mask, dtype=torch.bool)
    if mask.shape != scores.shape[-2:]:
        fail(f"the mask has shape {tuple(mask.shape)} but the scores end in {tuple(scores.shape[-2:])}")
    return scores.masked_fill(mask, float("-inf"))


def seed_example():
    """Seed 003's "the cat sat": x (3, 4), W_q, W_k, W_v (4, 2), and every step after them.

    Returns a dict: x, W_q, W_k, W_v, q, k, v, scores (q kᵀ / √2), masked, weights
    (masked, then softmax), unmasked (softmax without the mask), out (weights @ v).
    """
    x = torch.tensor([[1., 0., 0., 1.],    # the
                      [0., 1., 1., 0.],    # cat
                      [0., 1., 0., 1.]])   # sat
    W_q = torch.tensor([[1., 0.], [0., 1.], [0., 0.], [0., 0.]])
    W_k = torch.tensor([[0., 0.], [0., 0.], [1., 0.], [0., 1.]])
    W_v = torch.tensor([[1., 0.], [0., 0.], [0., 1.], [0., 0.]])
    q, k, v = x @ W_q, x @ W_k, x @ W_v
    scores = q @ k.T / math.sqrt(k.shape[-1])
    masked = apply_mask(scores)
    weights = torch.softmax(masked, dim=-1)
    return dict(x=x, W_q=W_q, W_k=W_k, W_v=W_v, q=q, k=k, v=v, scores=scores, masked=masked,
                weights=weights, unmasked=torch.softmax(scores, dim=-1), out=weights @ v)


def mask_after_softmax(scores):
    """The wrong order: softmax first, then zero the future. scores: (T, T).

    Returns a dict: zeroed (future weights set to 0 after the softmax), row_sums (T,),
    renormalised (zeroed rows divided by their sums), before (the right order: mask, then softmax).
    """
    scores = torch.as_tensor(scores, dtype=torch.float32)
    hidden = causal_mask(scores.shape[-1])
    zeroed = torch.softmax(scores, dim=-1).masked_fill(hidden, 0.0)
    row_sums = zeroed.sum(dim=-1)
    return dict(zeroed=zeroed, row_sums=row_sums, renormalised=zeroed / row_sums[:, None],
                before=torch.softmax(apply_mask(scores), dim=-1))


class SeedAttention(nn.Module):
    """Seed 003's multi-head causal self-attention, rebuilt: one fused qkv layer, an output
    projection, and a causal mask that can be switched off (``causal=False``).

    x: (B, T, emb_dim) -> (B, T, emb_dim). Built with torch's default nn.Linear
    initialisation, in the seed's order (qkv, then proj), so a seeded build matches the seed's.
    """

    def __init__(self, emb_dim, n_heads):
        super().__init__()
        if emb_dim % n_heads:
            fail(f"emb_dim={emb_dim} does not split into n_heads={n_heads} equal heads")
        self.n_heads, self.head_dim = n_heads, emb_dim // n_heads
        self.qkv = nn.Linear(emb_dim, 3 * emb_dim)
        self.proj = nn.Linear(emb_dim, emb_dim)

    def forward(self, x, causal=True):
        B, T, C = x.shape
        q, k, v = self.qkv(x).split(C, dim=-1)
        q, k, v = (t.view(B, T, self.n_heads, self.head_dim).transpose(1, 2) for t in (q, k, v))
        scores = q @ k.transpose(-2, -1) / math.sqrt(self.head_dim)     # (B, H, T, T)
        if causal:
            scores = apply_mask(scores)
        out = torch.softmax(scores, dim=-1) @ v                         # (B, H, T, head_dim)
        return self.proj(out.transpose(1, 2).reshape(B, T, C))


@torch.no_grad()
def leak(seed=123, emb_dim=4, n_heads=1, T=3):
    """Seed 003's experiment: change only the last of T random token vectors and measure how
    far each position's output moves (sum of absolute differences), with and without the mask.

    Draw order as the seed: the module, then x (1, T, emb_dim), then the new last row.
    Returns a dict: with_mask (T,), without_mask (T,).
    """
    torch.manual_seed(seed)
    attn = SeedAttention(emb_dim, n_heads).eval()
    x = torch.randn(1, T, emb_dim)
    x2 = x.clone()
    x2[0, -1] = torch.randn(emb_dim)
    moved = {name: (attn(x, causal=causal) - attn(x2, causal=causal)).abs().sum(-1)[0]
             for name, causal in (("with_mask", True), ("without_mask", False))}
    return moved


@torch.no_grad()
def model_leak(model, world, prompt, new_last):
    """Change only the last word of ``prompt`` to ``new_last`` in a trained model and measure how
    far each position's logits move (sum of absolute differences), mask on and off.

    Returns a dict: with_mask (T,), without_mask (T,).
    """
    ids = world.tokenizer.encode(prompt)
    ids2 = ids.clone()
    ids2[-1] = world.tokenizer.encode([new_last])[0]
    return {name: (model(ids, causal=causal) - model(ids2, causal=causal)).abs().sum(-1)
            for name, causal in (("with_mask", True), ("without_mask", False))}


def generate(model, ids, max_new_tokens, causal=True, temperature=0.0, top_k=None, top_p=None,
             seed=0, stop_id=None):
    """Extend ids (T,) one token at a time, re-running the whole prefix each step with the
    causal mask on or off (``causal``), the way a model trained without a mask must generate.

    helpers.sampling.generate without its KV cache, every forward pass switched.
    temperature 0 is greedy. Returns the longer ids (T',).
    """
    return generate_loop(model, ids, max_new_tokens, temperature=temperature, top_k=top_k, top_p=top_p,
                         seed=seed, use_cache=False, stop_id=stop_id, causal=causal)


@torch.no_grad()
def prefix_scores(model, world, sentences=None, causal=True):
    """Score every next-word decision the way generation meets it: the model sees only the
    prefix, and its last position must predict the next word.

    Returns a dict: loss (mean cross-entropy over all decisions), correct and total (top-1
    equal to the sentence's next word, on every slot except the adjective after is/was,
    as in worlds.slot_accuracy), decisions.
    """
    from .worlds import decisions

    sentences = world.sentences if sentences is None else sentences
    losses, correct, total = [], 0, 0
    found = decisions(sentences)
    for prefix, nxt, copula in found:
        logits = model(world.tokenizer.encode(prefix), causal=causal)[-1]
        target = world.tokenizer.ids[nxt]
        losses.append(F.cross_entropy(logits[None], torch.tensor([target])).item())
        if not copula:
            total += 1
            correct += int(logits.argmax()) == target
    return dict(loss=sum(losses) / len(losses), correct=correct, total=total, decisions=len(found))


@torch.no_grad()
def teacher_forced_loss(model, world, sentences=None, causal=True):
    """The training objective, measured: mean cross-entropy with the whole sentence as input."""
    sentences = world.train if sentences is None else sentences
    inputs, targets = world.batch(sentences)
    logits = model(inputs, causal=causal)
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1), ignore_index=-100).item()


def sample_sentences(model, world, n=20, causal=True, temperature=1.0, seed=0, max_len=12):
    """Draw ``n`` sentences from <BOS> (seeds seed .. seed+n-1). Returns a list of word lists."""
    n = check_positive_int(n, "n")
    start = world.tokenizer.encode(["<BOS>"])
    stop = world.tokenizer.ids["<EOS>"]
    return [world.tokenizer.decode(generate(model, start, max_len - 1, causal=causal,
                                            temperature=temperature, seed=seed + i, stop_id=stop))
            for i in range(n)]


def share_valid(sentences, world):
    """The share of ``sentences`` (word lists) that are sentence types of ``world``."""
    return sum(list(s) in world.sentences for s in sentences) / len(sentences)


@torch.no_grad()
def attention_maps(model, world, prompt, causal=True):
    """Every head's attention weights for ``prompt`` (a string or list of words).

    Returns a dict: words (T,), weights (n_layers, n_heads, T, T), next (the most likely next
    word) and p_next (its probability).
    """
    words = prompt.split() if isinstance(prompt, str) else list(prompt)
    if not words:
        fail("the prompt is empty; expected at least one word, e.g. '<BOS> the cat'")
    if len(words) > model.cfg.n_max:
        fail(f"the prompt has {len(words)} words but this model handles at most {model.cfg.n_max}")
    trace = model(world.tokenizer.encode(words), trace=True, causal=causal)
    weights = torch.stack([trace[f"L{layer}.weights"] for layer in range(model.cfg.n_layers)])
    probs = trace["probs"][-1]
    return dict(words=words, weights=weights, next=world.tokenizer.vocab[int(probs.argmax())],
                p_next=float(probs.max()))


def entropy_floor(sentences):
    """The lowest mean cross-entropy any model that sees only the past can reach on ``sentences``.

    Each next word is predicted from its prefix alone; the best such prediction is the
    prefix's own next-word frequencies in ``sentences``. Returns the mean of -log p over
    every decision, the same average the training loss takes.
    """
    from collections import Counter, defaultdict

    from .worlds import decisions

    found = decisions(sentences)
    if not found:
        fail("expected at least one sentence of two or more words")
    counts = defaultdict(Counter)
    for prefix, nxt, _ in found:
        counts[prefix][nxt] += 1
    return sum(-math.log(counts[p][n] / sum(counts[p].values())) for p, n, _ in found) / len(found)
