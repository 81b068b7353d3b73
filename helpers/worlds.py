"""The toy languages the course's models are trained on.

* The cat world (the Primer §6): 20 tokens, 64 sentence types, a copula rule.
* The dragon world (the Lecture's running example): 10 tokens, a small fantasy
  grammar in which ``dragon drinks`` is most often followed by ``potion``.
* Repeated random tokens, for induction heads.

A world knows its vocabulary (through a Tokenizer), its sentences, its
train / held-out split and how to score a model on itself. Every model-level measure of
chapters 00-06 runs inside ``model.measuring(model)`` (or the ``model.measure`` decorator): a model
whose weights hold NaN or inf is refused in one sentence, and the measure runs in eval mode.
"""
import itertools
import math
from collections import Counter, defaultdict
from dataclasses import dataclass, field

import numpy as np
import torch

from .errors import CourseInputError, check_ids_given, check_number, check_positive_int, check_seed, check_size, check_tensor, \
    check_text, count, fail, items_of, length, message_of, plain, shown
from .model import SWITCHES, Transformer, check_unknown, measuring
from .states import on_the_cpu

MAX_TOKENS_DRAWN = 10_000_000   # the most tokens dragon_sample and repeated_tokens draw in one call
MAX_SENTENCES = 1_000_000       # the most sentences decisions, entropy_floor and World.batch take in one call
MAX_WORDS = 1_000               # the most words one such sentence may hold (decisions copies each prefix)
MAX_TOTAL_WORDS = 10_000_000    # the most words all the sentences of one call may hold (about 80 MB to copy)
MAX_PREFIX_WORDS = 20_000_000   # the most words decisions may copy into prefixes (about 160 MB)
MAX_PIECE_CHARS = 100          # the most characters one token's text may hold in an explorer's picture
MAX_TOKEN_ID = 2**63 - 1        # torch's largest whole number: the largest vocab_size repeated_tokens can draw from

CAT_VOCAB = ("<PAD> <BOS> <EOS> <SEP> the cat dog mat floor sat ran is was on "
             "big small red blue fast slow").split()
DRAGON_VOCAB = "<BOS> wizard mixes glowing potion dragon drinks fire troll smashes".split()

ANIMALS, SURFACES = ("cat", "dog"), ("mat", "floor")
ANIMAL_ADJ, SURFACE_ADJ = ("big", "small"), ("red", "blue")
COPULAS = ("is", "was")


@on_the_cpu   # (torch.as_tensor inside torch.device("meta") would move the ids there)
def token_ids(ids, V, unknown=""):
    """ids (a number, or one sequence: a list, an array or a tensor of whole numbers) as a list of
    ints, each in [0, V); a batch of sequences is refused."""
    V = check_positive_int(V, "V")
    ids = whole_ids(ids)
    if ids and (min(ids) < 0 or max(ids) >= V):
        fail(f"expected token ids in [0, {V}), but got {min(ids)}..{max(ids)}{unknown}")
    return ids


def whole_ids(ids):
    """ids (a number, or one sequence: a list, an array or a tensor of whole numbers) as a list of
    ints, any whole numbers (their range is the caller's to check); a batch of sequences is refused."""
    check_ids_given(ids, "the token ids", MAX_TOKENS_DRAWN)
    try:
        tensor = torch.as_tensor(ids)
    except (TypeError, ValueError, RuntimeError, RecursionError, OverflowError):
        fail(f"expected token ids as a list or array of whole numbers, but got {shown(ids)}")
    check_tensor(tensor, "the token ids")
    if tensor.dim() > 1:
        fail(f"expected one sequence of token ids (T,), but got shape {tuple(tensor.shape)}: decode each row alone")
    if tensor.numel() == 0:
        return []
    if tensor.dtype not in (torch.int64, torch.int32, torch.int16, torch.int8, torch.uint8):
        fail(f"expected token ids as whole numbers, but got dtype {tensor.dtype} (bools and floats are not ids)")
    if tensor.numel() > MAX_TOKENS_DRAWN:
        fail(f"expected at most {MAX_TOKENS_DRAWN:,} token ids, but got {tensor.numel():,}")
    return tensor.reshape(-1).tolist()


def encoded_fault(given, V):
    """(ids, fault): what a tokenizer's encode gave (``given``) as a list of ints, and what is wrong with it
    as ids from 0 to V - 1 for a sentence ("it gives the id -5", the first outside; "it gives a tensor of
    dtype torch.float32 ...", no whole numbers; None: nothing). ids is None when they are no whole numbers."""
    try:
        ids = whole_ids(given)
    except CourseInputError:
        kind = (f"{shown(given)} of dtype {given.dtype}" if type(given) is torch.Tensor
                else f"{type(given).__name__} {shown(given)}")
        return None, f"it gives {kind}"
    outside = [i for i in ids if not 0 <= i < V]
    return ids, f"it gives the id {count(outside[0])}" if outside else None


