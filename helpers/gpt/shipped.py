"""The shipped Tiny Shakespeare model (chapter 12): its recipe, its training run with the induction
recording, and the loaders.

``data/build_shakespeare.py`` calls ``build`` and writes ``data/shakespeare/model.*`` and
``train_log.json``; the tests call ``build(stop_after=...)`` to check the start of the logged run.

* ``load_model()``: the trained model (eval mode); ``load_log()``: its training log (a dict);
  ``evaluation_loss(model, ids)``: the loss on the run's own evaluation windows;
  ``whole_text_loss(model, ids)``: the loss on (nearly) every character of a text.
* ``tokens="bpe"`` in ``build``, ``load_model``, ``load_log``: the same model on byte-level BPE
  tokens (``BPE_VOCAB`` of them, trained on the training text; ``load_tokenizer()`` reads the
  shipped one), whose loss is compared with the characters' in nats per character.
* ``induction_figures(model)``: every head's induction score and the copy losses on repeated random
  characters (chapter 05's measures, ``helpers.heads.compute``).
"""
import json
import os
import platform
import resource
import time

import torch

from .. import worlds
from ..heads import compute as heads
from ..errors import check_positive_int, count, fail, shown
from ..files import read_bytes
from ..model import Config, Transformer, check_finite_weights, eval_mode
from ..weights import data_dir, load
from . import corpus, tokenize
from .compute import _course_code_only, _in_two_threads, check_seconds, check_tokenizer, pass_seconds
from .train import check_batch, check_context, check_model, check_settings, check_vocabulary, estimate_loss, \
    fused_attention, train

# dropout 0.1 on the residual writes: with 11 passes over the training text the model overfits
# (training loss 1.14 against 1.50 on the validation text without it, 1.23 against 1.49 with it)
CONFIG = Config(vocab_size=65, d_model=128, n_heads=4, n_layers=4, d_ff=512, n_max=256,
                positions="rotary", dropout=0.1)
INIT = "small"        # GPT-2's start: embeddings N(0, 0.02²), so the first loss is near ln 65
# batches of 8 windows: twice the updates of 16 for the same characters, at nearly the same speed
TRAINING = dict(steps=5400, batch=8, context=256, lr=3e-3, warmup=200, min_lr=3e-4, weight_decay=0.1,
                clip=1.0, eval_every=200, eval_batches=8, seed=0, time_limit=14.5 * 60)
THREADS = 2
MAX_THREADS = 256   # more threads than any machine here has cores
# the induction recording: repeated random characters (helpers.worlds.repeated_tokens: id 0, the
# newline, then `length` random characters from the other 64, then the same again)
INDUCTION = dict(n=16, length=48, seed=2024, every=100)

# the same model on byte-level BPE tokens trained on the training text: 1,024 tokens, about 2.3
# characters each, so a window of 256 tokens reads about 580 characters; 4,600 steps fit the 15 minutes
BPE_VOCAB = 1024
BPE_CONFIG = Config(vocab_size=BPE_VOCAB, d_model=128, n_heads=4, n_layers=4, d_ff=512, n_max=256,
                    positions="rotary", dropout=0.1)
BPE_TRAINING = {**TRAINING, "steps": 4600}
TOKENS = {"characters": ("model", "train_log.json", CONFIG, TRAINING),
          "bpe": ("bpe_model", "bpe_train_log.json", BPE_CONFIG, BPE_TRAINING)}


def folder():
    return data_dir() / "shakespeare"


def check_tokens(tokens):
    """Which shipped model: "characters" or "bpe"."""
    if not isinstance(tokens, str) or tokens not in TOKENS:
        fail(f"tokens should be 'characters' or 'bpe', but got {shown(tokens)}")
    return TOKENS[tokens]


def load_model(tokens="characters"):
    """The shipped model of Tiny Shakespeare (data/shakespeare/model.*, or bpe_model.* for
    tokens="bpe"), in eval mode."""
    stem, _, config, _ = check_tokens(tokens)
    return load(folder() / stem, expect=config)


def load_log(tokens="characters"):
    """The shipped run's training log (data/shakespeare/train_log.json, or bpe_train_log.json) as a dict."""
    return json.loads((folder() / check_tokens(tokens)[1]).read_text())


def train_tokenizer():
    """The BPE model's tokenizer: ``BPE_VOCAB`` byte-level BPE tokens trained on the training text
    (``tokenize.train_bpe``; the same tokens every time, about half a second)."""
    text = corpus.load_text()
    return tokenize.BPETokenizer(tokenize.train_bpe(corpus.split(text)[0], BPE_VOCAB))


def load_tokenizer():
    """The BPE model's tokenizer as the build wrote it (data/shakespeare/bpe_tokenizer.json)."""
    from tokenizers import Tokenizer

    data = read_bytes(folder() / "bpe_tokenizer.json", "the BPE model's tokenizer", MAX_TOKENIZER_BYTES)
    return tokenize.BPETokenizer(Tokenizer.from_str(data.decode("utf-8")))


