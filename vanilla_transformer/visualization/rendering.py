"""Drawing: the panels a picture is made of, rendered to PNG, SVG or PDF with matplotlib and to HTML with plotly.

Every picture function of this package draws with matplotlib on a bare `Figure` (the Agg renderer; pyplot and its
GUI backends are never touched), writes PNG, SVG or PDF as the output suffix says, or an interactive HTML page when
the suffix is .html and plotly is installed, and returns a small dataclass (a `Plot`) with the `figure`, the `axes`
of its panels (in drawing order, colorbars left out) and the numbers it drew. Axes are labelled with the real tokens
of the tokenizer. `output_path=None` draws without writing a file (a notebook can save or show `result.figure`).

matplotlib is the `[plot]` extra: `pip install "vanilla-transformer[plot]"`; this module imports it only when
a picture is drawn, so the CLI and the rest of the package work without it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

IMAGE_SUFFIXES = (".png", ".svg", ".pdf")
HTML_SUFFIX = ".html"


@dataclass
class Plot:
    """A drawn picture: the matplotlib `figure`, the `axes` of its panels in order, and the file written (or None)."""

    figure: Any
    axes: list
    path: Path | None


# --------------------------------------------------------------------------------------------------------------
# panels: one description, drawn by matplotlib and, for .html, by plotly


@dataclass
class Heatmap:
    """A (rows, cols) table drawn as colours, with token or position labels on its axes."""

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
class Curves:
    """Lines over a shared `x`, each `series` a (label, values) pair; `bands` shade (label, low, high) ranges."""

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
    if isinstance(panel, Curves):
        return 9.0, 3.6
    rows, cols = panel.values.shape
    labelled_x, labelled_y = panel.x_labels is not None, panel.y_labels is not None
    width = min(16.0, max(3.4, 0.26 * cols + 2.2)) if labelled_x else 6.0
    height = min(16.0, max(2.8, 0.26 * rows + 1.8)) if labelled_y else 4.0
    return width, height


def _add_colorbar(figure, image, axes, panel: Heatmap) -> None:
    colorbar = figure.colorbar(image, ax=axes, shrink=0.9)
    colorbar.set_label(panel.colorbar)
    if panel.colorbar_ticks:
        colorbar.set_ticks(list(panel.colorbar_ticks), labels=list(panel.colorbar_ticks.values()))


def _draw_heatmap(figure, axis, panel: Heatmap, colorbar: bool):
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


def _draw_curves(axis, panel: Curves) -> None:
    for label, low, high in panel.bands:
        axis.fill_between(panel.x, low, high, alpha=0.25, label=label)
    for label, values in panel.series:
        axis.plot(panel.x, values, label=label, linewidth=1.2)
    axis.set_xlabel(panel.x_title)
    axis.set_ylabel(panel.y_title)
    axis.set_title(panel.title, fontsize=10, parse_math=False)
    axis.grid(alpha=0.3)
    axis.legend(fontsize=8, loc="best")


def render(
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
        if isinstance(panel, Heatmap):
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
        if isinstance(panel, Curves):
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


def token_labels(tokenizer, ids) -> list[str]:
    """The tokenizer's tokens for `ids`: the labels of the axes."""
    return tokenizer.convert_ids_to_tokens([int(i) for i in ids])