def showable(text):
    """Whether ``text`` is a str a picture can show: at most MAX_PIECE_CHARS characters, no lone
    surrogate (half of a character, which no font draws and UTF-8 cannot hold)."""
    if type(text) is not str or len(text) > MAX_PIECE_CHARS:
        return False
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


TOKENIZER_PARTS = ("vocab", "encode", "decode")   # what a tokenizer of a learner's model should have


def tokenizer_part(tokenizer, name):
    """``tokenizer.<name>`` (its vocab, encode or decode), read once: None when it has none; when reading it
    raises (a learner's property may raise anything) one sentence naming the error, never a traceback."""
    try:
        return getattr(tokenizer, name, None)
    except CourseInputError:
        raise
    except Exception as error:   # noqa: BLE001 (a learner's property)
        fail(f"the tokenizer's {name} should be readable, but reading it raised "
             f"{type(error).__name__}: {shown(message_of(error, 200))}")


def tokenizer_vocab(tokenizer, most):
    """The token texts of a tokenizer's ``vocab`` (a learner's is checked: 1 to ``most`` texts a
    picture can show), as a list, else one sentence. Read guarded, as ``tokenizer_part`` reads it (a learner's
    property may raise at any read)."""
    vocab = tokenizer_part(tokenizer, "vocab")
    if not isinstance(vocab, (list, tuple)) or not 0 < len(vocab) <= most \
            or not all(showable(token) for token in vocab):
        fail(f"the tokenizer's vocab should be a list of 1 to {most} token texts (each at most {MAX_PIECE_CHARS} "
             f"characters), but got {shown(vocab)}")
    return list(vocab)


def tokenizer_call(tokenizer, method, argument, shown_argument):
    """``tokenizer.<method>(argument)``: a learner's tokenizer that raises (or has no such method) gets
    one sentence naming its error, never a traceback; the course's own sentences pass through."""
    try:
        return getattr(tokenizer, method)(argument)
    except CourseInputError:
        raise
    except Exception as error:   # noqa: BLE001 (a learner's tokenizer may raise anything)
        tokenizer_raised(error, method, shown_argument)


def tokenizer_raised(error, method, shown_argument):
    """The one sentence for a learner's tokenizer whose ``method`` raised ``error``."""
    fail(f"the tokenizer's {method}({shown_argument}) should give its answer, but raised "
         f"{type(error).__name__}: {shown(message_of(error, 200))}")


@on_the_cpu
def tokenizer_encode(tokenizer, text, V, model_V=None):
    """The ids (T,) LongTensor ``tokenizer.encode(text)`` gives: one sequence of whole numbers in
    [0, V) (a learner's tokenizer is checked), else one sentence naming what it gave (and the
    model's vocabulary, ``model_V``, where the tokenizer's is smaller)."""
    given = tokenizer_call(tokenizer, "encode", text, f"{text!r:.40}")
    ids, fault = encoded_fault(given, V)
    if fault:
        model = f" (the model knows ids 0..{model_V - 1}, a vocabulary of {model_V})" if model_V else ""
        fail(f"the tokenizer's encode({text!r:.40}) should give one sequence of token ids 0..{V - 1}{model} "
             f"as whole numbers, but {fault}: the model and the tokenizer do not belong together")
    return torch.tensor(ids, dtype=torch.long)


@on_the_cpu
def prompt_encode(tokenizer, prompt, V, model_V=None):
    """The ids (T,) of one prompt, as ``tokenizer_encode`` checks them: any text the tokenizer turns
    into at least one token is a prompt (a newline alone is one, a character model's), else one sentence."""
    prompt = check_text(prompt, "the prompt", empty=True)
    ids = tokenizer_encode(tokenizer, prompt, V, model_V)
    if len(ids) == 0:
        fail(f"the prompt should be a non-empty text the tokenizer turns into at least one token, but "
             f"{shown(prompt)} gives none")
    return ids


def tokenizer_decode(tokenizer, ids, text=False):
    """The token texts ``tokenizer.decode(ids)`` gives for ids (T,): one text per id, each a text a
    picture can show (``showable``), as a list; with ``text`` one string of them all is taken too
    (at most MAX_PIECE_CHARS characters an id). Else one sentence naming what it gave."""
    n = len(ids)
    pieces = tokenizer_call(tokenizer, "decode", ids, f"{count(n)} ids")
    if text and type(pieces) is str:
        if len(pieces) <= MAX_PIECE_CHARS * max(n, 1):
            try:
                pieces.encode("utf-8")
                return pieces
            except UnicodeEncodeError:
                pass
    elif isinstance(pieces, (list, tuple)) and len(pieces) == n and all(showable(p) for p in pieces):
        return list(pieces)
    fail(f"the tokenizer's decode should give one text per id ({count(n)} here, each at most {MAX_PIECE_CHARS} "
         f"characters{', or one text of them all' if text else ''}), but gave {shown(pieces)}")


