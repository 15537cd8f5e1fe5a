"""Scaled dot-product multi-head attention: self-attention of either stack and the decoder's cross-attention.

The score computation itself is dispatched through transformers' attention interface, so
`attn_implementation` picks "eager" (ours below, returns the weights), "sdpa" or flash attention.
"""

from collections.abc import Callable

import torch
from torch import nn
from transformers.cache_utils import Cache, EncoderDecoderCache
from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

from .positions import apply_rotary


def repeat_kv(states: torch.Tensor, groups: int) -> torch.Tensor:
    """(batch, kv_heads, seq, head_dim) -> (batch, kv_heads * groups, seq, head_dim).

    Each key/value head serves `groups` query heads.
    """
    if groups == 1:
        return states
    batch, kv_heads, seq, head_dim = states.shape
    states = states[:, :, None].expand(batch, kv_heads, groups, seq, head_dim)
    return states.reshape(batch, kv_heads * groups, seq, head_dim)


def eager_attention_forward(
    module: nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    scaling: float,
    dropout: float = 0.0,
    position_bias: torch.Tensor | None = None,
    **kwargs,
) -> tuple[torch.Tensor, torch.Tensor]:
    """softmax(Q K^T / sqrt(d_k) + bias + mask) V, written out so the attention weights can be returned; the bias is
    ALiBi's, when positions are given that way."""
    key = repeat_kv(key, module.num_key_value_groups)
    value = repeat_kv(value, module.num_key_value_groups)
    # (batch, heads, q_len, head_dim) @ (batch, heads, head_dim, kv_len) -> (batch, heads, q_len, kv_len)
    scores = torch.matmul(query, key.transpose(2, 3)) * scaling
    if position_bias is not None:
        scores = scores + position_bias
    if attention_mask is not None:
        # masking_utils gives eager an additive float mask: 0 where allowed, the dtype's minimum where not
        scores = scores + attention_mask[..., : key.shape[-2]]
    weights = nn.functional.softmax(scores, dim=-1, dtype=torch.float32).to(query.dtype)
    weights = nn.functional.dropout(weights, p=dropout, training=module.training)
    # (batch, heads, q_len, kv_len) @ (batch, heads, kv_len, head_dim) -> (batch, q_len, heads, head_dim)
    output = torch.matmul(weights, value).transpose(1, 2).contiguous()
    return output, weights


class VanillaTransformerAttention(nn.Module):
    """Multi-head attention with h query heads and h_kv key/value heads (h_kv = h: MHA, 1: MQA, else GQA).

    Self-attention projects queries, keys and values with one fused matrix; cross-attention projects the
    queries from the decoder and keys/values (fused) from the encoder output, once per generate call.
    """

    def __init__(self, config, layer_idx: int, *, is_decoder: bool, is_cross_attention: bool = False):
        super().__init__()
        self.config = config
        num_heads = config.decoder_attention_heads if is_decoder else config.encoder_attention_heads
        self.num_heads = num_heads
        self.num_key_value_heads = config.kv_heads(num_heads)
        self.num_key_value_groups = num_heads // self.num_key_value_heads
        self.head_dim = config.d_model // num_heads
        self.scaling = self.head_dim**-0.5
        # read by the sdpa and flash paths; encoder and cross-attention see every key
        self.is_causal = is_decoder and not is_cross_attention
        self.is_cross_attention = is_cross_attention
        self.layer_idx = layer_idx
        self.attention_dropout = config.attention_dropout

        query_width = num_heads * self.head_dim
        kv_width = self.num_key_value_heads * self.head_dim
        self.kv_width = kv_width
        if is_cross_attention:
            self.q_proj = nn.Linear(config.d_model, query_width)
            self.kv_proj = nn.Linear(config.d_model, 2 * kv_width)
        else:
            self.qkv_proj = nn.Linear(config.d_model, query_width + 2 * kv_width)
        self.o_proj = nn.Linear(query_width, config.d_model)

    def _bias_over_keys(self, position_bias: torch.Tensor, keys: int) -> torch.Tensor:
        """ALiBi's bias covers the keys 0 .. start + length - 1. A sliding-window cache keeps only the last of them; a
        static cache holds max_cache_len slots, one per position, those past the query masked: their bias is 0."""
        covered = position_bias.shape[-1]
        if keys <= covered:
            return position_bias[..., covered - keys :]
        if self.config.sliding_window:
            # a static sliding-window cache rolls its slots over: they no longer sit at their positions
            raise ValueError(
                "position_embedding_type='alibi' with sliding_window needs the dynamic cache, not a static one"
            )
        return nn.functional.pad(position_bias, (0, keys - covered))

    def _split_heads(self, states: torch.Tensor) -> torch.Tensor:
        # (batch, seq, heads * head_dim) -> (batch, heads, seq, head_dim)
        return states.unflatten(-1, (-1, self.head_dim)).transpose(1, 2)

    def _self_attention_states(self, hidden_states, rotary, cache):
        query, key, value = self.qkv_proj(hidden_states).split(
            (self.num_heads * self.head_dim, self.kv_width, self.kv_width), dim=-1
        )
        query, key, value = self._split_heads(query), self._split_heads(key), self._split_heads(value)
        if rotary is not None:
            cos, sin = rotary
            query, key = apply_rotary(query, cos, sin), apply_rotary(key, cos, sin)
        if cache is not None:
            self_cache = cache.self_attention_cache if isinstance(cache, EncoderDecoderCache) else cache
            key, value = self_cache.update(key, value, self.layer_idx)
        return query, key, value

    def _cross_attention_states(self, hidden_states, encoder_hidden_states, cache):
        query = self._split_heads(self.q_proj(hidden_states))
        if cache is not None and cache.is_updated.get(self.layer_idx):
            # the encoder output is fixed during generation: reuse its keys and values
            layer_cache = cache.cross_attention_cache.layers[self.layer_idx]
            return query, layer_cache.keys, layer_cache.values
        key, value = self.kv_proj(encoder_hidden_states).chunk(2, dim=-1)
        key, value = self._split_heads(key), self._split_heads(value)
        if cache is not None:
            key, value = cache.cross_attention_cache.update(key, value, self.layer_idx)
            cache.is_updated[self.layer_idx] = True
        return query, key, value

    def forward(
        self,
        hidden_states: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        encoder_hidden_states: torch.Tensor | None = None,
        rotary: tuple[torch.Tensor, torch.Tensor] | None = None,
        position_bias: torch.Tensor | None = None,
        cache: Cache | None = None,
        **kwargs,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        if self.is_cross_attention:
            query, key, value = self._cross_attention_states(hidden_states, encoder_hidden_states, cache)
        else:
            query, key, value = self._self_attention_states(hidden_states, rotary, cache)
        if position_bias is not None:
            kwargs["position_bias"] = self._bias_over_keys(position_bias, key.shape[-2])

        attention_interface: Callable = ALL_ATTENTION_FUNCTIONS.get_interface(
            self.config._attn_implementation, eager_attention_forward
        )
        output, weights = attention_interface(
            self,
            query,
            key,
            value,
            attention_mask,
            dropout=self.attention_dropout if self.training else 0.0,
            scaling=self.scaling,
            **kwargs,
        )
        # (batch, seq, heads, head_dim) -> (batch, seq, heads * head_dim)
        output = output.reshape(*hidden_states.shape[:-1], -1).contiguous()
        return self.o_proj(output), weights
