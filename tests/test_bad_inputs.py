"""Bad input and faults, by kind: each gets a clear error that names the culprit (the field, argument, flag, file or
line) or is handled correctly, and loses nothing; on the command line it is one line and exit code 2.

Kinds: the config; tensors and keywords given to the model and to generate(); files (config files, checkpoints,
model folders, the Hub offline); parallel data; every command of the command line; kills, interrupts and failures
during training, while saving and at the end of a run. Data loading itself is in test_data.py, the model's own
behaviour in test_model_behaviour.py; here is what goes wrong.
"""

import argparse
import io
import itertools
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import datasets
import pytest
import torch
from helpers import (
    DE,
    EN,
    QUIET_THREADS,
    TINY_TRAINING_MODEL,
    VOCAB,
    error_line,
    random_tokens,
    tiny_arguments,
    tiny_config,
    tiny_model,
    tiny_train_flags,
    truncate,
    write_jsonl,
    write_lines,
)
from huggingface_hub import constants
from huggingface_hub.errors import StrictDataclassError
from safetensors.torch import load_file
from transformers import AutoModelForSeq2SeqLM
from transformers.generation import utils as generation_utils
from transformers.testing_utils import CaptureLogger

from vanilla_transformer import (
    VanillaTransformerConfig,
    VanillaTransformerForConditionalGeneration,
    VanillaTransformerModel,
)
from vanilla_transformer.cli import build_parser, main
from vanilla_transformer.common import hub_connection
from vanilla_transformer.common.hub_connection import hub_reachable
from vanilla_transformer.hub import push_folder
from vanilla_transformer.hub.push import missing_model_files
from vanilla_transformer.inference import CorruptFileError, load_for_translation, load_tokenizer
from vanilla_transformer.tokenization import read_lines, train_tokenizer
from vanilla_transformer.training import RunEndedWithErrors, TrainingRun, parse_arguments
from vanilla_transformer.training.arguments import DataArguments
from vanilla_transformer.training.checkpoints import TrainingState
from vanilla_transformer.training.corpus import load_parallel, obtain_tokenizer

# ---------------------------------------------------------------------------------------------------------- config


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (dict(d_model=18), r"encoder_attention_heads=4 is invalid: d_model=18 must be divisible"),
        (dict(decoder_attention_heads=3, d_model=16), r"decoder_attention_heads=3 is invalid: d_model=16"),
        (dict(num_key_value_heads=3), r"num_key_value_heads=3 is invalid: must be None or a positive divisor"),
        (dict(num_key_value_heads=0), r"num_key_value_heads=0 is invalid"),
        (dict(activation_function="tanh"), r"activation_function='tanh' is invalid: allowed values are relu, gelu"),
        (dict(norm_placement="sandwich"), r"norm_placement='sandwich' is invalid: allowed values are post, pre"),
        (dict(norm_type="batchnorm"), r"norm_type='batchnorm' is invalid: allowed values are layernorm, rmsnorm"),
        (dict(position_embedding_type="t5"), r"position_embedding_type='t5' is invalid: allowed values .*, alibi"),
        (
            dict(position_embedding_type="rope", rope_parameters={"rope_type": "yarn", "factor": 2}),
            r"rope_parameters=.* is invalid: rope_type must be one of default, linear, ntk, dynamic",
        ),
        (
            dict(position_embedding_type="rope", rope_parameters={"rope_type": "ntk"}),
            r"rope_parameters=.* is invalid: rope_type 'ntk' needs a number factor >= 1",
        ),
        (
            dict(position_embedding_type="rope", rope_parameters={"rope_type": "linear", "factor": 0.5}),
            r"rope_parameters=.* is invalid: rope_type 'linear' needs a number factor >= 1",
        ),
        (
            dict(rope_parameters={"rope_type": "dynamic", "factor": 2}),
            r"rope_type 'dynamic' scales rotary positions, which position_embedding_type='sinusoidal' does not use",
        ),
        (dict(rope_parameters={"rope_theta": 0}), r"rope_parameters=.* is invalid: rope_theta must be a positive"),
        (
            dict(position_embedding_type="rope", rope_parameters={"rope_type": "linear", "factr": 2}),
            r"'factr' is no key of rope_type 'linear'; its keys are \['factor', 'rope_theta', 'rope_type', 'type'\]",
        ),
        (
            dict(position_embedding_type="rope", d_model=12, encoder_attention_heads=4, decoder_attention_heads=4),
            r"rotary needs an even head size, d_model / encoder_attention_heads = 3",
        ),
        (dict(dropout=1.0), r"dropout=1.0 is invalid: must be in \[0, 1\)"),
        (dict(drop_path_rate=-0.1), r"drop_path_rate=-0.1 is invalid"),
        (dict(label_smoothing=1.5), r"label_smoothing=1.5 is invalid"),
        (dict(sliding_window=0), r"sliding_window=0 is invalid"),
        (dict(weight_init="kaiming"), r"weight_init='kaiming' is invalid: allowed values are xavier, normal"),
        (dict(init_std=0.0), r"init_std=0.0 is invalid: must be positive"),
        (dict(vocab_size=0), r"vocab_size=0 is invalid: must be a positive integer"),
        (dict(d_model="512"), r"d_model"),
        (dict(layer_norm_eps=-1), r"layer_norm_eps=-1 is invalid: must be positive"),
        (dict(init_std=-1), r"init_std=-1 is invalid: must be positive"),
        (dict(encoder_layers=0), r"encoder_layers=0 is invalid: must be a positive integer"),
        (dict(max_position_embeddings=0), r"max_position_embeddings=0 is invalid: must be a positive integer"),
        (
            dict(residual_scaling="fixup"),
            r"residual_scaling='fixup' is invalid: allowed values are none, learned, rezero",
        ),
        (
            dict(sinusoid_layout="cosines_first"),
            r"sinusoid_layout='cosines_first' is invalid: allowed values are interleaved, sines_then_cosines",
        ),
        (
            dict(sinusoid_layout="sines_then_cosines", position_embedding_type="rope", rope_parameters={}),
            r"sinusoid_layout='sines_then_cosines' is invalid: lays out sinusoidal positions, which "
            r"position_embedding_type='rope' does not use",
        ),
        (dict(decoder_vocab_size=0), r"decoder_vocab_size=0 is invalid: must be None or a positive integer"),
        (
            dict(decoder_vocab_size=VOCAB + 3),
            rf"decoder_vocab_size={VOCAB + 3} is invalid: .* it needs share_encoder_decoder_embeddings=False",
        ),
        (
            dict(
                decoder_vocab_size=8, share_encoder_decoder_embeddings=False, tie_word_embeddings=False, bos_token_id=9
            ),
            r"bos_token_id=9 is invalid: must be a token id of the vocabulary, in \[0, 8\)",
        ),
        (dict(final_logits_bias="yes"), r"final_logits_bias"),
    ],
)
def test_invalid_switch_names_field_value_and_allowed(overrides, message):
    with pytest.raises(StrictDataclassError, match=message):
        tiny_config(**overrides)


@pytest.mark.parametrize(
    ("typo", "field"), [("d_modle", "d_model"), ("dropuot", "dropout"), ("layer_norm_epsilon", "layer_norm_eps")]
)
def test_a_misspelled_switch_warns_naming_the_field_meant(typo, field, tmp_path):
    with pytest.warns(UserWarning, match=rf"no field {typo}=0.1, .*changes nothing; did you mean '{field}'"):
        config = tiny_config(**{typo: 0.1})
    assert getattr(config, field) == getattr(tiny_config(), field)
    # the same typo in a saved config.json
    tiny_config().save_pretrained(tmp_path)
    saved = json.loads((tmp_path / "config.json").read_text())
    (tmp_path / "config.json").write_text(json.dumps({**saved, typo: 0.1}))
    with pytest.warns(UserWarning, match=rf"did you mean '{field}'"):
        VanillaTransformerConfig.from_pretrained(tmp_path)


def test_a_non_positive_layer_norm_eps_is_refused():
    with pytest.raises(StrictDataclassError, match=r"layer_norm_eps=-1.0 is invalid: must be positive"):
        tiny_config(layer_norm_eps=-1.0)


@pytest.mark.parametrize("field", ["pad_token_id", "bos_token_id", "eos_token_id", "decoder_start_token_id"])
def test_a_special_token_outside_the_vocabulary_is_refused_by_the_config(field):
    with pytest.raises(
        StrictDataclassError, match=rf"{field}={VOCAB} is invalid: must be a token id of the vocabulary"
    ):
        tiny_config(**{field: VOCAB})


# ------------------------------------------------------------------------------------- tensors given to the model

SOURCE = random_tokens(2, 5, seed=0)
TARGET = random_tokens(2, 4, seed=1)


@pytest.fixture(scope="module")
def model():
    return tiny_model(tiny_config())


@pytest.mark.parametrize(
    ("inputs", "message"),
    [
        (dict(input_ids=SOURCE.float()), r"input_ids must hold integer token ids, got torch.float32"),
        (dict(input_ids=SOURCE[:0]), r"input_ids is empty, shape \(0, 5\)"),
        (dict(input_ids=SOURCE[:, :0]), r"input_ids is empty, shape \(2, 0\)"),
        (dict(input_ids=SOURCE[0]), r"input_ids must have shape \(batch, sequence\), got \(5,\)"),
        (dict(input_ids=SOURCE + VOCAB), rf"input_ids contains id \d+, outside the vocabulary \[0, {VOCAB}\)"),
        (
            dict(attention_mask=torch.ones(5)),
            r"attention_mask must have shape \(batch, sequence\) = \(2, 5\), got \(5,\)",
        ),
        (dict(attention_mask=torch.ones(2, 5, 1)), r"attention_mask must have shape .* got \(2, 5, 1\)"),
        (dict(attention_mask=torch.ones(2, 4)), r"attention_mask has shape \(2, 4\) but the tokens it masks"),
        (dict(decoder_input_ids=TARGET.float()), r"decoder_input_ids must hold integer token ids"),
        (dict(labels=torch.full((2, 4), VOCAB)), rf"labels contains id {VOCAB}, outside the vocabulary"),
    ],
    ids=[
        "float-ids",
        "empty-batch",
        "zero-length-source",
        "1d-ids",
        "ids-past-vocab",
        "1d-mask",
        "3d-mask",
        "mask-shape",
        "float-decoder-ids",
        "labels-past-vocab",
    ],
)
def test_bad_model_input_names_the_culprit(model, inputs, message):
    arguments = {"input_ids": SOURCE, "decoder_input_ids": TARGET, **inputs}
    if "labels" in inputs:
        del arguments["decoder_input_ids"]
    with pytest.raises(ValueError, match=message):
        model(**arguments)


