"""The `vanilla-transformer train` arguments: three dataclasses read by transformers' HfArgumentParser from a
YAML/JSON file and/or the command line (command-line flags override the file)."""

import dataclasses
import json
import re
from dataclasses import dataclass, field
from pathlib import Path

import yaml
from transformers import HfArgumentParser

from ..configuration_vanilla_transformer import FIELD_CHOICES, VanillaTransformerConfig
from ..lexical_shortlist import CANDIDATES as SHORTLIST_CANDIDATES
from ..lexical_shortlist import FREQUENT as SHORTLIST_FREQUENT
from ..tokenization import VOCAB_SIZE
from .schedule import DECAY_OVER, TIME_DECAYING_SCHEDULES
from .trained_parts import FREEZE_HELP, LORA_TARGETS, check_freeze, check_peft_installed

# Config fields that are not switches: the tokenizer decides the vocabulary and the special ids, what the model is
# (an encoder-decoder that caches while generating) is no choice, and the classifiers' head is not a translator's.
TOKENIZER_FIELDS = (
    "vocab_size",
    "decoder_vocab_size",
    "pad_token_id",
    "bos_token_id",
    "eos_token_id",
    "decoder_start_token_id",
)
NOT_FLAGS = (
    *TOKENIZER_FIELDS,
    "use_cache",
    "is_encoder_decoder",
    "classifier_pooling",
    "classifier_dropout",
)
# switches that say how the model computes, not what it computes: a resumed run, or a run from a model, may set them
# otherwise (the loss in blocks or unfused)
COMPUTATION_SWITCHES = ("loss_blocks",)


def json_object(text: str) -> dict:
    """A dict flag, such as --rope_parameters '{"rope_type": "ntk", "factor": 4}'."""
    value = json.loads(text)
    if not isinstance(value, dict):
        raise ValueError(f"{text!r} is not a JSON object")
    return value


json_object.__name__ = "JSON object"  # argparse names the type in its error: "invalid JSON object value: ..."

# HfArgumentParser reads one type a flag (Optional[X] included); the config accepts ints where it wants floats
FLAG_TYPES = {float | int: float, dict | None: json_object}


def config_field_help(config_class: type = VanillaTransformerConfig) -> dict[str, str]:
    """Each field's line of the config class's docstring ("    name / other_name: text ...")."""
    helps, current = {}, []
    for line in (config_class.__doc__ or "").splitlines():
        head, colon, text = line.strip().partition(": ")
        names = [name.strip() for name in head.split("/")]
        if colon and line.startswith(" " * 8) and not line.startswith(" " * 9) and all(n.isidentifier() for n in names):
            current = names
            for name in names:
                helps[name] = text
        elif current and line.startswith(" " * 12):
            for name in current:
                helps[name] += " " + line.strip()
        else:
            current = []
    return helps


def config_switches() -> list[tuple[str, type, dataclasses.Field]]:
    """Every VanillaTransformerConfig field but NOT_FLAGS, with its type, default and docstring as a flag."""
    defaults = {f.name: f.default for f in dataclasses.fields(VanillaTransformerConfig)}
    helps = config_field_help()
    switches = []
    for name, annotation in VanillaTransformerConfig.__annotations__.items():
        if name in NOT_FLAGS:
            continue
        metadata = {"help": helps.get(name, "")}
        if name in FIELD_CHOICES:
            metadata["choices"] = list(FIELD_CHOICES[name])
        flag_type = FLAG_TYPES.get(annotation, annotation)
        switches.append((name, flag_type, field(default=defaults[name], metadata=metadata)))
    return switches


def build_config(self, tokenizer, **fields) -> VanillaTransformerConfig:
    """The model config: these switches, with the vocabulary and special ids of `tokenizer` (and `fields`, such as a
    classifier's labels)."""
    switches = {name: getattr(self, name) for name in switch_names()}
    return VanillaTransformerConfig(
        vocab_size=len(tokenizer),
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        decoder_start_token_id=tokenizer.bos_token_id,
        **switches,
        **fields,
    )


