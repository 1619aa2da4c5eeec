"""The `formers` subcommands, one module each; `formers.cli` parses and dispatches to them."""
