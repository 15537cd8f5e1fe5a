"""Pictures of the attention masks the model builds: padding, causal and sliding-window."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from .rendering import Heatmap, Plot, render


@dataclass
class MaskPlot(Plot):
    """`masks[name]`: (batch, query, key) booleans, True where the query may attend to the key."""

    masks: dict[str, np.ndarray]


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
                Heatmap(
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
    figure, axes, path = render(panels, title, output_path, ncols=len(masks), shared_colorbar=True)
    return MaskPlot(figure, axes, path, masks)
