"""Round 18 (issue 31), masking, scaling, positions, reference and errors: positions past what float
arithmetic resolves are refused; the attention-map explorer refuses weights it would have clipped; the
spread histogram drops no score without a word; checks read an answer's shape before they copy it; the
stated memory of a refusal is the measured one."""
import tracemalloc

import numpy as np
import pytest
import torch

from helpers import errors
from helpers import reference as ref
from helpers.masking import checks as masking_checks
from helpers.masking import explorer as masking_explorer
from helpers.positions import checks as positions_checks
from helpers.positions import compute as pos
from helpers.positions import explorer as positions_explorer
from helpers.scaling import compute as scaling
from helpers.scaling import explorer as scaling_explorer


def peak_bytes(call):
    """The peak of what ``call()`` allocates through NumPy and Python (tracemalloc), and what it returned."""
    tracemalloc.start()
    try:
        result = call()
        return tracemalloc.get_traced_memory()[1], result
    finally:
        tracemalloc.stop()


# ---------------------------------------------------------------- 1. positions float arithmetic cannot resolve

def test_offset_rotation_refuses_an_offset_whose_angle_float64_cannot_resolve(refused):
    # 10**20 and 10**20 + 1 are the same float64: the two rotations were the same matrix
    refused(lambda: pos.offset_rotation(10**20 + 1, 2), "k should be at most 562,949,953,421,312", "float64",
            "1e+20")
    refused(lambda: pos.offset_rotation(2**49 + 2**10, 2), "k should be at most")
    assert pos.offset_rotation(2**49, 2).shape == (2, 2)   # the limit itself is taken
    # a base below 1 would make the fastest pair faster than 1 radian a position: refused itself (round 25)
    refused(lambda: pos.offset_rotation(10**6, 4, base=1e-20), "base should be > 1", "1e-20")


def test_rotate_pairs_refuses_positions_whose_angles_float64_cannot_resolve(refused):
    x = np.ones((2, 4))
    refused(lambda: ref.rotate_pairs(x, [0, 1e16]), "each position should be at most", "1e+16")
    refused(lambda: ref.rotate_pairs(x, [0, -1e16]), "each position should be at most")
    near = ref.rotate_pairs(np.ones((1, 2)), [2**40])   # well inside: turned as cos and sin of the position
    assert near[0] == pytest.approx([np.cos(2**40) - np.sin(2**40), np.sin(2**40) + np.cos(2**40)])


def test_float32_positions_are_bounded_where_float32_resolves_their_angles(refused):
    refused(lambda: pos.sinusoidal_positions(2**20 + 2, 2), "the last position, n - 1 should be at most 1,048,576",
            "float32")
    refused(lambda: pos.rotate(torch.zeros(1, 1, 100_000, 2), start=10**6), "start + T - 1 should be at most 1,048,576")
    assert pos.rotate(torch.zeros(1, 1, 4, 2), start=10**6).shape == (1, 1, 4, 2)


# ---------------------------------------------------------------- 2. the attention maps' weights

def maps(weights, p_next=0.5, causal=True):
    """An attention_maps result for two words and a 1 x 1 grid, with the given (2, 2) weights."""
    return dict(words=["<BOS>", "the"], weights=torch.tensor([[weights]], dtype=torch.float32), next="cat",
                p_next=p_next, causal=causal)


def test_maps_view_refuses_weights_it_would_have_clipped(refused):
    draw = masking_explorer.maps_view(1, 1, size=4)
    assert draw(maps([[1.0, 0.0], [0.4, 0.6]]))[:4] == b"\x89PNG"
    refused(lambda: draw(maps([[float("nan"), 0.0], [0.4, 0.6]])), "the maps' weights should hold finite numbers")
    refused(lambda: draw(maps([[1.5, -0.5], [0.4, 0.6]], causal=False)), "should lie from 0 to 1", "2 of 4", "1.5")
    refused(lambda: draw(maps([[0.5, 0.0], [0.4, 0.6]])), "each row of the maps' weights should sum to 1", "0.5")
    refused(lambda: draw(maps([[0.5, 0.5], [0.4, 0.6]])), "0 above the diagonal when causal is True", "0.5")
    refused(lambda: draw(maps([[1.0, 0.0], [0.4, 0.6]], p_next=7.0)), "p_next should be at most 1", "7")


