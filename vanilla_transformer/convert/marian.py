"""A Marian translation model (`MarianMTModel`, the ~1,500 Helsinki-NLP opus-mt-* models) as one of our folders.

Marian is the paper's Transformer (Post-LN, sinusoidal positions, scaled embeddings, a tied generator) with details
of its own, each a switch of `VanillaTransformerConfig`: its sinusoids put all sines before all cosines
(`sinusoid_layout="sines_then_cosines"`), its generator adds `final_logits_bias`, some models keep a separate target
vocabulary (`decoder_vocab_size`, embeddings not shared) and most use swish (our "silu"). transformers reads the
Marian model and its tokenizer; the weights are copied module by module into ours (Marian's separate q/k/v
projections stacked into our fused ones), so the converted model computes what MarianMTModel computes.

```python
from vanilla_transformer.convert import convert_marian

convert_marian("Helsinki-NLP/opus-mt-en-de", "opus-mt-en-de-vanilla")
```
"""

from __future__ import annotations

import copy
import shutil
from pathlib import Path

import torch

from ..common.extras import MissingExtraError
from ..common.model_folder import check_output_folder
from ..configuration_vanilla_transformer import VanillaTransformerConfig
from ..modeling_vanilla_transformer import VanillaTransformerForConditionalGeneration

ACTIVATIONS = {"swish": "silu", "silu": "silu", "relu": "relu", "gelu": "gelu"}
# Bart-era keys that some Marian config.json files carry; MarianMTModel ignores them, so a value other than the one
# Marian's architecture has would mean a model that neither MarianMTModel nor ours computes
MARIAN_ARCHITECTURE = {
    "normalize_before": False,
    "normalize_embedding": False,
    "layernorm_embedding": False,
    "add_final_layer_norm": False,
    "add_bias_logits": False,
    "static_position_embeddings": True,
    "is_decoder": False,
}
LAYERDROPS = ("encoder_layerdrop", "decoder_layerdrop")


def import_sentencepiece():
    """Marian's tokenizer needs sentencepiece: an error naming the extra when it is missing."""
    try:
        import sentencepiece
    except ImportError as error:
        raise MissingExtraError(
            'sentencepiece is not installed (Marian\'s tokenizer needs it): pip install "vanilla-transformer[marian]"'
        ) from error
    return sentencepiece


def unsupported_fields(marian_config) -> list[str]:
    """The fields of a MarianConfig our config cannot express, each `field=value (why)`."""
    problems = []
    if marian_config.model_type != "marian":
        problems.append(f"model_type={marian_config.model_type!r} (the converter reads Marian models only)")
        return problems
    activation = marian_config.activation_function
    if activation not in ACTIVATIONS:
        allowed = ", ".join(ACTIVATIONS)
        problems.append(f"activation_function={activation!r} (the converter takes {allowed})")
    for field, expected in MARIAN_ARCHITECTURE.items():
        value = getattr(marian_config, field, expected)
        if value != expected:
            problems.append(f"{field}={value!r} (Marian's architecture has {expected!r}; ours cannot be otherwise)")
    for field in LAYERDROPS:
        value = getattr(marian_config, field, 0.0)
        if value:
            problems.append(f"{field}={value!r} (our model has no layer drop; 0 converts)")
    heads = (marian_config.encoder_attention_heads, marian_config.decoder_attention_heads)
    if any(marian_config.d_model % head for head in heads):
        problems.append(f"d_model={marian_config.d_model} (not divisible by the attention heads {heads})")
    return problems


def check_convertible(marian_config, source) -> None:
    problems = unsupported_fields(marian_config)
    if problems:
        raise ValueError(f"cannot convert {source}: MarianConfig " + "; ".join(problems))


def config_from_marian(marian_config) -> VanillaTransformerConfig:
    """Our config computing what `marian_config`'s MarianMTModel computes (checked convertible)."""
    shared = marian_config.share_encoder_decoder_embeddings
    return VanillaTransformerConfig(
        vocab_size=marian_config.vocab_size,
        decoder_vocab_size=marian_config.vocab_size if shared else marian_config.decoder_vocab_size,
        d_model=marian_config.d_model,
        encoder_layers=marian_config.encoder_layers,
        decoder_layers=marian_config.decoder_layers,
        encoder_attention_heads=marian_config.encoder_attention_heads,
        decoder_attention_heads=marian_config.decoder_attention_heads,
        encoder_ffn_dim=marian_config.encoder_ffn_dim,
        decoder_ffn_dim=marian_config.decoder_ffn_dim,
        activation_function=ACTIVATIONS[marian_config.activation_function],
        dropout=marian_config.dropout,
        attention_dropout=marian_config.attention_dropout,
        activation_dropout=marian_config.activation_dropout,
        norm_placement="post",
        norm_type="layernorm",
        layer_norm_eps=1e-5,  # Marian's nn.LayerNorm default
        position_embedding_type="sinusoidal",
        sinusoid_layout="sines_then_cosines",
        max_position_embeddings=marian_config.max_position_embeddings,
        scale_embedding=marian_config.scale_embedding,
        share_encoder_decoder_embeddings=shared,
        tie_word_embeddings=marian_config.tie_word_embeddings,
        final_logits_bias=True,
        weight_init="normal",
        init_std=marian_config.init_std,
        label_smoothing=0.0,
        pad_token_id=marian_config.pad_token_id,
        bos_token_id=marian_config.bos_token_id,
        eos_token_id=marian_config.eos_token_id,
        decoder_start_token_id=marian_config.decoder_start_token_id,
    )


