"""Shared attention arithmetic, below every attention kind: pure functions on tensors.

attention.py       masked scaled dot-product attention: the empty-row rule, the one
                   fused-or-explicit decision, mask arithmetic
blocks.py          blocked band attention: blocks of queries against the run of keys around them
                   (and local blocks, a band of whole blocks)
window.py          sliding-window attention with dilation and global keys, on the band kernel
rolling_window.py  the rolling-window decoding step: the keys a causal window can still reach
clusters.py        attention inside clusters, cut into blocks of their members (gathered)
cost.py            what one token costs an attention layer (the cost model of `formers bench`)
sparse.py          the one choice, by device, between the kernels above and their FlexAttention
                   twins on CUDA: flex.py (block masks built once per shape, cached),
                   flex_window.py (window, local blocks), flex_clusters.py, flex_scores.py
                   (a relative bias by offset, a top-k threshold)
record.py          attention weights recorded for a picture (`formers attention-map`)
host_reads.py      whether code may read values back on the host (not in a training step)

Nothing here knows a layer, a mask object or a variant.
"""
