"""Speed and memory benchmarks, and side-by-side training comparisons of presets."""
