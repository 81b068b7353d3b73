"""Chapter 02, queries, keys and values by hand: "the cat sat" with and without W_Q, W_K,
W_V (the Book), the Primer's one-head toy (§5) checked against its printed numbers, and
the Lecture's score row of "it" (§7.3).

compute.py holds the worked examples and one attention head step by step; checks.py the
exercise checks; explorer.py the widget that moves one query against the keys.
"""
