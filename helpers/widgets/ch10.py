"""Chapter 10's explorer: a checkbox per head (and attention off), the live distribution and rule accuracy."""
from .. import plots, worlds


def ablation_view(model, world, prompt, heads_off=(), attention=True):
    """What the explorer shows for one setting of the switches.

    Returns dict(probs (V,) after ``prompt``, in_class: copula types answered in
    class out of all 16, bigram: top-1 on the 432 current-token slots).
    """
    switches = dict(ablate_heads=set(heads_off), attention=attention)
    probs = worlds.next_token_probs(model, world, [prompt.split()], **switches)[0]
    report = worlds.copula_report(model, world, **switches)
    return dict(probs=probs, in_class=sum(r["in_class"] for r in report), types=len(report))


def explorer(model, world, prompts=("<BOS> the cat is", "<BOS> the mat was", "<BOS> the dog sat")):
    """Checkboxes for every head plus an attention-off switch, around one live bar chart."""
    import ipywidgets as widgets
    import matplotlib.pyplot as plt
    from IPython.display import display

    prompt = widgets.Dropdown(options=prompts, description="prompt")
    boxes = {(l, h): widgets.Checkbox(value=False, description=f"remove L{l}H{h}", indent=False)
             for l in range(model.cfg.n_layers) for h in range(model.cfg.n_heads)}
    off = widgets.Checkbox(value=False, description="attention off", indent=False)
    status = widgets.HTML()
    out = widgets.Output()
    fig, ax = plt.subplots(figsize=(7, 2.8))
    plt.close(fig)

    def update(_=None):
        heads = [pair for pair, box in boxes.items() if box.value]
        view = ablation_view(model, world, prompt.value, heads, attention=not off.value)
        ax.clear()
        plots.prob_bars(view["probs"], world.tokenizer.vocab, ax=ax, top=8,
                        highlight=("big", "small", "red", "blue"), title=prompt.value)
        status.value = (f"copula types answered in class: <b>{view['in_class']}/{view['types']}</b>")
        with out:
            out.clear_output(wait=True)
            display(fig)

    for w in [prompt, off, *boxes.values()]:
        w.observe(update, names="value")
    update()
    return widgets.VBox([prompt, widgets.HBox([*boxes.values(), off]), status, out])
