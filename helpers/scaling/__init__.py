"""Chapter 03, scaling: why attention divides its scores by √d_k, measured: the spread of
random dot products (the Book's table over 100,000 pairs), softmax saturation, and the
size of softmax's gradient as d grows.

compute.py holds the measurements and the chapter's figures; checks.py the exercise
checks; explorer.py the widget (a log slider for d and the √d switch).
"""
