"""One encoder layer (self-attention, FFN) and one decoder layer (masked self-attention, cross-attention, FFN)."""

import torch
from transformers.modeling_layers import GradientCheckpointingLayer

from .attention import VanillaTransformerAttention
from .feed_forward import PositionwiseFeedForward
from .residual import ResidualConnection


class VanillaTransformerEncoderLayer(GradientCheckpointingLayer):
    def __init__(self, config, layer_idx: int, drop_path_rate: float):
        super().__init__()
        self.self_attn = VanillaTransformerAttention(
            config, config.encoder_attention_heads, is_causal=False, is_cross_attention=False, layer_idx=layer_idx
        )
        self.self_attn_residual = ResidualConnection(config, drop_path_rate)
        self.feed_forward = PositionwiseFeedForward(
            config.d_model, config.encoder_ffn_dim, config.activation_function, config.activation_dropout
        )
        self.feed_forward_residual = ResidualConnection(config, drop_path_rate)

    def forward(
        self,
        hidden_states: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        rotary: tuple[torch.Tensor, torch.Tensor] | None = None,
        **kwargs,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        attended, self_attn_weights = self.self_attn(
            self.self_attn_residual.sublayer_input(hidden_states), attention_mask, rotary=rotary, **kwargs
        )
        hidden_states = self.self_attn_residual(hidden_states, attended)
        transformed = self.feed_forward(self.feed_forward_residual.sublayer_input(hidden_states))
        hidden_states = self.feed_forward_residual(hidden_states, transformed)
        return hidden_states, self_attn_weights


class VanillaTransformerDecoderLayer(GradientCheckpointingLayer):
    def __init__(self, config, layer_idx: int, drop_path_rate: float):
        super().__init__()
        self.self_attn = VanillaTransformerAttention(
            config, config.decoder_attention_heads, is_causal=True, is_cross_attention=False, layer_idx=layer_idx
        )
        self.self_attn_residual = ResidualConnection(config, drop_path_rate)
        self.cross_attn = VanillaTransformerAttention(
            config, config.decoder_attention_heads, is_causal=False, is_cross_attention=True, layer_idx=layer_idx
        )
        self.cross_attn_residual = ResidualConnection(config, drop_path_rate)
        self.feed_forward = PositionwiseFeedForward(
            config.d_model, config.decoder_ffn_dim, config.activation_function, config.activation_dropout
        )
        self.feed_forward_residual = ResidualConnection(config, drop_path_rate)

    def forward(
        self,
        hidden_states: torch.Tensor,
        attention_mask: torch.Tensor | None,
        encoder_hidden_states: torch.Tensor,
        encoder_attention_mask: torch.Tensor | None = None,
        rotary: tuple[torch.Tensor, torch.Tensor] | None = None,
        cache=None,
        **kwargs,
    ) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor | None]:
        attended, self_attn_weights = self.self_attn(
            self.self_attn_residual.sublayer_input(hidden_states), attention_mask, rotary=rotary, cache=cache, **kwargs
        )
        hidden_states = self.self_attn_residual(hidden_states, attended)
        attended, cross_attn_weights = self.cross_attn(
            self.cross_attn_residual.sublayer_input(hidden_states),
            encoder_attention_mask,
            encoder_hidden_states=encoder_hidden_states,
            cache=cache,
            **kwargs,
        )
        hidden_states = self.cross_attn_residual(hidden_states, attended)
        transformed = self.feed_forward(self.feed_forward_residual.sublayer_input(hidden_states))
        hidden_states = self.feed_forward_residual(hidden_states, transformed)
        return hidden_states, self_attn_weights, cross_attn_weights
