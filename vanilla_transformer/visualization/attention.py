"""Attention weights from the model, and the pictures of them: cross-attention alignments and per-head maps.

Attention weights come from the eager attention path, the only one that returns them: the model is switched to
`attn_implementation="eager"` (and to eval mode) for the call and switched back afterwards.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from .rendering import Heatmap, Plot, render, token_labels

STACKS = ("encoder", "decoder", "cross")
STACK_NAMES = {
    "encoder": "encoder self-attention",
    "decoder": "decoder masked self-attention",
    "cross": "cross-attention",
}


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


def _max_new_tokens(model, input_ids: torch.Tensor, max_new_tokens: int | None) -> int:
    """`max_new_tokens` if given, else the generation config's, else twice the source length plus 10."""
    if max_new_tokens is not None:
        return max_new_tokens
    return model.generation_config.max_new_tokens or 2 * input_ids.shape[1] + 10


def generation_cross_attentions(
    model,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor | None = None,
    *,
    num_beams: int = 1,
    max_new_tokens: int | None = None,
) -> tuple[torch.Tensor, list[torch.Tensor]]:
    """Generate with eager attention and gather, for each sentence, the cross-attention behind each generated token.

    Returns `(sequences, attentions)`: the `generate` sequences (decoder start first) and, per sentence, a
    (layers, heads, generated, source) tensor where row t is the attention of the decoder step that chose
    generated token t (`sequences[b, t + 1]`), up to and including the first end-of-sequence token. With beam
    search each row is taken from the beam that step belonged to on the path of the returned hypothesis
    (`beam_indices`). Columns are the (padded) source positions; padded ones get weight 0.
    """
    if attention_mask is None:
        attention_mask = torch.ones_like(input_ids)
    with eager_attention(model), torch.no_grad():
        output = model.generate(
            input_ids=input_ids.to(model.device),
            attention_mask=attention_mask.to(model.device),
            num_beams=num_beams,
            max_new_tokens=_max_new_tokens(model, input_ids, max_new_tokens),
            output_attentions=True,
            return_dict_in_generate=True,
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


def _short(text: str, limit: int = 90) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def alignment_panel(weights, source_tokens: list[str], target_tokens: list[str]) -> Heatmap:
    """(generated, source) cross-attention weights as one heat map, generated tokens down, source tokens across."""
    return Heatmap(
        weights,
        x_labels=source_tokens,
        y_labels=target_tokens,
        x_title="source tokens",
        y_title="generated tokens",
        vmin=0.0,
        cmap="viridis",
        colorbar="attention weight",
    )


def head_panels(weights, heads: list[int], query_tokens: list[str], key_tokens: list[str]) -> list[Heatmap]:
    """One heat map per head: `weights[i]` is head `heads[i]`'s (query, key) map."""
    return [
        Heatmap(
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
    source_tokens = token_labels(tokenizer, encoded["input_ids"][0])
    target_tokens = token_labels(tokenizer, generated_ids)
    translation = tokenizer.decode(generated_ids, skip_special_tokens=True)
    layer, head = _index(layer, layers, "layer"), _index(head, heads, "head")

    search = "greedy" if num_beams == 1 else f"beam search ({num_beams} beams)"
    title = (
        f"Cross-attention alignment, {_describe(layer, head, layers, heads)}, {search}\n"
        f"{_short(text)!r} → {_short(translation)!r}"
    )
    figure, axes, path = render([alignment_panel(weights, source_tokens, target_tokens)], title, output_path, ncols=1)
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
        with eager_attention(model), torch.no_grad():
            generated = model.generate(
                input_ids=input_ids.to(model.device),
                attention_mask=attention_mask.to(model.device),
                max_new_tokens=_max_new_tokens(model, input_ids, max_new_tokens),
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

    source_tokens = token_labels(tokenizer, input_ids[0])
    target_tokens = token_labels(tokenizer, decoder_input_ids[0])
    query_tokens = source_tokens if stack == "encoder" else target_tokens
    key_tokens = target_tokens if stack == "decoder" else source_tokens
    title = f"{STACK_NAMES[stack].capitalize()}, layer {layer} of {len(per_layer)}\nsource: {_short(source_text)!r}"
    if stack != "encoder":
        title += f"\ndecoder input: {_short(tokenizer.decode(decoder_input_ids[0], skip_special_tokens=True))!r}"
    panels = head_panels(weights, heads, query_tokens, key_tokens)
    figure, axes, path = render(panels, title, output_path, ncols=min(len(panels), 4), shared_colorbar=True)
    return AttentionPlot(figure, axes, path, weights, query_tokens, key_tokens, stack, layer, heads)
