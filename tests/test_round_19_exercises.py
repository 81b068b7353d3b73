"""Red team round 19 (fixer H1): the exercise checks and the learner's kept pieces.

1. A learner's function that reached the check's own reference numbers (chapter 12's cached
   ``loop_reference``, a checks module's @sealed cases) got ✓, and under the grader full points: now every
   function of the checks modules and of helpers.exercises is watched while a learner's function runs, and
   the training-loop check also looks at the model it gave (right losses from a model left untrained are
   no answer).
2. A right piece was kept under the function's own name (a head named ``sinusoidal_positions`` overwrote
   chapter 06's piece): now under the exercise's piece name, with an alias line.
3. ``model_kept`` told a changed weight by CRC-32, which learner code can keep (CRC is linear): now SHA-256.
"""
import contextlib
import importlib.util
import io
import json
import zlib

import numpy as np
import pytest
import torch

from helpers import exercises, grading, learner, states
from helpers.gpt import checks as gpt_checks
from helpers.masking import checks as masking_checks
from helpers.model import Config, Transformer
from helpers.heads.compute import MultiHeadAttention
from helpers.mlp.compute import MLP
from helpers.normalization import checks as normalization_checks
from helpers.normalization.compute import LayerNorm
from helpers.qkv import checks as qkv_checks
from helpers.weights import load_cat

from learner_loops import written_loop


def one(said, *words):
    """The one sentence in ``said``, holding every word."""
    assert len(said) == 1, said
    for word in words:
        assert word in said[0], (word, said[0])
    return said[0]


# ------------------------------------------------------------ 1. the check's own numbers

def reference_loop(model, train_ids, val_ids, steps, batch, context, lr, warmup, min_lr, clip, eval_every,
                   eval_batches, seed=0, callback=None):
    """No training: the check's own cached reference, handed back step by step (repro B/01)."""
    losses, val = gpt_checks.loop_reference()
    val_losses = dict(zip(sorted(set(range(0, steps, eval_every)) | {steps}), [float(v) for v in val]))
    out = []
    for loss in losses:
        out.append(float(loss))
        if callback:
            callback(out, val_losses)
    return out, val_losses


def test_a_loop_that_returns_the_checks_own_reference_is_refused():
    gpt_checks.loop_reference()   # filled, as an earlier run of the check fills it
    one(gpt_checks.train_loop.feedback(reference_loop), "called the check's own helpers.gpt.checks.loop_reference",
        "write your own")


def test_under_the_grader_the_same_loop_gets_no_points(tmp_path, monkeypatch):
    record, records, verdicts = tmp_path / "rec.jsonl", tmp_path / "recs.json", tmp_path / "verd.jsonl"
    gpt_checks.loop_reference()
    monkeypatch.setenv("COURSE_GRADING", f"record:{record}")
    grading.cell("ch12_ex3_check")
    gpt_checks.train_loop.grade(reference_loop)
    kept = [json.loads(line) for line in record.read_text().splitlines()]
    assert "check's own" in json.dumps(kept), kept
    records.write_text(json.dumps({"student": kept}))
    monkeypatch.setenv("COURSE_GRADING", f"judge:{records}:{verdicts}")
    grading.cell("ch12_ex3_check")
    gpt_checks.train_loop.grade(written_loop())   # the instructor's own answer
    judged = [json.loads(line) for line in verdicts.read_text().splitlines()]
    ours = [v for v in judged if v["student"] == "student" and v["cell"] == "ch12_ex3_check"]
    assert ours and all(v["problems"] for v in ours), ours


def test_a_function_that_reads_a_checks_sealed_cases_is_refused():
    def causal_attention(q, k, v):   # looks its input up among the check's cases and returns their outputs
        for case in masking_checks.attention_cases().values():
            if case["q"].shape == q.shape and torch.equal(case["q"], q) and torch.equal(case["k"], k):
                return case["out"], case["weights"]
        raise ValueError("not a case of the check's")
    one(masking_checks.causal_attention.feedback(causal_attention), "check's own helpers.masking.checks.attention_cases")


def test_a_function_that_reads_the_private_cases_behind_a_reader_is_refused():
    def causal_attention(q, k, v):
        for case in masking_checks._attention_cases().values():
            if case["q"].shape == q.shape and torch.equal(case["q"], q) and torch.equal(case["k"], k):
                return case["out"], case["weights"]
        raise ValueError("not a case of the check's")
    one(masking_checks.causal_attention.feedback(causal_attention), "check's own helpers.masking.checks._attention_cases")


def test_the_checks_own_use_of_its_functions_is_not_the_learners():
    kind = exercises.Function("a function f(x)")
    with exercises.courses_own_watched(kind) as watch:
        masking_checks.attention_cases()                        # the check's own call: nothing noted
        assert exercises.call(lambda x: 2 * x, 3.0) == 6.0      # a learner's function that calls none
        assert watch["checks"] == []
        exercises.call(lambda x: exercises.as_number(x, "x"), 3.0)
        assert watch["checks"] == ["helpers.exercises.as_number"]
        with pytest.raises(exercises.Wrong, match="called the check's own helpers.exercises.as_number"):
            exercises._no_courses_own(watch)


