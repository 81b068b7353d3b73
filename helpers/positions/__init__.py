"""Chapter 06, positions: attention is blind to word order (Attention(PX) = P·Attention(X)),
and the three ways models give it order: sinusoidal rows, a learned table, rotary turns.

compute.py holds the functions (the order demos, the offset rotation, RoPE scores, the
learned table's untouched rows, the explorer's next-token view); checks.py the exercise
checks; explorer.py the widget.
"""
