"""From logits to the next token: temperature, top-k, top-p, the generation loop and the KV cache.

* ``with_temperature``, ``top_k_filter``, ``nucleus``, ``top_p_filter`` and
  ``next_distribution`` take the logits (or probabilities) of one position, (V,).
* ``draw`` / ``draws`` sample with a seeded generator; ``generate`` is the loop, with
  or without a ``KVCache``; ``samples`` runs it for many seeds side by side (one batch a step).
* ``macs_by_part``, ``forward_macs`` and ``generation_macs`` count multiply-adds
  (``counted_macs`` asks PyTorch's FLOP counter, ``op_count`` counts the operations one
  pass launches); ``kv_cache_bytes`` / ``cache_bytes`` size a cache; ``step_seconds`` times
  one step, ``prefill_and_decode_seconds`` a prompt fed at once against one token at a time.
* ``shared_kv_attention`` is grouped-query attention in NumPy: several query heads read
  one shared K and V.
* ``slide`` is what the explorer shows for one setting of its sliders.
"""
import math

import numpy as np
import torch

from ..errors import CourseInputError, check_bytes, check_finite, check_number, check_positive_int, check_seed, \
    check_seeds, check_switch, check_tensor_size, count, fail, items_of, length, shown, to_numpy
from ..model import KVCache, check_model, eval_mode, weights_state
from ..states import on_the_cpu


MAX_DRAWS = 10_000_000   # draws() holds its ids as int64: 80 MB at most
MAX_REPEATS, MAX_LENGTHS = 100, 20   # step_seconds's runs per length and lengths (the chapter: 3 and 5)
MAX_SAMPLES = 1024       # samples() and slide() run that many rows side by side at most
MAX_COUNTED_TOKENS = 10**7   # macs_by_part counts a pass over at most that many tokens
MAX_CONTINUATION_BYTES = 512 * 2**20   # the rows' KV cache (float32) continuations() may grow, checked before it starts
MAX_TIMED_WORK = 10**11   # the work step_seconds and prefill_and_decode_seconds may time in one call (the chapter: ~3e10)
PASS_WORK = 10**8         # a forward pass's fixed cost (its Python calls), counted as that many multiply-adds
LAYER_WORK = 2 * 10**7    # ... and each of its layers' (measured on a narrow model: about 0.2 ms a layer on one
                          # thread, 4 to 7 ms on two threads of a busy machine; a unit is about 2e-10 s here)
MIN_TIMED = 0.02          # CPU seconds one timing gathers at least (a shorter run is repeated: cpu_seconds; a timing
                          # holds at least one pass, so MAX_TIMED_WORK allows at most 1,000 of them: 20 s)
MIN_TICKS = 10            # ... and at least that many ticks of a coarse CPU clock (Windows: 15.6 ms), up to MAX_TIMED_ONE
MAX_TIMED_ONE = 0.1       # CPU seconds one timing gathers at most before it stops repeating (cpu_seconds)
MAX_TIMED_SECONDS = 20    # the CPU seconds one call's timings may gather together (check_timed_work)
SWITCHES = ("causal", "attention", "ablate_heads", "positions", "replace", "scaled")   # what generate passes on


def check_sampling(temperature=1.0, top_k=None, top_p=None, vocab_size=None):
    """Raise a one-sentence error for a temperature < 0 (or NaN, inf, a bool), top_k < 1 or above
    the vocabulary, or top_p outside (0, 1]. Temperature 0 is allowed: it means greedy.
    Returns (temperature, top_k, top_p) as checked: a float, an int or None, a float or None."""
    try:   # errors.check_number reads a number of the learner's own class safely; the sentence is this one
        temperature = check_number(temperature, "temperature", low=0)
    except CourseInputError as error:
        if "cannot be read" in str(error):   # a number of the learner's own class whose __float__ raises
            raise
        fail(f"temperature should be a finite number >= 0 (0 means greedy), but got {shown(temperature)}")
    if top_k is not None:
        top_k = check_positive_int(top_k, "top_k")
        if top_k > (vocab_size or math.inf):
            fail(f"top_k should be at most the vocabulary size {vocab_size}, but got {count(top_k)}")
    if top_p is not None:
        try:
            top_p = check_number(top_p, "top_p", low=0, low_open=True, high=1)
        except CourseInputError as error:
            if "cannot be read" in str(error):
                raise
            fail(f"top_p should lie in (0, 1], but got {shown(top_p)}")
    return temperature, top_k, top_p


def check_p(p):
    """top-p's p: a number in (0, 1] (None, which means 'off' elsewhere, is no p here)."""
    if p is None:
        fail("p should be a number in (0, 1], but got None")
    check_sampling(top_p=p)


def check_probs(probs, name="probs"):
    """probs as one distribution (V,): non-negative, finite, summing to 1 (within 1e-3, float32 over a
    large vocabulary). A tensor is returned as it is (its dtype kept); anything else as float32.
    Logits, a batch of rows, an empty vector or a tensor ``check_tensor`` refuses (nested, sparse,
    quantized, meta, complex) are refused with one sentence."""
    tensor = check_tensor_size(probs, name) if isinstance(probs, torch.Tensor) \
        else torch.as_tensor(to_numpy(probs, name), dtype=torch.float32)   # (counted first: an expanded one)
    if tensor.dim() != 1 or len(tensor) == 0 or not tensor.dtype.is_floating_point:
        fail(f"{name} should be one distribution of shape (V,) with V >= 1 floating-point probabilities, "
             f"but got dtype {tensor.dtype} and shape {tuple(tensor.shape)}")
    total = float(tensor.double().sum())
    if not torch.isfinite(tensor).all() or (tensor < 0).any() or not abs(total - 1) <= 1e-3:
        fail(f"{name} should be probabilities (non-negative, summing to 1), but got numbers from "
             f"{float(tensor.min()):.3g} to {float(tensor.max()):.3g} summing to {total:.4g}; "
             "for logits take torch.softmax(logits, -1) first")
    return tensor


def check_logits(logits, name="logits"):
    """logits as float32 (V,): finite or -inf (a token ruled out), at least one finite. A vector that
    is already a distribution (every entry > 0, summing to 1) is refused: softmax of it is nearly flat."""
    arr = to_numpy(logits, name)   # float64: checked before float32 could turn a large number into inf
    if arr.ndim != 1 or arr.size == 0:
        fail(f"{name} should be the scores of one position, shape (V,), but got shape {arr.shape}")
    finite = np.isfinite(arr)
    if np.isnan(arr).any() or (arr == math.inf).any():
        fail(f"{name} should be finite numbers (-inf rules a token out), but got "
             f"{int(np.isnan(arr).sum())} NaN and {int((arr == math.inf).sum())} +inf of {len(arr)}")
    if not finite.any():
        fail(f"{name} should leave at least one token possible (a finite score), but all {len(arr)} are -inf")
    largest = np.abs(arr[finite]).max()
    if largest > np.finfo(np.float32).max:
        fail(f"{name} should fit in float32 (each of size at most about 3.4e38), but one has size {largest:.3g}")
    logits = torch.as_tensor(arr, dtype=torch.float32)
    if len(logits) > 1 and (logits > 0).all() and abs(float(logits.double().sum()) - 1) <= 1e-5:
        fail(f"{name} should be scores before the softmax, but got a probability distribution "
             "(every entry positive, summing to 1); pass the logits, or use the probabilities as they are")
    return logits


