"""formers: the Transformer family for language modeling and translation.

cfg = formers.config("vanilla", n_layers=2, d_model=64, n_heads=4, vocab_size=256)
model = formers.build(cfg)
out = model(tokens)          # out.logits, out.loss, out.aux_loss, out.memory, out.metrics
run = formers.load_run("runs/ts")   # a trained run folder: run.model, run.tokenizer, run.config
run = formers.from_pretrained("path/or/hub-id")   # a Hugging Face checkpoint, the same
"""

from formers.config import AttentionConfig, FFNConfig, ModelConfig
from formers.errors import ConfigError, FormersError, InputError
from formers.models import ModelOutput, build
from formers.presets import PRESETS, config, config_from_dict
from formers.pretrained import from_pretrained
from formers.run import LoadedRun, load_run

__version__ = "0.1.0"

__all__ = [
    "PRESETS",
    "AttentionConfig",
    "ConfigError",
    "FFNConfig",
    "FormersError",
    "InputError",
    "LoadedRun",
    "ModelConfig",
    "ModelOutput",
    "build",
    "config",
    "config_from_dict",
    "from_pretrained",
    "load_run",
]
