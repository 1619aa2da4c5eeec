"""formers: the Transformer family for language modeling and translation.

cfg = formers.config("vanilla", n_layers=2, d_model=64, n_heads=4, vocab_size=256)
model = formers.build(cfg)
out = model(tokens)          # out.logits, out.loss, out.aux_loss, out.memory, out.metrics
run = formers.load_run("runs/ts")   # a trained run folder: run.model, run.tokenizer, run.config
run = formers.from_pretrained("path/or/hub-id")   # a Hugging Face checkpoint, the same
"""

from typing import TYPE_CHECKING

from formers.config import AttentionConfig, FFNConfig, ModelConfig
from formers.errors import ConfigError, FormersError, InputError
from formers.lazy import lazy_exports
from formers.presets import PRESETS, config, config_from_dict

if TYPE_CHECKING:
    from formers.models import ModelOutput, build
    from formers.pretrained import from_pretrained
    from formers.run import LoadedRun, load_run

__version__ = "0.1.0"

# what builds or loads a model needs torch: it loads on first use, so the commands that only
# read configs (`formers presets`, `formers config`, `--help`) start without it
__getattr__ = lazy_exports(
    __name__,
    {
        "ModelOutput": "formers.models",
        "build": "formers.models",
        "from_pretrained": "formers.pretrained",
        "LoadedRun": "formers.run",
        "load_run": "formers.run",
    },
)

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
