"""Rebuild the five models chapter 04 trained without the causal mask: python data/no_mask/build.py

Trains the cat model with its shipped recipe (helpers.recipes.CAT_TRAINING) but with the mask
off on every step, for helpers.masking.compute.NO_MASK_STEPS steps from each seed of NO_MASK_SEEDS
(one CPU thread), and writes seed<n>.safetensors and seed<n>.json beside this script; the JSON's
card holds the recipe and the training loss of every step. About 15 s on one core.
"""
import platform
import time
from pathlib import Path

import torch

from helpers import worlds
from helpers.masking.compute import NO_MASK_SEEDS, NO_MASK_STEPS, no_mask_stem, train_without_mask
from helpers.recipes import CAT_TRAINING
from helpers.weights import save

HERE = Path(__file__).resolve().parent


def main():
    world = worlds.cat_world()
    for seed in NO_MASK_SEEDS:
        start = time.perf_counter()
        model, losses = train_without_mask(world, seed=seed, steps=NO_MASK_STEPS)
        card = dict(recipe={**CAT_TRAINING, "seed": seed, "steps": NO_MASK_STEPS, "causal": False},
                    losses=losses, final_loss=losses[-1], training_seconds=round(time.perf_counter() - start, 2),
                    built_with=f"torch {torch.__version__}, {platform.machine()}, "
                               f"{torch.backends.cpu.get_cpu_capability()} kernels")
        save(model, no_mask_stem(seed, HERE), card, shipped=True)
        print(f"seed {seed}: final loss {losses[-1]:.4f} -> {no_mask_stem(seed, HERE)}.*")


if __name__ == "__main__":
    main()