def untrained_loop(model, *args, **kwargs):
    """The right losses, from a copy of the model: the model the check gave stays as it was."""
    twin = Transformer(Config(**vars(model.cfg)))
    twin.load_state_dict(model.state_dict())
    return written_loop()(twin, *args, **kwargs)


def test_right_losses_from_a_model_left_untrained_are_refused():
    one(gpt_checks.train_loop.feedback(untrained_loop), "the model train_loop was given is unchanged")


def test_right_losses_from_a_model_moved_afterwards_are_refused():
    def moved_loop(model, *args, **kwargs):
        out = written_loop()(model, *args, **kwargs)
        with torch.no_grad():
            next(model.parameters()).add_(0.05)
        return out
    one(gpt_checks.train_loop.feedback(moved_loop), "differ from those the course's loop reaches by up to 0.05")


def test_the_right_loop_passes_and_the_reference_is_still_given_as_losses_and_validation_losses():
    assert gpt_checks.train_loop.feedback(written_loop()) == []
    losses, val_losses = gpt_checks.loop_reference()
    assert losses.shape == (gpt_checks.LOOP_SETTINGS["steps"],) and val_losses.shape == (4,)


# ------------------------------------------------------------ 2. kept under the exercise's piece name

HEAD = '''import math, torch
def {name}(x, W_Q, W_K, W_V, b_Q, b_K, b_V):
    q, k, v = x @ W_Q + b_Q, x @ W_K + b_K, x @ W_V + b_V
    s = (q @ k.T) / math.sqrt(k.shape[-1])
    T = len(x)
    s = s.masked_fill(torch.triu(torch.ones(T, T, dtype=torch.bool), 1), float("-inf"))
    return torch.softmax(s, -1) @ v
'''


def written_head(tmp_path, name):
    """A right attention head named ``name``, defined in a file as a notebook cell would define it."""
    cell = tmp_path / f"cell_{name}.py"
    cell.write_text(HEAD.format(name=name))
    spec = importlib.util.spec_from_file_location(f"cell_{name}", cell)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return getattr(module, name)


def checked(check, answer):
    """What the check printed for ``answer``."""
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        check(answer)
    return printed.getvalue()


def test_a_right_head_named_like_another_piece_is_kept_as_the_head(tmp_path, monkeypatch):
    monkeypatch.setenv("COURSE_MY_GPT", str(tmp_path / "my_gpt"))
    positions = tmp_path / "my_gpt" / "sinusoidal_positions.py"
    positions.parent.mkdir()
    positions.write_text("def sinusoidal_positions(n, d):\n    return None\n")
    said = checked(qkv_checks.attention_head, written_head(tmp_path, "sinusoidal_positions"))
    assert "✓" in said and "kept in my_gpt/attention_head.py as attention_head (your sinusoidal_positions)" in said, said
    assert positions.read_text() == "def sinusoidal_positions(n, d):\n    return None\n"   # chapter 06's, untouched
    head = learner.use("attention_head", course=None, quiet=True)
    assert head.__name__ == "sinusoidal_positions" and head.__code__.co_argcount == 7


def test_a_right_head_of_its_own_name_is_kept_under_the_name_the_chapters_ask_for(tmp_path, monkeypatch):
    monkeypatch.setenv("COURSE_MY_GPT", str(tmp_path / "my_gpt"))
    said = checked(qkv_checks.attention_head, written_head(tmp_path, "my_head"))
    assert "kept in my_gpt/attention_head.py as attention_head (your my_head)" in said, said
    assert not (tmp_path / "my_gpt" / "my_head.py").exists()
    assert (tmp_path / "my_gpt" / "attention_head.py").read_text().rstrip().endswith(
        "attention_head = my_head   # the name the chapters ahead ask for (learner.use)")
    assert learner.use("attention_head", course=None, quiet=True).__name__ == "my_head"


def test_a_piece_of_the_pieces_own_name_is_kept_as_before(tmp_path, monkeypatch):
    monkeypatch.setenv("COURSE_MY_GPT", str(tmp_path / "my_gpt"))
    said = checked(qkv_checks.attention_head, written_head(tmp_path, "attention_head"))
    assert "kept in my_gpt/attention_head.py for the chapters ahead" in said, said
    assert "= attention_head" not in (tmp_path / "my_gpt" / "attention_head.py").read_text()


# ------------------------------------------------------------ 3. a weight changed with its CRC-32 kept

