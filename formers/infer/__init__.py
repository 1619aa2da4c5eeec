"""Text generation (sampling rules and the autoregressive loop) and translation (greedy and
beam search over batches of sentences).

tokens = formers.infer.generate(model, prompt, 100, temperature=0.8, top_p=0.95, seed=0)
for token in formers.infer.iter_generate(model, prompt, 100):  # (B,) per step
    ...
texts = formers.infer.translate(run.model, run.tokenizer, ["Ein Hund läuft."])  # beam 4
"""

from formers.infer.generate import generate, iter_generate
from formers.infer.sampling import sample_next
from formers.infer.translate import translate

__all__ = ["generate", "iter_generate", "sample_next", "translate"]
