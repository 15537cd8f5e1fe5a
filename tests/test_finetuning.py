"""`train --from_model`: a run that starts from a trained model (one of our folders, its best/ or a checkpoint, a Marian
model or its conversion) starts at that model's own validation loss, keeps its architecture and tokenizer, trains what
it is told to (everything, all but frozen parts, LoRA adapters), replays a second corpus, scores extra evaluation sets
before and after, and resumes exactly."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
from helpers import TINY_TRAINING_MODEL, tiny_arguments
from huggingface_hub import ModelCard
from safetensors.torch import load_file
from transformers import AutoModelForSeq2SeqLM

from vanilla_transformer import VanillaTransformerForConditionalGeneration
from vanilla_transformer.inference import load_for_translation, translate
from vanilla_transformer.training import TrainingRun, parse_arguments, prepare_corpus
from vanilla_transformer.training.batches import mixed_training_pairs, seq2seq_collator
from vanilla_transformer.training.corpus import is_prepared
from vanilla_transformer.training.evaluation import validation_loss

peft = pytest.importorskip("peft")


@pytest.fixture(scope="module")
def base_run(corpus_folder, tmp_path_factory) -> Path:
    """A tiny model trained 12 steps, with best/ and checkpoints every 4 steps."""
    output = tmp_path_factory.mktemp("base") / "run"
    TrainingRun(*tiny_arguments(corpus_folder, output, max_steps=12, save_steps=4, eval_steps=4)).run()
    return output


def finetune_flags(corpus_folder: Path, start, output: Path, *flags: str) -> list[str]:
    """A 4-step run from `start` on the numbers corpus, checkpoints every 2 steps, no evaluation between."""
    return [
        "--from_model", str(start), "--dataset", str(corpus_folder), "--validation_split", "validation",
        "--test_split", "test", "--max_eval_samples", "8", "--output_dir", str(output), "--max_steps", "4",
        "--max_tokens", "256", "--warmup_steps", "2", "--learning_rate", "3e-3", "--save_steps", "2",
        "--eval_steps", "0", "--num_beams", "1", "--max_new_tokens", "8", "--report_to", "none",
        "--disable_progress_bar", "--seed", "5", *flags,
    ]  # fmt: skip


def finetune(corpus_folder, start, output, *flags) -> tuple[TrainingRun, dict]:
    run = TrainingRun(*parse_arguments(finetune_flags(corpus_folder, start, output, *flags)))
    return run, run.run()


def own_validation_loss(model, run: TrainingRun) -> float:
    """The loss of `model` on the run's (whole) validation split, computed here, apart from the run."""
    return validation_loss(
        model.eval(), run.corpus.validation, seq2seq_collator(run.tokenizer), 256, torch.device("cpu")
    )


@pytest.mark.parametrize("where", ["output", "best", "checkpoint", "checkpoint without tokenizer"])
def test_the_first_evaluation_is_the_starting_folders_own_validation_loss(corpus_folder, base_run, tmp_path, where):
    start = {"output": base_run, "best": base_run / "best"}.get(where, base_run / "checkpoints" / "step-8")
    if where == "checkpoint without tokenizer":  # saved before checkpoints carried one: the run's is found
        start = tmp_path / "run" / "checkpoints" / "step-8"
        shutil.copytree(base_run / "checkpoints" / "step-8", start)
        shutil.copytree(base_run / "best", tmp_path / "run" / "best")
        for path in start.glob("tokenizer*"):
            path.unlink()
    run, results = finetune(corpus_folder, start, tmp_path / "fine")
    first = run.state.history[0]
    assert first["step"] == 0
    # what the folder's model gives, loaded by transformers' from_pretrained, on the same data
    own = own_validation_loss(VanillaTransformerForConditionalGeneration.from_pretrained(start), run)
    assert first["loss"] == pytest.approx(own, rel=1e-6)
    # the run trained from there: the loss moved, and the results say where it started
    assert results["validation"]["loss"] != pytest.approx(own, rel=1e-6)
    assert results["from_model"] == str(start)
    assert results["evaluation_sets"]["validation"]["before"]["loss"] == first["loss"]


