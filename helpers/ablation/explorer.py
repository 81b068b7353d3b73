"""Chapter 10's explorer: choose the ablation kind, its reference and the heads; see the live
next-token bars, the class rule's figures on its 8 copula prompts (and, where their reference
applies, the accuracies over the 64 sentence types), and where patching the clean residual
stream restores the answer.

``explorer(model, tokenizer_or_world, prompts=None)``: the cat model with its world shows the cat
view (the reference of mean and resample ablation a switch: the 8 copula prompts, task-matched
for the class rule, by default, or the 64 sentence types; residual patching against the noun swapped);
any other course Transformer with its tokenizer and prompts shows the general view (the
next-token bars under the ablation, and the logit lens, at every residual point and position, of
the token the unablated model predicts there, both live). Every text drawn from a prompt or a token goes
through ``plots.literal``: a "$" is drawn as typed, never as math."""
import numpy as np

from .. import plots
from .. import worlds
from ..errors import fail, items_of, length
from ..errors import shown as shown_value
from ..explorer import Blitter, check_model_and_world, check_unchanged, new_figure, show, weights_version
from ..patching import KINDS, residual_names
from . import compute
from ..states import on_the_cpu

PROMPTS = ("<BOS> the cat is", "<BOS> the mat was", "<BOS> the dog was", "<BOS> the floor is")
ADJECTIVES = ("big", "small", "red", "blue")
REFERENCES = (("the 8 copula prompts", "copula"), ("all 64 sentence types", "all"))   # (label, value), task-matched first


@on_the_cpu
def explorer(model, world, prompts=None):
    """A prompt picker, an ablation-kind picker and a checkbox per head around two panels.

    model: a course Transformer; world: a ``helpers.worlds.World`` or any tokenizer (``vocab``,
    ``encode(text)``, ``decode(ids)``); prompts: the caller's list of prompt strings (their mean
    and their neighbours are the mean and resample references, so give prompts of one task).
    With the cat world: the cat view (default prompts PROMPTS). Otherwise the general view.
    The cat view's mean and resample reference is a switch: the 8 copula prompts (the class
    rule's own prompts, the default) or the 64 sentence types.
    Returns the Explorer (``.controls``: prompt, kind, reference (cat view), one per head; ``.picture()``)."""
    import ipywidgets as widgets

    if prompts is not None and (not isinstance(prompts, (list, tuple)) or not length(prompts)   # (read by the
                                or not all(isinstance(p, str) for p in items_of(prompts))):   # built-ins: a
        fail(f"prompts should be a non-empty list of texts, but got {shown_value(prompts)}")   # subclass's may raise)
    prompts = None if prompts is None else items_of(prompts)   # (each a plain str)
    if not (isinstance(world, worlds.World) and world.name == "cat"):
        return _general(model, world, prompts)
    check_model_and_world(model, world)
    prompts = PROMPTS if prompts is None else prompts
    lab = compute.CatLab(model, world)
    version = weights_version(model)
    made = version()
    for p in prompts:
        if p not in lab.prompts:
            fail(f"the explorer's prompts should have the form '<BOS> the NOUN COPULA', one of the 8 copula prompts "
                 f"{shown_value(lab.prompts)}, but got {p!r:.80}")
    heads = {f"L{l}H{h}": (l, h) for l in range(model.cfg.n_layers) for h in range(model.cfg.n_heads)}
    prompt = widgets.Dropdown(options=prompts, description="prompt")
    kind = widgets.Dropdown(options=KINDS, value="mean", description="ablation")
    reference = widgets.Dropdown(options=REFERENCES, value="copula", description="reference")
    boxes = {name: widgets.Checkbox(value=False, description=f"ablate {name}", indent=False) for name in heads}
    fig, parts = _canvas(model, world, prompts[0])
    blit = Blitter(fig, parts["moving"], parts["seldom"])

    shown, views = {}, {}

    def render(prompt, kind, reference, **chosen):
        check_unchanged(version, made)   # the lab's runs and views came from the weights as they were
        picked = [name for name, on in chosen.items() if on]
        key = (prompt, kind, reference, *picked)
        if key not in views:   # 4 prompts x 3 kinds x 2 references x 16 head sets at most
            views[key] = lab.view(prompt, [heads[name] for name in picked], kind, reference)
        view = views[key]
        _draw(parts, view, prompt, kind, reference, picked)
        if shown.get("prompt") != prompt:   # the patching map follows the prompt only
            _draw_patch(parts, view, prompt)
            shown["prompt"] = prompt
            blit.refresh()
        return blit.png()

    layout = widgets.VBox([widgets.HBox([prompt, kind, reference]), widgets.HBox(list(boxes.values()))])
    return show(dict(prompt=prompt, kind=kind, reference=reference, **boxes), render, layout, version=version)


