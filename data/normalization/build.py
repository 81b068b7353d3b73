"""Rebuild curves.json and no_residual.json: the deep-stack training curves of chapter 08.

    python data/normalization/build.py                 # both files
    python data/normalization/build.py no_residual     # only no_residual.json

curves.json: the cat-world stack (helpers.normalization.compute.STACK) trained at every
depth and learning rate of helpers.normalization.compute.GRID with the LayerNorm before
the sub-blocks, after the residual addition, and nowhere: same seed, same steps, same data.
no_residual.json: the pre-LN stack with its residual additions taken out, over the same grid.
One CPU thread; 10 to 15 minutes and about 5 minutes on a shared 2-core machine.
"""
import json
import sys
import time
from pathlib import Path

from helpers.normalization import compute as normalization


def write(name, build):
    t0 = time.perf_counter()
    curves = build()
    path = Path(__file__).resolve().parent / name
    path.write_text(json.dumps(curves, separators=(",", ":")) + "\n")
    print(f"wrote {path} ({len(curves['runs'])} runs) in {time.perf_counter() - t0:.0f} s")


def main():
    only = sys.argv[1:]
    if not only or "curves" in only:
        write("curves.json", normalization.build_curves)
    if not only or "no_residual" in only:
        write("no_residual.json", normalization.build_plain_curves)


if __name__ == "__main__":
    main()
