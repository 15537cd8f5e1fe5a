"""Train the vanilla Transformer with transformers' own `Seq2SeqTrainer`: beam-search BLEU/chrF during evaluation.

This is the stock Hugging Face recipe, with our model in place of Marian or T5: a tokenizer trained on the training
split, the splits tokenized with `Dataset.map`, `DataCollatorForSeq2Seq` (which pads labels with -100 and builds the
decoder inputs with `model.prepare_decoder_input_ids_from_labels`), `Seq2SeqTrainingArguments(predict_with_generate=
True)` so that evaluation generates translations, and a `compute_metrics` that decodes them and scores them with
sacreBLEU. The project's own loop (`vanilla-transformer train`) adds token-budget batching, checkpoint averaging and
exact resume; this file shows that the model also works with the standard tools.

Runs offline on a CPU in about a minute: without --data it trains on a corpus built in code (numbers written in
English words -> the same numbers in German words, 0..999):

    python examples/seq2seq_trainer.py --output-dir runs/seq2seq-trainer

(On a shared or busy CPU, `OMP_NUM_THREADS=1` is often faster for a model this small.) Below a million a German
number is one word ("siebenhundertzweiundvierzig"), so on this corpus BLEU, a 4-gram score, stays 0 even for
perfect translations: read chrF and exact_match (the share of translations identical to the reference) instead.

On a folder of line-aligned `{split}.{lang}` files (train.en, train.de, val.en, val.de, optionally .gz), e.g. Multi30k:

    python examples/seq2seq_trainer.py --data ../shared/data/multi30k --validation-split val --src en --tgt de \\
        --output-dir runs/multi30k --max-steps 20000 --batch-size 64 --d-model 256 --layers 3 --vocab-size 8000

The output folder holds the model and the tokenizer; both load back with the Auto classes:

    AutoModelForSeq2SeqLM.from_pretrained("runs/seq2seq-trainer"); AutoTokenizer.from_pretrained("runs/seq2seq-trainer")
"""

from __future__ import annotations

import argparse
import json
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path

import datasets
import numpy as np
import torch
from transformers import (
    DataCollatorForSeq2Seq,
    EvalPrediction,
    PreTrainedTokenizerBase,
    Seq2SeqTrainer,
    Seq2SeqTrainingArguments,
)

from vanilla_transformer import VanillaTransformerConfig, VanillaTransformerForConditionalGeneration
from vanilla_transformer.demo.number_words import demo_splits, write_parallel_folder
from vanilla_transformer.tokenization import train_tokenizer
from vanilla_transformer.training.corpus import load_parallel
from vanilla_transformer.training.evaluation import corpus_scores


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    data = parser.add_argument_group("data")
    data.add_argument("--data", help="folder of {split}.{lang} files (default: build the offline numbers corpus)")
    data.add_argument("--src", default="en", help="source language code")
    data.add_argument("--tgt", default="de", help="target language code")
    data.add_argument("--train-split", default="train")
    data.add_argument("--validation-split", default="validation")
    data.add_argument("--max-eval-samples", type=int, default=200, help="evaluate on the first N validation pairs")
    data.add_argument("--max-length", type=int, default=128, help="truncate source and target to N tokens")
    data.add_argument("--demo-train-size", type=int, default=700, help="pairs in the built-in corpus' train split")
    data.add_argument("--demo-test-size", type=int, default=100, help="pairs in its validation and test splits")
    data.add_argument("--demo-max-value", type=int, default=999, help="largest number in the built-in corpus")
    data.add_argument("--vocab-size", type=int, default=400, help="tokenizer size (incl. 4 special + 256 bytes)")

    model = parser.add_argument_group("model")
    model.add_argument("--d-model", type=int, default=64)
    model.add_argument("--layers", type=int, default=2, help="encoder and decoder layers each")
    model.add_argument("--heads", type=int, default=4)
    model.add_argument("--ffn-dim", type=int, default=256)
    model.add_argument("--dropout", type=float, default=0.1)
    model.add_argument("--label-smoothing", type=float, default=0.1)

    training = parser.add_argument_group("training")
    training.add_argument("--output-dir", default="runs/seq2seq-trainer")
    training.add_argument("--max-steps", type=int, default=600)
    training.add_argument("--batch-size", type=int, default=32)
    training.add_argument("--learning-rate", type=float, default=2e-3)
    training.add_argument("--warmup-steps", type=int, default=100)
    training.add_argument("--weight-decay", type=float, default=0.01)
    training.add_argument("--logging-steps", type=int, default=50)
    training.add_argument("--eval-steps", type=int, default=200)
    training.add_argument("--save-steps", type=int, default=0, help="checkpoint every N steps (0: only the end)")
    training.add_argument("--num-beams", type=int, default=4, help="beam size of the evaluation translations")
    training.add_argument("--generation-max-length", type=int, default=64)
    training.add_argument("--seed", type=int, default=0)
    training.add_argument("--quiet", action="store_true", help="no progress bars")
    return parser.parse_args(argv)


