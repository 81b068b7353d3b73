"""Rebuild the induction-head model: python data/build_induction.py

Trains a two-layer attention-only Transformer (helpers.recipes.INDUCTION_CONFIG) on
repeated random tokens with the recipe helpers.recipes.train_induction (seeded, one
CPU thread, data drawn afresh every step) and writes data/induction/model.safetensors
and model.json: the config and a model card with the recipe, the training time and
the figures measured on 200 fresh test sequences (losses on the first and second
copy, previous-token and induction scores of every head).
"""
import platform
from pathlib import Path

import torch

from helpers import recipes, worlds
from helpers.heads import compute as heads
from helpers.weights import save

HERE = Path(__file__).resolve().parent
TEST = dict(n=200, length=8, seed=2024)   # the notebook's test sequences


def measure(model):
    """The figures the model card records, measured on the TEST sequences."""
    ids = worlds.repeated_tokens(TEST["n"], TEST["length"], model.cfg.vocab_size, TEST["seed"])
    previous, induction = heads.head_scores(model, ids, TEST["length"])
    losses = heads.copy_losses(model, ids, TEST["length"])
    return dict(test=TEST, loss_first_copy=losses["first"], loss_second_copy=losses["second"],
                chance=losses["chance"], previous_token_score=previous.tolist(),
                induction_score=induction.tolist())


def build():
    model, losses, seconds = recipes.train_induction()
    card = dict(recipe=recipes.INDUCTION_TRAINING, data=recipes.INDUCTION_DATA,
                training_seconds=round(seconds, 2),
                mean_loss_first_50_steps=sum(losses[:50]) / 50, mean_loss_last_50_steps=sum(losses[-50:]) / 50,
                parameters=model.parameter_count(), figures=measure(model),
                built_with=dict(torch=torch.__version__, python=platform.python_version(),
                                machine=platform.machine()))
    return model, card


if __name__ == "__main__":
    model, card = build()
    save(model, HERE / "induction" / "model", card)
    print({k: v for k, v in card.items() if k != "parameters"})
