"""The translation service behind the page and its API: a model loaded once (PyTorch float32, its int8 twin, a
CTranslate2 export or an ONNX export), every request checked against the service's limits before it reaches the model,
and the requests that arrive together translated in one generate() call per setting, each new token with its
probability; a paragraph is translated as its sentences, joined again in its own spacing.

A request's text is never interpreted: it goes to the tokenizer and comes back as text.
"""

from __future__ import annotations

import functools
import math
import threading
from dataclasses import dataclass, field
from pathlib import Path

import torch

from ..common.extras import import_sentencex
from ..common.languages import declared_languages
from ..common.model_folder import export_engine
from ..common.paragraphs import Paragraph, split_paragraph
from ..inference.translate import _length_batches, _truncate, check_shortlist
from ..lexical_shortlist import SHORTLIST_FILE

DECODINGS = ("greedy", "beam", "sampling")
# sampling's knobs: (lowest, highest, whether the lowest is excluded). Below 0.01 a temperature scales the logits past
# what float32 holds, and the probabilities it samples from overflow
SAMPLING_RANGES = {"temperature": (0.01, 10.0, False), "top_p": (0, 1, True), "top_k": (0, 10_000, False)}
ENGINES = {"pytorch": "PyTorch float32", "int8": "PyTorch int8", "ctranslate2": "CTranslate2", "onnx": "ONNX Runtime"}


@dataclass(frozen=True)
class Limits:
    """What one request may ask for; beyond it the answer says which limit and what was asked."""

    max_words: int = 200  # and 30 characters a word on average: a text of few, enormous "words" is refused too
    max_input_tokens: int = 256
    max_new_tokens: int = 256
    max_beams: int = 8
    # a paragraph's sentences: each may run to max_new_tokens, so a text of many short ones is bounded here
    max_sentences: int = 32
    max_batch_size: int = 16  # requests translated in one generate() call
    max_wait_ms: float = 5.0  # how long a lone request waits for others to share its generate() call

    @property
    def max_characters(self) -> int:
        return self.max_words * 30


@dataclass(frozen=True)
class Settings:
    """How to translate: the decoding and its knobs, and the engine."""

    decoding: str = "greedy"
    num_beams: int = 4
    temperature: float = 1.0
    top_k: int = 50
    top_p: float = 1.0
    engine: str = "pytorch"
    seed: int = 0
    split_sentences: bool = True  # a paragraph translated as its sentences, joined in its own spacing

    def generation_keywords(self) -> dict:
        if self.decoding == "sampling":
            return dict(do_sample=True, num_beams=1, temperature=self.temperature, top_k=self.top_k, top_p=self.top_p)
        return dict(do_sample=False, num_beams=self.num_beams if self.decoding == "beam" else 1)


@dataclass
class Translation:
    text: str
    tokens: list[str] = field(
        default_factory=list
    )  # each new token (end of sentence included), as the tokenizer has it
    probabilities: list[float] = field(default_factory=list)  # of each token, under the decoding's distribution
    input_tokens: int = 0


class RequestError(ValueError):
    """A request outside the service's limits or its engines: the message says what and the limit."""