def test_the_architecture_and_tokenizer_come_from_the_model_and_dropout_may_change(corpus_folder, base_run, tmp_path):
    # a flag equal to the model's value is accepted; a regularisation switch is set anew
    run, _ = finetune(
        corpus_folder, base_run, tmp_path / "fine", "--d_model", str(TINY_TRAINING_MODEL["d_model"]), "--dropout", "0.3"
    )
    assert run.unwrapped.config.dropout == 0.3
    assert run.unwrapped.config.d_model == TINY_TRAINING_MODEL["d_model"]
    saved = json.loads((tmp_path / "fine" / "config.json").read_text())
    assert saved["dropout"] == 0.3
    # the run's tokenizer is the model's, not one trained on the data
    assert run.tokenizer.backend_tokenizer.to_str() == run.start.tokenizer().backend_tokenizer.to_str()
    # a switch left out keeps the model's value, not the flag's default (the paper's 0.1)
    run, _ = finetune(corpus_folder, tmp_path / "fine", tmp_path / "again")
    assert run.unwrapped.config.dropout == 0.3


def test_the_optimizer_and_schedule_start_fresh(corpus_folder, base_run, tmp_path):
    run = TrainingRun(*parse_arguments(finetune_flags(corpus_folder, base_run, tmp_path / "fine")))
    assert run.state.step == 0 and not run.optimizer.state  # nothing of the earlier run's Adam moments
    run.run()
    # a schedule of its own, 4 steps into its warm-up and decay; the base run's went on to step 12
    shape = run.scheduler.scheduler.lr_lambdas[0]
    assert run.scheduler.get_last_lr()[0] == pytest.approx(3e-3 * shape(4))
    assert shape(4) != pytest.approx(shape(16))


@pytest.mark.parametrize("how", ["freeze and replay", "lora"])
def test_a_resumed_fine_tuning_run_ends_with_the_weights_of_an_uninterrupted_one(
    corpus_folder, base_run, tmp_path, how
):
    extra = {
        "freeze and replay": ["--freeze", "encoder", "--mix_dataset", str(corpus_folder), "--mix_ratio", "0.25"],
        "lora": ["--lora_r", "4"],
    }[how]
    finetune(corpus_folder, base_run, tmp_path / "straight", *extra)
    finetune(corpus_folder, base_run, tmp_path / "split", *extra, "--max_steps", "2")
    resumed, results = finetune(
        corpus_folder, base_run, tmp_path / "split", *extra, "--resume_from_checkpoint", "latest"
    )
    # the history of the first launch (its "before") came back with the checkpoint, and no second one was scored
    assert results["train_steps"] == 4 and [entry["step"] for entry in resumed.state.history] == [0]
    straight, split = (load_file(tmp_path / name / "model.safetensors") for name in ("straight", "split"))
    assert straight.keys() == split.keys()
    for name, tensor in straight.items():
        assert torch.equal(split[name], tensor), name
    start = load_file(base_run / "model.safetensors")
    assert any(not torch.equal(start[name], tensor) for name, tensor in straight.items())


def test_frozen_parts_keep_their_weights_and_the_rest_trains(corpus_folder, base_run, tmp_path, capsys):
    run, results = finetune(corpus_folder, base_run, tmp_path / "fine", "--freeze", "embeddings", "decoder:1")
    start, end = load_file(base_run / "model.safetensors"), load_file(tmp_path / "fine" / "model.safetensors")
    frozen = ("model.shared.", "model.encoder.embeddings.", "model.decoder.embeddings.", "model.decoder.layers.0.")
    for name, tensor in end.items():
        if name.startswith(frozen):
            assert torch.equal(tensor, start[name]), name
    assert not torch.equal(end["model.encoder.layers.0.self_attn.qkv_proj.weight"],
                           start["model.encoder.layers.0.self_attn.qkv_proj.weight"])  # fmt: skip
    trainable = sum(p.numel() for p in run.unwrapped.parameters() if p.requires_grad)
    total = sum(p.numel() for p in run.unwrapped.parameters())
    assert 0 < trainable < total and results["trainable_parameters"] == trainable
    assert f"trainable parameters: {trainable:,} of {total:,}" in capsys.readouterr().out
    card = ModelCard.load(tmp_path / "fine" / "README.md").text
    assert (
        "every weight but the frozen embeddings, decoder:1" in card
        and f"| trainable parameters | {trainable} |" in card
    )


def test_lora_writes_the_merged_model_and_the_adapter_beside_it(corpus_folder, base_run, tmp_path):
    run, results = finetune(corpus_folder, base_run, tmp_path / "fine", "--lora_r", "4", "--lora_alpha", "8")
    output = tmp_path / "fine"
    merged = AutoModelForSeq2SeqLM.from_pretrained(output).eval()
    assert type(merged) is VanillaTransformerForConditionalGeneration
    assert not any("lora" in name for name in load_file(output / "model.safetensors"))
    # the adapter on the starting model computes what the merged folder computes
    adapted = peft.PeftModel.from_pretrained(
        VanillaTransformerForConditionalGeneration.from_pretrained(base_run), output / "adapter"
    ).eval()
    pairs = run.corpus.validation.select_columns(["input_ids", "labels"])
    batch = seq2seq_collator(run.tokenizer)([pairs[i] for i in range(4)])
    with torch.no_grad():
        torch.testing.assert_close(adapted(**batch).logits, merged(**batch).logits, atol=1e-5, rtol=1e-5)
    # only the adapters trained: far fewer parameters than the model has
    assert 0 < results["trainable_parameters"] < merged.num_parameters() // 4
    assert results["validation"]["loss"] == pytest.approx(own_validation_loss(merged, run), rel=1e-5)