def _copy(target: torch.nn.Parameter | torch.Tensor, *sources: torch.Tensor, written: set) -> None:
    """`target` <- the sources stacked along the output dimension (one source: the source itself)."""
    value = torch.cat(sources, dim=0) if len(sources) > 1 else sources[0]
    if target.shape != value.shape:
        raise ValueError(f"a Marian weight of shape {tuple(value.shape)} does not fit ours of {tuple(target.shape)}")
    target.copy_(value)
    written.add(target.data_ptr())


def _copy_linear(ours: torch.nn.Linear, *marian: torch.nn.Linear, written: set) -> None:
    _copy(ours.weight, *(linear.weight for linear in marian), written=written)
    _copy(ours.bias, *(linear.bias for linear in marian), written=written)


def _copy_norm(ours: torch.nn.LayerNorm, marian: torch.nn.LayerNorm, written: set) -> None:
    _copy(ours.weight, marian.weight, written=written)
    _copy(ours.bias, marian.bias, written=written)


def _copy_self_attention(ours, marian, written: set) -> None:
    _copy_linear(ours.qkv_proj, marian.q_proj, marian.k_proj, marian.v_proj, written=written)
    _copy_linear(ours.o_proj, marian.out_proj, written=written)


def copy_weights(marian, ours: VanillaTransformerForConditionalGeneration) -> None:
    """Every weight of `ours` from `marian` (a MarianMTModel); an error if one of ours is left unwritten."""
    written: set[int] = set()
    with torch.no_grad():
        for stack, marian_stack in (
            (ours.model.encoder, marian.model.encoder),
            (ours.model.decoder, marian.model.decoder),
        ):
            _copy(stack.embed_tokens.weight, marian_stack.embed_tokens.weight, written=written)
            for layer, marian_layer in zip(stack.layers, marian_stack.layers, strict=True):
                _copy_self_attention(layer.self_attn, marian_layer.self_attn, written)
                _copy_norm(layer.self_attn_residual.norm, marian_layer.self_attn_layer_norm, written)
                if hasattr(layer, "cross_attn"):
                    cross = marian_layer.encoder_attn
                    _copy_linear(layer.cross_attn.q_proj, cross.q_proj, written=written)
                    _copy_linear(layer.cross_attn.kv_proj, cross.k_proj, cross.v_proj, written=written)
                    _copy_linear(layer.cross_attn.o_proj, cross.out_proj, written=written)
                    _copy_norm(layer.cross_attn_residual.norm, marian_layer.encoder_attn_layer_norm, written)
                _copy_linear(layer.feed_forward.up_proj, marian_layer.fc1, written=written)
                _copy_linear(layer.feed_forward.down_proj, marian_layer.fc2, written=written)
                _copy_norm(layer.feed_forward_residual.norm, marian_layer.final_layer_norm, written)
        _copy(ours.lm_head.weight, marian.lm_head.weight, written=written)
        _copy(ours.final_logits_bias, marian.final_logits_bias, written=written)
    left = [name for name, tensor in ours.state_dict().items() if tensor.data_ptr() not in written]
    if left:
        raise ValueError(f"the conversion left weights of ours unwritten: {', '.join(left)}")


def source_license(source: str | Path) -> str | None:
    """The license of the source's model card (its README.md front matter), if it names one."""
    from huggingface_hub import ModelCard

    from ..common.hub_connection import hub_reachable, offline_mode

    local = Path(source)
    try:
        if local.is_dir():
            readme = local / "README.md"
            return ModelCard.load(readme).data.license if readme.is_file() else None
        if offline_mode() or not hub_reachable():
            return None
        return ModelCard.load(str(source)).data.license
    except Exception:  # a card is documentation: a missing or unreadable one must not stop the conversion
        return None


