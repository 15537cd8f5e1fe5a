"""The training loop: exact resume, two-process DDP equal to one process, averaging, the output folder."""

import dataclasses
import itertools
import json
import logging
import math
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from helpers import QUIET_THREADS, accelerate_two_cpu_processes, tiny_arguments, tiny_train_flags
from huggingface_hub import ModelCard
from safetensors.torch import load_file, save_file
from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

from vanilla_transformer import VanillaTransformerConfig
from vanilla_transformer.training import TrainArguments, TrainingRun, parse_arguments
from vanilla_transformer.training import loop as training_loop
from vanilla_transformer.training.arguments import argument_parser
from vanilla_transformer.training.checkpoints import average_weights
from vanilla_transformer.training.corpus import prepare_corpus

REPO = Path(__file__).resolve().parents[1]


def final_weights(output_dir: Path) -> dict[str, torch.Tensor]:
    return load_file(output_dir / "model.safetensors")


# config fields that the tokenizer decides, or that no model of ours can change
NOT_SWITCHES = {
    "vocab_size",
    "decoder_vocab_size",
    "pad_token_id",
    "bos_token_id",
    "eos_token_id",
    "decoder_start_token_id",
}
NOT_SWITCHES |= {"use_cache", "is_encoder_decoder", "classifier_pooling", "classifier_dropout"}


def test_every_config_switch_is_a_train_flag_with_the_configs_default_and_meaning():
    flags = {}
    for action in argument_parser()._actions:
        flags.setdefault(action.dest, action)  # a True boolean also has a --no_ flag
    defaults = parse_arguments([])[0]
    paper = {field.name: field.default for field in dataclasses.fields(VanillaTransformerConfig)}
    switches = [name for name in VanillaTransformerConfig.__annotations__ if name not in NOT_SWITCHES]
    assert len(switches) == 30
    for name in switches:
        assert name in flags, f"--{name} is not a train flag"
        assert flags[name].help, f"--{name} has no help"
        assert getattr(defaults, name) == paper[name], name


def test_train_flags_reach_the_model_config(corpus_folder):
    model_args, data_args, _ = parse_arguments(
        ["--position_embedding_type", "rope", "--rope_parameters", '{"rope_type": "linear", "factor": 2}']
        + ["--init_std", "0.05", "--layer_norm_eps", "1e-6", "--scale_embedding", "false"]
        + ["--label_smoothing", "0.1", "--norm_type", "rmsnorm", "--tokenizer", str(corpus_folder / "tokenizer")]
    )
    config = model_args.build_config(AutoTokenizer.from_pretrained(data_args.tokenizer))
    assert config.rope_parameters == {"rope_type": "linear", "factor": 2, "rope_theta": 10000.0}
    assert (config.init_std, config.layer_norm_eps) == (0.05, 1e-6)
    assert config.scale_embedding is False and config.label_smoothing == 0.1 and config.norm_type == "rmsnorm"
    with pytest.raises(SystemExit):
        parse_arguments(["--norm_type", "batchnorm"])  # argparse names the allowed choices


@pytest.mark.parametrize("split_punctuation", [False, True])
def test_tokenizer_trained_for_a_run_follows_the_split_punctuation_switch(corpus_folder, tmp_path, split_punctuation):
    data_args = tiny_arguments(corpus_folder, tmp_path)[1]
    data_args.tokenizer, data_args.vocab_size, data_args.split_punctuation = None, 400, split_punctuation
    pieces = prepare_corpus(data_args).tokenizer.tokenize("forty-two")
    assert ("-" in pieces) is split_punctuation, pieces


