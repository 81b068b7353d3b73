"""Red team round 27, reader B (chapters 10-11 on SmolLM2): continuations and kv_timing refuse a prompt
and new tokens past the course's 1,024 positions before any pass (entry 2); the kv_growth check refuses
the check cell's ids without room for one more token before running the learner's function (entry 3);
entry 8's refusal of patch_heads on SmolLM2 past 3 tokens (a hooked pass's finite check of its logits, 7 bytes a logit at once) became
the check read in pieces (all_finite), and the limit of the pass's own estimate."""
import pytest
import torch

from helpers import patching
from helpers.errors import CourseInputError
from helpers.real import checks
from helpers.real import compute as real


@pytest.fixture(scope="module")
def smol():
    return real.load()


@pytest.fixture
def no_pass(smol, monkeypatch):
    """The real model, any forward pass a failure: each call here should be refused before the first."""
    model, _ = smol

    def refused_first(*args, **kwargs):
        raise AssertionError("a call that should have been refused up front ran a pass")
    monkeypatch.setattr(model, "forward", refused_first)
    return model


def long_prompt(n):
    return torch.randint(0, 49152, (n,), generator=torch.Generator().manual_seed(0))


# ------------------------------------------------------------ entry 2: the course's 1,024 positions, up front

def test_continuations_refuses_past_1024_positions_before_any_pass(no_pass):
    with pytest.raises(CourseInputError, match=r"fit in the model's 1,024 tokens, but the prompt has 1,020 and "
                                               r"n_new=8 would need 1,027$"):
        real.continuations(no_pass, long_prompt(1020), 8, seeds=(0,))


def test_kv_timing_refuses_past_1024_positions_before_any_pass(no_pass):
    with pytest.raises(CourseInputError, match=r"1,024 tokens, but the prompt has 1,020 and new_tokens=5 would "
                                               r"need 1,025$"):
        real.kv_timing(no_pass, long_prompt(1020), new_tokens=5)


def test_new_tokens_count_the_positions_the_passes_see(smol):
    model, _ = smol
    ids = long_prompt(1020)
    assert real.check_new_tokens(model, ids, 5) == 5   # the last one drawn is never fed back: 1,024 positions
    assert real.check_new_tokens(model, ids, 4, "new_tokens", last_fed=True) == 4
    with pytest.raises(CourseInputError, match="n_new=6 would need 1,025"):
        real.check_new_tokens(model, ids, 6)
    with pytest.raises(CourseInputError, match="new_tokens=5 would need 1,025"):
        real.check_new_tokens(model, ids, 5, "new_tokens", last_fed=True)


# ------------------------------------------------------------ entry 3: the kv_growth check's own ids

def test_kv_growth_check_refuses_ids_without_room_before_the_learners_function(no_pass, capsys):
    called = []

    def kv_growth(model, ids):
        called.append(1)
        return 0
    verdict = checks.kv_growth(kv_growth, no_pass, long_prompt(1024))
    said = capsys.readouterr().out
    assert not verdict and not called
    assert "the check cannot use what the check cell gives it (ids should leave room for one more token in the " \
           "model's 1,024 positions, but it has 1,024 tokens)" in said, said


def test_check_prompt_takes_1023_tokens(smol):
    model, _ = smol
    assert checks.check_prompt(model, long_prompt(1023))[1].shape == (1023,)
    with pytest.raises(CourseInputError, match=r"one prompt \(T,\).*\(1, 5\)"):
        checks.check_prompt(model, long_prompt(5)[None])


# ------------------------------------------------------------ entry 8: a hooked pass's finite check counted

def pair(T):
    g = torch.Generator().manual_seed(1)
    return (torch.randint(0, 49152, (1, T), generator=g), torch.randint(0, 49152, (1, T), generator=g))


def metric(out):
    return out["logits"][:, -1, 0] - out["logits"][:, -1, 1]


def test_patch_heads_on_smollm2_with_16_tokens_is_refused_up_front(no_pass):
    # 8 tokens fit since the finite check reads the logits in pieces (measured: the batched pass of 270 rows
    # of 8 tokens grew the peak by 0.35 GB after a warm-up, under pass_bytes' 0.51 GB); 16 need about 1 GiB
    with pytest.raises(CourseInputError, match=r"patch_heads should need at most 0\.5 GiB .* 270 rows of 16 tokens"):
        patching.patch_heads(no_pass, *pair(16), metric)


def test_patch_residual_on_smollm2_with_16_tokens_is_refused_up_front(no_pass):
    with pytest.raises(CourseInputError, match=r"patch_residual should need at most 0\.5 GiB .* rows of 16"):
        patching.patch_residual(no_pass, *pair(16), metric)


def test_patch_heads_on_smollm2_with_8_tokens_fits_its_limit(smol):
    model, _ = smol
    patching.check_memory(model, model.cfg.n_layers * model.cfg.n_heads, 8)   # 270 rows of 8: not refused


PEAK = """
import resource, sys, torch
from helpers import patching
from helpers.model import Config, Transformer, all_finite
peak = lambda: resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
if sys.argv[1] == "tensor":
    x = torch.zeros(2**26)                       # 256 MB; isfinite at once would make 7 bytes a number more
    before = peak()
    assert all_finite(x)
    x[-1] = float("nan")
    assert not all_finite(x)
    print(peak() - before, 7 * 2**26)
else:
    model = Transformer(Config(vocab_size=50_000, d_model=16, n_heads=2, n_layers=1, d_ff=32), seed=0)
    ids = torch.zeros(260, 8, dtype=torch.long)  # logits 0.42 GB; a pass with replace checks them finite
    patching.capture(model, ids[:2], ["L0.h"], replace={"L0.h": lambda x: x})   # warm-up
    before = peak()
    patching.capture(model, ids, ["L0.h"], replace={"L0.h": lambda x: x})
    print(peak() - before, model.cfg.pass_bytes(260, 8))
"""


@pytest.mark.parametrize("what", ["tensor", "pass"])
def test_the_finite_check_reads_the_logits_in_pieces(what):
    """A hooked pass checks its logits finite; torch's isfinite made about 7 bytes a logit at once (0.74 GB
    more for patch_heads on SmolLM2 with 8 tokens), so such calls were refused past 3 tokens. all_finite
    reads 2**22 numbers at a time: the peak stays within the pass's own estimate."""
    import subprocess
    import sys
    out = subprocess.run([sys.executable, "-c", PEAK, what], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    grew, bound = map(int, out.stdout.split())
    if what == "tensor":
        assert grew < 100 * 2**20 < bound   # pieces of 4 M numbers: about 30 MB of masks at a time
    else:
        assert grew < 1.1 * bound           # pass_bytes, and a piece's masks (29 MB); before: 2.7 times pass_bytes
