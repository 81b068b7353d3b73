"""Rebuild the induction-head model: python data/build_induction.py

Trains a two-layer attention-only Transformer (helpers.recipes.INDUCTION_CONFIG) on
repeated random tokens with the recipe helpers.recipes.train_induction (seeded, one
CPU thread, data drawn afresh every step) and writes data/induction/model.safetensors
and model.json: the config and a model card with the recipe, the training time, the
figures measured on 200 fresh test sequences (losses on the first and second copy,
previous-token and induction scores of every head), the targets any retrained model
must meet and how far its figures may stray from these (another CPU trains other
weights: see data/induction/README.md).
"""
import platform
from pathlib import Path

import torch

from helpers import recipes
from helpers.heads import compute as heads
from helpers.weights import save

HERE = Path(__file__).resolve().parent

# What the chapter relies on; helpers.heads.compute.card_problems explains each name.
TARGETS = dict(at_least=dict(previous_token_layer0=0.3, induction_layer1=0.8, first_copy_vs_chance=0.9),
               at_most=dict(induction_layer0=0.1, second_copy_vs_first=1 / 3))
# How far a retrained model's figures may lie from the card's. A retrain on another CPU path
# trains other weights; measured on two paths (AVX2 and generic kernels): every head's scores
# within 0.055 of the card's, the copy losses within 0.01, the last-50-steps loss within 0.005.
# The tolerances leave about three times that room.
TOLERANCES = dict(previous_token_score=0.15, induction_score=0.1, loss_first_copy=0.1, loss_second_copy=0.05,
                  mean_loss_last_50_steps=0.05)


def build():
    model, losses, seconds = recipes.train_induction()
    card = dict(recipe=recipes.INDUCTION_TRAINING, data=recipes.INDUCTION_DATA,
                training_seconds=round(seconds, 2),
                mean_loss_first_50_steps=sum(losses[:50]) / 50, mean_loss_last_50_steps=sum(losses[-50:]) / 50,
                parameters=model.parameter_count(), figures=heads.induction_figures(model),
                targets=TARGETS, tolerances=TOLERANCES,
                built_with=dict(torch=torch.__version__, python=platform.python_version(),
                                machine=platform.machine()))
    return model, card


if __name__ == "__main__":
    model, card = build()
    save(model, HERE / "induction" / "model", card, shipped=True)
    print({k: v for k, v in card.items() if k != "parameters"})
