"""The model card (README.md) of a trained model folder, rendered from the Jinja template `model_card.md` beside
this module. What the card reports is one typed record, `ModelCardResults`: the training loop fills it, the
template reads it, and every field it has is a labelled row.

```python
from vanilla_transformer.hub import ModelCardResults, save_model_card

save_model_card(
    "my-model",  # the folder holding config.json; README.md is written into it
    ModelCardResults(
        source_lang="en",
        target_lang="de",
        dataset="bentrevett/multi30k",
        split="test_2016_flickr",
        num_beams=5,
        bleu_lowercased=40.85,  # the scores of a Multi30k run (python -m benchmarks.multi30k)
        bleu=8.20,
        chrf=51.57,
        steps=6795,
        learning_rate=7e-3,
        warmup_steps=800,
    ),
    repo_id="me/vanilla-transformer-en-de",
)
```
"""

from __future__ import annotations

import dataclasses
import json
import numbers
import os
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

import jinja2
import torch
from huggingface_hub import EvalResult, ModelCard, ModelCardData

from ..common.languages import language_name
from ..common.model_folder import HUB_ID
from ..configuration_vanilla_transformer import VanillaTransformerConfig

TEMPLATE_NAME = "model_card.md"
TAGS = ["translation", "transformer", "vanilla-transformer"]


def _score(label: str, hub_type: str):
    return field(default=None, metadata={"section": "score", "label": label, "hub_type": hub_type})


def _training(label: str):
    return field(default=None, metadata={"section": "training", "label": label})


@dataclass
class ModelCardResults:
    """What the card of a trained translation model reports. Unset (None) fields are left out of the card.

    The scores are named as `training.evaluation.corpus_scores` names them, in results.json too.
    """

    source_lang: str
    target_lang: str
    dataset: str | None = None  # a Hub dataset id, or a local path (named by its folder)
    split: str | None = None  # the split that was scored
    num_beams: int | None = None  # beam search of the scores (and the usage example)

    bleu: float | None = _score("sacreBLEU (cased, 13a)", "sacrebleu")
    bleu_lowercased: float | None = _score("BLEU4 (lowercased, 13a-tokenized)", "bleu")
    chrf: float | None = _score("chrF", "chrf")
    bleu_compound_split: float | None = _score(
        "BLEU (Moses-tokenized, compounds split: the paper's WMT14 scoring)", "bleu"
    )

    steps: int | None = _training("optimizer steps")
    max_tokens: int | None = _training("tokens per micro-batch and process (source + target)")
    gradient_accumulation_steps: int | None = _training("gradient accumulation steps")
    processes: int | None = _training("processes (data parallel)")
    mixed_precision: str | None = _training("mixed precision")
    learning_rate: float | None = _training("peak learning rate")
    lr_scheduler_type: str | None = _training("learning-rate schedule")
    warmup_steps: int | None = _training("warm-up steps")
    label_smoothing: float | None = _training("label smoothing")
    averaged_checkpoints: int | None = _training("checkpoints averaged into the final weights")
    trained_parts: str | None = _training("what was trained")
    trainable_parameters: int | None = _training("trainable parameters")
    replay: str | None = _training("replay (pairs of another corpus mixed in)")
    train_minutes: float | None = _training("training time (minutes)")
    machine: str | None = _training("hardware")

    # the model the run started from (a folder or Hub id), and each evaluation set's scores at its first step and
    # of the final model: (set, BLEU before, BLEU after, chrF before, chrF after)
    from_model: str | None = None
    before_and_after: list[tuple[str, float, float, float, float]] | None = None
    # source sentences to try the model on: the card's `widget` (the Hub's inference widget, and the page's examples)
    examples: list[str] | None = None

    def rows(self, section: str) -> list[tuple[dataclasses.Field, Any]]:
        """(field, value) of the set fields of one section ("score" or "training"), in declaration order."""
        return [
            (f, getattr(self, f.name))
            for f in dataclasses.fields(self)
            if f.metadata.get("section") == section and getattr(self, f.name) is not None
        ]


def find_template() -> Path:
    """The template `model_card.md` beside this module, in a checkout and once installed."""
    template = Path(str(resources.files(__package__) / TEMPLATE_NAME))
    if not template.is_file():
        raise FileNotFoundError(f"the model card template {TEMPLATE_NAME} is missing from {template.parent}")
    return template


