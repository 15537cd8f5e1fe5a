"""Training checkpoints: what a resumed run needs beyond Accelerate's own state, pruning, and averaging."""

import json
import re
import shutil
import warnings
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch
from safetensors.torch import load_file
from transformers.utils import SAFE_WEIGHTS_NAME

CHECKPOINT_PATTERN = re.compile(r"^step-(\d+)$")
# a checkpoint being written, renamed to step-N when complete
PARTIAL_PATTERN = re.compile(r"^\.step-(\d+)\.partial$")
# our part of a checkpoint, as JSON: Accelerate would pickle it (custom_checkpoint_0.pkl) and unpickle it with
# weights_only=False, which runs whatever code a doctored checkpoint carries
TRAINING_STATE = "training_state.json"
LEGACY_TRAINING_STATE = "custom_checkpoint_0.pkl"


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


def resolve_resume(root: Path, requested: str | None) -> Path | None:
    """The checkpoint to resume from: `requested` itself, or with "latest" the newest complete one under `root` (an
    incomplete one, from a save that was cut short, is named in a warning and left out)."""
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
        return folders[-1]
    path = Path(requested)
    if not path.is_dir():
        raise FileNotFoundError(f"--resume_from_checkpoint {requested}: no such checkpoint folder")
    if not any((path / name).is_file() for name in (TRAINING_STATE, LEGACY_TRAINING_STATE)):
        raise FileNotFoundError(
            f"--resume_from_checkpoint {requested}: not a training checkpoint (no {TRAINING_STATE}); checkpoints are "
            f"the step-N folders under OUTPUT/{root.name}, or pass latest"
        )
    return path


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
