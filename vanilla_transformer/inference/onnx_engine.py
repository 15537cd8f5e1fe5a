"""Translating with an ONNX export of one of our folders (`vanilla-transformer export onnx`) in ONNX Runtime.

`load_onnx` gives a model whose forward pass runs the export's three graphs (the encoder; the decoder's first step,
which also gives the source's keys and values; its later steps, which read the cache) and whose `generate()` is
transformers' own: greedy, beam search, sampling and every setting of the generation config decode exactly as they
do for the PyTorch model, and `translate()` batches, orders and keeps empty lines as it does for any model:

```python
from vanilla_transformer.inference import load_onnx, translate

model, tokenizer = load_onnx("my-model-onnx")
translate(model, tokenizer, ["Ein Hund rennt.", "", "Zwei Männer spielen Fußball."], num_beams=1)
```

The cache stays in transformers' `EncoderDecoderCache`, holding ONNX Runtime's outputs without a copy (numpy arrays
seen as tensors); a beam search reorders it as the PyTorch model's does.

Plain greedy decoding (no logits processor beyond a minimum length, no scores asked for) skips generate()'s loop:
a step of it cost as much as a step of the graphs for one sentence (logits processors, stopping criteria, the
inspection of the forward's signature), and the page and the service translate one sentence at a time. That loop
keeps the cache in ONNX Runtime's own values, from one step's outputs to the next step's inputs, and gives the
tokens generate() gives: the same logits, the end-of-sentence token masked until the minimum length, a finished
sentence padded until the others end.
"""

from __future__ import annotations

import copy
import json
import os
from pathlib import Path

import numpy as np
import torch
from torch import nn
from transformers import GenerationConfig, GenerationMixin, PreTrainedModel, PreTrainedTokenizerBase
from transformers.cache_utils import Cache, DynamicCache, EncoderDecoderCache
from transformers.modeling_outputs import BaseModelOutput, Seq2SeqLMOutput

from ..common.extras import import_onnxruntime
from ..common.model_folder import (
    ONNX_DECODER_FILE,
    ONNX_DECODER_WITH_PAST_FILE,
    ONNX_ENCODER_FILE,
    ONNX_GRAPH_FILES,
    load_tokenizer,
)
from ..common.onnx_files import check_onnx_files, read_export_info
from ..configuration_vanilla_transformer import VanillaTransformerConfig


class OnnxEncoder(nn.Module):
    """The encoder graph as generate() calls an encoder: token ids and mask in, `BaseModelOutput` out."""

    main_input_name = "input_ids"

    def __init__(self, session):
        super().__init__()
        self.session = session

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None, **kwargs) -> BaseModelOutput:
        if attention_mask is None:
            attention_mask = torch.ones_like(input_ids)
        (hidden,) = self.session.run(None, {"input_ids": _int64(input_ids), "attention_mask": _int64(attention_mask)})
        return BaseModelOutput(last_hidden_state=torch.from_numpy(hidden))


# generation settings under which generate() decodes greedily with no logits processor but the minimum length: the
# loop of `OnnxTranslationModel._greedy` gives its tokens (any other setting goes to generate())
PLAIN_GREEDY_SETTINGS = {
    "max_length",
    "max_new_tokens",
    "min_length",
    "min_new_tokens",
    "pad_token_id",
    "bos_token_id",
    "eos_token_id",
    "decoder_start_token_id",
    "use_cache",
    "num_beams",
    "do_sample",
    "num_return_sequences",
    "early_stopping",
    "length_penalty",
    "temperature",
    "top_k",
    "top_p",
    "output_attentions",
    "output_hidden_states",
    "transformers_version",
    "_from_model_config",
}