def test_extra_evaluation_sets_are_scored_at_step_0_and_every_evaluation_and_reported(
    corpus_folder, base_run, tmp_path, capsys
):
    run, results = finetune(
        corpus_folder, base_run, tmp_path / "fine", "--eval_steps", "2", "--extra_eval_datasets",
        f"old={corpus_folder}:test", str(corpus_folder),
    )  # fmt: skip
    assert [entry["step"] for entry in run.state.history] == [0, 2, 4]
    for entry in run.state.history:
        assert set(entry["sets"]) == {"old", f"{corpus_folder.name}/validation"}
        assert {"bleu", "chrf"} <= set(entry["sets"]["old"])
    sets = results["evaluation_sets"]
    assert set(sets) == {"validation", "old", f"{corpus_folder.name}/validation"}
    for scores in sets.values():
        assert {"bleu", "chrf", "loss"} <= set(scores["before"]) and {"bleu", "chrf"} <= set(scores["after"])
    assert sets["old"]["after"] == results["extra_evaluation"]["old"]
    # the same sentences as the validation split, so the same scores
    assert sets[f"{corpus_folder.name}/validation"]["before"] == sets["validation"]["before"]
    saved = json.loads((tmp_path / "fine" / "results.json").read_text())
    assert saved["evaluation_sets"] == json.loads(json.dumps(sets))
    card = ModelCard.load(tmp_path / "fine" / "README.md").text
    assert "fine-tuned from" in card and "### Before and after fine-tuning" in card
    row = next(line for line in card.splitlines() if line.startswith("| old |"))
    assert row.count("|") == 6


def test_the_progress_output_names_each_set(corpus_folder, base_run, tmp_path, capsys):
    finetune(corpus_folder, base_run, tmp_path / "fine", "--extra_eval_datasets", f"old={corpus_folder}:test")
    out = capsys.readouterr().out
    line = next(line for line in out.splitlines() if line.startswith("step 0:"))
    assert "; old: loss" in line and "bleu" in line and "chrf" in line


def test_replay_mixes_the_asked_share_of_a_second_corpus_drawn_once(corpus_folder, tmp_path):
    data_args = tiny_arguments(corpus_folder, tmp_path)[1]
    train = prepare_corpus(data_args).train
    replay = train.select(range(30))
    joined, lengths = mixed_training_pairs(train, replay, 0.25, seed=1)
    # a quarter of the pairs are replayed: 300 of the corpus and 100 drawn from the 30 (repeated)
    assert len(joined) == len(lengths) == 400
    replayed = [joined[i]["input_ids"] for i in range(300, 400)]
    pool = [replay[i]["input_ids"] for i in range(30)]
    assert all(ids in pool for ids in replayed) and all(pool.count(ids) for ids in replayed)
    assert lengths[300:, 0].tolist() == [len(ids) for ids in replayed]
    again, _ = mixed_training_pairs(train, replay, 0.25, seed=1)
    assert [again[i]["input_ids"] for i in range(300, 400)] == replayed  # the same draw in every process
    assert mixed_training_pairs(train, None, None, seed=1)[0] is train


def test_a_replay_run_trains_on_the_mixed_pairs(corpus_folder, base_run, tmp_path):
    run, _ = finetune(corpus_folder, base_run, tmp_path / "fine", "--mix_dataset", str(corpus_folder),
                      "--mix_split", "test", "--mix_ratio", "0.5")  # fmt: skip
    assert len(run.train_pairs) == 2 * len(run.corpus.train) == len(run.plan.lengths)


def test_prepare_with_from_model_encodes_with_the_models_tokenizer(corpus_folder, base_run, tmp_path, capsys):
    from vanilla_transformer.cli import main

    flags = finetune_flags(corpus_folder, base_run, tmp_path / "fine", "--cache_dir", str(tmp_path / "cache"))
    assert main(["prepare", *flags]) == 0
    prepared = next(path for path in (tmp_path / "cache").iterdir() if is_prepared(path))
    # the prepared folder is what the run reads, and its tokenizer is the model's
    run, _ = finetune(corpus_folder, base_run, tmp_path / "fine", "--dataset", str(prepared))
    assert run.corpus.folder == prepared


