"""Where a token sits: sinusoidal, learned and rotary position encodings, and ALiBi's linear biases.

Sinusoidal and learned encodings are added to the token embeddings at the bottom of each stack;
rotary encodings instead rotate queries and keys inside self-attention, and ALiBi adds a penalty that grows with
the distance between query and key to the self-attention scores.
"""

import math

import torch
from torch import nn


def inverse_frequencies(dim: int, base: float, device=None) -> torch.Tensor:
    """1 / base^(2i/dim) for i in [0, dim/2): the wavelengths form a geometric progression.

    Written as exp(-(2i/dim) ln base): torch.compile's CPU code generation keeps a table computed with exp as a
    buffer that its users read, while one of powers, sines and cosines alone is recomputed inside every kernel that
    reads it (the rotary table in each attention's kernels: 100 of 714 ms of a compiled step at the Multi30k
    recipe's size, against 0.2 ms for the table)."""
    exponents = torch.arange(0, dim, 2, device=device, dtype=torch.float32) / dim
    return torch.exp(exponents * -math.log(base))


class SinusoidalPositionalEncoding(nn.Module):
    """PE(pos, 2i) = sin(pos / 10000^(2i/d)), PE(pos, 2i+1) = cos(pos / 10000^(2i/d)).

    Computed from the positions on each call, so any length works and nothing is stored in checkpoints. The
    "sines_then_cosines" layout holds the same values in another channel order, Marian's: every sine in the first
    half, every cosine in the second.
    """

    def __init__(self, d_model: int, layout: str = "interleaved"):
        super().__init__()
        self.d_model = d_model
        self.layout = layout

    def forward(self, start: int, length: int, device: torch.device, dtype: torch.dtype) -> torch.Tensor:
        # positions: (seq,) -> angles: (seq, d_model/2)
        positions = torch.arange(length, device=device, dtype=torch.float32) + start
        angles = positions[:, None] * inverse_frequencies(self.d_model, 10000.0, device)
        if self.layout == "sines_then_cosines":
            # (seq, d_model/2) twice -> (seq, d_model)
            encoding = torch.cat((angles.sin(), angles.cos()), dim=-1)
        else:
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
    """cos and sin of the rotary angles (Su et al., 2021) for a run of positions, shared by all layers of a stack.

    The config's `rope_parameters` may stretch the angles for inputs longer than those trained on (`trained_length`),
    with the rope_type names of transformers: "linear" divides the positions by `factor` (Chen et al., 2023); "ntk"
    raises the base to theta * factor^(d/(d-2)), which slows the lowest frequency `factor` times and leaves the
    highest as trained (NTK-aware scaling, bloc97, 2023); "dynamic" does the same with the factor that the current
    length needs, and nothing up to `trained_length` (as in transformers: with a cache, keys keep the rotation they
    were cached with, and padding counts in the length).
    """

    def __init__(
        self, head_dim: int, theta: float, rope_type: str = "default", factor: float = 1.0, trained_length: int = 1
    ):
        super().__init__()
        self.head_dim = head_dim
        self.theta = theta
        self.rope_type = rope_type
        self.factor = factor
        self.trained_length = trained_length

    def base(self, total_length: int) -> float:
        # the base change that turns a stretch of `factor` into a slowdown of the lowest frequency by `factor`
        exponent = self.head_dim / (self.head_dim - 2) if self.head_dim > 2 else 1.0
        if self.rope_type == "ntk":
            return self.theta * self.factor**exponent
        if self.rope_type == "dynamic" and total_length > self.trained_length:
            stretch = self.factor * total_length / self.trained_length - (self.factor - 1)
            return self.theta * stretch**exponent
        return self.theta

    def forward(
        self, start: int, length: int, device: torch.device, dtype: torch.dtype
    ) -> tuple[torch.Tensor, torch.Tensor]:
        # (seq,) x (head_dim/2,) -> (seq, head_dim/2) -> (seq, head_dim): the two halves rotate as pairs
        positions = torch.arange(length, device=device, dtype=torch.float32) + start
        if self.rope_type == "linear":
            positions = positions / self.factor
        angles = positions[:, None] * inverse_frequencies(self.head_dim, self.base(start + length), device)
        angles = torch.cat((angles, angles), dim=-1)
        # in the activations' dtype, or eager and sdpa drift apart in half precision
        return angles.cos().to(dtype), angles.sin().to(dtype)


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    first, second = x.chunk(2, dim=-1)
    return torch.cat((-second, first), dim=-1)


def apply_rotary(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate (batch, heads, seq, head_dim) queries or keys by position-dependent angles (cos/sin: (seq, head_dim))."""
    return x * cos + rotate_half(x) * sin


def alibi_slopes(heads: int) -> list[float]:
    """Head h of n gets the slope 2^(-8h/n) (Press et al., 2022); for n not a power of two, the slopes of the power of
    two below it, then every other slope of the power of two above it, as the paper's code does."""
    if heads & (heads - 1) == 0:
        return [2 ** (-8 * head / heads) for head in range(1, heads + 1)]
    below = 2 ** math.floor(math.log2(heads))
    return alibi_slopes(below) + alibi_slopes(2 * below)[::2][: heads - below]


class LinearBiases(nn.Module):
    """ALiBi: self-attention scores get -m_h * distance, a penalty growing with how far the key is from the query,
    with a fixed slope m_h per head and no position vectors at all. The decoder looks back only (distance i - j); the
    encoder looks both ways (|i - j|), so that left or right padding moves no distance between real tokens."""

    def __init__(self, heads: int, causal: bool):
        super().__init__()
        self.slopes = alibi_slopes(heads)
        self.causal = causal

    def forward(self, start: int, length: int, device: torch.device, dtype: torch.dtype) -> torch.Tensor:
        """(1, heads, length, start + length): the bias of the `length` new queries over every key so far; attention
        keeps the last columns when its cache holds fewer keys (a sliding window)."""
        queries = torch.arange(length, device=device) + start
        keys = torch.arange(start + length, device=device)
        offset = keys[None, :] - queries[:, None]
        # the decoder's future keys are masked anyway; clamping keeps their bias finite
        distance = -offset.clamp(max=0) if self.causal else offset.abs()
        slopes = torch.tensor(self.slopes, device=device, dtype=torch.float32)
        return (-slopes[:, None, None] * distance).unsqueeze(0).to(dtype)


def build_absolute_positions(config) -> nn.Module | None:
    """The additive position encoding of a stack, or None when positions are rotary or ALiBi's biases."""
    if config.position_embedding_type == "sinusoidal":
        return SinusoidalPositionalEncoding(config.d_model, config.sinusoid_layout)
    if config.position_embedding_type == "learned":
        return LearnedPositionalEmbedding(config.max_position_embeddings, config.d_model)
    return None


def build_rotary(config, attention_heads: int) -> RotaryEmbedding | None:
    if config.position_embedding_type != "rope":
        return None
    rope = config.rope_parameters
    return RotaryEmbedding(
        config.d_model // attention_heads,
        float(rope["rope_theta"]),
        rope["rope_type"],
        float(rope.get("factor", 1.0)),
        config.max_position_embeddings,
    )


def build_linear_biases(config, attention_heads: int, causal: bool) -> LinearBiases | None:
    return LinearBiases(attention_heads, causal) if config.position_embedding_type == "alibi" else None


def embedding_scale(config) -> float:
    return math.sqrt(config.d_model) if config.scale_embedding else 1.0
