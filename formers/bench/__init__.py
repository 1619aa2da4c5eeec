"""Speed and memory benchmarks: training throughput, the long-sequence sweep, decoding against
`transformers`. Side-by-side training comparisons live in `formers.compare`."""
