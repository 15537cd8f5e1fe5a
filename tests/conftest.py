import os
import tempfile

# Prepared corpora (and datasets' own cache) go to a folder of this test session, in this process and the ones it
# starts: a cache left by an earlier session or by the first CI pass would let preparation go untested.
os.environ["HF_DATASETS_CACHE"] = tempfile.mkdtemp(prefix="vanilla-transformer-tests-datasets-")

import shutil
from pathlib import Path

import pytest
import torch
from filelock import FileLock
from helpers import NUMBER_SPLITS, SWITCHES, switch_id, train_number_translator

from vanilla_transformer.demo.number_words import demo_splits, write_parallel_folder
from vanilla_transformer.tokenization import train_tokenizer


def pytest_configure(config):
    """Under pytest-xdist (`-n auto`: a worker a core) each worker takes its share of the cores for torch's threads,
    and so do the processes the tests start (OMP_NUM_THREADS, read when they import torch): two workers on two cores
    do not each run two threads."""
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    if workers > 1:
        threads = max(1, (os.cpu_count() or 1) // workers)
        os.environ["OMP_NUM_THREADS"] = str(threads)
        torch.set_num_threads(threads)


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


@pytest.fixture(scope="session")
def run_folder(tmp_path_factory) -> Path:
    """A folder of this test run that every pytest-xdist worker shares (each has its own basetemp inside it)."""
    base = tmp_path_factory.getbasetemp()
    return base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base


def made_once(folder: Path, make) -> Path:
    """`make(folder)` by the first worker of the run to ask; the others wait for it, then take the folder as made."""
    with FileLock(f"{folder}.lock"):
        if not (folder / ".made").exists():
            shutil.rmtree(folder, ignore_errors=True)
            make(folder)
            (folder / ".made").touch()
    return folder


def number_translator(folder: Path, source_side: int, **tokenizer_options) -> None:
    pairs = NUMBER_SPLITS["train"]
    tokenizer = train_tokenizer([sentence for pair in pairs for sentence in pair], vocab_size=400, **tokenizer_options)
    train_number_translator(folder, tokenizer, pairs, source_side=source_side)


@pytest.fixture(scope="session")
def numbers_en_de(run_folder) -> Path:
    """English number words into German, trained once a run (test_serve, test_web): its tokenizer lowercases and
    splits punctuation off, the Multi30k recipe's options, which the page's JavaScript tokenizer must apply too.
    Read-only: a test file copies it to give it a card of its own."""
    return made_once(
        run_folder / "numbers-en-de",
        lambda folder: number_translator(folder, 0, lowercase=True, split_punctuation=True),
    )


@pytest.fixture(scope="session")
def numbers_de_en(run_folder) -> Path:
    """German number words into English (several English words a number, so BLEU means something), trained once a
    run (test_onnx, test_ctranslate2). Read-only: a test file copies it."""
    return made_once(run_folder / "numbers-de-en", lambda folder: number_translator(folder, 1))


@pytest.fixture(scope="session")
def numbers_en_de_onnx(run_folder, numbers_en_de) -> Path:
    """`numbers_en_de` as `export onnx` writes it, exported once a run (test_serve, test_web). Read-only."""
    pytest.importorskip("onnxscript", reason='the ONNX export is optional: pip install ".[onnx]"')
    from vanilla_transformer.export import export_onnx

    return made_once(run_folder / "numbers-en-de-onnx", lambda folder: export_onnx(numbers_en_de, folder))
