"""Where a pretrained model is: a local folder, or a Hugging Face hub id fetched with
`huggingface_hub` (when it is installed and the hub can be reached; else one line that says so
and asks for a folder)."""

from __future__ import annotations

import re
from pathlib import Path

from formers.pretrained.errors import PretrainedError
from formers.pretrained.folder import CONFIG_FILE, WEIGHT_FILES
from formers.pretrained.tokenizer import TOKENIZER_FILES

# "gpt2", "openai-community/gpt2": the hub's repository names
HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*(/[\w.-]+)?$")
# what a fetch downloads: no other framework's weights, no .bin when safetensors exist
SAFETENSORS_FILES = (CONFIG_FILE, *TOKENIZER_FILES, "model*.safetensors*")
PICKLE_FILES = (CONFIG_FILE, *TOKENIZER_FILES, "pytorch_model*.bin*")
LOCAL_FOLDER = (
    "pass the path of a local folder holding its config.json and weights (one that "
    "save_pretrained wrote, or a copy of the hub's files)"
)


def locate(source: str | Path) -> Path:
    """The folder of `source`: itself when it is a folder, else the hub's files of that id."""
    path = Path(source).expanduser()
    if path.is_dir():
        return path
    if path.exists():
        raise PretrainedError(f"{source} is a file: give the model's folder, or a hub id")
    if not HUB_ID.match(str(source)) or str(source).startswith("."):
        raise PretrainedError(f"no folder {source}: give a model folder or a hub id")
    return fetch(str(source))


def fetch(repo_id: str) -> Path:
    """The hub's files of `repo_id`, downloaded (or found in the local cache)."""
    try:
        from huggingface_hub import constants, snapshot_download
    except ImportError:
        raise PretrainedError(
            f"no folder {repo_id}, and huggingface_hub is not installed to fetch it from the "
            f"hub: install it (pip install huggingface_hub), or {LOCAL_FOLDER}"
        ) from None
    offline = bool(getattr(constants, "HF_HUB_OFFLINE", False))
    try:
        folder = Path(snapshot_download(repo_id, allow_patterns=list(SAFETENSORS_FILES)))
        if not any((folder / name).is_file() for name in WEIGHT_FILES):
            folder = Path(snapshot_download(repo_id, allow_patterns=list(PICKLE_FILES)))
    except Exception as error:  # the hub library's errors differ by version
        raise PretrainedError(_fetch_failed(repo_id, error, offline)) from None
    return folder


def _fetch_failed(repo_id: str, error: Exception, offline: bool) -> str:
    """The one line that says why `repo_id` could not be fetched."""
    kind = type(error).__name__
    if offline:
        why = "the hub is switched off here (HF_HUB_OFFLINE is set) and it is not in the cache"
    elif kind in ("RepositoryNotFoundError", "GatedRepoError"):
        why = "the hub has no such model, or it needs a login (huggingface-cli login)"
    else:
        why = f"the hub cannot be reached and it is not in the cache ({kind})"
    return f"no folder {repo_id}, and it cannot be fetched from the Hugging Face hub: {why}; " + (
        LOCAL_FOLDER
    )
