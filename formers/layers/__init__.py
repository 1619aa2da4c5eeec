"""The textbook parts: attention, feed-forward, positions, blocks, masks, caches."""