@pytest.mark.parametrize(
    ("keyword", "meant"), [("attention_maks", "attention_mask"), ("decoder_input_id", "decoder_input_ids")]
)
def test_a_misspelled_forward_keyword_is_an_error_not_ignored(model, keyword, meant):
    arguments = {"input_ids": SOURCE, "decoder_input_ids": TARGET, keyword: torch.ones(2, 5)}
    with pytest.raises(TypeError, match=rf"unexpected keyword argument '{keyword}' \(did you mean '{meant}'\?\)"):
        model(**arguments)


def test_a_source_longer_than_the_learned_position_table_is_named():
    model = tiny_model(tiny_config(position_embedding_type="learned", max_position_embeddings=8))
    with pytest.raises(ValueError, match=r"12 positions does not fit the learned position table of .*=8 rows"):
        model(input_ids=random_tokens(2, 12, seed=0), decoder_input_ids=TARGET)


def test_labels_that_are_all_ignored_give_a_zero_loss_and_zero_gradients(model):
    loss = model(input_ids=SOURCE, labels=torch.full((2, 4), -100)).loss
    loss.backward()
    gradients = [p.grad for p in model.parameters() if p.grad is not None]
    assert loss.item() == 0.0 and gradients and all(torch.equal(g, torch.zeros_like(g)) for g in gradients)
    model.zero_grad(set_to_none=True)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        (dict(num_beams=0), r"num_beams=0 must be 1 \(greedy or sampling\) or more"),
        (dict(pad_token_id=VOCAB), rf"pad_token_id={VOCAB} is outside the vocabulary \[0, {VOCAB}\)"),
        (dict(eos_token_id=[2, VOCAB + 5]), rf"eos_token_id={VOCAB + 5} is outside the vocabulary"),
        (dict(decoder_start_token_id=-1), r"decoder_start_token_id=-1 is outside the vocabulary"),
        (dict(max_new_tokens=0), r"max_new_tokens. must be greater than 0"),
    ],
    ids=["no-beams", "pad-past-vocab", "eos-past-vocab", "negative-start", "no-new-tokens"],
)
def test_bad_generate_options_name_the_option(model, options, message):
    with pytest.raises(ValueError, match=message):
        model.generate(SOURCE, **{"max_new_tokens": 3, **options})


@pytest.mark.parametrize("num_beams", [1, 3])
def test_negative_pad_and_eos_ids_mean_never_stop_as_in_transformers(model, num_beams):
    """transformers' generation tests (test_generate_continue_from_past_key_values) pass -1 for both: generate()
    warns that it will run to the maximum length, and does."""
    with CaptureLogger(generation_utils.logger) as logged:
        ids = model.generate(SOURCE, max_new_tokens=6, pad_token_id=-1, eos_token_id=-1, num_beams=num_beams)
    assert "eos_token_id` should consist of positive integers" in logged.out
    assert ids.shape == (2, 7) and int(ids[:, 1:].min()) >= 0  # six new tokens of the vocabulary, no padding


# ------------------------------------------------------------------ files: model folders, and the Hub offline

# .invalid never resolves (RFC 2606), so the probe fails the same way with or without a network
UNREACHABLE_ENDPOINT = "https://hub.invalid"
REPO_ID = "vanilla-transformer-tests/no-such-model"
FAST = 10.0  # seconds; huggingface_hub's retries took about a minute
PROXY_VARIABLES = ("HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy", "ALL_PROXY", "all_proxy")


@pytest.fixture(scope="module")
def saved_folder(tmp_path_factory):
    """A tiny model and its tokenizer, saved as translate and plot expect."""
    folder = tmp_path_factory.mktemp("saved")
    tokenizer = train_tokenizer([f"a small cat sat on mat number {i}" for i in range(30)], vocab_size=300)
    tiny_model(tiny_config(vocab_size=len(tokenizer))).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


@pytest.fixture
def folder(saved_folder, tmp_path):
    """A copy of the saved folder to damage."""
    return shutil.copytree(saved_folder, tmp_path / "model")


@pytest.fixture
def hub_unreachable(monkeypatch, tmp_path):
    """No offline mode, no proxy, an endpoint that cannot be reached, and empty caches; the Hub cache's folder."""
    for name in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE", "NO_PROXY", "no_proxy", *PROXY_VARIABLES):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(datasets.config, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(constants, "ENDPOINT", UNREACHABLE_ENDPOINT)
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hub-cache"))
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", tmp_path / "datasets-cache")
    return tmp_path / "hub-cache"


@pytest.fixture
def cached_repo(hub_unreachable, saved_folder):
    """REPO_ID in the Hub cache, laid out as huggingface_hub downloads it."""
    commit = "0" * 40
    repo = hub_unreachable / f"models--{REPO_ID.replace('/', '--')}"
    shutil.copytree(saved_folder, repo / "snapshots" / commit)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(commit)
    return REPO_ID


def assert_fast(started: float) -> None:
    assert time.monotonic() - started < FAST


# --- the Hub cannot be reached ---


def test_the_probe_says_unreachable_quickly_and_reachable_for_a_listening_host(hub_unreachable, monkeypatch):
    started = time.monotonic()
    assert not hub_reachable()
    assert_fast(started)
    with socket.create_server(("127.0.0.1", 0)) as server:
        monkeypatch.setattr(constants, "ENDPOINT", f"http://127.0.0.1:{server.getsockname()[1]}")
        assert hub_reachable()


def test_behind_a_proxy_the_hub_counts_as_reachable_unless_the_host_bypasses_it(hub_unreachable, monkeypatch):
    monkeypatch.setenv("HTTPS_PROXY", "http://proxy.invalid:3128")
    assert hub_reachable()  # only the proxy knows whether the Hub answers
    monkeypatch.setenv("NO_PROXY", "hub.invalid")
    assert not hub_reachable()


