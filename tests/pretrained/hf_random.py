"""What the tiny random checkpoints of hf_<family>.py share: parameters drawn away from their
initial values, and a byte-level BPE tokenizer learned on a text."""

import torch


def randomise(
    model: torch.nn.Module, gains: tuple[str, ...], scale: float, skip: str | None = None
) -> torch.Generator:
    """Every parameter away from its initial value, so no part of a mapping is tested against
    zeros and ones only: those named ending in one of `gains` (LayerNorm gains) around 1, the
    rest (biases too) `scale` times a standard normal; those whose name holds `skip` kept.
    Returns the generator, for a family's further draws."""
    gen = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if skip is not None and skip in name:
                continue
            noise = torch.randn(p.shape, generator=gen, dtype=p.dtype)
            p.copy_(1 + 0.2 * noise if name.endswith(gains) else scale * noise)
    return gen


def train_bpe(folder, text: str, specials: list[str], vocab_size: int) -> None:
    """vocab.json + merges.txt in `folder`: a byte-level BPE learned on `text`, `specials`
    first."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    hf = Tokenizer(models.BPE())
    hf.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    hf.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        special_tokens=specials,
        show_progress=False,
    )
    hf.train_from_iterator([text * 20], trainer=trainer)
    hf.model.save(str(folder))