# ---------------------------------------------------------------- 3. the spread histograms drop nothing

def test_spread_figure_bins_hold_every_score():
    fig = scaling.spread_figure([{"d": 4, "scores": [1.0, -500.5, 3.0]}], dims=(4,))
    edges = fig.axes[0].patches[0].get_path().vertices[:, 0]
    assert edges.min() <= -500.5 and edges.max() >= 500.5
    # the default view: d = 768 has scores past 90 (3.2 sigma), which the old -90..90 bins left out
    fig = scaling.spread_figure()
    generator = torch.Generator().manual_seed(123)   # the figure's draws: d = 4, 64, then 768, from one generator
    drawn = [scaling.raw_scores(d, 20_000, generator) for d in (4, 64, 768)][-1]
    edges = fig.axes[2].patches[0].get_path().vertices[:, 0]
    assert np.abs(drawn).max() > 90 and edges.min() <= drawn.min() and edges.max() >= drawn.max()


def test_spread_figure_refuses_scores_its_bins_cannot_span(refused):
    refused(lambda: scaling.spread_figure([{"d": 4, "scores": [1e308]}], dims=(4,)), "at most 1e+300", "1e+308")


def test_the_scaling_explorer_says_how_many_scores_lie_past_its_bins():
    view, draw = scaling_explorer.scaling_view(curve_queries=20)
    result = scaling.explore(64, True)
    result["scores"] = np.array([0.0, 150.0, -3.0, -250.0])
    draw(result)
    assert any("2 of 4 past ±100 not shown" in text.get_text() for text in view.fig.texts)


# ---------------------------------------------------------------- 4. checks read an answer's shape before copying it

def wide_views(q, k, v):
    """A learner's causal_attention returning zero-memory views of the wrong width (150 million numbers each)."""
    B, H, T, _ = q.shape
    width = 150_000_000 // (B * H * T)
    return torch.zeros(1).expand(B, H, T, width), torch.zeros(1).expand(B, H, T, width)


def test_causal_attention_check_names_a_wrong_shape_before_copying_the_answer():
    peak, said = peak_bytes(lambda: masking_checks.causal_attention.feedback(wide_views))
    assert "weights should have shape (1, 2, 7, 7)" in said[0], said
    assert peak < 50 * 2**20, peak   # the old check made 2.1 GiB of copies before this sentence


def test_positions_check_names_a_wrong_shape_before_copying_the_table(cat):
    def table(n, d):
        return torch.zeros(1).expand(n, 20_000_000)
    peak, said = peak_bytes(lambda: positions_checks.sinusoidal_positions.feedback(table, cat))
    assert "should have shape" in said[0], said
    assert peak < 50 * 2**20, peak   # the old check made 1.3 GB of float64 of it first


# ---------------------------------------------------------------- 5. entries lives in errors; check_mask shapes first

def test_entries_is_written_once_in_errors():
    assert ref.entries is errors.entries
    assert errors.entries(torch.zeros(1).expand(1000, 1000)) == 10**6
    assert errors.entries([1.0, 2.0]) == 0


def test_check_mask_checks_the_shape_before_converting(refused):
    mask = np.broadcast_to(np.float32(0), (10_000, 10_000))   # one number standing for 10**8
    peak, _ = peak_bytes(lambda: refused(lambda: errors.check_mask(mask, (3, 3)), "shape the scores end in",
                                         "(10000, 10000)"))
    assert peak < 10 * 2**20, peak   # the old check converted it to 800 MB of float64 first


# ---------------------------------------------------------------- 6. one name per check; a stated figure measured

def test_the_positions_view_check_says_what_it_checks():
    assert hasattr(positions_explorer, "check_positions_view") and not hasattr(positions_explorer, "check_view")


def test_sinusoidal_positions_refusal_states_its_measured_peak(refused):
    refused(lambda: ref.sinusoidal_positions(10**6, 100), "50,000,000 entries", "about 800 MB")
    peak, table = peak_bytes(lambda: ref.sinusoidal_positions(100_000, 20))
    assert 0.9 * ref.SINUSOIDAL_BYTES * table.size <= peak <= 1.1 * ref.SINUSOIDAL_BYTES * table.size
