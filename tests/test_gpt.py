"""Chapter 12 (your GPT): tokenizing Tiny Shakespeare, the learner's BPE merge, GPT and training
loop checks (each known mistake named), the live run, and bad input refused with one sentence."""
import collections
import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

from helpers import weights
from helpers.errors import CourseInputError
from helpers.gpt import checks, corpus
from helpers.gpt import compute as gc
from helpers.gpt import tokenize as tk
from helpers.model import Config, Transformer
from helpers.normalization.compute import Block
from learner_loops import written_loop


@pytest.fixture(scope="module")
def texts():
    return corpus.split(corpus.load_text())


@pytest.fixture(scope="module")
def cat():
    return weights.load_cat()


def feedback(check, answer, *args):
    return "; ".join(check.feedback(answer, *args))


# ------------------------------------------------------------ tokenizing

def test_the_word_split_is_the_libraries_on_the_whole_text(texts):
    from tokenizers import pre_tokenizers

    text = texts[0] + texts[1]
    split = pre_tokenizers.ByteLevel(add_prefix_space=False).pre_tokenize_str(text)
    assert tk.word_counts(text) == collections.Counter(text[a:b] for _, (a, b) in split)


def test_merge_step_is_the_librarys_first_merge(texts):
    words = tk.pretokenize(texts[0][:20_000])
    pair, merged = tk.merge_step(words)
    assert pair == tk.merges(tk.train_bpe(texts[0][:20_000], tk.BYTES + 1))[0] == ("Ġ", "t")
    assert sum(map(len, merged)) == sum(map(len, words)) - tk.pair_counts(words)[pair]


def test_merge_step_counts_overlaps_breaks_ties_and_merges_left_to_right():
    assert tk.merge_step([list("aaa")] * 3 + [list("ab")] * 5) == (("a", "a"), [["aa", "a"]] * 3 + [list("ab")] * 5)
    assert tk.merge_step([list("zy"), list("ba")])[0] == ("b", "a")
    assert tk.merge_step([list("abcab")])[1] == [["ab", "c", "ab"]]


def test_a_smaller_vocabulary_is_the_same_run_stopped_earlier(texts):
    text = texts[0][:30_000]
    big, small = tk.train_bpe(text, 400), tk.train_bpe(text, 300)
    assert tk.merges(tk.shorter(big, 300)) == tk.merges(small) == tk.merges(big)[:44]
    line = "First Citizen: Before we proceed"
    assert tk.shorter(big, 300).encode(line).ids == small.encode(line).ids


def test_the_size_table_counts_tokens_as_tokenizing_the_whole_text(texts):
    bpe = tk.train_bpe(texts[0][:30_000], 512)
    val = texts[1][:5_000]
    row = tk.size_table(bpe, (512,), texts[0][:30_000], val)[0]
    assert row["chars_per_token"] == pytest.approx(len(val) / len(bpe.encode(val).ids))
    assert tk.size_table(bpe, (256,), texts[0][:30_000], val)[0]["chars_per_token"] == 1.0


@pytest.mark.parametrize("call, words", [
    (lambda: tk.train_bpe("", 512), "empty"),
    (lambda: tk.train_bpe("some text", 0), "vocab_size"),
    (lambda: tk.train_bpe("some text", 10**9), "but got 1,000,000,000"),
    (lambda: tk.pretokenize(None), "string"),
    (lambda: tk.shorter(tk.train_bpe("a text to learn", 260), 1024), "but got 1,024"),
])
def test_bad_input_to_the_tokenizers_is_one_sentence(call, words):
    with pytest.raises(CourseInputError, match=words) as error:
        call()
    assert "\n" not in str(error.value)


def test_smollm2s_tokenizer_splits_the_line_into_whole_words():
    pieces, size = tk.smollm2_pieces("First Citizen: Before we proceed")
    assert size == 49_152 and pieces == ["First", " Citizen", ":", " Before", " we", " proceed"]


# ------------------------------------------------------------ exercise 1: one merge

def merge_with(pick=None, how=None):
    """A merge_step that picks its pair with ``pick(words)`` and merges with ``how`` (known slips)."""
    def merge_step(words):
        pair = pick(words) if pick else tk.merge_step(words)[0]
        return pair, [checks._merge_word(w, *pair, how or "right") for w in words]
    return merge_step


def across(words):
    flat = [s for w in words for s in w]
    counts = collections.Counter(zip(flat, flat[1:]))
    return min(p for p in counts if counts[p] == max(counts.values()))


def without_overlaps(words):
    counts = collections.Counter()
    for w in words:
        for pair in set(zip(w, w[1:])):
            counts[pair] += "".join(w).count("".join(pair))   # str.count skips overlapping occurrences
    return min(p for p in counts if counts[p] == max(counts.values()))


def first_seen(words):
    counts = collections.Counter(p for w in words for p in zip(w, w[1:]))
    return counts.most_common(1)[0][0]


@pytest.mark.parametrize("answer, words", [
    (merge_with(pick=across), "across word boundaries"),
    (merge_with(pick=without_overlaps), "overlapping ones too"),
    (merge_with(pick=first_seen), "on a tie you took ('z', 'y'), the pair seen first or the largest: take the "
                                  "smallest of the tied pairs, ('b', 'a')"),
    (merge_with(how="first"), "only the first occurrence was merged"),
    (merge_with(how="keep_second"), "kept the second symbol too"),
    (merge_with(how="keep_first"), "kept the first symbol too"),
    (merge_with(how="right_to_left"), "merged from the right"),
    (merge_with(how="overlapping"), "a symbol was used in two merges"),
    (lambda words: ("".join(tk.merge_step(words)[0]), words), "not the merged string"),
])
def test_the_merge_check_names_each_mistake(answer, words, texts):
    assert words in feedback(checks.merge_step, answer, texts[0])


def test_the_merge_check_passes_the_right_step_and_says_not_answered(texts):
    assert feedback(checks.merge_step, lambda words: tk.merge_step(words), texts[0]) == ""
    assert "the course's own" in feedback(checks.merge_step, tk.merge_step, texts[0])

    def skeleton(words):
        pair, merged = None, None
        if pair is None:
            return None
        return pair, merged
    assert "not answered yet" in feedback(checks.merge_step, skeleton, texts[0])
    assert "not answered yet" in feedback(checks.merge_step, None, texts[0])


# ------------------------------------------------------------ exercise 2: the GPT

def gpt_with(slip):
    """The course's GPT with one assembly mistake in forward (the same pass as ``slipped_logits``,
    which takes any model with the course's names: E, PE, blocks, final_ln)."""
    class Slipped(gc.GPT):
        def forward(self, ids):
            return gc.slipped_logits(self, ids, slip)
    return Slipped


@pytest.mark.parametrize("slip", gc.ASSEMBLY_SLIPS)
def test_the_gpt_check_names_each_assembly_mistake(slip, cat):
    assert checks.ASSEMBLY_HINTS[slip] in feedback(checks.gpt_module, gpt_with(slip), cat)


class Untied(gc.GPT):
    def __init__(self, *args):
        super().__init__(*args)
        self.W_U = nn.Parameter(torch.zeros(args[1], args[0]))


class Embedded(gc.GPT):
    def __init__(self, vocab_size, d_model, *args):
        super().__init__(vocab_size, d_model, *args)
        del self.E
        self.E = nn.Embedding(vocab_size, d_model)


class Untransposed(gc.GPT):
    def forward(self, ids):
        h = self.E[ids] + self.PE[:ids.shape[-1]]
        for block in self.blocks:
            h = block(h)
        return self.final_ln(h) @ self.E


class Double(gc.GPT):
    def forward(self, ids):
        self.PE = self.PE.double()
        return super().forward(ids)


@pytest.mark.parametrize("answer, words", [
    (Untied, "the unembedding is tied"),
    (Embedded, "not an nn.Embedding"),
    (Untransposed, "final_ln(h) @ E.T"),
    (Double, "cast the positions table to float32"),
    (gc.GPT(20, 6, 2, 2, 8, 16), "pass the class GPT itself"),
])
def test_the_gpt_check_names_parameter_and_shape_mistakes(answer, words, cat):
    assert words in feedback(checks.gpt_module, answer, cat)


