"""The tour's compute: what one prompt looks like inside the cat model, the copula splits,
and the Primer §6 figures our model is set beside.

* ``prompt_view``: what the explorer draws for one prompt.
* ``step_rows``: one token's row through every step of one layer (a focused slice of a trace).
* ``top_next``: the k most probable next words after a prompt.
* ``copula_splits``: for each copula prompt, the two class adjectives' probabilities and
  which of the two sentence types was held out of training.
* ``mean_loss``: the loss (mean cross-entropy in nats) of a model on a world's sentences.
* ``first_losses``, ``logit_spread``: where training starts, a fresh model's loss and the
  spread of its logits, for each initialisation.
* ``followers``: the words that can follow a context in a world's sentences.
* ``current_token_accuracy``: the most non-copula decisions a model reading only the current token
  can get right.
* ``PRIMER_PE``, ``PRIMER_COPULA_TOP3``, ``PRIMER_IS_ATTENTION``, ``PRIMER_P_CLASS_RANGE``: the Primer §6's
  printed figures for its author's weights (quoted, not computed: we do not have its weights).
"""
from collections import Counter, defaultdict

import torch
import torch.nn.functional as F

from ..errors import check_bytes, check_choice, check_index, check_positive_int, check_switch, check_tensor, \
    check_text, count, fail, length, shown
from ..explorer import check_model_and_world
from ..model import INITS, Config, Transformer, check_prompt_length, measuring
from ..training import check_seeds, check_work
from ..worlds import COPULAS, MAX_WORDS, World, adjectives_of, check_sentences, next_token_probs, \
    non_copula_decisions, words_of
from ..states import on_the_cpu

# The Primer §6, "The same model on <BOS> the cat is": its top three after each copula prompt.
PRIMER_COPULA_TOP3 = {
    "<BOS> the cat is": (("big", 0.532), ("small", 0.390), ("floor", 0.022)),
    "<BOS> the mat is": (("red", 0.540), ("blue", 0.443), ("mat", 0.005)),
}
# The Primer §6: the weights of the query "is" on <BOS> the cat is, by (layer, head) counted
# from 0 (the Primer's "layer 1, head 1" is (0, 0)); keys <BOS>, the, cat, is.
PRIMER_IS_ATTENTION = {
    (0, 0): (0.059, 0.197, 0.630, 0.114), (0, 1): (0.015, 0.025, 0.222, 0.738),
    (1, 0): (0.035, 0.240, 0.633, 0.092), (1, 1): (0.344, 0.336, 0.286, 0.034),
}
# The Primer §6, Step 1: its positional encoding PE for positions 1 to 4, as printed (3 decimals).
PRIMER_PE = ((0.000, 1.000, 0.000, 1.000, 0.000, 1.000), (0.841, 0.540, 0.046, 0.999, 0.002, 1.000),
             (0.909, -0.416, 0.093, 0.996, 0.004, 1.000), (0.141, -0.990, 0.139, 0.990, 0.006, 1.000))
# The Primer §6: "a combined probability on the two class adjectives between 0.92 and 0.99".
PRIMER_P_CLASS_RANGE = (0.92, 0.99)


MAX_PROMPT_CHARS = 10_000   # a prompt of the tour's worlds (a model reads at most 1,024 tokens of it)


