"""examples/seq2seq_trainer.py: transformers' own Seq2SeqTrainer trains the model, evaluates by generating, saves.

One tiny training run (d_model 32, one encoder and one decoder layer, 300 numbers pairs) is shared by the tests.
"""

import importlib.util
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from transformers import AutoModelForSeq2SeqLM, AutoTokenizer, DataCollatorForSeq2Seq, Seq2SeqTrainer

from vanilla_transformer.training.evaluation import corpus_scores

REPO = Path(__file__).resolve().parents[1]
EXAMPLE = REPO / "examples" / "seq2seq_trainer.py"
MAX_STEPS, EVAL_STEPS, LOGGING_STEPS, GENERATION_MAX_LENGTH = 120, 60, 10, 24


def load_example():
    spec = importlib.util.spec_from_file_location("seq2seq_trainer_example", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def example():
    return load_example()


@pytest.fixture(scope="module")
def trained(example, tmp_path_factory):
    """(args, trainer, metrics of the final `trainer.evaluate()`) of a tiny run on the built-in numbers corpus."""
    output_dir = tmp_path_factory.mktemp("seq2seq-trainer")
    args = example.parse_args(
        [
            *("--output-dir", str(output_dir)),
            *("--demo-train-size", "300", "--demo-test-size", "16", "--demo-max-value", "999"),
            *("--d-model", "32", "--layers", "1", "--heads", "4", "--ffn-dim", "64", "--dropout", "0.0"),
            *("--max-steps", str(MAX_STEPS), "--batch-size", "16", "--learning-rate", "3e-3"),
            *("--warmup-steps", "20", "--logging-steps", str(LOGGING_STEPS), "--eval-steps", str(EVAL_STEPS)),
            *("--num-beams", "2", "--generation-max-length", str(GENERATION_MAX_LENGTH), "--quiet"),
        ]
    )
    # One intra-op thread: the model is tiny, and on a shared, busy CPU two threads waiting on each other at every
    # op make a step many times slower than one thread does.
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        trainer, metrics = example.run(args)
        yield args, trainer, metrics
    finally:
        torch.set_num_threads(threads)


def test_command_line_defaults(example):
    args = example.parse_args([])
    assert (args.data, args.src, args.tgt) == (None, "en", "de")
    assert args.max_steps > 0 and args.batch_size > 0 and args.learning_rate > 0


def test_the_stock_seq2seq_trainer_is_used(trained):
    _, trainer, _ = trained
    assert type(trainer) is Seq2SeqTrainer
    assert trainer.args.predict_with_generate and trainer.args.eval_strategy == "steps"
    assert trainer.args.generation_num_beams == 2 and trainer.args.generation_max_length == GENERATION_MAX_LENGTH
    assert trainer.args.report_to == []
    assert isinstance(trainer.data_collator, DataCollatorForSeq2Seq)
    assert trainer.processing_class is trainer.data_collator.tokenizer
    assert trainer.state.global_step == MAX_STEPS


def test_training_loss_decreases(trained):
    _, trainer, _ = trained
    losses = [entry["loss"] for entry in trainer.state.log_history if "loss" in entry]
    assert len(losses) == MAX_STEPS // LOGGING_STEPS
    assert all(np.isfinite(losses))
    first, last = losses[0], losses[-1]
    assert last < 0.7 * first, f"the training loss fell only from {first:.3f} to {last:.3f}"


def test_evaluation_during_training_and_at_the_end_reports_bleu_and_chrf(trained):
    _, trainer, metrics = trained
    evaluations = [entry for entry in trainer.state.log_history if "eval_bleu" in entry]
    # every eval_steps during training, then the final trainer.evaluate()
    assert [entry["step"] for entry in evaluations] == [*range(EVAL_STEPS, MAX_STEPS + 1, EVAL_STEPS), MAX_STEPS]
    for name in ("eval_loss", "eval_bleu", "eval_chrf", "eval_exact_match", "eval_gen_len"):
        assert name in metrics and np.isfinite(metrics[name]), name
    assert 0.0 <= metrics["eval_bleu"] <= 100.0 and 0.0 < metrics["eval_chrf"] <= 100.0
    assert metrics["eval_loss"] < evaluations[0]["eval_loss"]  # the second half of training still helped


def test_predictions_are_generated_token_ids_that_the_scores_are_computed_from(trained, example):
    args, trainer, metrics = trained
    tokenizer, model = trainer.processing_class, trainer.model
    output = trainer.predict(trainer.eval_dataset)
    predictions = output.predictions
    # generated ids (batch, length), not teacher-forced logits (batch, length, vocab)
    assert predictions.ndim == 2 and np.issubdtype(predictions.dtype, np.integer)
    # Seq2SeqTrainer pads them to the model's generation_config.max_length; generate() stops at the trainer's
    assert len(predictions) == len(trainer.eval_dataset) and predictions.shape[1] <= GENERATION_MAX_LENGTH
    assert (predictions[:, 0] == model.config.decoder_start_token_id).all()  # each one starts as generate() starts
    assert ((predictions == -100) | ((predictions >= 0) & (predictions < len(tokenizer)))).all()

    hypotheses = example.decode(tokenizer, predictions)
    assert all(isinstance(text, str) and text for text in hypotheses)
    references = example.decode(tokenizer, output.label_ids)
    assert all(references)

    scores = corpus_scores(hypotheses, references)
    assert output.metrics["test_bleu"] == pytest.approx(scores["bleu"])
    assert output.metrics["test_chrf"] == pytest.approx(scores["chrf"])
    # trainer.evaluate() scored the same generations (generation is deterministic beam search)
    assert metrics["eval_bleu"] == pytest.approx(scores["bleu"])
    assert metrics["eval_chrf"] == pytest.approx(scores["chrf"])
    exact = 100.0 * np.mean(np.array(hypotheses) == np.array(references))
    assert metrics["eval_exact_match"] == pytest.approx(exact)


def test_collator_builds_decoder_inputs_with_the_models_own_shift(trained):
    _, trainer, _ = trained
    model = trainer.model
    dataset = trainer.train_dataset
    lengths = [len(labels) for labels in dataset["labels"]]
    # a batch with different target lengths, so labels get padded
    indices = [int(np.argmin(lengths)), int(np.argmax(lengths)), 0, 1]
    batch = trainer.data_collator([dataset[i] for i in indices])
    labels = batch["labels"]
    assert (labels == -100).any() and (labels[labels != -100] >= 0).all()
    assert "decoder_input_ids" in batch
    assert torch.equal(
        batch["decoder_input_ids"], model.prepare_decoder_input_ids_from_labels(labels=labels.to(model.device)).cpu()
    )
    assert (batch["decoder_input_ids"][:, 0] == model.config.decoder_start_token_id).all()
    assert not (batch["decoder_input_ids"] == -100).any()
    # the batches the trainer trains on are built the same way
    train_batch = next(iter(trainer.get_train_dataloader()))
    assert torch.equal(
        train_batch["decoder_input_ids"].cpu(),
        model.prepare_decoder_input_ids_from_labels(labels=train_batch["labels"]).cpu(),
    )


def test_saved_folder_reloads_with_the_auto_classes_and_generates(trained):
    args, trainer, _ = trained
    folder = Path(args.output_dir)
    assert (folder / "model.safetensors").is_file() and (folder / "tokenizer.json").is_file()
    model = AutoModelForSeq2SeqLM.from_pretrained(folder).eval()
    tokenizer = AutoTokenizer.from_pretrained(folder)
    assert type(model) is type(trainer.model)
    trained_weights = trainer.model.state_dict()
    for name, tensor in model.state_dict().items():
        assert torch.equal(tensor, trained_weights[name].cpu()), name

    sources = ["forty-two", "seven hundred thirteen"]
    assert tokenizer(sources)["input_ids"] == trainer.processing_class(sources)["input_ids"]
    inputs = tokenizer(sources, return_tensors="pt", padding=True)
    with torch.no_grad():
        generated = model.generate(**inputs, num_beams=2, max_length=GENERATION_MAX_LENGTH)
        expected = trainer.model.eval().generate(**inputs, num_beams=2, max_length=GENERATION_MAX_LENGTH)
    assert torch.equal(generated, expected.cpu())
    translations = tokenizer.batch_decode(generated, skip_special_tokens=True)
    assert len(translations) == 2 and all(text.strip() for text in translations)