def render_model_card(
    config: VanillaTransformerConfig,
    results: ModelCardResults,
    *,
    repo_id: str | None = None,
    generation_config: Any = None,
) -> ModelCard:
    """The model card of a trained model: YAML metadata (license, languages, tags, datasets, metrics and a
    model-index with the scores of `results`) and sections on the architecture (from `config`), data and training,
    results, usage and limitations. `generation_config` (a GenerationConfig or dict) supplies the beam size and
    length of the usage example when `results` does not."""
    src_lang, tgt_lang = results.source_lang, results.target_lang
    generation = _as_dict(generation_config)
    dataset = results.dataset
    dataset_id = dataset if dataset and HUB_ID.fullmatch(dataset) and not os.path.exists(dataset) else None
    dataset_label = dataset_id or (Path(dataset).name if dataset else None)
    model_name = repo_id.split("/")[-1] if repo_id else f"vanilla-transformer-{src_lang}-{tgt_lang}"
    split = results.split
    num_beams = results.num_beams or generation.get("num_beams")
    scores = results.rows("score")

    eval_results = [
        EvalResult(
            task_type="translation",
            task_name=f"Translation {src_lang}-{tgt_lang}",
            dataset_type=dataset_id or dataset_label or "custom",
            dataset_name=f"{dataset_label or 'evaluation set'} ({src_lang}-{tgt_lang})",
            dataset_split=split,
            metric_type=score.metadata["hub_type"],
            metric_name=score.metadata["label"],
            metric_value=float(value),
        )
        for score, value in scores
    ]
    card_data = ModelCardData(
        language=[src_lang, tgt_lang],
        license="apache-2.0",
        library_name="transformers",
        pipeline_tag="translation",
        tags=list(TAGS),
        datasets=[dataset_id] if dataset_id else None,
        metrics=["bleu", "chrf"],
        model_name=model_name,
        eval_results=eval_results or None,
        widget=[{"text": text} for text in results.examples] if results.examples else None,
    )

    learned = config.position_embedding_type == "learned"
    src_name, tgt_name = language_name(src_lang), language_name(tgt_lang)
    results_table = [(score.metadata["label"], _format(value)) for score, value in scores]
    variables = {
        "model_name": model_name,
        "model_path": repo_id or "path/to/model-folder",
        "src_lang": src_lang,
        "tgt_lang": tgt_lang,
        "src_name": src_name,
        "tgt_name": tgt_name,
        "num_parameters": _parameter_count(config),
        "vocab_size": f"{config.vocab_size:,}",
        "architecture": architecture_rows(config),
        "dataset_text": _dataset_text(dataset_id, dataset_label),
        "training_table": [(setting.metadata["label"], _format(value)) for setting, value in results.rows("training")],
        "results_table": results_table,
        "headline": ", ".join(f"{name} {value}" for name, value in results_table),
        "eval_split_text": f"the {split} split" + (f" of {dataset_label}" if dataset_label else "")
        if split
        else (f"the test set of {dataset_label}" if dataset_label else "the test set"),
        "num_beams": num_beams,
        "max_new_tokens": generation.get("max_new_tokens") or 128,
        "max_input_tokens": config.max_position_embeddings if learned else None,
        "position_text": {"sinusoidal": "sinusoidal", "rope": "rotary (RoPE)", "alibi": "ALiBi"}.get(
            config.position_embedding_type
        ),
        "domain_note": _domain_note(dataset_label),
        "from_model": results.from_model,
        "before_and_after": [
            (name, *(_format(score) for score in scores)) for name, *scores in results.before_and_after or []
        ],
    }
    environment = jinja2.Environment(
        undefined=jinja2.StrictUndefined, trim_blocks=True, lstrip_blocks=True, keep_trailing_newline=True
    )
    content = environment.from_string(find_template().read_text(encoding="utf-8")).render(
        card_data=card_data.to_yaml(), **variables
    )
    return ModelCard(content)


def save_model_card(
    folder: str | os.PathLike,
    results: ModelCardResults,
    config: VanillaTransformerConfig | None = None,
    *,
    repo_id: str | None = None,
) -> Path:
    """Render the card of the model saved in `folder` and write it to `folder`/README.md (returned).

    `config` defaults to the folder's config.json; the usage example takes its beam size and length limit from
    the folder's generation_config.json when there is one.
    """
    folder = Path(folder)
    if config is None:
        config = VanillaTransformerConfig.from_pretrained(folder)
    generation_file = folder / "generation_config.json"
    generation = json.loads(generation_file.read_text(encoding="utf-8")) if generation_file.is_file() else None
    card = render_model_card(config, results, repo_id=repo_id, generation_config=generation)
    path = folder / "README.md"
    card.save(path)
    return path


