"""Sentence classification with the encoder alone: `vanilla-transformer classify` trains a
`VanillaTransformerForSequenceClassification` with transformers' `Trainer` on labelled sentences (a folder of
`{split}.tsv|csv|jsonl` files, or a Hub dataset such as GLUE's SST-2), reports accuracy at each evaluation, and
writes a folder that `AutoModelForSequenceClassification` and `pipeline("text-classification")` load.

A sentence is `<s> tokens </s>` (`tokenization.with_sentence_start`, saved with the tokenizer): the leading `<s>` is
the position the `first` pooling reads, as BERT's [CLS].
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import re
import time
from dataclasses import dataclass, field
from pathlib import Path

import datasets
import numpy as np
from transformers import (
    DataCollatorWithPadding,
    PreTrainedTokenizerBase,
    Trainer,
    TrainerCallback,
    TrainingArguments,
)

from ..common.hub_connection import load_dataset_or_cache
from ..common.model_folder import load_tokenizer
from ..configuration_vanilla_transformer import CLASSIFIER_POOLINGS
from ..modeling_vanilla_transformer import VanillaTransformerForSequenceClassification
from ..tokenization import VOCAB_SIZE, train_tokenizer, with_sentence_start
from .arguments import ModelArguments, TrainArgumentParser, check_at_least, check_positive, given_flags
from .compiled_step import LENGTH_MULTIPLE
from .corpus import read_records
from .output_folder import check_output_folder
from .starting_model import StartingModel

# a split's file in a dataset folder: train.tsv, validation.csv.gz, test.jsonl ...
LABELLED_FILE = re.compile(r"(?P<split>.+)\.(?P<format>tsv|csv|jsonl)(?:\.gz)?")


@dataclass
class ClassificationArguments:
    dataset: str = field(
        default="glue",
        metadata={
            "help": "a folder of {split}.tsv (text<TAB>label, a header line), .csv or .jsonl files (.gz ok), "
            "or a Hub dataset id"
        },
    )
    dataset_config: str | None = field(default="sst2", metadata={"help": "the Hub dataset's configuration"})
    text_column: str = field(default="sentence", metadata={"help": "the column of the sentences"})
    label_column: str = field(default="label", metadata={"help": "the column of the labels (names or numbers)"})
    train_split: str = field(default="train", metadata={"help": "the split trained on"})
    validation_split: str = field(default="validation", metadata={"help": "the split whose accuracy is reported"})
    max_train_samples: int | None = field(
        default=None, metadata={"help": "train on the first this many sentences of the training split at most"}
    )
    tokenizer: str | None = field(default=None, metadata={"help": "a saved tokenizer; trained on train if unset"})
    vocab_size: int = field(
        default=VOCAB_SIZE,
        metadata={
            "help": "tokens of the tokenizer trained when --tokenizer is unset (4 special and 256 byte included)"
        },
    )
    lowercase: bool = field(default=False, metadata={"help": "the tokenizer trained lowercases all text it encodes"})
    max_length: int = field(default=128, metadata={"help": "longer sentences are cut to this many tokens"})
    classifier_pooling: str = field(
        default="first",
        metadata={"help": "the sentence's vector: its first token's (<s>) or the mean", "choices": CLASSIFIER_POOLINGS},
    )
    classifier_dropout: float | None = field(default=None, metadata={"help": "default: the model's dropout"})
    max_train_minutes: float | None = field(default=None, metadata={"help": "stop training after this long"})
    overwrite_output_dir: bool = field(
        default=False, metadata={"help": "train into a non-empty output_dir, replacing what a run writes there"}
    )

    def __post_init__(self):
        check_at_least(self, 1, "max_train_samples", "vocab_size", "max_length")
        check_positive(self, "max_train_minutes")


def default_of_ours(name: str, default) -> dataclasses.Field:
    """transformers' TrainingArguments field `name` with another default, and its help."""
    return field(default=default, metadata=TrainingArguments.__dataclass_fields__[name].metadata)


@dataclass
class ClassificationTrainingArguments(TrainingArguments):
    """transformers' TrainingArguments with defaults for a small model trained from scratch."""

    output_dir: str = default_of_ours("output_dir", "outputs/classifier")
    learning_rate: float = default_of_ours("learning_rate", 5e-4)
    warmup_steps: float = default_of_ours("warmup_steps", 500)
    per_device_train_batch_size: int = default_of_ours("per_device_train_batch_size", 64)
    per_device_eval_batch_size: int = default_of_ours("per_device_eval_batch_size", 128)
    max_steps: int = default_of_ours("max_steps", 5000)
    eval_strategy: str = default_of_ours("eval_strategy", "steps")
    eval_steps: float = default_of_ours("eval_steps", 500)
    logging_steps: float = default_of_ours("logging_steps", 100)
    save_strategy: str = default_of_ours("save_strategy", "no")


