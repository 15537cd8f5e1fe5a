"""translate(): input order, empty lines, over-long inputs, batching; the `translate` command on stdin and files."""

import argparse
import gzip
import io
import sys

import pytest
import torch

from vanilla_transformer import VanillaTransformerConfig, VanillaTransformerForConditionalGeneration
from vanilla_transformer.inference.translate import (
    _length_batches,
    add_translate_subcommand,
    default_dtype,
    translate,
)
from vanilla_transformer.tokenization import BYTE_TOKENS, SPECIAL_TOKENS, train_tokenizer

WORDS = ("cat", "dog", "bird", "man", "woman", "child", "horse", "girl", "boy", "player")
COLOURS = ("red", "blue", "green", "big", "old")
CORPUS = [f"a small {WORDS[i % 10]} sat on the {COLOURS[i % 5]} mat number {i}" for i in range(50)]
TEXTS = [
    "a small dog sat on the red mat number 3 and then the old woman walked home",
    "a cat",
    "the girl",
    "a small man sat on the blue mat",
    "",
    "horse",
    "the old player sat on the big green mat",
    "a boy and a child",
    "   ",
    "the bird sat",
]
# The random model would mostly emit byte tokens, which all decode to "\ufffd": keep its output to word pieces.
BYTE_IDS = list(range(len(SPECIAL_TOKENS), len(SPECIAL_TOKENS) + len(BYTE_TOKENS)))


def tiny_model(tokenizer, seed=0, **overrides):
    fields = dict(
        vocab_size=len(tokenizer),
        d_model=16,
        encoder_layers=1,
        decoder_layers=1,
        encoder_attention_heads=2,
        decoder_attention_heads=2,
        encoder_ffn_dim=32,
        decoder_ffn_dim=32,
    )
    torch.manual_seed(seed)
    model = VanillaTransformerForConditionalGeneration(VanillaTransformerConfig(**fields, **overrides)).eval()
    with torch.no_grad():  # sharper than the initialisation, so that different sources get different outputs
        for parameter in model.parameters():
            parameter.mul_(4)
    model.generation_config.suppress_tokens = BYTE_IDS
    model.generation_config.num_beams = 2
    model.generation_config.max_new_tokens = 6
    return model


@pytest.fixture(scope="module")
def tokenizer():
    return train_tokenizer(CORPUS, vocab_size=300)


@pytest.fixture(scope="module")
def model(tokenizer):
    return tiny_model(tokenizer)


@pytest.fixture(scope="module")
def model_folder(tmp_path_factory, model, tokenizer):
    folder = tmp_path_factory.mktemp("model")
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


@pytest.fixture(scope="module")
def one_by_one(model, tokenizer):
    """The translation of each of TEXTS, translated alone."""
    return [translate(model, tokenizer, [text])[0] for text in TEXTS]


def test_input_order_is_kept_across_length_sorted_batches(model, tokenizer, one_by_one):
    assert translate(model, tokenizer, TEXTS, batch_size=3) == one_by_one
    assert len(set(one_by_one)) >= 5, "the translations must differ for the order check to mean anything"


def test_batching_does_not_change_the_translations(model, tokenizer, one_by_one):
    assert translate(model, tokenizer, TEXTS, batch_size=8) == one_by_one
    assert translate(model, tokenizer, TEXTS, batch_size=1) == one_by_one


def test_empty_and_blank_lines_give_empty_strings_without_the_model(model, tokenizer, monkeypatch):
    batches = []
    generate = model.generate

    def recording_generate(*args, **kwargs):
        batches.append(kwargs["input_ids"].shape[0])
        return generate(*args, **kwargs)

    monkeypatch.setattr(model, "generate", recording_generate)
    assert translate(model, tokenizer, ["", "   ", "\t"]) == ["", "", ""]
    assert batches == []

    result = translate(model, tokenizer, ["a cat", "", "the dog", " "])
    assert result[1] == "" and result[3] == ""
    assert result[0] and result[2]
    assert batches == [2]