def architecture_rows(config: VanillaTransformerConfig) -> list[tuple[str, str, str]]:
    """(switch, this model, the paper's base model) for the card's architecture table."""
    paper = VanillaTransformerConfig()
    rows = []
    for name, describe in (
        ("vocabulary (shared source/target)", lambda c: f"{c.vocab_size:,}"),
        ("d_model", lambda c: str(c.d_model)),
        ("layers (encoder / decoder)", lambda c: f"{c.encoder_layers} / {c.decoder_layers}"),
        ("attention heads (encoder / decoder)", lambda c: f"{c.encoder_attention_heads} / {c.decoder_attention_heads}"),
        ("attention", _attention_kind),
        ("d_ff (encoder / decoder)", lambda c: f"{c.encoder_ffn_dim} / {c.decoder_ffn_dim}"),
        ("activation", lambda c: c.activation_function),
        ("norm placement", lambda c: {"post": "post-LN (paper)", "pre": "pre-LN"}[c.norm_placement]),
        ("norm", lambda c: c.norm_type),
        ("positions", _positions),
        ("self-attention window", lambda c: "full" if c.sliding_window is None else f"{c.sliding_window} tokens"),
        ("embeddings scaled by sqrt(d_model)", lambda c: _yes(c.scale_embedding)),
        ("encoder/decoder embeddings shared", lambda c: _yes(c.share_encoder_decoder_embeddings)),
        ("generator tied to embeddings", lambda c: _yes(c.tie_word_embeddings)),
        ("dropout", lambda c: _format(c.dropout)),
        (
            "attention / activation dropout",
            lambda c: f"{_format(c.attention_dropout)} / {_format(c.activation_dropout)}",
        ),
        ("stochastic depth (drop path)", lambda c: _format(c.drop_path_rate)),
        ("label smoothing", lambda c: _format(c.label_smoothing)),
    ):
        rows.append((name, describe(config), describe(paper)))
    paper_rows = {"vocabulary (shared source/target)": "37,000 (BPE, WMT En-De)", "label smoothing": "0.1"}
    return [(name, value, paper_rows.get(name, base)) for name, value, base in rows]


def _attention_kind(config: VanillaTransformerConfig) -> str:
    kv = config.num_key_value_heads
    if kv is None or kv == config.encoder_attention_heads == config.decoder_attention_heads:
        return "multi-head"
    if kv == 1:
        return "multi-query (1 key/value head)"
    return f"grouped-query ({kv} key/value heads)"


def _positions(config: VanillaTransformerConfig) -> str:
    if config.position_embedding_type == "learned":
        return f"learned ({config.max_position_embeddings} positions)"
    if config.position_embedding_type == "rope":
        rope = config.rope_parameters
        scaling = "" if rope["rope_type"] == "default" else f", {rope['rope_type']} scaling x{_format(rope['factor'])}"
        return f"rotary (theta {_format(rope['rope_theta'])}{scaling})"
    if config.position_embedding_type == "alibi":
        return "ALiBi (linear biases on self-attention)"
    return "sinusoidal"


def _yes(flag: bool) -> str:
    return "yes" if flag else "no"


def _is_number(value) -> bool:
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def _format(value) -> str:
    """Numbers as a person writes them: 38.2, 0.0007, 100000; anything else as its text."""
    if isinstance(value, bool) or not _is_number(value):
        return str(value)
    if isinstance(value, numbers.Integral):
        return str(value)
    if abs(value) >= 1e5:
        return f"{float(value):.0f}"
    return f"{round(float(value), 4):g}" if abs(value) >= 1e-4 or value == 0 else f"{float(value):.1e}"


def _parameter_count(config: VanillaTransformerConfig) -> str | None:
    """ "60.5M": the model built on the meta device (no memory, no initialisation cost), shared weights once."""
    from ..modeling_vanilla_transformer import VanillaTransformerForConditionalGeneration

    try:
        with torch.device("meta"):
            count = VanillaTransformerForConditionalGeneration(config).num_parameters()
    except Exception:  # a card is still useful without the count
        return None
    for unit, size in (("B", 1e9), ("M", 1e6), ("K", 1e3)):
        if count >= size:
            return f"{count / size:.1f}{unit}"
    return str(count)


def _dataset_text(dataset_id: str | None, label: str | None) -> str | None:
    if dataset_id and "/" in dataset_id:
        return f"[{dataset_id}](https://huggingface.co/datasets/{dataset_id})"
    return f"`{label}`" if label else None


def _domain_note(label: str | None) -> str | None:
    if label and "multi30k" in label.lower():
        return (
            "Multi30k is image descriptions (Flickr30k captions): short, literal sentences about people, animals "
            "and scenes. Other domains (news, dialogue, technical text) are out of domain and translate much worse."
        )
    return None


def _as_dict(generation_config) -> dict[str, Any]:
    if generation_config is None:
        return {}
    if isinstance(generation_config, dict):
        return generation_config
    return generation_config.to_dict()


__all__ = ["ModelCardResults", "architecture_rows", "find_template", "render_model_card", "save_model_card"]
