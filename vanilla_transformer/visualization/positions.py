"""Pictures of position information: the sinusoidal encoding, learned position tables, rotary distance decay and
ALiBi's penalties."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from ..positions import LinearBiases, RotaryEmbedding, SinusoidalPositionalEncoding, apply_rotary
from .rendering import Curves, Heatmap, Plot, render


@dataclass
class PositionPlot(Plot):
    """`encodings[name]`: a (positions, d_model) table, e.g. "sinusoidal", or "encoder"/"decoder" learned tables."""

    encodings: dict[str, np.ndarray]


@dataclass
class RotaryPlot(Plot):
    """`scores[name][d]`: rotated query . rotated key at relative distance `distances[d]`, divided by the unrotated
    dot product (1 at distance 0)."""

    distances: np.ndarray
    scores: dict[str, np.ndarray]


@dataclass
class AlibiPlot(Plot):
    """`biases[h][d]`: head h's bias on a key `distances[d]` positions back; `attention[h][d]`: the weight a query
    whose scores are all equal gives that key, softmax of the biases over the keys 0..max_distance back."""

    distances: np.ndarray
    biases: np.ndarray
    attention: np.ndarray


def _signed_heatmap(
    values: np.ndarray, bound: float = 1.0, *, title: str, x_title: str, y_title: str, colorbar: str
) -> Heatmap:
    """A heatmap of values centred on 0: red to blue from -bound to bound."""
    return Heatmap(
        values, title=title, x_title=x_title, y_title=y_title, vmin=-bound, vmax=bound, cmap="RdBu", colorbar=colorbar
    )


# defaults of the pictures and of `plot positions`
D_MODEL, LENGTH, DIMS = 128, 100, (6, 7, 20, 40)
HEAD_DIM, THETA, MAX_DISTANCE = 64, 10000.0, 512
ALIBI_HEADS = 8


def positional_encoding_plots(
    output_path: str | Path | None, *, d_model: int = D_MODEL, length: int = LENGTH, dims: Sequence[int] | None = None
) -> PositionPlot:
    """The paper's sinusoidal encoding: a few dimensions as curves over the positions, and the whole table.

    `dims` defaults to those of DIMS below `d_model` (dimension 0 when none is)."""
    if d_model < 1 or length < 1:
        raise ValueError(f"d_model and length must be positive, got d_model={d_model}, length={length}.")
    if dims is None:
        dims = [dim for dim in DIMS if dim < d_model] or [0]
    bad = [dim for dim in dims if not 0 <= dim < d_model]
    if bad or not dims:
        raise ValueError(f"dims must be between 0 and d_model - 1 = {d_model - 1}, got {list(dims)}.")
    encoding = SinusoidalPositionalEncoding(d_model)(0, length, torch.device("cpu"), torch.float32).numpy()
    positions = np.arange(length)

    def label(dim: int) -> str:
        wavelength = 2 * math.pi * 10000 ** ((dim - dim % 2) / d_model)
        return f"dim {dim}: {'sin' if dim % 2 == 0 else 'cos'}, wavelength {wavelength:.4g}"

    curves = Curves(
        positions,
        [(label(dim), encoding[:, dim]) for dim in dims],
        title="selected dimensions",
        x_title="position",
        y_title="value",
    )
    table = _signed_heatmap(
        encoding,
        title=f"all {d_model} dimensions",
        x_title="dimension (even: sin, odd: cos)",
        y_title="position",
        colorbar="value",
    )
    title = f"Sinusoidal position encoding, d_model={d_model}: PE(pos, 2i) = sin(pos / 10000^(2i/d)), odd dims cos"
    figure, axes, path = render([curves, table], title, output_path, ncols=1)
    return PositionPlot(figure, axes, path, {"sinusoidal": encoding})


def learned_position_plot(model, output_path: str | Path | None, *, max_positions: int | None = None) -> PositionPlot:
    """Each stack's learned position table, and the cosine similarity between the vectors of every two positions."""
    config = model.config
    if config.position_embedding_type != "learned":
        raise ValueError(
            f"This model's position_embedding_type is {config.position_embedding_type!r}, not 'learned': use "
            "positional_encoding_plots (sinusoidal) or rotary_distance_plot (rope)."
        )
    tables: dict[str, torch.Tensor] = {}
    for name, stack in (("encoder", model.get_encoder()), ("decoder", model.get_decoder())):
        weight = stack.embeddings.positions.weight
        if not any(weight is seen for seen in tables.values()):
            tables[name] = weight
    encodings: dict[str, np.ndarray] = {}
    panels = []
    for name, weight in tables.items():
        table = weight.detach()[:max_positions].float().cpu()
        encodings[name] = table.numpy()
        unit = torch.nn.functional.normalize(table, dim=-1)
        bound = float(table.abs().max()) or 1.0
        panels.append(
            _signed_heatmap(
                table.numpy(),
                bound,
                title=f"{name} table",
                x_title="dimension",
                y_title="position",
                colorbar="value",
            )
        )
        panels.append(
            _signed_heatmap(
                (unit @ unit.T).numpy(),
                title=f"{name}: cosine similarity of positions",
                x_title="position",
                y_title="position",
                colorbar="cosine",
            )
        )
    rows = len(next(iter(encodings.values())))
    title = f"Learned position embeddings, {rows} positions x d_model={config.d_model}"
    figure, axes, path = render(panels, title, output_path, ncols=2)
    return PositionPlot(figure, axes, path, encodings)