def _canvas(model, world, prompt):
    """The still figure (axes, ticks, colour bar), its moving artists and the seldom ones
    (the patching map, which follows the prompt only)."""
    vocab = world.tokenizer.vocab
    best, total = worlds.best_possible_accuracy(world.sentences)
    fig = new_figure((11, 3.6))
    bars_ax, grid_ax = fig.add_subplot(1, 2, 1), fig.add_subplot(1, 2, 2)
    fig.subplots_adjust(bottom=0.24, top=0.8, wspace=0.3, left=0.06, right=0.94)
    colors = [plots.ACCENT if w in ADJECTIVES else plots.BASE for w in vocab]
    bars = bars_ax.bar(range(len(vocab)), np.zeros(len(vocab)), color=colors)
    bars_ax.set_xticks(range(len(vocab)), [plots.literal(w) for w in vocab], rotation=60, ha="right", fontsize=7)
    bars_ax.set_ylim(0, 1.5)
    bars_ax.set_yticks([0, 0.25, 0.5, 0.75, 1.0])
    bars_ax.set_ylabel("probability of the next word")
    bars_ax.set_xlabel("next word (red: the four predicate adjectives)")
    values = [bars_ax.text(i, 0, "", ha="center", fontsize=6) for i in range(len(vocab))]
    names = residual_names(model)
    T = len(prompt.split())
    image = grid_ax.imshow(np.zeros((len(names), T)), cmap="RdBu", vmin=-1.6, vmax=1.6, aspect="auto")
    grid_ax.set_yticks(range(len(names)), names)
    grid_ax.set_xticks(range(T), ["<BOS>", "the", "noun", "copula"])
    grid_ax.set_xlabel("position patched")
    fig.colorbar(image, ax=grid_ax, fraction=0.05, label="normalised logit difference")
    cells = [[grid_ax.text(j, i, "", ha="center", va="center", fontsize=7) for j in range(T)]
             for i in range(len(names))]
    moving = dict(
        bars=list(bars), values=values, image=image, cells=cells,
        title=bars_ax.text(0.0, 1.04, "", transform=bars_ax.transAxes, fontsize=10),
        scores=bars_ax.text(0.99, 0.97, "", transform=bars_ax.transAxes, ha="right", va="top", fontsize=8),
        grid_title=grid_ax.text(0.0, 1.05, "", transform=grid_ax.transAxes, fontsize=10))
    artists = [*bars, *values, moving["title"], moving["scores"]]
    seldom = [image, *(c for row in cells for c in row), moving["grid_title"]]
    return fig, dict(moving=artists, seldom=seldom, ceiling=best / total, **moving)


def _draw(parts, view, prompt, kind, reference, picked):
    """Move the moving artists (bars, values, title, scores) to ``view`` (from ``CatLab.view``)."""
    probs, r, s = view["probs"].numpy(), view["rule"], view["scores"]
    for bar, text, p in zip(parts["bars"], parts["values"], probs):
        bar.set_height(p)
        text.set_position((text.get_position()[0], p + 0.02))
        text.set_text(f"{p:.2f}" if p >= 0.01 else "")
    where = "\n(no reference)" if kind == "zero" else ("\nreference: the 8 copula prompts" if reference == "copula"
                                                     else "\nreference: all 64 sentence types")
    parts["title"].set_text(plots.literal(f"after “{prompt}”: {kind} ablation of {', '.join(picked) or 'no head'}{where}"))
    spread = f" ± {r['p_class_spread']:.3f}" if kind == "resample" else ""
    lines = [f"8 copula prompts: p(class) {r['p_class']:.3f}{spread}",
             f"p(adjective) {r['p_adjective']:.3f}, class share {r['class_share']:.3f}"]
    if s is None:
        lines += ["64 sentence types: their accuracies need", "their own reference (choose 'all 64')"]
    else:
        lines += [f"64 types: held-out rule {s['held_out_rule']:.1f}, copula in class {s['copula']:.2f}",
                  f"bigram top-1 {s['bigram']:.3f} (ceiling {parts['ceiling']:.3f})"]
    parts["scores"].set_text("\n".join(lines))


