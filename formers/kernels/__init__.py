"""Shared attention arithmetic, below every attention kind: pure functions on tensors.

attention.py  masked scaled dot-product attention: the empty-row rule, the one fused-or-explicit
              decision, mask arithmetic
blocks.py     blocked band attention: blocks of queries against the run of keys around them
cost.py       what one token costs an attention layer (the cost model of `formers bench`)

Nothing here knows a layer, a mask object or a variant.
"""
