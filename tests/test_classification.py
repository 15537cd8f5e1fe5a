"""`vanilla-transformer classify`: labelled sentences from files or the Hub, transformers' Trainer, a folder that
pipelines read as training encoded, a time budget, and a start from a translator's encoder."""

import json
import random
from pathlib import Path

import pytest
import torch
from helpers import tiny_config, tiny_model
from transformers import AutoModelForSequenceClassification, AutoTokenizer, pipeline

from vanilla_transformer.cli import main
from vanilla_transformer.tokenization import train_tokenizer
from vanilla_transformer.training.classification import ClassificationArguments, label_names, load_labelled

GOOD, BAD = ["great", "fine", "lovely", "superb", "nice"], ["awful", "bad", "dull", "poor", "boring"]
FILLER = ["the", "film", "was", "a", "plot", "very", "and", "story", "truly", "movie"]
TINY_MODEL = [
    *("--d_model", "32", "--encoder_layers", "2", "--encoder_attention_heads", "2", "--encoder_ffn_dim", "64"),
    *("--decoder_layers", "1", "--decoder_attention_heads", "2", "--decoder_ffn_dim", "32", "--dropout", "0"),
]
TRAINING = [
    *("--per_device_train_batch_size", "32", "--warmup_steps", "10", "--learning_rate", "3e-3"),
    *("--logging_steps", "20", "--eval_steps", "30", "--disable_tqdm", "true", "--seed", "0"),
]


def reviews(count: int, seed: int) -> list[tuple[str, int]]:
    """Sentences whose label is told by one word among filler: separable, so a working classifier learns them."""
    rng = random.Random(seed)
    rows = []
    for _ in range(count):
        label = rng.randint(0, 1)
        words = [*rng.sample(FILLER, 4), rng.choice(GOOD if label else BAD)]
        rng.shuffle(words)
        rows.append((" ".join(words), label))
    return rows