def build_demo_corpus(folder: str | Path, train_size: int, test_size: int, seed: int, max_value: int) -> Path:
    """Write the offline numbers corpus (train/validation/test, en and de files) into `folder`."""
    splits = demo_splits(train_size=train_size, test_size=test_size, seed=seed, max_value=max_value)
    return write_parallel_folder(folder, splits, "en", "de")


def load_splits(
    data: str | Path, src: str, tgt: str, train_split: str = "train", validation_split: str = "validation"
) -> datasets.DatasetDict:
    """The train and validation pairs as a `DatasetDict` of `Dataset`s with the columns `src` and `tgt`."""
    return datasets.DatasetDict(
        train=load_parallel(data, src, tgt, train_split), validation=load_parallel(data, src, tgt, validation_split)
    )


def build_tokenizer(train: datasets.Dataset, src: str, tgt: str, vocab_size: int) -> PreTrainedTokenizerBase:
    """A joint source+target BPE tokenizer trained on the training split only."""
    return train_tokenizer([*train[src], *train[tgt]], vocab_size=vocab_size)


def tokenize_splits(
    splits: datasets.DatasetDict, tokenizer: PreTrainedTokenizerBase, src: str, tgt: str, max_length: int
) -> datasets.DatasetDict:
    """input_ids, attention_mask and labels (the target ids, ending in </s>) of every pair, via `Dataset.map`."""

    def tokenize(batch: dict[str, list[str]]) -> dict[str, list[list[int]]]:
        return tokenizer(batch[src], text_target=batch[tgt], max_length=max_length, truncation=True)

    return splits.map(tokenize, batched=True, remove_columns=[src, tgt], desc="tokenizing")


def build_model(
    tokenizer: PreTrainedTokenizerBase,
    d_model: int = 64,
    layers: int = 2,
    heads: int = 4,
    ffn_dim: int = 256,
    dropout: float = 0.1,
    label_smoothing: float = 0.1,
    max_position_embeddings: int = 512,
) -> VanillaTransformerForConditionalGeneration:
    """A freshly initialised post-norm Transformer sized to the tokenizer, with its special token ids."""
    config = VanillaTransformerConfig(
        vocab_size=len(tokenizer),
        d_model=d_model,
        encoder_layers=layers,
        decoder_layers=layers,
        encoder_attention_heads=heads,
        decoder_attention_heads=heads,
        encoder_ffn_dim=ffn_dim,
        decoder_ffn_dim=ffn_dim,
        dropout=dropout,
        label_smoothing=label_smoothing,
        max_position_embeddings=max_position_embeddings,
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        decoder_start_token_id=tokenizer.bos_token_id,
    )
    return VanillaTransformerForConditionalGeneration(config)


def decode(tokenizer: PreTrainedTokenizerBase, ids: np.ndarray) -> list[str]:
    """Text of a batch of token ids; -100 (the padding of labels and of concatenated predictions) is read as pad."""
    ids = np.where(np.asarray(ids) == -100, tokenizer.pad_token_id, ids)
    return [text.strip() for text in tokenizer.batch_decode(ids, skip_special_tokens=True)]