class OnnxTranslationModel(PreTrainedModel, GenerationMixin):
    """An ONNX export as transformers' `generate()` sees a model: its forward runs one decoding step in ONNX Runtime.
    What `translate()` and the service ask of a model (config, generation_config, device, eval, generate,
    compute_transition_scores) is transformers' own."""

    config_class = VanillaTransformerConfig
    main_input_name = "input_ids"
    _supports_cache_class = True

    def __init__(self, config: VanillaTransformerConfig, sessions: dict, folder: Path, quantization: str = "float32"):
        super().__init__(config)
        self.folder, self.quantization = folder, quantization
        self.encoder = OnnxEncoder(sessions[ONNX_ENCODER_FILE])
        self.first_step = sessions[ONNX_DECODER_FILE]
        self.later_step = sessions[ONNX_DECODER_WITH_PAST_FILE]
        present = [output.name for output in self.first_step.get_outputs()][1:]
        self.past_names = [name.replace("present", "past_key_values") for name in present]
        self.post_init()

    @property
    def device(self) -> torch.device:
        return torch.device("cpu")

    @property
    def dtype(self) -> torch.dtype:
        return torch.float32

    def get_encoder(self, modality=None):
        return self.encoder

    def to(self, *args, **kwargs):
        device = kwargs.get("device", args[0] if args else None)
        if device is not None and not isinstance(device, torch.dtype) and torch.device(device).type != "cpu":
            raise ValueError(f"this ONNX model runs on the CPU with ONNX Runtime, not on {device}")
        return self

    def _init_weights(self, module):
        pass  # no weights of its own: they are in the ONNX files

    def _prepare_cache_for_generation(self, generation_config, model_kwargs, *args, **kwargs):
        # plain layers that hold what the graphs return: the graphs grow the cache themselves, and with a
        # sliding_window they keep it whole and mask it, as the model's static cache does
        model_kwargs["cache"] = EncoderDecoderCache(DynamicCache(), DynamicCache())

    def _reorder_cache(self, cache: Cache, beam_idx: torch.LongTensor) -> Cache:
        """Beam search: the surviving beams take over the self-attention keys/values; the source's are the same for
        every beam of a sentence (as in the PyTorch model)."""
        cache.self_attention_cache.reorder_cache(beam_idx)
        return cache

    def generate(self, inputs=None, generation_config=None, **kwargs):
        """transformers' generate(); plain greedy decoding by the loop of `_greedy` (see the module's docstring)."""
        settings = self._plain_greedy_settings(generation_config, kwargs)
        # the loop's own inputs: the ids, their mask (generate() would derive one from the padding) and a length
        # limit (generate() would take its default)
        ids_given = inputs is not None or "input_ids" in kwargs
        limited = settings is not None and (settings.max_new_tokens is not None or settings.max_length is not None)
        if not (ids_given and limited and kwargs.get("attention_mask") is not None):
            return super().generate(inputs, generation_config, **kwargs)
        input_ids = inputs if inputs is not None else kwargs["input_ids"]
        return self._greedy(input_ids, kwargs.get("attention_mask"), settings)

    def _plain_greedy_settings(self, generation_config, kwargs) -> GenerationConfig | None:
        """The generation config `kwargs` make of `generation_config`, when it decodes plainly greedily; else None."""
        if set(kwargs) - {"input_ids", "attention_mask"} - set(GenerationConfig().__dict__):
            return None  # a model keyword generate() itself must see (encoder_outputs, ...)
        settings = copy.deepcopy(generation_config or self.generation_config)
        settings.update(**{name: kwargs[name] for name in kwargs.keys() - {"input_ids", "attention_mask"}})
        changed = settings.to_diff_dict()
        plain = (
            set(changed) <= PLAIN_GREEDY_SETTINGS
            and settings.num_beams in (None, 1)
            and not settings.do_sample
            and settings.num_return_sequences in (None, 1)
            and not settings.output_attentions
            and not settings.output_hidden_states
        )
        return settings if plain else None

    def _greedy(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, settings) -> torch.Tensor:
        """Greedy decoding as generate() does it (see the module's docstring): the decoder start token and each
        sentence's new tokens, a finished one padded."""
        onnxruntime = import_onnxruntime()
        value = onnxruntime.OrtValue.ortvalue_from_numpy
        ids = _int64(input_ids)
        mask = _int64(attention_mask)
        eos = settings.eos_token_id if settings.eos_token_id is not None else self.config.eos_token_id
        eos = np.array([eos] if isinstance(eos, int) else list(eos or []), dtype=np.int64)
        pad = settings.pad_token_id if settings.pad_token_id is not None else (int(eos[0]) if len(eos) else 0)
        start = settings.decoder_start_token_id
        start = self.config.decoder_start_token_id if start is None else start
        limit = settings.max_new_tokens if settings.max_new_tokens is not None else settings.max_length - 1
        shortest = max(settings.min_new_tokens or 0, (settings.min_length or 0) - 1)

        (hidden,) = self.encoder.session.run_with_ort_values(
            ["last_hidden_state"], {"input_ids": value(ids), "attention_mask": value(mask)}
        )
        mask_value = value(mask)
        tokens = np.full(len(ids), start, dtype=np.int64)
        generated = [tokens]
        finished = np.zeros(len(ids), dtype=bool)
        cache: dict[str, object] = {}
        for position in range(limit):
            feeds = {"input_ids": value(np.ascontiguousarray(tokens[:, None])), "encoder_attention_mask": mask_value}
            session = self.later_step if cache else self.first_step
            if not cache:
                feeds["encoder_hidden_states"] = hidden
            feeds.update(cache)
            names = [output.name for output in session.get_outputs()]
            outputs = session.run_with_ort_values(names, feeds)
            logits = outputs[0].numpy()[:, -1]
            if position < shortest and len(eos):
                logits[:, eos] = -np.inf
            tokens = np.where(finished, pad, logits.argmax(axis=-1)).astype(np.int64)
            generated.append(tokens)
            finished |= np.isin(tokens, eos)
            for name, state in zip(names[1:], outputs[1:], strict=True):
                cache[name.replace("present", "past_key_values")] = state
            if finished.all():
                break
        return torch.from_numpy(np.stack(generated, axis=1))

    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        decoder_input_ids: torch.LongTensor | None = None,
        encoder_outputs: BaseModelOutput | tuple | None = None,
        cache: EncoderDecoderCache | None = None,
        **kwargs,
    ) -> Seq2SeqLMOutput:
        if encoder_outputs is None:
            encoder_outputs = self.encoder(input_ids, attention_mask)
        hidden = encoder_outputs[0]
        if attention_mask is None:
            attention_mask = torch.ones(hidden.shape[:2], dtype=torch.long)
        if cache is None:
            cache = EncoderDecoderCache(DynamicCache(), DynamicCache())
        mask = _int64(attention_mask)
        started = cache.get_seq_length() > 0
        if decoder_input_ids.shape[1] != 1 and not started:
            raise ValueError("the ONNX decoder takes one token a step: start it from the decoder start token alone")
        step = _int64(decoder_input_ids[:, -1:])
        if not started:
            inputs = {"input_ids": step, "encoder_attention_mask": mask, "encoder_hidden_states": _float32(hidden)}
            logits, *present = self.first_step.run(None, inputs)
        else:
            inputs = {"input_ids": step, "encoder_attention_mask": mask}
            for layer in range(self.config.decoder_layers):
                own = cache.self_attention_cache.layers[layer]
                cross = cache.cross_attention_cache.layers[layer]
                states = (own.keys, own.values, cross.keys, cross.values)
                names = self.past_names[4 * layer : 4 * layer + 4]
                inputs.update((name, _float32(state)) for name, state in zip(names, states, strict=True))
            logits, *present = self.later_step.run(None, inputs)
        per_layer = 4 if not started else 2
        for layer in range(self.config.decoder_layers):
            states = [torch.from_numpy(state) for state in present[per_layer * layer : per_layer * (layer + 1)]]
            _hold(cache.self_attention_cache, layer, *states[:2])
            if not started:
                _hold(cache.cross_attention_cache, layer, *states[2:])
                cache.is_updated[layer] = True
        return Seq2SeqLMOutput(logits=torch.from_numpy(logits), cache=cache)