MAX_TOKENIZER_BYTES = 2**20   # the shipped tokenizer's JSON has about 20 kB


def evaluation_loss(model, ids):
    """The loss of ``model`` on the fixed windows the shipped run's evaluations use (``TRAINING``'s
    eval_batches x batch windows of context characters, seed + 1), e.g. on the validation ids:
    8 x 8 windows of 256 characters, 16,384 predictions, a stated subset of the 111,540 characters."""
    return estimate_loss(model, ids, context=TRAINING["context"], batches=TRAINING["eval_batches"],
                         batch=TRAINING["batch"], seed=TRAINING["seed"] + 1)


@torch.no_grad()
def whole_text_loss(model, ids, context=TRAINING["context"], batch=64):
    """The mean loss over (nearly) every character of ``ids``: the text cut into consecutive,
    non-overlapping windows of ``context`` characters (the last, shorter piece left out), each
    position predicted from the window's characters before it. On the validation text: 435 windows,
    111,360 of its 111,539 predictions. Eval mode; the model's mode is restored. A model whose weights hold
    NaN or inf is refused (``check_finite_weights``)."""
    check_model(model, "whole_text_loss")
    ids = corpus.check_ids(ids)
    context = check_context(model, context, len(ids))       # at most the model's n_max, shorter than the text
    batch = check_positive_int(batch, "batch")
    check_vocabulary(model, ids)
    n = (len(ids) - 1) // context
    check_batch(model, min(batch, n), context)
    check_seconds(pass_seconds(model.cfg, n, context, batch), f"whole_text_loss of {n * context:,} tokens",
                  "give a shorter text (such as the validation text), or take "
                  "gpt.spread_loss(model, ids, every=8), which reads every 8th window")
    check_finite_weights(model)                              # a NaN weight: the loss would be NaN
    x, y = ids[:n * context].view(n, context), ids[1:n * context + 1].view(n, context)

    def batch_loss(i):   # (each batch's sum is the same whichever thread takes it: torch runs one thread per op)
        with torch.no_grad():   # (grad mode is each thread's own)
            return float(torch.nn.functional.cross_entropy(model(x[i:i + batch]).flatten(0, 1),
                                                           y[i:i + batch].flatten(), reduction="sum"))
    with eval_mode(model), fused_attention(model):   # torch's fused attention: the same sums, about twice as fast
        starts = range(0, n, batch)
        losses = _in_two_threads(batch_loss, starts) if _course_code_only(model) else list(map(batch_loss, starts))
    return sum(losses) / (n * context)   # (summed in the batches' order, as one thread sums them)