@on_the_cpu
def with_temperature(logits, temperature):
    """softmax(logits / temperature); temperature 0 is its limit as temperature shrinks: the largest
    logits share all the mass equally (greedy decoding, ``next_distribution``, gives it all to the first)."""
    temperature, _, _ = check_sampling(temperature)
    logits = check_logits(logits)
    if temperature == 0:
        return _greedy_limit(logits)
    return _tempered(logits, temperature)


@on_the_cpu
def greedy_limit(logits):
    """softmax(logits / T) as T shrinks to 0, float32 (V,): the largest logits share all the mass equally (tied
    logits keep equal probabilities at every T > 0). logits (V,) as ``check_logits`` takes them (-inf rules a
    token out)."""
    return _greedy_limit(check_logits(logits))


def _greedy_limit(logits):
    """``greedy_limit`` without the checks, for checked float32 logits (V,)."""
    top = logits == logits.max()
    return top / top.sum()


def _tempered(logits, temperature):
    """softmax(logits / temperature) without the checks, for float32 logits (V,) (the loop checks once);
    temperature 0 is the greedy step: all the mass on the first largest logit (argmax), not the limit."""
    if temperature == 0:
        probs = torch.zeros_like(logits)
        probs[logits.argmax()] = 1.0
        return probs
    scaled = logits.double() / float(temperature)   # float64: a small temperature must not overflow
    if not torch.isfinite(scaled.max()):     # -inf (a token ruled out) stays -inf; the largest must stay finite
        fail(f"temperature should be large enough for logits / temperature to stay finite, but with "
             f"temperature={temperature:g} it overflows; use temperature=0 for greedy decoding")
    return torch.softmax(scaled, dim=-1).float()


@on_the_cpu
def top_k_filter(probs, k):
    """Keep the k most probable tokens, zero the rest, renormalise. probs: (V,)."""
    probs = check_probs(probs)
    if k is None:
        fail("k should be a whole number >= 1, but got None")
    _, k, _ = check_sampling(top_k=k, vocab_size=len(probs))
    return _top_k(probs, k)


def _top_k(probs, k):
    kept = torch.zeros_like(probs)
    idx = torch.topk(probs, k).indices
    kept[idx] = probs[idx]
    return kept / kept.sum()


@on_the_cpu
def nucleus(probs, p):
    """Ids of the smallest set of most-probable tokens whose mass reaches p (most probable first)."""
    check_p(p)
    return _nucleus(check_probs(probs), p)


def _nucleus(probs, p):
    order = torch.argsort(probs, descending=True, stable=True)
    cum = torch.cumsum(probs[order], dim=0)
    size = int(torch.searchsorted(cum, torch.tensor(p, dtype=cum.dtype) - 1e-7).item()) + 1
    # never a token of probability 0 (a sum short of 1 by rounding would take them in at p = 1)
    return order[:max(1, min(size, int((probs > 0).sum())))]


@on_the_cpu
def top_p_filter(probs, p):
    """Keep the nucleus (top-p set), zero the rest, renormalise. probs: (V,)."""
    check_p(p)
    return _top_p(check_probs(probs), p)


def _top_p(probs, p):
    kept = torch.zeros_like(probs)
    idx = _nucleus(probs, p)
    kept[idx] = probs[idx]
    return kept / kept.sum()


@on_the_cpu
def next_distribution(logits, temperature=1.0, top_k=None, top_p=None):
    """The distribution a sampler draws from: temperature, then top-k, then top-p. (V,) -> (V,).

    Temperature 0 is greedy decoding, which picks one token: all the mass on the first largest logit
    (argmax), so that generation stays deterministic. ``with_temperature(logits, 0)`` is the limit of
    softmax(logits / T) instead, which shares the mass equally among tied largest logits.
    """
    logits = check_logits(logits)
    temperature, top_k, top_p = check_sampling(temperature, top_k, top_p, vocab_size=len(logits))
    return _distribution(logits, temperature, top_k, top_p)


def _distribution(logits, temperature, top_k, top_p):
    """next_distribution without the checks, for float32 logits (V,): what every step of the loop runs."""
    probs = _tempered(logits, temperature)
    if top_k is not None:
        probs = _top_k(probs, top_k)
    if top_p is not None:
        probs = _top_p(probs, top_p)
    return probs


@on_the_cpu
def draw(probs, generator):
    """One token id drawn from probs (V,) with a seeded torch.Generator."""
    probs = check_probs(probs)
    if not isinstance(generator, torch.Generator):
        fail(f"generator should be a torch.Generator (torch.Generator().manual_seed(seed)), "
             f"but got {shown(generator)}")
    return int(torch.multinomial(probs, 1, generator=generator).item())


@on_the_cpu
@torch.no_grad()
def generate(model, ids, n_new, temperature=1.0, top_k=None, top_p=None, seed=0, cache=True,
             stop_id=None, use_cache=None, **switches):
    """Extend ids (T,) by n_new tokens drawn one at a time; returns the (T + n_new,) ids.

    Each step takes the logits of the last position, turns them into the distribution to draw
    from (``next_distribution``: softmax(logits / temperature), then top-k, then top-p, each
    renormalised) and draws one token with torch.multinomial(probs, 1, generator=g), g one
    torch.Generator seeded once with ``seed``. Temperature 0 (or top_k=1) is greedy.
    cache=True: one KVCache; the first pass runs the whole prompt into it (prefill), every later
    pass only the newest token. cache=False: every pass runs the whole sequence so far. Both give
    the same tokens. stop_id: stop after drawing that token. use_cache: the old name of cache (given, it
    is what counts; cache=False with use_cache=True is refused).
    switches go to every forward pass (e.g. causal=False, ablate_heads=...).
    """
    ids = check_prompt(model, ids, "generate")
    cache, name = check_cache_switch(cache, use_cache)
    check_switches(model, switches)
    if cache and not switches.get("causal", True):
        fail("a KV cache needs the causal mask (earlier rows would change with every new token), "
             f"so expected {name}=False with causal=False, but got {name}=True")
    if cache and not switches.get("attention", True):
        fail("a KV cache holds the keys and values attention computes, and attention=False computes none, "
             f"so expected {name}=False with attention=False, but got {name}=True")
    temperature, top_k, top_p = check_sampling(temperature, top_k, top_p, vocab_size=model.cfg.vocab_size)
    n_new = check_length(model, ids, n_new, cache)
    check_stop_id(model, stop_id)
    g = torch.Generator().manual_seed(check_seed(seed))     # seeded once, before the loop
    kv = KVCache(model.cfg.n_layers) if cache else None
    fed = ids                                                # the first pass runs the whole prompt
    with eval_mode(model):                                   # no dropout: one seed, one text
        for step in range(n_new):
            if cache:
                logits = model(fed, cache=kv, **switches)[-1]    # K and V of the earlier tokens are in kv
            else:
                logits = model(ids, **switches)[-1]              # the whole sequence, every step
            check_step_logits(logits, step)
            probs = _distribution(logits.float(), temperature, top_k, top_p)   # checked once, above
            token = torch.multinomial(probs, 1, generator=g)     # (1,): one draw
            ids = torch.cat([ids, token])
            fed = token                                          # the next pass runs only the new token
            if int(token) == stop_id:
                break
    return ids


