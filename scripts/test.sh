#!/usr/bin/env bash
# Run the default (fast) test suite in ./.venv. Extra arguments go to pytest,
# e.g. `bash scripts/test.sh -m slow` for the slow tests.
source "$(dirname "$0")/env.sh"
ruff check formers tests scripts benchmarks
python -m pytest "$@"