def _hold(cache: DynamicCache, layer: int, keys: torch.Tensor, values: torch.Tensor) -> None:
    """Make `cache`'s layer hold `keys` and `values` as they are: each graph returns the whole cache, not a step."""
    while len(cache.layers) <= layer:
        cache.layers.append(cache.layer_class_to_replicate())
    entry = cache.layers[layer]
    if not entry.is_initialized:
        entry.lazy_initialization(keys, values)
    entry.keys, entry.values = keys, values


def _int64(tensor: torch.Tensor) -> np.ndarray:
    return tensor.detach().to(torch.int64).contiguous().numpy()


def _float32(tensor: torch.Tensor) -> np.ndarray:
    return tensor.detach().contiguous().numpy()


def onnx_session_options(threads: int = 0):
    """ONNX Runtime's options for the graphs: every graph optimisation (the transposes of shared weights folded back
    into constants among them), `threads` threads inside an operator (0: ONNX Runtime's choice, one a core)."""
    onnxruntime = import_onnxruntime()
    options = onnxruntime.SessionOptions()
    options.graph_optimization_level = onnxruntime.GraphOptimizationLevel.ORT_ENABLE_ALL
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    options.log_severity_level = 3  # errors only: a missing optional fusion is no news to a user
    # ONNX Runtime's threads spin for a while after each run, waiting for the next: in a process that also runs other
    # work (the service's web server, the other engines of a benchmark) they took its cores (MarianMTModel's
    # generate() ran 20x slower beside idle sessions on 2 cores, docs/experiments/onnx.md)
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    options.add_session_config_entry("session.inter_op.allow_spinning", "0")
    return options


