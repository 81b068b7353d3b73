"""Chapter 09, sampling: temperature, top-k, top-p, the autoregressive loop and the KV cache.

compute.py holds the functions (``generate`` is also used by chapter 04); checks.py the
exercise checks; explorer.py the widget.
"""