def test_offline_mode_reads_the_cache_without_probing(cached_repo, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(hub_connection, "hub_reachable", lambda: pytest.fail("probed the Hub in offline mode"))
    model, tokenizer = load_for_translation(cached_repo, device="cpu")
    assert model.config.vocab_size == len(tokenizer)


def test_translate_with_an_unreachable_hub_names_the_repo_at_once(hub_unreachable):
    started = time.monotonic()
    with pytest.raises(ConnectionError, match=f"cannot reach the Hugging Face Hub .* model {REPO_ID}.*HF_HUB_OFFLINE"):
        load_for_translation(REPO_ID, device="cpu")
    assert_fast(started)


def test_a_cached_repo_loads_while_the_hub_is_unreachable(cached_repo):
    started = time.monotonic()
    model, tokenizer = load_for_translation(cached_repo, device="cpu")
    assert_fast(started)
    assert model.config.vocab_size == len(tokenizer)


def test_a_corrupt_weights_file_in_the_hub_cache_names_the_repo(cached_repo, hub_unreachable):
    truncate(next(hub_unreachable.glob("models--*/snapshots/*/model.safetensors")))
    with pytest.raises(CorruptFileError, match=f"a weights file of {cached_repo} in the Hub cache is corrupt"):
        load_for_translation(cached_repo, device="cpu")


def test_a_hub_dataset_with_an_unreachable_hub_is_named_at_once(hub_unreachable):
    started = time.monotonic()
    with pytest.raises(ConnectionError, match="cannot reach the Hugging Face Hub .* dataset someone/parallel-data"):
        load_parallel("someone/parallel-data", "de", "en", "train")
    assert_fast(started)


def test_a_hub_dataset_is_read_from_the_cache_while_the_hub_is_unreachable(hub_unreachable, monkeypatch):
    offline_during_the_call = []

    def cached_load_dataset(path, name=None, split=None):
        offline_during_the_call.append(datasets.config.HF_HUB_OFFLINE)
        return datasets.Dataset.from_dict({"de": ["ein Hund"], "en": ["a dog"]})

    monkeypatch.setattr(datasets, "load_dataset", cached_load_dataset)
    assert load_parallel("someone/parallel-data", "de", "en", "train")["en"] == ["a dog"]
    assert offline_during_the_call == [True] and datasets.config.HF_HUB_OFFLINE is False


def test_a_hub_tokenizer_for_training_with_an_unreachable_hub_is_named_at_once(hub_unreachable):
    started = time.monotonic()
    with pytest.raises(ConnectionError, match="cannot reach the Hugging Face Hub .* tokenizer someone/tokenizer"):
        obtain_tokenizer(DataArguments(tokenizer="someone/tokenizer"), None)
    assert_fast(started)


def test_push_with_an_unreachable_hub_is_refused_at_once(hub_unreachable, folder):
    (folder / "README.md").write_text("# a model\n")
    started = time.monotonic()
    with pytest.raises(ConnectionError, match="cannot reach the Hugging Face Hub .* push to someone/model"):
        push_folder(folder, "someone/model", token="hf_not_a_real_token")
    assert_fast(started)


def test_plot_with_an_unreachable_hub_is_one_line_naming_the_repo(hub_unreachable, tmp_path, capsys):
    started = time.monotonic()
    assert main(["plot", "positions", "--model", REPO_ID, "--output", str(tmp_path / "p.png")]) == 2
    assert_fast(started)
    error = capsys.readouterr().err
    assert error.count("\n") == 1 and error.startswith("vanilla-transformer plot: error: cannot reach")
    assert REPO_ID in error


# --- a local folder with a file missing or corrupt ---


def test_a_missing_relative_folder_is_not_taken_for_a_hub_id(hub_unreachable, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(FileNotFoundError, match=r"^\./no-such-model: no such model folder"):
        load_for_translation("./no-such-model", device="cpu")


@pytest.mark.parametrize(
    "damage",
    [truncate, lambda path: path.write_bytes(b"\x00not safetensors" * 64), lambda path: path.write_bytes(b"")],
    ids=["truncated", "garbage", "empty"],
)
def test_a_corrupt_model_safetensors_is_named(folder, damage):
    damage(folder / "model.safetensors")
    with pytest.raises(CorruptFileError, match="corrupt or truncated") as error:
        load_for_translation(folder, device="cpu")
    assert str(folder / "model.safetensors") in str(error.value)
    assert "save the model again or download it again" in str(error.value)


@pytest.mark.parametrize(
    "model_class",
    [AutoModelForSeq2SeqLM, VanillaTransformerForConditionalGeneration, VanillaTransformerModel],
    ids=lambda cls: cls.__name__,
)
@pytest.mark.parametrize(
    "damage", [truncate, lambda path: path.write_bytes(b"\x00not safetensors" * 64)], ids=["truncated", "garbage"]
)
def test_from_pretrained_names_a_corrupt_weights_file_and_keeps_the_error_chained(folder, model_class, damage):
    damage(folder / "model.safetensors")
    with pytest.raises(CorruptFileError, match="corrupt or truncated") as error:
        model_class.from_pretrained(folder)
    assert str(error.value).startswith(f"{folder / 'model.safetensors'} is corrupt or truncated ("), error.value
    assert type(error.value.__cause__).__name__ == "SafetensorError"


def test_from_pretrained_names_the_one_corrupt_shard(saved_folder, tmp_path):
    model = AutoModelForSeq2SeqLM.from_pretrained(saved_folder)
    model.save_pretrained(tmp_path, max_shard_size="20KB")
    shards = sorted(tmp_path.glob("model-*.safetensors"))
    assert len(shards) > 2
    truncate(shards[1])
    with pytest.raises(CorruptFileError) as error:
        AutoModelForSeq2SeqLM.from_pretrained(tmp_path)
    assert str(error.value).startswith(f"{shards[1]} is corrupt or truncated ("), error.value


def test_a_missing_weight_shard_is_named(saved_folder, tmp_path):
    folder = tmp_path / "sharded"
    tokenizer = load_tokenizer(saved_folder)
    tiny_model(tiny_config(vocab_size=len(tokenizer))).save_pretrained(folder, max_shard_size="20KB")
    tokenizer.save_pretrained(folder)
    shards = sorted(folder.glob("model-*.safetensors"))
    assert len(shards) > 1
    shards[-1].unlink()
    with pytest.raises(FileNotFoundError, match=shards[-1].name):
        load_for_translation(folder, device="cpu")


@pytest.mark.parametrize(
    "damage", [truncate, lambda path: path.write_bytes(b"\x89PNG\r\n\x1a\n\x00\xff")], ids=["truncated", "garbage"]
)
def test_a_corrupt_tokenizer_json_is_named(folder, damage):
    damage(folder / "tokenizer.json")
    with pytest.raises(CorruptFileError, match="corrupt or truncated") as error:
        load_for_translation(folder, device="cpu")
    assert str(folder / "tokenizer.json") in str(error.value)


def test_a_corrupt_config_json_is_named(folder):
    truncate(folder / "config.json")
    with pytest.raises(CorruptFileError) as error:
        load_for_translation(folder, device="cpu")
    assert str(folder / "config.json") in str(error.value)


@pytest.mark.parametrize("removed", [("tokenizer.json", "tokenizer_config.json"), ("tokenizer.json",)])
def test_a_folder_without_a_tokenizer_says_so_instead_of_asking_for_sentencepiece(folder, removed):
    for name in removed:
        (folder / name).unlink()
    with pytest.raises(FileNotFoundError) as error:
        load_for_translation(folder, device="cpu")
    message = str(error.value)
    assert f"{folder} holds no tokenizer (tokenizer.json)" in message and "tokenizer.save_pretrained(" in message
    assert "sentencepiece" not in message


@pytest.mark.parametrize("removed", ["config.json", "model.safetensors"])
def test_a_folder_without_config_or_weights_names_the_missing_file(folder, removed):
    (folder / removed).unlink()
    with pytest.raises(FileNotFoundError, match=f"{folder} has no {removed}"):
        load_for_translation(folder, device="cpu")


def test_plot_names_the_corrupt_weights_and_the_missing_tokenizer(folder, tmp_path, capsys):
    output = str(tmp_path / "a.png")
    (folder / "tokenizer.json").unlink()
    (folder / "tokenizer_config.json").unlink()
    assert main(["plot", "alignment", "--model", str(folder), "--text", "a cat", "--output", output]) == 2
    error = capsys.readouterr().err
    assert error.count("\n") == 1 and f"{folder} holds no tokenizer" in error and "--tokenizer FOLDER" in error
    truncate(folder / "model.safetensors")
    assert main(["plot", "positions", "--model", str(folder), "--output", output]) == 2
    error = capsys.readouterr().err
    assert error.count("\n") == 1 and f"{folder / 'model.safetensors'} is corrupt or truncated" in error


# --- export web: refused before anything is written ---


def test_export_web_refuses_missing_offline_assets_before_it_exports_the_model(saved_folder, tmp_path, capsys):
    output, nowhere = tmp_path / "page", tmp_path / "nowhere"
    argv = ["export", "web", str(saved_folder), str(output), "--offline-assets", "--node-modules", str(nowhere)]
    assert main(argv) == 2
    assert error_line(capsys, "export") == (
        f"vanilla-transformer export: error: --offline-assets copies the page's JavaScript from {nowhere}, which lacks "
        "onnxruntime-web/dist/ort.wasm.bundle.min.mjs: run `npm ci` in the repository (package-lock.json), or pass "
        "--node-modules DIR (--debug shows the traceback)"
    )
    assert not output.exists()


# --- the command line: one line on stderr, exit code 2 ---


@pytest.mark.parametrize("case", ["unreachable hub", "corrupt weights"])
def test_translate_command_fails_with_one_line_naming_the_culprit(case, hub_unreachable, folder, monkeypatch, capsys):
    if case == "corrupt weights":
        truncate(folder / "model.safetensors")
    model, culprit = (REPO_ID, REPO_ID) if case == "unreachable hub" else (str(folder), folder / "model.safetensors")
    monkeypatch.setattr(sys, "stdin", io.StringIO("a cat\n"))
    started = time.monotonic()
    assert main(["translate", "--model", model, "--device", "cpu"]) == 2
    assert_fast(started)
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.count("\n") == 1 and captured.err.startswith("vanilla-transformer translate: error: ")
    assert str(culprit) in captured.err


# ----------------------------------------------------------------------------------------------------------- data


def test_undecodable_file_is_named(tmp_path):
    latin1 = tmp_path / "latin1.txt"
    latin1.write_bytes("ein Hund\nzwei\r\nStraße\n".encode("latin-1"))
    with pytest.raises(ValueError, match=r"latin1\.txt, line 3: not UTF-8 text \(byte 0xdf at column 5\)"):
        read_lines(latin1)
    not_gzip = tmp_path / "train.en.gz"
    not_gzip.write_text("plain text\n")
    with pytest.raises(ValueError, match=r"train\.en\.gz: not a readable UTF-8 text file"):
        read_lines(not_gzip)


def test_mismatched_line_counts_name_both_files_and_counts(tmp_path):
    write_lines(tmp_path / "train.en", EN)
    write_lines(tmp_path / "train.de", DE[:2])
    with pytest.raises(ValueError, match=r"train\.en has 3 lines but .*train\.de has 2"):
        load_parallel(tmp_path, "en", "de")


def test_empty_file_is_named(tmp_path):
    write_lines(tmp_path / "train.en", EN)
    (tmp_path / "train.de").write_text("")
    with pytest.raises(ValueError, match=r"train\.de: empty file"):
        load_parallel(tmp_path, "en", "de")
    (tmp_path / "empty.jsonl").write_text("")
    with pytest.raises(ValueError, match=r"empty\.jsonl: empty file"):
        load_parallel(tmp_path / "empty.jsonl", "en", "de")


def test_missing_file_is_named(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"nowhere\.jsonl"):
        load_parallel(tmp_path / "nowhere.jsonl", "en", "de")
    with pytest.raises(FileNotFoundError, match=r"nowhere"):
        load_parallel(str(tmp_path / "nowhere"), "en", "de")
    write_lines(tmp_path / "train.en", EN)
    write_lines(tmp_path / "train.de", DE)
    write_lines(tmp_path / "val.en", EN)
    with pytest.raises(FileNotFoundError, match=r"val\.de"):
        load_parallel(tmp_path, "en", "de", "val")


def test_unknown_split_lists_the_available_ones(tmp_path):
    for split in ("train", "val"):
        write_lines(tmp_path / f"{split}.en", EN)
        write_lines(tmp_path / f"{split}.de", DE)
    write_jsonl(tmp_path / "test.jsonl", [{"en": EN[0], "de": DE[0]}])
    with pytest.raises(
        ValueError, match=re.escape(f"unknown split 'dev' in {tmp_path}: available splits: test, train, val")
    ):
        load_parallel(tmp_path, "en", "de", "dev")


def test_unknown_language_lists_the_available_ones(tmp_path):
    write_lines(tmp_path / "train.en", EN)
    write_lines(tmp_path / "train.de", DE)
    with pytest.raises(
        ValueError, match=r"unknown language 'fr': no .*train\.fr \(or \.gz\); available languages: de, en"
    ):
        load_parallel(tmp_path, "en", "fr")
    table = write_jsonl(tmp_path / "pairs.jsonl", [{"id": 1, "en": EN[0], "de": DE[0]}])
    with pytest.raises(ValueError, match=r"unknown language 'fr' in .*pairs\.jsonl: available columns: id, en, de"):
        load_parallel(table, "en", "fr")


def test_bad_records_name_the_file_and_line(tmp_path):
    broken = write_lines(tmp_path / "broken.jsonl", [json.dumps({"en": "a", "de": "b"}), "{not json"])
    with pytest.raises(ValueError, match=r"broken\.jsonl, line 2: invalid JSON"):
        load_parallel(broken, "en", "de")
    gap = write_jsonl(tmp_path / "gap.jsonl", [{"en": "a", "de": "b"}, {"en": "c", "de": None}])
    with pytest.raises(ValueError, match=r"gap\.jsonl, record 2: 'de' is None"):
        load_parallel(gap, "en", "de")


def test_a_byte_order_mark_does_not_stay_in_the_first_sentence(tmp_path):
    (tmp_path / "train.en").write_bytes("\ufeffa dog runs\na cat sleeps\n".encode())
    (tmp_path / "train.de").write_bytes("\ufeffein Hund rennt\neine Katze schläft\n".encode())
    pairs = load_parallel(tmp_path, "en", "de")
    assert pairs[0] == {"en": "a dog runs", "de": "ein Hund rennt"}
    assert read_lines(tmp_path / "train.en")[0] == "a dog runs"


def test_blank_line_pairs_are_left_out_with_a_warning_and_all_blank_files_are_an_error(tmp_path):
    (tmp_path / "train.en").write_text("a dog\n\nthree\n  \n")
    (tmp_path / "train.de").write_text("ein Hund\nzwei\n\nvier\n")
    with pytest.warns(UserWarning, match=r"3 line pair\(s\) with a blank side left out \(lines 2, 3, 4\)"):
        pairs = load_parallel(tmp_path, "en", "de")
    assert pairs["en"] == ["a dog"] and pairs["de"] == ["ein Hund"]
    (tmp_path / "test.en").write_text("\n \n")
    (tmp_path / "test.de").write_text("\n\n")
    with pytest.raises(ValueError, match=r"test.en and .*test.de hold no pair of non-blank lines"):
        load_parallel(tmp_path, "en", "de", split="test")


def test_a_csv_row_with_an_unquoted_comma_is_an_error_naming_the_line(tmp_path):
    table = tmp_path / "train.csv"
    table.write_text('en,de\n"a dog, running",ein Hund\na cat, sleeping,eine Katze\n')
    with pytest.raises(ValueError, match=r"train.csv, line 3: more values than the header has columns"):
        load_parallel(table, "en", "de")


# ---------------------------------------------------------------------------------------------- the command line


@pytest.fixture
def no_stdin(monkeypatch):
    monkeypatch.setattr(sys, "stdin", io.StringIO(""))


@pytest.fixture
def no_hub_token(monkeypatch):
    monkeypatch.delenv("HF_TOKEN", raising=False)
    monkeypatch.setattr("vanilla_transformer.hub.push.get_token", lambda: None)
    monkeypatch.setattr("vanilla_transformer.training.loop.get_token", lambda: None)


def test_a_missing_config_file_is_one_line_naming_it(tmp_path, capsys):
    assert main(["train", "--config", str(tmp_path / "missing.yaml")]) == 2
    assert "missing.yaml" in error_line(capsys, "train")


def test_a_yaml_syntax_error_names_the_file_and_line(tmp_path, capsys):
    config = tmp_path / "broken.yaml"
    config.write_text("d_model: 128\nencoder_layers: [4\n")
    assert main(["train", "--config", str(config)]) == 2
    line = error_line(capsys, "train")
    assert "broken.yaml is not valid YAML" in line and "line 2" in line and "<unicode string>" not in line


@pytest.mark.parametrize(
    ("text", "message"),
    [("d_modle: 128\n", "unknown arguments d_modle"), ("- 128\n", "must hold a mapping of argument names")],
    ids=["unknown-key", "not-a-mapping"],
)
def test_a_config_file_with_a_wrong_key_or_shape_is_named(tmp_path, capsys, text, message):
    config = tmp_path / "config.yaml"
    config.write_text(text)
    assert main(["train", "--config", str(config)]) == 2
    assert message in error_line(capsys, "train")


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--norm_type", "batchnorm"], "argument --norm_type/--norm-type: invalid choice: 'batchnorm'"),
        (["--max_steps", "ten"], "argument --max_steps/--max-steps: invalid int value: 'ten'"),
        (["--max_steps", "0"], "max_steps=0 must be 1 or more"),
        (["--max_tokens", "-1"], "max_tokens=-1 must be 1 or more"),
        (["--num_beams", "0"], "num_beams=0 must be 1 or more"),
        (["--adam_beta2", "1.5"], "adam_beta2=1.5 must be below 1"),
        (["--learning_rate", "0"], "learning_rate=0.0 must be positive"),
        (["--mixed_precision", "fp8"], "argument --mixed_precision/--mixed-precision: invalid choice: 'fp8'"),
        (["--source_lang", "de", "--target_lang", "de"], "source_lang and target_lang are both 'de'"),
        (["--dropout", "1.5"], "dropout=1.5 is invalid: must be in [0, 1)"),
        (["--save_steps", "0", "--average_last_checkpoints", "2"], "but save_steps=0 saves none"),
        (["--decay_over", "time"], "decay_over='time' needs a positive max_train_minutes"),
        (["--resume_from_checkpoint", "{tmp}/nowhere"], "--resume_from_checkpoint {tmp}/nowhere: no such checkpoint"),
        (["--resume_from_checkpoint", "{tmp}"], "not a training checkpoint (no training_state.json)"),
        (["--resume_from_checkpoint", "latest"], "--resume_from_checkpoint latest: no checkpoint under"),
        (["--push_to_hub"], "--push_to_hub needs --hub_repo_id USER/NAME"),
        (["--push_to_hub", "--hub_repo_id", "me/tiny"], "--push_to_hub needs a Hugging Face token"),
        (["--bogus_flag", "1"], "unrecognized arguments: --bogus_flag 1"),
    ],
    ids=lambda value: value[0].lstrip("-") if isinstance(value, list) else None,
)
def test_a_bad_train_flag_is_one_line_before_anything_is_loaded(
    corpus_folder, tmp_path, capsys, monkeypatch, no_hub_token, flags, message
):
    # a corpus loaded or a model built before the check would show in the log; nothing may be written either
    monkeypatch.setattr("vanilla_transformer.training.loop.prepare_corpus", lambda *_: pytest.fail("data loaded"))
    output = tmp_path / "run"
    flags = [flag.replace("{tmp}", str(tmp_path)) for flag in flags]
    argv = ["train", *tiny_train_flags(corpus_folder), "--output_dir", str(output), *flags]
    assert main(argv) == 2
    assert message.replace("{tmp}", str(tmp_path)) in error_line(capsys, "train")
    assert not output.exists() or not any(output.iterdir())


