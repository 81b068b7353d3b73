"""Round 23 (reader B, entry 5): chapters 10-12's checks gave ✓ to a learner function that handed the
exercise's work to course code their ``own=`` lists did not name: train()'s inner loop
(helpers.gpt.train.run), the course's Block built and counted, chapter 11's mean_ablation, the course's
pair_counts. Each check now names the course's code that counts, captures, averages, scores, measures or
trains as the exercise asks (the audit's lists: LOOP_OWN, LAYER_OWN, SCAN_OWN, COPY_LOSS_OWN, DROP_OWN),
and such a function is refused with the one sentence "... but it ran the course's own ...". Answers that
use only the exercise's building blocks still pass (the instructor notebooks' checks, and the cases here); so does a
loop that measures its validation loss with estimate_loss, which the notebook imports for the learner."""
import pytest
import torch
import torch.nn.functional as F
from torch import nn

from helpers import model as M
from helpers import worlds
from helpers.ablation import checks as ablation_checks
from helpers.ablation import compute as ablation
from helpers.gpt import checks as gpt_checks
from helpers.gpt import compute as gpt
from helpers.gpt import corpus
from helpers.gpt import tokenize as tk
from helpers.gpt import train as gpt_train
from helpers.gpt.corpus import windows
from helpers.gpt.train import learning_rate
from helpers.normalization import compute as ch08
from helpers.positions import compute as ch06
from helpers.real import checks as real_checks
from helpers.real import circuit
from learner_loops import layer_parameters


def one(said, *words):
    """The one sentence in ``said`` (a check's feedback), holding every word."""
    assert len(said) == 1, said
    for word in words:
        assert word in said[0], (word, said[0])
    assert "\n" not in said[0], said[0]
    return said[0]


def ran(said, name):
    """The feedback refuses the answer for running the course's ``name``."""
    return one(said, "that you write, but it ran the course's own", name, "write your own")


# ------------------------------------------------------------ chapter 12: one BPE merge

@pytest.fixture(scope="module")
def train_text():
    return corpus.split(corpus.load_text())[0]


def merge_by(count):
    """A merge_step whose pair counting is ``count(words)``; the rest written out."""
    def merge_step(words):
        counts = count(words)
        best = max(counts.values())
        pair = min(p for p, n in counts.items() if n == best)
        merged = []
        for word in words:
            out, i = [], 0
            while i < len(word):
                if i + 1 < len(word) and (word[i], word[i + 1]) == pair:
                    out.append(word[i] + word[i + 1])
                    i += 2
                else:
                    out.append(word[i])
                    i += 1
            merged.append(out)
        return pair, merged
    return merge_step


def own_counts(words):
    counts = {}
    for word in words:
        for a, b in zip(word, word[1:]):
            counts[a, b] = counts.get((a, b), 0) + 1
    return counts


def test_a_merge_step_counting_with_the_courses_pair_counts_is_refused(train_text):
    ran(gpt_checks.merge_step.feedback(merge_by(tk.pair_counts), train_text), "helpers.gpt.tokenize.pair_counts")


def test_a_merge_step_that_counts_its_own_pairs_still_passes(train_text):
    assert gpt_checks.merge_step.feedback(merge_by(own_counts), train_text) == []


# ------------------------------------------------------------ chapter 12: the GPT

class Reversed(nn.Module):
    """The learner's GPT's parts with the blocks in reverse order: what slipped_logits' "blocks_reversed" turns round."""

    def __init__(self, gpt_module):
        super().__init__()
        self.cfg, self.E, self.PE, self.final_ln = gpt_module.cfg, gpt_module.E, gpt_module.PE, gpt_module.final_ln
        self.blocks = nn.ModuleList(list(gpt_module.blocks)[::-1])


class SlippedGPT(nn.Module):
    """A GPT whose forward is the check's own assembly (gpt.slipped_logits) with a slip it undoes itself."""

    def __init__(self, vocab_size, d_model, n_heads, n_layers, d_ff, n_max):
        super().__init__()
        self.cfg = M.Config(vocab_size, d_model, n_heads, n_layers, d_ff, n_max)
        self.E = nn.Parameter(0.02 * torch.randn(vocab_size, d_model))
        self.blocks = nn.ModuleList([ch08.Block(d_model, n_heads, d_ff) for _ in range(n_layers)])
        self.final_ln = ch08.LayerNorm(d_model)
        self.register_buffer("PE", ch06.sinusoidal_positions(n_max, d_model).float(), persistent=False)

    def forward(self, ids):
        return gpt.slipped_logits(Reversed(self), ids, "blocks_reversed")


def test_a_gpt_whose_forward_is_the_checks_assembly_with_a_slip_undone_is_refused(cat):
    ran(gpt_checks.gpt_module.feedback(SlippedGPT, cat), "helpers.gpt.compute.slipped_logits")


# ------------------------------------------------------------ chapter 12: the training loop

