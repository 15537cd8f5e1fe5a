"""A lexical shortlist: decoding with fewer rows of the generator (Marian's lexical shortlists, CTranslate2's
vocabulary map).

At every decoding step the generator multiplies the decoder's output by the whole target vocabulary, yet the tokens a
batch of sentences can plausibly produce are a few hundred. The shortlist holds, for each source token, the K target
tokens most likely to translate it, plus the N most frequent target tokens and the special tokens (built from a
corpus by `vanilla-transformer shortlist`). `generate(use_shortlist=True)` takes, for each batch, the union of the
candidates of its source tokens and decodes in that reduced vocabulary: the generator computes those rows only, the
search (greedy, beam, sampling, every logits processor) runs over them, and the ids it chooses are mapped back to the
full vocabulary. The result is what the full computation gives with every other row's logit at minus infinity.

Remote code, beside the modeling file: the standard library, torch, and transformers with the packages it requires
(safetensors, the file format).
"""

import copy
from dataclasses import dataclass
from pathlib import Path

import torch
from safetensors import SafetensorError, safe_open
from safetensors.torch import save_file
from torch import nn
from transformers import GenerationConfig
from transformers.utils import cached_file

SHORTLIST_FILE = "shortlist.safetensors"
# what `vanilla-transformer shortlist` and `train --shortlist` build by default (docs/experiments/shortlist.md: the
# smallest of the sizes measured that kept BLEU4 within 0.2 of the full computation, greedy and beam 5)
CANDIDATES = 50  # a source token's candidates
FREQUENT = 300  # the most frequent target tokens, in every batch's shortlist
MIN_COUNT = 2  # a candidate co-occurs with its source token in this many training pairs at least
SHORTLIST_FORMAT = "1"
BUILD_HINT = "vanilla-transformer shortlist --model {folder} --dataset DATA builds one from a training corpus"

# generation settings that hold target token ids: mapped into the reduced vocabulary for the search
_SINGLE_IDS = ("pad_token_id", "bos_token_id", "decoder_start_token_id", "forced_bos_token_id")
_ID_LISTS = ("eos_token_id", "forced_eos_token_id", "suppress_tokens", "begin_suppress_tokens")
# settings that compare the output with the source's ids, look ids up in the whole vocabulary or decode them:
# (name, its value when unused)
_REFUSED_SETTINGS = (
    ("encoder_no_repeat_ngram_size", 0),
    ("encoder_repetition_penalty", 1.0),
    ("force_words_ids", None),
    ("sequence_bias", None),
    ("watermarking_config", None),
    ("stop_strings", None),
    ("prompt_lookup_num_tokens", None),
    ("guidance_scale", None),
)
_REFUSED_ARGUMENTS = (
    "logits_processor",
    "stopping_criteria",
    "prefix_allowed_tokens_fn",
    "assistant_model",
    "negative_prompt_ids",
    "custom_generate",
    "inputs_embeds",
)


class ShortlistError(ValueError):
    """A shortlist that cannot serve this model or this call."""