def write_model_card(output: Path, source: str | Path, license_name: str | None, config) -> None:
    from huggingface_hub import ModelCard, ModelCardData

    from ..hub.model_card import architecture_rows

    is_hub_id = not Path(source).exists()
    data = ModelCardData(
        license=license_name,
        library_name="transformers",
        tags=["translation", "marian", "vanilla-transformer"],
        base_model=str(source) if is_hub_id else None,
        pipeline_tag="translation",
    )
    where = f"[{source}](https://huggingface.co/{source})" if is_hub_id else f"the local folder `{source}`"
    license_text = (
        f"under the license of the original model, **{license_name}**"
        if license_name
        else "under the license of the original model, which its model card did not name: check it before use"
    )
    rows = "\n".join(f"| {name} | {value} |" for name, value, _ in architecture_rows(config))
    content = f"""---
{data.to_yaml()}
---

# {output.name}

A Marian translation model converted from {where} with `vanilla-transformer convert marian`: the same weights, in
the readable encoder-decoder Transformer of the `vanilla-transformer` package, with the original Marian tokenizer.
Its logits match `MarianMTModel`'s (within 1e-5 in float32), so it translates as the original does.

The weights come from {where}, {license_text}; the conversion changes no value, only their layout.

Load it with `AutoModelForSeq2SeqLM.from_pretrained(folder, trust_remote_code=True)` and
`AutoTokenizer.from_pretrained(folder, trust_remote_code=True)`, or
`vanilla-transformer translate --model FOLDER`.

| switch | this model |
| --- | --- |
{rows}
| sinusoid layout | {config.sinusoid_layout} |
| final logits bias | {"yes" if config.final_logits_bias else "no"} |
| target vocabulary | {config.target_vocab_size:,} |
"""
    ModelCard(content).save(output / "README.md")


def marian_as_ours(
    source: str | Path, overrides: dict | None = None, attn_implementation: str | None = None
) -> tuple[VanillaTransformerForConditionalGeneration, object]:
    """The MarianMTModel `source` (a local folder or a Hub id) as our model, in memory, with Marian's generation
    config, and its tokenizer: what `convert marian` saves, and what `train --from_model` starts from. `overrides`
    (dropout, label smoothing) are set on our config before the model is built.

    What our config cannot express is refused, naming the Marian field and value, before any weight is read."""
    from transformers import MarianMTModel, MarianTokenizer

    from ..common.model_folder import load_config, load_model_folder, load_tokenizer

    import_sentencepiece()
    marian_config = load_config(source)
    check_convertible(marian_config, source)
    config = config_from_marian(marian_config)
    for name, value in (overrides or {}).items():
        setattr(config, name, value)
    config.validate()
    tokenizer = load_tokenizer(source, described_as="model")
    if not isinstance(tokenizer, MarianTokenizer):
        raise ValueError(f"{source} holds a {type(tokenizer).__name__}, not the MarianTokenizer of a Marian model")
    marian = load_model_folder(source, model_class=MarianMTModel, dtype=torch.float32).eval()
    ours = VanillaTransformerForConditionalGeneration._from_config(config, attn_implementation=attn_implementation)
    copy_weights(marian, ours.eval())
    ours.generation_config = copy.deepcopy(marian.generation_config)
    return ours, tokenizer


def convert_marian(source: str | Path, output: str | Path, force: bool = False) -> Path:
    """Write the MarianMTModel `source` (a local folder or a Hub id) as our model folder `output`: config, safetensors,
    generation config (Marian's, with its decoder start, padding and forbidden tokens), the remote code, a model card
    naming the source and its license, and Marian's tokenizer. Returns `output`.

    What our config cannot express is refused, naming the Marian field and value, before any weight is read; an
    `output` that holds files is refused unless `force`."""
    output = Path(output)
    check_output_folder(output, source, "Marian", force)
    ours, tokenizer = marian_as_ours(source)
    if output.exists():
        shutil.rmtree(output)
    output.mkdir(parents=True)
    ours.save_pretrained(output)
    tokenizer.save_pretrained(output)
    write_model_card(output, source, source_license(source), ours.config)
    return output


def add_convert_subcommand(subparsers) -> None:
    """Add `convert marian SOURCE OUTPUT [--force]`; the handler is in `func`."""
    convert = subparsers.add_parser("convert", help="turn another library's model into one of our folders")
    kinds = convert.add_subparsers(dest="kind", required=True)
    marian = kinds.add_parser(
        "marian",
        help="a MarianMTModel (Helsinki-NLP/opus-mt-*) as our folder, with its tokenizer",
        description="Convert a Marian translation model (a local folder or Hub id) into our model folder: the "
        "same weights and outputs, Marian's tokenizer and generation settings, a model card naming the source and "
        "its license. Needs sentencepiece (the .[marian] extra).",
    )
    marian.add_argument("source", help="a MarianMTModel folder or Hub id, e.g. Helsinki-NLP/opus-mt-en-de")
    marian.add_argument("output", type=Path, help="the new model folder")
    marian.add_argument("--force", action="store_true", help="replace OUTPUT if it holds files")
    marian.set_defaults(func=_run_convert_marian)


def _run_convert_marian(args) -> int:
    output = convert_marian(args.source, args.output, args.force)
    print(f"wrote {output} (converted from Marian {args.source})")
    return 0


__all__ = [
    "add_convert_subcommand",
    "check_convertible",
    "config_from_marian",
    "convert_marian",
    "copy_weights",
    "import_sentencepiece",
    "marian_as_ours",
    "unsupported_fields",
]
