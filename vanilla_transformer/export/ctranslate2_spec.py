"""A trained folder as a CTranslate2 model: our weights in CTranslate2's `TransformerSpec`, written by its own
`Converter` (so `--quantization` is CTranslate2's), with the tokenizer and the generation defaults beside it.

CTranslate2 expresses most of our switches directly (Post-/Pre-LN, LayerNorm/RMSNorm, ReLU/GELU/SiLU and their
gated forms, multi-query and grouped heads, learned positions, rotary positions with linear scaling). Two more are
exact by construction: sinusoidal positions are written as a table (CTranslate2's own sinusoids are laid out
[sin | cos], the paper's interleave them), and a learned residual scale gamma is folded into the sublayer's output
projection (x + gamma (W h + b) = x + (gamma W) h + gamma b). What it cannot express is refused, naming the switch.
"""

from __future__ import annotations

import json
import shutil
import tempfile
from pathlib import Path

import torch

from ..common.extras import import_ctranslate2
from ..common.model_folder import MODEL_CONFIG_FILE, check_output_folder, load_config, load_model_folder, load_tokenizer
from ..lexical_shortlist import SHORTLIST_FILE
from ..modeling_vanilla_transformer import VanillaTransformerForConditionalGeneration
from .ctranslate2_vmap import write_vocabulary_map
from .folder_shortlist import folder_shortlist

# Positions written for sinusoidal models: past every input `translate` accepts (1024 tokens) and its output
POSITION_TABLE_ROWS = 2048
QUANTIZATIONS = ("int8", "int8_float32", "int8_float16", "int8_bfloat16", "int16", "float16", "bfloat16", "float32")


def unsupported_switches(config) -> list[str]:
    """The switches of `config` CTranslate2 has no equivalent for, each with its value and why."""
    problems = []
    if config.position_embedding_type == "alibi":
        problems.append("position_embedding_type='alibi' (CTranslate2's encoder has no linear biases)")
    rope_type = (config.rope_parameters or {}).get("rope_type", "default")
    if config.position_embedding_type == "rope" and rope_type not in ("default", "linear"):
        problems.append(f"rope_parameters rope_type={rope_type!r} (CTranslate2 scales rotary positions linearly only)")
    if config.sliding_window is not None:
        problems.append(f"sliding_window={config.sliding_window} (CTranslate2's window only trims its cache)")
    return problems


def check_expressible(config) -> None:
    """A ValueError naming every switch of `config` that CTranslate2 cannot express."""
    problems = unsupported_switches(config)
    if problems:
        raise ValueError("CTranslate2 cannot express " + "; ".join(problems))


def _activation(config):
    from ctranslate2.specs import common_spec

    name = {"swiglu": "silu", "geglu": "gelu"}.get(config.activation_function, config.activation_function)
    return {
        "relu": common_spec.Activation.RELU,
        "gelu": common_spec.Activation.GELU,
        "silu": common_spec.Activation.SWISH,
    }[name]


def _stack_options(config, heads: int) -> dict:
    from ctranslate2.specs import attention_spec

    options = dict(
        num_heads=heads,
        pre_norm=config.norm_placement == "pre",
        activation=_activation(config),
        ffn_glu=config.activation_function in ("swiglu", "geglu"),
        rms_norm=config.norm_type == "rmsnorm",
        num_heads_kv=config.kv_heads(heads),
    )
    if config.position_embedding_type == "rope":
        rope = config.rope_parameters
        # rotary on every dimension (0), the two halves rotated as pairs as in ours (not interleaved)
        options.update(rotary_dim=0, rotary_interleave=False, rotary_base=float(rope["rope_theta"]))
        if rope["rope_type"] == "linear":
            options.update(
                rotary_scaling_type=attention_spec.RotaryScalingType.Linear,
                rotary_scaling_factor=float(rope["factor"]),
            )
    return options


def _array(tensor: torch.Tensor):
    return tensor.detach().to(torch.float32).cpu().numpy()


def _set_linear(spec, linear: torch.nn.Linear, scale: float = 1.0) -> None:
    spec.weight = _array(linear.weight * scale)
    if linear.bias is not None:
        spec.bias = _array(linear.bias * scale)


def _set_norm(spec, norm: torch.nn.Module) -> None:
    spec.gamma = _array(norm.weight)
    if getattr(norm, "bias", None) is not None:
        spec.beta = _array(norm.bias)


def _residual_scale(add_and_norm) -> float:
    return float(add_and_norm.scale) if add_and_norm.initial_scale is not None else 1.0