def test_the_gpt_check_passes_the_course_gpt_and_says_not_answered(cat):
    class GPT(gc.GPT):   # the course's sums in a forward of the learner's (the course's own is refused: round 9,
        def forward(self, ids):   # and a subclass that writes neither __init__ nor forward: round 10)
            return gc.GPT.forward(self, ids)
    assert feedback(checks.gpt_module, GPT, cat) == ""
    assert "the course's own helpers.gpt.compute.GPT" in feedback(checks.gpt_module, gc.GPT, cat)

    class Skeleton(nn.Module):
        def __init__(self, vocab_size, d_model, n_heads, n_layers, d_ff, n_max):
            super().__init__()
            self.cfg = Config(vocab_size, d_model, n_heads, n_layers, d_ff, n_max)

        def forward(self, ids):
            logits = None
            return logits
    assert "not answered yet" in feedback(checks.gpt_module, Skeleton, cat)


def test_the_course_gpt_is_the_transformer_and_loads_into_it(cat):
    ids = gc.cat_world_case(cat)[0]
    mine = gc.GPT(20, 6, 2, 2, 8, 16)
    mine.load_state_dict(cat.state_dict())
    with torch.no_grad():
        assert torch.allclose(gc.as_transformer(mine)(ids), cat(ids), atol=1e-4)
    other = gc.GPT(20, 6, 2, 3, 8, 16)   # three layers, given the cat model's two-layer config
    other.cfg = cat.cfg
    with pytest.raises(CourseInputError, match="another shape"):
        gc.as_transformer(other)


def test_a_fresh_gpt_starts_near_ln_v():
    model = gc.small_start(gc.GPT(65, 64, 4, 4, 256, 128), seed=0)
    x = torch.randint(65, (4, 64), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        loss = F.cross_entropy(model(x).reshape(-1, 65), x.reshape(-1)).item()
    assert abs(loss - math.log(65)) < 0.1 * math.log(65)


# ------------------------------------------------------------ exercise 3: the loop

def loop_with(slip):
    return lambda *args, **kwargs: gc.train_loop(*args, **kwargs, slip=slip)


def test_the_loop_equals_the_courses_train_step_for_step():
    right, right_val = checks.loop_reference()
    train_ids, val_ids = checks.loop_data()
    mine, mine_val = checks.loop_output(gc.train_loop(checks.loop_model(), train_ids, val_ids, **checks.LOOP_SETTINGS))
    assert np.abs(mine - right).max() <= 1e-5 and np.abs(mine_val - right_val).max() <= 1e-5
    assert right[0] == pytest.approx(math.log(65), abs=0.1)


@pytest.mark.parametrize("slip", [s for s in gc.LOOP_SLIPS if s != "eval_train_mode"])
def test_the_loop_check_names_each_mistake(slip):
    assert checks.LOOP_HINTS[slip] in feedback(checks.train_loop, loop_with(slip))


def evaluating_wrongly(how):
    """A loop whose evaluation (or the training after it) runs the model in the wrong mode."""
    def loop(model, train_ids, val_ids, steps, batch, context, lr, warmup, min_lr, clip, eval_every,
             eval_batches=4, seed=0, callback=None):
        g = torch.Generator().manual_seed(seed + 1)
        x, y = corpus.windows(val_ids, batch, context, g)
        if how == "train_mode":
            model.train()
            with torch.no_grad():
                model(x)
        elif how == "with_grad":
            model.eval()
            model(x)
        else:
            model.eval()
            with torch.no_grad():
                model(x)
            model(corpus.windows(train_ids, batch, context, g)[0])
        return [], {}
    return loop


@pytest.mark.parametrize("how, words", [("train_mode", "in training mode"), ("with_grad", "with gradients on"),
                                        ("stays_in_eval", "ran in eval mode")])
def test_the_loop_check_names_evaluation_in_the_wrong_mode(how, words):
    assert words in feedback(checks.train_loop, evaluating_wrongly(how))


def test_the_loop_check_passes_the_course_loop_and_says_not_answered():
    def train_loop(*args, **kwargs):
        return gc.train_loop(*args, **kwargs)
    assert feedback(checks.train_loop, train_loop) == ""
    skeleton = lambda *args, **kwargs: ([], {})
    assert "not answered yet" in feedback(checks.train_loop, skeleton)


def test_the_check_data_never_repeat_a_validation_window_in_the_training_text():
    train_ids, val_ids = checks.loop_data()
    context = checks.LOOP_SETTINGS["context"]
    val = {tuple(r.tolist()) for r in val_ids.unfold(0, context, 1)}
    assert not any(tuple(r.tolist()) in val for r in train_ids.unfold(0, context, 1))


@pytest.mark.parametrize("change, words", [
    (dict(lr=float("nan")), "finite"),
    (dict(lr=-1e-3), "lr"),
    (dict(context=64), "n_max=32"),
    (dict(steps=0), "steps"),
])
def test_bad_input_to_the_loop_is_one_sentence_and_changes_nothing(change, words):
    model = checks.loop_model()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    train_ids, val_ids = checks.loop_data()
    with pytest.raises(CourseInputError, match=words):
        gc.train_loop(model, train_ids, val_ids, **{**checks.LOOP_SETTINGS, **change})
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())


def test_a_vocabulary_of_the_wrong_size_is_refused():
    with pytest.raises(CourseInputError, match="vocab"):
        Config(vocab_size=0, d_model=8, n_heads=2, n_layers=1, d_ff=8)
    model = Transformer(Config(vocab_size=10, d_model=8, n_heads=2, n_layers=1, d_ff=8, n_max=16), seed=0)
    train_ids, val_ids = checks.loop_data()
    with pytest.raises(CourseInputError, match="vocabulary, 0..9"):
        gc.train_loop(model, train_ids, val_ids, **{**checks.LOOP_SETTINGS, "context": 16})


# ------------------------------------------------------------ the live run and sampling

def test_the_live_run_trains_draws_and_keeps_to_its_time(texts):
    tokenizer = corpus.CharTokenizer()
    model = gc.small_start(gc.GPT(65, 16, 2, 1, 32, 32), seed=0)
    train_ids, val_ids = tokenizer.encode(texts[0][:20_000]), tokenizer.encode(texts[1][:4_000])
    run = gc.live_run(gc.train_loop, model, train_ids, val_ids, tokenizer, batch=4, context=16, lr=3e-3, warmup=2,
                      min_lr=3e-4, clip=1.0, eval_every=10, eval_batches=1, seconds=6, sample_chars=20)
    assert 1 <= run["done"] <= run["steps"] and len(run["losses"]) == run["done"]
    assert run["sample"].startswith("ROMEO:") and len(run["sample"]) == 26
    assert run["val_losses"][0] == pytest.approx(math.log(65), abs=0.15)


def test_sampling_reads_a_window_of_the_context_and_is_seeded():
    tokenizer = corpus.CharTokenizer()
    model = gc.as_transformer(gc.small_start(gc.GPT(65, 16, 2, 1, 32, 16), seed=0))
    a = gc.sample_text(model, tokenizer, "ROMEO:", 40, temperature=0.8, seed=3, context=16)
    assert a == gc.sample_text(model, tokenizer, "ROMEO:", 40, temperature=0.8, seed=3, context=16)
    assert len(a) == 46
    with pytest.raises(CourseInputError, match="n_max=16"):
        gc.sample_text(model, tokenizer, "ROMEO:", 4, context=32)
    with pytest.raises(CourseInputError, match="prompt"):
        gc.sample_text(model, tokenizer, "", 4)


def test_samples_at_two_temperatures_are_seeded_and_refuse_greedy():
    tokenizer = corpus.CharTokenizer()
    model = gc.as_transformer(gc.small_start(gc.GPT(65, 16, 2, 1, 32, 64), seed=0))
    a = gc.samples_at(model, tokenizer, "ROMEO:", 20, (0.8, 1.2), seed=0)
    assert a == gc.samples_at(model, tokenizer, "ROMEO:", 20, (0.8, 1.2), seed=0)
    assert [len(t) for t in a] == [26, 26] and all(t.startswith("ROMEO:") for t in a)
    with pytest.raises(CourseInputError, match="above 0"):
        gc.samples_at(model, tokenizer, "ROMEO:", 5, (0.0,))


# ------------------------------------------------------------ watching a circuit form

