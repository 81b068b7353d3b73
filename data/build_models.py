"""Rebuild the shipped models: python data/build_models.py [cat] [dragon]

Trains each model from scratch with the recipe in helpers/recipes.py (seeded,
one CPU thread) and writes data/<name>/model.safetensors and model.json, the
JSON holding the config and the model card (recipe, training time, measured
figures). Two runs on one machine give the same weights bit for bit; another CPU path
gives other weights with the same behaviour (data/README.md).
"""
import sys
import platform
from pathlib import Path

import torch

from helpers import recipes, worlds
from helpers.weights import save

HERE = Path(__file__).resolve().parent
REBUILD_NOTE = ("Two trainings with this recipe on one machine give these weights bit for bit. Another CPU, "
                "or another kernel path of the same CPU, rounds some float32 steps differently and gives "
                "other weights; those keep this model's behaviour, with figures near these (one CPU path "
                "has put the cat model's weakest copula type at 0.897, just under the 0.9 target; "
                "tests/test_recipes.py states the tolerances).")


def build_cat():
    model, losses, seconds = recipes.train_cat()
    world = worlds.cat_world()
    figures = worlds.cat_targets(model, world)
    card = dict(recipe=recipes.CAT_TRAINING, final_loss=losses[-1], training_seconds=round(seconds, 2),
                figures=figures, targets_met=worlds.cat_targets_met(figures), parameters=model.parameter_count())
    return model, card


def build_dragon():
    model, losses, seconds = recipes.train_dragon()
    world = worlds.dragon_world(**recipes.DRAGON_CORPUS)
    p = worlds.next_token_probs(model, world, [["<BOS>", "dragon", "drinks"]])[0]
    card = dict(recipe=recipes.DRAGON_TRAINING, corpus=recipes.DRAGON_CORPUS, final_loss=losses[-1],
                training_seconds=round(seconds, 2), parameters=model.parameter_count(),
                p_potion_after_dragon_drinks=float(p[world.tokenizer.ids["potion"]]))
    return model, card


def main(names):
    for name in names or ["cat", "dragon"]:
        model, card = {"cat": build_cat, "dragon": build_dragon}[name]()
        card["built_with"] = dict(torch=torch.__version__, python=platform.python_version(),
                                  machine=platform.machine())
        card["rebuild"] = REBUILD_NOTE
        save(model, HERE / name / "model", card, shipped=True)
        print(name, {k: v for k, v in card.items() if k != "parameters"})


if __name__ == "__main__":
    main(sys.argv[1:])
