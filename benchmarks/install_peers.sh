#!/usr/bin/env bash
# Install the peer libraries of benchmarks/peers.py into the project's ./.venv:
#   bash benchmarks/install_peers.sh && python benchmarks/peers.py
source "$(dirname "$0")/../scripts/env.sh"
quiet_pip() { python -m pip install --quiet --disable-pip-version-check "$@" \
  2> >(grep -v "is ignored: it is neither a file nor a directory" >&2); }
quiet_pip "torch==$torch_version" -e ".[peers]"
quiet_pip --no-deps "labml-nn==0.5.1"
python -c "import x_transformers, transformers, labml_nn, linformer; print('peers installed')"
python -c "import routing_transformer; print('routing peers installed')"
python -c "import local_attention; print('longformer peers installed')"