def test_a_non_empty_output_folder_is_refused_before_training_and_left_as_it_was(corpus_folder, tmp_path, capsys):
    output = tmp_path / "mine"
    output.mkdir()
    (output / "README.md").write_text("my notes")
    (output / "results.json").write_text("{}")
    assert main(["train", *tiny_train_flags(corpus_folder), "--output_dir", str(output)]) == 2
    assert "mine is not empty (README.md, results.json)" in error_line(capsys, "train")
    assert sorted(p.name for p in output.iterdir()) == ["README.md", "results.json"]
    assert (output / "README.md").read_text() == "my notes"


def test_a_model_folder_that_does_not_exist_is_named_without_a_lecture_on_repo_ids(tmp_path, capsys, no_stdin):
    assert main(["translate", "--model", str(tmp_path / "nowhere")]) == 2
    assert "nowhere: no such model folder" in error_line(capsys, "translate")


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["translate", "--model", "m", "--input", "{tmp}/nowhere.txt"], "input files not found: {tmp}/nowhere.txt"),
        (["translate", "--model", "m", "--num-beams", "x"], "argument --num-beams: invalid int value: 'x'"),
        (["translate", "--model", "m", "--device", "tpu"], "argument --device: invalid choice: 'tpu'"),
        (["translate", "--model", "{tmp}/nowhere", "--num-beams", "0"], "num_beams=0 must be a positive integer"),
        (["translate", "--model", "{tmp}/nowhere", "--batch-size", "0"], "batch_size=0 must be a positive integer"),
        (["translate", "--model", "{tmp}/nowhere", "--max-input-tokens", "0"], "max_input_tokens=0 must be"),
        (["translate"], "the following arguments are required: --model"),
        (["tokenizer", "train", "--files", "{tmp}/nowhere.txt", "--output", "{tmp}/t"], "files not found"),
        (["tokenizer", "train", "--files", "{tmp}/empty.txt", "--output", "{tmp}/t"], "no text to train the tokenizer"),
        (
            ["tokenizer", "train", "--files", "{tmp}/empty.txt", "{tmp}/blank.txt", "--output", "{tmp}/t"],
            "no text to train the tokenizer on: {tmp}/empty.txt, {tmp}/blank.txt hold nothing but empty or blank lines",
        ),
        (["tokenizer", "train", "--files", "{tmp}/text.txt", "--output", "{tmp}/t", "--vocab-size", "10"], "vocab"),
        (["push", "{tmp}/nowhere", "--repo-id", "me/tiny"], "{tmp}/nowhere: no such folder"),
        (["push", "{tmp}", "--repo-id", "me/tiny"], "is not a complete model folder; missing: model.safetensors"),
        (["push", "{tmp}"], "the following arguments are required: --repo-id"),
        (["plot", "attention", "--model", "{tmp}/nowhere", "--text", "a", "--output", "{tmp}/a.png"], "nowhere"),
        (["plot"], "the following arguments are required: plot_kind"),
        (["train", "--dataset", "{tmp}/nowhere", "--output_dir", "{tmp}/run"], "{tmp}/nowhere: no such file or"),
        (["demo", "--output-dir", "{tmp}"], "is not empty: pass --overwrite"),
        (["classify", "--dataset", "{tmp}", "--output_dir", "{tmp}/run"], "no train.tsv, .csv or .jsonl in"),
        (["classify", "--classifier_pooling", "max"], "invalid choice: 'max' (choose from 'first', 'mean')"),
        (["classify", "--max_train_minutes", "0"], "max_train_minutes=0.0 must be positive"),
        (["bogus"], "invalid choice: 'bogus'"),
    ],
    ids=lambda value: "-".join(value[:2]) if isinstance(value, list) else None,
)
def test_every_command_says_what_is_wrong_in_one_line(tmp_path, capsys, no_stdin, argv, message):
    (tmp_path / "empty.txt").write_text("")
    (tmp_path / "blank.txt").write_text("\n  \n\t\n")
    (tmp_path / "text.txt").write_text("a dog runs\n")
    argv = [argument.replace("{tmp}", str(tmp_path)) for argument in argv]
    assert main(argv) == 2
    line = capsys.readouterr().err.strip()
    named = "vanilla-transformer" if argv[0] == "bogus" else f"vanilla-transformer {argv[0]}"
    assert len(line.splitlines()) == 1 and line.startswith(named), line
    assert message.replace("{tmp}", str(tmp_path)) in line, line


def required_arguments(parser=None, path=()) -> Iterator[tuple[tuple[str, ...], list[str], list[str]]]:
    """(subcommand path, required options, required positionals) of every command and command group of the CLI."""
    parser = parser or build_parser()
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            if path and action.required:
                yield path, [], [action.dest]
            for name, subparser in action.choices.items():
                yield from required_arguments(subparser, (*path, name))
            return
    options = [action.option_strings[0] for action in parser._actions if action.option_strings and action.required]
    positionals = [action.dest for action in parser._actions if not action.option_strings and action.nargs != "..."]
    yield path, options, positionals


def left_out_cases() -> Iterator[tuple[list[str], list[str]]]:
    """Each command with each combination of its required arguments left out: (argv with placeholders, left out).
    Positionals fill in order, so only trailing ones can be left out."""
    for path, options, positionals in required_arguments():
        for kept_positionals in range(len(positionals) + 1):
            for kept_options in itertools.chain.from_iterable(
                itertools.combinations(options, n) for n in range(len(options) + 1)
            ):
                left_out = [*(o for o in options if o not in kept_options), *positionals[kept_positionals:]]
                if left_out:
                    given = [*(["{tmp}/given"] * kept_positionals), *(a for o in kept_options for a in (o, "{tmp}/x"))]
                    yield [*path, *given], left_out


