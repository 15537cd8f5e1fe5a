"""A translation model as three ONNX graphs, traced by torch's own exporter (`torch.onnx.export(dynamo=True)`) from
the model's code as it is, with optimum's names for a seq2seq export:

- `encoder_model.onnx`: input_ids, attention_mask (batch, source) -> last_hidden_state (batch, source, d_model);
- `decoder_model.onnx`, the first step: input_ids (batch, 1: the decoder start token), encoder_attention_mask,
  encoder_hidden_states -> logits (batch, 1, target vocabulary) and, per layer N, present.N.decoder.key/value (the
  self-attention cache) and present.N.encoder.key/value (the source's keys and values, computed once);
- `decoder_with_past_model.onnx`, every later step: input_ids (batch, 1), encoder_attention_mask and
  past_key_values.N.{decoder,encoder}.{key,value} -> logits and present.N.decoder.key/value, the cache one longer.

Keys and values are (batch, key/value heads, length, head size). Batch, source and cache lengths are dynamic.

The TorchScript exporter is no option: it freezes the values the model reads from tensors (its id checks, its
masks) into the graph, and the files then fail for another source length. The graphs are traced with the eager
attention: SDPA's `is_causal` flag is a Python bool the exporter cannot leave symbolic.
"""

from __future__ import annotations

import contextlib
import logging
import warnings
from pathlib import Path

import torch
from torch import nn
from transformers.cache_utils import DynamicCache, EncoderDecoderCache

from ..common.model_folder import ONNX_DECODER_FILE, ONNX_DECODER_WITH_PAST_FILE, ONNX_ENCODER_FILE
from ..modeling_vanilla_transformer import VanillaTransformerForConditionalGeneration

OPSET = 18  # onnxruntime-web runs it; the exporter's default


def past_names(layers: int, prefix: str = "past_key_values", cross: bool = True) -> list[str]:
    """optimum's names of the cache, layer by layer: decoder (self-attention) key and value, then encoder (cross)."""
    kinds = ("decoder", "encoder") if cross else ("decoder",)
    return [f"{prefix}.{layer}.{kind}.{part}" for layer in range(layers) for kind in kinds for part in ("key", "value")]