def _draw_patch(parts, view, prompt):
    """Set the patching map, its printed fractions and its title to ``view['patch']`` for ``prompt``."""
    grid = view["patch"].numpy()
    parts["image"].set_data(grid)
    for (i, j), v in np.ndenumerate(grid):
        parts["cells"][i][j].set_text(f"{v + 0:.2f}")
        parts["cells"][i][j].set_color("white" if abs(v) > 1.1 else "black")
    swapped = " ".join(compute.SWAP.get(w, w) for w in prompt.split()[1:])
    parts["grid_title"].set_text(plots.literal(f"patching clean “{' '.join(prompt.split()[1:])}” into “{swapped}”:\n"
                                               "normalised logit difference (0 = swapped noun, 1 = this prompt)"))


def _general(model, tokenizer, prompts):
    """The general view for any Transformer, tokenizer and prompts (see ``explorer``)."""
    import ipywidgets as widgets
    from ..heads.compute import model_and_tokenizer

    model, tokenizer, _ = model_and_tokenizer(model, tokenizer)
    if prompts is None:
        fail("a model of your own needs its prompts, a list of strings of one task such as ['ROMEO:', 'JULIET:'], but got None")
    lab = compute.AnyLab(model, tokenizer, prompts)
    version = weights_version(model)
    made = version()
    heads = {f"L{l}H{h}": (l, h) for l in range(model.cfg.n_layers) for h in range(model.cfg.n_heads)}
    prompt = widgets.Dropdown(options=lab.prompts, description="prompt")
    kind = widgets.Dropdown(options=KINDS, value="mean", description="ablation")
    boxes = {name: widgets.Checkbox(value=False, description=f"ablate {name}", indent=False) for name in heads}
    vocab = [str(v) for v in tokenizer.vocab]
    T_max = max(len(i) for i in lab.ids)
    fig = new_figure((11, 3.6))
    bars_ax, grid_ax = fig.add_subplot(1, 2, 1), fig.add_subplot(1, 2, 2)
    fig.subplots_adjust(bottom=0.24, top=0.8, wspace=0.3, left=0.06, right=0.94)
    shown_k = min(len(vocab), 20)
    bars = bars_ax.bar(range(shown_k), np.zeros(shown_k), color=plots.BASE)
    labels = [bars_ax.text(i, 0, "", ha="center", va="bottom", rotation=90, fontsize=7) for i in range(shown_k)]
    bars_ax.set_xticks([])
    bars_ax.set_ylim(0, 1.4)
    bars_ax.set_yticks([0, 0.25, 0.5, 0.75, 1.0])
    bars_ax.set_ylabel("probability of the next token")
    bars_ax.set_xlabel(f"the {shown_k} most probable next tokens (each bar names its token)")
    image = grid_ax.imshow(np.zeros((len(lab.points), T_max)), cmap="Blues", vmin=0, vmax=1, aspect="auto")
    grid_ax.set_yticks(range(len(lab.points)), lab.points)
    grid_ax.set_xlabel("position")
    fig.colorbar(image, ax=grid_ax, fraction=0.05, label="logit lens: p(the unablated prediction)")
    title = bars_ax.text(0.0, 1.04, "", transform=bars_ax.transAxes, fontsize=10)
    grid_title = grid_ax.text(0.0, 1.05, "", transform=grid_ax.transAxes, fontsize=10)
    blit = Blitter(fig, [*bars, *labels, image, title, grid_title])
    views = {}

    def render(prompt, kind, **chosen):
        check_unchanged(version, made)   # the lab's runs and views came from the weights as they were
        picked = [name for name, on in chosen.items() if on]
        key = (prompt, kind, *picked)
        if key not in views:
            views[key] = lab.view(prompt, [heads[name] for name in picked], kind)
        view = views[key]
        p, top = torch_topk(view["probs"], shown_k)
        for bar, label, q, i in zip(bars, labels, p, top):
            bar.set_height(q)
            label.set_position((label.get_position()[0], q + 0.02))
            label.set_text(plots.literal(f"{repr(vocab[i])[1:-1]} {q:.2f}"))
        T = view["lens"].shape[1]
        grid = np.full((len(lab.points), T_max), np.nan)
        grid[:, :T] = view["lens"].numpy()
        image.set_data(grid)
        title.set_text(plots.literal(f"after “{prompt[-30:]}”: {kind} ablation of {', '.join(picked) or 'no head'}"))
        grid_title.set_text(plots.literal(f"logit lens under the ablation, of the token the unablated\nmodel predicts at "
                                          f"each position (last: {vocab[view['answer']]!r})"))
        return blit.png()

    layout = widgets.VBox([widgets.HBox([prompt, kind]), widgets.HBox(list(boxes.values()))])
    return show(dict(prompt=prompt, kind=kind, **boxes), render, layout, version=version)


def torch_topk(probs, k):
    """(probabilities, ids) of the k most probable tokens, as NumPy arrays."""
    p, i = probs.topk(k)
    return p.numpy(), i.numpy()
