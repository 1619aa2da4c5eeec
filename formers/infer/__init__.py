"""Text generation: sampling rules and the autoregressive loop.

tokens = formers.infer.generate(model, prompt, 100, temperature=0.8, top_p=0.95, seed=0)
for token in formers.infer.iter_generate(model, prompt, 100):  # (B,) per step
    ...
"""

from formers.infer.generate import generate, iter_generate
from formers.infer.sampling import sample_next

__all__ = ["generate", "iter_generate", "sample_next"]
