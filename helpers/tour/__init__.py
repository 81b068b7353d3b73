"""Chapter 00, the tour: one forward pass of the trained cat-world model, every step with its shape.

compute.py holds the functions (``prompt_view``: what the explorer draws for one prompt);
checks.py the exercise checks; explorer.py the widget (a prompt, a layer, a head, attention on/off).
"""
