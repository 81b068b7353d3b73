"""Red team round 25 (reader A, entries 1, 4, 13; reader B, entries 2, 10): the course's own piece is no answer
(chapter 03's check names every course attention; every method of a class named in own= is watched, not only
__init__ and forward); a right answer in any float type narrower than float32 (float8 too) is named by its dtype;
chapter 10's Method 2 check and chapter 09's temperature check name a narrow dtype or a rounding before a slip's
hint; keep refuses a piece whose code reads a name its cell neither defines nor imports."""
import linecache

import numpy as np
import pytest
import torch
from torch import nn

from helpers import exercises, learner
from helpers import reference as ref
from helpers.ablation import checks as ablation_checks
from helpers.mlp import checks as mlp_checks
from helpers.qkv import checks as qkv_checks
from helpers.qkv import compute as qkv
from helpers.reference import softmax
from helpers.sampling import checks as sampling_checks
from helpers.scaling import checks as scaling_checks


def one(said, *words):
    """The one sentence in ``said`` (a check's feedback), holding every word."""
    assert len(said) == 1, said
    for word in words:
        assert word in said[0], (word, said[0])
    return said[0]


# --- A1: chapter 03's layer_scores names every course attention ------------------------------------------------

def test_layer_scores_refuses_scores_taken_from_the_courses_attention_steps():
    def scaled_scores(x, W_Q, W_K, b_Q, b_K, n_heads):
        x = x.double()
        X1 = torch.cat([x, torch.ones(len(x), 1, dtype=x.dtype)], 1)   # a column of ones carries the biases
        d, heads = W_Q.shape[1] // n_heads, []
        for h in range(n_heads):
            cols = slice(h * d, (h + 1) * d)
            WQ = torch.cat([W_Q[:, cols].double(), b_Q[cols].double()[None]], 0).numpy()
            WK = torch.cat([W_K[:, cols].double(), b_K[cols].double()[None]], 0).numpy()
            heads.append(torch.tensor(qkv.attention_steps(X1.numpy(), WQ, WK, WK)["scaled"]))
        return torch.stack(heads).float()
    one(scaling_checks.layer_scores.feedback(scaled_scores), "helpers.qkv.compute.attention_steps", "write your own")
    assert set(qkv_checks.COURSES_ATTENTION) <= set(scaling_checks.layer_scores.answer.own)


# --- A4: every function of a class named in own= is watched ----------------------------------------------------

def test_the_watch_holds_every_method_of_an_own_class_private_and_static_ones_too():
    names = {name for _, name in exercises._own_codes(("helpers.model.Attention", "helpers.model.Transformer")).values()}
    assert {"helpers.model.Attention.__init__", "helpers.model.Attention.forward", "helpers.model.Attention._forward",
            "helpers.model.Attention.write_back", "helpers.model.Transformer._forward",
            "helpers.model.Transformer.keeper"} <= names, sorted(names)


def test_a_head_computed_by_the_courses_private_attention_forward_is_refused():
    def attention_head(x, W_Q, W_K, W_V, b_Q, b_K, b_V):
        from helpers.model import Attention
        a = Attention.__new__(Attention)   # the course's module, without its __init__
        nn.Module.__init__(a)
        d_k = W_Q.shape[1]
        a.n_heads, a.d_k, a.n_kv_heads, a.rotary, a.dropout = 1, d_k, 1, False, 0.0
        a.W_Q, a.W_K, a.W_V, a.b_Q, a.b_K, a.b_V = W_Q, W_K, W_V, b_Q, b_K, b_V
        a.W_O, a.b_O = torch.eye(d_k, dtype=x.dtype), None
        return Attention._forward(a, x[None], True, True, (), None, 0, 0, None, True)[0]
    one(qkv_checks.attention_head.feedback(attention_head), "helpers.model.Attention", "write your own")


# --- A13: a float type narrower than float32, named by its dtype -----------------------------------------------

@pytest.mark.parametrize("dtype", [torch.float8_e4m3fn, torch.float8_e5m2, torch.float8_e4m3fnuz, torch.float8_e5m2fnuz])
def test_a_right_weight_in_float8_is_named_by_its_dtype(dtype):
    x = qkv.three_words()["x"]
    right = ref.softmax(x @ x.T)[1, 0]
    one(qkv_checks.weight_cat_on_the.feedback(torch.tensor(right).to(dtype)), str(dtype).replace("torch.", ""),
        "about 1 significant digit,", "compute in float32")


def test_a_right_cosine_function_returning_float8_is_named_by_its_dtype():
    from helpers.geometry import checks as geometry_checks

    def cosine(a, b):
        a, b = np.asarray(a, float), np.asarray(b, float)
        return torch.tensor(a @ b / (np.linalg.norm(a, axis=-1) * np.linalg.norm(b))).to(torch.float8_e4m3fn)
    said = geometry_checks.cosine_function.feedback(cosine)
    assert said and all("float8_e4m3fn" in sentence for sentence in said), said


def test_the_narrow_float_sentence_keeps_its_float16_and_bfloat16_words_and_leaves_float32_alone():
    reference = np.array([0.123456, 2.5])
    for dtype, digits in ((torch.float16, "3 significant digits"), (torch.bfloat16, "2 significant digits")):
        given = torch.tensor(reference).to(dtype)
        said = exercises.narrow_float_problem(given, given.double().numpy(), reference, "w", 1e-6)
        assert said and f"a {str(dtype)[6:]} tensor" in said and digits in said, said
    assert "float16 array" in exercises.narrow_float_problem(reference.astype(np.float16), reference.astype(np.float16)
                                                            .astype(float), reference, "w", 1e-6)
    wide = torch.tensor(reference).float()
    assert exercises.narrow_float_problem(wide, wide.double().numpy(), reference, "w", 1e-12) is None
    assert exercises.narrow_float_problem(torch.tensor([1, 2]), np.array([1.0, 2.0]), [1.0, 2.5], "w", 1e-3) is None
    far = torch.tensor([9.0]).to(torch.float8_e4m3fn)   # far from the reference even for float8: no such sentence
    assert exercises.narrow_float_problem(far, np.array([9.0]), [1.0], "w", 1e-3) is None


