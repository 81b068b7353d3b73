"""Chapter 07, the MLP: the per-token block d -> d_ff -> d with GELU, where a layer's
parameters live, and hidden units read as keys and values.

compute.py holds the functions (the NumPy block, the model's own MLP part applied to any
h_mid, parameter counts, activations over the cat-world corpus, the explorer's probe);
checks.py the exercise checks; explorer.py the widget.
"""