# Required only with another option: nothing argparse can check
CONDITIONALLY_REQUIRED = [
    (["plot", "positions", "--kind", "learned", "--output", "{tmp}/x.png"], ["--model"]),
    (["plot", "masks", "--text", "a dog", "--output", "{tmp}/x.png"], ["--tokenizer", "--model"]),
    # HfArgumentParser's own required fields, which the command's argparse entry passes on
    (["translate-corpus"], ["--model", "--output_dir"]),
    (["translate-corpus", "--model", "{tmp}/m"], ["--output_dir"]),
    (["translate-corpus", "--output_dir", "{tmp}/o"], ["--model"]),
]


@pytest.mark.parametrize(
    ("argv", "left_out"), [*left_out_cases(), *CONDITIONALLY_REQUIRED], ids=lambda value: "-".join(value)
)
def test_a_required_option_left_out_is_named_in_one_line(tmp_path, capsys, no_stdin, argv, left_out):
    argv = [argument.replace("{tmp}", str(tmp_path)) for argument in argv]
    assert main(argv) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1, lines
    assert lines[0].startswith(f"vanilla-transformer {argv[0]}") and ": error: " in lines[0], lines[0]
    assert any(name in lines[0] for name in left_out), lines[0]


def test_a_handler_that_exits_with_a_message_says_it_in_one_line(monkeypatch, capsys):
    def exits(args):
        raise SystemExit("the reason")

    monkeypatch.setattr("vanilla_transformer.cli.run", exits)
    assert main(["translate"]) == 2
    assert error_line(capsys, "translate").endswith("error: the reason")


@pytest.mark.parametrize("how", ["flag", "environment"])
def test_debug_shows_the_traceback(tmp_path, monkeypatch, how):
    argv = ["train", "--config", str(tmp_path / "missing.yaml")]
    if how == "flag":
        argv.append("--debug")
    else:
        monkeypatch.setenv("VANILLA_TRANSFORMER_DEBUG", "1")
    with pytest.raises(FileNotFoundError, match="missing.yaml"):
        main(argv)


# --------------------------------------------------------- checkpoints, kills, interrupts, and the end of a run


def test_a_corrupt_training_state_is_named_on_resume(corpus_folder, tmp_path):
    output = tmp_path / "run"
    TrainingRun(*tiny_arguments(corpus_folder, output, max_steps=2, save_steps=2)).run()
    state = output / "checkpoints" / "step-2" / "training_state.json"
    assert json.loads(state.read_text())["step"] == 2  # our state is JSON, not a pickle
    state.write_text('{"step": 2, "epo')
    resumed = tiny_arguments(corpus_folder, output, max_steps=4, resume_from_checkpoint="latest")
    with pytest.raises(ValueError, match=r"step-2/training_state.json is corrupt"), pytest.warns(UserWarning):
        TrainingRun(*resumed).run()


def train_with_checkpoints(corpus_folder, output, *flags) -> None:
    """`vanilla-transformer train` of the tiny model for 4 steps into `output`, saving step-2 and step-4."""
    argv = ["train", *tiny_train_flags(corpus_folder), "--output_dir", str(output), "--max_steps", "4"]
    assert main([*argv, "--save_steps", "2", *flags]) == 0


@pytest.fixture(scope="module")
def trained_run(corpus_folder, tmp_path_factory):
    output = tmp_path_factory.mktemp("checkpointed") / "run"
    train_with_checkpoints(corpus_folder, output)
    return output


@pytest.fixture
def run_copy(trained_run, tmp_path):
    return Path(shutil.copytree(trained_run, tmp_path / "run"))


def resume_argv(corpus_folder, output, checkpoint, *flags) -> list[str]:
    return [
        "train",
        *tiny_train_flags(corpus_folder),
        "--output_dir",
        str(output),
        "--max_steps",
        "6",
        "--save_steps",
        "2",
        "--resume_from_checkpoint",
        str(checkpoint),
        *flags,
    ]


DAMAGED_FILES = ["model.safetensors", "optimizer.bin", "scheduler.bin", "random_states_0.pkl", "config.json"]


@pytest.mark.parametrize("damaged", DAMAGED_FILES)
def test_latest_leaves_out_a_checkpoint_with_a_damaged_file_naming_it(corpus_folder, run_copy, capsys, damaged):
    truncate(run_copy / "checkpoints" / "step-4" / damaged)
    with pytest.warns(UserWarning, match=rf"checkpoint step-4 left out, it does not load: .*step-4/{damaged}"):
        assert main(resume_argv(corpus_folder, run_copy, "latest")) == 0
    assert "at step 2" in capsys.readouterr().out  # resumed from step-2, the newest that loads
    assert json.loads((run_copy / "checkpoints" / "step-6" / "training_state.json").read_text())["step"] == 6


@pytest.mark.parametrize("damaged", DAMAGED_FILES)
def test_a_named_checkpoint_that_does_not_load_is_one_line_naming_the_file(
    corpus_folder, run_copy, capsys, monkeypatch, damaged
):
    monkeypatch.setattr("vanilla_transformer.training.loop.prepare_corpus", lambda *_: pytest.fail("data loaded"))
    checkpoint = run_copy / "checkpoints" / "step-4"
    truncate(checkpoint / damaged)
    assert main(resume_argv(corpus_folder, run_copy, checkpoint)) == 2
    line = error_line(capsys, "train")
    assert f"step-4/{damaged} is corrupt or truncated" in line, line


def test_resuming_with_other_switches_names_each_before_anything_is_loaded(
    corpus_folder, run_copy, capsys, monkeypatch
):
    monkeypatch.setattr("vanilla_transformer.training.loop.prepare_corpus", lambda *_: pytest.fail("data loaded"))
    argv = resume_argv(corpus_folder, run_copy, "latest", "--d_model", "32", "--norm_placement", "pre")
    assert main(argv) == 2
    line = error_line(capsys, "train")
    expected = "checkpoint step-4 was trained with d_model=16, norm_placement='post'; this run has d_model=32, "
    assert expected + "norm_placement='pre'" in line, line


@pytest.mark.parametrize(
    ("started_with", "resumed_with", "named"),
    [
        (
            ["--freeze", "encoder"],
            ["--freeze", "decoder"],
            "trained with --freeze encoder; this run has --freeze decoder",
        ),
        (["--freeze", "encoder"], [], "trained with --freeze encoder; this run has --freeze (none)"),
        (["--lora_r", "4"], ["--lora_r", "8"], "trained with --lora_r 4; this run has --lora_r 8"),
        (
            ["--lora_r", "4"],
            ["--lora_r", "4", "--lora_alpha", "2"],
            "trained with --lora_alpha 8.0; this run has --lora_alpha 2.0",
        ),
    ],
    ids=["other-freeze", "freeze-dropped", "other-lora-rank", "other-lora-alpha"],
)
def test_resuming_a_fine_tuning_run_with_other_trained_parts_names_the_flag_before_anything_loads(
    corpus_folder, trained_run, tmp_path, capsys, monkeypatch, started_with, resumed_with, named
):
    if "--lora_r" in started_with:
        pytest.importorskip("peft")
    output = tmp_path / "fine"
    train_with_checkpoints(corpus_folder, output, "--from_model", str(trained_run), *started_with)
    capsys.readouterr()
    before = {path.name: path.read_bytes() for path in (output / "checkpoints" / "step-4").iterdir()}
    monkeypatch.setattr("accelerate.Accelerator.load_state", lambda *_: pytest.fail("weights loaded"))
    monkeypatch.setattr("vanilla_transformer.training.loop.prepare_corpus", lambda *_: pytest.fail("data loaded"))
    argv = resume_argv(corpus_folder, output, "latest", "--from_model", str(trained_run), *resumed_with)
    assert main(argv) == 2
    line = error_line(capsys, "train")
    assert f"checkpoint step-4 was {named}: resume with the checkpoint's flags, or start a new run" in line, line
    assert {path.name: path.read_bytes() for path in (output / "checkpoints" / "step-4").iterdir()} == before


def test_resuming_with_another_tokenizer_names_the_vocabulary_before_the_weights_load(
    corpus_folder, run_copy, tmp_path, capsys, monkeypatch
):
    texts = (corpus_folder / "train.en").read_text().splitlines()
    train_tokenizer(texts, vocab_size=280).save_pretrained(tmp_path / "other-tokenizer")
    monkeypatch.setattr("accelerate.Accelerator.load_state", lambda *_: pytest.fail("weights loaded"))
    argv = resume_argv(corpus_folder, run_copy, "latest", "--tokenizer", str(tmp_path / "other-tokenizer"))
    assert main(argv) == 2
    line = capsys.readouterr().err.strip().splitlines()[-1]  # after the progress of tokenizing
    assert line.startswith("vanilla-transformer train: error: ")
    assert "checkpoint step-4 was trained with vocab_size=" in line and "this run has vocab_size=" in line, line


def test_a_checkpoint_from_before_the_json_state_resumes_and_a_doctored_one_runs_no_code(tmp_path):
    legacy = tmp_path / "legacy"
    legacy.mkdir()
    saved = TrainingState(step=5, best_bleu=3.5, history=[{"step": 5, "bleu": 3.5}])
    torch.save(saved.state_dict(), legacy / "custom_checkpoint_0.pkl")  # what Accelerate wrote for us
    state = TrainingState()
    state.load(legacy)
    assert (state.step, state.best_bleu, state.history) == (5, 3.5, [{"step": 5, "bleu": 3.5}])

    doctored = tmp_path / "doctored"
    doctored.mkdir()
    torch.save({"step": Exploit(tmp_path / "exploited")}, doctored / "custom_checkpoint_0.pkl")
    with pytest.raises(Exception, match="Weights only load failed"):
        TrainingState().load(doctored)
    assert not (tmp_path / "exploited").exists()


class Exploit:
    """Unpickling this would create a file: what a doctored checkpoint could do with weights_only=False."""

    def __init__(self, path):
        self.path = str(path)

    def __reduce__(self):
        return (open, (self.path, "w"))


def test_overwrite_output_dir_does_not_average_an_earlier_runs_checkpoints(corpus_folder, tmp_path):
    output = tmp_path / "reused"
    TrainingRun(*tiny_arguments(corpus_folder, output, max_steps=6, save_steps=2)).run()
    earlier = sorted(path.name for path in (output / "checkpoints").iterdir())
    assert earlier == ["step-2", "step-4", "step-6"]
    with pytest.raises(ValueError, match="is not empty"):
        TrainingRun(*tiny_arguments(corpus_folder, output))
    arguments = tiny_arguments(corpus_folder, output, max_steps=2, save_steps=2, average_last_checkpoints=3)
    arguments[2].overwrite_output_dir = True
    results = TrainingRun(*arguments).run()
    # only this run's checkpoint is left and averaged: the earlier run's steps 4 and 6 went
    assert sorted(path.name for path in (output / "checkpoints").iterdir()) == ["step-2"]
    assert results["averaged_checkpoints"] == 1


