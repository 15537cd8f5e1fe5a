"""The page: a Gradio Blocks app over a `TranslationService`.

Tab "Translate": a text box and a Translate button; greedy, beam or sampling with their settings; the engine; the
translation (a paragraph as its sentences) with each new token's probability; and, for the translation shown, the
cross-attention alignment and the encoder and decoder self-attention with a layer and head picker (all heads as small
multiples, one head large).
Tab "Positions and masks": the model's positions and the masks of the sentence. The examples under the box come from
the model card or the model's validation set.

Two API endpoints, Gradio's own (usable with `gradio_client`, or a plain POST to /gradio_api/run/translate):
`/translate` (text and settings in, the translation and its tokens' probabilities out), batched by `Batcher`: the
requests waiting when the model is free are translated together, up to the service's batch size and wait limit; and
`/inspect` (the pictures). The queues are bounded: a request that finds one full is answered "busy, try again" at
once.
"""

from __future__ import annotations

import logging

import gradio as gr

from ..visualization.attention import STACK_NAMES
from .batching import Batcher, Busy
from .inspection import alignment_figure, attentions, heads_figure, masks_figure, positions_figure
from .service import DECODINGS, ENGINES, RequestError, Settings, TranslationService

logger = logging.getLogger(__name__)


def percent(probability: float) -> str:
    return f"{probability:.0%}"


def _colour(share: float) -> str:
    """One scale for every badge: red at 0%, amber at 50%, green at 100%."""
    red, green = (255, int(510 * share)) if share < 0.5 else (int(510 * (1 - share)), 200)
    return f"#{min(red, 255):02x}{min(green, 200):02x}40"


# the badges' labels are their probabilities: a colour for each, on one scale (Gradio otherwise colours by label)
PROBABILITY_COLOURS = {percent(share / 100): _colour(share / 100) for share in range(101)}