# random query/key vectors whose mean score the rotary picture draws
RANDOM_VECTORS = 256


def rotary_distance_plot(
    output_path: str | Path | None,
    *,
    head_dim: int = HEAD_DIM,
    theta: float = THETA,
    max_distance: int = MAX_DISTANCE,
) -> RotaryPlot:
    """What rotary embedding does to q . k as the query moves `d` positions past the key, for d in 0..max_distance.

    Scores are divided by the unrotated q . k. "all-ones": q = k = (1, ..., 1), i.e. the mean of cos(d theta_i)
    over the rotation pairs, the long-range decay of RoFormer; "random": q = k drawn from a standard normal,
    RANDOM_VECTORS of them (seeded), mean and one standard deviation. A second panel shows cos(d theta_i) for every
    pair.
    """
    if head_dim < 2 or head_dim % 2:
        raise ValueError(f"head_dim must be even and at least 2, got {head_dim}.")
    if max_distance < 1:
        raise ValueError(f"max_distance must be positive, got {max_distance}.")
    distances = np.arange(max_distance + 1)
    cos, sin = RotaryEmbedding(head_dim, theta)(0, max_distance + 1, torch.device("cpu"), torch.float64)
    generator = torch.Generator().manual_seed(0)
    vectors = {
        "all-ones": torch.ones(1, head_dim, dtype=torch.float64),
        "random": torch.randn(RANDOM_VECTORS, head_dim, generator=generator, dtype=torch.float64),
    }
    scores = {}
    for name, key in vectors.items():
        # the key sits at position 0 (no rotation); the same vector as a query at position d is rotated by d
        queries = apply_rotary(key[:, None, None, :].expand(-1, 1, max_distance + 1, head_dim), cos, sin)[:, 0]
        ratio = (queries * key[:, None, :]).sum(-1) / (key * key).sum(-1, keepdim=True)
        scores[name] = ratio.mean(0).numpy()
        if len(key) > 1:
            scores[f"{name} std"] = ratio.std(0).numpy()
    random_mean, random_std = scores["random"], scores["random std"]
    curves = Curves(
        distances,
        [("q = k = all ones", scores["all-ones"]), (f"q = k random, mean of {RANDOM_VECTORS}", random_mean)],
        title="relative score",
        x_title="relative distance d (query position - key position)",
        y_title="rotated q.k / q.k",
        bands=[("random ± 1 std", random_mean - random_std, random_mean + random_std)],
    )
    frequencies = theta ** (-np.arange(0, head_dim, 2) / head_dim)
    pairs = _signed_heatmap(
        np.cos(frequencies[:, None] * distances[None, :]),
        title="cos(d θ_i) of each rotation pair",
        x_title="relative distance d",
        y_title="pair i (θ_i = theta^(-2i/head_dim))",
        colorbar="cos",
    )
    title = f"Rotary position embedding, head_dim={head_dim}, theta={theta:g}"
    figure, axes, path = render([curves, pairs], title, output_path, ncols=1)
    return RotaryPlot(figure, axes, path, distances, scores)


