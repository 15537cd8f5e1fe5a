"""The joint BPE tokenizer: exact round trips, fixed special ids, EOS handling and loading without our package."""

import argparse
import gzip
import itertools
import json
from pathlib import Path

import datasets
import pytest
from helpers import run_without_our_package
from transformers import AutoTokenizer

from vanilla_transformer.tokenization import add_tokenizer_subcommand, iter_lines, train_tokenizer

MULTI30K = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "multi30k"
# Always part of the training corpus, so that the tests also run without the shared data.
SENTENCES = [
    "Ein Mädchen läuft über die Straße, während zwei Hunde bellen.",
    "Ältere Männer üben „Fußball“ auf dem Rasen – oder nicht?",
    "A man in a blue shirt (and a hat) is standing on a ladder!",
    "Two dogs run; one of them, the brown one, carries a stick.",
]
UNSEEN_CHARACTERS = "Ein Schneemann ☃ lächelt 🙂 neben <0x41> und Zoë."


@pytest.fixture(scope="module")
def corpus() -> list[str]:
    sentences = list(SENTENCES)
    for lang in ("de", "en"):
        if (MULTI30K / f"train.{lang}.gz").is_file():
            sentences += itertools.islice(iter_lines(MULTI30K / f"train.{lang}.gz"), 2000)
    return sentences


@pytest.fixture(scope="module")
def tokenizer(corpus):
    return train_tokenizer(corpus, vocab_size=2000)


def test_special_tokens_have_the_model_config_ids(tokenizer):
    ids = tokenizer.convert_tokens_to_ids(["<pad>", "<s>", "</s>", "<unk>"])
    assert ids == [0, 1, 2, 3]
    named = (tokenizer.pad_token_id, tokenizer.bos_token_id, tokenizer.eos_token_id, tokenizer.unk_token_id)
    assert named == (0, 1, 2, 3)
    assert len(tokenizer) <= 2000  # the size asked for includes the special and byte tokens


def test_decode_gives_every_training_sentence_back(tokenizer, corpus):
    encoded = tokenizer(corpus)["input_ids"]
    assert [tokenizer.decode(ids, skip_special_tokens=True) for ids in encoded] == corpus


def test_eos_is_appended_and_no_bos_prepended(tokenizer):
    ids = tokenizer(SENTENCES[0])["input_ids"]
    assert ids[-1] == tokenizer.eos_token_id
    assert ids.count(tokenizer.eos_token_id) == 1 and tokenizer.bos_token_id not in ids
    assert tokenizer.decode(ids) == SENTENCES[0] + "</s>"


def test_text_target_gives_labels_ending_with_eos(tokenizer):
    batch = tokenizer(SENTENCES[:2], text_target=SENTENCES[2:])
    assert set(batch) == {"input_ids", "attention_mask", "labels"}
    assert batch["input_ids"] == tokenizer(SENTENCES[:2])["input_ids"]
    assert batch["labels"] == tokenizer(SENTENCES[2:])["input_ids"]
    assert all(labels[-1] == tokenizer.eos_token_id for labels in batch["labels"])


def test_unseen_characters_fall_back_to_bytes_not_unk(tokenizer):
    ids = tokenizer(UNSEEN_CHARACTERS)["input_ids"]
    assert tokenizer.unk_token_id not in ids
    assert tokenizer.decode(ids, skip_special_tokens=True) == UNSEEN_CHARACTERS


def test_lowercase_option_lowercases_before_encoding(corpus):
    tokenizer = train_tokenizer(corpus[:500], vocab_size=500, lowercase=True)
    assert tokenizer.decode(tokenizer("Ältere MÄNNER")["input_ids"], skip_special_tokens=True) == "ältere männer"


@pytest.mark.parametrize("split_punctuation", [False, True])
def test_split_punctuation_keeps_punctuation_out_of_subwords_and_round_trips(corpus, split_punctuation):
    tokenizer = train_tokenizer(corpus, vocab_size=2000, split_punctuation=split_punctuation)
    # without the split, BPE learns word-final pieces such as "n." that glue a word to its full stop
    glued = pieces_gluing_letters_to_punctuation(tokenizer, corpus)
    assert bool(glued) is not split_punctuation, sorted(glued)[:10]
    for sentence in corpus:
        assert tokenizer.decode(tokenizer(sentence)["input_ids"], skip_special_tokens=True) == sentence