def switch_config(self) -> VanillaTransformerConfig:
    """The config of these switches alone: the vocabulary comes from the tokenizer later, so the config's default
    one stands in."""
    return VanillaTransformerConfig(**{name: getattr(self, name) for name in switch_names()})


def switch_names() -> list[str]:
    return [name for name, _, _ in config_switches()]


def model_defining_switches() -> list[str]:
    """The switches a checkpoint's model must share with the run that resumes it (all but COMPUTATION_SWITCHES)."""
    return [name for name in switch_names() if name not in COMPUTATION_SWITCHES]


def check_switches(self) -> None:
    """The config's own validation, when the flags are parsed rather than after the data is loaded."""
    self.switch_config()


def explicit_switches(self) -> set[str]:
    """The switches this run sets: those given as flags or in the --config file (`parse_arguments` records them in
    `given`), or, for arguments built in code, those that differ from the config's defaults."""
    names = switch_names()
    given = getattr(self, "given", None)
    if given is not None:
        return {name for name in names if name in given}
    defaults = {f.name: f.default for f in dataclasses.fields(self)}
    return {name for name in names if getattr(self, name) != defaults[name]}


# Derived from the config, so that every switch is a flag with the config's default and meaning.
ModelArguments = dataclasses.make_dataclass(
    "ModelArguments",
    [
        *config_switches(),
        (
            "attn_implementation",
            str,
            field(default="sdpa", metadata={"help": "eager, sdpa or flash_attention_2"}),
        ),
        (
            "from_model",
            str | None,
            field(
                default=None,
                metadata={
                    "help": "start from a trained model (its architecture, weights and tokenizer): one of our folders "
                    "(a run's output, best/, a checkpoint), a folder `convert marian` wrote, a MarianMTModel folder "
                    "or Hub id (opus-mt), or a Hub id of ours"
                },
            ),
        ),
    ],
    namespace={
        "__doc__": "The model switches: every VanillaTransformerConfig field that the tokenizer does not decide, "
        "and the trained model a run may start from.",
        "build_config": build_config,
        "switch_config": switch_config,
        "explicit_switches": explicit_switches,
        "__post_init__": check_switches,
    },
)
ModelArguments.__module__ = __name__