def test_resumed_run_ends_with_the_weights_of_an_uninterrupted_run(corpus_folder, tmp_path, caplog):
    corpus = prepare_corpus(tiny_arguments(corpus_folder, tmp_path)[1])
    with caplog.at_level(logging.WARNING):
        TrainingRun(*tiny_arguments(corpus_folder, tmp_path / "straight"), corpus=corpus).run()
    # checkpoints store the tied weights once without a warning per save
    assert not [record for record in caplog.records if "shared tensor" in record.getMessage()]
    TrainingRun(*tiny_arguments(corpus_folder, tmp_path / "split", max_steps=2), corpus=corpus).run()
    resumed = TrainingRun(
        *tiny_arguments(corpus_folder, tmp_path / "split", resume_from_checkpoint="latest"), corpus=corpus
    )
    assert resumed.run()["train_steps"] == 4
    straight, split = final_weights(tmp_path / "straight"), final_weights(tmp_path / "split")
    assert straight.keys() == split.keys()
    for name, tensor in straight.items():
        assert torch.equal(split[name], tensor), name
    # and training did move the weights, so equality is not trivial
    first_checkpoint = load_file(tmp_path / "split" / "checkpoints" / "step-2" / "model.safetensors")
    assert not torch.equal(first_checkpoint["model.shared.weight"], straight["model.shared.weight"])


def test_linear_schedule_decays_to_zero_at_max_steps_and_unknown_schedules_are_refused(corpus_folder, tmp_path):
    trainer = TrainingRun(*tiny_arguments(corpus_folder, tmp_path, lr_scheduler_type="linear", save_steps=0))
    peak = trainer.optimizer.param_groups[0]["initial_lr"]
    trainer.run()
    # warm-up over 2 steps, then linear decay over the remaining 2: 0 after step 4 (inverse_sqrt never is)
    assert peak > 0 and trainer.scheduler.get_last_lr()[0] == 0.0
    with pytest.raises(ValueError, match=r"lr_scheduler_type='cosine_restarts' is not one of inverse_sqrt"):
        TrainArguments(lr_scheduler_type="cosine_restarts")


def clocked_trainer(corpus_folder, output_dir, corpus, **overrides) -> TrainingRun:
    """A trainer whose clock reads one second more at every look: a budget of 0.2 minutes lasts ~12 steps."""
    arguments = dict(max_steps=1000, warmup_steps=2, lr_scheduler_type="linear", max_train_minutes=0.2, save_steps=5)
    trainer = TrainingRun(*tiny_arguments(corpus_folder, output_dir, **{**arguments, **overrides}), corpus=corpus)
    trainer.clock = itertools.count().__next__
    return trainer


def test_time_decay_reaches_zero_when_the_budget_runs_out_and_step_decay_does_not(corpus_folder, tmp_path):
    corpus = prepare_corpus(tiny_arguments(corpus_folder, tmp_path)[1])
    by_time = clocked_trainer(corpus_folder, tmp_path / "time", corpus, decay_over="time")
    by_steps = clocked_trainer(corpus_folder, tmp_path / "steps", corpus)
    peak = by_time.optimizer.param_groups[0]["initial_lr"]
    time_results, step_results = by_time.run(), by_steps.run()
    # both stopped by the clock, far short of max_steps
    assert time_results["train_steps"] == step_results["train_steps"] == 12
    assert time_results["train_seconds"] > 12
    # the last step ran at a learning rate of 0 under the clock; counted in steps, the decay had barely begun
    assert by_time.scheduler.get_last_lr()[0] == 0.0
    assert by_steps.scheduler.get_last_lr()[0] > 0.98 * peak


class ProcessKilled(Exception):
    pass


def clock_that_stops_the_process_at(reading: int):
    readings = itertools.count()

    def clock() -> int:
        now = next(readings)
        if now == reading:
            raise ProcessKilled
        return now

    return clock


def test_resumed_time_budget_run_spends_what_is_left_and_ends_like_an_uninterrupted_one(corpus_folder, tmp_path):
    corpus = prepare_corpus(tiny_arguments(corpus_folder, tmp_path)[1])
    straight = clocked_trainer(corpus_folder, tmp_path / "straight", corpus, decay_over="time").run()
    interrupted = clocked_trainer(corpus_folder, tmp_path / "split", corpus, decay_over="time")
    interrupted.clock = clock_that_stops_the_process_at(6)  # after step 5, whose checkpoint is saved
    with pytest.raises(ProcessKilled):
        interrupted.run()
    resumed = clocked_trainer(
        corpus_folder, tmp_path / "split", corpus, decay_over="time", resume_from_checkpoint="latest"
    ).run()
    # the budget counts the first launch's seconds: the resumed launch does not start a fresh 0.2 minutes
    assert resumed["train_steps"] == straight["train_steps"] == 12
    straight_weights, split_weights = final_weights(tmp_path / "straight"), final_weights(tmp_path / "split")
    for name, tensor in straight_weights.items():
        assert torch.equal(split_weights[name], tensor), name