def check_cache_switch(cache, use_cache):
    """generate's (cache, the name that set it): ``cache``, or ``use_cache`` (its old name) when given, each a
    switch. cache=True is also what a call that gives only use_cache leaves, so only cache=False with
    use_cache=True is a pair to refuse (the two say different things)."""
    cache = check_switch(cache, "cache")
    if use_cache is None:
        return cache, "cache"
    use_cache = check_switch(use_cache, "use_cache")
    if use_cache and not cache:
        fail("use_cache is the old name of cache, so the two should agree, but got cache=False and use_cache=True: "
             "give cache alone")
    return use_cache, "use_cache"


def check_step_logits(logits, step):
    """The last position's logits (V,) of one step of ``generate``, else one sentence: NaN or +inf (the
    model's weights hold NaN or inf, or its numbers overflow) would be drawn from as if they were scores
    (the argmax of NaN logits, at temperature 0, is always token 0). A check of what the pass made anyway."""
    if not math.isfinite(float(logits.max())):   # NaN anywhere makes the max NaN; -inf rules a token out
        fail(f"the model's logits should be finite numbers, but at new token {step + 1} they hold NaN or inf: the "
             "model's weights hold NaN or inf, or its numbers overflow")


def check_prompt(model, ids, caller):
    """model a Transformer and ids one sequence (T,) of its token ids, as a LongTensor."""
    from ..model import Transformer

    if not isinstance(model, Transformer):
        fail(f"{caller} expected a helpers.model.Transformer as its model, but got {shown(model)}")
    ids = model.check_ids(ids)
    if ids.dim() != 1:
        fail(f"{caller} takes one sequence of shape (T,), but got shape {tuple(ids.shape)}: "
             "expected one prompt, not a batch")
    return ids


def check_switches(model, switches):
    """The forward-pass switches generate passes on: known names, True/False switches, heads in range."""
    for name, value in switches.items():
        if name not in SWITCHES:
            fail(f"generate should get only the switches {', '.join(SWITCHES)}, but got {shown(name)}")
        if name in ("causal", "attention", "positions", "scaled"):
            check_switch(value, name)
    model.check_heads(switches.get("ablate_heads", ()))
    model.check_replace(switches.get("replace"))


def window(model):
    """The most tokens one pass of ``model`` runs: the course's MAX_TOKENS, or n_max for learned positions."""
    from ..model import MAX_TOKENS

    return min(MAX_TOKENS, model.cfg.n_max) if model.cfg.positions == "learned" else MAX_TOKENS


def check_tokens(model, n_tokens, name):
    """A number of tokens from 2 to the model's ``window``, as an int, else one sentence."""
    n_tokens = check_positive_int(n_tokens, name, minimum=2)
    if n_tokens > window(model):
        fail(f"{name} should be at most {window(model):,} (the most tokens this model runs at once), "
             f"but got {count(n_tokens)}")
    return n_tokens


def check_repeats(repeats):
    """The rounds a timing keeps the fastest of: 1 to MAX_REPEATS, as an int, else one sentence."""
    repeats = check_positive_int(repeats, "repeats")
    if repeats > MAX_REPEATS:
        fail(f"repeats should be at most {MAX_REPEATS} (this course's limit: each run is timed in full), "
             f"but got {count(repeats)}")
    return repeats


def check_length(model, ids, n_new, cache=True):
    """n_new as an int, refused up front if the prompt and n_new tokens would not fit the model
    (its ``window``; without the cache, every pass runs the whole sequence so far)."""
    n_new = check_positive_int(n_new, "n_new")
    room = window(model)
    if len(ids) + n_new - 1 > room:   # the last token drawn is never fed back
        fail(f"expected a prompt and n_new that fit in the model's {room:,} tokens, but the prompt has "
             f"{len(ids):,} and n_new={shown(n_new)} would need {shown(len(ids) + n_new - 1)}")
    return n_new


def check_stop_id(model, stop_id):
    """stop_id: None, or a token id of the model's vocabulary."""
    if stop_id is not None and (isinstance(stop_id, bool) or not isinstance(stop_id, (int, np.integer))
                                or not 0 <= stop_id < model.cfg.vocab_size):
        fail(f"stop_id should be None or a token id in [0, {model.cfg.vocab_size}), but got {shown(stop_id)}")


# ------------------------------------------------- many draws, and what the cache saves

@on_the_cpu
def draws(probs, n, seed):
    """n token ids (n,) drawn with replacement from probs (V,) (``check_probs``) by a generator
    seeded with ``seed``; the draws are made from probs as float32."""
    probs = check_probs(probs).float()
    n = check_positive_int(n, "n")
    if n > MAX_DRAWS:
        fail(f"n should be at most {MAX_DRAWS:,} draws (80 MB of ids), but got {shown(n)}")
    g = torch.Generator().manual_seed(check_seed(seed))
    return torch.multinomial(probs, n, replacement=True, generator=g)


