"""The run's output folder: the model folder that translate, from_pretrained and the Hub read (weights, config,
code files, tokenizer, generation config), results.json, and the model card of what the run measured."""

import json
import shutil
from pathlib import Path

from ..common.model_folder import holds
from ..hub.model_card import ModelCardResults, save_model_card
from ..hub.push import push_folder
from .arguments import DataArguments, TrainArguments

# what a run writes beside the model files (its checkpoints, its best model by validation BLEU), and an earlier run
# would leave to be mixed into a new one's
CHECKPOINTS, BEST = "checkpoints", "best"
RUN_FOLDERS = (CHECKPOINTS, BEST)


def check_output_folder(folder: Path, resume: bool, overwrite: bool) -> None:
    """Refuse, before anything is trained or written, an output folder that already holds files, unless the run
    continues the one saved there (`resume`, --resume_from_checkpoint) or is told to replace it (`overwrite`,
    --overwrite_output_dir)."""
    if folder.exists() and not folder.is_dir():
        raise NotADirectoryError(f"output_dir {folder} is a file, not a folder")
    present = sorted(path.name for path in folder.iterdir()) if folder.is_dir() else []
    if present and not (resume or overwrite):
        listed = ", ".join(present[:5]) + (f" and {len(present) - 5} more" if len(present) > 5 else "")
        raise ValueError(
            f"output_dir {folder} is not empty ({listed}): name an empty folder, pass --resume_from_checkpoint latest "
            "to continue the run saved there, or --overwrite_output_dir to replace what a run writes there"
        )


def clear_earlier_run(folder: Path, args: TrainArguments) -> None:
    """With overwrite_output_dir (and no resume), an earlier run's checkpoints and best model go, so that they are
    neither averaged into this run's model nor taken for this run's best."""
    if args.overwrite_output_dir and not args.resume_from_checkpoint:
        for name in RUN_FOLDERS:
            shutil.rmtree(folder / name, ignore_errors=True)


def save_model_folder(model, tokenizer, folder: Path) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)


def card_results(
    model, results: dict, data_args: DataArguments, args: TrainArguments, examples: list[str] | None = None
) -> ModelCardResults:
    """The card's record of a run: the test split's scores (the validation split's without a test split)."""
    scored = "test" if results.get("test") else "validation"
    scores = results.get(scored) or {}
    seconds = results.get("train_seconds")
    return ModelCardResults(
        source_lang=data_args.source_lang,
        target_lang=data_args.target_lang,
        dataset=data_args.dataset,
        split=data_args.test_split if scored == "test" else data_args.validation_split,
        num_beams=args.num_beams,
        bleu=scores.get("bleu"),
        bleu_lowercased=scores.get("bleu_lowercased"),
        chrf=scores.get("chrf"),
        bleu_compound_split=scores.get("bleu_compound_split"),
        steps=results["train_steps"],
        max_tokens=args.max_tokens,
        gradient_accumulation_steps=args.gradient_accumulation_steps,
        processes=results["processes"],
        mixed_precision=results["mixed_precision"],
        learning_rate=args.peak_learning_rate(model.config.d_model),
        lr_scheduler_type=args.lr_scheduler_type,
        warmup_steps=args.warmup_steps,
        label_smoothing=model.config.label_smoothing,
        averaged_checkpoints=results["averaged_checkpoints"],
        trained_parts=trained_parts(args),
        trainable_parameters=results.get("trainable_parameters"),
        replay=f"{data_args.mix_dataset} ({data_args.mix_split}), {data_args.mix_ratio:.0%} of the pairs"
        if data_args.mix_dataset
        else None,
        train_minutes=None if seconds is None else round(seconds / 60, 1),
        machine=results.get("machine"),
        from_model=results.get("from_model"),
        before_and_after=[
            (name, scores["before"]["bleu"], scores["after"]["bleu"], scores["before"]["chrf"], scores["after"]["chrf"])
            for name, scores in (results.get("evaluation_sets") or {}).items()
        ]
        or None,
        examples=examples,
    )


def trained_parts(args: TrainArguments) -> str:
    if args.lora_r is not None:
        alpha = 2 * args.lora_r if args.lora_alpha is None else args.lora_alpha
        return (
            f"LoRA adapters (r {args.lora_r}, alpha {alpha:g}) on {', '.join(args.lora_targets)}, merged into the "
            "weights (the adapters alone in adapter/)"
        )
    if args.freeze:
        return f"every weight but the frozen {', '.join(args.freeze)}"
    return "every weight"


def write_results_and_card(
    model,
    results: dict,
    output_dir: Path,
    data_args: DataArguments,
    args: TrainArguments,
    examples: list[str] | None = None,
) -> None:
    """results.json and README.md (the model card, with `examples` to try) beside the model folder."""
    (output_dir / "results.json").write_text(json.dumps(results, indent=2) + "\n")
    card = card_results(model, results, data_args, args, examples)
    save_model_card(output_dir, card, model.config, repo_id=args.hub_repo_id)


def validation_examples(validation, source_lang: str, count: int = 3) -> list[str]:
    """The first source sentences of the validation split: what the card offers to try the model on."""
    if validation is None or source_lang not in validation.column_names:
        return []
    sentences = validation.select(range(min(len(validation), 20)))[source_lang]
    return [sentence for sentence in sentences if sentence.strip()][:count]


def push_output_folder(output_dir: Path, args: TrainArguments) -> None:
    push_folder(
        output_dir,
        args.hub_repo_id,
        private=args.hub_private,
        revision=args.hub_revision,
        create_pr=args.hub_create_pr,
        token=args.hub_token,
    )


def check_not_holding(folder: Path, source: str) -> None:
    """Refuse an output folder that is the local model a run starts from, or a folder above it: clearing it
    (--overwrite_output_dir) or writing the run's model there would lose the model before it is read."""
    if holds(folder, source):
        raise ValueError(
            f"output_dir {folder.resolve()} holds the model the run starts from (--from_model {source}): name another "
            "folder"
        )