def test_time_decay_needs_a_time_budget_and_a_schedule_that_decays():
    with pytest.raises(ValueError, match=r"decay_over='time' needs a positive max_train_minutes, got None"):
        TrainArguments(decay_over="time", lr_scheduler_type="linear")
    with pytest.raises(ValueError, match=r"needs lr_scheduler_type linear or cosine, got 'inverse_sqrt'"):
        TrainArguments(decay_over="time", max_train_minutes=5)
    with pytest.raises(ValueError, match=r"decay_over='hours' is not one of steps, time"):
        TrainArguments(decay_over="hours")


def test_output_folder_is_hub_ready_and_loads_through_the_auto_classes(corpus_folder, tmp_path):
    output = tmp_path / "run"
    TrainingRun(*tiny_arguments(corpus_folder, output, num_beams=2, average_last_checkpoints=2)).run()
    for name in (
        "model.safetensors",
        "config.json",
        "generation_config.json",
        "tokenizer.json",
        "modeling_vanilla_transformer.py",
        "configuration_vanilla_transformer.py",
        "results.json",
        "README.md",
    ):
        assert (output / name).exists(), name
    results = json.loads((output / "results.json").read_text())
    assert results["train_steps"] == 4 and results["averaged_checkpoints"] == 2
    assert {"loss", "bleu", "chrf", "bleu_lowercased"} <= set(results["validation"])
    # the card reports what results.json holds (no test split here: the validation split is scored)
    card = ModelCard.load(output / "README.md")
    scores = {result.metric_name: result.metric_value for result in card.data.eval_results}
    assert scores["BLEU4 (lowercased, 13a-tokenized)"] == results["validation"]["bleu_lowercased"]
    assert scores["sacreBLEU (cased, 13a)"] == results["validation"]["bleu"]
    assert card.data.eval_results[0].dataset_split == "validation"
    assert "| optimizer steps | 4 |" in card.text and "| checkpoints averaged into the final weights | 2 |" in card.text
    model = AutoModelForSeq2SeqLM.from_pretrained(output)
    tokenizer = AutoTokenizer.from_pretrained(output)
    assert model.generation_config.num_beams == 2 and model.generation_config.max_new_tokens == 8
    # the saved model is the average of the last two checkpoints
    checkpoints = sorted((output / "checkpoints").iterdir())
    expected = average_weights(checkpoints[-2:])
    for name, tensor in expected.items():
        torch.testing.assert_close(model.state_dict()[name], tensor)
    assert model.generate(**tokenizer(["seven"], return_tensors="pt"), max_new_tokens=3).shape[0] == 1


def test_best_checkpoint_folder_is_complete_and_holds_the_weights_of_the_best_step(corpus_folder, tmp_path):
    output = tmp_path / "run"
    results = TrainingRun(*tiny_arguments(corpus_folder, output, num_beams=2, eval_steps=2)).run()
    best = output / "best"
    model = AutoModelForSeq2SeqLM.from_pretrained(best)
    tokenizer = AutoTokenizer.from_pretrained(best)
    assert model.generation_config.num_beams == 2 and model.generation_config.max_new_tokens == 8
    assert results["best_step"] in (2, 4)
    kept = load_file(output / "checkpoints" / f"step-{results['best_step']}" / "model.safetensors")
    for name, tensor in kept.items():
        torch.testing.assert_close(model.state_dict()[name], tensor)
    assert tokenizer.decode(tokenizer("seven")["input_ids"], skip_special_tokens=True) == "seven"