def load_labelled(args: ClassificationArguments, split: str) -> datasets.Dataset:
    """The split's sentences and labels as the columns `text` and `label` (labels as they are stored)."""
    folder = Path(args.dataset)
    if folder.is_dir():
        table, source = read_folder_split(folder, split)
    elif folder.exists() or folder.suffix in (".tsv", ".csv", ".jsonl", ".gz"):
        raise ValueError(f"dataset {folder}: expected a folder of {{split}}.tsv/.csv/.jsonl files, or a Hub dataset id")
    else:
        table, source = read_hub_split(args, split)
    for column in (args.text_column, args.label_column):
        if column not in table:
            raise ValueError(f"{source} has no column {column!r}; its columns: {', '.join(table)}")
    rows = list(zip(table[args.text_column], table[args.label_column], strict=True))
    for number, (text, label) in enumerate(rows, 1):
        if not isinstance(text, str) or label in (None, ""):
            raise ValueError(f"{source}, record {number}: a text and a label are needed, got {(text, label)!r}")
    return datasets.Dataset.from_dict({"text": [text for text, _ in rows], "label": [str(label) for _, label in rows]})


def read_folder_split(folder: Path, split: str) -> tuple[dict[str, list], str]:
    """The columns of `{split}.tsv|csv|jsonl[.gz]` in `folder`, and the file's name for messages."""
    files = {
        m["split"]: (path, m["format"])
        for path in sorted(folder.iterdir())
        if (m := LABELLED_FILE.fullmatch(path.name))
    }
    if split not in files:
        raise ValueError(f"no {split}.tsv, .csv or .jsonl in {folder}; splits there: {', '.join(files) or 'none'}")
    path, file_format = files[split]
    records = list(read_records(path, file_format))
    if not records:
        raise ValueError(f"{path}: empty file")
    return {name: [record.get(name) for record in records] for name in records[0]}, str(path)


def read_hub_split(args: ClassificationArguments, split: str) -> tuple[dict[str, list], str]:
    dataset = load_dataset_or_cache(args.dataset, args.dataset_config, split=split)
    table = dataset.to_dict()
    label_feature = dataset.features.get(args.label_column)
    if isinstance(label_feature, datasets.ClassLabel):  # GLUE's labels are names behind ids
        table[args.label_column] = [label_feature.int2str(label) for label in table[args.label_column]]
    return table, f"{args.dataset} ({split})"


def label_names(train: datasets.Dataset) -> list[str]:
    """The labels of the training split in order: numbers by value (so "0", "1" keep their ids), else by name."""
    names = sorted(set(train["label"]))
    numeric = all(re.fullmatch(r"-?\d+", name) for name in names)
    return sorted(names, key=int) if numeric else names


def encode(dataset: datasets.Dataset, tokenizer, label2id: dict[str, int], max_length: int, source: str):
    unknown = sorted(set(dataset["label"]) - set(label2id))
    if unknown:
        raise ValueError(f"{source} has labels the training split has not: {', '.join(unknown)}")

    def tokenize(batch):
        encoded = tokenizer(batch["text"], truncation=True, max_length=max_length)
        return {"input_ids": encoded["input_ids"], "labels": [label2id[label] for label in batch["label"]]}

    return dataset.map(tokenize, batched=True, remove_columns=dataset.column_names, desc="tokenizing")


class TimeBudget(TrainerCallback):
    """Ends training once `minutes` of it are spent (evaluations included), after the step under way."""

    def __init__(self, minutes: float | None):
        self.seconds = None if minutes is None else 60.0 * minutes

    def on_train_begin(self, args, state, control, **kwargs):
        self.started = time.monotonic()

    def on_step_end(self, args, state, control, **kwargs):
        if self.seconds is not None and time.monotonic() - self.started > self.seconds:
            control.should_training_stop = True


def accuracy(prediction) -> dict[str, float]:
    return {"accuracy": float((np.argmax(prediction.predictions, axis=-1) == prediction.label_ids).mean())}


def build_classifier(model_args: ModelArguments, args: ClassificationArguments, tokenizer, labels: list[str]):
    labels_config = dict(
        num_labels=len(labels),
        id2label=dict(enumerate(labels)),
        label2id={name: i for i, name in enumerate(labels)},
        classifier_pooling=args.classifier_pooling,
        classifier_dropout=args.classifier_dropout,
    )
    if model_args.from_model:
        # a translator's encoder too; its architecture stays, as in `train --from_model`
        start = StartingModel.find(model_args.from_model)
        if start.marian:
            raise ValueError(
                f"--from_model {start.source} is a Marian model: `vanilla-transformer convert marian` it into one of "
                "our folders first, whose encoder a classifier can start from"
            )
        start.check_switches(model_args)
        return VanillaTransformerForSequenceClassification.from_pretrained(model_args.from_model, **labels_config)
    config = model_args.build_config(tokenizer, **labels_config)
    return VanillaTransformerForSequenceClassification._from_config(
        config, attn_implementation=model_args.attn_implementation
    )


