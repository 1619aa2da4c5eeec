"""Fixtures of the import tests: the tiny random model of each family (hf_<family>.py), saved
once, and the Hugging Face model read from it."""

import importlib
import shutil

import pytest


def saved(family: str):
    """A session fixture: the folder of hf_<family>.py's tiny random model, saved once."""

    @pytest.fixture(scope="session")
    def folder(tmp_path_factory):
        save = getattr(importlib.import_module(f"hf_{family}"), f"save_{family}")
        path = tmp_path_factory.mktemp(family)
        save(path)
        return path

    return folder


def loaded(family: str, model_class: str):
    """A fixture: (folder, the transformers `model_class` read from it), the model the test's
    own to change."""

    @pytest.fixture
    def model(request):
        transformers = pytest.importorskip("transformers")
        folder = request.getfixturevalue(f"{family}_folder")
        return folder, getattr(transformers, model_class).from_pretrained(folder).eval()

    return model


gpt2_folder, gpt2 = saved("gpt2"), loaded("gpt2", "GPT2LMHeadModel")
bert_folder, bert = saved("bert"), loaded("bert", "BertForMaskedLM")
marian_folder, marian = saved("marian"), loaded("marian", "MarianMTModel")
longformer_folder = saved("longformer")
longformer = loaded("longformer", "LongformerForMaskedLM")


@pytest.fixture
def gpt2_copy(gpt2_folder, tmp_path):
    """A copy of the tiny GPT-2's folder that a test may damage."""
    folder = tmp_path / "model"
    shutil.copytree(gpt2_folder, folder)
    return folder