def text_losses(model, tokenizer, text, context=TRAINING["context"]):
    """``whole_text_loss`` of ``text`` in ``tokenizer``'s tokens: dict(per_token, per_character), the
    second the loss summed over the predicted tokens divided by the characters those tokens stand
    for. For a character model the two are the same; for a BPE model the second compares with it
    (a character whose bytes are split between a predicted token and one left out counts as one
    more: at most 2 characters off, none on Tiny Shakespeare, which is ASCII)."""
    check_model(model, "text_losses")
    check_tokenizer(tokenizer, model.cfg)
    ids = tokenizer.encode(text)
    per_token = whole_text_loss(model, ids, context=context)
    predicted = ids[1:(len(ids) - 1) // context * context + 1]      # the tokens whole_text_loss predicts
    return dict(per_token=per_token, per_character=per_token * len(predicted) / len(tokenizer.text(predicted)))


def induction_figures(model, n=INDUCTION["n"], length=INDUCTION["length"], seed=INDUCTION["seed"]):
    """On ``n`` sequences of id 0 then ``length`` random characters repeated once: every head's
    induction score ([layer][head], ``heads.head_scores``) and the mean loss on the first and the
    second copy (``heads.copy_losses``). Measured in eval mode; the model's mode is restored. Its two passes
    are counted up front (``pass_seconds``): a call that would take more than about MAX_SECONDS here is refused."""
    if not isinstance(model, Transformer):
        fail(f"model should be the course's Transformer (for your own GPT, gpt.as_transformer(model)), "
             f"but got {shown(model)}")
    ids = worlds.repeated_tokens(n, length, model.cfg.vocab_size, seed)        # checks n, length and seed
    if ids.shape[1] > model.cfg.n_max:
        fail(f"length should let a newline and two copies fit the model's n_max={model.cfg.n_max} tokens "
             f"(at most {(model.cfg.n_max - 1) // 2}), but got {count(length)}")
    check_seconds(2 * pass_seconds(model.cfg, len(ids), ids.shape[1], len(ids), fused=False),
                  f"induction_figures' 2 passes over {count(len(ids))} sequences of {count(ids.shape[1])} tokens",
                  "take fewer sequences (n) or a shorter length")
    with eval_mode(model):
        _, induction = heads.head_scores(model, ids, length)
        losses = heads.copy_losses(model, ids, length)
    return dict(induction_score=[[round(float(s), 5) for s in row] for row in induction],
                loss_first_copy=round(losses["first"], 5), loss_second_copy=round(losses["second"], 5))


def peak_memory_mib():
    """This process's peak resident memory so far (MiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def build(stop_after=None, threads=THREADS, progress=print, tokens="characters", **overrides):
    """Train the shipped model from its recipe (``tokens``: "characters", the recipe ``CONFIG`` and
    ``TRAINING``; "bpe", ``BPE_CONFIG`` and ``BPE_TRAINING`` on ``train_tokenizer()``'s tokens),
    recording as it goes. Returns (model, log).

    The log (a dict) holds the recipe, every evaluation (step, lr, train and validation loss, wall
    seconds, tokens per second), every training step's batch loss, the induction figures every
    ``INDUCTION["every"]`` steps, the load average at the start and the end, the wall time, the
    tokens per second and the peak memory. stop_after: only the first steps of the same run.
    """
    _, _, config, recipe = check_tokens(tokens)
    unknown = sorted(set(overrides) - set(recipe))
    if unknown:
        fail(f"build's overrides should be settings of the recipe ({', '.join(recipe)}), but got {shown(unknown[0])}")
    settings = {**recipe, **overrides}
    check_settings(**settings)                                          # train's own checks, before any work
    if settings["context"] > config.n_max:
        fail(f"context should be at most the model's n_max={config.n_max} tokens, but got {count(settings['context'])}")
    threads = check_positive_int(threads, "threads")
    if threads > MAX_THREADS:
        fail(f"threads should be at most {MAX_THREADS}, but got {count(threads)}")
    if progress is not None and progress is not False and not callable(progress):
        fail(f"progress should be a function of one line of text (print), or None, but got {shown(progress)}")
    if stop_after is not None:
        check_positive_int(stop_after, "stop_after")
    previous_threads = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        text = corpus.load_text()
        tokenizer = corpus.CharTokenizer(text) if tokens == "characters" else train_tokenizer()
        train_text, val_text = corpus.split(text)
        train_ids, val_ids = tokenizer.encode(train_text), tokenizer.encode(val_text)
        model = Transformer(config, seed=settings["seed"], init=INIT)
        step_losses, induction, evals = [], [], []
        induction_seconds = [0.0]

        def record_induction(step):
            tick = time.perf_counter()
            induction.append(dict(step=step, **induction_figures(model)))
            induction_seconds[0] += time.perf_counter() - tick

        def callback(record):
            if "val_loss" in record:
                evals.append(record)
                if progress:
                    progress(f"step {record['step']:5d}  train {record['train_loss']:.4f}  val {record['val_loss']:.4f}  "
                             f"lr {record['lr']:.2e}  {record['seconds']:7.1f} s  {record['tokens_per_second']:,.0f} tokens/s")
            else:
                step_losses.append(round(record["loss"], 5))
            if "val_loss" not in record and record["step"] % INDUCTION["every"] == 0:
                record_induction(record["step"])

        load_start = os.getloadavg()
        record_induction(0)
        start = time.perf_counter()
        train(model, train_ids, val_ids, callback=callback, stop_after=stop_after, **settings)
        seconds = time.perf_counter() - start
        load_end = os.getloadavg()
        whole = text_losses(model, tokenizer, val_text) if stop_after is None else dict(per_token=None, per_character=None)
    finally:
        torch.set_num_threads(previous_threads)
    kind, tokens = tokens, len(step_losses) * settings["batch"] * settings["context"]
    log = dict(tokenizer=kind, config=config.to_dict(), init=INIT, recipe=settings, threads=threads,
               omp_wait_policy=os.environ.get("OMP_WAIT_POLICY", "(unset)"), induction_test=INDUCTION,
               evaluations=[{k: (round(v, 6) if isinstance(v, float) else v) for k, v in r.items()} for r in evals],
               step_losses=step_losses, induction=induction, whole_validation_loss=whole["per_token"],
               whole_validation_loss_per_character=whole["per_character"],
               characters_per_token=round(len(val_text) / len(val_ids), 6),
               wall_seconds=round(seconds, 1), tokens=tokens, tokens_per_second=round(tokens / seconds),
               training_tokens_per_second=round(evals[-1]["tokens_per_second"]),
               induction_seconds=round(induction_seconds[0], 1),
               load_average_start=[round(x, 2) for x in load_start], load_average_end=[round(x, 2) for x in load_end],
               peak_memory_mib=round(peak_memory_mib()), parameters=model.parameter_count()["total"],
               built_with=dict(torch=torch.__version__, python=platform.python_version(), machine=platform.machine(),
                               cpu_capability=torch.backends.cpu.get_cpu_capability()))
    return model, log
