"""Chapter 10's explorer: choose the ablation kind and the heads; see the live next-token bars,
the rule and collateral accuracies, and where patching the clean residual stream restores the answer."""
import numpy as np

from .. import plots
from ..explorer import new_figure, show
from . import compute

PROMPTS = ("<BOS> the cat is", "<BOS> the mat was", "<BOS> the dog was", "<BOS> the floor is")
ADJECTIVES = ("big", "small", "red", "blue")


def explorer(model, world, prompts=PROMPTS):
    """A prompt picker, an ablation-kind picker and a checkbox per head around two panels.

    Returns the Explorer (``.controls``: prompt, kind, one per head; ``.picture()``)."""
    import ipywidgets as widgets

    lab = compute.CatLab(model, world)
    heads = {f"L{l}H{h}": (l, h) for l in range(model.cfg.n_layers) for h in range(model.cfg.n_heads)}
    prompt = widgets.Dropdown(options=prompts, description="prompt")
    kind = widgets.Dropdown(options=compute.KINDS, value="mean", description="ablation")
    boxes = {name: widgets.Checkbox(value=False, description=f"ablate {name}", indent=False) for name in heads}
    fig = new_figure((10, 3.4))
    bars, grid = fig.add_subplot(1, 2, 1), fig.add_subplot(1, 2, 2)
    fig.subplots_adjust(bottom=0.28, top=0.8, wspace=0.35, left=0.07, right=0.93)
    colorbar = []

    def render(prompt, kind, **chosen):
        picked = [heads[name] for name, on in chosen.items() if on]
        view = lab.view(prompt, picked, kind)
        s = view["scores"]
        bars.clear()
        plots.prob_bars(view["probs"], world.tokenizer.vocab, ax=bars, top=8, highlight=ADJECTIVES,
                        title=f"after “{prompt}”, {kind} ablation of {', '.join(n for n, on in chosen.items() if on) or 'no head'}")
        bars.text(0.99, 0.97, f"held-out rule accuracy {s['held_out_rule']:.1f}\n"
                  f"copula slots in class {s['copula']:.2f}\nbigram slots top-1 {s['bigram']:.3f} "
                  f"(ceiling 0.699)\nred bars: the four predicate adjectives",
                  transform=bars.transAxes, ha="right", va="top", fontsize=8)
        grid.clear()
        image = grid.imshow(view["patch"].numpy(), cmap="RdBu", vmin=-1.5, vmax=1.5, aspect="auto")
        names = compute.residual_names(model)
        grid.set_yticks(range(len(names)), names)
        grid.set_xticks(range(len(prompt.split())), prompt.split())
        grid.set_xlabel("position patched")
        grid.set_title("patching the clean residual stream into the\nnoun-swapped prompt: fraction restored")
        for (i, j), v in np.ndenumerate(view["patch"].numpy()):
            grid.text(j, i, f"{v + 0:.2f}", ha="center", va="center", fontsize=7,
                      color="white" if abs(v) > 1.1 else "black")
        if not colorbar:
            colorbar.append(fig.colorbar(image, ax=grid, fraction=0.05))
        return fig

    layout = widgets.VBox([widgets.HBox([prompt, kind]), widgets.HBox(list(boxes.values()))])
    return show(dict(prompt=prompt, kind=kind, **boxes), render, layout)
