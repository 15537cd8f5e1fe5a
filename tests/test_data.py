"""Parallel data: loading from text folders, jsonl/csv and the Hub, clear errors, length filtering and batching."""

import csv
import os
import random
from pathlib import Path

import datasets
import pytest
from helpers import DE, EN, write_jsonl, write_lines

from vanilla_transformer.tokenization import read_lines, train_tokenizer
from vanilla_transformer.training.arguments import DataArguments
from vanilla_transformer.training.batches import seq2seq_collator, sequence_lengths, token_budget_batches
from vanilla_transformer.training.corpus import load_parallel, tokenize

MULTI30K = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "multi30k"


def test_read_lines_strips_only_the_line_ending(tmp_path):
    plain = tmp_path / "a.txt"
    plain.write_bytes("  leading and trailing  \nwindows\r\n\ttab\x0cform feed\u2028kept\nlast".encode())
    expected = ["  leading and trailing  ", "windows", "\ttab\x0cform feed\u2028kept", "last"]
    assert read_lines(plain) == expected
    assert read_lines(write_lines(tmp_path / "a.txt.gz", expected)) == expected


def test_folder_of_aligned_text_files(tmp_path):
    write_lines(tmp_path / "train.en.gz", EN)
    write_lines(tmp_path / "train.de", DE)
    (tmp_path / "README.md").write_text("not a language\n")
    dataset = load_parallel(tmp_path, "en", "de", "train")
    assert dataset.column_names == ["en", "de"]
    assert dataset["en"][:] == EN and dataset["de"][:] == DE
    assert load_parallel(str(tmp_path), "de", "en").column_names == ["de", "en"]  # split defaults to train


@pytest.mark.parametrize("name", ["pairs.jsonl", "pairs.jsonl.gz", "pairs.csv", "nested.jsonl", "folder"])
def test_jsonl_and_csv_files(tmp_path, name):
    records = [{"en": en, "de": de, "score": 1} for en, de in zip(EN, DE, strict=True)]
    path = tmp_path / name
    if name == "pairs.csv":
        with path.open("w", newline="", encoding="utf-8") as file:
            writer = csv.DictWriter(file, fieldnames=["score", "de", "en"])
            writer.writeheader()
            writer.writerows(records)
    elif name == "nested.jsonl":  # the layout of the wmt datasets
        write_jsonl(path, [{"translation": {"en": en, "de": de}} for en, de in zip(EN, DE, strict=True)])
    elif name == "folder":
        path.mkdir()
        write_jsonl(path / "val.jsonl", records)
        path = (path, "val")
    else:
        write_jsonl(path, records)
    source, split = path if isinstance(path, tuple) else (path, "train")
    dataset = load_parallel(source, "de", "en", split)
    assert dataset.column_names == ["de", "en"]
    assert dataset["de"][:] == DE and dataset["en"][:] == EN


def test_loading_writes_nothing(tmp_path):
    write_lines(tmp_path / "train.en", EN)
    write_lines(tmp_path / "train.de", DE)
    before = sorted(os.listdir(tmp_path))
    load_parallel(tmp_path, "en", "de")
    assert sorted(os.listdir(tmp_path)) == before


def test_hub_translation_column_is_flattened(monkeypatch):
    pairs = [{"de": de, "en": en} for de, en in zip(DE, EN, strict=True)]
    hub_rows = datasets.Dataset.from_dict({"translation": pairs})
    requests = []

    def fake_load_dataset(path, name=None, split=None):
        requests.append((path, name, split))
        return hub_rows

    monkeypatch.setattr(datasets, "load_dataset", fake_load_dataset)
    dataset = load_parallel("wmt/wmt14", "en", "de", "validation", name="de-en")
    assert requests == [("wmt/wmt14", "de-en", "validation")]
    assert dataset.column_names == ["en", "de"] and dataset["en"][:] == EN
    with pytest.raises(ValueError, match=r"unknown language 'fr' in wmt/wmt14 \(validation\): .*de, en"):
        load_parallel("wmt/wmt14", "en", "fr", "validation", name="de-en")


@pytest.mark.skipif(not MULTI30K.is_dir(), reason="the shared multi30k data is not beside the repository")
def test_multi30k_folder():
    train = load_parallel(MULTI30K, "en", "de", "train")
    assert train.num_rows == 29000 and train.column_names == ["en", "de"]
    assert train[0] == {
        "en": "Two young, White males are outside near many bushes.",
        "de": "Zwei junge weiße Männer sind im Freien in der Nähe vieler Büsche.",
    }
    assert load_parallel(MULTI30K, "de", "en", "val").num_rows == 1014
    assert load_parallel(MULTI30K, "en", "fr", "test_2016_flickr").num_rows == 1000


def hub_reachable(dataset_id: str) -> bool:
    if os.environ.get("HF_HUB_OFFLINE", "0") not in ("0", "", "false", "False"):
        return False
    try:
        import huggingface_hub

        huggingface_hub.HfApi().dataset_info(dataset_id, timeout=5)
    except Exception:  # noqa: BLE001 - offline, DNS failure, proxy, rate limit: all mean "cannot test here"
        return False
    return True


