"""One short chapter per paper, each a small diff from the vanilla Transformer in `formers.layers`.

Modules register their parts by config `kind` in `formers.registry`.
"""