def run_training_script(script: str, flags: list[str]) -> subprocess.CompletedProcess:
    """`script` in a fresh Python process with the train flags as its arguments: a real signal ends it."""
    return subprocess.run(
        [sys.executable, "-c", script, *flags], capture_output=True, text=True, env=QUIET_THREADS, timeout=600
    )


KILLED_WHILE_SAVING = """
import os, signal, sys
from accelerate import Accelerator
from vanilla_transformer.training import TrainingRun, parse_arguments

save_state = Accelerator.save_state

def save_state_then_die(self, output_dir=None, **kwargs):
    save_state(self, output_dir, **kwargs)
    if "step-4" in str(output_dir):
        os.kill(os.getpid(), signal.SIGKILL)  # the files are written; the checkpoint is not complete yet

Accelerator.save_state = save_state_then_die
TrainingRun(*parse_arguments(sys.argv[1:])).run()
"""


def test_a_checkpoint_cut_short_by_sigkill_is_left_out_of_latest_and_named(corpus_folder, tmp_path, capsys):
    output = tmp_path / "killed"
    flags = [*tiny_train_flags(corpus_folder), "--max_steps", "6", "--save_steps", "2", "--output_dir", str(output)]
    killed = run_training_script(KILLED_WHILE_SAVING, flags)
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-2000:]
    assert sorted(path.name for path in (output / "checkpoints").iterdir()) == [".step-4.partial", "step-2"]

    with pytest.warns(UserWarning, match=r"incomplete checkpoint\(s\) .* did not finish: \.step-4\.partial"):
        resumed = TrainingRun(*parse_arguments([*flags, "--resume_from_checkpoint", "latest"]))
    results = resumed.run()
    assert "step-2 at step 2" in capsys.readouterr().out  # resumed from the newest complete checkpoint
    assert results["train_steps"] == 6
    assert sorted(path.name for path in (output / "checkpoints").iterdir()) == ["step-2", "step-4", "step-6"]


INTERRUPTED_AT_STEP_3 = """
import os, signal, sys
from vanilla_transformer.cli import build_parser, main
from vanilla_transformer.training import TrainingRun

train_step = TrainingRun.train_step

def train_step_then_ctrl_c(self):
    result = train_step(self)
    if self.state.step == 3:
        os.kill(os.getpid(), signal.SIGINT)  # what Ctrl-C in the terminal sends, in the middle of a run
    return result

TrainingRun.train_step = train_step_then_ctrl_c
sys.exit(main(["train", *sys.argv[1:]]))
"""


def test_ctrl_c_saves_the_step_it_stopped_at_and_the_run_resumes_from_it(corpus_folder, tmp_path):
    output = tmp_path / "interrupted"
    flags = [*tiny_train_flags(corpus_folder), "--max_steps", "6", "--save_steps", "4", "--output_dir", str(output)]
    interrupted = run_training_script(INTERRUPTED_AT_STEP_3, flags)
    assert interrupted.returncode == 130, interrupted.stderr[-2000:]
    last_line = interrupted.stderr.strip().splitlines()[-1]
    assert last_line == (
        f"vanilla-transformer train: interrupted: interrupted at step 3: the run is saved in {output}/checkpoints/"
        "step-3; --resume_from_checkpoint latest continues it"
    )
    assert sorted(path.name for path in (output / "checkpoints").iterdir()) == ["step-3"]
    assert json.loads((output / "checkpoints" / "step-3" / "training_state.json").read_text())["step"] == 3
    assert not (output / "model.safetensors").exists()  # not a finished run

    results = TrainingRun(*parse_arguments([*flags, "--resume_from_checkpoint", "latest"])).run()
    assert results["train_steps"] == 6
    assert sorted(path.name for path in (output / "checkpoints").iterdir()) == ["step-3", "step-4", "step-6"]


def test_a_failed_average_at_the_end_keeps_the_last_steps_model_and_says_so(corpus_folder, tmp_path, monkeypatch):
    output = tmp_path / "run"
    save_checkpoint = TrainingRun.save_checkpoint

    def save_then_break_step_2(run):  # a disk error that damaged a checkpoint after it was written
        save_checkpoint(run)
        if run.state.step == 2:
            truncate(output / "checkpoints" / "step-2" / "model.safetensors")

    monkeypatch.setattr(TrainingRun, "save_checkpoint", save_then_break_step_2)
    run = TrainingRun(*tiny_arguments(corpus_folder, output, max_steps=4, average_last_checkpoints=2))
    with pytest.raises(RunEndedWithErrors, match=r"model is saved in .*run, but averaging the last 2 checkpoints"):
        run.run()
    final, last_step = (
        load_file(output / "model.safetensors"),
        load_file(output / "checkpoints/step-4/model.safetensors"),
    )
    assert final.keys() <= last_step.keys() and all(torch.equal(final[name], last_step[name]) for name in final)
    assert json.loads((output / "results.json").read_text())["averaged_checkpoints"] == 1
    assert (output / "README.md").is_file()


def test_a_scoring_failure_at_the_end_keeps_a_loadable_model(corpus_folder, tmp_path, monkeypatch):
    output = tmp_path / "run"
    run = TrainingRun(*tiny_arguments(corpus_folder, output, max_steps=2))
    monkeypatch.setattr(run, "evaluate", lambda *_, **__: (_ for _ in ()).throw(RuntimeError("sacrebleu broke")))
    with pytest.raises(RunEndedWithErrors, match=r"scoring the final model failed: RuntimeError: sacrebleu broke"):
        run.run()
    AutoModelForSeq2SeqLM.from_pretrained(output)
    assert "validation" not in json.loads((output / "results.json").read_text())


def test_a_failed_push_at_the_end_leaves_a_complete_folder_and_the_command_to_retry(
    corpus_folder, tmp_path, monkeypatch, capsys
):
    def unreachable(*_, **__):
        raise ConnectionError("the Hub cannot be reached")

    monkeypatch.setattr("vanilla_transformer.training.output_folder.push_folder", unreachable)
    output = tmp_path / "run"
    flags = [*tiny_train_flags(corpus_folder), "--max_steps", "2", "--output_dir", str(output)]
    assert main(["train", *flags, "--push_to_hub", "--hub_repo_id", "me/tiny", "--hub_token", "hf_x"]) == 2
    line = capsys.readouterr().err.strip().splitlines()[-1]
    assert f"publishing the folder (`vanilla-transformer push {output} --repo-id me/tiny` retries) failed" in line
    assert "ConnectionError: the Hub cannot be reached" in line
    assert missing_model_files(output) == [] and (output / "results.json").is_file()


# ------------------------------------------------------------------ starting from a trained model (--from_model)


def write_marian_config(folder: Path, **fields) -> Path:
    """A Marian model folder's config.json alone: what --from_model reads before any weight."""
    from transformers import MarianConfig

    MarianConfig(vocab_size=64, d_model=16, encoder_layers=1, decoder_layers=1, **fields).save_pretrained(folder)
    return folder


def other_tokenizer(folder: Path) -> Path:
    train_tokenizer([f"ein ganz anderer satz {i}" for i in range(40)], vocab_size=290).save_pretrained(folder)
    return folder


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--from_model", "{tmp}/notes"], "notes has no config.json, so it is no saved model folder"),
        (["--from_model", "{tmp}/nowhere"], "nowhere: no such model folder"),
        (["--from_model", "{marian}"], "MarianConfig activation_function='tanh' (the converter takes swish"),
        (
            ["--from_model", "{run}", "--d_model", "32"],
            "fixes the architecture, and this run sets it otherwise: d_model=32 where the model has 16",
        ),  # fmt: skip
        (
            ["--from_model", "{run}", "--d_model", "32", "--norm_placement", "pre"],
            "d_model=32 where the model has 16; norm_placement='pre' where the model has 'post'",
        ),
        (["--from_model", "{run}", "--freeze", "bogus"], "freeze='bogus' names no part of the model: the parts are"),
        (["--from_model", "{run}", "--freeze", "encoder:3"], "freeze='encoder:3': the model's encoder has 1 layer, so"),
        (["--from_model", "{run}", "--lora_r", "2", "--freeze", "encoder"], "LoRA trains its adapters alone"),
        (["--lora_r", "2"], "lora_r=2 trains adapters on a trained model: pass --from_model"),
        (
            ["--from_model", "{run}", "--output_dir", "{run}", "--overwrite_output_dir"],
            "holds the model the run starts",
        ),
        (
            ["--from_model", "{run}/checkpoints/step-4", "--output_dir", "{run}", "--overwrite_output_dir"],
            "holds the model the run",
        ),
        (["--from_model", "{run}", "--mix_dataset", "{tmp}/french"], "mix_dataset='{tmp}/french' needs mix_ratio"),
        (
            ["--from_model", "{run}", "--mix_dataset", "{tmp}/french", "--mix_ratio", "0.2"],
            "mix_dataset {tmp}/french: unknown language 'de': no {tmp}/french/train.de (or .gz); available languages: "
            "en, fr",
        ),  # fmt: skip
        (["--from_model", "{run}", "--mix_ratio", "1.5", "--mix_dataset", "{tmp}/french"], "must be between 0 and 1"),
        (["--extra_eval_datasets", "validation={tmp}/french:train"], "extra_eval_datasets names validation twice"),
        (["--extra_eval_datasets", "a={tmp}/x:test", "a={tmp}/y:test"], "extra_eval_datasets names a twice"),
        (
            ["--from_model", "{run}", "--extra_eval_datasets", "{tmp}/french:dev"],
            "extra_eval_datasets {tmp}/french:dev: unknown split 'dev'",
        ),  # fmt: skip
    ],
    ids=[
        "not-a-model",
        "missing-folder",
        "marian-field",
        "architecture",
        "two-switches",
        "freeze-unknown",
        "freeze-too-many-layers",
        "lora-and-freeze",
        "lora-without-model",
        "output-is-the-model",
        "output-above-the-model",
        "mix-without-ratio",
        "mix-other-languages",
        "mix-ratio",
        "extra-set-validation",
        "extra-set-twice",
        "extra-set-split",
    ],  # fmt: skip
)
def test_a_bad_start_is_one_line_and_nothing_is_lost(
    corpus_folder, trained_run, tmp_path, capsys, monkeypatch, flags, message
):
    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "README.md").write_text("not a model")
    write_marian_config(tmp_path / "marian", activation_function="tanh")
    (tmp_path / "french").mkdir()
    write_lines(tmp_path / "french" / "train.en", ["one", "two"])
    write_lines(tmp_path / "french" / "train.fr", ["un", "deux"])
    run = Path(shutil.copytree(trained_run, tmp_path / "run"))
    before = {path: path.read_bytes() for path in run.rglob("*") if path.is_file()}
    # refused before the corpus is read (a corpus read or a model built first would be work lost)
    monkeypatch.setattr("vanilla_transformer.training.loop.prepare_corpus", lambda *_: pytest.fail("data loaded"))
    places = {"{tmp}": str(tmp_path), "{run}": str(run), "{marian}": str(tmp_path / "marian")}
    flags = [re.sub("|".join(map(re.escape, places)), lambda m: places[m.group()], flag) for flag in flags]
    output = tmp_path / "fine"
    argv = ["train", *tiny_train_flags(corpus_folder), "--output_dir", str(output), *flags]
    assert main(argv) == 2
    assert message.replace("{tmp}", str(tmp_path)) in error_line(capsys, "train")
    assert not output.exists()
    assert {path: path.read_bytes() for path in run.rglob("*") if path.is_file()} == before


