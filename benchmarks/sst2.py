"""SST-2 sentence classification from scratch on the CPU: our encoder against transformers' BERT at the same size.

Both read the same tokenizer (trained on the training sentences, `<s> sentence </s>`), the same batches in the same
order, the same learning-rate schedule and the same number of steps: ours trains for --minutes of wall time (the
budget), BERT for as many steps as ours took. Same size: layers, d_model, heads, feed-forward width, vocabulary;
each with its own usual parts (BERT: learned positions, GELU, a tanh pooler over [CLS]; ours: the switches below).

    python -m benchmarks.sst2                                  # 15 minutes for ours, then BERT: about 35 minutes
    python -m benchmarks.sst2 --minutes 1 --max-train-samples 5000   # a quick look
"""

import argparse
import sys

from .common import command_line, log, machine_summary


def parse_arguments(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", default="../shared/data/sst2", help="a folder of train/validation.tsv[.gz], or glue")
    parser.add_argument("--minutes", type=float, default=15.0, help="our training budget")
    parser.add_argument("--max-train-samples", type=int)
    parser.add_argument("--vocab-size", type=int, default=8000)
    parser.add_argument("--d-model", type=int, default=256)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--ffn", type=int, default=1024)
    parser.add_argument("--max-length", type=int, default=66, help="tokens a sentence keeps (SST-2's longest: ~66)")
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--learning-rate", type=float, default=5e-4)
    parser.add_argument("--warmup-steps", type=int, default=300)
    parser.add_argument("--max-steps", type=int, default=6000, help="the schedule's length (linear decay to it)")
    parser.add_argument("--dropout", type=float, default=0.1)
    parser.add_argument("--pooling", choices=("first", "mean"), default="first")
    parser.add_argument("--norm-placement", choices=("post", "pre"), default="post")
    parser.add_argument("--activation", default="gelu")
    parser.add_argument("--positions", default="sinusoidal")
    parser.add_argument("--output-dir", default="outputs/benchmark_sst2")
    parser.add_argument("--seed", type=int, default=0)
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_arguments(sys.argv[1:] if argv is None else argv)
    from transformers import BertConfig, BertForSequenceClassification, TrainerCallback

    from vanilla_transformer import VanillaTransformerConfig, VanillaTransformerForSequenceClassification
    from vanilla_transformer.training.classification import (
        ClassificationArguments,
        ClassificationTrainingArguments,
        TimeBudget,
        fit,
        prepare_labelled_data,
    )

    class StopAtStep(TrainerCallback):
        def __init__(self, step: int):
            self.step = step

        def on_step_end(self, arguments, state, control, **kwargs):
            control.should_training_stop = state.global_step >= self.step

    dataset = dict(dataset=args.data, dataset_config="sst2" if args.data == "glue" else None)
    data = prepare_labelled_data(
        ClassificationArguments(
            **dataset, vocab_size=args.vocab_size, max_length=args.max_length, max_train_samples=args.max_train_samples
        )
    )
    tokenizer, labels = data.tokenizer, data.labels
    label_fields = dict(
        num_labels=len(labels), id2label=dict(enumerate(labels)), label2id={n: i for i, n in enumerate(labels)}
    )
    special = dict(
        pad_token_id=tokenizer.pad_token_id, bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id
    )
    ours = VanillaTransformerForSequenceClassification(
        VanillaTransformerConfig(
            vocab_size=len(tokenizer),
            d_model=args.d_model,
            encoder_layers=args.layers,
            decoder_layers=1,
            encoder_attention_heads=args.heads,
            decoder_attention_heads=args.heads,
            encoder_ffn_dim=args.ffn,
            decoder_ffn_dim=args.ffn,
            dropout=args.dropout,
            activation_function=args.activation,
            norm_placement=args.norm_placement,
            position_embedding_type=args.positions,
            max_position_embeddings=max(args.max_length, 128),
            classifier_pooling=args.pooling,
            decoder_start_token_id=tokenizer.bos_token_id,
            **special,
            **label_fields,
        )
    )
    bert = BertForSequenceClassification(
        BertConfig(
            vocab_size=len(tokenizer),
            hidden_size=args.d_model,
            num_hidden_layers=args.layers,
            num_attention_heads=args.heads,
            intermediate_size=args.ffn,
            hidden_dropout_prob=args.dropout,
            attention_probs_dropout_prob=args.dropout,
            max_position_embeddings=max(args.max_length, 128),
            pad_token_id=tokenizer.pad_token_id,
            **label_fields,
        )
    )

    def training_arguments(name: str):
        return ClassificationTrainingArguments(
            output_dir=f"{args.output_dir}/{name}",
            learning_rate=args.learning_rate,
            warmup_steps=args.warmup_steps,
            max_steps=args.max_steps,
            lr_scheduler_type="linear",
            per_device_train_batch_size=args.batch_size,
            eval_strategy="no",
            logging_steps=200,
            seed=args.seed,
            data_seed=args.seed,
            disable_tqdm=False,
        )

    log(f"ours: {args.minutes} minutes of training")
    ours_results, _ = fit(ours, data, training_arguments("ours"), [TimeBudget(args.minutes)])
    steps = ours_results["train_steps"]
    log(f"BERT: {steps} steps, as ours took")
    bert_results, _ = fit(bert, data, training_arguments("bert"), [StopAtStep(steps)])

    print(f"SST-2 validation accuracy, trained from scratch ({command_line()})")
    print(f"machine: {machine_summary()}")
    print(
        f"size: {args.layers} layers, d_model {args.d_model}, {args.heads} heads, FFN {args.ffn}, vocabulary "
        f"{len(tokenizer)}, batch {args.batch_size}, {len(data.train)} training sentences"
    )
    print()
    print("| model | parameters | steps | minutes | accuracy |")
    print("|---|---:|---:|---:|---:|")
    for name, results in (("vanilla-transformer", ours_results), ("BertForSequenceClassification", bert_results)):
        print(
            f"| {name} | {results['parameters'] / 1e6:.2f}M | {results['train_steps']} | "
            f"{results['train_minutes']:.1f} | {100 * results['validation_accuracy']:.1f}% |"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