def synthetic_log():
    """Induction records every 20 steps: head L2H1 rises between steps 20 and 40, the second copy's loss falls."""
    records = []
    for step, score, second in ((0, 0.02, 4.2), (20, 0.05, 4.1), (40, 0.6, 2.0), (60, 0.7, 1.9), (80, 0.72, 1.8)):
        scores = [[0.03] * 4 for _ in range(4)]
        scores[2][1] = score
        records.append(dict(step=step, induction_score=scores, loss_first_copy=4.2, loss_second_copy=second))
    return dict(induction=records)


def test_the_circuit_is_the_head_that_rises_where_the_second_copy_falls():
    history = gc.induction_history(synthetic_log())
    birth = gc.circuit_birth(history)
    assert birth["head"] == (2, 1) and birth["step"] == 40 and birth["drop_step"] == 40
    assert birth["before"] == dict(step=20, score=0.05, second=4.1)
    assert gc.circuit_figure(history, birth).axes[0].get_ylabel() == "induction score"
    with pytest.raises(CourseInputError, match="induction records"):
        gc.induction_history({"evaluations": []})


def test_mean_ablating_the_induction_head_hurts_copying_and_a_control_does_not():
    from helpers.heads import compute as heads

    model = weights.load_induction()
    ablations = gc.head_ablations(model, n=8, length=12, seed=7, reference_seed=8)
    ids = heads.worlds.repeated_tokens(8, 12, model.cfg.vocab_size, 7)
    assert ablations["none"] == pytest.approx(heads.copy_losses(model, ids, 12)["second"])
    _, induction = heads.head_scores(model, ids, 12)
    best = tuple(int(i) for i in np.unravel_index(int(induction.argmax()), induction.shape))
    assert best == (1, 0) and ablations[best] > ablations["none"] + 0.5      # the induction head
    assert abs(ablations[1, 1] - ablations["none"]) < 0.2                    # layer 1's other head, a control


def test_the_circuit_lines_say_whether_a_head_formed():
    history = gc.induction_history(synthetic_log())
    lines = gc.circuit_lines(history, gc.circuit_birth(history))
    assert lines[0] == "the best head at the end: L2H1, induction score 0.720"
    assert lines[1] == "its score reaches half its final value at step 40"
    weak = synthetic_log()
    for record in weak["induction"]:
        record["induction_score"][2][1] = 0.05
    history = gc.induction_history(weak)
    birth = gc.circuit_birth(history)
    lines = gc.circuit_lines(history, birth)
    assert lines[1] == "no head became an induction head in this run: no score rose above 0.050 " \
                       "(an induction head scores above 0.3)"
    assert not birth["formed"] and not any("steepest" in line for line in lines)   # no fall named
    assert lines[2] == "the first copy's loss stays at 4.2, the second copy's falls from 4.2 to 1.8"
    figure = gc.circuit_figure(history, birth)
    assert not any(ax.patches for ax in figure.axes)                                # and no band drawn


# ------------------------------------------------------------ after the outside review

def test_the_merge_check_names_a_string_replace_merge_inside_a_longer_symbol(texts):
    def replace_merge(words):
        pair, _ = tk.merge_step(words)
        return pair, [" ".join(w).replace(" ".join(pair), "".join(pair)).split(" ") for w in words]
    assert "part of a longer symbol" in feedback(checks.merge_step, replace_merge, texts[0])


class PersistentPositions(gc.GPT):
    def __init__(self, *args):
        super().__init__(*args)
        table = self.PE
        del self.PE
        self.register_buffer("PE", table)


@pytest.mark.parametrize("answer, start", [
    (PersistentPositions, "your GPT's state_dict does not match the cat model's: ['PE'] is extra; the positions "
                          "table is saved with the parameters"),
    (Embedded, "your GPT's state_dict does not match the cat model's: ['E.weight'] is extra and ['E'] is "
               "missing; E is one nn.Parameter"),
])
def test_the_gpt_check_names_the_extra_and_missing_keys_first(answer, start, cat):
    assert feedback(checks.gpt_module, answer, cat).startswith(start)


def test_the_loop_check_fails_a_loop_that_ignores_the_callback():
    def loop(*args, callback=None, **kwargs):
        return gc.train_loop(*args, **kwargs)
    assert "callback was called 0 times for 12 steps" in feedback(checks.train_loop, loop)


def test_the_loop_check_names_validation_on_the_training_text():
    def loop(model, train_ids, val_ids, *args, **kwargs):
        return gc.train_loop(model, train_ids, train_ids, *args, **kwargs)
    assert "computed on windows of train_ids" in feedback(checks.train_loop, loop)


def test_the_loop_check_names_losses_kept_as_tensors():
    def loop(*args, **kwargs):
        losses, val_losses = gc.train_loop(*args, **kwargs)
        return [torch.tensor(v, requires_grad=True) for v in losses], val_losses
    assert "append loss.item()" in feedback(checks.train_loop, loop)


# ------------------------------------------------------------ four more slips, each named

class OneBlockRepeated(gc.GPT):
    """nn.ModuleList([Block(...)] * n_layers): one Block, n_layers times."""
    def __init__(self, vocab_size, d_model, n_heads, n_layers, d_ff, n_max):
        super().__init__(vocab_size, d_model, n_heads, n_layers, d_ff, n_max)
        self.blocks = nn.ModuleList([Block(d_model, n_heads, d_ff)] * n_layers)


class ScaledEmbeddings(gc.GPT):
    """h0 = sqrt(d_model) * E[ids] + PE[:T], as the 2017 paper scales its embeddings."""
    def forward(self, ids):
        h = math.sqrt(self.E.shape[1]) * self.E[ids] + self.PE[:ids.shape[-1]]
        for block in self.blocks:
            h = block(h)
        return self.final_ln(h) @ self.E.T


@pytest.mark.parametrize("answer, slip", [(OneBlockRepeated, "one_block_repeated"),
                                          (ScaledEmbeddings, "embeddings_scaled")])
def test_the_gpt_check_names_a_repeated_block_and_scaled_embeddings(answer, slip, cat):
    assert feedback(checks.gpt_module, answer, cat) == f"on the cat world: {checks.ASSEMBLY_HINTS[slip]}"


@pytest.mark.parametrize("loop, slip", [
    (written_loop(zero_grad="after_backward"), "zero_grad_after_backward"),
    (written_loop(zero_grad="after_backward_zeros"), "zero_grad_after_backward"),
    (written_loop(adam="groups"), "adam_l2"),
    (written_loop(adam="everything"), "adam_l2"),
])
def test_the_loop_check_names_zero_grad_after_backward_and_adams_weight_decay(loop, slip):
    assert feedback(checks.train_loop, loop) == checks.LOOP_HINTS[slip]


def test_the_loop_written_out_right_passes():
    assert feedback(checks.train_loop, written_loop()) == ""


# ------------------------------------------------------------ the shipped model's measures, made cheaper

def test_word_ids_are_the_librarys_tokens_and_the_byte_table_its_alphabet(texts):
    from tokenizers import pre_tokenizers

    assert set(tk.byte_table().values()) == set(pre_tokenizers.ByteLevel.alphabet())
    assert tk.byte_table()[ord(" ")] == "Ġ" and tk.byte_table()[ord("\n")] == "Ċ"
    bpe = tk.train_bpe(texts[0][:30_000], 512)
    words = list(tk.word_counts(texts[0][:30_000] + texts[1][:5_000] + " café\n\n"))
    assert tk.word_ids(bpe, words) == [e.ids for e in bpe.encode_batch(words)]


def test_the_spread_loss_is_the_whole_texts_at_every_1_and_keeps_every_kth_window(texts):
    from helpers.gpt import shipped

    tokenizer = corpus.CharTokenizer()
    ids = tokenizer.encode(texts[1][:3_000])
    model = gc.as_transformer(gc.small_start(gc.GPT(65, 16, 2, 1, 32, 64), seed=0)).train()
    whole = gc.spread_loss(model, ids, context=64, every=1)
    assert whole["loss"] == pytest.approx(shipped.whole_text_loss(model, ids, context=64), abs=1e-5)
    assert (whole["windows"], whole["of"], whole["predictions"]) == (46, 46, 46 * 64) and model.training
    spread = gc.spread_loss(model, ids, context=64, every=8)
    x = ids[:46 * 64].view(46, 64)[::8]
    y = ids[1:46 * 64 + 1].view(46, 64)[::8]
    with torch.no_grad():
        expected = F.cross_entropy(model.eval()(x).flatten(0, 1), y.flatten()).item()
    assert spread["windows"] == 6 and spread["loss"] == pytest.approx(expected, abs=1e-5)
    with pytest.raises(CourseInputError, match="n_max=64"):
        gc.spread_loss(model, ids, context=128)