def by_train_run(model, train_ids, val_ids, steps, batch, context, lr, warmup, min_lr, clip, eval_every,
                 eval_batches=4, seed=0, callback=None):
    """The red team's: train()'s own inner loop, its records turned into the answer."""
    losses, val_losses = [], {}

    def record(r):
        if "val_loss" in r:
            val_losses[r["step"]] = r["val_loss"]
        else:
            losses.append(r["loss"])
            if callback is not None:
                callback(losses, val_losses)
    gpt_train.run(model, train_ids, val_ids, steps, batch, context, lr, warmup, min_lr, 0.1, clip, eval_every,
                  eval_batches, seed, record, None, steps)
    return losses, val_losses


def own_adamw(model, lr):
    matrices = [p for p in model.parameters() if p.dim() >= 2]
    vectors = [p for p in model.parameters() if p.dim() < 2]
    return torch.optim.AdamW([dict(params=matrices, weight_decay=0.1), dict(params=vectors, weight_decay=0.0)],
                             lr=lr, betas=(0.9, 0.99))


def loop_with(validation, optimizer_for=own_adamw):
    """A training loop written out whose validation loss is ``validation(model, val_ids, context, eval_batches,
    batch, seed)`` and whose optimizer is ``optimizer_for(model, lr)``."""
    def train_loop(model, train_ids, val_ids, steps, batch, context, lr, warmup, min_lr, clip, eval_every,
                   eval_batches=4, seed=0, callback=None):
        torch.manual_seed(seed)
        generator = torch.Generator().manual_seed(seed)
        losses, val_losses = [], {}
        optimizer = optimizer_for(model, lr)
        model.train()
        for step in range(steps):
            if step % eval_every == 0:
                val_losses[step] = validation(model, val_ids, context, eval_batches, batch, seed)
            x, y = windows(train_ids, batch, context, generator)
            logits = model(x)
            loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))
            optimizer.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
            for group in optimizer.param_groups:
                group["lr"] = learning_rate(step, lr, warmup, steps, min_lr)
            optimizer.step()
            losses.append(loss.item())
            if callback is not None:
                callback(losses, val_losses)
        val_losses[steps] = validation(model, val_ids, context, eval_batches, batch, seed)
        return losses, val_losses
    return train_loop


def own_validation(model, val_ids, context, eval_batches, batch, seed):
    model.eval()
    g = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():
        total = 0.0
        for _ in range(eval_batches):
            x, y = windows(val_ids, batch, context, g)
            logits = model(x)
            total += F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1)).item()
    model.train()
    return total / eval_batches


def by_evaluate(model, val_ids, context, eval_batches, batch, seed):
    return gpt.evaluate(model, val_ids, context, eval_batches, batch, seed + 1)


@pytest.mark.parametrize("loop, name", [(by_train_run, "helpers.gpt.train.run"),
                                        (loop_with(by_evaluate), "helpers.gpt.compute.evaluate"),
                                        (loop_with(own_validation, gpt.optimizer_for), "helpers.gpt.compute.optimizer_for")],
                         ids=["train.run", "evaluate", "optimizer_for"])
def test_a_training_loop_handing_its_work_to_the_courses_loop_is_refused(loop, name, tmp_path, monkeypatch):
    monkeypatch.setenv("COURSE_MY_GPT", str(tmp_path / "my_gpt"))
    ran(gpt_checks.train_loop.feedback(loop), name)


def test_a_training_loop_written_out_with_the_exercises_building_blocks_still_passes(tmp_path, monkeypatch):
    monkeypatch.setenv("COURSE_MY_GPT", str(tmp_path / "my_gpt"))
    said = gpt_checks.train_loop.feedback(loop_with(own_validation))
    assert said == [], said


# ------------------------------------------------------------ chapter 11: one layer's parameters

SMOL = M.Config(vocab_size=49152, d_model=576, n_heads=9, n_layers=30, d_ff=1536, n_max=8192, positions="rotary",
                bias=False, activation="swiglu", n_kv_heads=3, norm_kind="rmsnorm", rotary_pairs="halves")


def by_block(cfg):
    return sum(p.numel() for p in M.Block(cfg).parameters())


def by_floats(cfg):
    norm = 0 if cfg.norm == "none" else cfg.d_model if cfg.norm_kind == "rmsnorm" else 2 * cfg.d_model
    return (M.attention_floats(cfg.d_model, cfg.kv_heads * cfg.d_k, cfg.bias)
            + (M.mlp_floats(cfg.d_model, cfg.d_ff, cfg.bias, cfg.activation) if cfg.d_ff else 0)
            + norm * (2 if cfg.d_ff else 1))


def by_parts(cfg):
    parts = [M.Attention(cfg.d_model, cfg.n_heads, cfg.bias, n_kv_heads=cfg.n_kv_heads)]
    if cfg.d_ff:
        parts.append(M.MLP(cfg.d_model, cfg.d_ff, cfg.bias, cfg.activation))
    if cfg.norm != "none":
        parts += [M.norm_layer(cfg) for _ in range(2 if cfg.d_ff else 1)]
    return sum(p.numel() for part in parts for p in part.parameters())