@on_the_cpu
def prompt_view(model, world, prompt, attention=True):
    """Everything the tour's explorer draws for one prompt (a string of the world's words).

    Returns dict(tokens: T words, probs: (V,) next-token distribution after the last
    token, weights: (L, h, T, T) every head's attention weights, zeros with attention
    off, attention: the switch). An unknown word raises CourseInputError.
    """
    check_model_and_world(model, world)
    attention = check_switch(attention, "attention")
    from ..plots import HEATMAP_MAX_TOKENS   # here, not at the top: plots imports pyplot, the explorer draws anyway

    ids = world.tokenizer.encode(check_text(prompt, "the prompt", max_chars=MAX_PROMPT_CHARS))
    check_prompt_length(model.cfg, len(ids))
    if len(ids) > HEATMAP_MAX_TOKENS:   # refused before the pass: the heatmap could not label its rows
        fail(f"the prompt should have at most {HEATMAP_MAX_TOKENS} tokens for the attention heatmap to label them, "
             f"but it has {count(len(ids))}: shorten it")
    L, H, T = model.cfg.n_layers, model.cfg.n_heads, len(ids)
    with measuring(model), torch.no_grad():
        trace = model(ids, trace=True, attention=attention)
    weights = torch.stack([trace[f"L{layer}.weights"] for layer in range(L)]) if attention \
        else torch.zeros(L, H, T, T)
    return dict(tokens=world.tokenizer.decode(ids), probs=trace["probs"][-1], weights=weights,
                attention=attention)


@on_the_cpu
def step_rows(trace, layer, position, steps):
    """One token's row through the named steps of one layer: {name: (width,) tensor}.

    trace: ``model(ids, trace=True)``; position: the token's index (negative counts from
    the end); steps: short names ("ln1", "q", ..., "h"). A per-head step (H, T, w) gives
    the heads' rows side by side, (H * w,), as concat will join them.
    """
    if not isinstance(trace, dict) or not all(isinstance(x, torch.Tensor) for x in trace.values()):
        fail(f"trace should be the dict model(ids, trace=True) returns, but got {shown(trace)}")
    n_layers = next(i for i in range(len(trace) + 1)
                    if not any(isinstance(name, str) and name.startswith(f"L{i}.") for name in trace))
    layer = check_index(layer, f"layer (this trace has {n_layers} layers)", max(n_layers, 1))
    if isinstance(steps, str) or not isinstance(steps, (list, tuple)) or not all(isinstance(s, str) for s in steps):
        fail(f"steps should be a list of step names such as ['ln1', 'q'], but got {shown(steps)}")
    out = {}
    for step in steps:
        name = f"L{layer}.{step}"
        if name not in trace:
            fail(f"'{name}' is not a step of this trace; expected one of: {', '.join(trace)}")
        x = check_tensor(trace[name], f"trace['{name}']", float8=True).detach()   # (a nested one has no shape)
        if x.dim() not in (2, 3):   # one row taken out, say: no token axis to pick the position on
            fail(f"trace['{name}'] should be (T, width), or (heads, T, width) per head, as model(ids, trace=True) "
                 f"gives it, but has shape {tuple(x.shape)}")
        position = check_index(position, "position", x.shape[-2], negative=True)
        out[step] = x[:, position].reshape(-1) if x.dim() == 3 else x[position]
    return out


@on_the_cpu
def top_next(model, world, prompt, k=3):
    """The k most probable next words after ``prompt`` (a string): [(word, probability)]."""
    check_model_and_world(model, world)
    k = check_positive_int(k, "k")
    if k > model.cfg.vocab_size:
        fail(f"k should be at most the vocabulary's {model.cfg.vocab_size} words, but got {count(k)}")
    words = check_text(prompt, "the prompt", max_chars=MAX_PROMPT_CHARS).split()
    check_prompt_length(model.cfg, len(words), unit="words")
    probs = next_token_probs(model, world, [words])[0]
    order = torch.argsort(probs, descending=True, stable=True)[:k]
    return [(world.tokenizer.vocab[i], float(probs[i])) for i in order]