def test_the_copy_rule_counts_matches_by_hand_and_sets_the_models_top_choice_beside_them(refused):
    model = gc.as_transformer(gc.small_start(gc.GPT(65, 16, 2, 1, 32, 64), seed=0)).train()
    # windows of 9: 0 1 2 0 1 2 0 1 2, next 1 2 0 1 2 0 1 2 0; a period of 3, so a match always copies right
    ids = torch.tensor([0, 1, 2] * 7)
    one, two = gc.copy_rule(model, ids, [1, 2], context=9, every=1)
    assert model.training
    assert one["k"] == 1 and one["matched"] == pytest.approx(12 / 18) and one["rule"] == 1.0   # from t = 3 on
    assert two["k"] == 2 and two["matched"] == pytest.approx(10 / 16) and two["rule"] == 1.0   # pairs from t = 1, repeats from t = 4
    # the model's share: its most probable next token, right or wrong, at the matched positions
    x, y = ids[:18].view(2, 9), ids[1:19].view(2, 9)
    with torch.no_grad():
        right = model.eval()(x).argmax(-1) == y
    assert one["model"] == pytest.approx(right[:, 3:].float().mean().item())
    # a text with nothing repeated in a window: no match, and the rule's share is 0, not 0/0
    (none,) = gc.copy_rule(model, torch.arange(20), [1], context=9)
    assert none["matched"] == 0 and none["rule"] == 0 and none["model"] == 0
    assert one["rescued"] == pytest.approx((~right[:, 3:]).sum().item() / 18)   # the rule right, the model wrong
    # 0 1 0 2 0 1 0 2 0: after a 0 the latest earlier 0 says what comes next, the first one may not
    alternating = torch.tensor([0, 1, 0, 2] * 5)
    (latest,) = gc.copy_rule(model, alternating, [1], context=9, every=1)
    # windows 0 1 0 2 0 1 0 2 0 (next 1 0 2 0 1 0 2 0 1) and 1 0 2 0 1 0 2 0 1 (next 0 2 0 1 0 2 0 1 0): 6 matches
    # each; the latest match is right 2 and 3 times, the first match would be right 4 and 4 times
    assert latest["matched"] == pytest.approx(12 / 18) and latest["rule"] == pytest.approx(5 / 12)
    # every second window of four: the first and the third (the first window's next token repeated at 18,
    # so that the two kept windows, one after the other, are a text of their own)
    text = torch.randint(0, 5, (37,), generator=torch.Generator().manual_seed(0))
    text[18] = text[9]
    assert gc.copy_rule(model, text, [1], context=9, every=2) == gc.copy_rule(model, torch.cat([text[:9], text[18:28]]), [1],
                                                                               context=9, every=1)
    assert gc.copy_rule(model, ids, [np.int64(2)], context=9)[0]["k"] == 2
    refused(lambda: gc.copy_rule(model, ids, [1, 1]), "different", "[1, 1]")
    model.train()
    refused(lambda: gc.copy_rule(model, torch.tensor([70] * 40), [1], context=9), "0..64", "70")
    assert model.training                                                       # a refusal before the pass
    refused(lambda: gc.copy_rule(model, ids, [0]), "lengths", "1 to 32", "[0]")
    refused(lambda: gc.copy_rule(model, ids, 2), "lengths", "2")
    refused(lambda: gc.copy_rule(model, ids, [True]), "lengths", "[True]")
    refused(lambda: gc.copy_rule(model, ids, [1], context=128), "n_max=64")


def second_copy_loss(model, ids, length):
    """The mean loss on the targets a_2..a_L of the second half of ids (n, 2 * length + 1), as chapter 05's
    copy_losses counts them, for any ids (copy_losses refuses ids whose second half does not repeat the first)."""
    with torch.no_grad():
        logits = model(ids)
    losses = torch.nn.functional.cross_entropy(logits[:, :-1].transpose(1, 2), ids[:, 1:], reduction="none")
    return float(losses[:, length + 1:].mean())


def test_the_repeat_test_is_chapter_05s_measures_against_a_control_with_the_same_targets(texts):
    from helpers.heads import compute as heads

    tokenizer = corpus.CharTokenizer()
    ids = tokenizer.encode(texts[1][:5_000])
    repeated, control = gc.text_repeats(ids, 6, 12, seed=0)
    assert repeated.shape == control.shape == (6, 25) and (repeated[:, 0] == 0).all() and (control[:, 0] == 0).all()
    assert torch.equal(repeated[:, 1:13], repeated[:, 13:])                 # the span, repeated
    assert torch.equal(control[:, 13:], repeated[:, 13:])                   # the same targets: the same characters
    windows = ids.unfold(0, 12, 1)
    for rep, con in zip(repeated, control):                                 # both halves are spans of the text
        span = [int(s) for s in torch.nonzero((windows == rep[1:13]).all(1))[:, 0]]
        other = [int(s) for s in torch.nonzero((windows == con[1:13]).all(1))[:, 0]]
        assert span and other and any(abs(o - s) >= 12 for o in other for s in span)   # another place, no overlap
    again, _ = gc.text_repeats(ids, 6, 12, seed=0)
    other_seed, other_control = gc.text_repeats(ids, 6, 12, seed=1)
    assert torch.equal(again, repeated) and torch.equal(gc.text_repeats(ids, 6, 12, seed=0)[1], control)   # seeded
    assert not torch.equal(other_seed, repeated) and not torch.equal(other_control, control)
    tight = gc.text_repeats(ids[:36], 50, 12, seed=0)[1]                   # only 36 tokens: the control still fits
    assert all(not torch.equal(row[1:13], row[13:]) for row in tight)

    model = gc.as_transformer(gc.small_start(gc.GPT(65, 16, 2, 2, 32, 64), seed=0))
    test = gc.repeat_test(model, ids, 6, 12, seed=0)
    losses = heads.copy_losses(model, repeated, 12)
    assert test["first"] == pytest.approx(losses["first"], abs=1e-5)
    assert test["second"] == pytest.approx(losses["second"], abs=1e-5)
    assert second_copy_loss(model, repeated, 12) == pytest.approx(losses["second"], abs=1e-5)   # as chapter 05 counts
    assert test["control"] == pytest.approx(second_copy_loss(model, control, 12), abs=1e-5)   # (no repeat: refused there)
    assert test["second_spans"].shape == test["control_spans"].shape == (6,)
    assert float(test["second_spans"].mean()) == pytest.approx(test["second"], abs=1e-5)
    assert float(test["control_spans"].mean()) == pytest.approx(test["control"], abs=1e-5)
    assert torch.allclose(test["induction"], heads.head_scores(model, repeated, 12)[1], atol=1e-6)
    with pytest.raises(CourseInputError, match="at least 36 tokens"):
        gc.text_repeats(ids[:35], 2, 12, seed=0)
    with pytest.raises(CourseInputError, match="window of 64 tokens \\(at most 31\\)"):
        gc.repeat_test(model, ids, 2, 32, seed=0)
    gc.repeat_test(model, ids, 2, 31, seed=0)                                # 63 tokens fit


def test_the_circuit_lines_name_the_highest_score_and_when_it_came():
    weak = synthetic_log()
    for record in weak["induction"]:
        record["induction_score"][2][1] = 0.05
    weak["induction"][1]["induction_score"][3][2] = 0.08
    history = gc.induction_history(weak)
    lines = gc.circuit_lines(history, gc.circuit_birth(history))
    assert lines[3] == "the highest score of any head at any record: 0.080, L3H2 at step 20"


# ------------------------------------------------------------ after the second outside review

def largest_tied(words):
    counts = collections.Counter(p for w in words for p in zip(w, w[1:]))
    return max(p for p in counts if counts[p] == max(counts.values()))


def in_place(words):
    pair, merged = tk.merge_step(words)
    words[:] = merged                     # writes into the caller's list
    return pair, words


