"""helpers: the shared package of the Transformer course.

One module per idea; import what a chapter needs::

    from helpers import reference as ref      # NumPy by-hand functions
    from helpers.model import Config, Transformer
    from helpers import worlds, weights, sampling, plots, checks

``import helpers`` itself loads nothing heavy.
"""
__version__ = "0.1.0"


def setup_notebook(seed=0):
    """What every chapter's first cell does: one thread, 3-decimal printing, seeds, the plot style."""
    import numpy as np
    import torch

    from . import plots

    torch.set_num_threads(1)
    torch.manual_seed(seed)
    np.set_printoptions(precision=3, suppress=True, linewidth=110)
    torch.set_printoptions(precision=3, sci_mode=False, linewidth=110)
    plots.use_style()
