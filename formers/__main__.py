from formers.cli import entry

entry()