def test_push_to_hub_publishes_the_output_folder_with_the_hub_options(corpus_folder, tmp_path, monkeypatch):
    pushed = {}
    monkeypatch.setattr(
        "vanilla_transformer.training.output_folder.push_folder",
        lambda folder, repo_id, **options: pushed.update(folder=folder, repo_id=repo_id, **options),
    )
    options = dict(
        push_to_hub=True,
        hub_repo_id="me/numbers",
        hub_private=True,
        hub_revision="v1",
        hub_create_pr=True,
        hub_token="hf_x",
        max_steps=1,
        save_steps=0,
    )
    TrainingRun(*tiny_arguments(corpus_folder, tmp_path / "run", **options)).run()
    assert pushed == {
        "folder": tmp_path / "run",
        "repo_id": "me/numbers",
        "private": True,
        "revision": "v1",
        "create_pr": True,
        "token": "hf_x",
    }
    with pytest.raises(ValueError, match="--push_to_hub needs --hub_repo_id"):
        TrainingRun(*tiny_arguments(corpus_folder, tmp_path / "other", push_to_hub=True))


def test_average_weights_is_the_elementwise_mean(tmp_path):
    for step, value in ((1, 1.0), (2, 2.0), (3, 6.0)):
        (tmp_path / f"step-{step}").mkdir()
        save_file({"w": torch.full((2, 2), value)}, tmp_path / f"step-{step}" / "model.safetensors")
    folders = sorted(tmp_path.iterdir())
    assert torch.equal(average_weights(folders)["w"], torch.full((2, 2), 3.0))
    (folders[0] / "model.safetensors").unlink()
    with pytest.raises(FileNotFoundError, match="step-1/model.safetensors is missing"):
        average_weights(folders)


def test_config_file_gives_defaults_and_flags_override_it(tmp_path):
    config = tmp_path / "run.yaml"
    config.write_text("d_model: 64\nmax_steps: 10\ndataset: some/folder\nnorm_placement: pre\nweight_init: normal\n")
    model_args, data_args, train_args = parse_arguments(["--config", str(config), "--max_steps", "3"])
    assert (model_args.d_model, model_args.norm_placement, train_args.max_steps) == (64, "pre", 3)
    assert model_args.weight_init == "normal"
    assert data_args.dataset == "some/folder"
    config.write_text("d_modle: 64\n")
    with pytest.raises(ValueError, match=r"unknown arguments d_modle"):
        parse_arguments(["--config", str(config)])


@pytest.mark.parametrize("recipe", sorted((REPO / "configs").glob("*.yaml")), ids=lambda path: path.name)
def test_shipped_recipes_parse_and_pass_config_validation(recipe, corpus_folder):
    # a misspelt key or a value the config refuses would otherwise surface only an hour into a benchmark run
    model_args, data_args, train_args = parse_arguments(["--config", str(recipe)])
    config = model_args.build_config(AutoTokenizer.from_pretrained(corpus_folder / "tokenizer"))
    assert (config.d_model, config.weight_init) == (model_args.d_model, model_args.weight_init)
    assert data_args.source_lang != data_args.target_lang and train_args.max_steps > 0


@pytest.mark.parametrize("keep", [True, False])
def test_cpu_trainer_keeps_freed_memory_unless_told_not_to(keep, corpus_folder, tmp_path, monkeypatch):
    calls = []
    monkeypatch.setattr(training_loop, "keep_freed_memory", lambda: calls.append(True) or True)
    TrainingRun(*tiny_arguments(corpus_folder, tmp_path, keep_freed_cpu_memory=keep, use_cpu=True))
    assert calls == ([True] if keep else [])


