"""How each shipped model is made: its Config, its data and its training run.

``data/*/build.py`` call these, and so do the tests that check a rebuild gives
the shipped weights.
"""
from . import worlds
from .model import Config, Transformer
from .training import timed, train

CAT_CONFIG = Config(vocab_size=20, d_model=6, n_heads=2, n_layers=2, d_ff=8, n_max=16,
                    positions="sinusoidal", norm="pre", activation="gelu")
CAT_TRAINING = dict(steps=1000, lr=3e-2, seed=0)

DRAGON_CONFIG = Config(vocab_size=10, d_model=6, n_heads=2, n_layers=3, d_ff=24, n_max=128,
                       positions="learned", norm="pre", activation="gelu")
DRAGON_TRAINING = dict(steps=400, lr=1e-2, seed=0)
DRAGON_CORPUS = dict(n=500, length=10, seed=0)


def train_cat(progress=True, **overrides):
    """Train the cat-world model from scratch. Returns (model, losses, seconds)."""
    world = worlds.cat_world()
    model = Transformer(CAT_CONFIG)
    settings = {**CAT_TRAINING, **overrides}
    losses, seconds = timed(train, model, world.batch(world.train), progress=progress, **settings)
    return model, losses, seconds


def train_dragon(progress=True, **overrides):
    """Train the dragon-world model from scratch. Returns (model, losses, seconds)."""
    world = worlds.dragon_world(**DRAGON_CORPUS)
    model = Transformer(DRAGON_CONFIG)
    settings = {**DRAGON_TRAINING, **overrides}
    losses, seconds = timed(train, model, world.batch(world.sentences), progress=progress, **settings)
    return model, losses, seconds