@pytest.fixture(scope="module")
def review_folder(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("reviews")
    for split, count, seed in (("train", 400, 0), ("validation", 80, 1)):
        lines = ["sentence\tlabel", *(f"{text}\t{label}" for text, label in reviews(count, seed))]
        (folder / f"{split}.tsv").write_text("\n".join(lines) + "\n")
    return folder


@pytest.fixture(scope="module")
def trained(review_folder, tmp_path_factory) -> Path:
    output = tmp_path_factory.mktemp("classifier") / "out"
    argv = ["classify", "--dataset", str(review_folder), "--vocab_size", "300", *TINY_MODEL, *TRAINING]
    assert main([*argv, "--max_steps", "60", "--output_dir", str(output)]) == 0
    return output


def test_a_classifier_learns_a_separable_task_and_reports_its_accuracy(trained):
    results = json.loads((trained / "results.json").read_text())
    assert results["train_steps"] == 60 and results["labels"] == ["0", "1"]
    assert results["validation_accuracy"] >= 0.9


def test_the_saved_folder_reads_in_a_pipeline_as_training_encoded_it(trained, review_folder):
    tokenizer = AutoTokenizer.from_pretrained(trained)
    assert tokenizer.convert_ids_to_tokens(tokenizer("a film").input_ids)[0] == "<s>"  # the token `first` pools
    model = AutoModelForSequenceClassification.from_pretrained(trained).eval()
    classifier = pipeline("text-classification", model=model, tokenizer=tokenizer)
    texts = [text for text, _ in reviews(20, 1)]
    predicted = [int(result["label"]) for result in classifier(texts)]
    with torch.no_grad():
        logits = model(**tokenizer(texts, padding=True, return_tensors="pt")).logits
    assert predicted == logits.argmax(-1).tolist()
    assert sum(p == label for p, (_, label) in zip(predicted, reviews(20, 1), strict=True)) >= 18


def test_a_time_budget_ends_training_early(review_folder, tmp_path, monkeypatch):
    clock = iter(range(0, 10_000, 20))  # 20 s a reading: the one-minute budget is spent after three steps
    monkeypatch.setattr("vanilla_transformer.training.classification.time.monotonic", lambda: next(clock))
    argv = ["classify", "--dataset", str(review_folder), "--vocab_size", "300", *TINY_MODEL, *TRAINING]
    output = tmp_path / "out"
    assert main([*argv, "--max_steps", "500", "--max_train_minutes", "1", "--output_dir", str(output)]) == 0
    assert json.loads((output / "results.json").read_text())["train_steps"] < 10


def test_a_translators_folder_starts_a_classifier_with_its_encoder_and_tokenizer(review_folder, tmp_path):
    translator = tmp_path / "translator"
    sentences = [text for text, _ in reviews(200, 2)]
    tokenizer = train_tokenizer(sentences, vocab_size=300)
    tiny_model(tiny_config(vocab_size=len(tokenizer))).save_pretrained(translator)
    tokenizer.save_pretrained(translator)
    output = tmp_path / "out"
    argv = ["classify", "--dataset", str(review_folder), "--from_model", str(translator), *TRAINING]
    assert main([*argv, "--max_steps", "2", "--learning_rate", "1e-9", "--output_dir", str(output)]) == 0
    classifier = AutoModelForSequenceClassification.from_pretrained(output).state_dict()
    # the translator's encoder, as loading its folder into a classifier takes it
    encoder = {k: v for k, v in AutoModelForSequenceClassification.from_pretrained(translator).state_dict().items()}
    encoder = {name: tensor for name, tensor in encoder.items() if ".encoder." in f".{name}"}
    # a learning rate of 1e-9 leaves the encoder as the translator had it
    assert encoder and all(torch.allclose(classifier[name], tensor, atol=1e-6) for name, tensor in encoder.items())
    assert AutoTokenizer.from_pretrained(output).vocab_size == tokenizer.vocab_size


@pytest.mark.parametrize("file_format", ["tsv", "csv", "jsonl"])
def test_labelled_files_of_each_format_load_with_their_quotes_and_labels(tmp_path, file_format):
    rows = [('a "quoted" film', "pos"), ("dull, slow", "neg")]
    if file_format == "tsv":
        text = "sentence\tlabel\n" + "".join(f"{s}\t{label}\n" for s, label in rows)
    elif file_format == "csv":
        text = "label,sentence\n" + "".join(f'{label},"{s.replace(chr(34), chr(34) * 2)}"\n' for s, label in rows)
    else:
        text = "".join(json.dumps({"sentence": s, "label": label}) + "\n" for s, label in rows)
    (tmp_path / f"train.{file_format}").write_text(text)
    loaded = load_labelled(ClassificationArguments(dataset=str(tmp_path)), "train")
    assert list(zip(loaded["text"], loaded["label"], strict=True)) == rows
    assert label_names(loaded) == ["neg", "pos"]


def test_numeric_labels_keep_their_order_and_unknown_columns_are_named(tmp_path):
    (tmp_path / "train.tsv").write_text("sentence\tlabel\na\t10\nb\t2\nc\t0\n")
    assert label_names(load_labelled(ClassificationArguments(dataset=str(tmp_path)), "train")) == ["0", "2", "10"]
    with pytest.raises(ValueError, match=r"train.tsv has no column 'text'; its columns: sentence, label"):
        load_labelled(ClassificationArguments(dataset=str(tmp_path), text_column="text"), "train")
    with pytest.raises(ValueError, match=r"no validation.tsv, .csv or .jsonl in .*; splits there: train"):
        load_labelled(ClassificationArguments(dataset=str(tmp_path)), "validation")


@pytest.fixture
def process_state_restored():
    """Trainer's --torch_compile puts its backend into accelerate's process-wide state, where every later Accelerator
    of this test process would find it and compile its model too: the state and dynamo's caches are reset after."""
    yield
    from accelerate.state import AcceleratorState

    AcceleratorState._reset_state(True)
    torch._dynamo.reset()


def test_a_compiled_classifier_learns_as_the_eager_one_does(review_folder, trained, tmp_path, process_state_restored):
    """classify takes Trainer's own --torch_compile (here with the tracing backend alone: inductor's code generation
    takes minutes on a CPU, and tests/test_training_speed.py compiles with it)."""
    output = tmp_path / "compiled"
    argv = ["classify", "--dataset", str(review_folder), "--vocab_size", "300", *TINY_MODEL, *TRAINING]
    argv += ["--torch_compile", "--torch_compile_backend", "aot_eager"]
    assert main([*argv, "--max_steps", "60", "--output_dir", str(output)]) == 0
    compiled = json.loads((output / "results.json").read_text())
    eager = json.loads((trained / "results.json").read_text())
    assert compiled["train_steps"] == 60 and compiled["validation_accuracy"] >= 0.9
    assert abs(compiled["validation_accuracy"] - eager["validation_accuracy"]) <= 0.1  # 8 of 80 sentences
    # the saved weights are the model's own (not the compiled wrapper's names)
    assert AutoModelForSequenceClassification.from_pretrained(output).config.num_labels == 2