@dataclass
class DataArguments:
    dataset: str = field(
        default="bentrevett/multi30k",
        metadata={"help": "a Hub dataset id, a folder of {split}.{lang}[.gz] files, or a jsonl/csv file"},
    )
    dataset_config: str | None = field(default=None, metadata={"help": "the Hub dataset's configuration name"})
    source_lang: str = field(
        default="en", metadata={"help": "the language translated from: its files' suffix ({split}.{lang}) or column"}
    )
    target_lang: str = field(default="de", metadata={"help": "the language translated into"})
    train_split: str = field(default="train", metadata={"help": "the split trained on"})
    validation_split: str = field(
        default="validation",
        metadata={
            "help": "the split scored at every evaluation and at the end (loss, BLEU, chrF); its best BLEU keeps best/"
        },
    )
    test_split: str | None = field(
        default="test", metadata={"help": "the split scored with the final model at the end (empty or null: none)"}
    )
    tokenizer: str | None = field(default=None, metadata={"help": "a saved tokenizer; trained on train if unset"})
    vocab_size: int = field(
        default=VOCAB_SIZE,
        metadata={
            "help": "tokens of the tokenizer trained when --tokenizer is unset (4 special and 256 byte included)"
        },
    )
    lowercase: bool = field(default=False, metadata={"help": "the tokenizer trained lowercases all text it encodes"})
    split_punctuation: bool = field(
        default=False, metadata={"help": "keep punctuation out of subwords, as Moses tokenization before BPE does"}
    )
    max_source_length: int = field(
        default=128,
        metadata={"help": "tokens of a source at most: longer training pairs are left out, evaluation sources cut"},
    )
    max_target_length: int = field(
        default=128,
        metadata={"help": "tokens of a target at most: longer training pairs are left out, evaluation targets cut"},
    )
    max_eval_samples: int | None = field(default=None, metadata={"help": "translate at most this many for BLEU"})
    tokenizer_sample_sentences: int = field(
        default=3_000_000,
        metadata={"help": "train the tokenizer on at most this many sentences, pairs drawn at random from train"},
    )
    tokenizer_sample_seed: int = field(
        default=0, metadata={"help": "the seed of that draw (not --seed, so that runs of other seeds share a corpus)"}
    )
    cache_dir: str | None = field(
        default=None,
        metadata={"help": "where prepared corpora are kept (default: HF_DATASETS_CACHE/vanilla_transformer)"},
    )
    extra_eval_datasets: list[str] = field(
        default_factory=list,
        metadata={
            "help": "more evaluation sets, scored at step 0 and at every evaluation (BLEU, chrF), each "
            "[NAME=]DATASET[:SPLIT] (SPLIT default validation), e.g. general=Helsinki-NLP/europarl:validation"
        },
    )
    mix_dataset: str | None = field(
        default=None,
        metadata={"help": "replay: a second corpus whose training pairs are mixed into the batches (--mix_ratio)"},
    )
    mix_split: str = field(default="train", metadata={"help": "the split of --mix_dataset to mix in"})
    mix_ratio: float | None = field(
        default=None, metadata={"help": "the share of each epoch's training pairs drawn from --mix_dataset (0 to 1)"}
    )
    mix_tag: str | None = field(
        default=None,
        metadata={
            "help": "tagged back-translation (Caswell et al. 2019): this tag, e.g. '<BT>', begins every source "
            "sentence of --mix_dataset, so the model can tell synthetic sources from real ones; a tokenizer the run "
            "trains holds it as one token"
        },
    )

    def __post_init__(self):
        check_at_least(self, 1, "vocab_size", "max_source_length", "max_target_length", "max_eval_samples")
        check_at_least(self, 2, "tokenizer_sample_sentences")
        if self.source_lang == self.target_lang:
            raise ValueError(f"source_lang and target_lang are both {self.source_lang!r}: name two languages")
        if (self.mix_dataset is None) != (self.mix_ratio is None):
            given, missing = ("mix_dataset", "mix_ratio") if self.mix_ratio is None else ("mix_ratio", "mix_dataset")
            raise ValueError(f"{given}={getattr(self, given)!r} needs {missing}: replay takes both")
        if self.mix_tag is not None and (self.mix_dataset is None or not self.mix_tag.strip()):
            problem = "is blank" if self.mix_dataset else "needs mix_dataset: it tags the sources of the mixed pairs"
            raise ValueError(f"mix_tag={self.mix_tag!r} {problem}")
        if self.mix_ratio is not None and not 0 < self.mix_ratio < 1:
            raise ValueError(f"mix_ratio={self.mix_ratio!r} must be between 0 and 1 (the replayed share of the pairs)")
        names = [name for name, _, _ in self.extra_eval_sets()]
        repeated = sorted({name for name in names if names.count(name) > 1} | ({"validation"} & set(names)))
        if repeated:
            raise ValueError(
                f"extra_eval_datasets names {', '.join(repeated)} twice (validation is the run's own split): give "
                "each set a NAME= of its own"
            )

    def extra_eval_sets(self) -> list[tuple[str, str, str]]:
        """(name, dataset, split) of each --extra_eval_datasets entry."""
        sets = []
        for entry in self.extra_eval_datasets:
            match = EVAL_SET.fullmatch(entry)
            if not match:
                raise ValueError(f"extra_eval_datasets {entry!r} is not [NAME=]DATASET[:SPLIT]")
            split = match["split"] or "validation"
            name = match["name"] or f"{Path(match['dataset']).name}/{split}"
            sets.append((name, match["dataset"], split))
        return sets


# [NAME=]DATASET[:SPLIT]: a name of letters, digits, "_", "-", "."; a dataset path or Hub id; a split name
EVAL_SET = re.compile(r"(?:(?P<name>[\w.-]+)=)?(?P<dataset>[^:=]+?)(?::(?P<split>[\w.-]+))?")