def is_onnx_export(folder: str | os.PathLike) -> bool:
    """Whether `folder` holds the graphs `export onnx` writes."""
    return all((Path(folder) / name).is_file() for name in ONNX_GRAPH_FILES)


def load_onnx(folder: str | os.PathLike, threads: int = 0) -> tuple[OnnxTranslationModel, PreTrainedTokenizerBase]:
    """An ONNX export's model and tokenizer, ready for `translate`; `threads`: ONNX Runtime's threads inside an
    operator (0: one a core)."""
    onnxruntime = import_onnxruntime()
    folder = Path(folder)
    if not is_onnx_export(folder) or not (folder / "config.json").is_file():
        raise FileNotFoundError(
            f"{folder} is no ONNX export of ours ({', '.join(ONNX_GRAPH_FILES)} and config.json expected): make one "
            "with vanilla-transformer export onnx FOLDER OUTPUT"
        )
    check_onnx_files(folder)  # ONNX Runtime's message for a file cut short names neither the file nor its size
    tokenizer = load_tokenizer(folder, described_as="model")
    config = VanillaTransformerConfig.from_dict(json.loads((folder / "config.json").read_text(encoding="utf-8")))
    options = onnx_session_options(threads)
    sessions = {}
    for name in ONNX_GRAPH_FILES:
        try:
            sessions[name] = onnxruntime.InferenceSession(
                str(folder / name), options, providers=["CPUExecutionProvider"]
            )
        except Exception as error:  # ONNX Runtime's own errors (a truncated file, a missing weights file) name it
            raise OSError(f"ONNX Runtime cannot load {folder / name}: {str(error).splitlines()[0]}") from error
    quantization = read_export_info(folder).get("quantization", "float32")
    model = OnnxTranslationModel(config, sessions, folder, quantization)
    model.generation_config = GenerationConfig.from_pretrained(folder)
    return model.eval(), tokenizer


__all__ = ["OnnxTranslationModel", "is_onnx_export", "load_onnx", "onnx_session_options"]