def crc_kept(t, target=0, value=50.0, fixer=1):
    """Set t.flat[target] = value, then change the 4 bytes of t.flat[fixer] so that the CRC-32 of t's bytes
    is as before (CRC is linear: a 32 x 32 solve over GF(2); repro B/03)."""
    arr = t.detach().numpy().reshape(-1)
    raw = arr.view(np.uint8).copy()
    new = arr.copy()
    new[target] = value
    changed = new.view(np.uint8).copy()
    zero = zlib.crc32(bytes(len(raw)))

    def column(bit):
        d = np.zeros(len(raw), np.uint8)
        d[fixer * 4 + bit // 8] = 1 << (bit % 8)
        return zlib.crc32(d.tobytes()) ^ zero
    basis = {}
    for bit in range(32):
        v, m = column(bit), 1 << bit
        for high in range(31, -1, -1):
            if (v >> high) & 1:
                if high in basis:
                    v, m = v ^ basis[high][0], m ^ basis[high][1]
                else:
                    basis[high] = (v, m)
                    break
    v, m = zlib.crc32(changed) ^ zlib.crc32(raw), 0
    for high in range(31, -1, -1):
        if (v >> high) & 1:
            v, m = v ^ basis[high][0], m ^ basis[high][1]
    for bit in range(32):
        if (m >> bit) & 1:
            changed[fixer * 4 + bit // 8] ^= 1 << (bit % 8)
    assert zlib.crc32(changed) == zlib.crc32(raw)
    with torch.no_grad():
        t.copy_(torch.from_numpy(changed.view(np.float32).reshape(t.shape).copy()))


def test_a_strong_digest_tells_bytes_with_the_same_crc_apart():
    t = torch.randn(8, 4)
    before = states.digest(t), states.digest(t, strong=True), exercises._fingerprint([t])
    crc_kept(t)
    assert states.digest(t) == before[0]   # the cheap one is fooled, as a cache keyed on it may be
    assert states.digest(t, strong=True) != before[1] and exercises._fingerprint([t]) != before[2]


def test_a_weight_changed_with_its_crc_kept_is_put_back_after_the_check():
    cat = load_cat()   # (its own: the session's would stay changed on a failure)
    before = cat.E.detach().clone()

    class GPT(torch.nn.Module):
        def __init__(self, *args):
            super().__init__()
            crc_kept(cat.E)   # the notebook's own cat model, reached as a global

        def forward(self, ids):
            raise ValueError("stop")
    gpt_checks.gpt_module.feedback(GPT, cat)
    assert torch.equal(cat.E.detach(), before)


def test_model_kept_with_pristine_puts_back_a_weight_changed_with_its_crc_kept():
    cat = load_cat()
    before = {name: t.detach().clone() for name, t in cat.state_dict().items()}
    with exercises.model_kept(cat, pristine=lambda: before):
        crc_kept(cat.E)
    assert torch.equal(cat.E.detach(), before["E"])


def test_right_losses_from_a_model_whose_parameters_were_replaced_are_refused_in_one_sentence():
    def replaced_loop(model, *args, **kwargs):
        out = untrained_loop(model, *args, **kwargs)
        model.E = torch.nn.Parameter(torch.zeros(3, 3))
        return out
    one(gpt_checks.train_loop.feedback(replaced_loop), "no longer holds the parameters it was given")


# ------------------------------------------------------------ the tripwire beside a call left in C

AFTER_A_SLEEPER = """
import json, time
from helpers.exercises import Function, call, exercise

@exercise("a function", answer=Function("a function of x", own=("helpers.reference.softmax",)))
def doubles(answer):
    if call(answer, 2, what="on x=2", seconds=0.5) != 4:
        yield "not double"

doubles.feedback(lambda x: time.sleep(10**6))   # left running in C: the stop stays pending on it
print(json.dumps(doubles.feedback(lambda x: 2 * x)))
"""


def test_a_check_after_a_function_left_in_a_long_c_call_still_runs_its_traced_function():
    """CPython 3.11 keeps every thread's eval breaker set while a stop is pending on a thread in a C call,
    and a thread with a trace function (the tripwire) then spins at its first call: the stop is now taken
    back between pokes (states.Stoppable.withdraw). In a Python of its own: the sleeper stays behind."""
    import subprocess
    import sys
    done = subprocess.run([sys.executable, "-c", AFTER_A_SLEEPER], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout.splitlines()[-1]) == []


# ------------------------------------------------------------ a Block everyone writes alike

class Block(torch.nn.Module):   # written as the course's own is, line for line, with the earlier chapters' pieces
    def __init__(self, d_model, n_heads, d_ff):
        super().__init__()
        self.ln1 = LayerNorm(d_model)
        self.attn = MultiHeadAttention(d_model, n_heads)
        self.ln2 = LayerNorm(d_model)
        self.mlp = MLP(d_model, d_ff)

    def forward(self, h):
        h_mid = h + self.attn(self.ln1(h))
        return h_mid + self.mlp(self.ln2(h_mid))


def test_a_block_written_as_the_courses_is_still_the_learners_own(cat):
    """Its code compiles to the course's Block's very bytecode, names and constants (the exercise names its
    parts, the source texts its variables): a check that matched the course's code by content took the
    instructor's solution for a copy. Only the course's code itself, or a copy of its code object, is refused."""
    assert normalization_checks.block_module.feedback(Block, cat) == []
