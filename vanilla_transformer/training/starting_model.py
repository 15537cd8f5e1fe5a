"""Where a fine-tuning run starts (`--from_model`): one of our folders (a run's output, its `best/`, a checkpoint
folder), a folder `convert marian` wrote, a MarianMTModel folder or Hub id (converted in memory, as `convert marian`
does), or a Hub id of ours (from the cache when offline).

The model's weights, config and tokenizer come from there. The architecture is the model's: a switch given on the
command line that differs from it is refused, naming each, before anything loads; what may change is regularisation
(`FINETUNE_SWITCHES`) and, in the train arguments, the generation settings. Every weight of the folder must fit the
model: a missing or unexpected one is an error, never a weight silently left at its initial value.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from pathlib import Path

from transformers import PreTrainedTokenizerBase
from transformers.utils import logging as hf_logging

from ..common.model_folder import (
    MissingTokenizerError,
    check_tokenizer_files,
    load_config,
    load_model_folder,
    load_tokenizer,
)
from ..configuration_vanilla_transformer import VanillaTransformerConfig
from ..modeling_vanilla_transformer import VanillaTransformerForConditionalGeneration
from ..tokenization import tokenizer_identity
from .arguments import COMPUTATION_SWITCHES
from .checkpoints import CHECKPOINT_PATTERN
from .output_folder import BEST, CHECKPOINTS

# the switches a fine-tuning run may set anew: they regularise training, or say how the loss is computed, and change
# no weight's shape or meaning
FINETUNE_SWITCHES = (
    "dropout",
    "attention_dropout",
    "activation_dropout",
    "drop_path_rate",
    "label_smoothing",
    *COMPUTATION_SWITCHES,
)
OUR_MODEL_TYPE = VanillaTransformerConfig.model_type


def is_marian(config) -> bool:
    return getattr(config, "model_type", None) == "marian"


@dataclass(frozen=True)
class StartingModel:
    """The model a run starts from: its source as given, and its config as ours (a Marian model's converted)."""

    source: str
    config: VanillaTransformerConfig
    marian: bool

    @classmethod
    def find(cls, source: str) -> StartingModel:
        """Read the config alone, not the weights: a folder that is not a model, a Hub id that cannot be reached and a
        Marian model our config cannot express fail here, at once."""
        config = load_config(source)
        if is_marian(config):
            from ..convert.marian import check_convertible, config_from_marian, import_sentencepiece

            check_convertible(config, source)
            import_sentencepiece()  # its tokenizer needs it: said now, not after the corpus is read
            return cls(source, config_from_marian(config), marian=True)
        if getattr(config, "model_type", None) != OUR_MODEL_TYPE:
            raise ValueError(
                f"--from_model {source} is a {config.model_type!r} model: it takes one of our folders "
                f"({OUR_MODEL_TYPE}), a folder `convert marian` wrote, or a Marian model (opus-mt)"
            )
        return cls(source, config, marian=False)

    def check_switches(self, model_args) -> dict:
        """Refuse the switches given for this run whose value differs from the model's, naming each; return those of
        `FINETUNE_SWITCHES` that were given, to be set on the model's config."""
        given = model_args.explicit_switches()
        wanted = model_args.switch_config()
        differing = [
            name
            for name in sorted(given)
            if name not in FINETUNE_SWITCHES and getattr(wanted, name) != getattr(self.config, name)
        ]
        if differing:
            described = "; ".join(
                f"{name}={getattr(wanted, name)!r} where the model has {getattr(self.config, name)!r}"
                for name in differing
            )
            raise ValueError(
                f"--from_model {self.source} fixes the architecture, and this run sets it otherwise: {described}. "
                f"Leave these flags out; a run from a model may change {', '.join(FINETUNE_SWITCHES)} and the "
                "generation settings"
            )
        return {name: getattr(model_args, name) for name in sorted(given) if name in FINETUNE_SWITCHES}

    def tokenizer(self, also_named: str | None = None) -> PreTrainedTokenizerBase:
        """The model's tokenizer (for Marian, its SentencePiece tokenizer with both vocabularies), which the corpus is
        prepared with; `also_named` (a --tokenizer given as well) must be the same, or is refused naming both."""
        tokenizer = load_tokenizer(tokenizer_folder(self.source), described_as="model")
        if also_named:
            named = load_tokenizer(also_named)
            if tokenizer_identity(named) != tokenizer_identity(tokenizer):
                raise ValueError(
                    f"--tokenizer {also_named} ({len(named):,} tokens) is not the tokenizer of --from_model "
                    f"{self.source} ({len(tokenizer):,} tokens), whose vocabulary the model's weights are rows of: "
                    "leave --tokenizer out"
                )
        return tokenizer

    def model(self, overrides: dict, attn_implementation: str | None) -> VanillaTransformerForConditionalGeneration:
        """The model with `overrides` set on its config before it is built (a Marian model converted in memory), and
        the folder's generation config (Marian's forbidden pad token included)."""
        if self.marian:
            from ..convert.marian import marian_as_ours

            return marian_as_ours(self.source, overrides, attn_implementation)[0]
        with quiet_loading():
            model, loading = load_model_folder(
                self.source,
                model_class=VanillaTransformerForConditionalGeneration,
                attn_implementation=attn_implementation,
                output_loading_info=True,
                **overrides,
            )
        faults = {kind: sorted(map(str, loading.get(kind) or ())) for kind in LOADING_FAULTS}
        faults = {kind: names for kind, names in faults.items() if names}
        if faults:
            described = "; ".join(f"{kind.replace('_', ' ')}: {', '.join(names[:5])}" for kind, names in faults.items())
            raise ValueError(
                f"--from_model {self.source}: its weights do not fit its config ({described}); a LoRA run's "
                "checkpoint holds the adapter unmerged: resume it, or start from the run's output folder"
            )
        return model


LOADING_FAULTS = ("missing_keys", "unexpected_keys", "mismatched_keys")


@contextlib.contextmanager
def quiet_loading():
    """Without transformers' progress bar and load report: the run reads the loading info itself and says in one
    line what does not fit."""
    bars, verbosity = hf_logging.is_progress_bar_enabled(), hf_logging.get_verbosity()
    hf_logging.disable_progress_bar()
    hf_logging.set_verbosity_error()
    try:
        yield
    finally:
        hf_logging.set_verbosity(verbosity)
        if bars:
            hf_logging.enable_progress_bar()


def tokenizer_folder(source: str) -> str | Path:
    """Where the tokenizer of `source` is: the folder itself, or, for a checkpoint folder saved before checkpoints
    carried their tokenizer (OUTPUT/checkpoints/step-N), the run's output folder or its best/."""
    folder = Path(source)
    if not folder.is_dir():
        return source  # a Hub id
    candidates = [folder]
    if CHECKPOINT_PATTERN.match(folder.name) and folder.parent.name == CHECKPOINTS:
        run = folder.parent.parent
        candidates += [run, run / BEST]
    for candidate in candidates:
        try:
            check_tokenizer_files(candidate)
            return candidate
        except MissingTokenizerError:
            continue
    searched = ", ".join(str(candidate) for candidate in candidates)
    raise MissingTokenizerError(
        f"--from_model {source}: no tokenizer in {searched}; the model's tokenizer must travel with it "
        "(tokenizer.save_pretrained(folder))"
    )
