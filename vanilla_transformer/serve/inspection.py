"""What the page shows inside the model for the translation on screen, drawn as `plot` draws it (the visualization
package's panels, with the real tokens): the cross-attention alignment, each stack's self-attention heads (all as
small multiples, one large), the model's positions and the masks of the sentence.

The attention weights come from one teacher-forced pass over the source and the translation shown (eager attention,
the only kind that returns weights), so they are the weights behind that very translation whichever decoding made
it: row t of the decoder's maps is the step that chose generated token t.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from ..visualization.attention import STACK_NAMES, alignment_panel, eager_attention, head_panels
from ..visualization.masks import mask_plots
from ..visualization.positions import model_position_plot
from ..visualization.rendering import render, token_labels


@dataclass
class Attentions:
    """Every layer's and head's weights for one source and its translation."""

    encoder: np.ndarray  # (layers, heads, source, source)
    decoder: np.ndarray  # (layers, heads, generated, generated): a row per generated token, over the tokens fed
    cross: np.ndarray  # (layers, heads, generated, source)
    source_tokens: list[str]
    generated_tokens: list[str]  # what each decoder step chose (end of sentence included)
    fed_tokens: list[str]  # what each decoder step read (the start token, then the generated ones)
    attention_mask: torch.Tensor

    def stack(self, name: str) -> np.ndarray:
        return {"encoder": self.encoder, "decoder": self.decoder, "cross": self.cross}[name]

    def axes(self, name: str) -> tuple[list[str], list[str]]:
        """(query labels, key labels) of a stack's maps."""
        return {
            "encoder": (self.source_tokens, self.source_tokens),
            "decoder": (self.generated_tokens, self.fed_tokens),
            "cross": (self.generated_tokens, self.source_tokens),
        }[name]


def attentions(model, tokenizer, source_ids: list[int], generated_ids: list[int]) -> Attentions:
    """The weights of a teacher-forced pass: the source, and the decoder fed its start token and the translation."""
    start = model.config.decoder_start_token_id
    input_ids = torch.tensor([source_ids])
    decoder_input_ids = torch.tensor([[start, *generated_ids[:-1]]])
    with eager_attention(model), torch.inference_mode():
        output = model(input_ids=input_ids, decoder_input_ids=decoder_input_ids, output_attentions=True)

    def stacked(per_layer) -> np.ndarray:
        return torch.stack([layer[0] for layer in per_layer]).float().numpy()

    return Attentions(
        stacked(output.encoder_attentions),
        stacked(output.decoder_attentions),
        stacked(output.cross_attentions),
        token_labels(tokenizer, source_ids),
        token_labels(tokenizer, generated_ids),
        token_labels(tokenizer, decoder_input_ids[0]),
        torch.ones_like(input_ids),
    )


def alignment_figure(weights: Attentions):
    """The cross-attention of each generated token over the source, the mean of every layer and head."""
    panel = alignment_panel(weights.cross.mean(axis=(0, 1)), weights.source_tokens, weights.generated_tokens)
    return render([panel], "Cross-attention alignment (mean of all layers and heads)", None, ncols=1)[0]


def heads_figure(weights: Attentions, stack: str, layer: int, head: int | None = None):
    """Every head of one layer of a stack as small multiples, or one head large."""
    maps = weights.stack(stack)[layer]
    heads = list(range(maps.shape[0])) if head is None else [head]
    panels = head_panels(maps[heads], heads, *weights.axes(stack))
    title = f"{STACK_NAMES[stack].capitalize()}, layer {layer}" + ("" if head is None else f", head {head}")
    return render(panels, title, None, ncols=min(len(panels), 4), shared_colorbar=True)[0]


def positions_figure(model):
    """The model's own positions: its sinusoids, learned tables, rotary distances or ALiBi slopes."""
    return model_position_plot(model, None).figure


def masks_figure(weights: Attentions, sliding_window: int | None):
    return mask_plots(
        None, weights.attention_mask, sliding_window=sliding_window, tokens=[weights.source_tokens]
    ).figure
