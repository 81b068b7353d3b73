"""helpers: the shared package of the Transformer course.

A folder per chapter (``tour``, ``geometry``, ``qkv``, ``scaling``, ``masking``, ``heads``,
``positions``, ``mlp``, ``normalization``, ``sampling``, ``ablation``, ``real``), each with its
``compute``, ``checks`` and ``explorer``, over a shared ground floor (``model``, ``reference``,
``worlds``, ``training``, ``recipes``, ``weights``, ``plots``, ``readout``, ``exercises``,
``explorer``, ``grading``, ``errors``). helpers/README.md maps them. A chapter imports::

    from helpers import reference as ref, plots, worlds
    from helpers.model import Config, Transformer
    from helpers.qkv import compute as qkv, checks, explorer

``import helpers`` itself loads nothing heavy.
"""
__version__ = "0.1.0"


def setup_notebook(seed=0):
    """What every chapter's first cell does: one thread, 3-decimal printing, seeds, the plot style.
    seed: a whole number from 0 to 2**32 - 1 (torch keeps only the low 32 bits of a seed)."""
    import numpy as np
    import torch

    from . import plots
    from .errors import check_seed

    seed = check_seed(seed)   # before anything is set: a refused call changes nothing
    torch.set_num_threads(1)
    torch.manual_seed(seed)
    np.set_printoptions(precision=3, suppress=True, linewidth=110)
    torch.set_printoptions(precision=3, sci_mode=False, linewidth=110)
    plots.use_style()