def test_an_over_long_line_is_truncated_with_a_warning_naming_it(tokenizer, monkeypatch):
    # learned positions: an encoder input past max_position_embeddings is an error in the model itself
    model = tiny_model(tokenizer, position_embedding_type="learned", max_position_embeddings=10)
    long_line = " ".join(CORPUS[:4])
    long_ids = tokenizer(long_line)["input_ids"]
    assert len(long_ids) > 10
    with pytest.raises(ValueError, match="max_position_embeddings"):
        model.generate(**tokenizer([long_line], return_tensors="pt"), max_new_tokens=2)

    inputs = []
    generate = model.generate

    def recording_generate(*args, **kwargs):
        inputs.extend(kwargs["input_ids"].tolist())
        return generate(*args, **kwargs)

    monkeypatch.setattr(model, "generate", recording_generate)
    with pytest.warns(UserWarning, match=rf"max_input_tokens=10.*: line 2 \({len(long_ids)} tokens\)"):
        result = translate(model, tokenizer, ["a cat", long_line, "the dog"], batch_size=1)
    assert all(result)
    # the default limit is the learned table: the first 9 tokens and </s>, longest first
    assert inputs[0] == long_ids[:9] + [tokenizer.eos_token_id]

    # any position type: an explicit limit; the other lines are not warned about
    sinusoidal = tiny_model(tokenizer)
    with pytest.warns(UserWarning) as caught:
        translate(sinusoidal, tokenizer, ["a cat", "the dog", long_line], max_input_tokens=10)
    assert len(caught) == 1 and "1 input(s)" in str(caught[0].message) and ": line 3 (" in str(caught[0].message)


def test_generation_defaults_come_from_the_generation_config_else_5_beams_and_source_plus_50(tokenizer, monkeypatch):
    model = tiny_model(tokenizer)
    calls = []

    def recording_generate(input_ids, attention_mask, **kwargs):
        lengths = attention_mask.sum(dim=1).tolist()
        calls.append((lengths, kwargs))
        return torch.full((input_ids.shape[0], 1), model.config.decoder_start_token_id)

    monkeypatch.setattr(model, "generate", recording_generate)
    texts = ["a cat", "a small dog sat", "the dog", "a cat"]
    lengths = [len(ids) for ids in tokenizer(texts)["input_ids"]]
    assert lengths[0] == lengths[3] != lengths[1]

    model.generation_config.num_return_sequences = 3  # translate() wants one translation per input all the same
    translate(model, tokenizer, texts)  # the generation config says 2 beams and 6 new tokens
    assert [kwargs for _, kwargs in calls] == [{"num_beams": 2, "num_return_sequences": 1, "max_new_tokens": 6}]

    calls.clear()
    model.generation_config.num_beams = model.generation_config.max_new_tokens = None
    translate(model, tokenizer, texts)  # nothing set: 5 beams, and each batch holds one source length
    assert all(len(set(batch_lengths)) == 1 for batch_lengths, _ in calls)
    assert sorted(length for batch_lengths, _ in calls for length in batch_lengths) == sorted(lengths)
    for batch_lengths, kwargs in calls:
        assert kwargs == {"num_beams": 5, "num_return_sequences": 1, "max_new_tokens": batch_lengths[0] + 50}

    calls.clear()
    translate(model, tokenizer, texts, num_beams=3, max_new_tokens=7)  # the arguments win
    assert [kwargs for _, kwargs in calls] == [{"num_beams": 3, "num_return_sequences": 1, "max_new_tokens": 7}]


def test_length_batches_are_longest_first_and_split_by_length_when_asked():
    token_ids = {0: [1], 1: [1, 2, 3], 2: [1, 2], 3: [4, 5, 6], 4: [7, 8], 5: [9]}
    indices = list(token_ids)
    assert list(_length_batches(indices, token_ids, 4, split_on_length=False)) == [[1, 3, 2, 4], [0, 5]]
    assert list(_length_batches(indices, token_ids, 4, split_on_length=True)) == [[1, 3], [2, 4], [0, 5]]
    assert list(_length_batches(indices, token_ids, 1, split_on_length=False)) == [[1], [3], [2], [4], [0], [5]]


