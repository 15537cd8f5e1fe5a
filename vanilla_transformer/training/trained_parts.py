"""What a run trains: every weight (the default), every weight but the parts `--freeze` names, or LoRA adapters
through PEFT (`--lora_r`), whose run ends with the adapters merged into a plain model and saved beside it."""

from __future__ import annotations

import copy
import importlib.util
import json
import re
from pathlib import Path

from ..common.extras import MissingExtraError

# the parts --freeze takes; "encoder:N" / "decoder:N" are the first N layers of a stack
FREEZABLE_PARTS = ("embeddings", "encoder", "decoder", "generator")
FIRST_LAYERS = re.compile(r"(?P<stack>encoder|decoder):(?P<layers>[1-9]\d*)")
FREEZE_HELP = (
    "embeddings (token embeddings and learned positions), encoder, decoder (their layers and final norms), generator "
    "(the output projection: the embeddings when tied), encoder:N / decoder:N (the first N layers of a stack)"
)
# every projection of attention (fused q/k/v of self-attention, q and fused k/v of cross-attention, output) and of
# the feed-forward network
LORA_TARGETS = ("qkv_proj", "q_proj", "kv_proj", "o_proj", "up_proj", "down_proj")
ADAPTER_FOLDER = "adapter"


def check_freeze(parts: list[str], config=None) -> None:
    """Refuse a part that no model has (when the flags are parsed), or, given the model's `config`, more layers than
    its stack has (before anything loads)."""
    for part in parts:
        match = FIRST_LAYERS.fullmatch(part)
        if part not in FREEZABLE_PARTS and not match:
            raise ValueError(f"freeze={part!r} names no part of the model: the parts are {FREEZE_HELP}")
        layers = getattr(config, f"{match['stack']}_layers", None) if match else None
        if layers is not None and int(match["layers"]) > layers:
            count = f"{layers} layer" + ("s" if layers != 1 else "")
            raise ValueError(
                f"freeze={part!r}: the model's {match['stack']} has {count}, so {match['stack']}:N takes N from 1 to "
                f"{layers}"
            )


# what a checkpoint records of the parts its run trained, so that a resumed run trains the same ones
TRAINED_PARTS_FILE = "trained_parts.json"
TRAINED_PARTS_FLAGS = ("freeze", "lora_r", "lora_alpha", "lora_dropout", "lora_targets")


def trained_parts(train_args) -> dict:
    """The flags that decide what a run trains, as its checkpoints record them."""
    settings = {name: getattr(train_args, name) for name in TRAINED_PARTS_FLAGS}
    settings["freeze"] = sorted(settings["freeze"])
    if train_args.lora_r is None:  # the adapter's settings mean nothing without adapters
        settings.update(lora_alpha=None, lora_dropout=None, lora_targets=None)
    else:
        settings["lora_targets"] = sorted(settings["lora_targets"])
        settings["lora_alpha"] = float(lora_alpha(train_args.lora_alpha, train_args.lora_r))
    return settings


def save_trained_parts(train_args, checkpoint: Path) -> None:
    (checkpoint / TRAINED_PARTS_FILE).write_text(json.dumps(trained_parts(train_args), indent=1) + "\n")


def check_same_trained_parts(checkpoint: Path, train_args) -> None:
    """A resumed run trains what its checkpoint trained: the optimizer's state holds those parameters, and adapters
    of another rank or on other projections are other weights. Refused before anything loads, naming each flag that
    differs. A checkpoint saved before checkpoints recorded this is not checked."""
    recorded = checkpoint / TRAINED_PARTS_FILE
    if not recorded.is_file():
        return
    try:
        then = json.loads(recorded.read_text())
    except ValueError as error:
        raise ValueError(f"{recorded} is corrupt: {error}") from error
    now = trained_parts(train_args)
    differing = [name for name in TRAINED_PARTS_FLAGS if then.get(name) != now[name]]
    if "lora_r" in differing:  # adapters on one side only: their settings follow, and need no naming
        differing = [name for name in differing if name == "lora_r" or not name.startswith("lora_")]
    if differing:

        def flags(settings: dict) -> str:
            return ", ".join(f"--{name} {_flag_value(settings.get(name))}" for name in differing)

        raise ValueError(
            f"checkpoint {checkpoint.name} was trained with {flags(then)}; this run has {flags(now)}: resume with the "
            "checkpoint's flags, or start a new run"
        )