def make_compute_metrics(tokenizer: PreTrainedTokenizerBase) -> Callable[[EvalPrediction], dict[str, float]]:
    """`compute_metrics` for `predict_with_generate=True`: predictions are generated token ids, not logits."""

    def compute_metrics(prediction: EvalPrediction) -> dict[str, float]:
        predictions = prediction.predictions
        if isinstance(predictions, tuple):
            predictions = predictions[0]
        hypotheses = decode(tokenizer, predictions)
        references = decode(tokenizer, prediction.label_ids)
        scores = corpus_scores(hypotheses, references)
        generated_tokens = np.count_nonzero((predictions != tokenizer.pad_token_id) & (predictions != -100), axis=-1)
        exact = np.mean([hypothesis == reference for hypothesis, reference in zip(hypotheses, references, strict=True)])
        return {
            "bleu": scores["bleu"],
            "chrf": scores["chrf"],
            "exact_match": 100.0 * float(exact),
            "gen_len": float(np.mean(generated_tokens)),
        }

    return compute_metrics


def build_trainer(
    model: VanillaTransformerForConditionalGeneration,
    tokenizer: PreTrainedTokenizerBase,
    tokenized: datasets.DatasetDict,
    args: argparse.Namespace,
) -> Seq2SeqTrainer:
    """A `Seq2SeqTrainer` that generates (beam search) when it evaluates and scores the text with sacreBLEU."""
    training_args = Seq2SeqTrainingArguments(
        output_dir=args.output_dir,
        max_steps=args.max_steps,
        per_device_train_batch_size=args.batch_size,
        per_device_eval_batch_size=args.batch_size,
        learning_rate=args.learning_rate,
        lr_scheduler_type="inverse_sqrt",  # the paper's schedule: linear warmup, then 1/sqrt(step) decay
        warmup_steps=args.warmup_steps,
        weight_decay=args.weight_decay,
        adam_beta2=0.98,
        logging_strategy="steps",
        logging_steps=args.logging_steps,
        eval_strategy="steps",
        eval_steps=args.eval_steps,
        save_strategy="steps" if args.save_steps else "no",
        save_steps=args.save_steps or 500,
        save_total_limit=2,
        predict_with_generate=True,
        generation_num_beams=args.num_beams,
        generation_max_length=args.generation_max_length,
        seed=args.seed,
        disable_tqdm=args.quiet,
        dataloader_num_workers=0,
        dataloader_pin_memory=torch.cuda.is_available(),  # pinning is for copies to a GPU; on a CPU it only warns
        report_to=[],
    )
    validation = tokenized["validation"]
    if args.max_eval_samples:
        validation = validation.select(range(min(args.max_eval_samples, len(validation))))
    return Seq2SeqTrainer(
        model=model,
        args=training_args,
        train_dataset=tokenized["train"],
        eval_dataset=validation,
        data_collator=DataCollatorForSeq2Seq(tokenizer, model=model),
        processing_class=tokenizer,
        compute_metrics=make_compute_metrics(tokenizer),
    )


def run(args: argparse.Namespace) -> tuple[Seq2SeqTrainer, dict[str, float]]:
    """Train, evaluate, save model and tokenizer to `args.output_dir`; returns the trainer and the final metrics."""
    with tempfile.TemporaryDirectory(prefix="numbers-") as scratch:
        data = args.data
        if data is None:  # load_parallel reads the files into memory, so the folder may go once loaded
            data = build_demo_corpus(scratch, args.demo_train_size, args.demo_test_size, args.seed, args.demo_max_value)
        splits = load_splits(data, args.src, args.tgt, args.train_split, args.validation_split)
    tokenizer = build_tokenizer(splits["train"], args.src, args.tgt, args.vocab_size)
    tokenized = tokenize_splits(splits, tokenizer, args.src, args.tgt, args.max_length)
    model = build_model(
        tokenizer,
        d_model=args.d_model,
        layers=args.layers,
        heads=args.heads,
        ffn_dim=args.ffn_dim,
        dropout=args.dropout,
        label_smoothing=args.label_smoothing,
        max_position_embeddings=max(512, args.max_length),
    )
    trainer = build_trainer(model, tokenizer, tokenized, args)
    trainer.train()
    metrics = trainer.evaluate()
    trainer.save_model(args.output_dir)  # the model, its generation config and (processing_class) the tokenizer
    return trainer, metrics


def main(argv: Sequence[str] | None = None) -> dict[str, float]:
    args = parse_args(argv)
    _, metrics = run(args)
    print(json.dumps(metrics, indent=2))
    print(f"saved the model and the tokenizer to {args.output_dir}")
    return metrics


if __name__ == "__main__":
    main()