@on_the_cpu
def copula_splits(model, world):
    """For each copula prompt (<BOS> the NOUN is/was), the split between its class's two adjectives.

    Returns a list of dicts: prompt, adjectives (a, b), p (p(a), p(b)), held_out: the
    adjectives whose sentence type was held out of training (a tuple, often empty).
    """
    check_model_and_world(model, world)
    held = {tuple(s) for s in world.held_out}
    prompts = list(dict.fromkeys(tuple(s[:4]) for s in world.sentences if len(s) > 3 and s[3] in COPULAS))
    classes = [adjectives_of(prompt[2]) for prompt in prompts]   # every noun checked before a pass
    found = next_token_probs(model, world, [list(prompt) for prompt in prompts]) if prompts else []
    rows = []
    for prompt, adjs, probs in zip(prompts, classes, found):
        rows.append(dict(prompt=" ".join(prompt), adjectives=tuple(adjs),
                         p=tuple(float(probs[world.tokenizer.ids[a]]) for a in adjs),
                         held_out=tuple(a for a in adjs if prompt + (a, "<EOS>") in held)))
    return rows


def _logits_and_targets(model, world, sentences):
    """The model's logits at every predicted position of ``sentences`` and the true next ids."""
    check_model_and_world(model, world)
    sentences = world.train if sentences is None else check_sentences(sentences)
    if not sentences or any(len(s) < 2 for s in sentences):
        fail("expected a list of sentences of two or more words each, "
             f"but got {len(sentences)} sentences" + (" with a shorter one" if sentences else ""))
    inputs, targets = world.batch(sentences)
    with measuring(model), torch.no_grad():
        logits = model(inputs)
    keep = targets != -100
    return logits[keep], targets[keep]


@on_the_cpu
def mean_loss(model, world, sentences=None):
    """The loss: the mean of -ln p(true next token) over every predicted position of
    ``sentences`` (lists of words; default the world's training sentences), in nats, as
    training computes it. The true next token of position t is the token at t + 1."""
    logits, targets = _logits_and_targets(model, world, sentences)
    return float(F.cross_entropy(logits, targets))


@on_the_cpu
def logit_spread(model, world, sentences=None):
    """The standard deviation of the model's logits over every predicted position of
    ``sentences`` (default the training sentences) and every token of the vocabulary."""
    return float(_logits_and_targets(model, world, sentences)[0].std())


MAX_SEEDS = 100   # fresh models first_losses builds (the tour: 5)
# The work one first_losses call may do, counted before it starts: per seed, FLOAT_WORK for each number the fresh
# model holds (drawn, then copied to float64), the multiply-adds of its two float64 passes over the training
# sentences (the loss and the logit spread), SEED_WORK for the fixed cost and LAYER_WORK for each layer's (building
# it and its calls in both passes: a deep thin model does few multiply-adds but many calls). About 1.2·10^10 a
# second here: a Config(20, 1024, 8, 8, 4096) takes about 9 s a seed (1.1·10^11), one of 1,000 layers of width 2
# about 4 s (5·10^10), the tour's 5 seeds of the cat model about 0.1 s.
MAX_FRESH_WORK = 5 * 10**11
FLOAT_WORK, SEED_WORK, LAYER_WORK = 100, 2 * 10**8, 5 * 10**7


@on_the_cpu
def check_fresh_model(cfg, world, init):
    """What first_losses builds, checked before anything is: a Config whose vocabulary is the world's,
    an init of INITS, and the memory the float64 pass needs: the float32 model, its float64 copy
    (3 x its float32 bytes) and a float64 pass on the world's training batch (2 x the float32 pass).
    Returns the training batch's shape (B, T)."""
    if not isinstance(cfg, Config):
        fail(f"cfg should be a helpers.model.Config (such as model.cfg), but got {shown(cfg)}")
    if not isinstance(world, World):
        fail(f"world should be a helpers.worlds.World (such as worlds.cat_world()), but got {shown(world)}")
    if len(world.tokenizer.vocab) != cfg.vocab_size:
        fail(f"cfg.vocab_size should be the {world.name} world's {len(world.tokenizer.vocab)} tokens, "
             f"but got {cfg.vocab_size}")
    check_choice(init, "init", INITS)
    B, T = len(world.train), max(len(s) for s in world.train) - 1
    check_bytes(3 * 4 * cfg.floats() + 2 * cfg.pass_bytes(B, T),
                f"a fresh model of {count(cfg.floats())} numbers in float64, with its pass on {count(B)} sentences",
                "give a smaller cfg")
    return B, T