@pytest.mark.parametrize("answer, words", [
    (merge_with(pick=largest_tied), "on a tie you took ('z', 'y')"),
    (in_place, "changed the words it was given in place on "),
    (in_place, "changes the caller's own lists too): build new lists and return those"),
])
def test_the_merge_check_names_the_tie_taken_and_words_changed_in_place(answer, words, texts):
    said = feedback(checks.merge_step, answer, texts[0])
    assert words in said and "/ s" not in said


class WholeTable(gc.GPT):
    def forward(self, ids):
        h = self.E[ids] + self.PE
        for block in self.blocks:
            h = block(h)
        return self.final_ln(h) @ self.E.T


class PlainList(gc.GPT):
    def __init__(self, *args):
        super().__init__(*args)
        blocks = list(self.blocks)
        del self.blocks
        self.blocks = blocks


@pytest.mark.parametrize("answer, words", [
    (WholeTable, "cut it to the window, h0 = E[ids] + PE[:T]"),
    (gpt_with("residual_twice"), "the Block already adds its input back"),
    (PlainList, "(32 names)"),
    (Untied, "its parameters should be named ['E', 'final_ln.bias', 'final_ln.weight', 'blocks.0.*' ... (32 names)]"),
])
def test_the_gpt_check_names_the_whole_table_the_doubled_residual_and_shortens_the_names(answer, words, cat):
    said = feedback(checks.gpt_module, answer, cat)
    assert words in said and "blocks.1.attn" not in said


def test_the_loop_check_names_adams_default_betas_and_a_validation_generator_made_once():
    assert "betas=(0.9, 0.99)" in feedback(checks.train_loop, loop_with("adam_betas"))
    said = feedback(checks.train_loop, loop_with("val_generator_once"))
    assert "fresh torch.Generator().manual_seed(seed + 1) at each evaluation" in said and "until step" not in said


def test_the_loop_check_names_the_validation_steps_that_differ():
    def loop(*args, **kwargs):
        losses, val = gc.train_loop(*args, **kwargs)
        return losses, {s: v + (0.01 if s == 8 else 0.0) for s, v in val.items()}
    assert "val_losses at steps [8] differ from the course's" in feedback(checks.train_loop, loop)


def test_bad_input_is_named_before_any_work_issue_31():
    """red3's chapter-12 findings: each refused with the argument the learner gave, before any work."""
    chars = corpus.CharTokenizer()
    ids = chars.encode(corpus.load_text()[:3000])
    small = gc.GPT(65, 16, 2, 1, 32, 32)
    from helpers.gpt import train as gtrain

    def refused(call, words):
        with pytest.raises(CourseInputError, match=words):
            call()

    refused(lambda: corpus.windows(ids, 10**6, 256, torch.Generator().manual_seed(0)), "GiB")
    refused(lambda: gtrain.estimate_loss(small, ids, 16, batch=10**6), "GiB")
    refused(lambda: gtrain.estimate_loss(None, ids, 16), "estimate_loss expected a model")
    refused(lambda: gtrain.train(small, ids[:2000], ids[2000:], steps=2, batch=2, context=16, clip=0), "clip")
    refused(lambda: gtrain.train(small, ids[:2000], ids[2000:], steps=2, batch=2, context=16, eval_every=0), "eval_every")
    refused(lambda: gc.spread_loss(small, ids[:100], every=0), "every")
    refused(lambda: gc.sample_text(small, chars, "A", 10**6), "n_new")
    refused(lambda: gc.samples_at(small, chars, "A", 5, 0.8), "temperatures should be a list")
    refused(lambda: gc.samples_at(small, chars, "A", 5, [0.5, -1.0]), "but got -1.0")
    refused(lambda: gc.unigram_loss(ids, ids + 1000), "another tokenizer")
    for bad in (torch.tensor([-1, 2]), torch.tensor([70, 2]), torch.tensor([1.5]), torch.tensor([True, False]), [1, 2]):
        refused(lambda: small(bad), "token ids")
    refused(lambda: tk.pretokenize("x" * 3_000_000), "at most 2,000,000 characters")
    refused(lambda: tk.pretokenize("ab\ud800"), "character 2 is a lone surrogate")
    refused(lambda: tk.train_bpe("\ud800", 300), "lone surrogate")
    refused(lambda: tk.smollm2_pieces("a\udfff"), "character 1 is a lone surrogate")
    refused(lambda: tk.pair_counts("abc"), "list of lists of symbols")
    refused(lambda: tk.merge_step({"ab": "x"}), "list of lists of symbols")
    assert gc.unigram_loss(ids[:2000], ids[2000:]) > 0                    # the right call still answers


# ---------------------------------------------------------------- issue 31: train_loop checks every argument first

def _loop_case():
    chars = corpus.CharTokenizer()
    ids = chars.encode(corpus.load_text()[:3000])
    model = gc.GPT(65, 16, 2, 1, 32, 32)
    return model, dict(model=model, train_ids=ids[:2000], val_ids=ids[2000:], steps=2, batch=2, context=16, lr=1e-3,
                       warmup=1, min_lr=1e-4, clip=1.0, eval_every=1, eval_batches=1)


@pytest.mark.parametrize("change, words", [
    (dict(steps=100_001), ["steps", "at most 100,000", "100,001"]),
    (dict(lr=float("inf")), ["lr", "finite"]),
    (dict(lr=0.0), ["lr", "> 0"]),
    (dict(warmup=2), ["warm-up", "warmup=2"]),
    (dict(min_lr=0.01), ["min_lr", "at most 0.001"]),
    (dict(clip=0.0), ["clip", "> 0"]),
    (dict(eval_every=0), ["eval_every", "at least 1"]),
    (dict(eval_batches=1_001), ["eval_batches", "at most 1,000"]),
    (dict(batch=10**6), ["1,000,000 windows", "smaller batch"]),
    (dict(context=33), ["n_max=32", "context=33"]),
    (dict(callback="print"), ["callback", "'print'"]),
    (dict(slip="no_such_slip"), ["slip", "'no_such_slip'"]),
])
def test_train_loop_refuses_each_bad_argument_before_any_step(refused, change, words):
    model, settings = _loop_case()
    before = {name: t.clone() for name, t in model.state_dict().items()}
    refused(lambda: gc.train_loop(**{**settings, **change}), *words)
    assert all(torch.equal(before[name], t) for name, t in model.state_dict().items())


def test_train_loop_takes_the_largest_seed():
    model, settings = _loop_case()
    losses, val_losses = gc.train_loop(**{**settings, "seed": 2**32 - 1})
    assert len(losses) == 2 and sorted(val_losses) == [0, 1, 2]


def test_the_gpt_refuses_a_switch_and_a_batch_too_large(refused):
    model, _ = _loop_case()
    refused(lambda: model(torch.zeros(3, dtype=torch.long), causal=False), "only token ids", "'causal'")
    refused(lambda: model(torch.zeros(10**6, 32, dtype=torch.long)), "1,000,000 sequences of 32 tokens", "at most")


@pytest.mark.parametrize("batches, words", [(-1, ["batches", "at least 1"]), (2**64, ["batches", "at most 1,000"]),
                                            (1_001, ["at most 1,000"])])
def test_evaluate_refuses_a_number_of_batches_it_would_loop_over_wrongly_or_forever(refused, batches, words):
    model, settings = _loop_case()
    refused(lambda: gc.evaluate(model, settings["val_ids"], 16, batches, 2, 0), *words)


def test_assembly_helpers_refuse_a_bad_model_slip_or_ids(cat):
    with pytest.raises(CourseInputError, match="cat should be the cat model"):
        gc.cat_world_case(print)
    ids = torch.tensor([[1, 4, 5]])
    assert gc.slipped_logits(cat, ids, "no_final_norm").shape == (1, 3, 20)
    deep = [1]
    for _ in range(5000):
        deep = [deep]
    for slip in (np.zeros(3), deep, "nope", None):
        with pytest.raises(CourseInputError, match="slip should be one of the 12 names of ASSEMBLY_SLIPS") as error:
            gc.slipped_logits(cat, ids, slip)
        assert len(str(error.value)) < 200 and "\n" not in str(error.value)
    with pytest.raises(CourseInputError, match="cat should be the cat model"):
        gc.slipped_logits(None, ids, "no_final_norm")
    with pytest.raises(CourseInputError, match="fewer than the model's n_max"):
        gc.slipped_logits(cat, torch.ones(1, cat.cfg.n_max, dtype=torch.long), "positions_from_1")


