"""Pretrained models in: Hugging Face checkpoints as formers models and run folders.

    run = formers.from_pretrained("path/to/gpt2")   # a LoadedRun: run.model, run.tokenizer
    formers import path/to/gpt2 --run-dir runs/gpt2  # the same, as an ordinary run folder

Reading needs no `transformers`: the weights come from safetensors, or from a PyTorch .bin read
with `torch.load(weights_only=True)`, which refuses to rebuild anything but tensors.

source.py     where a model is: a local folder, or a hub id fetched with huggingface_hub
folder.py     a Hugging Face model folder: config.json and the weights (single or sharded)
tokenizer.py  the folder's tokenizer: tokenizer.json, vocab.json + merges.txt, vocab.txt, or
              source.spm + target.spm + vocab.json
family.py     what a family is: its config mapping and its parameter correspondence
gpt2.py       GPT2LMHeadModel -> the decoder LM (one module per family, its diff in its
              docstring)
bert.py       BertForMaskedLM -> the masked-LM encoder
marian.py     MarianMTModel -> the encoder-decoder transformer
longformer.py LongformerForMaskedLM -> the two-sided Longformer encoder, first token global
registry.py   the families, by the `architectures` (or `model_type`) of config.json
importer.py   from_pretrained (in memory) and import_pretrained (a run folder)
"""

from typing import TYPE_CHECKING

from formers.lazy import lazy_exports
from formers.pretrained.errors import PretrainedError

if TYPE_CHECKING:
    from formers.pretrained.importer import from_pretrained, import_pretrained
    from formers.pretrained.registry import FAMILIES

# these need torch: they load on first use, so `formers --help` starts without it
__getattr__ = lazy_exports(
    __name__,
    {
        "FAMILIES": "formers.pretrained.registry",
        "from_pretrained": "formers.pretrained.importer",
        "import_pretrained": "formers.pretrained.importer",
    },
)

__all__ = ["FAMILIES", "PretrainedError", "from_pretrained", "import_pretrained"]
