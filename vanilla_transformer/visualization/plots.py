"""Pictures of what the model does: cross-attention alignments, per-head attention maps, position encodings, masks.

Every function draws with matplotlib on a bare `Figure` (the Agg renderer; pyplot and its GUI backends are never
touched), writes PNG, SVG or PDF as the output suffix says, or an interactive HTML page when the suffix is .html
and plotly is installed, and returns a small dataclass with the `figure`, the `axes` of its panels (in drawing
order, colorbars left out) and the numbers it drew. Axes are labelled with the real tokens of the tokenizer.
`output_path=None` draws without writing a file (a notebook can save or show `result.figure` itself).

Attention weights come from the eager attention path, the only one that returns them: the model is switched to
`attn_implementation="eager"` (and to eval mode) for the call and switched back afterwards.

matplotlib is the `[plot]` extra: `pip install "vanilla-transformer[plot]"`; this module imports it only when
a picture is drawn, so the CLI and the rest of the package work without it.
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ..positions import RotaryEmbedding, SinusoidalPositionalEncoding, apply_rotary

IMAGE_SUFFIXES = (".png", ".svg", ".pdf")
HTML_SUFFIX = ".html"
STACKS = ("encoder", "decoder", "cross")


# --------------------------------------------------------------------------------------------------------------
# results


@dataclass
class Plot:
    """A drawn picture: the matplotlib `figure`, the `axes` of its panels in order, and the file written (or None)."""

    figure: Any
    axes: list
    path: Path | None


@dataclass
class AlignmentPlot(Plot):
    """`weights[t, s]`: attention of generated token t on source token s (each row sums to 1)."""

    weights: np.ndarray
    source_tokens: list[str]
    target_tokens: list[str]
    translation: str
    layer: int | None
    head: int | None


@dataclass
class AttentionPlot(Plot):
    """`weights[h, q, k]` for the heads in `heads`: query token q attending to key token k in `layer` of `stack`."""

    weights: np.ndarray
    query_tokens: list[str]
    key_tokens: list[str]
    stack: str
    layer: int
    heads: list[int]


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
class MaskPlot(Plot):
    """`masks[name]`: (batch, query, key) booleans, True where the query may attend to the key."""

    masks: dict[str, np.ndarray]


# --------------------------------------------------------------------------------------------------------------
# panels: one description, drawn by matplotlib and, for .html, by plotly


@dataclass
class _Heatmap:
    values: np.ndarray
    title: str = ""
    x_labels: Sequence[str] | None = None
    y_labels: Sequence[str] | None = None
    x_title: str = ""
    y_title: str = ""
    vmin: float | None = None
    vmax: float | None = None
    cmap: str = "viridis"
    colorbar: str | None = None
    colorbar_ticks: dict[float, str] | None = None


@dataclass
class _Curves:
    x: np.ndarray
    series: list[tuple[str, np.ndarray]]
    title: str = ""
    x_title: str = ""
    y_title: str = ""
    bands: list[tuple[str, np.ndarray, np.ndarray]] = field(default_factory=list)


def _require_matplotlib():
    try:
        import matplotlib  # noqa: F401
        from matplotlib.figure import Figure
    except ImportError as error:
        raise ImportError(
            'Drawing needs matplotlib: pip install "vanilla-transformer[plot]" (or pip install matplotlib).'
        ) from error
    return Figure


def _check_output(output_path: str | Path | None) -> Path | None:
    if output_path is None:
        return None
    path = Path(output_path)
    suffix = path.suffix.lower()
    if suffix not in (*IMAGE_SUFFIXES, HTML_SUFFIX):
        raise ValueError(
            f"Cannot tell the file type of {str(path)!r}: end the output path in one of "
            f"{', '.join((*IMAGE_SUFFIXES, HTML_SUFFIX))}."
        )
    if suffix == HTML_SUFFIX:
        try:
            import plotly  # noqa: F401
        except ImportError as error:
            raise ImportError(
                f"An .html output needs plotly (pip install plotly); or write {path.with_suffix('.png')} instead."
            ) from error
    return path


def _tick_font_size(count: int) -> float:
    return 9.0 if count <= 25 else max(4.0, 9.0 - (count - 25) / 10)


def _panel_size(panel) -> tuple[float, float]:
    if isinstance(panel, _Curves):
        return 9.0, 3.6
    rows, cols = panel.values.shape
    labelled_x, labelled_y = panel.x_labels is not None, panel.y_labels is not None
    width = min(16.0, max(3.4, 0.26 * cols + 2.2)) if labelled_x else 6.0
    height = min(16.0, max(2.8, 0.26 * rows + 1.8)) if labelled_y else 4.0
    return width, height


def _add_colorbar(figure, image, axes, panel: _Heatmap) -> None:
    colorbar = figure.colorbar(image, ax=axes, shrink=0.9)
    colorbar.set_label(panel.colorbar)
    if panel.colorbar_ticks:
        colorbar.set_ticks(list(panel.colorbar_ticks), labels=list(panel.colorbar_ticks.values()))


def _draw_heatmap(figure, axis, panel: _Heatmap, colorbar: bool):
    image = axis.imshow(
        panel.values, cmap=panel.cmap, vmin=panel.vmin, vmax=panel.vmax, aspect="auto", interpolation="nearest"
    )
    rows, cols = panel.values.shape
    if panel.x_labels is not None:
        axis.set_xticks(
            range(cols), labels=list(panel.x_labels), rotation=90, fontsize=_tick_font_size(cols), parse_math=False
        )
    if panel.y_labels is not None:
        axis.set_yticks(range(rows), labels=list(panel.y_labels), fontsize=_tick_font_size(rows), parse_math=False)
    axis.set_xlabel(panel.x_title)
    axis.set_ylabel(panel.y_title)
    axis.set_title(panel.title, fontsize=10, parse_math=False)
    if colorbar and panel.colorbar is not None:
        _add_colorbar(figure, image, axis, panel)
    return image


def _draw_curves(axis, panel: _Curves) -> None:
    for label, low, high in panel.bands:
        axis.fill_between(panel.x, low, high, alpha=0.25, label=label)
    for label, values in panel.series:
        axis.plot(panel.x, values, label=label, linewidth=1.2)
    axis.set_xlabel(panel.x_title)
    axis.set_ylabel(panel.y_title)
    axis.set_title(panel.title, fontsize=10, parse_math=False)
    axis.grid(alpha=0.3)
    axis.legend(fontsize=8, loc="best")


def _render(
    panels: list, title: str, output_path: str | Path | None, ncols: int, shared_colorbar: bool = False
) -> tuple[Any, list, Path | None]:
    """Draw the panels on a grid of `ncols` columns, save the file, and return (figure, panel axes, path).

    `shared_colorbar`: heatmaps on one scale get a single colorbar (the last panel's label and ticks) for all.
    """
    path = _check_output(output_path)
    Figure = _require_matplotlib()
    ncols = max(1, min(ncols, len(panels)))
    nrows = math.ceil(len(panels) / ncols)
    # the suptitle is not clipped: about 0.1 inch a character at its 12 points
    width = max(max(_panel_size(panel)[0] for panel in panels) * ncols, 0.1 * max(map(len, title.split("\n"))))
    height = max(_panel_size(panel)[1] for panel in panels) * nrows + 0.5 + 0.2 * title.count("\n")
    figure = Figure(figsize=(min(width, 40.0), min(height, 40.0)), layout="constrained")
    grid = figure.subplots(nrows, ncols, squeeze=False)
    axes = list(grid.flat)
    image = None
    for axis, panel in zip(axes[: len(panels)], panels, strict=True):
        if isinstance(panel, _Heatmap):
            image = _draw_heatmap(figure, axis, panel, colorbar=not shared_colorbar)
        else:
            _draw_curves(axis, panel)
    for axis in axes[len(panels) :]:
        axis.set_visible(False)
    if shared_colorbar and image is not None and panels[-1].colorbar is not None:
        _add_colorbar(figure, image, axes, panels[-1])
    figure.suptitle(title, parse_math=False)

    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
    if path is not None and path.suffix.lower() == HTML_SUFFIX:
        _write_html(panels, title, path, ncols, shared_colorbar)
    elif path is not None:
        import matplotlib

        # SVG keeps its text as text (tokens stay searchable and selectable) instead of glyph outlines
        with matplotlib.rc_context({"svg.fonttype": "none"}):
            figure.savefig(path, dpi=150)
    return figure, axes[: len(panels)], path


# the same colours as matplotlib's maps of these names (low to high)
_PLOTLY_COLORSCALES = {"viridis": "Viridis", "RdBu": "RdBu", "Blues": "Blues"}


def _write_html(panels: list, title: str, path: Path, ncols: int, shared_colorbar: bool) -> None:
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    nrows = math.ceil(len(panels) / ncols)
    figure = make_subplots(
        rows=nrows,
        cols=ncols,
        subplot_titles=[panel.title for panel in panels],
        horizontal_spacing=0.12 if ncols > 1 else 0.02,
        vertical_spacing=min(0.15, 0.5 / nrows) if nrows > 1 else 0.02,
    )
    width = height = 0.0
    for index, panel in enumerate(panels):
        row, col = index // ncols + 1, index % ncols + 1
        axis_suffix = "" if index == 0 else str(index + 1)
        panel_width, panel_height = _panel_size(panel)
        width, height = max(width, panel_width), max(height, panel_height)
        if isinstance(panel, _Curves):
            for label, low, high in panel.bands:
                figure.add_trace(go.Scatter(x=panel.x, y=high, mode="lines", line_width=0, showlegend=False), row, col)
                figure.add_trace(
                    go.Scatter(x=panel.x, y=low, mode="lines", line_width=0, fill="tonexty", name=label), row, col
                )
            for label, values in panel.series:
                figure.add_trace(go.Scatter(x=panel.x, y=values, mode="lines", name=label), row, col)
        else:
            rows, cols = panel.values.shape
            x_labels = list(panel.x_labels) if panel.x_labels is not None else [str(i) for i in range(cols)]
            y_labels = list(panel.y_labels) if panel.y_labels is not None else [str(i) for i in range(rows)]
            hover = [[f"{y_labels[r]} → {x_labels[c]}" for c in range(cols)] for r in range(rows)]
            x_domain = figure.layout[f"xaxis{axis_suffix}"].domain
            y_domain = figure.layout[f"yaxis{axis_suffix}"].domain
            figure.add_trace(
                go.Heatmap(
                    z=panel.values,
                    text=hover,
                    hovertemplate="%{text}<br>%{z:.4f}<extra></extra>",
                    colorscale=_PLOTLY_COLORSCALES[panel.cmap],
                    zmin=panel.vmin,
                    zmax=panel.vmax,
                    showscale=panel.colorbar is not None and (not shared_colorbar or index == len(panels) - 1),
                    colorbar=dict(
                        x=x_domain[1] + 0.005,
                        y=(y_domain[0] + y_domain[1]) / 2,
                        len=y_domain[1] - y_domain[0],
                        thickness=12,
                        title=panel.colorbar or "",
                    ),
                ),
                row,
                col,
            )
            # numeric axes with token tick text: a categorical axis would merge repeated tokens
            if panel.x_labels is not None:
                figure.update_xaxes(tickmode="array", tickvals=list(range(cols)), ticktext=x_labels, row=row, col=col)
            if panel.y_labels is not None:
                figure.update_yaxes(tickmode="array", tickvals=list(range(rows)), ticktext=y_labels, row=row, col=col)
            figure.update_yaxes(autorange="reversed", row=row, col=col)
        figure.update_xaxes(title_text=panel.x_title, row=row, col=col)
        figure.update_yaxes(title_text=panel.y_title, row=row, col=col)
    figure.update_layout(
        title_text=title.replace("\n", "<br>"),
        width=int(min(width * ncols, 40) * 90),
        height=int(min(height * nrows, 40) * 90) + 80,
    )
    figure.write_html(path, include_plotlyjs=True)


# --------------------------------------------------------------------------------------------------------------
# attention weights


@contextmanager
def eager_attention(model) -> Iterator[Any]:
    """Run `model` with eager attention (the one that returns weights) and in eval mode, then restore both."""
    previous = model.config._attn_implementation
    was_training = model.training
    if previous != "eager":
        model.set_attn_implementation("eager")
    model.eval()
    try:
        yield model
    finally:
        if previous != "eager":
            model.set_attn_implementation(previous)
        model.train(was_training)


def _index(value: int | None, count: int, what: str) -> int | None:
    if value is None:
        return None
    if not -count <= value < count:
        raise ValueError(f"{what} {value} does not exist: there are {count} (use 0..{count - 1}, or -1 for the last).")
    return value % count


def _generated_length(sequence: torch.Tensor, eos_token_id) -> int:
    """Tokens after the decoder start, up to and including the first end-of-sequence token."""
    generated = sequence[1:]
    eos_ids = eos_token_id if isinstance(eos_token_id, (list, tuple)) else [eos_token_id]
    eos_ids = [token for token in eos_ids if token is not None]
    if eos_ids:
        ends = torch.isin(generated, torch.tensor(eos_ids, device=generated.device)).nonzero()
        if len(ends):
            return int(ends[0, 0]) + 1
    return len(generated)


def generation_cross_attentions(
    model,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor | None = None,
    *,
    num_beams: int = 1,
    max_new_tokens: int | None = None,
    **generate_kwargs,
) -> tuple[torch.Tensor, list[torch.Tensor]]:
    """Generate with eager attention and gather, for each sentence, the cross-attention behind each generated token.

    Returns `(sequences, attentions)`: the `generate` sequences (decoder start first) and, per sentence, a
    (layers, heads, generated, source) tensor where row t is the attention of the decoder step that chose
    generated token t (`sequences[b, t + 1]`), up to and including the first end-of-sequence token. With beam
    search each row is taken from the beam that step belonged to on the path of the returned hypothesis
    (`beam_indices`). Columns are the (padded) source positions; padded ones get weight 0.
    """
    if generate_kwargs.get("num_return_sequences", 1) != 1:
        raise ValueError("generation_cross_attentions returns one sequence per sentence: num_return_sequences=1.")
    if attention_mask is None:
        attention_mask = torch.ones_like(input_ids)
    if max_new_tokens is None:
        max_new_tokens = model.generation_config.max_new_tokens or 2 * input_ids.shape[1] + 10
    with eager_attention(model), torch.no_grad():
        output = model.generate(
            input_ids=input_ids.to(model.device),
            attention_mask=attention_mask.to(model.device),
            num_beams=num_beams,
            max_new_tokens=max_new_tokens,
            output_attentions=True,
            return_dict_in_generate=True,
            **generate_kwargs,
        )
    beam_indices = getattr(output, "beam_indices", None)
    eos_token_id = model.generation_config.eos_token_id
    attentions = []
    for sentence, sequence in enumerate(output.sequences):
        rows = []
        for step in range(_generated_length(sequence, eos_token_id)):
            row = int(beam_indices[sentence, step]) if beam_indices is not None else sentence
            # (rows, heads, q_len, source) per layer; the last query is the token fed at this step
            rows.append(torch.stack([layer[row, :, -1, :] for layer in output.cross_attentions[step]]))
        attentions.append(torch.stack(rows, dim=2).float().cpu())
    return output.sequences.cpu(), attentions


def _reduce(weights: torch.Tensor, layer: int | None, head: int | None) -> torch.Tensor:
    """(layers, heads, q, k) -> (q, k): one layer and/or head, else the mean (still a distribution per row)."""
    layer = _index(layer, weights.shape[0], "layer")
    head = _index(head, weights.shape[1], "head")
    weights = weights.mean(0) if layer is None else weights[layer]
    return weights.mean(0) if head is None else weights[head]


def _describe(layer: int | None, head: int | None, layers: int, heads: int) -> str:
    if layer is None and head is None:
        return f"mean of {layers} layers x {heads} heads"
    if layer is None:
        return f"head {head}, mean of {layers} layers"
    if head is None:
        return f"layer {layer}, mean of {heads} heads"
    return f"layer {layer}, head {head}"


def _tokens(tokenizer, ids) -> list[str]:
    return tokenizer.convert_ids_to_tokens([int(i) for i in ids])


def _short(text: str, limit: int = 90) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def cross_attention_alignment(
    model,
    tokenizer,
    text: str,
    output_path: str | Path | None,
    *,
    layer: int | None = None,
    head: int | None = None,
    num_beams: int = 1,
    max_new_tokens: int | None = None,
) -> AlignmentPlot:
    """Translate `text` and plot the cross-attention of each generated token over the source tokens.

    The weights are the eager ones `generate` returns, step by step (the beam of the returned hypothesis with
    `num_beams` > 1). `layer`/`head` pick one decoder layer/head (negative counts from the end); left as None they
    are averaged. `max_new_tokens` defaults to the generation config's, else twice the source length plus 10.
    Rows of `weights` are generated tokens, columns source tokens.
    """
    encoded = tokenizer(text, return_tensors="pt")
    sequences, (attentions,) = generation_cross_attentions(
        model, encoded["input_ids"], encoded["attention_mask"], num_beams=num_beams, max_new_tokens=max_new_tokens
    )
    layers, heads = attentions.shape[:2]
    weights = _reduce(attentions, layer, head).numpy()
    generated_ids = sequences[0, 1 : 1 + weights.shape[0]]
    source_tokens = _tokens(tokenizer, encoded["input_ids"][0])
    target_tokens = _tokens(tokenizer, generated_ids)
    translation = tokenizer.decode(generated_ids, skip_special_tokens=True)
    layer, head = _index(layer, layers, "layer"), _index(head, heads, "head")

    search = "greedy" if num_beams == 1 else f"beam search ({num_beams} beams)"
    title = (
        f"Cross-attention alignment, {_describe(layer, head, layers, heads)}, {search}\n"
        f"{_short(text)!r} → {_short(translation)!r}"
    )
    panel = _Heatmap(
        weights,
        x_labels=source_tokens,
        y_labels=target_tokens,
        x_title="source tokens",
        y_title="generated tokens",
        vmin=0.0,
        cmap="viridis",
        colorbar="attention weight",
    )
    figure, axes, path = _render([panel], title, output_path, ncols=1)
    return AlignmentPlot(figure, axes, path, weights, source_tokens, target_tokens, translation, layer, head)


def self_attention_heatmaps(
    model,
    tokenizer,
    source_text: str,
    output_path: str | Path | None,
    *,
    target_text: str | None = None,
    stack: str = "encoder",
    layer: int = -1,
    head: int | None = None,
    max_new_tokens: int | None = None,
) -> AttentionPlot:
    """A grid of per-head attention maps of one layer (a single map with `head`), from one forward pass.

    `stack`: "encoder" (self-attention over the source), "decoder" (masked self-attention over the target) or
    "cross" (target queries over source keys). The decoder reads `target_text` shifted right behind the decoder
    start token (teacher forcing), so its axes are the tokens it was fed; without `target_text` the greedy
    translation of `source_text` is fed, exactly as generation saw it (at most `max_new_tokens`, by default the
    generation config's, else twice the source length plus 10). `layer` may be negative (-1: the top).
    """
    if stack not in STACKS:
        raise ValueError(f"stack must be one of {', '.join(STACKS)}, got {stack!r}.")
    encoded = tokenizer(source_text, return_tensors="pt")
    input_ids, attention_mask = encoded["input_ids"], encoded["attention_mask"]
    start = model.config.decoder_start_token_id
    if target_text is not None:
        target_ids = tokenizer(target_text, return_tensors="pt")["input_ids"]
        decoder_input_ids = torch.cat((torch.full((1, 1), start), target_ids[:, :-1]), dim=1)
    elif stack == "encoder":
        decoder_input_ids = torch.full((1, 1), start)
    else:
        if max_new_tokens is None:
            max_new_tokens = model.generation_config.max_new_tokens or 2 * input_ids.shape[1] + 10
        with eager_attention(model), torch.no_grad():
            generated = model.generate(
                input_ids=input_ids.to(model.device),
                attention_mask=attention_mask.to(model.device),
                max_new_tokens=max_new_tokens,
            ).cpu()
        decoder_input_ids = generated[:, : 1 + _generated_length(generated[0], model.generation_config.eos_token_id)]
        decoder_input_ids = decoder_input_ids[:, :-1]

    with eager_attention(model), torch.inference_mode():
        output = model(
            input_ids=input_ids.to(model.device),
            attention_mask=attention_mask.to(model.device),
            decoder_input_ids=decoder_input_ids.to(model.device),
            output_attentions=True,
        )
    per_layer = {
        "encoder": output.encoder_attentions,
        "decoder": output.decoder_attentions,
        "cross": output.cross_attentions,
    }[stack]
    layer = _index(layer, len(per_layer), "layer")
    all_heads = per_layer[layer][0].float().cpu()  # (heads, q, k)
    heads = list(range(all_heads.shape[0])) if head is None else [_index(head, all_heads.shape[0], "head")]
    weights = all_heads[heads].numpy()

    source_tokens = _tokens(tokenizer, input_ids[0])
    target_tokens = _tokens(tokenizer, decoder_input_ids[0])
    query_tokens = source_tokens if stack == "encoder" else target_tokens
    key_tokens = target_tokens if stack == "decoder" else source_tokens
    name = {"encoder": "encoder self-attention", "decoder": "decoder masked self-attention", "cross": "cross-attention"}
    title = f"{name[stack].capitalize()}, layer {layer} of {len(per_layer)}\nsource: {_short(source_text)!r}"
    if stack != "encoder":
        title += f"\ndecoder input: {_short(tokenizer.decode(decoder_input_ids[0], skip_special_tokens=True))!r}"
    panels = [
        _Heatmap(
            weights[i],
            title=f"head {h}",
            x_labels=key_tokens,
            y_labels=query_tokens,
            x_title="key tokens",
            y_title="query tokens",
            vmin=0.0,
            vmax=1.0,
            colorbar="attention weight",
        )
        for i, h in enumerate(heads)
    ]
    figure, axes, path = _render(panels, title, output_path, ncols=min(len(panels), 4), shared_colorbar=True)
    return AttentionPlot(figure, axes, path, weights, query_tokens, key_tokens, stack, layer, heads)


# --------------------------------------------------------------------------------------------------------------
# positions


def positional_encoding_plots(
    output_path: str | Path | None, *, d_model: int = 128, length: int = 100, dims: Sequence[int] = (6, 7, 20, 40)
) -> PositionPlot:
    """The paper's sinusoidal encoding: a few dimensions as curves over the positions, and the whole table."""
    if d_model < 1 or length < 1:
        raise ValueError(f"d_model and length must be positive, got d_model={d_model}, length={length}.")
    bad = [dim for dim in dims if not 0 <= dim < d_model]
    if bad or not dims:
        raise ValueError(f"dims must be between 0 and d_model - 1 = {d_model - 1}, got {list(dims)}.")
    encoding = SinusoidalPositionalEncoding(d_model)(0, length, torch.device("cpu"), torch.float32).numpy()
    positions = np.arange(length)

    def label(dim: int) -> str:
        wavelength = 2 * math.pi * 10000 ** ((dim - dim % 2) / d_model)
        return f"dim {dim}: {'sin' if dim % 2 == 0 else 'cos'}, wavelength {wavelength:.4g}"

    curves = _Curves(
        positions,
        [(label(dim), encoding[:, dim]) for dim in dims],
        title="selected dimensions",
        x_title="position",
        y_title="value",
    )
    table = _Heatmap(
        encoding,
        title=f"all {d_model} dimensions",
        x_title="dimension (even: sin, odd: cos)",
        y_title="position",
        vmin=-1.0,
        vmax=1.0,
        cmap="RdBu",
        colorbar="value",
    )
    title = f"Sinusoidal position encoding, d_model={d_model}: PE(pos, 2i) = sin(pos / 10000^(2i/d)), odd dims cos"
    figure, axes, path = _render([curves, table], title, output_path, ncols=1)
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
            _Heatmap(
                table.numpy(),
                title=f"{name} table",
                x_title="dimension",
                y_title="position",
                vmin=-bound,
                vmax=bound,
                cmap="RdBu",
                colorbar="value",
            )
        )
        panels.append(
            _Heatmap(
                (unit @ unit.T).numpy(),
                title=f"{name}: cosine similarity of positions",
                x_title="position",
                y_title="position",
                vmin=-1.0,
                vmax=1.0,
                cmap="RdBu",
                colorbar="cosine",
            )
        )
    rows = len(next(iter(encodings.values())))
    title = f"Learned position embeddings, {rows} positions x d_model={config.d_model}"
    figure, axes, path = _render(panels, title, output_path, ncols=2)
    return PositionPlot(figure, axes, path, encodings)


def rotary_distance_plot(
    output_path: str | Path | None,
    *,
    head_dim: int = 64,
    theta: float = 10000.0,
    max_distance: int = 512,
    samples: int = 256,
    seed: int = 0,
) -> RotaryPlot:
    """What rotary embedding does to q . k as the query moves `d` positions past the key, for d in 0..max_distance.

    Scores are divided by the unrotated q . k. "all-ones": q = k = (1, ..., 1), i.e. the mean of cos(d theta_i)
    over the rotation pairs, the long-range decay of RoFormer; "random": q = k drawn from a standard normal,
    `samples` of them, mean and one standard deviation. A second panel shows cos(d theta_i) for every pair.
    """
    if head_dim < 2 or head_dim % 2:
        raise ValueError(f"head_dim must be even and at least 2, got {head_dim}.")
    if max_distance < 1 or samples < 1:
        raise ValueError(f"max_distance and samples must be positive, got {max_distance} and {samples}.")
    distances = np.arange(max_distance + 1)
    cos, sin = RotaryEmbedding(head_dim, theta)(0, max_distance + 1, torch.device("cpu"), torch.float64)
    generator = torch.Generator().manual_seed(seed)
    vectors = {
        "all-ones": torch.ones(1, head_dim, dtype=torch.float64),
        "random": torch.randn(samples, head_dim, generator=generator, dtype=torch.float64),
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
    curves = _Curves(
        distances,
        [("q = k = all ones", scores["all-ones"]), (f"q = k random, mean of {samples}", random_mean)],
        title="relative score",
        x_title="relative distance d (query position - key position)",
        y_title="rotated q.k / q.k",
        bands=[("random ± 1 std", random_mean - random_std, random_mean + random_std)],
    )
    frequencies = theta ** (-np.arange(0, head_dim, 2) / head_dim)
    pairs = _Heatmap(
        np.cos(frequencies[:, None] * distances[None, :]),
        title="cos(d θ_i) of each rotation pair",
        x_title="relative distance d",
        y_title="pair i (θ_i = theta^(-2i/head_dim))",
        vmin=-1.0,
        vmax=1.0,
        cmap="RdBu",
        colorbar="cos",
    )
    title = f"Rotary position embedding, head_dim={head_dim}, theta={theta:g}"
    figure, axes, path = _render([curves, pairs], title, output_path, ncols=1)
    return RotaryPlot(figure, axes, path, distances, scores)


# --------------------------------------------------------------------------------------------------------------
# masks


def attention_masks(attention_mask, sliding_window: int | None = None) -> dict[str, np.ndarray]:
    """The masks the model builds from a (batch, seq) padding mask, as (batch, query, key) booleans (True: attend).

    "padding": encoder self-attention (and cross-attention keys), padded keys are hidden; "causal": decoder
    self-attention, key <= query and not padded; with `sliding_window` w also "sliding_window_encoder"
    (|query - key| < w) and "sliding_window_decoder" (0 <= query - key < w, the last w tokens itself included).
    """
    mask = torch.as_tensor(attention_mask)
    if mask.dim() == 1:
        mask = mask[None]
    if mask.dim() != 2:
        raise ValueError(f"attention_mask must have shape (batch, seq), got {tuple(mask.shape)}.")
    if sliding_window is not None and sliding_window < 1:
        raise ValueError(f"sliding_window must be a positive number of tokens, got {sliding_window}.")
    keys = mask.bool()[:, None, :]  # (batch, 1, key)
    positions = torch.arange(mask.shape[1])
    offset = positions[:, None] - positions[None, :]  # query - key
    masks = {"padding": keys.expand(-1, mask.shape[1], -1), "causal": keys & (offset >= 0)}
    if sliding_window is not None:
        masks["sliding_window_encoder"] = keys & (offset.abs() < sliding_window)
        masks["sliding_window_decoder"] = keys & (offset >= 0) & (offset < sliding_window)
    return {name: value.numpy() for name, value in masks.items()}


def mask_plots(
    output_path: str | Path | None,
    attention_mask,
    *,
    sliding_window: int | None = None,
    tokens: Sequence[Sequence[str]] | None = None,
) -> MaskPlot:
    """One row per sentence of the batch: its padding, causal and (with `sliding_window`) sliding-window masks.

    `attention_mask` is the tokenizer's (batch, seq) 1/0 mask (a tensor, array or nested lists); `tokens`, one
    list per sentence, labels the axes (positions otherwise).
    """
    masks = attention_masks(attention_mask, sliding_window)
    batch, seq = masks["padding"].shape[:2]
    if tokens is not None and (len(tokens) != batch or any(len(row) != seq for row in tokens)):
        raise ValueError(f"tokens must hold {batch} lists of {seq} tokens, one per row of attention_mask.")
    names = {
        "padding": "padding (encoder)",
        "causal": "causal + padding (decoder)",
        "sliding_window_encoder": f"sliding window {sliding_window} (encoder)",
        "sliding_window_decoder": f"sliding window {sliding_window} (decoder)",
    }
    panels = []
    for row in range(batch):
        labels = list(tokens[row]) if tokens is not None else [str(i) for i in range(seq)]
        for name, values in masks.items():
            panels.append(
                _Heatmap(
                    values[row].astype(np.float32),
                    title=f"sentence {row}: {names[name]}",
                    x_labels=labels,
                    y_labels=labels,
                    x_title="key",
                    y_title="query",
                    vmin=0.0,
                    vmax=1.0,
                    cmap="Blues",
                    colorbar="",
                    colorbar_ticks={0.0: "hidden", 1.0: "attends"},
                )
            )
    lengths = ", ".join(str(int(n)) for n in masks["padding"][:, 0].sum(-1))
    title = f"Attention masks for a batch of {batch} (lengths {lengths}, padded to {seq})"
    figure, axes, path = _render(panels, title, output_path, ncols=len(masks), shared_colorbar=True)
    return MaskPlot(figure, axes, path, masks)


# --------------------------------------------------------------------------------------------------------------
# command line


def add_plot_subcommand(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """Add `plot {alignment,attention,positions,masks} ... --output FILE`; the handler is in `func`."""
    plot = subparsers.add_parser(
        "plot",
        help="draw attention alignments, attention heads, position encodings or masks (PNG, SVG, PDF, HTML)",
    )
    kinds = plot.add_subparsers(dest="plot_kind", required=True)

    def common(parser: argparse.ArgumentParser, model_required: bool) -> None:
        parser.add_argument("--output", type=Path, required=True, help="file to write: .png, .svg, .pdf or .html")
        parser.add_argument("--model", type=Path, required=model_required, help="a saved model folder")
        parser.add_argument("--tokenizer", type=Path, help="tokenizer folder (default: the model folder)")

    alignment = kinds.add_parser("alignment", help="cross-attention of each generated token over the source")
    common(alignment, model_required=True)
    alignment.add_argument("--text", required=True, help="the source sentence to translate")
    alignment.add_argument("--layer", type=int, help="one decoder layer (default: mean of all)")
    alignment.add_argument("--head", type=int, help="one head (default: mean of all)")
    alignment.add_argument("--num-beams", type=int, default=1)
    alignment.add_argument("--max-new-tokens", type=int)
    alignment.set_defaults(func=_run_alignment)

    attention = kinds.add_parser("attention", help="per-head attention maps of one layer")
    common(attention, model_required=True)
    attention.add_argument("--text", required=True, help="the source sentence")
    attention.add_argument("--target", help="target sentence fed to the decoder (default: the greedy translation)")
    attention.add_argument("--stack", choices=STACKS, default="encoder")
    attention.add_argument("--layer", type=int, default=-1, help="layer index, negative from the top (default -1)")
    attention.add_argument("--head", type=int, help="one head (default: all heads in a grid)")
    attention.set_defaults(func=_run_attention)

    positions = kinds.add_parser("positions", help="sinusoidal or learned position encodings, or rotary decay")
    common(positions, model_required=False)
    positions.add_argument(
        "--kind",
        choices=("sinusoidal", "learned", "rope"),
        help="default: the model's position_embedding_type, or sinusoidal without --model",
    )
    positions.add_argument("--d-model", type=int, help="sinusoidal width (default: the model's, else 128)")
    positions.add_argument("--length", type=int, default=100, help="positions to draw (sinusoidal)")
    positions.add_argument("--dims", type=int, nargs="+", help="dimensions drawn as curves (default 6 7 20 40)")
    positions.add_argument("--max-positions", type=int, help="rows of a learned table to draw (default: all)")
    positions.add_argument("--head-dim", type=int, help="rotary head size (default: the model's, else 64)")
    positions.add_argument("--theta", type=float, help="rotary base (default: the model's rope_theta, else 10000)")
    positions.add_argument("--max-distance", type=int, default=512, help="largest relative distance (rotary)")
    positions.set_defaults(func=_run_positions)

    masks = kinds.add_parser("masks", help="padding, causal and sliding-window masks of a batch")
    common(masks, model_required=False)
    masks.add_argument("--text", action="append", help="a sentence of the batch (repeat); needs a tokenizer")
    masks.add_argument("--lengths", type=int, nargs="+", help="sentence lengths, without a tokenizer (default 8 5)")
    masks.add_argument("--padding-side", choices=("right", "left"), default="right")
    masks.add_argument("--sliding-window", type=int, help="window width (default: the model's sliding_window)")
    masks.set_defaults(func=_run_masks)
    return plot


def _load_model(folder: Path):
    from transformers import AutoModelForSeq2SeqLM  # our classes are registered by the package's __init__

    return AutoModelForSeq2SeqLM.from_pretrained(folder, attn_implementation="eager").eval()


def _load_tokenizer(folder: Path):
    from transformers import AutoTokenizer

    try:
        return AutoTokenizer.from_pretrained(folder)
    except (OSError, ValueError) as error:
        raise SystemExit(f"No tokenizer could be loaded from {folder}: pass --tokenizer FOLDER. ({error})") from error


def _run_alignment(args: argparse.Namespace) -> int:
    model, tokenizer = _load_model(args.model), _load_tokenizer(args.tokenizer or args.model)
    result = cross_attention_alignment(
        model,
        tokenizer,
        args.text,
        args.output,
        layer=args.layer,
        head=args.head,
        num_beams=args.num_beams,
        max_new_tokens=args.max_new_tokens,
    )
    print(f"translation: {result.translation}\nwrote {result.path}")
    return 0


def _run_attention(args: argparse.Namespace) -> int:
    model, tokenizer = _load_model(args.model), _load_tokenizer(args.tokenizer or args.model)
    result = self_attention_heatmaps(
        model,
        tokenizer,
        args.text,
        args.output,
        target_text=args.target,
        stack=args.stack,
        layer=args.layer,
        head=args.head,
    )
    print(f"wrote {result.path}")
    return 0


def _run_positions(args: argparse.Namespace) -> int:
    model = _load_model(args.model) if args.model else None
    config = model.config if model is not None else None
    kind = args.kind or (config.position_embedding_type if config is not None else "sinusoidal")
    if kind == "learned":
        if model is None:
            raise SystemExit("plot positions --kind learned draws a model's table: pass --model FOLDER.")
        result = learned_position_plot(model, args.output, max_positions=args.max_positions)
    elif kind == "rope":
        head_dim = args.head_dim or (config.d_model // config.encoder_attention_heads if config else 64)
        theta = args.theta or (float(config.rope_theta) if config else 10000.0)
        result = rotary_distance_plot(args.output, head_dim=head_dim, theta=theta, max_distance=args.max_distance)
    else:
        d_model = args.d_model or (config.d_model if config else 128)
        dims = args.dims or [dim for dim in (6, 7, 20, 40) if dim < d_model] or [0]
        result = positional_encoding_plots(args.output, d_model=d_model, length=args.length, dims=dims)
    print(f"wrote {result.path}")
    return 0


def _run_masks(args: argparse.Namespace) -> int:
    sliding_window = args.sliding_window
    tokens = None
    if args.model and sliding_window is None:
        from transformers import AutoConfig

        sliding_window = AutoConfig.from_pretrained(args.model).sliding_window
    if args.text:
        if not (args.tokenizer or args.model):
            raise SystemExit("plot masks --text needs a tokenizer: pass --tokenizer FOLDER or --model FOLDER.")
        tokenizer = _load_tokenizer(args.tokenizer or args.model)
        tokenizer.padding_side = args.padding_side
        encoded = tokenizer(args.text, padding=True, return_tensors="pt")
        attention_mask = encoded["attention_mask"]
        tokens = [_tokens(tokenizer, ids) for ids in encoded["input_ids"]]
    else:
        lengths = args.lengths or [8, 5]
        if min(lengths) < 1:
            raise SystemExit(f"--lengths must be positive, got {lengths}.")
        longest = max(lengths)
        attention_mask = torch.zeros(len(lengths), longest, dtype=torch.long)
        for row, length in enumerate(lengths):
            if args.padding_side == "right":
                attention_mask[row, :length] = 1
            else:
                attention_mask[row, longest - length :] = 1
    result = mask_plots(args.output, attention_mask, sliding_window=sliding_window, tokens=tokens)
    print(f"wrote {result.path}")
    return 0
