"""The translation search's defaults, shared by `formers.infer` and the command line's flags.

Outside `formers.infer`, whose package imports torch: the flags are read without it."""

DEFAULT_MAX_LEN_B = 50  # Vaswani et al. §6.1: maximum output length = input length + 50
# §6.1: beam size 4, length penalty α 0.6
DEFAULT_BEAM = 4
DEFAULT_ALPHA = 0.6
# the forms of lp(y): Wu et al.'s, or transformers' |y|^α
PENALTIES: tuple[str, ...] = ("gnmt", "power")
DEFAULT_BATCH_TOKENS = 8192  # sentences × beams × source length per batch