def test_a_start_on_an_unreachable_hub_is_named_at_once(corpus_folder, hub_unreachable, tmp_path, capsys):
    started = time.monotonic()
    argv = ["train", *tiny_train_flags(corpus_folder), "--output_dir", str(tmp_path / "fine")]
    assert main([*argv, "--from_model", "someone/opus-mt-xx-yy"]) == 2
    line = error_line(capsys, "train")
    assert "cannot reach the Hugging Face Hub" in line and "fetch model someone/opus-mt-xx-yy" in line
    assert_fast(started)
    assert not (tmp_path / "fine").exists()


def test_a_tokenizer_other_than_the_models_is_refused_naming_both(corpus_folder, trained_run, tmp_path, capsys):
    other = other_tokenizer(tmp_path / "other-tokenizer")
    argv = ["train", *tiny_train_flags(corpus_folder), "--from_model", str(trained_run)]
    # tiny_train_flags names the corpus's tokenizer, which is the model's: accepted
    assert main([*argv, "--output_dir", str(tmp_path / "same"), "--max_steps", "1"]) == 0
    capsys.readouterr()
    assert main([*argv, "--output_dir", str(tmp_path / "fine"), "--tokenizer", str(other)]) == 2
    line = error_line(capsys, "train")
    assert f"--tokenizer {other} (" in line and f"is not the tokenizer of --from_model {trained_run} (" in line
    assert "leave --tokenizer out" in line and not (tmp_path / "fine").exists()


def test_a_prepared_folder_of_another_tokenizer_is_refused(corpus_folder, trained_run, tmp_path, capsys):
    flags = [*tiny_train_flags(corpus_folder), "--cache_dir", str(tmp_path / "cache")]
    flags[flags.index("--tokenizer") + 1] = str(other_tokenizer(tmp_path / "other-tokenizer"))
    assert main(["prepare", *flags]) == 0
    prepared = next((tmp_path / "cache").glob("[!.]*[!n]"))  # the prepared folder, not file_digests.json
    capsys.readouterr()
    argv = ["train", *tiny_train_flags(corpus_folder), "--output_dir", str(tmp_path / "fine")]
    argv[argv.index("--tokenizer") : argv.index("--tokenizer") + 2] = []
    assert main([*argv, "--dataset", str(prepared), "--from_model", str(trained_run)]) == 2
    assert "was prepared with another tokenizer than this run's" in error_line(capsys, "train")


def test_lora_without_peft_names_the_extra(corpus_folder, trained_run, tmp_path, capsys, monkeypatch):
    import importlib.util

    find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "peft" else find_spec(name, *a))
    argv = ["train", *tiny_train_flags(corpus_folder), "--output_dir", str(tmp_path / "fine")]
    assert main([*argv, "--from_model", str(trained_run), "--lora_r", "4"]) == 2
    line = error_line(capsys, "train")
    assert "LoRA (--lora_r) needs peft, which is not installed" in line and "vanilla-transformer[lora]" in line


def test_weights_that_do_not_fit_the_config_are_refused_not_left_at_random(
    corpus_folder, trained_run, tmp_path, capsys
):
    start = Path(shutil.copytree(trained_run, tmp_path / "start"))
    weights = load_file(start / "model.safetensors")
    from safetensors.torch import save_file

    save_file({name: tensor for name, tensor in weights.items() if "layers.0.feed_forward" not in name},
              start / "model.safetensors", metadata={"format": "pt"})  # fmt: skip
    argv = ["train", *tiny_train_flags(corpus_folder), "--output_dir", str(tmp_path / "fine")]
    assert main([*argv, "--from_model", str(start)]) == 2
    line = error_line(capsys, "train")
    assert "its weights do not fit its config (missing keys: " in line and "feed_forward" in line


# ------------------------------------------------------------------------ the prepared corpus and the data loader


def prepare_into(corpus_folder, cache: Path) -> Path:
    """`vanilla-transformer prepare` of the numbers corpus into `cache`; the prepared folder."""
    assert main(["prepare", *tiny_train_flags(corpus_folder), "--cache_dir", str(cache)]) == 0
    (folder,) = [path for path in cache.iterdir() if (path / "corpus.json").is_file()]
    return folder


def cut_to_a_third(path: Path) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 3])


def test_a_damaged_file_in_the_corpus_cache_is_prepared_again_with_a_warning_naming_it(corpus_folder, tmp_path):
    cache = tmp_path / "cache"
    folder = prepare_into(corpus_folder, cache)
    size = (folder / "train.arrow").stat().st_size
    cut_to_a_third(folder / "train.arrow")
    flags = [*tiny_train_flags(corpus_folder), "--cache_dir", str(cache), "--output_dir", str(tmp_path / "run")]
    damaged = rf"the prepared corpus {re.escape(str(folder))} is damaged: .*train\.arrow holds {size // 3:,} bytes"
    with pytest.warns(UserWarning, match=damaged + rf", and the preparation wrote {size:,}; it is prepared again"):
        assert main(["train", *flags]) == 0
    assert (folder / "train.arrow").stat().st_size == size  # prepared again, in the same place
    assert sorted(path.name for path in cache.iterdir()) == [folder.name, "file_digests.json"]  # nothing else left


@pytest.mark.parametrize("damage", ["cut", "deleted", "tokenizer cut"])
def test_a_damaged_prepared_folder_given_as_dataset_is_one_line_naming_the_file_and_the_remedy(
    corpus_folder, tmp_path, capsys, damage
):
    folder = prepare_into(corpus_folder, tmp_path / "cache")
    damaged = folder / ("tokenizer/tokenizer.json" if damage == "tokenizer cut" else "train.arrow")
    if damage == "deleted":
        damaged.unlink()
    else:
        cut_to_a_third(damaged)
    capsys.readouterr()
    argv = ["train", *tiny_train_flags(corpus_folder), "--dataset", str(folder), "--output_dir", str(tmp_path / "run")]
    assert main(argv) == 2
    line = error_line(capsys, "train")
    assert f"the prepared corpus {folder} is damaged: {damaged}" in line
    assert "is missing" in line if damage == "deleted" else "bytes, and the preparation wrote" in line
    assert "prepare it again (vanilla-transformer prepare" in line and "or pass the data files as --dataset" in line


KILLED_WHILE_PREPARING = """
import os, signal, sys
from vanilla_transformer.cli import main
from vanilla_transformer.training import corpus

def tokenize_then_die(*args, **kwargs):
    os.kill(os.getpid(), signal.SIGKILL)  # an OOM kill, a lost node: no code of ours runs after it

corpus.tokenize = tokenize_then_die
sys.exit(main(["prepare", *sys.argv[1:]]))
"""


def test_a_killed_preparation_leaves_nothing_behind_after_the_next_one(corpus_folder, tmp_path):
    cache = tmp_path / "cache"
    flags = [*tiny_train_flags(corpus_folder), "--cache_dir", str(cache)]
    killed = run_training_script(KILLED_WHILE_PREPARING, flags)
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-2000:]
    left = sorted(path.name for path in cache.iterdir() if path.name.startswith(".") and "partial" in path.name)
    assert [name.rsplit(".", 1)[-1] for name in left] == ["partial", "lock"]  # what the kill left
    with pytest.warns(UserWarning, match=r"removed .*\.partial, left by a preparation that did not finish") as said:
        prepare_into(corpus_folder, cache)
    assert len([warning for warning in said if "left by a preparation" in str(warning.message)]) == 1
    assert not [path for path in cache.iterdir() if "partial" in path.name]


def test_the_partial_folder_of_a_preparation_still_running_is_left_alone(corpus_folder, tmp_path):
    import fcntl

    # another preparation, running (here, on another host of a shared disk): its partial folder, and its lock held
    # (from this process: flock conflicts between two opens of the file)
    other = tmp_path / "cache" / ".0123456789abcdef0123.999999.partial"
    other.mkdir(parents=True)
    (other / "train.text.arrow").write_bytes(b"half written")
    lock = other.with_name(other.name + ".lock")
    lock.write_text("")
    with open(lock) as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        prepare_into(corpus_folder, tmp_path / "cache")
        assert (other / "train.text.arrow").read_bytes() == b"half written" and lock.exists()
    # its process gone (the lock free), the next run removes it
    with pytest.warns(UserWarning, match="999999.partial, left by a preparation that did not finish"):
        prepare_into(corpus_folder, tmp_path / "cache")
    assert not other.exists() and not lock.exists()


KILLED_LOADER_WORKER = """
import os, signal, sys
from vanilla_transformer.cli import main
from vanilla_transformer.training import TrainingRun

train_step = TrainingRun.train_step

def train_step_then_kill_the_worker(self):
    if self.state.step == 3:
        for worker in self.micro_batches._workers:  # the loader's worker processes
            os.kill(worker.pid, signal.SIGKILL)  # as the out-of-memory killer does
    return train_step(self)

TrainingRun.train_step = train_step_then_kill_the_worker
sys.exit(main(["train", *sys.argv[1:]]))
"""


def test_a_killed_data_loader_worker_is_one_line_saying_the_checkpoint_is_intact_and_how_to_resume(
    corpus_folder, tmp_path
):
    output = tmp_path / "run"
    flags = [*tiny_train_flags(corpus_folder), "--max_steps", "8", "--save_steps", "2", "--output_dir", str(output)]
    # one micro-batch ahead: the steps after the kill need the dead worker, whichever of torch's ways notices it
    loader = ["--dataloader_num_workers", "1", "--dataloader_prefetch_factor", "1"]
    failed = run_training_script(KILLED_LOADER_WORKER, [*flags, *loader])
    assert failed.returncode == 2, failed.stderr[-2000:]
    line = failed.stderr.strip().splitlines()[-1]
    assert re.fullmatch(
        r"vanilla-transformer train: error: a data loader worker died \(pid \d+, killed by signal SIGKILL \(Killed\)\) "
        rf"after step 3; the last checkpoint, {re.escape(str(output / 'checkpoints' / 'step-2'))}, is intact: "
        r"--resume_from_checkpoint latest continues the run \(the out-of-memory killer sends SIGKILL: .*\) "
        r"\(--debug shows the traceback\)",
        line,
    ), line
    assert "Traceback" not in failed.stderr
    resumed = run_training_script(
        "import sys; from vanilla_transformer.cli import main; sys.exit(main(['train', *sys.argv[1:]]))",
        [*flags, "--resume_from_checkpoint", "latest"],
    )
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    assert json.loads((output / "results.json").read_text())["train_steps"] == 8


