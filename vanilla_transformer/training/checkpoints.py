"""Training checkpoints: what a resumed run needs beyond Accelerate's own state, pruning, and averaging."""

import json
import re
import shutil
import warnings
import zipfile
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch
from safetensors.torch import load_file
from transformers.utils import CONFIG_NAME, SAFE_WEIGHTS_NAME

from ..common.model_folder import CorruptFileError, check_weight_files
from ..configuration_vanilla_transformer import VanillaTransformerConfig

CHECKPOINT_PATTERN = re.compile(r"^step-(\d+)$")
# a checkpoint being written, renamed to step-N when complete
PARTIAL_PATTERN = re.compile(r"^\.step-(\d+)\.partial$")
# our part of a checkpoint, as JSON: Accelerate would pickle it (custom_checkpoint_0.pkl) and unpickle it with
# weights_only=False, which runs whatever code a doctored checkpoint carries
TRAINING_STATE = "training_state.json"
LEGACY_TRAINING_STATE = "custom_checkpoint_0.pkl"
# what Accelerate's save_state writes with torch.save (optimizer.bin, scheduler.bin, random_states_0.pkl): zip archives
TORCH_ARCHIVES = ("*.bin", "*.pkl")
_RESUME_ANOTHER = "resume from another checkpoint (--resume_from_checkpoint FOLDER), or delete this one"


@dataclass
class TrainingState:
    """Saved with every checkpoint through `accelerator.register_for_checkpointing`."""

    step: int = 0
    epoch: int = 0
    batch_in_epoch: int = 0
    best_bleu: float = -1.0
    best_step: int = -1
    history: list = field(default_factory=list)
    # training seconds so far (launches before a resume included), and those the warm-up took
    train_seconds: float = 0.0
    warmup_seconds: float = 0.0
    train_tokens: int = 0  # source and target tokens trained on, all processes

    def state_dict(self) -> dict:
        return asdict(self)

    def load_state_dict(self, state: dict) -> None:
        for name, value in state.items():
            setattr(self, name, value)

    def save(self, checkpoint: Path) -> None:
        (checkpoint / TRAINING_STATE).write_text(json.dumps(self.state_dict(), indent=1) + "\n")

    def load(self, checkpoint: Path) -> None:
        """From the checkpoint's JSON; a checkpoint written before the JSON holds Accelerate's pickle of the same
        dict of numbers and lists, which loads with weights_only=True (no code runs)."""
        if (checkpoint / TRAINING_STATE).is_file():
            text = (checkpoint / TRAINING_STATE).read_text()
            try:
                state = json.loads(text)
            except json.JSONDecodeError as error:
                raise ValueError(f"{checkpoint / TRAINING_STATE} is corrupt: {error}") from error
        elif (checkpoint / LEGACY_TRAINING_STATE).is_file():
            state = torch.load(checkpoint / LEGACY_TRAINING_STATE, map_location="cpu", weights_only=True)
        else:
            raise FileNotFoundError(
                f"{checkpoint / TRAINING_STATE} is missing: {checkpoint} is not a training checkpoint"
            )
        unknown = set(state) - set(self.state_dict())
        if unknown:
            raise ValueError(f"{checkpoint / TRAINING_STATE} holds unknown fields: {', '.join(sorted(unknown))}")
        self.load_state_dict(state)


def checkpoint_folders(root: Path) -> list[Path]:
    """Checkpoints under `root`, oldest first."""
    if not root.is_dir():
        return []
    found = [(int(m.group(1)), path) for path in root.iterdir() if (m := CHECKPOINT_PATTERN.match(path.name))]
    return [path for _, path in sorted(found)]


def partial_folder(folder: Path) -> Path:
    """Where the checkpoint `folder` is written before it is complete."""
    return folder.with_name(f".{folder.name}.partial")


def replace_folder(complete: Path, folder: Path) -> None:
    """Rename `complete` to `folder`. A `folder` already there is a later step of the timeline a resume went back
    from (one that did not load, say), which this run has now saved again: it goes, after the new one is in place."""
    superseded = folder.with_name(f".{folder.name}.superseded")
    if folder.exists():
        shutil.rmtree(superseded, ignore_errors=True)
        folder.rename(superseded)
    complete.rename(folder)
    shutil.rmtree(superseded, ignore_errors=True)