class Tokenizer:
    """Word-level tokenizer: one id per word of a fixed vocabulary."""

    def __init__(self, vocab):
        """vocab: a list (or tuple) of distinct words, each a non-empty text without spaces (``encode``
        splits a sentence at its spaces, so a word holding one could never be encoded)."""
        if not isinstance(vocab, (list, tuple)):
            fail(f"vocab should be a list of distinct words (texts without spaces, such as ['<BOS>', 'the', "
                 f"'cat']), but got {type(vocab).__name__} {shown(vocab)}")
        words = words_of(vocab)
        if not words:
            fail("vocab should be a list of distinct words, but got an empty list")
        words = [check_text(word, f"vocab[{i}]") for i, word in enumerate(words)]   # each a plain str
        for i, word in enumerate(words):
            if word.split() != [word]:
                fail(f"vocab[{i}] should be one word without spaces (encode splits a sentence at its spaces), "
                     f"but got {shown(word)}")
        times = Counter(words)
        repeated = next((word for word, n in times.items() if n > 1), None)
        if repeated is not None:
            fail(f"vocab should hold each word once (a word's id is its place), but {shown(repeated)} appears "
                 f"{times[repeated]} times")
        self.vocab = words
        self.ids = {word: i for i, word in enumerate(self.vocab)}

    def __len__(self):
        return len(self.vocab)

    @on_the_cpu   # (ids made on the CPU inside torch.device("meta") as outside)
    def encode(self, text):
        """'<BOS> the cat' or ['<BOS>', 'the', 'cat'] -> LongTensor of ids (T,)."""
        if isinstance(text, str):
            words = plain(text).split()   # (a subclass's split may raise or lie)
        elif isinstance(text, (list, tuple)) and all(isinstance(word, str) for word in words_of(text)):
            words = words_of(text)
        else:
            fail(f"expected a sentence as text ('<BOS> the cat') or a list of words, "
                 f"but got {type(text).__name__} {shown(text)}")
        if not words:
            fail("expected at least one word, but the text is empty")
        for word in words:
            if word not in self.ids:
                fail(f"expected words of this world's vocabulary, but got {shown(word)}, which is not one of: "
                     + " ".join(self.vocab))
        return torch.tensor([self.ids[w] for w in words], dtype=torch.long)

    def decode(self, ids):
        """ids -> list of words."""
        return [self.vocab[i] for i in token_ids(ids, len(self.vocab))]


words_of = items_of   # a list's words by the built-in's own iterator, each a plain str (the name chapters import)


@dataclass
class World:
    """A toy language: its tokenizer, its sentences and which of them are held out."""

    name: str
    tokenizer: Tokenizer
    sentences: list                      # every sentence type, a list of words each
    held_out: list = field(default_factory=list)

    def __post_init__(self):
        """Every field checked before any is kept, each refused in one sentence: name a non-empty text; tokenizer a
        helpers.worlds.Tokenizer (the course reads its vocab, ids, encode and decode); sentences a non-empty list of
        sentences, held_out a list of them (empty: nothing held out), each a list of words of the tokenizer's
        vocabulary (``check_sentences``). Each World holds its own lists: a learner's edit of one world's held_out
        (or of one of its sentences) changes no other world, and no module constant (CAT_HELD_OUT)."""
        name = check_text(self.name, "the world's name")
        if not isinstance(self.tokenizer, Tokenizer):
            fail(f"the world's tokenizer should be a helpers.worlds.Tokenizer (such as Tokenizer(['<BOS>', 'the', "
                 f"'cat'])), but got {shown(self.tokenizer)}")
        sentences = check_sentences(self.sentences, "the world's sentences")
        if not isinstance(self.held_out, (list, tuple)):
            fail(f"the world's held_out should be a list of sentences (empty for none), each a list of words, but got "
                 f"{shown(self.held_out)}")
        held_out = check_sentences(self.held_out, "the world's held_out") if length(self.held_out) else []
        for what, group in (("sentences", sentences), ("held_out", held_out)):
            check_known_words(self.tokenizer, group,
                              f"the world's {what} should hold words of its tokenizer's vocabulary")
        for field_name, value in (("name", name), ("sentences", sentences), ("held_out", held_out), ("_checked", True)):
            object.__setattr__(self, field_name, value)

    def __setattr__(self, field_name, value):
        """A field set again after the World is made is checked as when it was made (``__post_init__``, with the
        other fields as they are): refused in one sentence, the world unchanged."""
        if vars(self).get("_checked"):
            if field_name == "_checked":
                fail("a World's fields are name, tokenizer, sentences and held_out; _checked is the course's own")
            if field_name in ("name", "tokenizer", "sentences", "held_out"):
                fields = dict(name=self.name, tokenizer=self.tokenizer, sentences=self.sentences,
                              held_out=self.held_out)
                value = getattr(World(**{**fields, field_name: value}), field_name)
        object.__setattr__(self, field_name, value)

    @property
    def train(self):
        """The sentence types the model is trained on."""
        return [s for s in self.sentences if s not in self.held_out]

    def batch(self, sentences):
        """Pad sentences with <PAD> into (B, T) ids; return (inputs, targets) with -100 on pads."""
        sentences = check_sentences(sentences)
        short = [i for i, s in enumerate(sentences) if len(s) < 2]
        if short:   # one word has no next word: its row would predict nothing (a loss of 0/0)
            fail(f"sentences to train on should have at least two words each (a word and the next to predict), "
                 f"but sentence {short[0]} has {len(sentences[short[0]])}: {shown(sentences[short[0]])}")
        pad = self.tokenizer.ids.get("<PAD>", 0)
        T = max(len(s) for s in sentences)
        ids = torch.full((len(sentences), T), pad, dtype=torch.long)
        for row, s in enumerate(sentences):
            ids[row, :len(s)] = self.tokenizer.encode(s)
        targets = ids[:, 1:].clone()
        for row, s in enumerate(sentences):
            targets[row, len(s) - 1:] = -100
        return ids[:, :-1], targets