def test_optimizer_for_checks_lr_weight_decay_and_slip(cat):
    assert gc.optimizer_for(cat, 1e-3).param_groups[0]["weight_decay"] == 0.1
    for kwargs, text in ((dict(lr=None), "lr should be a number"), (dict(lr=2**64), "lr should be at most 10"),
                         (dict(lr=0), "lr should be > 0"), (dict(lr=1e-3, weight_decay=None), "weight_decay should be"),
                         (dict(lr=1e-3, weight_decay=-1), "weight_decay should be >= 0"),
                         (dict(lr=1e-3, slip="nope"), "slip should be None or one of")):
        with pytest.raises(CourseInputError, match=text):
            gc.optimizer_for(cat, **kwargs)


def test_sample_text_and_step_seconds_check_their_arguments():
    chars = corpus.CharTokenizer()
    tiny = gc.GPT(65, 16, 2, 1, 32, 32)
    assert gc.sample_text(tiny, chars, "A", 2, temperature=2**64).startswith("A")   # finite: nearly uniform
    assert gc.sample_text(tiny, chars, "\n", 1).startswith("\n")
    with pytest.raises(CourseInputError, match="the prompt should be a string, but got ndarray") as error:
        gc.sample_text(tiny, chars, np.zeros((3, 3)), 2)
    assert "\n" not in str(error.value)
    with pytest.raises(CourseInputError, match="at most 100,000 characters"):
        gc.sample_text(tiny, chars, "x" * (gc.MAX_PROMPT + 1), 2)
    with pytest.raises(CourseInputError, match="context should be at most the model's n_max=32 tokens, but got"):
        gc.sample_text(tiny, chars, "A", 2, context=2**64)
    ids = chars.encode(corpus.load_text()[:500])
    for trials, text in ((None, "trials should be a whole number"), (-1, "trials should be at least 1"),
                         (gc.MAX_TRIALS + 1, "trials should be at most 100")):
        with pytest.raises(CourseInputError, match=text):
            gc.step_seconds(tiny, ids, 2, 16, trials=trials)


def test_the_gpt_check_leaves_the_cat_model_as_it_was_whatever_the_class_does(cat):
    """A right GPT whose forward also zeroes the course's cat model's E (a global in the notebook):
    the check puts it back (red team round 3), so the check's own logits, and the model, are as they were."""
    before = {name: t.clone() for name, t in cat.state_dict().items()}

    class Meddler(gc.GPT):
        def forward(self, *args, **kwargs):
            out = super().forward(*args, **kwargs)
            cat.E.data.zero_()
            return out
    assert feedback(checks.gpt_module, Meddler, cat) == ""
    assert all(torch.equal(t, before[name]) for name, t in cat.state_dict().items())


@pytest.mark.parametrize("train_text", [None, "", "a", "\ud800", 5])
def test_the_merge_check_refuses_a_text_with_nothing_to_merge_before_running_the_learners_code(train_text):
    ran = []
    said = feedback(checks.merge_step, lambda words: ran.append(1) or tk.merge_step(words), train_text)
    assert said.startswith("the check cannot use what the check cell gives it"), said
    assert not ran


# ------------------------------------------------------------ red team round 4

def test_sampling_and_the_live_run_refuse_a_tokenizer_that_is_not_the_model_s(refused):
    """sample_text(model, 'abc', ...) stopped in str.encode ('unknown encoding: A')."""
    chars = corpus.CharTokenizer(corpus.load_text())
    model = Transformer(Config(vocab_size=len(chars), d_model=8, n_heads=2, n_layers=1, d_ff=16, n_max=16), seed=0)
    refused(lambda: gc.sample_text(model, "abc", "A", 5), "CharTokenizer", "str")
    refused(lambda: gc.sample_text(model, corpus.CharTokenizer("abc"), "a", 5), "65 tokens", "3")
    refused(lambda: gc.samples_at(model, "abc", "A", 5, [0.8]), "CharTokenizer")
    refused(lambda: gc.live_run(gc.train_loop, model, None, None, "abc", 8, 8, 1e-3, 1, 1e-4, 1.0, 1, 1), "CharTokenizer")
    refused(lambda: gc.live_run(gc.train_loop, model, None, None, chars, 8, 8, 1e-3, 1, 1e-4, 1.0, 1, 1, prompt="™"), "™")
    assert gc.sample_text(model, chars, "A", 3).startswith("A")


def test_a_char_tokenizer_refuses_a_lone_surrogate(refused):
    refused(lambda: corpus.CharTokenizer("a\ud800b"), "lone surrogate", "character 1")


def test_gpt_module_check_refuses_a_check_cell_without_the_cat_model():
    class GPT(gc.GPT):
        def forward(self, ids):
            return gc.GPT.forward(self, ids)
    said = checks.gpt_module.feedback(GPT, None)
    assert len(said) == 1 and "Transformer" in said[0] and "None" in said[0], said


# ------------------------------------------------------------ red team, round 5

def test_the_loop_check_takes_a_loop_that_evaluates_with_estimate_loss_and_keeps_the_default_dtype():
    """The check wrapped the model in an object estimate_loss refused; a loop that set float64 as
    torch's default left it set and made the cached reference wrong for the rest of the session."""
    assert feedback(checks.train_loop, written_loop(estimate=True)) == ""
    checks._loop_reference.cache_clear()
    torch.set_default_dtype(torch.float64)          # set in an earlier cell: the check still computes in float32
    try:
        assert feedback(checks.train_loop, written_loop(estimate=True)) == ""
        assert torch.get_default_dtype() == torch.float64     # and gives the learner's setting back
    finally:
        torch.set_default_dtype(torch.float32)
    assert feedback(checks.train_loop, written_loop(estimate=True, before=lambda: torch.set_default_dtype(torch.float64))) == ""
    assert torch.get_default_dtype() == torch.float32
    assert feedback(checks.train_loop, written_loop(estimate=True)) == ""


def test_the_loop_check_names_validation_losses_that_are_not_one_number():
    inner = written_loop(estimate=True)
    for value, words in (([], "holds 0 values"), ([1.0, 99.0], "holds 2 values")):
        wrong = lambda *a, value=value, **k: (inner(*a, **k)[0], {s: value for s in inner(*a, **k)[1]})
        assert words in feedback(checks.train_loop, wrong)


def test_model_kept_puts_gradients_and_the_class_back_and_checks_pristine(refused):
    from helpers.exercises import model_kept

    model = Transformer(Config(vocab_size=10, d_model=8, n_heads=2, n_layers=1, d_ff=8, n_max=8), seed=0)
    with model_kept(model):
        model(torch.tensor([1, 2, 3])).sum().backward()
        model.__class__ = nn.Module
    assert all(p.grad is None for p in model.parameters()) and type(model) is Transformer
    refused(lambda: model_kept(model, pristine=5).__enter__(), "pristine should be None or a function", "5")
    kept = model_kept(model, pristine=lambda: {})
    kept.__enter__()
    with torch.no_grad():
        model.E.zero_()
    with pytest.raises(CourseInputError, match="lacks 'E'"):
        kept.__exit__(None, None, None)


def test_small_start_compares_the_parameters_before_it_writes_any(refused):
    class Extra(gc.GPT):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            self.head = nn.Linear(4, 4)

    model = Extra(vocab_size=65, d_model=16, n_heads=4, n_layers=1, d_ff=32, n_max=16)
    before = {name: t.clone() for name, t in model.state_dict().items()}
    refused(lambda: gc.small_start(model), "'head.bias'", "no such parameter")
    assert all(torch.equal(before[name], t) for name, t in model.state_dict().items())


@pytest.fixture(scope="module")
def shakespeare():
    from helpers.gpt import shipped

    return shipped.load_model()


def test_refused_measures_leave_a_training_model_in_training(shakespeare, texts, refused):
    from helpers.gpt import shipped

    chars = corpus.CharTokenizer()
    val = chars.encode(texts[1][:5000])
    shakespeare.train()
    try:
        refused(lambda: shipped.whole_text_loss(shakespeare, val, context=2000), "n_max=256", "2,000")
        refused(lambda: shipped.text_losses(shakespeare, chars, texts[1][:5000], context=2000), "n_max=256")
        refused(lambda: shipped.induction_figures(shakespeare, n=1, length=1000), "at most 127")
        refused(lambda: shipped.induction_figures(shakespeare, n=True), "True")
        refused(lambda: shipped.induction_figures(gc.GPT(65, 16, 4, 1, 32, 16)), "as_transformer")
        assert shakespeare.training
    finally:
        shakespeare.eval()


