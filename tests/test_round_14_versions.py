"""Round 14, explorers of a model changed in place (trained further, edited under no_grad): the page
held the pictures it had seen and the kernel never drew them again, so moving back showed the old
model's picture beside the new model's. An explorer now draws each picture again once the weights
change (a picture drawn for a move replaces the page's) and sends none ahead in place of a stale one;
the explorers that computed from the weights when they were made refuse, in one sentence, to draw
for new weights."""
import copy

import torch

from helpers.ablation import explorer as ablation_explorer
from helpers.heads import explorer as heads_explorer
from helpers.mlp import explorer as mlp_explorer
from helpers.tour import explorer as tour_explorer
from helpers.frames import key


def live(ex):
    """The explorer as if a page showed it: its pictures recorded here as (state, prefetch, png)."""
    sent = []
    ex.frames.send = lambda content, buffers=None: sent.append(content) if content["kind"] != "frame" else \
        sent.append((content["state"], content["prefetch"], bytes(buffers[0])))
    ex.hello()
    sent.clear()
    return sent


def frames(sent):
    return [item for item in sent if isinstance(item, tuple)]


def test_a_picture_the_page_holds_is_drawn_again_after_the_model_changes(cat, cat_world):
    model = copy.deepcopy(cat)
    ex = tour_explorer.explorer(model, cat_world)
    sent = live(ex)
    ex.set(layer=1)
    ex.set(layer=0)   # the page holds layer 0's picture (from hello): not drawn again
    assert [state[1][1] for state, _, _ in frames(sent)] == [1]   # (a menu entry: [label, index])
    old = frames(sent)[0][2]
    with torch.no_grad():
        for p in model.blocks[1].parameters():
            p.mul_(1.5)
    ex.set(layer=1)   # held by the page, but of the old weights: drawn again, sent for the move
    state, prefetch, png = frames(sent)[-1]
    assert len(frames(sent)) == 2 and state[1][1] == 1 and prefetch is False and png != old
    assert key(ex.state()) not in ex.stale


def test_nothing_stale_is_sent_ahead(cat, cat_world):
    model = copy.deepcopy(cat)
    ex = heads_explorer.explorer(model, tokenizer=cat_world, prompts=["<BOS> the cat is", "<BOS> the dog sat"])
    sent = live(ex)
    for _ in range(3):
        ex.more()
    held = {key(state) for state, _, _ in frames(sent)}
    assert held
    with torch.no_grad():
        model.E.mul_(1.1)
    sent.clear()
    for _ in range(3):
        ex.more()
    again = {key(state) for state, _, _ in frames(sent)}
    assert not again & held   # the page would keep its old picture of these: drawn when visited instead
    assert held <= ex.stale


def test_explorers_that_computed_from_the_weights_refuse_to_draw_for_new_ones(cat, cat_world):
    for make in (mlp_explorer.explorer, ablation_explorer.explorer):
        model = copy.deepcopy(cat)
        ex = make(model, cat_world)
        first = ex.picture()
        assert first and ex.message.value == ""
        with torch.no_grad():
            model.E.add_(0.01)
        ex.update()
        assert "changed since" in ex.message.value and "run the cell that makes the explorer again" in ex.message.value