def _number(value, kind: type, name: str):
    """A setting that must be a number (`kind`), as the page's sliders send it; anything else names the field."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise RequestError(f"{name}={value!r} must be a number")
    if kind is int and value != int(value):
        raise RequestError(f"{name}={value!r} must be a whole number")
    return kind(value)


def _picked(value, name: str) -> int:
    """A layer or head number, as its picker sends it (a string of digits) or a caller does (a whole number)."""
    if value is None or value == "":
        return 0
    if isinstance(value, str) and value.isdigit():
        return int(value)
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return value
    raise RequestError(f"{name}={value!r} must be a layer or head number (0, 1, ...)")


def build_page(service: TranslationService, batcher: Batcher, examples: list[str], title: str, queue_size: int):
    limits = service.limits
    model = service.model
    engines = [(ENGINES[name], name) for name in service.engines]

    def sizes(stack: str) -> tuple[int, int]:
        """(layers, heads) of a stack's attention: the encoder's, or the decoder's (self and cross)."""
        config = model.config
        if stack == "encoder":
            return config.encoder_layers, config.encoder_attention_heads
        return config.decoder_layers, config.decoder_attention_heads

    def numbered(count: int) -> list[str]:
        return [str(i) for i in range(count)]

    drawn = {}

    def positions():
        """The model's positions: the same for every sentence, drawn once."""
        if "positions" not in drawn:
            drawn["positions"] = positions_figure(model)
        return drawn["positions"]

    async def translate(text, decoding, num_beams, temperature, top_k, top_p, engine):
        """One request; the batcher translates it with the others waiting beside it."""
        try:  # Gradio's API passes what a caller sends: the page's own controls always send numbers
            settings = Settings(
                decoding, _number(num_beams, int, "num_beams"), _number(temperature, float, "temperature"),
                _number(top_k, int, "top_k"), _number(top_p, float, "top_p"), engine or service.default_engine,
            )  # fmt: skip
            translation = await batcher.translate(text, settings)
        except RequestError as error:  # answered, with the limit it broke
            return f"⚠ {error}", []
        except Busy as error:
            raise gr.Error(str(error)) from None
        except Exception as error:  # noqa: BLE001 - the model failed on this request: one line, the log has it all
            logger.exception("a request of the page failed in translation")
            raise gr.Error(f"the translation failed: {type(error).__name__}: {' '.join(str(error).split())}") from None
        pairs = zip(translation.tokens, translation.probabilities, strict=True)
        return translation.text, [(token, percent(p)) for token, p in pairs]

    def inspect(text, translation, stack, layer, head):
        if not isinstance(text, str) or not isinstance(translation, str):
            raise gr.Error("/inspect takes the text and its translation (a string each), as /translate gave it")
        if not text.strip() or not translation.strip() or translation.startswith("⚠"):
            return None, None, None, None, None
        if stack not in STACK_NAMES:
            raise gr.Error(f"stack={stack!r} is not one of {', '.join(STACK_NAMES)}")
        try:
            layer, head = _picked(layer, "layer"), _picked(head, "head")
            # both sides come from the caller through /inspect: capped as the service caps its own
            service.check(text, Settings(engine=service.default_engine))
        except RequestError as error:
            raise gr.Error(str(error)) from None
        layers, heads = sizes(stack)
        # a picker may still hold the last stack's number while the stack changes: the nearest one there is
        layer, head = min(layer, layers - 1), min(head, heads - 1)
        tokenizer = service.tokenizer
        source = tokenizer(text, truncation=True, max_length=service.max_input_tokens)["input_ids"]
        limit = min(service.max_new_tokens, len(translation) + 2)  # one token a character at most, and the ends
        generated = tokenizer(text_target=translation[: limits.max_characters], truncation=True, max_length=limit)
        with service.lock:  # the model is shared with the batcher's generate(), and this switches its attention
            weights = attentions(model, tokenizer, source, generated["input_ids"])
        return (
            alignment_figure(weights),
            heads_figure(weights, stack, layer),
            heads_figure(weights, stack, layer, head),
            positions(),
            masks_figure(weights, model.config.sliding_window),
        )

    with gr.Blocks(title=title) as page:
        gr.Markdown(f"# {title}")
        with gr.Tab("Translate"):
            text = gr.Textbox(label="Text", lines=3, max_length=limits.max_characters, elem_id="text")
            if examples:
                gr.Examples(examples=[[example] for example in examples], inputs=[text])
            with gr.Row():
                decoding = gr.Radio(list(DECODINGS), value="beam", label="Decoding")
                num_beams = gr.Slider(1, limits.max_beams, value=min(4, limits.max_beams), step=1, label="Beams")
                engine = gr.Radio(engines, value=engines[0][1], label="Engine")
            with gr.Accordion("Sampling", open=False):
                temperature = gr.Slider(0.05, 2.0, value=1.0, step=0.05, label="Temperature")
                top_k = gr.Slider(0, 200, value=50, step=1, label="Top-k (0: all)")
                top_p = gr.Slider(0.05, 1.0, value=1.0, step=0.05, label="Top-p")
            button = gr.Button("Translate", variant="primary", elem_id="translate-button")
            translation = gr.Textbox(label="Translation", interactive=False, elem_id="translation")
            probabilities = gr.HighlightedText(
                label="Each new token and its probability", elem_id="tokens", color_map=PROBABILITY_COLOURS
            )
            if model is not None:
                alignment = gr.Plot(label="Cross-attention alignment", elem_id="alignment")
                with gr.Row():
                    stack = gr.Dropdown(
                        [(name, key) for key, name in STACK_NAMES.items()], value="cross", label="Attention"
                    )
                    layer = gr.Dropdown(numbered(sizes("cross")[0]), value="0", label="Layer", elem_id="layer")
                    head = gr.Dropdown(numbered(sizes("cross")[1]), value="0", label="Head (large)", elem_id="head")
                all_heads = gr.Plot(label="All heads of the layer", elem_id="all-heads")
                one_head = gr.Plot(label="One head", elem_id="one-head")
            else:  # an export: its weights are not a PyTorch model that returns attention
                gr.Markdown("The pictures need the PyTorch model: serve the model folder, not its export.")
        if model is not None:
            with gr.Tab("Positions and masks"):
                positions_plot = gr.Plot(label="The model's positions")
                masks_plot = gr.Plot(label="Masks of the sentence")

        inputs = [text, decoding, num_beams, temperature, top_k, top_p, engine]
        # not through Gradio's queue (whose every request costs tens of milliseconds of the CPU the model needs):
        # the batcher is this endpoint's bounded queue
        translated = button.click(translate, inputs, [translation, probabilities], api_name="translate", queue=False)
        if model is not None:
            pictures = [alignment, all_heads, one_head, positions_plot, masks_plot]
            picked = [text, translation, stack, layer, head]
            translated.then(inspect, picked, pictures, api_name="inspect")

            def pickers(stack: str):
                layers, heads = sizes(stack)
                return gr.Dropdown(choices=numbered(layers), value="0"), gr.Dropdown(choices=numbered(heads), value="0")

            stack.change(pickers, stack, [layer, head], api_visibility="private")
            for control in (stack, layer, head):
                control.change(inspect, picked, pictures, api_visibility="private")
        gr.api(service.stats, api_name="stats", queue=False)  # requests served and the mean batch size
    page.queue(max_size=queue_size, default_concurrency_limit=1)
    return page