def test_seeded_samples_and_tests_repeat_on_a_model_left_in_training_mode(shakespeare, texts):
    chars = corpus.CharTokenizer()
    val = chars.encode(texts[1][:20000])
    shakespeare.train()
    try:
        for run in (lambda: gc.samples_at(shakespeare, chars, "ROMEO:", 40, [0.8, 1.2], seed=0),
                    lambda: gc.sample_text(shakespeare, chars, "ROMEO:", 20, seed=0),
                    lambda: gc.repeat_test(shakespeare, val, n=4, length=20, seed=0)["second"],
                    lambda: gc.head_ablations(shakespeare, 2, 20, 1, 2)):
            assert run() == run() and shakespeare.training
    finally:
        shakespeare.eval()


def test_impossible_lengths_are_refused_before_any_pass(shakespeare, texts, refused):
    chars = corpus.CharTokenizer()
    refused(lambda: gc.samples_at(shakespeare, chars, "ROMEO:", 1100, [0.8]), "n_new should be at most 1,018")
    refused(lambda: gc.samples_at(shakespeare, chars, texts[0], 1, [0.8] * 64), "at most 100,000 characters")
    refused(lambda: gc.head_ablations(shakespeare, 2, 200, 1, 2), "at most 127", "401")
    refused(lambda: gc.head_ablations(shakespeare, 2, 20, 1, True), "reference_seed")
    refused(lambda: gc.repeat_test(shakespeare, chars.encode(texts[1]), n=300_000, length=48, seed=0), "GiB")
    refused(lambda: gc.unigram_loss(torch.tensor([0, 50_000_000]), torch.tensor([0, 1])), "50,000,000")
    refused(lambda: gc.copy_rule(shakespeare, chars.encode(texts[0]), list(range(1, 9)), every=1), "at most 3,000,000")
    long = gc.GPT(vocab_size=65, d_model=16, n_heads=4, n_layers=1, d_ff=32, n_max=64)
    assert len(gc.samples_at(long, chars, "ROMEO:", 10, [0.8])[0]) == 16      # a GPT of the learner's samples too


def test_build_checks_its_arguments_before_it_reads_the_text(refused):
    from helpers.gpt import shipped

    for kwargs, words in ((dict(threads=10**6), "at most 256"), (dict(threads=True), "True"), (dict(foo=1), "'foo'"),
                          (dict(callback=print), "'callback'"), (dict(progress=5), "progress should be"),
                          (dict(stop_after=0), "stop_after")):
        refused(lambda kwargs=kwargs: shipped.build(**{"stop_after": 1, "progress": None, **kwargs}), words)


def test_a_training_history_with_bad_records_is_one_sentence(refused):
    history = gc.induction_history(synthetic_log())
    birth = gc.circuit_birth(history)
    broken = dict(history, scores=history["scores"].copy())
    broken["scores"][-1, 0, 0] = np.nan
    refused(lambda: gc.circuit_birth(broken), "NaN")
    refused(lambda: gc.circuit_birth(dict(history, scores=np.zeros((5, 0, 0)))), "(5, 0, 0)")
    bad = dict(induction=[dict(step="a", induction_score=[[1.0]], loss_first_copy=None, loss_second_copy=1)] * 2)
    refused(lambda: gc.induction_history(bad), "whole-number step")
    refused(lambda: gc.induction_history(dict(induction=[1, 2])), "list of dicts")
    refused(lambda: gc.induction_history(dict(induction=[dict(step=0)])), "lacks 'induction_score'")
    for wrong in ({}, None, dict(birth, head=(9, 9))):
        refused(lambda wrong=wrong: gc.circuit_lines(history, wrong), "circuit_birth(history)")
        refused(lambda wrong=wrong: gc.circuit_figure(history, wrong), "circuit_birth(history)")
    refused(lambda: gc.circuit_lines({}, birth), "history should be")


def test_the_character_tokenizer_refuses_bools_and_keeps_its_ids(texts, refused):
    chars = corpus.CharTokenizer()
    ids = chars.encode(texts[1])
    assert ids.tolist() == [chars.ids[ch] for ch in texts[1]] and ids.dtype == torch.long
    assert chars.decode([]) == []
    refused(lambda: chars.decode([True, 1]), "bool")
    refused(lambda: chars.decode([2**70]), "whole numbers")
    refused(lambda: corpus.check_ids(torch.tensor([1j])), "complex64")
    refused(lambda: chars.encode("a" * 2_000_001), "at most 2,000,000")


def test_the_bpe_helpers_take_only_a_bpe_and_a_list_of_sizes(refused):
    from tokenizers import Tokenizer, models

    bpe = tk.train_bpe("a text to learn from, a text to learn", 270)
    word_level = Tokenizer(models.WordLevel({"a": 0, "[UNK]": 1}, unk_token="[UNK]"))
    for call in (lambda: tk.BPETokenizer(word_level), lambda: tk.merges(word_level), lambda: tk.shorter(word_level, 300)):
        refused(call, "trained BPE")
    for sizes in (512, None, range(256, 65536)):
        refused(lambda sizes=sizes: tk.size_table(bpe, sizes, "a", "b"), "sizes should be a list")
    assert [row["size"] for row in tk.size_table(bpe, (256, np.int64(260)), "a text", "to learn")] == [256, 260]


def test_spread_windows_gives_copies_and_checks_lengths(shakespeare, texts, refused):
    val = corpus.CharTokenizer().encode(texts[1])
    x, _, _ = gc.spread_windows(shakespeare, val, 256, 4, [1])
    first = int(val[0])
    x[0, 0] = first + 1
    assert int(val[0]) == first
    for lengths in (5, "ab", [-5], [True]):
        refused(lambda lengths=lengths: gc.spread_windows(shakespeare, val, 256, 4, lengths), "lengths should be")


def test_the_live_run_checks_everything_before_it_trains(texts, refused):
    chars = corpus.CharTokenizer()
    train, val = chars.encode(texts[0][:20000]), chars.encode(texts[1][:5000])
    model = gc.small_start(gc.GPT(vocab_size=65, d_model=16, n_heads=4, n_layers=1, d_ff=32, n_max=64))
    calls = []
    loop = lambda *args: calls.append(args)                            # noqa: E731
    settings = dict(batch=8, context=64, lr=1e-2, warmup=1, min_lr=1e-3, clip=1.0, eval_every=5, eval_batches=1, seconds=5)
    for change, words in ((dict(seed=1.5), "seed"), (dict(eval_every=0), "eval_every"), (dict(eval_batches=10**9), "at most 1,000"),
                          (dict(lr="x"), "lr"), (dict(sample_chars=-5), "sample_chars")):
        refused(lambda change=change: gc.live_run(loop, model, train, val, chars, **{**settings, **change}), words)
    refused(lambda: gc.live_run(None, model, train, val, chars, **settings), "loop should be")
    assert calls == []
    refused(lambda: gc.plan_live_run(model, train, 8, 64, 10, 0, 2, 10), "eval_every")
    refused(lambda: gc.step_seconds(None, train, 8, 64), "nn.Module")
    refused(lambda: gc.LiveRun(10, 5, ln_v="x"), "ln_v")


def test_the_checks_of_chapter_11_judge_odd_answers_and_models():
    from helpers.real import checks as real_checks

    cfg = Config(vocab_size=100, d_model=16, n_heads=2, n_layers=1, d_ff=32, n_max=16)
    assert "the bool True" in "; ".join(real_checks.layer_parameters.feedback(lambda c: True, cfg))
    assert "401 digits" in "; ".join(real_checks.layer_parameters.feedback(lambda c: 10**400, cfg))
    small = Transformer(Config(vocab_size=50, d_model=16, n_heads=2, n_layers=2, d_ff=32, n_max=64), seed=0)
    ids = torch.tensor([0, *range(5, 13), *range(5, 13)])
    said = "; ".join(real_checks.head_scan.feedback(lambda model, ids, length: (None, None), small, ids, 8))
    assert "the check itself failed" not in said and said


