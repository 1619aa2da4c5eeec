# Sourced by the other scripts: make ./.venv with torch and formers installed, then activate it.
# torch is installed first and pinned, so pip takes the local CPU wheel where one is offered
# instead of resolving the newest CUDA build; the extras after it (transformers among them, for
# the importers' tests) then find torch satisfied and leave it as it is.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv="${FORMERS_VENV:-$root/.venv}"
torch_version="${FORMERS_TORCH:-2.13.0}"
# dev: pytest and ruff; hf: transformers and sentencepiece, which tests/pretrained compare with
extras="dev,plots,tensorboard,hf"
if [ ! -x "$venv/bin/python" ]; then
  echo "[formers] creating virtual environment in $venv" >&2
  python3 -m venv "$venv"
fi
# shellcheck disable=SC1091
source "$venv/bin/activate"
stamp="$venv/.formers-installed"
want="$(cat "$root/pyproject.toml" | sha256sum | cut -c1-16)-$torch_version-$extras"
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
  echo "[formers] installing torch==$torch_version and formers[$extras] (first run only)" >&2
  # (the filter drops pip's notes about package-index folders this machine does not have)
  quiet_pip() { python -m pip install --quiet --disable-pip-version-check "$@" \
    2> >(grep -v "is ignored: it is neither a file nor a directory" >&2); }
  quiet_pip "torch==$torch_version"
  quiet_pip -e "$root[$extras]"
  echo "$want" > "$stamp"
fi
cd "$root"
