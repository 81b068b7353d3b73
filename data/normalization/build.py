"""Rebuild curves.json: the deep-stack training curves of chapter 08 (LayerNorm).

    python data/normalization/build.py

Trains the cat-world stack (helpers.normalization.compute.STACK) at every depth and
learning rate of helpers.normalization.compute.GRID with the LayerNorm before the
sub-blocks, after the residual addition, and nowhere: same seed, same steps,
same data. One CPU thread; a few minutes on a 2-core machine.
"""
import json
import time
from pathlib import Path

from helpers.normalization import compute as normalization


def main():
    t0 = time.perf_counter()
    curves = normalization.build_curves()
    path = Path(__file__).resolve().parent / "curves.json"
    path.write_text(json.dumps(curves, separators=(",", ":")) + "\n")
    print(f"wrote {path} ({len(curves['runs'])} runs) in {time.perf_counter() - t0:.0f} s")


if __name__ == "__main__":
    main()
