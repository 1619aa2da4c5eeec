"""Fixtures of the import tests: the tiny random GPT-2 of hf_gpt2.py and BERT of hf_bert.py,
saved once."""

import shutil

import pytest
from hf_bert import save_bert
from hf_gpt2 import save_gpt2


@pytest.fixture(scope="session")
def gpt2_folder(tmp_path_factory):
    """The tiny random GPT-2's folder, saved once."""
    folder = tmp_path_factory.mktemp("gpt2")
    save_gpt2(folder)
    return folder


@pytest.fixture
def gpt2(gpt2_folder):
    """(folder, Hugging Face model read from it), the model this test's own to change."""
    transformers = pytest.importorskip("transformers")
    return gpt2_folder, transformers.GPT2LMHeadModel.from_pretrained(gpt2_folder).eval()


@pytest.fixture
def gpt2_copy(gpt2_folder, tmp_path):
    """A copy of the tiny GPT-2's folder that a test may damage."""
    folder = tmp_path / "model"
    shutil.copytree(gpt2_folder, folder)
    return folder


@pytest.fixture(scope="session")
def bert_folder(tmp_path_factory):
    """The tiny random BERT's folder, saved once."""
    folder = tmp_path_factory.mktemp("bert")
    save_bert(folder)
    return folder


@pytest.fixture(scope="session")
def marian_folder(tmp_path_factory):
    """The tiny random Marian model's folder (hf_marian.py), saved once."""
    from hf_marian import save_marian

    folder = tmp_path_factory.mktemp("marian")
    save_marian(folder)
    return folder


@pytest.fixture
def bert(bert_folder):
    """(folder, Hugging Face model read from it), the model this test's own to change."""
    transformers = pytest.importorskip("transformers")
    return bert_folder, transformers.BertForMaskedLM.from_pretrained(bert_folder).eval()


@pytest.fixture
def marian(marian_folder):
    """(folder, Hugging Face model read from it), the model this test's own to change."""
    transformers = pytest.importorskip("transformers")
    return marian_folder, transformers.MarianMTModel.from_pretrained(marian_folder).eval()