def _set_attention(spec, attention, add_and_norm, *, cross: bool) -> None:
    """CTranslate2 fuses the projections as we do: [q; k; v] for self-attention, q and [k; v] for cross-attention."""
    if cross:
        _set_linear(spec.linear[0], attention.q_proj)
        _set_linear(spec.linear[1], attention.kv_proj)
    else:
        _set_linear(spec.linear[0], attention.qkv_proj)
    _set_linear(spec.linear[-1], attention.o_proj, _residual_scale(add_and_norm))
    _set_norm(spec.layer_norm, add_and_norm.norm)


def _set_feed_forward(spec, feed_forward, add_and_norm) -> None:
    up = feed_forward.up_proj
    if feed_forward.is_gated:
        # ours: act(gate) * value from one matrix, gate rows first; CTranslate2: act(linear_0) * linear_0_noact
        gate, value = up.weight.chunk(2, dim=0)
        gate_bias, value_bias = up.bias.chunk(2, dim=0)
        spec.linear_0.weight, spec.linear_0.bias = _array(gate), _array(gate_bias)
        spec.linear_0_noact.weight, spec.linear_0_noact.bias = _array(value), _array(value_bias)
    else:
        _set_linear(spec.linear_0, up)
    _set_linear(spec.linear_1, feed_forward.down_proj, _residual_scale(add_and_norm))
    _set_norm(spec.layer_norm, add_and_norm.norm)


def _set_stack(spec, stack, config) -> None:
    embeddings = stack.embeddings
    spec.scale_embeddings = embeddings.scale
    token_spec = spec.embeddings[0] if isinstance(spec.embeddings, list) else spec.embeddings
    token_spec.weight = _array(embeddings.embed_tokens.weight)
    if config.position_embedding_type == "learned":
        spec.position_encodings.encodings = _array(embeddings.positions.weight)
    elif config.position_embedding_type == "sinusoidal":
        spec.position_encodings.encodings = _array(
            embeddings.positions(0, POSITION_TABLE_ROWS, torch.device("cpu"), torch.float32)
        )
    if stack.final_norm is not None:
        _set_norm(spec.layer_norm, stack.final_norm)
    for layer_spec, layer in zip(spec.layer, stack.layers, strict=True):
        _set_attention(layer_spec.self_attention, layer.self_attn, layer.self_attn_residual, cross=False)
        if hasattr(layer, "cross_attn"):
            _set_attention(layer_spec.attention, layer.cross_attn, layer.cross_attn_residual, cross=True)
        _set_feed_forward(layer_spec.ffn, layer.feed_forward, layer.feed_forward_residual)


def build_spec(model: VanillaTransformerForConditionalGeneration, tokenizer):
    """CTranslate2's TransformerSpec holding `model`'s weights, with the tokenizer's vocabulary and special tokens."""
    from ctranslate2.specs import transformer_spec

    config = model.config
    check_expressible(config)
    rope = config.position_embedding_type == "rope"
    encoder = transformer_spec.TransformerEncoderSpec(
        config.encoder_layers, **_stack_options(config, config.encoder_attention_heads)
    )
    decoder = transformer_spec.TransformerDecoderSpec(
        config.decoder_layers, **_stack_options(config, config.decoder_attention_heads)
    )
    if rope:
        # the spec makes a position table unless told positions are rotary; the encoder's spec has no such switch
        del encoder.position_encodings
    spec = transformer_spec.TransformerSpec(encoder, decoder)
    with torch.no_grad():
        _set_stack(spec.encoder, model.model.encoder, config)
        _set_stack(spec.decoder, model.model.decoder, config)
        _set_linear(spec.decoder.projection, model.lm_head)
        if config.final_logits_bias:
            spec.decoder.projection.bias = _array(model.final_logits_bias.squeeze(0))

    spec.config.layer_norm_epsilon = config.layer_norm_eps
    if tokenizer.bos_token is not None:  # Marian's tokenizer has none: CTranslate2 keeps its default
        spec.config.bos_token = tokenizer.bos_token
    spec.config.eos_token = tokenizer.eos_token
    spec.config.unk_token = tokenizer.unk_token
    spec.config.decoder_start_token = tokenizer.convert_ids_to_tokens(config.decoder_start_token_id)
    source, target = vocabularies(tokenizer, config)
    spec.register_source_vocabulary(source)
    spec.register_target_vocabulary(target)
    return spec


def vocabularies(tokenizer, config) -> tuple[list[str], list[str]]:
    """The source and target tokens in id order: one list twice, or Marian's two."""
    vocabulary = [token for token, _ in sorted(tokenizer.get_vocab().items(), key=lambda item: item[1])]
    if len(vocabulary) != config.vocab_size:
        raise ValueError(
            f"the tokenizer has {len(vocabulary)} tokens but the model's vocab_size is {config.vocab_size}: "
            "CTranslate2 needs one token per embedding row"
        )
    # Marian's separate vocabularies may also have one size: the tokenizer says whether they are two
    separate = config.has_separate_target_vocabulary or getattr(tokenizer, "separate_vocabs", False)
    return vocabulary, target_vocabulary(tokenizer, config) if separate else vocabulary


