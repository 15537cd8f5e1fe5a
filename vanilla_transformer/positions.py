"""Where a token sits: sinusoidal, learned and rotary position encodings.

Sinusoidal and learned encodings are added to the token embeddings at the bottom of each stack;
rotary encodings instead rotate queries and keys inside self-attention.
"""

import math

import torch
from torch import nn


def inverse_frequencies(dim: int, base: float, device=None) -> torch.Tensor:
    """1 / base^(2i/dim) for i in [0, dim/2): the wavelengths form a geometric progression."""
    return 1.0 / (base ** (torch.arange(0, dim, 2, device=device, dtype=torch.float32) / dim))


class SinusoidalPositionalEncoding(nn.Module):
    """PE(pos, 2i) = sin(pos / 10000^(2i/d)), PE(pos, 2i+1) = cos(pos / 10000^(2i/d)).

    Computed from the positions on each call, so any length works and nothing is stored in checkpoints.
    """

    def __init__(self, d_model: int):
        super().__init__()
        self.d_model = d_model

    def forward(self, start: int, length: int, device: torch.device, dtype: torch.dtype) -> torch.Tensor:
        # positions: (seq,) -> angles: (seq, d_model/2)
        positions = torch.arange(length, device=device, dtype=torch.float32) + start
        angles = positions[:, None] * inverse_frequencies(self.d_model, 10000.0, device)
        # interleave so that even channels hold sin and odd channels cos: (seq, d_model/2, 2) -> (seq, d_model)
        encoding = torch.stack((angles.sin(), angles.cos()), dim=-1).flatten(-2)
        return encoding[:, : self.d_model].to(dtype)


class LearnedPositionalEmbedding(nn.Embedding):
    """A trained table of max_position_embeddings rows; positions past the table are an error, not a wrap-around."""

    def forward(self, start: int, length: int, device: torch.device, dtype: torch.dtype) -> torch.Tensor:
        if start + length > self.num_embeddings:
            raise ValueError(
                f"A sequence of {start + length} positions does not fit the learned position table of "
                f"max_position_embeddings={self.num_embeddings} rows; shorten the input or use "
                "position_embedding_type='sinusoidal' or 'rope'."
            )
        positions = torch.arange(length, device=device) + start
        return super().forward(positions).to(dtype)


class RotaryEmbedding(nn.Module):
    """cos and sin of the rotary angles (Su et al., 2021) for a run of positions, shared by all layers of a stack."""

    def __init__(self, head_dim: int, theta: float):
        super().__init__()
        self.head_dim = head_dim
        self.theta = theta

    def forward(
        self, start: int, length: int, device: torch.device, dtype: torch.dtype
    ) -> tuple[torch.Tensor, torch.Tensor]:
        # (seq,) x (head_dim/2,) -> (seq, head_dim/2) -> (seq, head_dim): the two halves rotate as pairs
        positions = torch.arange(length, device=device, dtype=torch.float32) + start
        angles = positions[:, None] * inverse_frequencies(self.head_dim, self.theta, device)
        angles = torch.cat((angles, angles), dim=-1)
        # in the activations' dtype, or eager and sdpa drift apart in half precision
        return angles.cos().to(dtype), angles.sin().to(dtype)


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    first, second = x.chunk(2, dim=-1)
    return torch.cat((-second, first), dim=-1)


def apply_rotary(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate (batch, heads, seq, head_dim) queries or keys by position-dependent angles (cos/sin: (seq, head_dim))."""
    return x * cos + rotate_half(x) * sin


def build_absolute_positions(config) -> nn.Module | None:
    """The additive position encoding of a stack, or None when positions are rotary."""
    if config.position_embedding_type == "sinusoidal":
        return SinusoidalPositionalEncoding(config.d_model)
    if config.position_embedding_type == "learned":
        return LearnedPositionalEmbedding(config.max_position_embeddings, config.d_model)
    return None


def build_rotary(config, attention_heads: int) -> RotaryEmbedding | None:
    if config.position_embedding_type != "rope":
        return None
    return RotaryEmbedding(config.d_model // attention_heads, float(config.rope_theta))


def embedding_scale(config) -> float:
    return math.sqrt(config.d_model) if config.scale_embedding else 1.0