@dataclass
class LexicalShortlist:
    """Candidate target tokens: `candidates[s]` holds those of source token `s` (int32, -1 where fewer than K),
    `always` (sorted) those every batch gets: the most frequent target tokens and the special tokens. `metadata`
    records what it was built for (vocabulary sizes, the tokenizer) and how (K, N, the corpus)."""

    candidates: torch.Tensor
    always: torch.Tensor
    metadata: dict

    @property
    def source_vocab_size(self) -> int:
        return self.candidates.shape[0]

    @property
    def target_vocab_size(self) -> int:
        return int(self.metadata["target_vocab_size"])

    @property
    def tokenizer(self) -> str:
        """The identity of the tokenizer whose ids these are (`tokenization.tokenizer_identity`)."""
        return self.metadata.get("tokenizer", "unknown")

    def save(self, path) -> Path:
        """Write the shortlist to the file `path` (a model folder's is `SHORTLIST_FILE`)."""
        path = Path(path)
        metadata = {"format": SHORTLIST_FORMAT, **{key: str(value) for key, value in self.metadata.items()}}
        save_file({"candidates": self.candidates, "always": self.always}, str(path), metadata=metadata)
        return path

    @classmethod
    def load(cls, path) -> "LexicalShortlist":
        """Read a shortlist file; one that is cut short, of another format or with ids out of range is named."""
        path = Path(path)
        try:
            with safe_open(str(path), "pt") as file:
                metadata = dict(file.metadata() or {})
                tensors = {name: file.get_tensor(name) for name in file.keys()}  # noqa: SIM118 (not a dict)
        except (SafetensorError, OSError, ValueError) as error:
            raise ShortlistError(f"the shortlist {path} is damaged ({' '.join(str(error).split())}): build it again "
                                 f"({BUILD_HINT.format(folder=path.parent)})") from error  # fmt: skip
        problem = _problem(tensors, metadata)
        if problem:
            raise ShortlistError(f"the shortlist {path} is damaged: {problem}; build it again "
                                 f"({BUILD_HINT.format(folder=path.parent)})")  # fmt: skip
        return cls(tensors["candidates"], tensors["always"], metadata)

    @classmethod
    def from_pretrained(cls, name_or_path, **hub_kwargs) -> "LexicalShortlist":
        """The shortlist of a model folder or Hub repo (fetched with the repo's other files)."""
        local = Path(str(name_or_path))
        if local.is_dir() or local.is_absolute():
            path = local / SHORTLIST_FILE if (local / SHORTLIST_FILE).is_file() else None
        else:
            path = cached_file(
                str(name_or_path),
                SHORTLIST_FILE,
                _raise_exceptions_for_missing_entries=False,
                _raise_exceptions_for_connection_errors=False,
                **hub_kwargs,
            )
        if path is None:
            raise ShortlistError(f"{name_or_path} has no lexical shortlist ({SHORTLIST_FILE}): "
                                 f"{BUILD_HINT.format(folder=name_or_path)}")  # fmt: skip
        return cls.load(path)

    def check_fits(self, config, where: str = "the model") -> None:
        """The shortlist's ids are rows of this model's embeddings and generator: refused, naming both, if not."""
        source, target = config.vocab_size, getattr(config, "target_vocab_size", config.vocab_size)
        if (self.source_vocab_size, self.target_vocab_size) != (source, target):
            raise ShortlistError(
                f"the shortlist was built for a vocabulary of {self.source_vocab_size:,} source and "
                f"{self.target_vocab_size:,} target tokens (tokenizer {self.tokenizer}); {where} has {source:,} and "
                f"{target:,}: build a shortlist with this model's tokenizer"
            )

    def check_tokenizer(self, identity: str, where: str) -> None:
        """A shortlist holds the ids of one tokenizer (`identity`: `tokenization.tokenizer_identity`); another's, even
        of the same size, means other tokens."""
        if self.tokenizer != identity:
            raise ShortlistError(
                f"the shortlist was built for tokenizer {self.tokenizer}, and {where} has tokenizer {identity}: build "
                "it again for this model (vanilla-transformer shortlist)"
            )

    def rows(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None, extra=()) -> torch.Tensor:
        """The target ids a batch may produce, sorted: the candidates of every source token it holds, the tokens
        every batch gets, and `extra` ids (special tokens of the call)."""
        source = input_ids if attention_mask is None else input_ids[attention_mask.bool()]
        if source.numel() and (int(source.min()) < 0 or int(source.max()) >= self.source_vocab_size):
            raise ShortlistError(f"the source holds ids outside the shortlist's {self.source_vocab_size:,} tokens")
        candidates = self.candidates[torch.unique(source.cpu())].flatten()
        extra = torch.tensor(sorted({int(token) for token in extra if token is not None and token >= 0}))
        found = torch.cat((candidates[candidates >= 0].long(), self.always.long(), extra.long()))
        return torch.unique(found).to(input_ids.device)