# ----------------------------------------------------------------- cat world

def check_sentences(sentences, name="sentences", limit=MAX_SENTENCES):
    """A non-empty list (or tuple) of at most ``limit`` sentences, each a list (or tuple) of at most
    MAX_WORDS words (strings), such as world.sentences; return it as a list, every sentence a list."""
    if isinstance(sentences, (str, bytes)) or not isinstance(sentences, (list, tuple)) or not length(sentences):
        fail(f"{name} should be a non-empty list of sentences, each a list of words such as "
             f"['<BOS>', 'the', 'cat', '<EOS>'], but got {shown(sentences)}")
    if length(sentences) > limit:   # (lengths and entries read by the built-ins: a subclass's may lie or raise)
        fail(f"{name} should hold at most {limit:,} sentences, but holds {length(sentences):,}")
    sentences, total = items_of(sentences), 0
    for i, s in enumerate(sentences):   # every size checked before a word is read or copied
        if not isinstance(s, (list, tuple)):
            fail(f"{name} should hold lists of words (strings), but sentence {i} is {shown(s)}")
        if length(s) > MAX_WORDS:
            fail(f"{name} should hold sentences of at most {MAX_WORDS:,} words, but sentence {i} has {length(s):,}")
        total += length(s)
        if total > MAX_TOTAL_WORDS:
            fail(f"{name} should hold at most {MAX_TOTAL_WORDS:,} words in all, but the first {i + 1:,} "
                 f"sentences already hold {total:,}")
    words = [items_of(s) for s in sentences]   # each word a plain str (a subclass's __hash__ or __eq__ may raise)
    for i, s in enumerate(words):
        if not set(map(type, s)) <= {str}:   # (every text is a plain str now: read at C speed)
            fail(f"{name} should hold lists of words (strings), but sentence {i} is {shown(sentences[i])}")
    return words


def check_world(model, world):
    """A course model (a torch module) and a World, before either is read."""
    if not isinstance(model, torch.nn.Module):
        fail(f"model should be a course model (a helpers.model.Transformer), but got {shown(model)}")
    if not isinstance(world, World):
        fail(f"world should be a helpers.worlds.World such as worlds.cat_world(), but got {shown(world)}")
    V = getattr(getattr(model, "cfg", None), "vocab_size", len(world.tokenizer.vocab))
    if V != len(world.tokenizer.vocab):   # the cat model on the dragon world read other words by the same ids
        fail(f"expected a model and a world that belong together, but the model has {V} tokens and the "
             f"{world.name} world {len(world.tokenizer.vocab)}")


def cat_sentences():
    """The 64 sentence types of the cat world, each a list of words from <BOS> to <EOS>."""
    out = []
    for noun in ANIMALS + SURFACES:                     # 16 copula types
        adjs = ANIMAL_ADJ if noun in ANIMALS else SURFACE_ADJ
        for cop, adj in itertools.product(COPULAS, adjs):
            out.append(["<BOS>", "the", noun, cop, adj, "<EOS>"])
    for adj, noun, speed in itertools.product(((),) + tuple((a,) for a in ANIMAL_ADJ),
                                              ANIMALS, ("fast", "slow")):   # 12 ran types
        out.append(["<BOS>", "the", *adj, noun, "ran", speed, "<EOS>"])
    for adj, noun, adj2, surface in itertools.product(
            ((),) + tuple((a,) for a in ANIMAL_ADJ), ANIMALS,
            ((),) + tuple((a,) for a in SURFACE_ADJ), SURFACES):           # 36 sat types
        out.append(["<BOS>", "the", *adj, noun, "sat", "on", "the", *adj2, surface, "<EOS>"])
    return out


CAT_HELD_OUT = tuple(tuple(s.split()) for s in (   # (each cat world gets its own lists of these)
    "<BOS> the cat is small <EOS>",
    "<BOS> the dog was big <EOS>",
    "<BOS> the cat was big <EOS>",
    "<BOS> the mat is blue <EOS>",
    "<BOS> the floor was red <EOS>",
    "<BOS> the small dog ran fast <EOS>",
    "<BOS> the big cat sat on the blue floor <EOS>",
    "<BOS> the dog sat on the red mat <EOS>",
))


