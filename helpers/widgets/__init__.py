"""Widget explorers, one module per chapter.

The compute lives in plain functions that tests call; a widget only wires
sliders to them and redraws one figure in place.
"""