def test_hub_multi30k():
    if not hub_reachable("bentrevett/multi30k"):
        pytest.skip("the Hugging Face Hub is not reachable")
    validation = load_parallel("bentrevett/multi30k", "en", "de", "validation")
    assert validation.column_names == ["en", "de"] and validation.num_rows == 1014


def test_training_pairs_over_a_length_limit_are_left_out_and_evaluation_pairs_cut_at_it():
    tokenizer = train_tokenizer(EN + DE, vocab_size=300)
    pairs = datasets.Dataset.from_dict({"en": ["a b", "a " * 20, "a", "a b c"], "de": ["a", "a", "a " * 20, "a b"]})
    lengths = sequence_lengths(tokenize(pairs, tokenizer, DataArguments(), keep_text=False))
    source_limit, target_limit = max(lengths[0][0], lengths[3][0]), max(lengths[0][1], lengths[3][1])
    assert lengths[1][0] > source_limit and lengths[2][1] > target_limit  # pair 1's source, pair 2's target too long
    limits = DataArguments(max_source_length=source_limit, max_target_length=target_limit)
    kept = tokenize(pairs, tokenizer, limits, keep_text=False)
    assert kept.column_names == ["input_ids", "labels"]
    assert sequence_lengths(kept) == [lengths[0], lengths[3]]
    evaluated = tokenize(pairs, tokenizer, limits, keep_text=True)
    assert evaluated.column_names == ["en", "de", "input_ids", "labels"] and evaluated["en"] == pairs["en"]
    assert sequence_lengths(evaluated) == [(min(s, source_limit), min(t, target_limit)) for s, t in lengths]
    assert all(ids[-1] == tokenizer.eos_token_id for ids in evaluated["input_ids"])  # </s> kept when cut


def test_sequence_lengths_follow_the_row_order():
    dataset = datasets.Dataset.from_dict({"input_ids": [[1] * 3, [1] * 5, []], "labels": [[1], [1] * 2, [1] * 4]})
    assert sequence_lengths(dataset.select([2, 0, 1])) == [(0, 4), (3, 1), (5, 2)]


def check_batches(batches, sizes, max_tokens):
    assert sorted(index for batch in batches for index in batch) == list(range(len(sizes)))
    for batch in batches:
        assert len(batch) * max(sizes[i] for i in batch) <= max_tokens or len(batch) == 1


@pytest.mark.parametrize("max_tokens", [1, 7, 64, 1000])
def test_token_budget_batches_cover_every_index_once_within_budget(max_tokens):
    rng = random.Random(max_tokens)
    lengths = [(rng.randint(1, 40), rng.randint(1, 40)) for _ in range(500)]
    sizes = [max(pair) for pair in lengths]
    unshuffled = token_budget_batches(lengths, max_tokens)
    check_batches(unshuffled, sizes, max_tokens)
    flat = [index for batch in unshuffled for index in batch]
    assert [sizes[i] for i in flat] == sorted(sizes)  # without a seed: shortest first
    for seed in (0, 1):
        check_batches(token_budget_batches(lengths, max_tokens, shuffle_seed=seed), sizes, max_tokens)


def test_token_budget_batches_details():
    assert token_budget_batches([3, 50, 3, 3], max_tokens=10) == [[0, 2, 3], [1]]  # over-long alone
    assert token_budget_batches([], max_tokens=10) == []
    lengths = list(range(1, 200))
    first = token_budget_batches(lengths, 100, shuffle_seed=3)
    assert first == token_budget_batches(lengths, 100, shuffle_seed=3)
    assert first != token_budget_batches(lengths, 100, shuffle_seed=4)
    assert sorted(first) == sorted(token_budget_batches(lengths, 100))  # the seed shuffles the order, not contents
    with pytest.raises(ValueError, match="max_tokens"):
        token_budget_batches(lengths, 0)


def test_collator_pads_inputs_with_pad_id_and_labels_with_minus_100():
    tokenizer = train_tokenizer(EN + DE, vocab_size=300)
    features = [
        {"input_ids": ids, "labels": labels}
        for ids, labels in zip(tokenizer(DE[:2])["input_ids"], tokenizer(EN[:2])["input_ids"], strict=True)
    ]
    longest = max(len(feature["input_ids"]) for feature in features)
    assert min(len(feature["input_ids"]) for feature in features) < longest  # so that there is padding to check
    batch = seq2seq_collator(tokenizer)(features)
    assert batch["input_ids"].shape == batch["attention_mask"].shape == (2, longest)
    for row, feature in enumerate(features):
        n, m = len(feature["input_ids"]), len(feature["labels"])
        assert batch["input_ids"][row, :n].tolist() == feature["input_ids"]
        assert batch["input_ids"][row, n:].eq(0).all() and batch["attention_mask"][row, n:].eq(0).all()
        assert batch["attention_mask"][row, :n].eq(1).all()
        assert batch["labels"][row, :m].tolist() == feature["labels"]
        assert batch["labels"][row, m:].eq(-100).all()