def macs_by_part(cfg, n_new, n_seen=0):
    """Multiply-adds of the matrix products in one forward pass over n_new tokens, n_seen already cached,
    counted from the Config's own choices (d = d_model, d_kv = n_kv_heads · d_k the width of K and V).

    Returns a dict by part, summed over the layers:
      projections  Q and O (d x d each), K and V (d x d_kv each): n_new · (2 d² + 2 d · d_kv) per
                   layer, which is 4 · n_new · d² when every query head has its own K and V
      attention    the scores and the weighted sum of values: 2 · n_new · T_k · d per layer,
                   with T_k = n_seen + n_new keys (all query heads together; shared K/V heads are
                   read by each query head of their group)
      mlp          2 · n_new · d · d_ff per layer (W_1, W_2), 3 · n_new · d · d_ff for SwiGLU (W_G too)
      unembedding  n_new · d · V (logits for every fed position)
    LayerNorm, GELU, softmax and the residual additions are left out: they are not products.
    """
    cfg = check_config(cfg)
    n_new = check_positive_int(n_new, "n_new")
    n_seen = check_positive_int(n_seen, "n_seen", minimum=0)
    if n_new + n_seen > MAX_COUNTED_TOKENS:
        fail(f"n_new + n_seen should be at most {MAX_COUNTED_TOKENS:,} tokens (a count of a pass, not a corpus), "
             f"but got {count(n_new + n_seen)}")
    d, L, T_k = cfg.d_model, cfg.n_layers, n_seen + n_new
    d_kv = cfg.kv_heads * cfg.d_k
    matrices = 3 if cfg.activation == "swiglu" else 2
    return dict(projections=L * n_new * (2 * d * d + 2 * d * d_kv), attention=L * 2 * n_new * T_k * d,
                mlp=L * matrices * n_new * d * cfg.d_ff, unembedding=n_new * d * cfg.vocab_size)


def check_config(cfg):
    """A model's Config (``helpers.model.Config``: the counts read its n_kv_heads and activation),
    else one sentence."""
    from ..model import Config

    if not isinstance(cfg, Config):
        fail(f"expected a model's Config (helpers.model.Config, as model.cfg is), but got {shown(cfg)}")
    return cfg


def forward_macs(cfg, n_new, n_seen=0):
    """Multiply-adds of the matrix products in one forward pass (the sum of ``macs_by_part``)."""
    return sum(macs_by_part(cfg, n_new, n_seen).values())


def generation_macs(cfg, prompt_len, new_tokens, use_cache):
    """Multiply-adds of the forward passes ``generate`` makes to draw new_tokens after a prompt.

    Without the cache, step s runs the whole sequence of prompt_len + s tokens; with it,
    step 0 runs the prompt (prefill) and every later step runs one token. Each pass is counted by
    ``forward_macs`` from the Config's own choices (shared K/V heads, SwiGLU's three matrices).
    """
    cfg = check_config(cfg)
    prompt_len = check_positive_int(prompt_len, "prompt_len")
    new_tokens = check_positive_int(new_tokens, "new_tokens")
    use_cache = check_switch(use_cache, "use_cache")
    if new_tokens > MAX_SAMPLES * 100:
        fail(f"new_tokens should be at most {MAX_SAMPLES * 100:,} (one term a step), but got {count(new_tokens)}")
    if prompt_len + new_tokens - 1 > MAX_COUNTED_TOKENS:   # the last pass's tokens (the last one drawn is never fed)
        fail(f"prompt_len + new_tokens - 1 should be at most {MAX_COUNTED_TOKENS:,} tokens (a count of a pass, not "
             f"a corpus), but got {count(prompt_len + new_tokens - 1)}")
    if not use_cache:
        return sum(forward_macs(cfg, prompt_len + s) for s in range(new_tokens))
    return forward_macs(cfg, prompt_len) + sum(
        forward_macs(cfg, 1, prompt_len + s - 1) for s in range(1, new_tokens))