def fresh_work(cfg, batch_shape, seeds):
    """The work first_losses does for ``seeds`` fresh models of ``cfg`` on a (B, T) batch, as MAX_FRESH_WORK
    counts it: per seed, FLOAT_WORK a number built, two float64 passes' multiply-adds, SEED_WORK and
    LAYER_WORK a layer."""
    from ..sampling.compute import forward_macs

    B, T = batch_shape
    return seeds * (FLOAT_WORK * cfg.floats() + 2 * B * forward_macs(cfg, T) + SEED_WORK + LAYER_WORK * cfg.n_layers)


@on_the_cpu
def first_losses(cfg, world, seeds, init):
    """Where training starts: for each seed, (loss, logit spread) of a fresh, untrained
    ``Transformer(cfg, seed, init=init)`` on the world's training sentences, in float64, measured in
    eval mode (a cfg with dropout gives one number a seed, and torch's global generator is not drawn from).
    The work is counted first and refused above MAX_FRESH_WORK (about a minute, ``fresh_work``)."""
    seeds = check_seeds(seeds, MAX_SEEDS)
    batch_shape = check_fresh_model(cfg, world, init)
    check_work(fresh_work(cfg, batch_shape, len(seeds)), MAX_FRESH_WORK,
               f"first_losses on {len(seeds)} fresh models of {count(cfg.floats())} numbers",
               "ask for fewer seeds or a smaller cfg")
    out = []
    for seed in seeds:
        model = Transformer(cfg, seed, init=init).double()
        out.append((mean_loss(model, world), logit_spread(model, world)))
    return out


MAX_FOLLOW_WORK = 10**8   # words followers may compare: every word of the sentences × the context's words (a few s)


def followers(sentences, context):
    """The words that follow ``context`` (a string or list of consecutive words, e.g.
    "on the") anywhere in ``sentences``, sorted by first appearance. The context has at most
    MAX_WORDS (1,000) words; the sentences' words × the context's at most MAX_FOLLOW_WORK, checked first."""
    if isinstance(context, str):
        context = check_text(context, "the context", empty=True, max_chars=MAX_PROMPT_CHARS).split()
    size = length(context) if isinstance(context, (list, tuple)) else 0   # (the built-in's own: a subclass's may lie)
    words = words_of(context) if 1 <= size <= MAX_WORDS else []   # plain strs; a tuple compared as the list it holds
    if not words or not all(isinstance(w, str) for w in words):
        fail(f"the context should be one or more words (at most {MAX_WORDS:,}), such as 'on the', but got {shown(context)}")
    sentences = check_sentences(sentences)   # (their number and lengths counted before any is copied)
    check_work(sum(map(len, sentences)) * len(words), MAX_FOLLOW_WORK,
               f"followers of {len(words):,} words in {len(sentences):,} sentences", "give fewer sentences or a shorter context")
    n, last, found = len(words), words[-1], {}
    for s in sentences:
        for t in [i + 1 for i, w in enumerate(s) if w == last]:   # just after the context's last word
            if n <= t < len(s) and s[t - n:t] == words:
                found.setdefault(s[t], None)
    if not found:
        fail(f"expected a context that some word follows in these sentences, but {shown(' '.join(words))} "
             "is never followed by one")
    return list(found)


def current_token_accuracy(sentences):
    """The most non-copula decisions a model that reads only the current token can get right:
    (correct, total), each token's most frequent next word counted. The same decisions as
    ``worlds.best_possible_accuracy``, which lets a model read the whole prefix."""
    by_token = defaultdict(Counter)
    for prefix, nxt, _ in non_copula_decisions(sentences):
        by_token[prefix[-1]][nxt] += 1
    return (sum(max(c.values()) for c in by_token.values()),
            sum(sum(c.values()) for c in by_token.values()))