@dataclass
class LabelledData:
    tokenizer: PreTrainedTokenizerBase
    train: datasets.Dataset  # columns input_ids, labels
    validation: datasets.Dataset
    labels: list[str]  # label id -> name


def prepare_labelled_data(args: ClassificationArguments, from_model: str | None = None) -> LabelledData:
    """Both splits read (before a tokenizer is trained, so a missing one is found at once), the tokenizer (given,
    the starting model's, or trained on the training sentences) and the encoded splits."""
    train_text = load_labelled(args, args.train_split)
    validation_text = load_labelled(args, args.validation_split)
    if args.max_train_samples is not None:
        train_text = train_text.select(range(min(args.max_train_samples, len(train_text))))
    if from_model or args.tokenizer:
        tokenizer = load_tokenizer(from_model or args.tokenizer)
    else:
        tokenizer = train_tokenizer(train_text["text"], vocab_size=args.vocab_size, lowercase=args.lowercase)
    tokenizer = with_sentence_start(tokenizer)
    labels = label_names(train_text)
    label2id = {name: i for i, name in enumerate(labels)}
    splits = [
        encode(text, tokenizer, label2id, args.max_length, f"{args.dataset} {split}")
        for text, split in ((train_text, args.train_split), (validation_text, args.validation_split))
    ]
    return LabelledData(tokenizer, *splits, labels)


def fit(
    model, data: LabelledData, training_args: TrainingArguments, callbacks: list[TrainerCallback]
) -> tuple[dict, Trainer]:
    """Train `model` with transformers' Trainer (accuracy at each evaluation), then score it on validation; the
    results, and the trainer that can save the model."""
    trainer = Trainer(
        model=model,
        args=training_args,
        train_dataset=data.train,
        eval_dataset=data.validation,
        # compiled, lengths padded to a multiple of 8: a few shapes, each compiled once, as `train --torch_compile`
        data_collator=DataCollatorWithPadding(
            data.tokenizer, pad_to_multiple_of=LENGTH_MULTIPLE if training_args.torch_compile else None
        ),
        processing_class=data.tokenizer,
        compute_metrics=accuracy,
        callbacks=callbacks,
    )
    started = time.monotonic()
    trainer.train(resume_from_checkpoint=training_args.resume_from_checkpoint)
    minutes = (time.monotonic() - started) / 60
    return {
        "validation_accuracy": trainer.evaluate()["eval_accuracy"],
        "train_steps": trainer.state.global_step,
        "train_minutes": round(minutes, 2),
        "parameters": sum(p.numel() for p in model.parameters()),
        "labels": data.labels,
    }, trainer


def classify(model_args: ModelArguments, args: ClassificationArguments, training_args: TrainingArguments) -> dict:
    """Train and evaluate a sentence classifier; the folder `training_args.output_dir` gets the model, its
    tokenizer and results.json (validation accuracy, steps, minutes)."""
    output_dir = Path(training_args.output_dir)
    check_output_folder(output_dir, bool(training_args.resume_from_checkpoint), args.overwrite_output_dir)
    data = prepare_labelled_data(args, model_args.from_model)
    model = build_classifier(model_args, args, data.tokenizer, data.labels)
    results, trainer = fit(model, data, training_args, [TimeBudget(args.max_train_minutes)])
    trainer.save_model(str(output_dir))
    (output_dir / "results.json").write_text(json.dumps(results, indent=2) + "\n")
    return results


def classify_argument_parser() -> TrainArgumentParser:
    return TrainArgumentParser(
        (ModelArguments, ClassificationArguments, ClassificationTrainingArguments), prog="vanilla-transformer classify"
    )


def add_classify_subcommand(subparsers) -> argparse.ArgumentParser:
    parser = subparsers.add_parser(
        "classify",
        help="train a sentence classifier on the encoder alone (arguments: model switches, ClassificationArguments, "
        "transformers' TrainingArguments)",
        add_help=False,
    )
    parser.add_argument("arguments", nargs=argparse.REMAINDER)
    parser.set_defaults(func=lambda args: run_classify(args.arguments))
    return parser


def run_classify(argv: list[str]) -> int:
    model_args, args, training_args = classify_argument_parser().parse_args_into_dataclasses(argv)
    model_args.given = given_flags(classify_argument_parser(), argv)
    results = classify(model_args, args, training_args)
    print({name: results[name] for name in ("validation_accuracy", "train_steps", "train_minutes")})
    return 0
