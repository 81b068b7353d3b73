"""Chapter 04, masking: the causal mask, why it goes before the softmax, the leak it closes,
and what a model trained without it does when it has to generate.

compute.py holds the functions (``book_attention``, the Book's seeded attention layer, is
also used by chapter 05); checks.py the exercise checks; explorer.py the widget: the cat
model's attention maps for a typed prompt, mask on or off.
"""