def alibi_bias_plot(
    output_path: str | Path | None, *, heads: int = ALIBI_HEADS, max_distance: int = MAX_DISTANCE
) -> AlibiPlot:
    """ALiBi's penalty on the attention scores, -m_h * d, for each head's slope m_h; and where a query with no
    preference of its own would look: the steep heads attend to the last few tokens, the flat ones far back."""
    if heads < 1 or max_distance < 1:
        raise ValueError(f"heads and max_distance must be positive, got {heads} and {max_distance}.")
    distances = np.arange(max_distance + 1)
    # the decoder's last query over every key before it; flipped so that column d is d positions back
    biases = LinearBiases(heads, causal=True)(max_distance, 1, torch.device("cpu"), torch.float64)[0, :, 0]
    biases = biases.flip(-1)
    attention = biases.softmax(-1).numpy()
    biases = biases.numpy()
    labels = [f"head {head} (m = 2^{math.log2(slope):g})" for head, slope in enumerate((-biases[:, 1]).tolist())]
    penalties = Curves(
        distances,
        list(zip(labels, biases, strict=True)),
        title="bias added to the score",
        x_title="distance d (query position - key position)",
        y_title="-m_h d",
    )
    weights = Curves(
        distances,
        list(zip(labels, attention, strict=True)),
        title="attention when every score is equal",
        x_title="distance d",
        y_title="softmax weight",
    )
    title = f"ALiBi linear biases, {heads} heads"
    figure, axes, path = render([penalties, weights], title, output_path, ncols=1)
    return AlibiPlot(figure, axes, path, distances, biases, attention)


def position_plot(
    kind: str,
    model,
    output_path: str | Path | None,
    *,
    d_model: int | None = None,
    length: int = LENGTH,
    dims: Sequence[int] | None = None,
    max_positions: int | None = None,
    head_dim: int | None = None,
    theta: float | None = None,
    heads: int | None = None,
    max_distance: int | None = None,
) -> Plot:
    """The picture of a kind of positions (sinusoidal, learned, rope, alibi), with `model`'s own sizes where a value
    is not given (`model` may be None but for "learned", whose table is the model's)."""
    config = model.config if model is not None else None
    distance = {} if max_distance is None else {"max_distance": max_distance}
    if kind == "learned":
        return learned_position_plot(model, output_path, max_positions=max_positions)
    if kind == "rope":
        head_dim = head_dim or (config.d_model // config.encoder_attention_heads if config else HEAD_DIM)
        theta = theta or (float(config.rope_parameters["rope_theta"]) if config else THETA)
        return rotary_distance_plot(output_path, head_dim=head_dim, theta=theta, **distance)
    if kind == "alibi":
        heads = heads or (config.decoder_attention_heads if config else ALIBI_HEADS)
        return alibi_bias_plot(output_path, heads=heads, **distance)
    d_model = d_model or (config.d_model if config else D_MODEL)
    return positional_encoding_plots(output_path, d_model=d_model, length=length, dims=dims)


def model_position_plot(model, output_path: str | Path | None) -> Plot:
    """The positions `model` uses, at its sizes."""
    return position_plot(model.config.position_embedding_type, model, output_path)
