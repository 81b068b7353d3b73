"""Chapter 04, masking: the causal mask, why it goes before the softmax, the leak it closes,
why a KV cache needs it, and what a model trained without it does when it has to generate.

compute.py holds the functions (``causal_attention``, the course's own version of the piece the
learner writes here; ``book_attention``, the Book's seeded attention layer, also used by chapter
05); checks.py the exercise checks (``causal_attention`` runs the learner's piece on the cat
model's own queries, keys and values and names the likely mistake); explorer.py the widget: the
cat model's attention maps for a typed prompt, mask on or off.
"""
