"""Chapter 10, ablation and patching: switch attention off (one intervention written three ways),
ablate heads by zero, mean or resample, patch clean activations into corrupted runs, and read the
residual stream with the logit lens and direct logit attribution.

compute.py holds the functions (they use the model's ``replace=`` switch); checks.py the exercise
checks; explorer.py the widget (ablation kind, heads, live scores, a patching view).
"""