def test_a_token_budget_cuts_batches_by_sentences_times_longest_source_times_beams():
    token_ids = {0: [1], 1: [1, 2, 3], 2: [1, 2], 3: [4, 5, 6], 4: [7, 8], 5: [9]}
    indices = list(token_ids)

    def batches(max_tokens, beams):
        return list(_length_batches(indices, token_ids, 99, False, max_tokens=max_tokens, beams=beams))

    assert batches(6, 1) == [[1, 3], [2, 4, 0], [5]]
    # beams count: a 3-token source with 2 beams fills a budget of 6 alone, and still makes a batch
    assert batches(6, 2) == [[1], [3], [2], [4], [0, 5]]
    assert batches(None, 4) == [[1, 3, 2, 4, 0, 5]]


def test_translations_within_a_token_budget_are_the_ones_without_it(tokenizer, monkeypatch):
    model = tiny_model(tokenizer)
    expected = translate(model, tokenizer, TEXTS, num_beams=2, max_new_tokens=5)
    shapes = []
    generate = model.generate

    def recording_generate(input_ids, **kwargs):
        shapes.append(tuple(input_ids.shape))
        return generate(input_ids=input_ids, **kwargs)

    monkeypatch.setattr(model, "generate", recording_generate)
    assert translate(model, tokenizer, TEXTS, num_beams=2, max_new_tokens=5, max_batch_tokens=40) == expected
    assert len(shapes) > 1 and all(sentences * length * 2 <= 40 or sentences == 1 for sentences, length in shapes)


def test_on_a_gpu_translation_loads_in_bfloat16_where_it_has_it(monkeypatch):
    assert default_dtype("cpu") is None  # the saved precision
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *args, **kwargs: True)
    assert default_dtype("cuda") == torch.bfloat16 and default_dtype(torch.device("cuda", 1)) == torch.bfloat16
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *args, **kwargs: False)
    assert default_dtype("cuda") is None


def parse(argv):
    parser = argparse.ArgumentParser()
    add_translate_subcommand(parser.add_subparsers())
    return parser.parse_args(["translate", *argv])


def test_cli_reads_stdin_and_writes_stdout_in_input_order(model_folder, one_by_one, monkeypatch, capsys):
    monkeypatch.setattr(sys, "stdin", io.StringIO("\n".join(TEXTS) + "\n"))
    args = parse(["--model", str(model_folder), "--batch-size", "3", "--device", "cpu"])
    assert args.func(args) == 0
    lines = capsys.readouterr().out.split("\n")
    assert lines[-1] == "" and lines[:-1] == one_by_one


def test_cli_translates_files_to_a_file_with_a_progress_bar(
    model, tokenizer, model_folder, one_by_one, tmp_path, capsys
):
    first, second = tmp_path / "a.txt", tmp_path / "b.txt.gz"
    first.write_text("\n".join(TEXTS[:6]) + "\n", encoding="utf-8")
    with gzip.open(second, "wt", encoding="utf-8") as file:
        file.write("\n".join(TEXTS[6:]) + "\n")
    output = tmp_path / "out" / "translations.txt"
    args = parse(["--model", str(model_folder), "--input", str(first), str(second), "--output", str(output)])
    args.func(args)
    assert output.read_text(encoding="utf-8").split("\n")[:-1] == one_by_one
    assert "translating" in capsys.readouterr().err

    # the flags reach generate(): a single beam and 2 new tokens
    flags = ["--num-beams", "1", "--max-new-tokens", "2", "--dtype", "float32"]
    args = parse(["--model", str(model_folder), "--input", str(first), "--output", str(output), *flags])
    args.func(args)
    expected = translate(model, tokenizer, TEXTS[:6], num_beams=1, max_new_tokens=2)
    assert output.read_text(encoding="utf-8").split("\n")[:-1] == expected


@pytest.mark.parametrize("option", ["num_beams", "max_new_tokens"])
def test_zero_beams_or_tokens_is_an_error_not_the_default(model, tokenizer, option):
    with pytest.raises(ValueError, match=rf"{option}=0 must be a positive integer"):
        translate(model, tokenizer, ["forty-two"], **{option: 0})