def test_files_lists_and_dataset_columns_train_the_same_vocabulary(tmp_path, corpus):
    sentences = corpus[:300]
    plain, zipped = tmp_path / "half.txt", tmp_path / "half.txt.gz"
    plain.write_text("\n".join(sentences[:150]) + "\n", encoding="utf-8")
    with gzip.open(zipped, "wt", encoding="utf-8") as file:
        file.write("\n".join(sentences[150:]) + "\n")

    from_list = train_tokenizer(sentences, vocab_size=400).get_vocab()
    assert train_tokenizer([plain, zipped], vocab_size=400).get_vocab() == from_list
    assert train_tokenizer([str(plain), str(zipped)], vocab_size=400).get_vocab() == from_list
    column = datasets.Dataset.from_dict({"text": sentences})["text"]
    assert train_tokenizer(column, vocab_size=400).get_vocab() == from_list


def test_missing_training_file_is_named(tmp_path):
    present = tmp_path / "present.txt"
    present.write_text("ein Satz\n", encoding="utf-8")
    with pytest.raises(FileNotFoundError, match="absent.txt"):
        train_tokenizer([present, tmp_path / "absent.txt"])


LOAD_AND_ENCODE = """
    import json, sys
    from transformers import AutoTokenizer

    folder, sources, targets = sys.argv[1], json.loads(sys.argv[2]), json.loads(sys.argv[3])
    tokenizer = AutoTokenizer.from_pretrained(folder)
    batch = tokenizer(sources, text_target=targets)
    print(json.dumps({"batch": dict(batch), "ours_imported": "vanilla_transformer" in sys.modules}))
    """


def test_saved_tokenizer_loads_in_a_fresh_process_without_our_package(tokenizer, tmp_path):
    sources, targets = [*SENTENCES[:2], UNSEEN_CHARACTERS], [*SENTENCES[2:], UNSEEN_CHARACTERS]
    tokenizer.save_pretrained(tmp_path)
    assert "auto_map" not in json.loads((tmp_path / "tokenizer_config.json").read_text())
    loaded = run_without_our_package(
        LOAD_AND_ENCODE, str(tmp_path), json.dumps(sources), json.dumps(targets), cwd=tmp_path
    )
    assert not loaded["ours_imported"]
    assert loaded["batch"] == dict(tokenizer(sources, text_target=targets))


def test_cli_trains_and_saves(tmp_path, corpus):
    source, target = tmp_path / "train.de", tmp_path / "train.en"
    source.write_text("\n".join(SENTENCES[:2] + corpus[:200]) + "\n", encoding="utf-8")
    target.write_text("\n".join(SENTENCES[2:] + corpus[-200:]) + "\n", encoding="utf-8")
    parser = argparse.ArgumentParser()
    add_tokenizer_subcommand(parser.add_subparsers(dest="command"))
    output = tmp_path / "tokenizer"
    args = parser.parse_args(
        ["tokenizer", "train", "--files", str(source), str(target), "--vocab-size", "400", "--output", str(output)]
    )
    assert args.func(args) == 0
    loaded = AutoTokenizer.from_pretrained(output)
    assert len(loaded) == 400
    assert loaded.decode(loaded(SENTENCES[0])["input_ids"], skip_special_tokens=True) == SENTENCES[0]


def test_cli_split_punctuation_flag_reaches_the_tokenizer(tmp_path, corpus):
    text = tmp_path / "train.txt"
    text.write_text("\n".join(corpus) + "\n", encoding="utf-8")
    parser = argparse.ArgumentParser()
    add_tokenizer_subcommand(parser.add_subparsers(dest="command"))
    command = ["tokenizer", "train", "--files", str(text), "--vocab-size", "2000", "--output", str(tmp_path / "tok")]
    args = parser.parse_args([*command, "--split-punctuation"])
    assert args.func(args) == 0
    assert not pieces_gluing_letters_to_punctuation(AutoTokenizer.from_pretrained(tmp_path / "tok"), corpus)


def pieces_gluing_letters_to_punctuation(tokenizer, sentences) -> set[str]:
    pieces = {piece.lstrip("▁") for sentence in sentences for piece in tokenizer.tokenize(sentence)}
    return {piece for piece in pieces if any(c in ".,;!?" for c in piece) and any(c.isalpha() for c in piece)}


def test_training_on_nothing_or_into_a_vocabulary_without_room_for_subwords_is_an_error(tmp_path):
    empty = tmp_path / "empty.txt"
    empty.write_text("\n\n  \n")
    with pytest.raises(ValueError, match="no text to train the tokenizer on"):
        train_tokenizer([empty], vocab_size=400)
    with pytest.raises(ValueError, match=r"vocab_size=200 leaves no room for subwords.*larger than 260"):
        train_tokenizer(["ein Satz"], vocab_size=200)
