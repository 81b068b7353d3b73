"""Chapter 05, multi-head attention: the learner's MultiHeadAttention module (the course's own
and the check's cases and known slips), split and merge heads, count their parameters and the
memory of their weights, compare our module with PyTorch's, and find trained heads with a
job (previous-token and induction heads) by a score.

compute.py holds the functions (also the measurements the induction model's card records);
checks.py the exercise checks; explorer.py the widget: any model, layer, head and prompt.
"""