def cat_world():
    """The Primer's §6 world: 64 sentence types, 8 held out (5 of them copula types)."""
    return World("cat", Tokenizer(CAT_VOCAB), cat_sentences(), CAT_HELD_OUT)


def adjectives_of(noun):
    """The two predicate adjectives a copula after ``noun`` (cat, dog, mat or floor) allows."""
    if not isinstance(noun, str) or noun not in ANIMALS + SURFACES:
        fail(f"noun should be one of {', '.join(ANIMALS + SURFACES)}, but got {shown(noun)}")
    return ANIMAL_ADJ if noun in ANIMALS else SURFACE_ADJ


def decisions(sentences):
    """Every next-token decision: (prefix words, next word, is_copula_slot)."""
    sentences = check_sentences(sentences)
    copied = sum(len(s) * (len(s) - 1) // 2 for s in sentences)
    if copied > MAX_PREFIX_WORDS:
        fail(f"sentences should need at most {MAX_PREFIX_WORDS:,} words of prefixes (a sentence of n words "
             f"has n(n-1)/2), but need {copied:,}")
    out = []
    for s in sentences:
        for t in range(1, len(s)):
            out.append((tuple(s[:t]), s[t], s[t - 1] in COPULAS))
    return out


def decisions_made(sentences):
    """``decisions(sentences)``, refused in one sentence when there is none (every sentence shorter
    than two words): a 0-of-0 accuracy or a mean over nothing is no answer."""
    found = decisions(sentences)
    if not found:
        fail("sentences should hold at least one sentence of two or more words, but every one is shorter")
    return found


def non_copula_decisions(sentences):
    """The decisions of ``sentences`` whose previous word is not a copula, refused in one sentence when
    there is none."""
    found = [d for d in decisions_made(sentences) if not d[2]]
    if not found:
        fail("sentences should hold at least one next word that does not follow a copula (is or was), "
             "but every one does")
    return found


def entropy_floor(sentences):
    """The lowest mean cross-entropy any model that sees only the past can reach on ``sentences``.

    Each next word is predicted from its prefix alone; the best such prediction is the
    prefix's own next-word frequencies in ``sentences``. Returns the mean of -log p over
    every decision, the same average the training loss takes.
    """
    found = decisions_made(sentences)
    counts = defaultdict(Counter)
    for prefix, nxt, _ in found:
        counts[prefix][nxt] += 1
    return sum(-math.log(counts[p][n] / sum(counts[p].values())) for p, n, _ in found) / len(found)


def best_possible_accuracy(sentences):
    """Top-1 ceiling on the non-copula slots: each prefix's most frequent next word, counted.

    Returns (correct, total): the most decisions any model can get right, and how many there are.
    """
    by_prefix = defaultdict(Counter)
    for prefix, nxt, _ in non_copula_decisions(sentences):
        by_prefix[prefix][nxt] += 1
    correct = sum(max(c.values()) for c in by_prefix.values())
    total = sum(sum(c.values()) for c in by_prefix.values())
    return correct, total


MAX_PROMPTS = 10_000   # the most prompts next_token_probs takes in one call (one pass each)


def check_prompts(model, world, prompts):
    """Every prompt of ``prompts`` encoded by the world's tokenizer, before any pass: a non-empty list
    (or tuple) of at most MAX_PROMPTS prompts, each a list of words or a text of words."""
    check_world(model, world)
    if isinstance(prompts, (str, bytes)) or not isinstance(prompts, (list, tuple)) or not length(prompts):
        fail("prompts should be a non-empty list of prompts, each a list of words such as "
             f"['<BOS>', 'the', 'cat'], but got {shown(prompts)}")
    if length(prompts) > MAX_PROMPTS:   # (read by the built-ins: a subclass's __len__ or __iter__ may lie or raise)
        fail(f"prompts should hold at most {MAX_PROMPTS:,} prompts (one pass each), but holds {length(prompts):,}")
    return [world.tokenizer.encode(p) for p in items_of(prompts)]


LOGIT_SWITCHES = tuple(name for name in SWITCHES if name not in ("trace", "cache"))   # a pass read as logits


def check_logit_switches(model, switches):
    """The switches a pass read as logits passes on to ``model``, checked before any pass: the model's own but
    trace (the pass then returns a dict) and cache (a KVCache would be filled by, and serve, passes that do
    not continue each other, so the figures would come out wrong)."""
    if isinstance(model, Transformer):
        return model.check_switches(switches, LOGIT_SWITCHES)
    check_unknown(set(switches) - set(LOGIT_SWITCHES), LOGIT_SWITCHES, "the model's")
    return switches


def next_token_probs(model, world, prompts, **switches):
    """(N, V) probabilities of the next word after each prompt (a list of N word lists, at most
    MAX_PROMPTS; every prompt is encoded, and so checked, before the first pass), the model in eval
    mode (``measuring``). switches go to the model: some of LOGIT_SWITCHES."""
    encoded = check_prompts(model, world, prompts)
    check_logit_switches(model, switches)
    with measuring(model):
        return _next_probs(model, encoded, switches)


@torch.no_grad()
def _next_probs(model, encoded, switches):
    """(N, V): the next-word distribution after each of N encoded prompts (T,), one pass each."""
    return torch.stack([torch.softmax(model(ids, **switches)[-1], dim=-1) for ids in encoded])


def check_sentence_words(world, sentences):
    """Every sentence of ``sentences`` (already checked by check_sentences) of two or more words, each
    of ``world``'s vocabulary: refused in one sentence naming the sentence and the word."""
    for i, s in enumerate(sentences):
        if len(s) < 2:
            fail(f"sentences should hold sentences of two or more words, but sentence {i} is {shown(s)}")
        check_known_words(world.tokenizer, [s], f"sentences should hold words of the {world.name} world's vocabulary",
                          first=i)
    return sentences


def check_known_words(tokenizer, sentences, should, first=0):
    """Refuse the first word of ``sentences`` (lists of plain str, ``check_sentences``) that ``tokenizer`` (a
    Tokenizer) does not know, in one sentence that starts with ``should`` and names the sentence (counted from
    ``first``) and the word."""
    for i, s in enumerate(sentences, start=first):
        unknown = next((word for word in s if word not in tokenizer.ids), None)
        if unknown is not None:
            fail(f"{should}, but sentence {i} has {shown(unknown)}, which is not one of: " + " ".join(tokenizer.vocab))


def copula_report(model, world, sentences=None, **switches):
    """For each copula type: its sentence and prompt, top-1 word, p(class adjectives), in class or not.

    Two types share each prompt (``the cat is big`` and ``the cat is small``): the
    rule is judged per type, as the seed counts them.
    """
    check_world(model, world)
    check_logit_switches(model, switches)
    sentences = check_sentences(world.sentences if sentences is None else sentences, limit=MAX_PROMPTS)
    check_sentence_words(world, sentences)
    copulas = [s for s in sentences if len(s) > 3 and s[3] in COPULAS]
    encoded = [world.tokenizer.encode(s[:4]) for s in copulas]   # every prompt checked before the first pass,
    for s in copulas:                                              # and every noun before a copula
        adjectives_of(s[2])
    with measuring(model):   # (once for every prompt)
        found = _next_probs(model, encoded, switches) if encoded else []
    rows = []
    for s, probs in zip(copulas, found):
        prompt, noun = s[:4], s[2]
        top = world.tokenizer.vocab[int(probs.argmax())]
        adjs = adjectives_of(noun)
        p_class = float(sum(probs[world.tokenizer.ids[a]] for a in adjs))
        rows.append(dict(sentence=" ".join(s), prompt=" ".join(prompt), top=top, p_class=p_class,
                         in_class=top in adjs, held_out=s in world.held_out))
    return rows


def slot_accuracy(model, world, sentences=None, **switches):
    """Top-1 on the non-copula slots and right class on the copula slots, over ``sentences``.

    Returns dict(bigram_correct, bigram_total, copula_correct, copula_total).
    """
    check_world(model, world)
    check_logit_switches(model, switches)
    sentences = check_sentences(world.sentences if sentences is None else sentences, limit=MAX_PROMPTS)
    check_sentence_words(world, sentences)
    for s in sentences:   # every sentence encoded, and so checked, before the first pass
        world.tokenizer.encode(s[:-1])
        for t in range(1, len(s)):
            if s[t - 1] in COPULAS:
                adjectives_of(s[t - 2])
    out = dict(bigram_correct=0, bigram_total=0, copula_correct=0, copula_total=0)
    with measuring(model), torch.no_grad():
        for s in sentences:
            logits = model(world.tokenizer.encode(s[:-1]), **switches)
            top = [world.tokenizer.vocab[i] for i in logits.argmax(dim=-1).tolist()]
            for t in range(1, len(s)):
                guess = top[t - 1]
                if s[t - 1] in COPULAS:
                    out["copula_total"] += 1
                    out["copula_correct"] += guess in adjectives_of(s[t - 2])
                else:
                    out["bigram_total"] += 1
                    out["bigram_correct"] += guess == s[t]
    return out


def rule_accuracy(model, world, sentences=None, **switches):
    """Fraction of copula slots in ``sentences`` (default: held out) whose top-1 is in class."""
    check_world(model, world)
    check_logit_switches(model, switches)
    rows = copula_report(model, world, world.held_out if sentences is None else sentences, **switches)
    if not rows:
        fail("sentences should hold at least one copula sentence (such as '<BOS> the cat is big <EOS>'), "
             "but none has a copula after its noun")
    return sum(r["in_class"] for r in rows) / len(rows)


def cat_targets(model, world):
    """Every figure the course promises for a trained cat model, measured."""
    check_world(model, world)
    p_on = float(next_token_probs(model, world, [["<BOS>", "the", "cat", "sat"]])[0][world.tokenizer.ids["on"]])
    copula = copula_report(model, world)
    slots = slot_accuracy(model, world)
    best, total = best_possible_accuracy(world.sentences)
    return dict(
        p_on=p_on,
        copula_in_class=sum(r["in_class"] for r in copula), copula_types=len(copula),
        copula_min_p_class=min(r["p_class"] for r in copula),
        bigram_accuracy=slots["bigram_correct"] / slots["bigram_total"],
        bigram_ceiling=best / total,
        held_out_rule_accuracy=rule_accuracy(model, world),
    )


TARGET_FIGURES = ("p_on", "copula_in_class", "copula_types", "copula_min_p_class", "bigram_accuracy",
                  "bigram_ceiling")   # the figures of cat_targets that cat_targets_met reads


def cat_targets_met(m):
    """True when the measured figures ``m`` (cat_targets' dict; each figure read a finite number) meet the
    course's targets: p(on) >= 0.99, every copula type in class (p(class) >= 0.9), top-1 on the bigram
    slots within 0.02 of the ceiling."""
    if not isinstance(m, dict) or not set(TARGET_FIGURES) <= set(m):
        fail(f"m should be what cat_targets returns (a dict with {', '.join(TARGET_FIGURES)}), but got {shown(m)}")
    p_on, in_class, types, min_p_class, accuracy, ceiling = (check_number(m[key], f"the figure {key}")
                                                              for key in TARGET_FIGURES)
    return (p_on >= 0.99 and in_class == types and min_p_class >= 0.9 and accuracy >= ceiling - 0.02)


# -------------------------------------------------------------- dragon world

DRAGON_SUBJECTS = {"wizard": 0.40, "dragon": 0.35, "troll": 0.25}
DRAGON_VERBS = {                       # what each subject does
    "wizard": {"mixes": 0.70, "drinks": 0.20, "smashes": 0.10},
    "dragon": {"drinks": 0.60, "smashes": 0.25, "mixes": 0.15},
    "troll": {"smashes": 0.65, "drinks": 0.35},
}
DRAGON_OBJECTS = {                     # what follows "<subject> <verb>"
    ("dragon", "drinks"): {"potion": 0.62, "glowing": 0.18, "fire": 0.12, "wizard": 0.05, "troll": 0.03},
    ("wizard", "drinks"): {"glowing": 0.50, "potion": 0.40, "fire": 0.10},
    ("troll", "drinks"): {"fire": 0.55, "potion": 0.30, "glowing": 0.15},
    ("wizard", "mixes"): {"glowing": 0.50, "potion": 0.40, "fire": 0.10},
    ("dragon", "mixes"): {"fire": 0.60, "potion": 0.25, "glowing": 0.15},
    ("wizard", "smashes"): {"troll": 0.60, "dragon": 0.40},
    ("dragon", "smashes"): {"troll": 0.50, "wizard": 0.30, "fire": 0.20},
    ("troll", "smashes"): {"wizard": 0.45, "dragon": 0.30, "potion": 0.25},
}
DRAGON_AFTER_GLOWING = {"potion": 0.6, "fire": 0.4}


def dragon_next(words):
    """The true next-word distribution of the dragon grammar after ``words`` (a dict): a list of at most
    MAX_WORDS (1,000) words from <BOS>, each one the grammar allows after the words before it.

    A clause is subject verb object, where the object may be "glowing potion" or
    "glowing fire"; an object that is a creature acts next, after potion or fire
    a fresh subject starts the next clause.
    """
    if isinstance(words, (list, tuple)) and length(words) > MAX_WORDS:   # counted before a word is read
        fail(f"a dragon-world prompt should hold at most {MAX_WORDS:,} words, but got {length(words):,}")
    if not isinstance(words, (list, tuple)) or not all(isinstance(w, str) and w in DRAGON_VOCAB for w in items_of(words)):
        fail(f"expected a list of dragon-world words ({' '.join(DRAGON_VOCAB)}), but got {shown(words)}")
    words = items_of(words)   # (each a plain str: a subclass's __eq__ or __hash__ may raise)
    if not words or words[0] != "<BOS>":
        fail(f"a dragon-world prompt should start with <BOS>, but got {shown(words[:1])}")
    for t in range(1, len(words)):   # every word one the grammar allows after the words before it
        allowed = _dragon_after(words[max(0, t - 2):t])   # the last two words decide: no copy of the whole prefix
        if words[t] not in allowed:
            fail(f"expected a prompt the dragon grammar can make, but {words[t]!r} cannot follow "
                 f"{' '.join(words[max(0, t - 2):t])!r} (only {', '.join(allowed)} can)")
    return _dragon_after(words)


def _dragon_after(words):
    """dragon_next's distribution after ``words``, a prefix the grammar makes (each word checked
    against the words before it), or its last two words: the last word or two decide it."""
    last = words[-1]
    if last == "<BOS>" or last in ("potion", "fire"):
        return dict(DRAGON_SUBJECTS)
    if last == "glowing":
        return dict(DRAGON_AFTER_GLOWING)
    if last in DRAGON_VERBS:
        return dict(DRAGON_VERBS[last])
    subject = words[-2]                # last is a verb; the word before it acts
    return dict(DRAGON_OBJECTS[(subject, last)])


def dragon_sample(n, length, seed):
    """n seeded sequences of ``length`` words drawn from the dragon grammar (lists of words)."""
    n, length = check_positive_int(n, "n"), check_positive_int(length, "length", minimum=2)
    check_drawn(n * length)
    rng = np.random.default_rng(check_seed(seed))
    tables = {}    # the last two words -> (next words, their cumulative probabilities)
    out = []
    for _ in range(n):
        words = ["<BOS>"]
        while len(words) < length:
            key = tuple(words[-2:])       # the grammar looks no further back
            if key not in tables:
                dist = _dragon_after(key)   # the words drawn so far are the grammar's own, of any length
                cdf = (np.array(list(dist.values())) / sum(dist.values())).cumsum()
                tables[key] = list(dist), cdf / cdf[-1]
            # the draw rng.choice(list(dist), p=...) makes, without its per-call checks:
            # one uniform number, placed in the cumulative probabilities
            choices, cdf = tables[key]
            words.append(choices[int(cdf.searchsorted(rng.random(), side="right"))])
        out.append(words)
    return out


def check_drawn(count):
    """Refuse a request for more than MAX_TOKENS_DRAWN tokens before drawing any."""
    if count > MAX_TOKENS_DRAWN:
        fail(f"expected at most {MAX_TOKENS_DRAWN:,} tokens in all, but n and length ask for {shown(count)}")


def dragon_world(n=2000, length=12, seed=0):
    """The Lecture's running example as a sampled corpus of n sentences (at most MAX_SENTENCES, counted before
    any is drawn), no held-out types."""
    check_size(n, "n", MAX_SENTENCES)
    return World("dragon", Tokenizer(DRAGON_VOCAB), dragon_sample(n, length, seed))


# ------------------------------------------------------ repeated random tokens

@on_the_cpu
def repeated_tokens(n, length, vocab_size, seed):
    """(n, 2*length + 1) ids: token 0 (BOS), then ``length`` random tokens, then the same again.

    Tokens are drawn from 1..vocab_size-1 with a seeded generator.
    """
    n, length = check_positive_int(n, "n"), check_positive_int(length, "length")
    vocab_size = check_positive_int(vocab_size, "vocab_size", minimum=2)
    if vocab_size > MAX_TOKEN_ID:
        fail(f"vocab_size should be at most 2**63 - 1 (torch's largest token id), but got {shown(vocab_size)}")
    check_drawn(n * (2 * length + 1))
    g = torch.Generator().manual_seed(check_seed(seed))
    half = torch.randint(1, vocab_size, (n, length), generator=g)
    bos = torch.zeros(n, 1, dtype=torch.long)
    return torch.cat([bos, half, half], dim=1)


# ------------------------------------------------------- the induction task's tokens

INDUCTION_SYMBOLS = tuple("abcdefghijklmnopqrstuvwxyz0123456789")
INDUCTION_VOCAB_SIZE = 16   # <BOS> and 15 symbols
INDUCTION_N_MAX = 25        # the longest sequence the induction model has positions for


def induction_vocab(vocab_size):
    """Display names of the induction model's tokens: <BOS>, then a..z, 0..9 (vocab_size 1 to 37)."""
    vocab_size = check_positive_int(vocab_size, "vocab_size")
    if vocab_size > len(INDUCTION_SYMBOLS) + 1:
        fail(f"vocab_size should be at most {len(INDUCTION_SYMBOLS) + 1} (<BOS> and the symbols a..z, 0..9 "
             f"have names), but got {shown(vocab_size)}")
    return ("<BOS>",) + INDUCTION_SYMBOLS[:vocab_size - 1]


@on_the_cpu
def induction_labels(ids):
    """Token ids (T,) of the induction model -> their display names."""
    names = induction_vocab(len(INDUCTION_SYMBOLS) + 1)
    return [names[i] for i in token_ids(ids, len(names), unknown=", and those outside have no name")]


@on_the_cpu
def induction_prompt(length, seed, vocab_size=INDUCTION_VOCAB_SIZE, n_max=INDUCTION_N_MAX):
    """One sequence (2*length + 1,) of the induction task: <BOS>, ``length`` random tokens, the same again."""
    length, n_max = check_positive_int(length, "length"), check_positive_int(n_max, "n_max", minimum=3)
    if 2 * length + 1 > n_max:
        fail(f"length should be at most {(n_max - 1) // 2}, as the induction model has positions for "
             f"n_max={n_max} tokens, but got {shown(length)}")
    return repeated_tokens(1, length, vocab_size, seed)[0]