def check_at_least(arguments, low: float, *names: str) -> None:
    """Refuse, when the arguments are parsed, a value a run would only trip over later (or loop forever on)."""
    for name in names:
        value = getattr(arguments, name)
        if value is not None and not value >= low:
            raise ValueError(f"{name}={value!r} must be {low} or more")


def check_positive(arguments, *names: str) -> None:
    """Like `check_at_least`, for values that must be above zero (None, where allowed, means unset)."""
    for name in names:
        value = getattr(arguments, name)
        if value is not None and not value > 0:
            raise ValueError(f"{name}={value!r} must be positive")


MIXED_PRECISION = ("no", "fp16", "bf16")
REPORT_TO = ("auto", "tensorboard", "none")
# the names transformers.get_scheduler knows that need no arguments beyond the step counts
LR_SCHEDULER_TYPES = ("inverse_sqrt", "linear", "cosine", "constant_with_warmup")


@dataclass
class TrainArguments:
    output_dir: str = field(
        default="outputs/model",
        metadata={"help": "the run's folder: the model, its tokenizer, results.json, checkpoints/ and best/"},
    )
    seed: int = field(
        default=42, metadata={"help": "seeds the initial weights, the order of the batches and dropout's draws"}
    )
    max_steps: int = field(default=10000, metadata={"help": "optimizer steps to train for"})
    max_train_minutes: float | None = field(
        default=None, metadata={"help": "stop after this much training time (then checkpoint and finish)"}
    )
    max_tokens: int = field(default=4096, metadata={"help": "token budget of one micro-batch per process"})
    gradient_accumulation_steps: int = field(
        default=1, metadata={"help": "micro-batches of each process whose gradients make one optimizer step"}
    )
    tokens_per_step: int | None = field(
        default=None,
        metadata={
            "help": "tokens of an optimizer step on any number of processes (the paper: 25000): a process's budget "
            "becomes min(max_tokens, tokens_per_step / processes), its accumulation what makes up the rest"
        },
    )
    dataloader_num_workers: int = field(
        default=1, metadata={"help": "processes that collate micro-batches ahead of the step (0: the training loop)"}
    )
    dataloader_prefetch_factor: int = field(default=4, metadata={"help": "micro-batches each worker keeps ready"})
    learning_rate: float | None = field(
        default=None, metadata={"help": "peak learning rate; default d_model^-0.5 * warmup_steps^-0.5 (the paper)"}
    )
    warmup_steps: int = field(
        default=4000, metadata={"help": "steps of the learning rate's linear rise to its peak (the paper: 4000)"}
    )
    lr_scheduler_type: str = field(
        default="inverse_sqrt",
        metadata={
            "help": "inverse_sqrt (the paper), linear or cosine (decay to 0 at max_steps), or constant_with_warmup",
            "choices": list(LR_SCHEDULER_TYPES),
        },
    )
    decay_over: str = field(
        default="steps",
        metadata={
            "help": "steps: a linear or cosine decay ends at max_steps; time: it ends at max_steps or when "
            "max_train_minutes are spent, whichever comes first (the warm-up counts steps either way)",
            "choices": list(DECAY_OVER),
        },
    )
    adam_beta1: float = field(default=0.9, metadata={"help": "AdamW's beta1 (the paper: 0.9)"})
    adam_beta2: float = field(default=0.98, metadata={"help": "AdamW's beta2 (the paper: 0.98)"})
    adam_epsilon: float = field(default=1e-9, metadata={"help": "AdamW's epsilon (the paper: 1e-9)"})
    weight_decay: float = field(default=0.0, metadata={"help": "AdamW's decoupled weight decay"})
    max_grad_norm: float = field(
        default=1.0, metadata={"help": "gradients clipped to this global norm before each step (0: not clipped)"}
    )
    mixed_precision: str = field(default="no", metadata={"help": "no, fp16 or bf16", "choices": list(MIXED_PRECISION)})
    use_cpu: bool = field(default=False, metadata={"help": "train on the CPU even when a GPU is present"})
    keep_freed_cpu_memory: bool = field(
        default=True,
        metadata={
            "help": "on the CPU with glibc, keep freed memory in the process for the next step instead of returning "
            "it to the kernel, so that each step reuses the pages of the large buffers of the previous one"
        },
    )
    logging_steps: int = field(
        default=50,
        metadata={
            "help": "steps between reports of the mean loss, learning rate and tokens/s (progress bar, TensorBoard)"
        },
    )
    eval_steps: int = field(
        default=1000,
        metadata={
            "help": "steps between evaluations during training (0: none; the final model is scored all the same)"
        },
    )
    save_steps: int = field(default=1000, metadata={"help": "steps between checkpoints (0: none)"})
    save_total_limit: int = field(
        default=10,
        metadata={"help": "the newest checkpoints kept, at least --average_last_checkpoints (0: every checkpoint)"},
    )
    average_last_checkpoints: int = field(default=1, metadata={"help": "average the last K checkpoints at the end"})
    resume_from_checkpoint: str | None = field(default=None, metadata={"help": "a checkpoint folder, or 'latest'"})
    overwrite_output_dir: bool = field(
        default=False,
        metadata={"help": "train into a non-empty output_dir: an earlier run's checkpoints and best model there go"},
    )
    num_beams: int = field(default=5, metadata={"help": "beams of the translations that evaluations score"})
    max_new_tokens: int | None = field(
        default=128, metadata={"help": "new tokens at most; null (in a --config file): source length + 50, the paper's"}
    )
    length_penalty: float = field(
        default=1.0, metadata={"help": "beam search scores divided by length ** this (the paper: 0.6)"}
    )
    compound_split_bleu: bool = field(
        default=False,
        metadata={"help": "also score tokenized BLEU with compounds split, as the paper's WMT14 table (.[wmt])"},
    )
    eval_batch_size: int = field(default=64, metadata={"help": "sentences an evaluation translates at once"})
    shortlist: bool = field(
        default=False,
        metadata={"help": "write a lexical shortlist of the training corpus into the output folder at the end"},
    )
    shortlist_candidates: int = field(
        default=SHORTLIST_CANDIDATES, metadata={"help": "the shortlist's candidates a source token"}
    )
    shortlist_frequent: int = field(
        default=SHORTLIST_FREQUENT, metadata={"help": "the shortlist's most frequent target tokens"}
    )
    push_to_hub: bool = field(default=False, metadata={"help": "publish the output folder at the end"})
    hub_repo_id: str | None = field(
        default=None, metadata={"help": "the Hub repo --push_to_hub publishes to, USER/NAME"}
    )
    hub_private: bool = field(default=False, metadata={"help": "a repo --push_to_hub creates is private"})
    hub_revision: str | None = field(default=None, metadata={"help": "a branch to push to"})
    hub_create_pr: bool = field(default=False, metadata={"help": "push as a pull request to the repo"})
    hub_token: str | None = field(default=None, metadata={"help": "default: HF_TOKEN or the stored login"})
    report_to: str = field(
        default="auto",
        metadata={"help": "auto (tensorboard when installed), tensorboard, none", "choices": list(REPORT_TO)},
    )
    disable_progress_bar: bool = field(default=False, metadata={"help": "no progress bar"})
    torch_compile: bool = field(
        default=False,
        metadata={
            "help": "compile the training forward and loss with torch.compile (inductor, dynamic shapes, lengths "
            "padded to a multiple of 8); evaluation and generate() stay eager; the compiled graphs are counted in the "
            "log and results.json"
        },
    )
    peak_tflops: float | None = field(
        default=None,
        metadata={
            "help": "the GPU's dense bf16 peak in TFLOP/s, for the MFU in the progress bar and results.json "
            "(default: known for H100, H200, A100, L4 and L40S)"
        },
    )
    freeze: list[str] = field(
        default_factory=list, metadata={"help": f"parts of the model not to train: any of {FREEZE_HELP}"}
    )
    lora_r: int | None = field(
        default=None, metadata={"help": "train LoRA adapters of this rank (PEFT) instead of the weights (.[lora])"}
    )
    lora_alpha: float | None = field(default=None, metadata={"help": "LoRA's scale numerator (default 2 x lora_r)"})
    lora_dropout: float = field(
        default=0.0, metadata={"help": "dropout on the input of each LoRA adapter, in [0, 1) (PEFT's lora_dropout)"}
    )
    lora_targets: list[str] = field(
        default_factory=lambda: list(LORA_TARGETS), metadata={"help": "the projections that get adapters"}
    )

    def __post_init__(self):
        check_freeze(self.freeze)
        check_at_least(self, 1, "lora_r")
        check_positive(self, "lora_alpha")
        if not 0 <= self.lora_dropout < 1:
            raise ValueError(f"lora_dropout={self.lora_dropout!r} must be at least 0 and below 1")
        if self.lora_r is not None:
            if self.freeze:
                raise ValueError(
                    f"freeze={' '.join(self.freeze)} with lora_r={self.lora_r}: LoRA trains its adapters alone, every "
                    "weight of the model stays frozen; leave --freeze out"
                )
            check_peft_installed()
        check_at_least(
            self,
            1,
            "max_steps",
            "max_tokens",
            "gradient_accumulation_steps",
            "dataloader_prefetch_factor",
            "logging_steps",
            "average_last_checkpoints",
            "num_beams",
            "max_new_tokens",
            "eval_batch_size",
            "shortlist_candidates",
        )
        check_at_least(self, 0, "shortlist_frequent")
        check_at_least(
            self,
            0,
            "dataloader_num_workers",
            "warmup_steps",
            "eval_steps",
            "save_steps",
            "save_total_limit",
            "max_grad_norm",
        )
        check_at_least(self, 0, "weight_decay", "adam_beta1", "adam_beta2")
        check_positive(self, "learning_rate", "max_train_minutes", "adam_epsilon", "tokens_per_step", "peak_tflops")
        if self.tokens_per_step is not None and self.gradient_accumulation_steps != 1:
            raise ValueError(
                f"tokens_per_step={self.tokens_per_step} derives the gradient accumulation: leave "
                f"gradient_accumulation_steps={self.gradient_accumulation_steps} out"
            )
        for name in ("adam_beta1", "adam_beta2"):
            if not getattr(self, name) < 1:
                raise ValueError(f"{name}={getattr(self, name)!r} must be below 1")
        for name, allowed in (("mixed_precision", MIXED_PRECISION), ("report_to", REPORT_TO)):
            if getattr(self, name) not in allowed:
                raise ValueError(f"{name}={getattr(self, name)!r} is not one of {', '.join(allowed)}")
        if self.average_last_checkpoints > 1 and self.save_steps < 1:
            # refused before training, not found out at the end of it
            raise ValueError(
                f"average_last_checkpoints={self.average_last_checkpoints} averages checkpoints, but save_steps="
                f"{self.save_steps} saves none: set save_steps > 0, or average_last_checkpoints 1"
            )
        if self.lr_scheduler_type not in LR_SCHEDULER_TYPES:
            raise ValueError(
                f"lr_scheduler_type={self.lr_scheduler_type!r} is not one of {', '.join(LR_SCHEDULER_TYPES)}"
            )
        if self.decay_over not in DECAY_OVER:
            raise ValueError(f"decay_over={self.decay_over!r} is not one of {', '.join(DECAY_OVER)}")
        if self.decay_over == "time":
            if self.max_train_minutes is None or not self.max_train_minutes > 0:
                raise ValueError(
                    f"decay_over='time' needs a positive max_train_minutes, got {self.max_train_minutes!r}"
                )
            if self.lr_scheduler_type not in TIME_DECAYING_SCHEDULES:
                raise ValueError(
                    f"decay_over='time' needs lr_scheduler_type {' or '.join(TIME_DECAYING_SCHEDULES)}, got "
                    f"{self.lr_scheduler_type!r} (it has no decay to bring forward)"
                )

    @property
    def max_train_seconds(self) -> float | None:
        return None if self.max_train_minutes is None else 60.0 * self.max_train_minutes

    def micro_batches_for(self, processes: int) -> tuple[int, int]:
        """(max_tokens, gradient_accumulation_steps) of each process: as given, or, with `tokens_per_step`, a budget
        of min(max_tokens, tokens_per_step / processes) and as many micro-batches as make up the step's tokens."""
        if self.tokens_per_step is None:
            return self.max_tokens, self.gradient_accumulation_steps
        budget = min(self.max_tokens, -(-self.tokens_per_step // processes))
        return budget, -(-self.tokens_per_step // (budget * processes))

    def peak_learning_rate(self, d_model: int) -> float:
        if self.learning_rate is not None:
            return self.learning_rate
        return d_model**-0.5 * max(self.warmup_steps, 1) ** -0.5


ARGUMENT_CLASSES = (ModelArguments, DataArguments, TrainArguments)


def read_config_file(path: str | Path) -> dict:
    path = Path(path)
    try:
        with path.open(encoding="utf-8") as file:  # read from the file, yaml's messages name it
            values = json.load(file) if path.suffix == ".json" else yaml.safe_load(file)
    except (json.JSONDecodeError, yaml.YAMLError) as error:
        kind = "JSON" if path.suffix == ".json" else "YAML"
        raise ValueError(f"{path} is not valid {kind}: {error}") from error
    if not isinstance(values, dict):
        raise ValueError(f"{path} must hold a mapping of argument names to values, got {type(values).__name__}")
    return values


class OneLineErrors:
    """An argparse parser whose error is one line: argparse's own prints the whole usage first (80 lines for
    `train`), which buries the line that says what is wrong."""

    def error(self, message: str):
        self.exit(2, f"{self.prog}: error: {message} (--help lists the options)\n")


class TrainArgumentParser(OneLineErrors, HfArgumentParser):
    pass


def argument_parser(command: str = "train") -> HfArgumentParser:
    parser = TrainArgumentParser(ARGUMENT_CLASSES, prog=f"vanilla-transformer {command}")
    parser.add_argument("--config", help="a YAML or JSON file of arguments")
    return parser


def parse_arguments(
    argv: list[str] | None = None, command: str = "train"
) -> tuple[ModelArguments, DataArguments, TrainArguments]:
    """`--config FILE` gives the defaults; any other flag overrides them. Unknown keys in the file are an error.
    `command` names the command in the errors (`prepare` reads train's arguments too)."""
    parser = argument_parser(command)
    known, _ = parser.parse_known_args(argv)
    if known.config:
        values = read_config_file(known.config)
        names = {f.name for cls in ARGUMENT_CLASSES for f in dataclasses.fields(cls)}
        unknown = sorted(set(values) - names)
        if unknown:
            raise ValueError(f"{known.config}: unknown arguments {', '.join(unknown)}")
        parser.set_defaults(**values)
    # the outputs are the dataclasses, then a namespace holding --config, then the strings left over
    outputs = parser.parse_args_into_dataclasses(argv, return_remaining_strings=True)
    if outputs[-1]:
        parser.error(f"unrecognized arguments: {' '.join(outputs[-1])}")
    model_args = outputs[0]
    model_args.given = given_flags(argument_parser(command), argv) | set(values if known.config else ())
    return tuple(outputs[: len(ARGUMENT_CLASSES)])


_NOT_GIVEN = object()


def given_flags(parser: HfArgumentParser, argv: list[str] | None) -> set[str]:
    """The arguments `argv` sets (abbreviated, or as a `--no_` flag, included): parsed once more with every default
    replaced by a marker, what is not the marker was given."""
    parser.set_defaults(**{action.dest: _NOT_GIVEN for action in parser._actions})
    namespace, _ = parser.parse_known_args(argv)
    return {name for name, value in vars(namespace).items() if value is not _NOT_GIVEN}
