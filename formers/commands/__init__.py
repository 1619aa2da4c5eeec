"""The `formers` subcommands, one module each: its arguments (`add_parser`) and what it runs;
`formers.cli` registers them all and dispatches to them."""