def _problem(tensors: dict, metadata: dict) -> str | None:
    """What makes a shortlist file unusable, or None."""
    if metadata.get("format") != SHORTLIST_FORMAT:
        return f"format {metadata.get('format')!r}, where this version reads {SHORTLIST_FORMAT!r}"
    if set(tensors) != {"candidates", "always"}:
        return f"it holds {sorted(tensors)}, not candidates and always"
    candidates, always = tensors["candidates"], tensors["always"]
    integers = not candidates.dtype.is_floating_point and not always.dtype.is_floating_point
    if candidates.dim() != 2 or always.dim() != 1 or not integers:
        return "its tensors have the wrong shape or type"
    try:
        target = int(metadata["target_vocab_size"])
    except (KeyError, ValueError):
        return "no target_vocab_size in its metadata"
    if candidates.numel() and (int(candidates.min()) < -1 or int(candidates.max()) >= target):
        return f"candidate ids outside the target vocabulary [0, {target:,})"
    if always.numel() and (int(always.min()) < 0 or int(always.max()) >= target):
        return f"ids outside the target vocabulary [0, {target:,})"
    return None


class RestrictedGenerator:
    """The generator's rows `rows` only: logits for those target tokens, and the reduced ids mapped back."""

    def __init__(self, lm_head: nn.Module, rows: torch.Tensor, final_logits_bias: torch.Tensor | None = None):
        self.rows = rows
        self.bias = None if final_logits_bias is None else final_logits_bias.index_select(-1, rows)
        quantized = getattr(torch.ao.nn.quantized.dynamic, "Linear", None)
        if quantized is not None and isinstance(lm_head, quantized):
            # int8 (`--quantize int8`): the same int8 rows, so the logits are those of the full product
            weight, bias = lm_head.weight(), lm_head.bias()
            restricted = quantized(weight.shape[1], len(rows), bias_=bias is not None, dtype=weight.dtype)
            restricted.set_weight_bias(weight.index_select(0, rows), None if bias is None else bias[rows])
            self.project = restricted
        elif isinstance(lm_head, nn.Linear):
            weight = lm_head.weight.index_select(0, rows)
            bias = None if lm_head.bias is None else lm_head.bias.index_select(0, rows)
            self.project = lambda hidden: nn.functional.linear(hidden, weight, bias)
        else:  # a generator of another kind (wrapped by an adapter library): exact, without the saving
            self.project = lambda hidden: lm_head(hidden).index_select(-1, rows)

    def logits(self, hidden_states: torch.Tensor) -> torch.Tensor:
        logits = self.project(hidden_states)
        return logits if self.bias is None else logits + self.bias

    def full_ids(self, reduced_ids: torch.Tensor) -> torch.Tensor:
        return self.rows[reduced_ids]