# --------------------------------------------------------------------------------------------- Marian models


@pytest.fixture(scope="module")
def marian_folders(tmp_path_factory):
    """{"shared" | "separate": a MarianMTModel folder trained briefly on number words}."""
    pytest.importorskip("sentencepiece")
    from test_marian import SIZES, build_marian_folder

    root = tmp_path_factory.mktemp("marian")
    for name in SIZES:
        build_marian_folder(root / name, SIZES[name], train_steps=60)
    return {name: root / name for name in SIZES}


@pytest.mark.parametrize("vocabularies", ["shared", "separate"])
def test_a_run_from_a_marian_model_starts_at_marians_own_validation_loss(
    corpus_folder, marian_folders, tmp_path, vocabularies
):
    from transformers import MarianMTModel

    from vanilla_transformer.convert import convert_marian

    source = marian_folders[vocabularies]
    run, results = finetune(corpus_folder, source, tmp_path / "fine", "--num_beams", "2")
    marian = MarianMTModel.from_pretrained(source)
    own = own_validation_loss(marian, run)
    assert run.state.history[0]["loss"] == pytest.approx(own, rel=1e-5)
    # the corpus was encoded with Marian's SentencePiece tokenizer, its target vocabulary for the targets
    assert type(run.tokenizer).__name__ == "MarianTokenizer"
    first_pair = [(corpus_folder / f"train.{lang}").read_text().splitlines()[0] for lang in ("en", "de")]
    assert run.corpus.train[0]["input_ids"] == run.tokenizer(first_pair[0])["input_ids"]
    assert run.corpus.train[0]["labels"] == run.tokenizer(text_target=first_pair[1])["input_ids"]
    # the folder written is ours, with Marian's final logits bias (not trained) and target vocabulary
    fine = VanillaTransformerForConditionalGeneration.from_pretrained(tmp_path / "fine")
    assert fine.config.final_logits_bias and fine.config.target_vocab_size == marian.config.decoder_vocab_size
    torch.testing.assert_close(fine.final_logits_bias, marian.final_logits_bias, atol=0, rtol=0)
    # and Marian's forbidden pad token stays in the generation settings
    assert fine.generation_config.bad_words_ids == marian.generation_config.bad_words_ids
    model, tokenizer = load_for_translation(tmp_path / "fine")
    assert len(translate(model, tokenizer, ["forty-two", "seven"])) == 2
    # a folder `convert marian` wrote starts at the same loss
    convert_marian(source, tmp_path / "converted")
    run, _ = finetune(corpus_folder, tmp_path / "converted", tmp_path / "from-converted", "--max_steps", "1")
    assert run.state.history[0]["loss"] == pytest.approx(own, rel=1e-5)
    assert results["evaluation_sets"]["validation"]["before"]["loss"] == pytest.approx(own, rel=1e-5)


def test_a_hub_id_of_ours_starts_from_the_cache_when_offline(corpus_folder, base_run, tmp_path, monkeypatch):
    from huggingface_hub import constants

    cache, commit = tmp_path / "hub-cache", "0" * 40
    repo = cache / "models--someone--numbers-en-de"
    shutil.copytree(base_run, repo / "snapshots" / commit, ignore=shutil.ignore_patterns("checkpoints", "best"))
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(commit)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(cache))
    run, results = finetune(corpus_folder, "someone/numbers-en-de", tmp_path / "fine")
    own = own_validation_loss(VanillaTransformerForConditionalGeneration.from_pretrained(base_run), run)
    assert run.state.history[0]["loss"] == pytest.approx(own, rel=1e-6)
    assert results["from_model"] == "someone/numbers-en-de"


def _hub_answers() -> bool:
    from vanilla_transformer.common.hub_connection import hub_reachable, offline_mode

    return not offline_mode() and hub_reachable()


@pytest.mark.skipif(not _hub_answers(), reason="live test: the Hub is unreachable")
def test_live_opus_mt_en_de_fine_tunes_from_marians_own_loss(corpus_folder, tmp_path):
    pytest.importorskip("sentencepiece")
    from transformers import MarianMTModel

    run, results = finetune(corpus_folder, "Helsinki-NLP/opus-mt-en-de", tmp_path / "fine", "--max_steps", "2")
    own = own_validation_loss(MarianMTModel.from_pretrained("Helsinki-NLP/opus-mt-en-de"), run)
    assert run.state.history[0]["loss"] == pytest.approx(own, rel=1e-5)
    assert results["train_steps"] == 2 and (tmp_path / "fine" / "source.spm").is_file()
