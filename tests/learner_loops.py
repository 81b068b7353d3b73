"""A learner's chapter-12 training loop written out, with the slips the loop check names, shared by
the chapter's tests and the grading tests; chapter 10's direct attribution as the instructor writes it; and chapter
11's count of one layer's parameters from the sizes."""
import torch
import torch.nn.functional as F

from helpers.gpt import compute as gc
from helpers.gpt import corpus

# The live-run tests' settings (rounds 25 and 26): the learner's slow code against the run's bounds.
LATE = 2.0   # LATE_SECONDS in these tests (the course's 5 s, shorter: the tests run faster)
LIVE = dict(batch=2, context=8, lr=1e-3, warmup=1, min_lr=1e-4, clip=1.0, eval_every=5, eval_batches=1, seconds=6,
            sample_chars=5)
SLOW = 20.0   # seconds the learner's slow code runs (Python, not one C call) when nothing stops it
MARGIN = 4.0   # seconds a loaded machine may add to a bound


def written_loop(zero_grad="before_backward", adam=None, estimate=False, before=None, forward=False, evaluate="",
                 call_back=None):
    """The exercise's loop written out, with zero_grad where ``zero_grad`` says (before_backward,
    after_backward, after_backward_zeros) and, if ``adam`` ("groups" or "everything"), torch.optim.Adam
    with weight_decay=0.1 in place of AdamW. estimate: the validation loss from the course's
    estimate_loss (the notebook imports it); before(): something the learner does first; forward:
    every pass as model.forward(x) (no hooks run); evaluate: "train_mode" or "grad", a mode slip;
    call_back(step): whether to call the callback after that step (by default after every step)."""
    def train_loop(model, train_ids, val_ids, steps, batch, context, lr, warmup, min_lr, clip, eval_every,
                   eval_batches=4, seed=0, callback=None):
        from helpers.gpt.train import estimate_loss, learning_rate

        if before is not None:
            before()

        torch.manual_seed(seed)
        generator = torch.Generator().manual_seed(seed)
        losses, val_losses = [], {}
        matrices = [p for p in model.parameters() if p.dim() >= 2]
        vectors = [p for p in model.parameters() if p.dim() < 2]
        groups = [dict(params=matrices, weight_decay=0.1), dict(params=vectors, weight_decay=0.0)]
        if adam == "groups":
            optimizer = torch.optim.Adam(groups, lr=lr, betas=(0.9, 0.99))
        elif adam == "everything":
            optimizer = torch.optim.Adam(model.parameters(), lr=lr, betas=(0.9, 0.99), weight_decay=0.1)
        else:
            optimizer = torch.optim.AdamW(groups, lr=lr, betas=(0.9, 0.99))

        run = model.forward if forward else model

        def validation_loss():
            if estimate:
                return estimate_loss(model, val_ids, context, eval_batches, batch, seed + 1)
            model.train(evaluate == "train_mode")
            g = torch.Generator().manual_seed(seed + 1)
            with torch.set_grad_enabled(evaluate == "grad"):
                total = 0.0
                for _ in range(eval_batches):
                    vx, vy = corpus.windows(val_ids, batch, context, g)
                    total += F.cross_entropy(run(vx).reshape(-1, 65), vy.reshape(-1)).item()
            model.train()
            return total / eval_batches

        model.train()
        for step in range(steps):
            if step % eval_every == 0:
                val_losses[step] = validation_loss()
            x, y = corpus.windows(train_ids, batch, context, generator)
            loss = F.cross_entropy(run(x).reshape(-1, 65), y.reshape(-1))
            if zero_grad == "before_backward":
                optimizer.zero_grad()
            loss.backward()
            if zero_grad == "after_backward":
                optimizer.zero_grad()
            elif zero_grad == "after_backward_zeros":
                optimizer.zero_grad(set_to_none=False)
            torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
            for group in optimizer.param_groups:
                group["lr"] = learning_rate(step, lr, warmup, steps, min_lr)
            optimizer.step()
            losses.append(loss.item())
            if callback is not None and (call_back is None or call_back(step)):
                callback(losses, val_losses)
        val_losses[steps] = validation_loss()
        return losses, val_losses
    return train_loop


def small_gpt():
    """A one-layer character GPT of the chapter's vocabulary (65), small enough for many tests."""
    return gc.small_start(gc.GPT(vocab_size=65, d_model=16, n_heads=2, n_layers=1, d_ff=32, n_max=32), seed=0)


def weights_of(model):
    return {k: v.clone() for k, v in model.state_dict().items()}


def same_weights(model, before):
    return all(torch.equal(before[k], v) for k, v in model.state_dict().items())


def attribution_written(model, parts, direction, scale):
    """Chapter 10's direct logit attribution as the instructor's solution writes it: each part's share of the
    logit difference along ``direction`` through the final norm (fixed ``scale``), and the norm's bias."""
    ln = model.final_ln
    with torch.no_grad():
        u = model.E.T @ direction
        out = {name: float(((part - part.mean()) / scale * ln.weight) @ u) for name, part in parts.items()}
        out["final-norm bias"] = float(ln.bias @ u)
    return out


def layer_parameters(cfg):
    """A right answer to chapter 11's Exercise 1: one layer's parameters from any Config."""
    d, d_kv, d_ff = cfg.d_model, cfg.kv_heads * cfg.d_k, cfg.d_ff
    attention = 2 * d * d + 2 * d * d_kv + cfg.bias * (2 * d + 2 * d_kv)
    matrices = 3 if cfg.activation == "swiglu" else 2
    mlp = matrices * d * d_ff + cfg.bias * ((matrices - 1) * d_ff + d) if d_ff else 0
    norm = 0 if cfg.norm == "none" else (d if cfg.norm_kind == "rmsnorm" else 2 * d)
    return attention + mlp + norm * (2 if d_ff else 1)
