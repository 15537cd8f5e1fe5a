"""One encoder layer (self-attention, FFN) and one decoder layer (masked self-attention, cross-attention, FFN),
section 3.1; each sublayer sits inside an Add & Norm."""

import torch
from transformers.modeling_layers import GradientCheckpointingLayer

from .attention import VanillaTransformerAttention
from .feed_forward import PositionwiseFeedForward
from .residual import AddAndNorm


def drop_path_rate(config, layer_idx: int, num_layers: int) -> float:
    """Stochastic depth grows linearly with depth, from 0 at the bottom layer to drop_path_rate at the top one."""
    if num_layers == 1:
        return config.drop_path_rate
    return config.drop_path_rate * layer_idx / (num_layers - 1)


def build_add_and_norm(config, drop_path: float) -> AddAndNorm:
    return AddAndNorm(
        config.d_model,
        config.norm_placement,
        config.norm_type,
        config.layer_norm_eps,
        config.dropout,
        drop_path,
        config.residual_scaling,
    )


def build_feed_forward(config, ffn_dim: int) -> PositionwiseFeedForward:
    return PositionwiseFeedForward(config.d_model, ffn_dim, config.activation_function, config.activation_dropout)


class VanillaTransformerEncoderLayer(GradientCheckpointingLayer):
    def __init__(self, config, layer_idx: int):
        super().__init__()
        drop_path = drop_path_rate(config, layer_idx, config.encoder_layers)
        self.self_attn = VanillaTransformerAttention(config, layer_idx, is_decoder=False)
        self.self_attn_residual = build_add_and_norm(config, drop_path)
        self.feed_forward = build_feed_forward(config, config.encoder_ffn_dim)
        self.feed_forward_residual = build_add_and_norm(config, drop_path)

    def forward(
        self,
        hidden_states: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        rotary: tuple[torch.Tensor, torch.Tensor] | None = None,
        position_bias: torch.Tensor | None = None,
        **kwargs,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        attended, self_attn_weights = self.self_attn(
            self.self_attn_residual.sublayer_input(hidden_states),
            attention_mask,
            rotary=rotary,
            position_bias=position_bias,
            **kwargs,
        )
        hidden_states = self.self_attn_residual.add_and_norm(hidden_states, attended)
        transformed = self.feed_forward(self.feed_forward_residual.sublayer_input(hidden_states))
        hidden_states = self.feed_forward_residual.add_and_norm(hidden_states, transformed)
        return hidden_states, self_attn_weights


class VanillaTransformerDecoderLayer(GradientCheckpointingLayer):
    def __init__(self, config, layer_idx: int):
        super().__init__()
        drop_path = drop_path_rate(config, layer_idx, config.decoder_layers)
        self.self_attn = VanillaTransformerAttention(config, layer_idx, is_decoder=True)
        self.self_attn_residual = build_add_and_norm(config, drop_path)
        self.cross_attn = VanillaTransformerAttention(config, layer_idx, is_decoder=True, is_cross_attention=True)
        self.cross_attn_residual = build_add_and_norm(config, drop_path)
        self.feed_forward = build_feed_forward(config, config.decoder_ffn_dim)
        self.feed_forward_residual = build_add_and_norm(config, drop_path)

    def forward(
        self,
        hidden_states: torch.Tensor,
        attention_mask: torch.Tensor | None,
        encoder_hidden_states: torch.Tensor,
        encoder_attention_mask: torch.Tensor | None = None,
        rotary: tuple[torch.Tensor, torch.Tensor] | None = None,
        position_bias: torch.Tensor | None = None,
        cache=None,
        **kwargs,
    ) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor | None]:
        # positions (rotary or ALiBi) enter self-attention only: cross-attention relates the two sentences by content
        attended, self_attn_weights = self.self_attn(
            self.self_attn_residual.sublayer_input(hidden_states),
            attention_mask,
            rotary=rotary,
            position_bias=position_bias,
            cache=cache,
            **kwargs,
        )
        hidden_states = self.self_attn_residual.add_and_norm(hidden_states, attended)
        attended, cross_attn_weights = self.cross_attn(
            self.cross_attn_residual.sublayer_input(hidden_states),
            encoder_attention_mask,
            encoder_hidden_states=encoder_hidden_states,
            cache=cache,
            **kwargs,
        )
        hidden_states = self.cross_attn_residual.add_and_norm(hidden_states, attended)
        transformed = self.feed_forward(self.feed_forward_residual.sublayer_input(hidden_states))
        hidden_states = self.feed_forward_residual.add_and_norm(hidden_states, transformed)
        return hidden_states, self_attn_weights, cross_attn_weights