@on_the_cpu
def counted_macs(model, ids, cache=None):
    """Multiply-adds of the matrix products one forward pass over ids (T,) really calls.

    Every product PyTorch is asked for (``F.linear``, ``@`` / ``matmul``, ``bmm``, fused
    attention) is watched and its multiply-adds taken from its operands' shapes: the count
    PyTorch's own FLOP counter (``torch.utils.flop_counter``, 2 FLOPs per multiply-add) gives,
    without its several seconds of start-up."""
    import math

    import torch.nn.functional as F
    from torch.overrides import TorchFunctionMode

    products = {torch.matmul, torch.Tensor.matmul, torch.Tensor.__matmul__, torch.mm, torch.bmm,
                torch.Tensor.mm, torch.Tensor.bmm}
    total = [0]

    class Counter(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            if func in products:
                a, b = args[0], args[1]
                lead_a, lead_b = (list(x.shape[:-2]) if x.dim() > 1 else [] for x in (a, b))
                width = max(len(lead_a), len(lead_b))           # the batch dimensions, broadcast
                batch = [max(m, n) for m, n in zip([1] * (width - len(lead_a)) + lead_a,
                                                   [1] * (width - len(lead_b)) + lead_b)]
                rows = a.shape[-2] if a.dim() > 1 else 1
                cols = b.shape[-1] if b.dim() > 1 else 1
                total[0] += math.prod(batch) * rows * a.shape[-1] * cols
            elif func is F.linear:
                total[0] += args[0].numel() * args[1].shape[0]
            elif func is F.scaled_dot_product_attention:
                q, k = args[0], args[1]
                total[0] += 2 * q.numel() * k.shape[-2]      # the scores and the weighted sum
            return func(*args, **kwargs)

    check_model(model)
    with torch.no_grad(), Counter():
        model(model.check_ids(ids), cache=cache)
    return total[0]


@on_the_cpu
def op_count(model, ids, cache=None):
    """How many torch operations (function and tensor-method calls) one forward pass over ids makes.

    Each one is a call from Python into PyTorch with a fixed cost, however few numbers it
    touches; the count does not depend on the number of tokens."""
    from torch.overrides import TorchFunctionMode

    class Counter(TorchFunctionMode):
        calls = 0

        def __torch_function__(self, func, types, args=(), kwargs=None):
            Counter.calls += 1
            return func(*args, **(kwargs or {}))

    check_model(model)
    with torch.no_grad(), Counter():
        model(model.check_ids(ids), cache=cache)
    return Counter.calls


def kv_cache_bytes(n_layers, T, n_heads, d_k, bytes_per_element):
    """Bytes a KV cache holds: 2 · L · T · h · d_k · bytes (the 2 is one K and one V).

    n_heads is the number of K/V heads: with grouped-query attention (``shared_kv_attention``)
    that is n_kv_heads, fewer than the query heads."""
    sizes = [check_positive_int(value, name) for name, value in (
        ("n_layers", n_layers), ("T", T), ("n_heads", n_heads), ("d_k", d_k), ("bytes_per_element", bytes_per_element))]
    return 2 * math.prod(sizes)   # Python ints: a NumPy int32 would wrap


def cache_bytes(cache):
    """Bytes actually held by the tensors of a KVCache."""
    if not isinstance(cache, KVCache):
        fail(f"expected a KVCache, but got a {type(cache).__name__}")
    return sum(t.numel() * t.element_size() for t in cache.k + cache.v if t is not None)


@on_the_cpu
def prefilled(model, ids):
    """A KVCache holding the keys and values of ids (T,), after one forward pass."""
    cache = KVCache(check_model(model).cfg.n_layers)
    with torch.no_grad():
        model(model.check_ids(ids), cache=cache)
    return cache


def check_timed_work(model, runs, what, advice, pass_work=PASS_WORK, fixed="for its fixed cost"):
    """Refuse up front a timing whose work would pass MAX_TIMED_WORK: ``runs`` lists (times, n_new, n_seen),
    passes over n_new tokens after n_seen cached ones, each counted as its multiply-adds (``forward_macs``)
    plus ``pass_work`` (PASS_WORK: ``fixed``, the cost of its calls) and LAYER_WORK for each of its layers (a
    deep, narrow model's pass costs far more than its multiply-adds say). A count from the model's sizes, the
    same on any machine."""
    passes, fixed_work = sum(times for times, _, _ in runs), pass_work + LAYER_WORK * model.cfg.n_layers
    work = sum(times * (forward_macs(model.cfg, n_new, n_seen) + fixed_work) for times, n_new, n_seen in runs)
    if work > MAX_TIMED_WORK:
        fail(f"{what} should time at most {MAX_TIMED_WORK:,} units of work (this course's limit for one timing, "
             f"counted before it starts: multiply-adds, plus {pass_work:,} a forward pass {fixed} and "
             f"{LAYER_WORK:,} a layer), but its {count(passes)} passes of this model would need about {work:.2g}: "
             f"{advice}")
    if passes * min_timed() > MAX_TIMED_SECONDS:   # only a coarse clock gets here (its timings are longer)
        fail(f"{what} should gather at most {MAX_TIMED_SECONDS} s of timings, but its {count(passes)} timings "
             f"would need at least {passes * min_timed():.0f} s on this machine, whose CPU clock moves in steps of "
             f"{1e3 * clock_tick():.1f} ms: {advice}")


def clock_tick():
    """The step (seconds) in which this machine's CPU clock (``time.process_time``) moves, measured once: the
    smallest of three steps seen within half a second (about a microsecond on this course's Linux machine; 3.9 ms
    once in a busy test worker, whose clock moved in the kernel's ticks). A larger step only makes each timing
    gather more (``min_timed``), within MAX_TIMED_ONE."""
    global _TICK
    if _TICK is None:
        import time

        steps, last, wall = [], time.process_time(), time.perf_counter()
        while len(steps) < 3 and time.perf_counter() - wall < 0.5:
            now = time.process_time()
            if now != last:
                steps.append(now - last)
                last = now
        _TICK = min(steps) if steps else MAX_TIMED_ONE
    return _TICK


_TICK = None


def min_timed():
    """CPU seconds one timing gathers at least: MIN_TIMED, or MIN_TICKS steps of a coarse CPU clock (so that
    one step is at most a tenth of the time read), up to MAX_TIMED_ONE."""
    return min(max(MIN_TIMED, MIN_TICKS * clock_tick()), MAX_TIMED_ONE)


def cpu_seconds(run):
    """CPU seconds one ``run()`` takes: it runs again and again until ``min_timed()`` seconds of CPU time have
    passed, and the time is shared out, as timeit does (some machines' CPU clock ticks every few
    milliseconds: one short run there reads 0). At most one second of wall-clock time past the first run."""
    import time

    needed = min_timed()
    start, wall, runs = time.process_time(), time.perf_counter(), 0
    while True:
        run()
        runs += 1
        elapsed = time.process_time() - start
        if elapsed >= needed or time.perf_counter() - wall >= 1:
            return elapsed / runs


def copied(cache):
    """A new KVCache holding ``cache``'s keys and values (the same tensors: a pass replaces a layer's, it
    does not change them), for a timed step that must not extend the one it starts from (``KVCache.copied``)."""
    return cache.copied()


@on_the_cpu
def step_seconds(model, lengths, repeats=3, seed=0):
    """Measured CPU seconds of one generation step at each sequence length, without and with the cache.

    For length T, "uncached" runs the whole T-token sequence; "cached" runs only token T
    against a cache of the first T - 1; "one_token" runs one token without a cache (the fixed cost of
    a pass). The three are timed in turn, ``repeats`` rounds after one warm-up round before the first
    length, and each keeps its fastest round: a busy machine only ever adds time, and timing them in
    turn lets a slow spell touch all three alike. CPU time (``time.process_time``) rather than
    wall-clock time, so that other programs running on the machine disturb it less; it still varies
    from run to run. A run shorter than MIN_TIMED is repeated and the time shared out (``cpu_seconds``).
    Returns dict(lengths, uncached, cached, one_token), lists of floats.
    The work is counted first and refused above MAX_TIMED_WORK (10^11: every pass's multiply-adds plus
    10^8 for its fixed cost and 2·10^7 a layer, ``check_timed_work``); the chapter's calls need about 2·10^10.
    """
    check_model(model)
    repeats = check_repeats(repeats)
    if not isinstance(lengths, (list, tuple, range)) or not 1 <= length(lengths) <= MAX_LENGTHS:
        fail(f"lengths should be a list of 1 to {MAX_LENGTHS} sequence lengths, but got {shown(lengths)}")
    lengths = [check_tokens(model, T, "each length")   # all before the first run (a list read by the built-ins:
               for T in (lengths if isinstance(lengths, range) else items_of(lengths))]   # its __len__ may raise)
    check_timed_work(model, [run for i, T in enumerate(lengths) for run in
                             ((1, T - 1, 0), (repeats + (i == 0), T, 0), (repeats + (i == 0), 1, T - 1),
                              (repeats + (i == 0), 1, 0))],
                     "step_seconds", "ask for fewer repeats, or fewer or shorter lengths")
    g = torch.Generator().manual_seed(check_seed(seed))
    out = dict(lengths=[], uncached=[], cached=[], one_token=[])
    for T in lengths:
        ids = torch.randint(0, model.cfg.vocab_size, (T,), generator=g)
        cache = prefilled(model, ids[:-1])
        runs = dict(uncached=lambda: model(ids), cached=lambda: model(ids[-1:], cache=copied(cache)),
                    one_token=lambda: model(ids[-1:]))
        warm_up = not out["lengths"]                   # one warm-up round, before the first length
        with torch.no_grad():
            rounds = [{name: cpu_seconds(run) for name, run in runs.items()} for _ in range(repeats + warm_up)]
        out["lengths"].append(T)
        for name in runs:
            out[name].append(min(times[name] for times in rounds[warm_up:]))
    return out


@on_the_cpu
def prefill_and_decode_seconds(model, n_tokens, repeats=3, seed=0):
    """Measured CPU seconds of feeding n_tokens random ids at once against one at a time.

    Returns dict(one_token, prefill, decode): one_token is one forward pass over a single token
    without a cache (almost no arithmetic: the fixed cost of a call); prefill one pass over all
    n_tokens into an empty KVCache; decode the n_tokens passes of one token each that build the
    same cache. The three are timed in turn, ``repeats`` rounds after a warm-up round, each keeping its
    fastest, CPU time, as in ``step_seconds``.
    The work is counted first and refused above MAX_TIMED_WORK (10^11: every pass's multiply-adds plus
    10^8 for its fixed cost and 2·10^7 a layer, ``check_timed_work``); the chapter's call needs about 10^10.
    """
    check_model(model)
    n_tokens = check_tokens(model, n_tokens, "n_tokens")
    repeats = check_repeats(repeats)
    check_timed_work(model, [(repeats + 1, 1, 0), (repeats + 1, n_tokens, 0)]
                     + [(repeats + 1, 1, t) for t in range(n_tokens)], "prefill_and_decode_seconds",
                     "ask for fewer repeats or a smaller n_tokens")
    g = torch.Generator().manual_seed(check_seed(seed))
    ids = torch.randint(0, model.cfg.vocab_size, (n_tokens,), generator=g)

    def prefill():
        model(ids, cache=KVCache(model.cfg.n_layers))

    def decode():
        cache = KVCache(model.cfg.n_layers)
        for t in range(n_tokens):
            model(ids[t:t + 1], cache=cache)

    runs = dict(one_token=lambda: model(ids[:1]), prefill=prefill, decode=decode)
    with torch.no_grad():   # the first round is a warm-up
        rounds = [{name: cpu_seconds(run) for name, run in runs.items()} for _ in range(repeats + 1)]
    return {name: min(times[name] for times in rounds[1:]) for name in runs}


@on_the_cpu
def shared_kv_attention(Q, K, V):
    """Grouped-query attention (NumPy), causal: h query heads share h_kv heads of K and V.

    Q: (h, T, d_k); K: (h_kv, T, d_k); V: (h_kv, T, d_v), with h a multiple of h_kv. Query head
    i reads K/V head i // (h / h_kv): consecutive query heads form a group around one K/V head.
    h_kv = h is ordinary multi-head attention, h_kv = 1 multi-query attention.
    Returns (output (h, T, d_v), weights (h, T, T)).
    """
    import numpy as np

    from ..reference import attention

    Q, K, V = (to_numpy(x, name) for x, name in ((Q, "Q"), (K, "K"), (V, "V")))
    for x, name in ((Q, "Q"), (K, "K"), (V, "V")):
        if x.ndim != 3:
            fail(f"{name} should have shape (heads, T, d), but got shape {x.shape}")
        check_finite(x, name)
    h, h_kv = Q.shape[0], K.shape[0]
    if h == 0 or h_kv == 0:
        fail(f"Q and K should each have at least one head, but Q has {h} and K has {h_kv}")
    if V.shape[0] != h_kv:
        fail(f"V should have as many heads as K ({h_kv}: each shared K head needs its V head), but it has {V.shape[0]}")
    if h % h_kv:
        fail(f"Q's {h} heads should split into equal groups, one per K/V head, but K and V have {h_kv}: "
             "h should be a multiple of h_kv")
    group = h // h_kv
    T, d_v = Q.shape[1], V.shape[2]   # K and V repeated to h heads, then attention's (h, T, T) tables
    check_bytes(8 * h * K.shape[1] * (K.shape[2] + d_v) + 4 * 8 * h * T * (K.shape[1] + d_v),
                f"grouped-query attention of {count(h)} heads over {count(T)} tokens", "give fewer heads or tokens")
    return attention(Q, np.repeat(K, group, axis=0), np.repeat(V, group, axis=0), causal=True)


# ------------------------------------------------- the explorer's compute

def as_tokenizer(tokenizer):
    """A tokenizer (``vocab``, ``encode(text)``, ``decode(ids)``); a ``helpers.worlds.World`` gives its own."""
    from ..worlds import TOKENIZER_PARTS, tokenizer_part

    carried = tokenizer_part(tokenizer, "tokenizer")     # a World carries its tokenizer
    tokenizer = tokenizer if carried is None else carried
    if any(tokenizer_part(tokenizer, name) is None for name in TOKENIZER_PARTS):
        fail(f"expected a tokenizer with vocab, encode(text) and decode(ids) (or a World), "
             f"but got {type(tokenizer).__name__}")
    return tokenizer


DEFAULT_PROMPT = "<BOS> dragon drinks"   # the prompt of slide and the explorer when none is given: the dragon world's


@on_the_cpu
def default_prompt(model, tokenizer):
    """DEFAULT_PROMPT, for a ``model`` whose ``tokenizer`` (or World) reads it; else one sentence saying it is the
    dragon world's default, so a model of another vocabulary needs a prompt of its own."""
    from ..worlds import prompt_encode

    tokenizer = model_tokenizer(check_model(model), tokenizer)   # (refused as they are, not as the default's)
    try:
        prompt_encode(tokenizer, DEFAULT_PROMPT, model.cfg.vocab_size)
    except CourseInputError as error:
        fail(f"a prompt should be given for this model (the default {DEFAULT_PROMPT!r} is the dragon world's), "
             f"but got none, and the model's tokenizer cannot read the default: {error}")
    return DEFAULT_PROMPT


@on_the_cpu
def model_tokenizer(model, world):
    """The tokenizer of ``world`` (a World, or a tokenizer) for ``model``: a World should belong to
    the model (``explorer.check_model_and_world``), a tokenizer's vocabulary should be the model's."""
    from ..explorer import check_model_and_world
    from ..worlds import tokenizer_part
    from ..worlds import World, tokenizer_vocab

    if isinstance(world, World):
        check_model_and_world(model, world)
    tokenizer = as_tokenizer(world)
    vocab = tokenizer_part(tokenizer, "vocab")
    size = length(vocab) if isinstance(vocab, (list, tuple)) else None   # (a subclass's __len__ may lie or raise)
    if size is not None and size != model.cfg.vocab_size:
        fail(f"expected a tokenizer with the model's {model.cfg.vocab_size} tokens, but it has "
             f"{size}: the model and the tokenizer do not belong together")
    tokenizer_vocab(tokenizer, model.cfg.vocab_size)   # a list of texts a picture can show
    return tokenizer


def joined(tokenizer, ids):
    """The text of ids: words with spaces between them for a word-level tokenizer
    (``helpers.worlds.Tokenizer``), the tokens side by side for any other."""
    from ..worlds import Tokenizer, tokenizer_decode

    pieces = tokenizer_decode(tokenizer, ids, text=True)
    return " ".join(pieces) if isinstance(tokenizer, Tokenizer) else "".join(pieces)


def tokens_of(tokenizer, ids):
    """The text of each id (T,) of ``ids``: the tokenizer's decode, id by id where it gives one text."""
    from ..worlds import tokenizer_decode

    pieces = tokenizer_decode(tokenizer, ids, text=True)
    return [tokenizer_decode(tokenizer, ids[i:i + 1], text=True) for i in range(len(ids))] \
        if isinstance(pieces, str) else pieces


@on_the_cpu
def prompt_state(model, tokenizer, prompt, room=0):
    """What every setting of the sliders shares for one prompt: dict(ids (T,), logits (V,) of its
    last position, cache: a KVCache holding it, weights: ``model.weights_state(strong=True)`` of the model
    it was made with). ``room``: tokens still to come after it. A state is good for the model's
    weights as they were: once they change (more training, an edit), ``check_state`` refuses it.

    A prompt the tokenizer turns into no token (an empty one; "\\n" is a prompt for a character
    model), too long for the model (with ``room``) or giving ids outside the model's vocabulary is
    refused with one sentence."""
    from ..model import Transformer

    if not isinstance(model, Transformer):
        fail(f"expected a helpers.model.Transformer, but got {type(model).__name__}")
    room = check_positive_int(room, "room (the tokens drawn after the prompt)", minimum=0)
    tokenizer = model_tokenizer(model, tokenizer)
    from ..worlds import prompt_encode

    V, n_max = model.cfg.vocab_size, model.cfg.n_max
    ids = prompt_encode(tokenizer, prompt, V)   # a newline alone is a prompt (a character model's)
    if room >= n_max:
        fail(f"the continuations should be shorter than the model's window n_max = {n_max} tokens (with the "
             f"prompt's {len(ids)}, at most {n_max - len(ids)}), but got {shown(room)}")
    if len(ids) + room > n_max:
        fail(f"the prompt has {len(ids)} tokens and {room} more are drawn after it, but the model takes "
             f"at most n_max = {n_max}: shorten the prompt to {n_max - room} tokens or fewer, or draw fewer "
             "after it (a smaller length)")
    cache = KVCache(model.cfg.n_layers)
    weights = weights_state(model, strong=True)
    with torch.no_grad(), eval_mode(model):
        logits = model(ids, cache=cache)[-1].float()
    return dict(ids=ids, logits=logits, cache=cache, weights=weights)


def is_current(model, state):
    """Whether ``state`` (a dict from ``prompt_state``) was made with the model's weights as they are now."""
    return isinstance(state, dict) and state.get("weights") == weights_state(model, strong=True)


@on_the_cpu
def continuations(model, state, n, length, temperature=1.0, top_k=None, top_p=None, seed=0):
    """n continuations (n, length) of the prompt in ``state`` (``prompt_state``): row i is drawn
    with its own generator seeded seed + i, one draw a step as ``generate`` draws, so it holds the
    tokens ``generate(model, ids, length, ..., seed=seed + i)`` writes. The n rows go through the
    model together, one batch a step, from one shared copy of the prompt's cache.

    n (0 to MAX_SAMPLES) and length (1 to what the window leaves after the prompt) are checked,
    and the cache the rows will grow against MAX_CONTINUATION_BYTES, before anything is drawn."""
    check_state(model, state)
    n, length = check_continuations(model, n, length, len(state["ids"]))
    temperature, top_k, top_p = check_sampling(temperature, top_k, top_p, vocab_size=model.cfg.vocab_size)
    seed = check_seeds(seed, n, "continuation")
    return drawn_rows(model, state, n, length, temperature, top_k, top_p, seed)


@on_the_cpu
def drawn_rows(model, state, n, length, temperature, top_k, top_p, seed):
    """``continuations`` of checked arguments: the (n, length) tokens drawn after the prompt's state."""
    if n == 0:
        return torch.zeros(0, length, dtype=torch.long)
    generators = [torch.Generator().manual_seed(seed + i) for i in range(n)]
    kv = KVCache(model.cfg.n_layers)
    kv.k = [k.expand(n, -1, -1, -1) for k in state["cache"].k]     # the prompt's rows, shared, not copied
    kv.v = [v.expand(n, -1, -1, -1) for v in state["cache"].v]
    kv.owner, kv.ids = model, state["ids"].expand(n, -1)
    rows = [state["logits"]] * n
    drawn = []
    with torch.no_grad(), eval_mode(model):   # no dropout: a seed gives one text
        for step in range(length):
            token = torch.cat([torch.multinomial(_distribution(row, temperature, top_k, top_p), 1, generator=g)
                               for row, g in zip(rows, generators)])
            drawn.append(token)
            if step + 1 < length:
                rows = model(token[:, None], cache=kv)[:, -1].float()
    return torch.stack(drawn, dim=1)


def check_state(model, state):
    """``state`` as ``prompt_state(model, ...)`` made it, with the model's weights as they are now, else one
    sentence (a state from before the weights changed would mix their old logits, keys and values with
    the new weights' passes)."""
    from ..model import Transformer

    if not isinstance(model, Transformer):
        fail(f"expected a helpers.model.Transformer, but got {shown(model)}")
    if not (isinstance(state, dict) and {"ids", "logits", "cache", "weights"} <= set(state)
            and isinstance(state["cache"], KVCache) and isinstance(state["ids"], torch.Tensor)
            and state["ids"].dim() == 1 and isinstance(state["logits"], torch.Tensor)
            and tuple(state["logits"].shape) == (model.cfg.vocab_size,)):
        fail(f"expected a prompt's state as prompt_state(model, tokenizer, prompt) makes it (ids, logits of "
             f"{model.cfg.vocab_size}, cache and weights), but got {shown(state)}")
    cache, ids = state["cache"], state["ids"]
    filled = dict(attention=True, positions=True, scaled=True, ablate_heads=[], replace=[], dtype=model.weights_dtype())
    if cache.owner is not model or cache.ids is None or tuple(cache.ids.shape) != (1, len(ids)) \
            or not torch.equal(cache.ids[0], ids) or len(cache) != len(ids) or cache.switches != filled \
            or cache.unmasked or len(cache.k) != model.cfg.n_layers or any(k is None for k in cache.k + cache.v):
        fail("the state's cache should hold this model's keys and values of the state's ids, as "
             "prompt_state(model, tokenizer, prompt) fills it, but it " + (
                 "is empty" if cache.ids is None else "belongs to another model" if cache.owner is not model
                 else "holds other tokens or was filled otherwise"))
    if not is_current(model, state):
        fail("the prompt's state should come from the model's weights as they are now, but they changed after "
             "prompt_state made it (trained further or edited): make it again, prompt_state(model, tokenizer, prompt)")
    check_finite(state["logits"], "the state's logits")


def check_continuations(model, n, length, prompt_len):
    """(n, length) for n continuations of ``length`` tokens after a prompt of ``prompt_len``: n from 0
    to MAX_SAMPLES, length from 1 to what the window leaves, and the rows' cache (float32 K and V
    of every layer) within MAX_CONTINUATION_BYTES; else one sentence, before anything is drawn."""
    n = check_positive_int(n, "n_continuations", minimum=0)
    if n > MAX_SAMPLES:
        fail(f"n_continuations should be at most {MAX_SAMPLES:,} (they run side by side), but got {shown(n)}")
    length = check_positive_int(length, "length (tokens a continuation)")
    room = model.cfg.n_max - prompt_len
    if length > room:
        fail(f"length should be at most {room} tokens (the window n_max = {model.cfg.n_max} less the prompt's "
             f"{prompt_len}), but got {shown(length)}")
    cfg = model.cfg
    kv_heads = getattr(cfg, "n_kv_heads", None) or cfg.n_heads
    need = 2 * cfg.n_layers * n * (prompt_len + length) * kv_heads * (cfg.d_model // cfg.n_heads) * 4
    if need > MAX_CONTINUATION_BYTES:
        fail(f"the continuations' cache should fit in {MAX_CONTINUATION_BYTES / 2**20:.0f} MiB, but {n:,} rows of "
             f"{prompt_len + length} tokens need {need / 2**20:,.0f} MiB: ask for fewer or shorter ones")
    return n, length


@on_the_cpu
def samples(model, ids, n_new, n, temperature=1.0, top_k=None, top_p=None, seed=0, stop_id=None):
    """n sampled extensions of ids (T,), as a list of id tensors: sample i holds the tokens
    ``generate(model, ids, n_new, ..., seed=seed + i, stop_id=stop_id)`` writes (each row has its
    own generator), but the n rows go through the model side by side, one batch a step."""
    ids = check_prompt(model, ids, "samples")
    temperature, top_k, top_p = check_sampling(temperature, top_k, top_p, vocab_size=model.cfg.vocab_size)
    n, n_new = check_positive_int(n, "n"), check_length(model, ids, n_new)
    if n > MAX_SAMPLES:
        fail(f"n should be at most {MAX_SAMPLES:,} samples (they run side by side), but got {shown(n)}")
    seed = check_seeds(seed, n, "sample")
    check_stop_id(model, stop_id)
    check_continuations(model, n, n_new, len(ids))   # the rows' cache, before the prompt's pass
    cache = KVCache(model.cfg.n_layers)
    with torch.no_grad(), eval_mode(model):
        state = dict(ids=ids, logits=model(ids, cache=cache)[-1].float(), cache=cache)
    check_finite(state["logits"], "the state's logits")   # as continuations' check_state does
    out = []
    for row in drawn_rows(model, state, n, n_new, temperature, top_k, top_p, seed):
        if stop_id is not None and stop_id in row.tolist():
            row = row[:row.tolist().index(stop_id) + 1]       # generate stops after drawing it
        out.append(torch.cat([ids, row]))
    return out


@on_the_cpu
def slide(model, world, prompt=None, temperature=1.0, top_k=None, top_p=None,
          n_continuations=3, length=4, seed=0, state=None):
    """What the sampler does with the next-token logits after ``prompt``.

    world: a tokenizer (``vocab``, ``encode``, ``decode``) or a World. prompt: a text, None for
    DEFAULT_PROMPT (the dragon world's; another model's tokenizer may not read it). state: the prompt's
    ``prompt_state`` if already made (the explorer makes it once per prompt).
    Returns a dict:
      vocab          the tokenizer's tokens (V,)
      order          token ids, most probable first (temperature never changes this order)
      tempered       softmax(logits / temperature), (V,) NumPy
      final          the distribution drawn from after top-k and top-p, (V,) NumPy
      kept           ids with final > 0, most probable first
      continuations  n_continuations strings, each ``length`` sampled tokens (seeds seed, seed+1, ...)
      prompt         the prompt
      continuation_tokens  the same continuations as lists of token strings
      spaced         True when the text puts spaces between the tokens (a word-level tokenizer)
    """
    from ..model import Transformer

    if not isinstance(model, Transformer):
        fail(f"expected a helpers.model.Transformer, but got {shown(model)}")
    temperature, top_k, top_p = check_sampling(temperature, top_k, top_p, vocab_size=model.cfg.vocab_size)
    seed = check_seed(seed)
    check_continuations(model, n_continuations, length, 0)   # the prompt's length: below, with it
    tokenizer = model_tokenizer(model, world)
    prompt = default_prompt(model, tokenizer) if prompt is None else prompt
    given = state is not None
    if not given:
        state = prompt_state(model, tokenizer, prompt, room=length * (n_continuations > 0))
    check_state(model, state)
    if given:   # another prompt's state would show its distribution under this prompt
        from ..worlds import prompt_encode

        ids = prompt_encode(tokenizer, prompt, model.cfg.vocab_size)
        if not torch.equal(state["ids"].cpu(), ids.cpu()):
            fail(f"state should be the prompt's own (prompt_state of {shown(prompt)}, {len(ids)} tokens), but it "
                 f"holds another prompt of {len(state['ids'])} tokens")
    logits = state["logits"]
    tempered = _tempered(logits, temperature)
    final = _distribution(logits, temperature, top_k, top_p)
    order = torch.argsort(logits, descending=True, stable=True)
    kept = [int(i) for i in order if final[i] > 0]
    from ..worlds import Tokenizer, tokenizer_vocab

    drawn = continuations(model, state, n_continuations, length, temperature, top_k, top_p, seed) \
        if n_continuations else []   # none asked for: a length that leaves no room for them is not refused
    return dict(vocab=tokenizer_vocab(tokenizer, model.cfg.vocab_size), order=[int(i) for i in order],
                tempered=tempered.numpy(), final=final.numpy(), kept=kept,
                continuations=[joined(tokenizer, row) for row in drawn], prompt=prompt,
                continuation_tokens=[tokens_of(tokenizer, row) for row in drawn],
                spaced=isinstance(tokenizer, Tokenizer))


def slider_settings(temperature, top_k, top_p, vocab_size):
    """Slider values -> the sampler's (temperature, top_k, top_p): top-k at the vocabulary
    size and top-p at 1 mean "off" (None), which is what those values do anyway."""
    vocab_size = check_positive_int(vocab_size, "vocab_size")
    temperature, top_k, top_p = check_sampling(temperature, top_k, top_p)   # None (off) is taken for top_k and top_p
    return (temperature, None if top_k is None or top_k >= vocab_size else top_k,
            None if top_p is None or top_p >= 1.0 else top_p)


def settings_text(temperature, top_k, top_p):
    """'T = 0.70,  top-k off,  top-p 0.90' (None means off)."""
    temperature, top_k, top_p = check_sampling(temperature, top_k, top_p)
    k = "off" if top_k is None else shown(top_k)
    p = "off" if top_p is None else f"{top_p:.2f}"
    return f"T = {temperature:.2f},  top-k {k},  top-p {p}"