def test_the_loop_check_watches_model_forward_and_lets_a_training_loss_estimate_pass(texts):
    """Round 5b: a hook missed model.forward(x); an eval pass on training windows (the course's own
    train() estimates the training loss so) was called a validation slip though val_losses were right."""
    assert feedback(checks.train_loop, written_loop(forward=True)) == ""
    assert "in training mode" in feedback(checks.train_loop, written_loop(forward=True, evaluate="train_mode"))
    assert "with gradients on" in feedback(checks.train_loop, written_loop(forward=True, evaluate="grad"))
    from helpers.gpt.train import estimate_loss

    inner = written_loop(estimate=True)

    def also_training_loss(model, train_ids, val_ids, *args, **kwargs):
        out = inner(model, train_ids, val_ids, *args, **kwargs)
        estimate_loss(model, train_ids, 32, 2, 8, 1)
        return out
    assert feedback(checks.train_loop, also_training_loss) == ""
    model = checks.loop_model()
    with checks.watching_passes(model, checks.loop_data()[1], 32):
        pass
    assert "forward" not in vars(model)


def test_the_live_run_takes_the_loops_losses_as_numbers_or_refuses_them(refused):
    class Run:
        def finish(self, sample):
            pass
    assert gc.loop_result(([torch.tensor(1.0, requires_grad=True)], {np.int64(0): np.float32(2.0)}), Run()) == ([1.0], {0: 2.0})
    for out in (([object()], {}), ("abc", {0: 1.0}), ([None], {}), ([1.0], {0: "x"}), ([1.0], {0: torch.ones(2)}),
                ([1.0], {True: 1.0}), None):
        refused(lambda out=out: gc.loop_result(out, Run()), "loop should return (losses, val_losses)")


def test_eval_mode_gives_every_module_its_own_mode_back(shakespeare):
    chars = corpus.CharTokenizer()
    shakespeare.train()
    shakespeare.blocks[0].eval()
    try:
        gc.sample_text(shakespeare, chars, "A", 3)
        assert shakespeare.training and not shakespeare.blocks[0].training and shakespeare.blocks[1].training
    finally:
        shakespeare.eval()


def test_round_5b_odd_inputs_are_one_sentence(shakespeare, refused, monkeypatch):
    from helpers.gpt import shipped

    chars = corpus.CharTokenizer()
    for ids in (torch.zeros(1, dtype=torch.long).expand(2_000_001), torch.empty(3, dtype=torch.long, device="meta"),
                torch.tensor([0, 1]).to_sparse(), 3, torch.tensor(1)):
        refused(lambda ids=ids: chars.decode(ids), "expected")
    assert chars.decode(np.array([1, 2], dtype=np.uint8)) == [" ", "!"]
    history = gc.induction_history(synthetic_log())
    birth = gc.circuit_birth(history)
    refused(lambda: gc.circuit_lines(history, {**birth, "head": np.array([2, 1])}), "circuit_birth(history)")
    tokenizer = shipped.load_tokenizer()
    assert tk.pieces(tokenizer, " gentleman") == tk.pieces(tokenizer.bpe, " gentleman")
    monkeypatch.setattr(shipped.corpus, "load_text", lambda: pytest.fail("build read the text before refusing"))
    for override, words in ((dict(batch=True), "batch"), (dict(lr=True), "lr"), (dict(context=10**6), "n_max=256")):
        refused(lambda override=override: shipped.build(stop_after=1, progress=None, **override), words)


def test_both_tokenizers_decode_with_one_check(refused):
    """A BPE tokenizer's decode and text take ids by the character tokenizer's rules: at most
    MAX_CHARS of them (checked before any list is made), no bools, one dimension."""
    from helpers.gpt import shipped

    bpe = tk.BPETokenizer(shipped.load_tokenizer().bpe)
    for ids, words in ((torch.zeros(1, dtype=torch.long).expand(tk.MAX_CHARS + 1), "at most"), ([True, 5], "bool"),
                       (torch.ones(2, 2, dtype=torch.long), "(T,)"), ([len(bpe)], f"[0, {len(bpe)})"),
                       (torch.tensor([1.0]), "whole numbers")):
        for call in (bpe.decode, bpe.text):
            refused(lambda call=call, ids=ids: call(ids), words)
    assert bpe.text(bpe.encode("To be, or not")) == "To be, or not" and bpe.decode([]) == []


def test_round_8_counts_that_multiply_work_have_a_stated_limit(refused):
    """Red team round 8: estimate_loss(..., batches=10**9) never returned; text_repeats(ids, 10**9, 4, 0)
    reached the allocator (8 GB)."""
    from helpers.gpt import train as gtrain

    val = corpus.CharTokenizer().encode(corpus.load_text()[:3000])
    m = gc.GPT(65, 16, 2, 1, 32, 16)
    refused(lambda: gtrain.estimate_loss(m, val, 8, batches=10**9), "batches should be at most 1,000")
    refused(lambda: gtrain.train(m, val[:2000], val[2000:], steps=2, batch=2, context=8, eval_batches=10**9),
            "eval_batches should be at most 1,000")
    refused(lambda: gc.text_repeats(torch.randint(0, 65, (5000,)), 10**9, 4, 0), "n should be at most 10,000")
    refused(lambda: gc.text_repeats(torch.zeros(2 * 10**6, dtype=torch.long), 10_000, 6 * 10**5, 0),
            "should need at most 1.5 GiB")


def test_round_9_a_run_stopped_by_an_error_puts_the_model_back(refused):
    """Red team round 9: a callback raising at step 2 left the model half-trained, in training mode, and
    torch's global random state reseeded; lr=1e308 logged val_loss=nan; a .cfg that is a dict gave a raw
    AttributeError."""
    from helpers.gpt import train as gtrain

    chars = corpus.CharTokenizer()
    tr, va = corpus.split(corpus.load_text())
    tids, vids = chars.encode(tr[:20000]), chars.encode(va[:5000])
    model = Transformer(Config(65, 16, 2, 1, 32, 32, dropout=0.1), seed=0).eval()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    rng = torch.get_rng_state()

    def callback(record):
        if record["step"] >= 2:
            raise RuntimeError("the learner's callback stops")
    settings = dict(steps=5, batch=2, context=8, warmup=1, eval_every=100, eval_batches=1)
    refused(lambda: gtrain.train(model, tids, vids, callback=callback, **settings), "RuntimeError",
            "the learner's callback stops", "left as it was")
    assert all(torch.equal(v, before[k]) for k, v in model.state_dict().items())
    assert not model.training and torch.equal(torch.get_rng_state(), rng)
    refused(lambda: gtrain.train(model, tids, vids, lr=1e308, **settings), "lr should be at most 10")

    class Odd(nn.Module):
        cfg = dict(vocab_size=65, n_max=32)
    refused(lambda: gtrain.estimate_loss(Odd(), vids, 8), "vocab_size as a whole number", "dict")
    refused(lambda: gtrain.train(Odd(), tids, vids, **settings), "vocab_size as a whole number")


def test_round_9_sample_text_takes_ids_a_tokenizer_returns_as_a_list(refused):
    """Red team round 9: a tokenizer whose encode returns a list (check_tokenizer accepts it) gave 'list' object
    has no attribute 'tolist'; ids outside the vocabulary are named."""
    chars = corpus.CharTokenizer()

    class ListTokenizer:
        vocab = chars.vocab

        def encode(self, text):
            return [chars.ids[c] for c in text]

        def text(self, ids):
            return "".join(chars.vocab[i] for i in ids)

    class Wrong(ListTokenizer):
        def encode(self, text):
            return [999]
    model = Transformer(Config(65, 16, 2, 1, 32, 32), seed=0)
    assert gc.sample_text(model, ListTokenizer(), "ROMEO:", 3).startswith("ROMEO:")
    refused(lambda: gc.sample_text(model, Wrong(), "ROMEO:", 3), "tokenizer.encode should return token ids", "64")


def test_round_9_sample_text_runs_without_gradients():
    """A decorator slipped onto the function added above it: every step of sample_text built an
    autograd graph (2.6 times slower)."""
    import inspect

    source = inspect.getsource(gc.sample_text)
    assert source.startswith("@torch.no_grad()\ndef sample_text(")