# --- B10: Method 2 (chapter 10) and the temperature check (chapter 09) name a dtype or a rounding first ----------

@pytest.fixture(scope="module")
def method2_reference(cat, cat_world):
    with torch.no_grad():
        return cat(cat_world.tokenizer.encode("<BOS> the dog was"), attention=False)


def test_method2_names_a_narrow_dtype_or_a_rounding_not_a_wrong_method(method2_reference):
    reference = method2_reference
    assert ablation_checks.method2_logits.feedback(reference.clone(), reference) == []
    for answer, words in ((reference.half(), "float16 tensor"), (reference.bfloat16(), "bfloat16 tensor"),
                          (np.round(reference.numpy(), 4), "rounded to 4 decimals")):
        said = one(ablation_checks.method2_logits.feedback(answer, reference), words)
        assert "zero both W_O" not in said
    one(ablation_checks.method2_logits.feedback(reference + 0.01, reference), "zero both W_O and b_O")


def test_the_temperature_check_names_a_narrow_dtype_or_a_rounding_not_a_sum_slip():
    logits, temperature = np.array([5.0, 1.0, 0.5, -1.0]), 0.7
    right = softmax(logits / temperature)
    assert sampling_checks.tempered.feedback(right, logits, temperature) == []
    for answer, words in ((torch.tensor(right).bfloat16(), "bfloat16 tensor"),
                          (torch.tensor(right).to(torch.float8_e4m3fn), "float8_e4m3fn tensor"),
                          (np.round(right, 2), "rounded to 2 decimals")):
        said = one(sampling_checks.tempered.feedback(answer, logits, temperature), words)
        assert "sum" not in said, said
    one(sampling_checks.tempered.feedback(softmax(logits), logits, temperature), "temperature 1")


# --- B2: keep refuses a piece that reads a name of another cell --------------------------------------------------

MLP_CELL = '''
class MLP(nn.Module):
    def __init__(self, d_model, d_ff, bias=True):
        super().__init__()
        self.W_1 = nn.Parameter(torch.zeros(d_model, d_ff)); self.W_2 = nn.Parameter(torch.zeros(d_ff, d_model))
        if bias:
            self.b_1 = nn.Parameter(torch.zeros(d_ff)); self.b_2 = nn.Parameter(torch.zeros(d_model))
        self.bias = bias

    def forward(self, x):
        h = x @ self.W_1 + (self.b_1 if self.bias else 0)
        return act(h) @ self.W_2 + (self.b_2 if self.bias else 0)
'''


def cell(source, name, number, **earlier):
    """``name`` as a notebook cell ``source`` defines it, in a namespace holding ``earlier`` (earlier cells' names)."""
    filename = f"<ipython-input-{number}-round25>"
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    namespace = dict(nn=nn, torch=torch, F=torch.nn.functional, **earlier)
    exec(compile(source, filename, "exec"), namespace)
    return namespace[name]


@pytest.fixture
def store(tmp_path, monkeypatch):
    """A fresh my_gpt/ folder of the test's own (a kept piece must not reach other tests)."""
    monkeypatch.setenv("COURSE_MY_GPT", str(tmp_path / "my_gpt"))
    return tmp_path / "my_gpt"


def test_a_module_reading_a_global_of_an_earlier_cell_is_checked_but_not_kept(cat, dragon, capsys, store):
    MLP = cell(MLP_CELL, "MLP", 901, act=nn.GELU())
    mlp_checks.mlp_module(MLP, cat, dragon)
    said = capsys.readouterr().out
    assert "✓" in said and "not kept" in said and "reads act, which the cell neither defines nor imports" in said, said
    assert not learner.has("MLP") and not (store / "MLP.py").exists()


def test_a_piece_whose_cell_defines_what_it_reads_is_kept_and_runs(cat, dragon, capsys, store):
    source = "SCALE = 1.0\n\ndef act(h):\n    return F.gelu(h) * SCALE\n" + MLP_CELL
    MLP = cell(source, "MLP", 902)
    mlp_checks.mlp_module(MLP, cat, dragon)
    assert "kept in my_gpt/MLP.py" in capsys.readouterr().out
    assert (store / "MLP.py").is_file()
    mine = learner.use("MLP", course=None, quiet=True)
    assert mine is not MLP and mine(6, 24)(torch.zeros(2, 6)).shape == (2, 6)


def test_missing_globals_follows_the_files_own_helpers_and_knows_class_bodies_and_builtins(tmp_path):
    import importlib.util
    path = tmp_path / "piece.py"
    path.write_text("import math\n\ndef helper(x):\n    return far(x) + len([x])\n\n"
                    "class Piece:\n    @staticmethod\n    def run(x):\n        class Local:\n            k = 1\n"
                    "            j = k + 1\n        return helper(x) + math.pi + (lambda: near)()\n")
    spec = importlib.util.spec_from_file_location("round25_piece", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert learner.missing_globals(module.Piece, module) == ["far", "near"]
    assert learner.missing_globals(module.helper, module) == ["far"]