@pytest.mark.parametrize("answer, name", [(by_block, "helpers.model.Block"), (by_floats, "helpers.model.attention_floats"),
                                          (by_parts, "helpers.model.Attention")],
                         ids=["Block", "floats", "parts"])
def test_a_layer_count_measured_on_the_courses_layer_is_refused(answer, name):
    ran(real_checks.layer_parameters.feedback(answer, SMOL), name)


def test_a_layer_count_from_the_sizes_still_passes():
    assert real_checks.layer_parameters.feedback(layer_parameters, SMOL) == []


# ------------------------------------------------------------ chapter 10: a task-matched mean ablation

def drop_by(ablate):
    """A mean_ablation_drop that captures and averages the head's output itself and ablates with
    ``ablate(head, means)`` -> the replace dict."""
    def mean_ablation_drop(model, head, task_ids, class_ids, reference_ids):
        layer = head[0]
        seen = {}

        def keep(x):
            seen["out"] = x
            return x

        def p_class(**switches):
            probs = torch.softmax(model(task_ids, **switches).double()[:, -1], -1)
            return probs.gather(-1, class_ids).sum(-1).mean()
        with torch.no_grad():
            model(reference_ids, replace={f"L{layer}.head_out": keep})
            means = {layer: seen["out"].mean(0)}                         # (H, T, d_k)
            return float(p_class() - p_class(replace=ablate(head, means)))
    return mean_ablation_drop


def own_ablation(head, means):
    layer, h = head

    def put(x):
        x = x.clone()
        x[:, h] = means[layer][h]
        return x
    return {f"L{layer}.head_out": put}


def mean_drop_inputs(cat):
    world = worlds.cat_world()
    copula_ids, copula_class, _ = ablation.copula_prompts(world)
    return cat, copula_ids, copula_class, copula_ids, ablation.rule_reference(world, "all")


def test_a_mean_ablation_drop_made_with_chapter_11s_mean_ablation_is_refused(cat):
    said = ablation_checks.mean_ablation_drop.feedback(drop_by(lambda head, means: circuit.mean_ablation([head], means)),
                                                      *mean_drop_inputs(cat))
    ran(said, "helpers.real.circuit.mean_ablation")


def test_a_mean_ablation_drop_written_out_still_passes(cat):
    assert ablation_checks.mean_ablation_drop.feedback(drop_by(own_ablation), *mean_drop_inputs(cat)) == []


# ------------------------------------------------------------ chapter 11 on SmolLM2: scores and the cache

@pytest.fixture(scope="module")
def smol():
    from helpers.real import compute as real
    return real.load()[0]


def test_a_head_scan_built_on_the_courses_all_weights_is_refused(smol):
    from helpers.real import compute as real

    def head_scan(model, ids, length):
        w = real.all_weights(model, ids)                                  # (layers, heads, T, T)
        T = len(ids)
        previous = w[:, :, torch.arange(1, T), torch.arange(0, T - 1)].mean(-1)
        queries = torch.arange(length + 1, T)
        return previous, w[:, :, queries, queries - (length - 1)].mean(-1)
    ids, length = _repeated()
    ran(real_checks.head_scan.feedback(head_scan, smol, ids, length), "helpers.real.compute.all_weights")


def _repeated():
    """ids (2L+1,) = <start> a_1..a_L a_1..a_L of a few ordinary tokens, and L."""
    tokens = torch.arange(2000, 2006)
    return torch.cat([torch.tensor([1]), tokens, tokens]), len(tokens)


def test_a_kv_growth_on_the_courses_prefilled_cache_is_refused(smol):
    from helpers.sampling import compute as sampling

    def kv_growth(model, ids):
        cache = sampling.prefilled(model, ids)
        held = lambda: sum(t.numel() * t.element_size() for t in cache.k + cache.v)
        before = held()
        with torch.no_grad():
            model(torch.tensor([int(ids[-1])]), cache=cache)
        return held() - before
    ran(real_checks.kv_growth.feedback(kv_growth, smol, torch.arange(1000, 1032)), "helpers.sampling.compute.prefilled")


def test_the_audit_lists_name_course_code_that_exists():
    """Every name the audit added is a function or class of the course (a misspelt one would raise only when
    its check runs)."""
    import importlib
    for names in (gpt_checks.LOOP_OWN, real_checks.LAYER_OWN, real_checks.SCAN_OWN, real_checks.COPY_LOSS_OWN,
                  ablation_checks.DROP_OWN, gpt_checks.merge_step.answer.own, gpt_checks.gpt_module.answer.own,
                  real_checks.kv_growth.answer.own, ablation_checks.patch_grid.answer.own,
                  ablation_checks.direct_attribution.answer.own, ablation_checks.lens_ranks.answer.own):
        for name in names:
            module, _, attribute = name.rpartition(".")
            assert callable(getattr(importlib.import_module(module), attribute)), name