def target_vocabulary(tokenizer, config) -> list[str]:
    """The tokens of a separate target vocabulary in id order: Marian's tokenizer keeps it as `target_encoder`."""
    target = getattr(tokenizer, "target_encoder", None)
    if not target:
        raise ValueError(
            f"decoder_vocab_size={config.decoder_vocab_size} is a separate target vocabulary, which the tokenizer "
            f"{type(tokenizer).__name__} does not hold: CTranslate2 needs its tokens"
        )
    tokens = [token for token, _ in sorted(target.items(), key=lambda item: item[1])]
    if len(tokens) != config.decoder_vocab_size:
        raise ValueError(
            f"the tokenizer's target vocabulary has {len(tokens)} tokens but decoder_vocab_size is "
            f"{config.decoder_vocab_size}: CTranslate2 needs one token per row of the generator"
        )
    return tokens


def export_ctranslate2(
    folder: str | Path, output: str | Path, quantization: str | None = None, force: bool = False
) -> Path:
    """Write `folder` (a translation model folder or Hub repo with its tokenizer) as a CTranslate2 model in `output`,
    optionally quantized; the tokenizer, generation config and our config travel with it. Returns `output`."""
    ctranslate2 = import_ctranslate2()

    if quantization is not None and quantization not in QUANTIZATIONS:
        raise ValueError(f"quantization={quantization!r} is not one of {', '.join(QUANTIZATIONS)}")
    output = Path(output)
    check_output_folder(output, folder, "model", force)
    config = load_config(folder)
    check_expressible(config)  # the switches first: a refusal should not wait for the weights
    tokenizer = load_tokenizer(folder, described_as="model")
    shortlist = folder_shortlist(folder, config, tokenizer)
    model = load_model_folder(folder).eval()
    if not isinstance(model, VanillaTransformerForConditionalGeneration):
        raise ValueError(f"{folder} holds a {type(model).__name__}; CTranslate2 export takes a translation model")
    spec = build_spec(model, tokenizer)

    class _Converter(ctranslate2.converters.Converter):
        def _load(self):
            return spec

    if output.exists() and force:
        shutil.rmtree(output)
    with tempfile.TemporaryDirectory() as scratch:
        vmap = None
        if shortlist is not None:  # CTranslate2's vocabulary map: `translate --engine ctranslate2 --shortlist`
            vmap = write_vocabulary_map(shortlist, *vocabularies(tokenizer, model.config), Path(scratch) / "vmap.txt")
        _Converter().convert(str(output), vmap=vmap, quantization=quantization, force=True)
    if shortlist is not None:
        shortlist.save(output / SHORTLIST_FILE)  # what it was built for travels with it, for translate's checks
    tokenizer.save_pretrained(output)
    model.generation_config.save_pretrained(output)
    card = Path(folder) / "README.md"
    if card.is_file():  # the model card travels with the export: it says what the model translates
        shutil.copyfile(card, output / "README.md")
    (output / MODEL_CONFIG_FILE).write_text(json.dumps(model.config.to_dict(), indent=2, sort_keys=True) + "\n")
    return output


def add_ctranslate2_format(formats) -> None:
    """`export ctranslate2 FOLDER OUTPUT [--quantization Q] [--force]`."""
    ct2 = formats.add_parser(
        "ctranslate2",
        help="a CTranslate2 model folder (translate with: translate --engine ctranslate2 --model OUTPUT)",
        description="Write a translation model folder as a CTranslate2 model, with its tokenizer; switches "
        "CTranslate2 cannot express are refused by name.",
    )
    ct2.add_argument("folder", help="a trained model folder (or Hub repo id) with its tokenizer")
    ct2.add_argument("output", type=Path, help="the new CTranslate2 folder")
    ct2.add_argument("--quantization", choices=QUANTIZATIONS, help="weights' type on disk (default float32)")
    ct2.add_argument("--force", action="store_true", help="replace OUTPUT if it holds files")
    ct2.set_defaults(func=_run_export_ctranslate2)


def _run_export_ctranslate2(args) -> int:
    output = export_ctranslate2(args.folder, args.output, args.quantization, args.force)
    print(f"wrote {output} (CTranslate2, {args.quantization or 'float32'})")
    return 0


__all__ = [
    "POSITION_TABLE_ROWS",
    "add_ctranslate2_format",
    "build_spec",
    "export_ctranslate2",
    "unsupported_switches",
]