class TranslationService:
    """One model folder (or CTranslate2 or ONNX export) and the engines it can run, serving `translate_batch`."""

    def __init__(
        self,
        folder: str | Path,
        limits: Limits | None = None,
        trust_remote_code: bool = False,
        threads: int | None = None,
    ):
        """`threads`: ONNX Runtime's, for an ONNX export (PyTorch's are the process's: `torch.set_num_threads`)."""
        from ..inference.ctranslate2_engine import load_ctranslate2
        from ..inference.onnx_engine import load_onnx
        from ..inference.translate import load_for_translation

        import_sentencex()  # paragraphs are split into sentences: a missing extra is said at start
        self.folder, self.limits = str(folder), limits or Limits()
        self.engines: dict[str, object] = {}
        self.lock = threading.Lock()  # one generate() at a time: the model is not re-entrant
        self.batch_sizes: list[int] = []  # requests translated together, one entry per translate_batch call
        self.model = None  # the PyTorch model: an export has none, and so no pictures
        exported = export_engine(self.folder)  # an export: its engine is the only one
        if exported == "ctranslate2":
            self.engines["ctranslate2"], self.tokenizer = load_ctranslate2(self.folder, "cpu")
        elif exported == "onnx":
            self.engines["onnx"], self.tokenizer = load_onnx(self.folder, threads or 0)
        else:
            self.model, self.tokenizer = load_for_translation(
                self.folder, device="cpu", trust_remote_code=trust_remote_code
            )
            self.engines["pytorch"] = self.model
        has_shortlist = (Path(self.folder) / SHORTLIST_FILE).is_file()
        self.shortlist = has_shortlist and self.model is not None  # the PyTorch model decodes with it
        self.vocabulary_map = has_shortlist and (Path(self.folder) / "vmap.txt").is_file()  # a CTranslate2 export's
        engine = self.engines[self.default_engine]
        declared = declared_languages(self.folder, self.tokenizer)
        # sentencex's rules for the model's source language (an unknown one gets its generic rules)
        self.source_language = declared[0][0] if declared else "en"
        if self.shortlist or self.vocabulary_map:
            # at start, as `translate --shortlist` checks it: a damaged file or another tokenizer's ids stop here,
            # not in every request
            check_shortlist(engine, self.tokenizer)
        # one length limit for every request, whatever else shares its batch, so that a batch changes no translation
        positions = _learned_positions(engine.config)
        configured = engine.generation_config.max_new_tokens or math.inf
        self.max_new_tokens = min(self.limits.max_new_tokens, configured, positions)
        self.max_input_tokens = min(self.limits.max_input_tokens, positions)

    @property
    def default_engine(self) -> str:
        """The engine a request that names none gets: the first the page shows."""
        return next(iter(self.engines))

    def add_int8(self) -> None:
        """The int8 twin of the PyTorch model (torch's dynamic quantization), as a second engine."""
        import copy

        from ..inference.quantization import quantize_linear_layers

        self.engines["int8"] = quantize_linear_layers(copy.deepcopy(self.model).eval())

    def stats(self) -> dict:
        """Requests served so far and how many came together on average."""
        sizes = self.batch_sizes
        return {"requests": sum(sizes), "batches": len(sizes), "mean_batch_size": sum(sizes) / max(len(sizes), 1)}

    def check(self, text: str, settings: Settings) -> None:
        """Refuse what the service does not take, naming the limit; an empty text is no error (its answer is
        empty)."""
        limits = self.limits
        if not isinstance(text, str):
            raise RequestError(f"the text must be a string, not {type(text).__name__}")
        words = len(text.split())
        if words > limits.max_words:
            raise RequestError(f"the text has {words:,} words; this service translates at most {limits.max_words:,}")
        if len(text) > limits.max_characters:
            raise RequestError(
                f"the text has {len(text):,} characters; this service translates at most {limits.max_characters:,}"
            )
        try:
            text.encode("utf-8")
        except UnicodeEncodeError as error:  # a lone surrogate, which JSON can carry and no tokenizer encodes
            raise RequestError(f"the text is not valid Unicode at character {error.start}") from None
        sentences = len(self._paragraph(text, settings).sentences)
        if sentences > limits.max_sentences:
            raise RequestError(
                f"the text has {sentences} sentences; this service translates at most {limits.max_sentences} a request"
            )
        if not 0 <= settings.seed < 2**63:
            raise RequestError(f"seed={settings.seed} is outside 0 to 2**63 - 1")
        if settings.engine not in self.engines:
            raise RequestError(f"engine {settings.engine!r} is not served here: {', '.join(self.engines)}")
        if settings.decoding not in DECODINGS:
            raise RequestError(f"decoding {settings.decoding!r} is not one of {', '.join(DECODINGS)}")
        if settings.decoding == "beam" and not 1 <= settings.num_beams <= limits.max_beams:
            raise RequestError(f"num_beams={settings.num_beams} is outside 1 to {limits.max_beams}")
        if settings.decoding == "sampling":
            if settings.engine == "ctranslate2":
                raise RequestError("sampling is not served with CTranslate2: choose another engine")
            for name, (low, high, excluded) in SAMPLING_RANGES.items():
                value = getattr(settings, name)
                if not (low < value <= high if excluded else low <= value <= high):
                    lowest = f"{low:g} (excluded)" if excluded else f"{low:g}"
                    raise RequestError(f"{name}={value!r} is outside {lowest} to {high:g}")

    def translate_batch(self, texts: list[str], settings: list[Settings]) -> list[Translation]:
        """Translate requests that arrived together: one generate() call per distinct setting, sentences sorted by
        length; each request checked first (a refused one raises, naming the limit). A paragraph is translated as
        its sentences (unless its settings say otherwise), joined again in its own spacing."""
        for text, setting in zip(texts, settings, strict=True):
            self.check(text, setting)
        self.batch_sizes.append(len(texts))
        paragraphs = [self._paragraph(text, setting) for text, setting in zip(texts, settings, strict=True)]
        results: list[Translation | None] = [None] * len(texts)
        groups: dict[tuple[Settings, int | None], list[int]] = {}
        for index, (paragraph, setting) in enumerate(zip(paragraphs, settings, strict=True)):
            if not paragraph.sentences:
                results[index] = Translation("")
            elif setting.decoding == "sampling":  # alone: its sample depends on its seed only, not on its batch
                groups[(setting, index)] = [index]
            else:
                groups.setdefault((setting, None), []).append(index)
        for (setting, _), indices in groups.items():
            sentences = [sentence for i in indices for sentence in paragraphs[i].sentences]
            translated = iter(self._translate(setting, sentences))
            for index in indices:
                parts = [next(translated) for _ in paragraphs[index].sentences]
                results[index] = Translation(
                    paragraphs[index].join([part.text for part in parts]),
                    [token for part in parts for token in part.tokens],
                    [probability for part in parts for probability in part.probabilities],
                    sum(part.input_tokens for part in parts),
                )
        return results  # type: ignore[return-value]

    def _paragraph(self, text: str, settings: Settings) -> Paragraph:
        if settings.split_sentences:  # split when checked, and the split kept for the translation
            return _split(text, self.source_language)
        return Paragraph((text,) if text.strip() else (), ("", "") if text.strip() else (text,))

    def _translate(self, settings: Settings, texts: list[str]) -> list[Translation]:
        tokenizer, limits = self.tokenizer, self.limits
        encoded = tokenizer(texts)["input_ids"]
        ids = {i: _truncate(row, self.max_input_tokens, tokenizer.eos_token_id) for i, row in enumerate(encoded)}
        translations: list[Translation | None] = [None] * len(texts)
        engine = self.engines[settings.engine]
        with self.lock:
            for batch in _length_batches(list(ids), ids, limits.max_batch_size, split_on_length=False):
                rows = [ids[i] for i in batch]
                if settings.engine == "ctranslate2":
                    done = self._ctranslate2(engine, rows, settings)
                else:
                    done = self._generate(engine, rows, settings)
                for index, translation in zip(batch, done, strict=True):
                    translation.input_tokens = len(encoded[index])
                    translations[index] = translation
        return translations  # type: ignore[return-value]

    def _generate(self, model, rows: list[list[int]], settings: Settings) -> list[Translation]:
        tokenizer = self.tokenizer
        inputs = tokenizer.pad({"input_ids": rows}, return_tensors="pt")
        keywords = settings.generation_keywords()
        torch.manual_seed(settings.seed)  # a sampled translation is the same for the same request
        with torch.inference_mode():
            output = model.generate(
                **inputs,
                **keywords,
                max_new_tokens=self.max_new_tokens,
                output_scores=True,
                return_dict_in_generate=True,
                **({"use_shortlist": True} if self.shortlist else {}),
            )
            beams = getattr(output, "beam_indices", None) if keywords["num_beams"] > 1 else None
            # beam search's scores are log-probabilities already; greedy's and sampling's are the processed logits
            logs = model.compute_transition_scores(
                output.sequences, output.scores, beams, normalize_logits=beams is None
            )
        pairs = zip(output.sequences, logs, strict=True)
        return [self._translation(sequence[1:], log_probs) for sequence, log_probs in pairs]

    def _translation(self, generated: torch.Tensor, log_probs: torch.Tensor) -> Translation:
        tokenizer, pad = self.tokenizer, self.tokenizer.pad_token_id
        keep = [i for i, token in enumerate(generated.tolist()) if token != pad]
        ids = [int(generated[i]) for i in keep]
        tokens = tokenizer.convert_ids_to_tokens(ids)
        probabilities = [math.exp(float(log_probs[i])) for i in keep]
        text = tokenizer.decode(ids, skip_special_tokens=True).strip()
        return Translation(text, tokens, probabilities)

    def _ctranslate2(self, model, rows: list[list[int]], settings: Settings) -> list[Translation]:
        tokenizer, translator = self.tokenizer, model.translator
        source = [model.source_tokens(row) for row in rows]
        results = translator.translate_batch(
            source,
            beam_size=settings.generation_keywords()["num_beams"],
            max_decoding_length=self.max_new_tokens,
            max_input_length=0,
            min_decoding_length=0,
            use_vmap=self.vocabulary_map,
        )
        hypotheses = [result.hypotheses[0] for result in results]
        # the probability of each token of the chosen translation, end of sentence included (a forced pass)
        scored = translator.score_batch(source, hypotheses)
        done = []
        for tokens, score in zip(hypotheses, scored, strict=True):
            ids = model.target_ids(tokens)
            text = tokenizer.decode(ids, skip_special_tokens=True).strip()
            # the score of the end of sentence comes last; a translation cut at the length limit never chose it
            ended = len(tokens) < self.max_new_tokens
            chosen = [*tokens, tokenizer.eos_token] if ended else list(tokens)
            done.append(Translation(text, chosen, [math.exp(p) for p in score.log_probs[: len(chosen)]]))
        return done


@functools.lru_cache(maxsize=1024)
def _split(text: str, language: str) -> Paragraph:
    return split_paragraph(text, language)


def _learned_positions(config) -> int | float:
    """A learned position table's rows: no token beyond them has a position (no limit for the other kinds)."""
    if getattr(config, "position_embedding_type", None) == "learned":
        return config.max_position_embeddings
    return math.inf