def resolve_resume(root: Path, requested: str | None) -> Path | None:
    """The checkpoint to resume from, checked to load (`check_checkpoint`): `requested` itself, or with "latest" the
    newest one under `root` that loads. An incomplete one, from a save that was cut short, and one that does not load
    (a file damaged or cut short after it was saved) are named in a warning and left out."""
    if not requested:
        return None
    if requested == "latest":
        incomplete = (
            sorted(path.name for path in root.iterdir() if PARTIAL_PATTERN.match(path.name)) if root.is_dir() else []
        )
        if incomplete:
            warnings.warn(
                f"incomplete checkpoint(s) under {root} left out, a save that did not finish: {', '.join(incomplete)}",
                stacklevel=2,
            )
        folders = checkpoint_folders(root)
        if not folders:
            raise FileNotFoundError(f"--resume_from_checkpoint latest: no checkpoint under {root}")
        faults = []
        for folder in reversed(folders):
            try:
                check_checkpoint(folder)
                return folder
            except (ValueError, OSError) as error:
                faults.append(error)
                warnings.warn(f"checkpoint {folder.name} left out, it does not load: {error}", stacklevel=2)
        raise ValueError(f"--resume_from_checkpoint latest: no checkpoint under {root} loads; the newest: {faults[0]}")
    path = Path(requested)
    if not path.is_dir():
        raise FileNotFoundError(f"--resume_from_checkpoint {requested}: no such checkpoint folder")
    if not any((path / name).is_file() for name in (TRAINING_STATE, LEGACY_TRAINING_STATE)):
        raise FileNotFoundError(
            f"--resume_from_checkpoint {requested}: not a training checkpoint (no {TRAINING_STATE}); checkpoints are "
            f"the step-N folders under OUTPUT/{root.name}, or pass latest"
        )
    check_checkpoint(path)
    return path


def check_checkpoint(folder: Path) -> None:
    """Raise, naming the file, if a file of the checkpoint `folder` would not load: the weights (their header covers
    the file), the archives torch.save wrote (their directory, at the end, is there), the training state and the
    config. Only headers and directories are read, not the tensors."""
    check_weight_files(folder, remedy=_RESUME_ANOTHER)
    for path in sorted(path for pattern in TORCH_ARCHIVES for path in folder.glob(pattern)):
        try:
            with zipfile.ZipFile(path):
                pass
        except zipfile.BadZipFile as error:
            raise CorruptFileError(path, error, _RESUME_ANOTHER) from error
    TrainingState().load(folder)
    if (folder / CONFIG_NAME).is_file():
        try:
            json.loads((folder / CONFIG_NAME).read_text(encoding="utf-8"))
        except ValueError as error:
            raise CorruptFileError(folder / CONFIG_NAME, error, _RESUME_ANOTHER) from error


def check_same_model(checkpoint: Path, config: VanillaTransformerConfig, fields: list[str]) -> None:
    """A resumed run must build the model its checkpoint holds: refuse, naming each of `fields` whose value in the
    checkpoint's config differs from `config`'s, before the weights are loaded into a model of other shapes. A
    checkpoint saved before checkpoints carried their config is not checked."""
    if not (checkpoint / CONFIG_NAME).is_file():
        return
    saved = VanillaTransformerConfig.from_json_file(checkpoint / CONFIG_NAME)
    differing = [name for name in fields if getattr(saved, name) != getattr(config, name)]
    if differing:
        then = ", ".join(f"{name}={getattr(saved, name)!r}" for name in differing)
        now = ", ".join(f"{name}={getattr(config, name)!r}" for name in differing)
        raise ValueError(
            f"checkpoint {checkpoint.name} was trained with {then}; this run has {now}: resume with the checkpoint's "
            "switches, or start a new run"
        )


def prune(root: Path, keep: int) -> None:
    for path in checkpoint_folders(root)[:-keep] if keep > 0 else []:
        shutil.rmtree(path)


def average_weights(folders: list[Path]) -> dict[str, torch.Tensor]:
    """The element-wise mean of the model weights of several checkpoints (fairseq's average_checkpoints)."""
    if not folders:
        raise ValueError("no checkpoints to average")
    total: dict[str, torch.Tensor] = {}
    for folder in folders:
        weights_file = folder / SAFE_WEIGHTS_NAME
        if not weights_file.exists():
            raise FileNotFoundError(f"{weights_file} is missing: the checkpoint is incomplete")
        for name, tensor in load_file(weights_file).items():
            total[name] = total[name] + tensor.double() if name in total else tensor.double()
    reference = load_file(folders[-1] / SAFE_WEIGHTS_NAME)
    return {name: (summed / len(folders)).to(reference[name].dtype) for name, summed in total.items()}
