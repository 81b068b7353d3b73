"""The chapters' learner text teaches; what the source texts say lives in "About the sources" boxes.

Outside the collapsible boxes (<details>), at most about a tenth of a chapter's prose may sit in
paragraphs about the source texts, and no paragraph talks about CPUs, kernels, tolerances or CI:
what may differ on another machine is said once, in the tour and the README.

    python tests/test_prose.py instructor/03_scaling.ipynb ...   # print the shares
"""
import re
import sys
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parents[1]
# A paragraph is about the sources when it names one of them (the course cites them by name), or
# "the source texts" or their author; "the text" alone is too common a phrase to count.
ABOUT_SOURCES = re.compile(r"\b(the (Primer|Lecture|Book)|the source texts?|its author|the author)\b", re.I)
# Process talk: how the course is computed and checked rather than what it teaches.
PROCESS = re.compile(r"\b(CPUs?|vector instructions?|AVX\S*|OpenBLAS|MKL|tolerances?|CI|pytest|"
                     r"this run printed|float path|kernel path)\b")
SOURCE_SHARE = 0.12   # "at most about a tenth"
# The chapters whose text has been rewritten this way (the others still carry their source audits inline).
CHAPTERS = ["00_tour.ipynb", "01_geometry.ipynb", "02_qkv_by_hand.ipynb", "03_scaling.ipynb", "04_masking.ipynb",
            "05_multi_head.ipynb", "06_positions.ipynb", "07_mlp.ipynb", "08_layernorm.ipynb",
            "09_sampling.ipynb", "10_ablation.ipynb", "11_real_model.ipynb", "12_your_gpt.ipynb"]


def main_paragraphs(nb):
    """The markdown paragraphs a learner reads outside the collapsible boxes."""
    for cell in nb.cells:
        if cell.cell_type != "markdown":
            continue
        text = re.sub(r"<details>.*?</details>", "", cell.source, flags=re.S)
        yield from (p for p in re.split(r"\n\s*\n", text) if p.strip())


def shares(path):
    """(words outside the boxes, share in paragraphs about the sources, paragraphs with process talk)."""
    nb = nbformat.read(path, as_version=4)
    words = about = 0
    process = []
    for paragraph in main_paragraphs(nb):
        n = len(paragraph.split())
        words += n
        about += n if ABOUT_SOURCES.search(paragraph) else 0
        if PROCESS.search(paragraph):
            process.append(paragraph)
    return words, about / max(words, 1), process


@pytest.mark.parametrize("name", CHAPTERS)
def test_the_main_text_teaches_and_the_sources_wait_in_their_boxes(name):
    words, share, process = shares(ROOT / "instructor" / name)
    assert share <= SOURCE_SHARE, f"{name}: {share:.0%} of {words} words sit in paragraphs about the source texts"
    if not name.startswith("00"):   # the tour says once what may differ on another machine
        assert not process, f"{name}: process talk in the learner's text: {process[0][:200]!r}"


if __name__ == "__main__":
    for arg in sys.argv[1:]:
        words, share, process = shares(arg)
        print(f"{Path(arg).name}: {words} words outside the boxes, {share:.1%} about the sources, "
              f"{len(process)} paragraphs with process talk")
        for paragraph in process:
            print("   process:", paragraph[:160].replace("\n", " "))
