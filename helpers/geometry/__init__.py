"""Chapter 01, geometry: dot products and cosines, meaning as direction in real GloVe
vectors, 2-D maps (PCA, t-SNE, UMAP) and how much of each neighbourhood they keep,
word2vec on the cat world.

* ``compute``: the plain functions the notebook calls and the tests check;
* ``checks``: the chapter's exercise checks;
* ``explorer``: two 2-D vectors to turn and stretch, with their dot product and cosine.
"""
