import os
import tempfile

# Prepared corpora (and datasets' own cache) go to a folder of this test session, in this process and the ones it
# starts: a cache left by an earlier session or by the first CI pass would let preparation go untested.
os.environ["HF_DATASETS_CACHE"] = tempfile.mkdtemp(prefix="vanilla-transformer-tests-datasets-")

from pathlib import Path

import pytest
from helpers import SWITCHES, switch_id

from vanilla_transformer.demo.number_words import demo_splits, write_parallel_folder
from vanilla_transformer.tokenization import train_tokenizer


@pytest.fixture(params=SWITCHES, ids=[switch_id(s) for s in SWITCHES])
def switches(request):
    return request.param


@pytest.fixture(scope="module")
def corpus_folder(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("numbers")
    write_parallel_folder(folder, demo_splits(train_size=300, test_size=12, seed=0, max_value=9999))
    pairs = (line for name in ("train.en", "train.de") for line in (folder / name).read_text().splitlines())
    train_tokenizer(pairs, vocab_size=300).save_pretrained(folder / "tokenizer")
    return folder