def generate_with_shortlist(model, shortlist: LexicalShortlist, generate, inputs, generation_config, kwargs: dict):
    """`generate(inputs, generation_config, **kwargs)` in the batch's reduced vocabulary; sequences (and scores, when
    asked for) come back in the full vocabulary."""
    for name in _REFUSED_ARGUMENTS:
        if kwargs.get(name) is not None:
            raise ShortlistError(
                f"use_shortlist does not take {name}: it would see token ids of the batch's reduced vocabulary"
            )
    streamer = kwargs.pop("streamer", None)
    # the settings as generate() resolves them (the call's, then the model's), so that every id among them is mapped
    # wherever it was set; transformers' defaults are left for generate() to fill in, as it does for any call
    config = copy.deepcopy(generation_config) if generation_config is not None else GenerationConfig()
    config.update(**model.generation_config.to_dict(), defaults_only=True, allow_custom_entries=True)
    model_kwargs = config.update(**kwargs)
    input_ids = inputs if inputs is not None else model_kwargs.get("input_ids")
    if input_ids is None:
        raise ShortlistError("use_shortlist needs the source as input_ids: the shortlist is read off its tokens")
    for name, unused in _REFUSED_SETTINGS:
        value = getattr(config, name, unused)
        if value is not None and value != unused and not (name == "guidance_scale" and value == 1):
            raise ShortlistError(
                f"use_shortlist does not take {name}={value!r}: it works on ids of the whole vocabulary"
            )
    special = [getattr(config, name, None) for name in _SINGLE_IDS]
    special += [token for name in _ID_LISTS for token in _as_list(getattr(config, name, None))]
    special += [model.config.decoder_start_token_id, model.config.pad_token_id, model.config.eos_token_id]
    decoder_input_ids = model_kwargs.get("decoder_input_ids")
    if decoder_input_ids is not None:  # a forced prefix is decoded as it is
        special += decoder_input_ids.flatten().tolist()
    rows = shortlist.rows(input_ids, model_kwargs.get("attention_mask"), special)
    reduced = torch.full((shortlist.target_vocab_size,), -1, dtype=torch.long, device=rows.device)
    reduced[rows] = torch.arange(len(rows), device=rows.device)
    _reduce_settings(config, reduced)
    if decoder_input_ids is not None:
        model_kwargs["decoder_input_ids"] = reduced[decoder_input_ids]
    if streamer is not None:
        model_kwargs["streamer"] = _FullIdStreamer(streamer, rows)

    bias = getattr(model, "final_logits_bias", None) if model.config.final_logits_bias else None
    # for the call, the reduced settings are the model's own: generate() fills what it is not given from them
    saved, model.generation_config = model.generation_config, config
    model._restricted_generator = RestrictedGenerator(model.lm_head, rows, bias)
    try:
        output = generate(inputs, **model_kwargs)
    finally:
        model.generation_config, model._restricted_generator = saved, None
    if torch.is_tensor(output):
        return rows[output]
    output.sequences = rows[output.sequences]
    for name in ("scores", "logits"):
        steps = getattr(output, name, None)
        if steps is not None:
            setattr(output, name, tuple(_full_width(step, rows, shortlist.target_vocab_size) for step in steps))
    return output


def _as_list(value) -> list:
    if value is None:
        return []
    if torch.is_tensor(value):
        return value.flatten().tolist()
    return list(value) if isinstance(value, (list, tuple)) else [value]


def _reduce_settings(config, reduced: torch.Tensor) -> None:
    """The generation settings that name target tokens, in the reduced vocabulary; a token it does not hold cannot
    be produced, so what forbids it is dropped."""

    def one(token):
        return None if token is None or token < 0 else int(reduced[token])

    for name in _SINGLE_IDS:
        if getattr(config, name, None) is not None:
            setattr(config, name, one(getattr(config, name)))
    for name in _ID_LISTS:
        value = getattr(config, name, None)
        if value is None:
            continue
        mapped = [one(token) for token in _as_list(value)]
        mapped = [token for token in mapped if token is not None and token >= 0]
        single = not isinstance(value, (list, tuple)) and not torch.is_tensor(value)
        setattr(config, name, (mapped[0] if mapped else None) if single else mapped)
    if config.bad_words_ids is not None:
        kept = [[int(reduced[token]) for token in words] for words in config.bad_words_ids]
        config.bad_words_ids = [words for words in kept if min(words) >= 0] or None


def _full_width(step: torch.Tensor, rows: torch.Tensor, vocab_size: int) -> torch.Tensor:
    """A step's scores over the reduced vocabulary, as scores over the whole one (minus infinity elsewhere)."""
    full = step.new_full((step.shape[0], vocab_size), float("-inf"))
    full[:, rows] = step
    return full


class _FullIdStreamer:
    """A streamer shown the full vocabulary's ids (the search hands it the reduced ones)."""

    def __init__(self, streamer, rows: torch.Tensor):
        self.streamer, self.rows = streamer, rows

    def put(self, value):
        self.streamer.put(self.rows[value.to(self.rows.device)])

    def end(self):
        self.streamer.end()