def test_a_worker_that_torch_only_saw_gone_or_did_not_see_is_named_with_the_signal_its_exit_code_holds():
    import multiprocessing

    from vanilla_transformer.training.batches import worker_death

    # torch says "exited unexpectedly" when its loader finds the worker gone before the SIGCHLD handler speaks
    worker = multiprocessing.get_context("fork").Process(target=time.sleep, args=(60,))
    worker.start()
    os.kill(worker.pid, signal.SIGKILL)
    worker.join(10)
    gone = RuntimeError(f"DataLoader worker (pid(s) {worker.pid}) exited unexpectedly")
    assert worker_death(gone, [worker]) == f"pid {worker.pid}, killed by signal SIGKILL (Killed)"
    assert worker_death(gone) == f"pid {worker.pid}, exited unexpectedly"  # no process to ask
    # or the pipe from it broke under a read, and torch said nothing of the worker
    broken = ConnectionResetError(104, "Connection reset by peer")
    assert worker_death(broken, [worker]) == f"pid {worker.pid}, killed by signal SIGKILL (Killed)"
    assert worker_death(broken) is None and worker_death(RuntimeError("CUDA out of memory"), []) is None


# ----------------------------------------------------------------------------------------- shortlist


def test_a_shortlist_for_the_other_direction_is_refused_before_the_corpus_is_prepared(
    corpus_teacher, corpus_folder, tmp_path, capsys, monkeypatch
):
    folder = _copy_folder(corpus_teacher, tmp_path / "reverse")
    (folder / "README.md").write_text("---\nlanguage:\n- de\n- en\n---\n")  # it translates German into English
    monkeypatch.setattr("vanilla_transformer.shortlist.write.prepare_corpus", lambda *_: pytest.fail("data prepared"))
    argv = ["shortlist", "--model", str(folder), "--dataset", str(corpus_folder), "--test_split", ""]
    assert main(argv) == 2
    assert error_line(capsys, "shortlist").endswith(
        f"--model {folder} translates de->en (its model card), but the corpus is asked for en->de (--source_lang en "
        "--target_lang de): it translates the other way (pass --source_lang de --target_lang en) (--debug shows the "
        "traceback)"
    )
    assert not (folder / "shortlist.safetensors").exists()


# ----------------------------------------------------------------------------------------- translate-corpus


@pytest.fixture(scope="module")
def corpus_teacher(tmp_path_factory, corpus_folder) -> Path:
    """A model folder with the numbers corpus's tokenizer and a card saying en->de."""
    tokenizer = load_tokenizer(corpus_folder / "tokenizer")
    torch.manual_seed(0)
    config = VanillaTransformerConfig(vocab_size=len(tokenizer), **TINY_TRAINING_MODEL)
    model = VanillaTransformerForConditionalGeneration(config)
    model.generation_config.update(num_beams=1, max_new_tokens=3)
    folder = tmp_path_factory.mktemp("corpus_teacher")
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    (folder / "README.md").write_text("---\nlanguage:\n- en\n- de\n---\n")
    return folder


def _copy_folder(source: Path, target: Path, drop: tuple[str, ...] = ()) -> Path:
    shutil.copytree(source, target, ignore=lambda _, names: [name for name in names if name in drop])
    return target


def _reversed_card(teacher: Path, tmp_path: Path) -> list[str]:
    reverse = _copy_folder(teacher, tmp_path / "reverse")
    (reverse / "README.md").write_text("---\nlanguage:\n- de\n- en\n---\n")
    return ["--model", str(reverse)]


def _without_tokenizer(teacher: Path, tmp_path: Path) -> list[str]:
    drop = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json")
    return ["--model", str(_copy_folder(teacher, tmp_path / "bare", drop))]


def _latin1_source(corpus_folder: Path, tmp_path: Path) -> list[str]:
    data = _copy_folder(corpus_folder, tmp_path / "latin1", ("tokenizer",))
    lines = (data / "train.en").read_bytes().split(b"\n")
    lines[4] = "fünf".encode("latin-1")
    (data / "train.en").write_bytes(b"\n".join(lines))
    return ["--dataset", str(data)]


def _latin1_table(corpus_folder: Path, tmp_path: Path) -> list[str]:
    table = tmp_path / "train.jsonl"
    table.write_bytes(b'{"en": "one", "de": "eins"}\n{"en": "f\xfcnf", "de": "f\xfcnf"}\n')
    return ["--dataset", str(table)]


def _short_validation_target(corpus_folder: Path, tmp_path: Path) -> list[str]:
    data = _copy_folder(corpus_folder, tmp_path / "short", ("tokenizer",))
    lines = (data / "validation.de").read_text().splitlines()
    (data / "validation.de").write_text("".join(line + "\n" for line in lines[:-1]))  # a line lost on the way
    return ["--dataset", str(data)]


def _empty_source(corpus_folder: Path, tmp_path: Path) -> list[str]:
    data = _copy_folder(corpus_folder, tmp_path / "empty", ("tokenizer",))
    (data / "train.en").write_text("")
    return ["--dataset", str(data)]


@pytest.mark.parametrize(
    "make_flags, message",
    [
        (
            lambda teacher, data, tmp: _reversed_card(teacher, tmp),
            r"--model \S+reverse translates de->en \(its model card\), but the corpus is asked for en->de "
            r"\(--source_lang en --target_lang de\): it translates the other way \(back-translation runs",
        ),
        (lambda teacher, data, tmp: _without_tokenizer(teacher, tmp), r"\S+bare holds no tokenizer \(tokenizer.json\)"),
        (
            lambda teacher, data, tmp: _latin1_source(data, tmp),
            r"\S+latin1/train.en, line 5: not UTF-8 text \(byte 0xfc at column 2\): convert the file to UTF-8",
        ),
        (
            lambda teacher, data, tmp: _latin1_table(data, tmp),
            r"\S+train.jsonl, line 2: not UTF-8 text \(byte 0xfc at column 10\)",
        ),
        (lambda teacher, data, tmp: _empty_source(data, tmp), r"\S+empty/train.en holds no text to translate"),
        (
            lambda teacher, data, tmp: _short_validation_target(data, tmp),
            r"\S+short/validation.en has 12 lines but \S+short/validation.de has 11: parallel files must be aligned "
            r"line by line",
        ),
        (lambda teacher, data, tmp: ["--train_split", "nope"], r"unknown split 'nope' in \S+: available splits: "),
        (lambda teacher, data, tmp: ["--source_lang", "fr"], r"unknown language 'fr': no \S+train.fr \(or .gz\)"),
        (lambda teacher, data, tmp: ["--chunk_sentences", "0"], r"chunk_sentences=0 must be 1 or more"),
        (lambda teacher, data, tmp: ["--engine", "tensorrt"], r"argument --engine: invalid choice: 'tensorrt'"),
        (
            lambda teacher, data, tmp: ["--test_split", "", "--translate", "test"],
            r"translate names test, but test_split is empty",
        ),
    ],
    ids=[
        "other-languages",
        "no-tokenizer",
        "not-utf8",
        "not-utf8-table",
        "empty-source",
        "carried-split-misaligned",
        "unknown-split",
        "unknown-language",
        "chunk-0",
        "engine",
        "translate-a-split-not-named",
    ],
)
def test_translate_corpus_refuses_bad_input_in_one_line_writing_nothing(
    make_flags, message, corpus_teacher, corpus_folder, tmp_path, capsys
):
    output = tmp_path / "corpus"
    base = {"--model": str(corpus_teacher), "--dataset": str(corpus_folder), "--output_dir": str(output)}
    more = make_flags(corpus_teacher, corpus_folder, tmp_path)
    for flag, value in zip(more[::2], more[1::2], strict=True):
        base[flag] = value
    argv = ["translate-corpus", *itertools.chain.from_iterable(base.items()), "--disable_progress_bar"]
    assert main(argv) == 2
    assert re.search(message, error_line(capsys, "translate-corpus")), message
    assert not output.exists()


def test_translate_corpus_refuses_a_folder_of_other_files_or_of_another_translation_and_keeps_it(
    corpus_teacher, corpus_folder, tmp_path, capsys
):
    output = tmp_path / "corpus"
    output.mkdir()
    (output / "notes.txt").write_text("mine")
    base = ["translate-corpus", "--model", str(corpus_teacher), "--dataset", str(corpus_folder)]
    base += ["--output_dir", str(output), "--disable_progress_bar", "--test_split", ""]
    assert main(base) == 2
    assert error_line(capsys, "translate-corpus").endswith(
        f"output_dir {output} is not empty (notes.txt) and holds no translation of this command: name an empty "
        "folder (--debug shows the traceback)"
    )
    assert [path.name for path in output.iterdir()] == ["notes.txt"]

    (output / "notes.txt").unlink()
    assert main(base) == 0
    capsys.readouterr()
    before = {path.name: path.read_bytes() for path in output.iterdir()}
    assert main([*base, "--num_beams", "2"]) == 2
    line = error_line(capsys, "translate-corpus")
    assert (
        f"output_dir {output} holds a translation of another corpus, model or settings (num_beams null there, 2 here)"
        in line
    )
    assert {path.name: path.read_bytes() for path in output.iterdir()} == before
    # the same command on changed text, or with a changed model, is another translation too
    changed = shutil.copytree(corpus_folder, tmp_path / "changed")
    (changed / "train.en").write_text((changed / "train.en").read_text() + "one more\n")
    changed_flags = [*base, "--dataset", str(changed)]
    assert main(changed_flags) == 2
    assert "(translated: train differ)" in error_line(capsys, "translate-corpus")
    other_model = shutil.copytree(corpus_teacher, tmp_path / "other_model")
    (other_model / "generation_config.json").write_text('{"num_beams": 3}')
    assert main([*base, "--model", str(other_model)]) == 2
    assert "(model: generation_config.json differ)" in error_line(capsys, "translate-corpus")
    assert {path.name: path.read_bytes() for path in output.iterdir()} == before