def _flag_value(value) -> str:
    if value is None or value == []:
        return "(none)"
    return " ".join(map(str, value)) if isinstance(value, list) else str(value)


def lora_alpha(alpha: float | None, rank: int) -> float:
    """LoRA's scale numerator: `alpha`, by default twice the rank."""
    return 2 * rank if alpha is None else alpha


def check_peft_installed() -> None:
    if importlib.util.find_spec("peft") is None:
        raise MissingExtraError(
            'LoRA (--lora_r) needs peft, which is not installed: pip install "vanilla-transformer[lora]"'
        )


def part_parameters(model, part: str) -> list:
    """The parameters of one --freeze part of a VanillaTransformerForConditionalGeneration."""
    stacks = {"encoder": model.model.encoder, "decoder": model.model.decoder}
    if part == "embeddings":
        modules = [stack.embeddings for stack in stacks.values()]
        if getattr(model.model, "shared", None) is not None:
            modules.append(model.model.shared)
        return [p for module in modules for p in module.parameters()]
    if part == "generator":
        return list(model.lm_head.parameters())
    if part in stacks:
        return [p for name, p in stacks[part].named_parameters() if not name.startswith("embeddings.")]
    match = FIRST_LAYERS.fullmatch(part)
    stack, layers = stacks[match["stack"]], int(match["layers"])
    return [p for layer in stack.layers[:layers] for p in layer.parameters()]


def freeze(model, parts: list[str]) -> None:
    """Stop the gradients of the named parts; an error if nothing is left to train."""
    check_freeze(parts, model.config)
    for part in parts:
        for parameter in part_parameters(model, part):
            parameter.requires_grad_(False)
    if parts and not any(p.requires_grad for p in model.parameters()):
        raise ValueError(f"freeze={' '.join(parts)} freezes every weight of the model: nothing is left to train")


def add_lora(model, rank: int, alpha: float | None, dropout: float, targets: list[str]):
    """The model with LoRA adapters of `rank` on the `targets` projections (PEFT), only the adapters trainable."""
    check_peft_installed()
    import peft

    present = {name.rsplit(".", 1)[-1] for name, _ in model.named_modules()}
    absent = sorted(set(targets) - present)
    if absent:
        available = ", ".join(target for target in LORA_TARGETS if target in present)
        raise ValueError(f"lora_targets {', '.join(absent)}: the model has no such projection; it has {available}")
    config = peft.LoraConfig(
        r=rank,
        lora_alpha=lora_alpha(alpha, rank),
        lora_dropout=dropout,
        target_modules=list(targets),
        task_type=peft.TaskType.SEQ_2_SEQ_LM,
    )
    return peft.get_peft_model(model, config)


def is_lora(model) -> bool:
    return hasattr(model, "peft_config")


def plain_model(model):
    """The model to save and load: a copy with the LoRA adapters merged into its weights, or the model itself."""
    return copy.deepcopy(model).merge_and_unload() if is_lora(model) else model


def save_adapter(model, folder: Path) -> None:
    """A LoRA run's adapters alone (PEFT's adapter_config.json and adapter_model.safetensors) in folder/adapter."""
    if is_lora(model):
        model.save_pretrained(folder / ADAPTER_FOLDER)


def trainable_parameters(model) -> int:
    return sum(p.numel() for p in model.parameters() if p.requires_grad)


def trainable_summary(model) -> str:
    total = sum(p.numel() for p in model.parameters())
    trainable = trainable_parameters(model)
    return f"trainable parameters: {trainable:,} of {total:,} ({trainable / max(total, 1):.1%})"
