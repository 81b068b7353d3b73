"""Chapter 08, LayerNorm: one vector normalised by hand, the residual stream's norms, and
where the norm goes (pre-LN, post-LN, none) in a deeper stack trained across depth.

compute.py holds the functions (LayerNorm step by step, the stream's norms, the deep
stack and its training grid, the figures); checks.py the exercise checks; explorer.py the
depth-and-placement explorer over the shipped training curves.
"""