def test_train_with_bf16_mixed_precision_on_the_cpu_has_a_finite_loss(corpus_folder, tmp_path):
    output = tmp_path / "bf16"
    command = [sys.executable, "-m", "vanilla_transformer.cli", "train", *tiny_train_flags(corpus_folder)]
    command += ["--mixed_precision", "bf16", "--use_cpu", "--output_dir", str(output)]
    result = subprocess.run(command, capture_output=True, text=True, env=QUIET_THREADS, cwd=REPO, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    results = json.loads((output / "results.json").read_text())
    assert results["mixed_precision"] == "bf16" and results["train_steps"] == 3
    assert all(math.isfinite(results[split]["loss"]) for split in ("validation", "test"))
    assert all(torch.isfinite(tensor).all() for tensor in final_weights(output).values())
    assert "| mixed precision | bf16 |" in (output / "README.md").read_text()


def test_two_process_ddp_matches_one_process_on_the_same_global_batch(corpus_folder, tmp_path):
    single = [
        sys.executable,
        "-m",
        "vanilla_transformer.cli",
        "train",
        *tiny_train_flags(corpus_folder),
        "--output_dir",
        str(tmp_path / "one"),
        "--gradient_accumulation_steps",
        "2",
    ]
    double = [
        *accelerate_two_cpu_processes(),
        "-m",
        "vanilla_transformer.cli",
        "train",
        *tiny_train_flags(corpus_folder),
        "--output_dir",
        str(tmp_path / "two"),
    ]
    for command in (single, double):
        result = subprocess.run(command, capture_output=True, text=True, env=QUIET_THREADS, cwd=REPO, timeout=600)
        assert result.returncode == 0, result.stderr[-3000:]
    assert json.loads((tmp_path / "two" / "results.json").read_text())["processes"] == 2
    one, two = final_weights(tmp_path / "one"), final_weights(tmp_path / "two")
    for name, tensor in one.items():
        torch.testing.assert_close(two[name], tensor, atol=1e-6, rtol=1e-5, msg=name)


# The trainer outlives `run()` here, as in a user's script, so only the trainer itself can have let go of the wrapper.
DDP_WRAPPER_RELEASE_SCRIPT = """
import sys, weakref
from torch.nn.parallel import DistributedDataParallel
from vanilla_transformer.training import TrainingRun, parse_arguments

trainer = TrainingRun(*parse_arguments(sys.argv[1:]))
wrapper = weakref.ref(trainer.model)
assert isinstance(wrapper(), DistributedDataParallel), type(trainer.model)
wrapper_alive_at_end_training = []
end_training = trainer.accelerator.end_training
trainer.accelerator.end_training = lambda: wrapper_alive_at_end_training.append(wrapper() is not None) or end_training()
trainer.run()
assert wrapper_alive_at_end_training == [False], "the DDP wrapper was alive when end_training destroyed the group"
assert not isinstance(trainer.model, DistributedDataParallel)
"""


def test_a_ddp_run_releases_its_wrapper_before_the_process_group_is_destroyed(corpus_folder, tmp_path):
    # A DDP reducer that drops the last reference to a gloo group joins the group's threads holding the GIL, which
    # hung a CI run at exit once; released before end_training() destroys the group, it never holds that reference.
    script = tmp_path / "release.py"
    script.write_text(DDP_WRAPPER_RELEASE_SCRIPT)
    command = [
        *accelerate_two_cpu_processes(),
        str(script),
        *tiny_train_flags(corpus_folder),
        "--output_dir",
        str(tmp_path / "run"),
    ]
    result = subprocess.run(command, capture_output=True, text=True, env=QUIET_THREADS, cwd=REPO, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    assert json.loads((tmp_path / "run" / "results.json").read_text())["processes"] == 2


def test_a_time_budgeted_run_shows_progress_in_seconds_of_its_budget(corpus_folder, tmp_path):
    shown = dict(disable_progress_bar=False)
    arguments = tiny_arguments(corpus_folder, tmp_path / "timed", max_train_minutes=0.5, max_steps=8000, **shown)
    corpus = prepare_corpus(arguments[1])
    timed = TrainingRun(*arguments, corpus=corpus).progress_bar()
    assert (timed.total, timed.n, timed.format_dict["unit"]) == (30, 0, "s")  # not 8000 steps, an ETA of hours
    counted = TrainingRun(*tiny_arguments(corpus_folder, tmp_path / "counted", **shown), corpus=corpus).progress_bar()
    assert (counted.total, counted.format_dict["unit"]) == (4, "it")