class EncoderGraph(nn.Module):
    def __init__(self, model: VanillaTransformerForConditionalGeneration):
        super().__init__()
        self.encoder = model.get_encoder()

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        return self.encoder(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state


class DecoderStep(nn.Module):
    """One decoding step with the model's own cache: the first (`first=True`: the cross-attention keys/values made
    from the encoder's output) or a later one (the whole cache given, as the previous step returned it)."""

    def __init__(self, model: VanillaTransformerForConditionalGeneration, first: bool):
        super().__init__()
        self.model, self.first = model, first

    def forward(self, input_ids: torch.Tensor, encoder_attention_mask: torch.Tensor, *states: torch.Tensor):
        config = self.model.config
        # plain layers that keep every position: with a sliding_window the mask hides what lies outside it, as with
        # the model's static cache (a sliding cache's length would be a branch on the input's length)
        cache = EncoderDecoderCache(DynamicCache(), DynamicCache())
        if self.first:
            (encoder_hidden_states,) = states
        else:
            for layer in range(config.decoder_layers):
                key, value, cross_key, cross_value = states[4 * layer : 4 * layer + 4]
                cache.self_attention_cache.update(key, value, layer)
                cache.cross_attention_cache.update(cross_key, cross_value, layer)
                cache.is_updated[layer] = True
            # the cross-attention reads the cached keys, not this; its shape sizes the source's mask
            cross_key = states[2]
            encoder_hidden_states = cross_key.new_zeros(cross_key.shape[0], cross_key.shape[2], config.d_model)
        hidden = self.model.get_decoder()(
            input_ids=input_ids,
            encoder_hidden_states=encoder_hidden_states,
            encoder_attention_mask=encoder_attention_mask,
            cache=cache,
            use_cache=True,
        ).last_hidden_state
        logits = self.model.lm_head(hidden)
        if config.final_logits_bias:
            logits = logits + self.model.final_logits_bias
        outputs = [logits]
        for layer in range(config.decoder_layers):
            own = cache.self_attention_cache.layers[layer]
            outputs += [own.keys, own.values]
            if self.first:
                cross = cache.cross_attention_cache.layers[layer]
                outputs += [cross.keys, cross.values]
        return tuple(outputs)


def example_inputs(config, batch: int = 2, source: int = 5) -> tuple[torch.Tensor, torch.Tensor]:
    """A padded batch: the exporter traces with it, and the mask's padding must be a real input, not a constant."""
    input_ids = torch.arange(source * batch).reshape(batch, source) % (config.vocab_size - 3) + 3
    attention_mask = torch.ones(batch, source, dtype=torch.long)
    attention_mask[1:, source - 2 :] = 0
    return input_ids, attention_mask


@contextlib.contextmanager
def _quiet_exporter():
    """The exporter logs a warning for each torchvision operator it cannot register (torchvision is not ours to
    install): errors only, while it runs."""
    logger = logging.getLogger("torch.onnx")
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        logger.setLevel(level)


def export_graphs(model: VanillaTransformerForConditionalGeneration, folder: Path) -> list[Path]:
    """The three graphs of `model` (eval mode, eager attention) as self-contained files in `folder`."""
    config = model.config
    batch, source, past = torch.export.Dim("batch"), torch.export.Dim("source"), torch.export.Dim("past")
    if config.position_embedding_type == "learned":  # no position past the table's rows
        source = torch.export.Dim("source", max=config.max_position_embeddings)
        past = torch.export.Dim("past", max=config.max_position_embeddings - 1)
    input_ids, attention_mask = example_inputs(config)
    start = torch.full((input_ids.shape[0], 1), config.decoder_start_token_id)
    layers = config.decoder_layers
    with torch.no_grad():
        encoder_hidden_states = EncoderGraph(model)(input_ids, attention_mask)
        first_step = DecoderStep(model, first=True)(start, attention_mask, encoder_hidden_states)
    # a cache of two positions: a length of 1 would be specialised by the exporter as a constant
    cache = [torch.cat((state, state), dim=2) if index % 4 < 2 else state for index, state in enumerate(first_step[1:])]
    mask_shape = {0: batch, 1: source}
    step_shape = {0: batch, 1: torch.export.Dim.STATIC}
    graphs = [
        (
            ONNX_ENCODER_FILE,
            EncoderGraph(model),
            (input_ids, attention_mask),
            ["input_ids", "attention_mask"],
            ["last_hidden_state"],
            (mask_shape, mask_shape),
        ),
        (
            ONNX_DECODER_FILE,
            DecoderStep(model, first=True),
            (start, attention_mask, encoder_hidden_states),
            ["input_ids", "encoder_attention_mask", "encoder_hidden_states"],
            ["logits", *past_names(layers, "present")],
            (step_shape, mask_shape, ({0: batch, 1: source},)),
        ),
        (
            ONNX_DECODER_WITH_PAST_FILE,
            DecoderStep(model, first=False),
            (start, attention_mask, *cache),
            ["input_ids", "encoder_attention_mask", *past_names(layers)],
            ["logits", *past_names(layers, "present", cross=False)],
            (step_shape, mask_shape, tuple({0: batch, 2: past if i % 4 < 2 else source} for i in range(4 * layers))),
        ),
    ]
    written = []
    for name, module, inputs, input_names, output_names, dynamic_shapes in graphs:
        with warnings.catch_warnings(), torch.no_grad(), _quiet_exporter():
            warnings.simplefilter("ignore")  # the exporter's deprecation notices, which name nothing a user can change
            program = torch.onnx.export(
                module,
                inputs,
                dynamo=True,
                opset_version=OPSET,
                input_names=input_names,
                output_names=output_names,
                dynamic_shapes=dynamic_shapes,
                verbose=False,
            )
        path = folder / name
        program.save(str(path), external_data=False)
        written.append(path)
    return written


__all__ = ["OPSET", "DecoderStep", "EncoderGraph", "export_graphs", "past_names"]
