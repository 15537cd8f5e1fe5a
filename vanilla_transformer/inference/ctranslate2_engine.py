"""Translating with a CTranslate2 export of one of our folders (`vanilla-transformer export ctranslate2`).

`load_ctranslate2` gives a model-like object whose `generate()` calls CTranslate2's `translate_batch`, so that
`translate()` batches, orders and treats empty lines exactly as it does for the PyTorch model:

```python
from vanilla_transformer.inference import load_ctranslate2, translate

model, tokenizer = load_ctranslate2("my-model-ct2", compute_type="int8")
translate(model, tokenizer, ["Ein Hund rennt.", "", "Zwei Männer spielen Fußball."])
```
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
from transformers import GenerationConfig, PreTrainedTokenizerBase

from ..common.extras import import_ctranslate2
from ..common.model_folder import MODEL_CONFIG_FILE, load_tokenizer
from ..configuration_vanilla_transformer import VanillaTransformerConfig
from ..lexical_shortlist import BUILD_HINT, SHORTLIST_FILE, LexicalShortlist, ShortlistError


class CTranslate2Model:
    """What `translate()` asks of a model (config, generation_config, device, eval/train, generate), answered by a
    `ctranslate2.Translator`."""

    training = False

    def __init__(
        self, translator, tokenizer: PreTrainedTokenizerBase, config, generation_config: GenerationConfig, folder: Path
    ):
        self.translator = translator
        self.folder = folder
        self.tokenizer = tokenizer
        self.config = config
        self.generation_config = generation_config
        self.device = torch.device("cpu")
        self.source_tokens, self.target_ids = _vocabularies(tokenizer)

    def eval(self) -> CTranslate2Model:
        return self

    def train(self, mode: bool = True) -> CTranslate2Model:
        return self

    def to(self, device) -> CTranslate2Model:
        if torch.device(device).type != self.translator.device:
            raise ValueError(f"this CTranslate2 model runs on {self.translator.device}: load it with device={device!r}")
        return self

    def shortlist(self) -> LexicalShortlist:
        """The shortlist the export's vocabulary map was written from (`export ctranslate2` of a folder with one)."""
        if not (self.folder / "vmap.txt").is_file() or not (self.folder / SHORTLIST_FILE).is_file():
            raise ShortlistError(
                f"the export {self.folder} has no vocabulary map: build a shortlist into the model folder "
                f"({BUILD_HINT.format(folder='FOLDER')}), then export it again"
            )
        return LexicalShortlist.load(self.folder / SHORTLIST_FILE)

    def generate(
        self, input_ids, attention_mask, num_beams=1, max_new_tokens=None, use_shortlist=False, **kwargs
    ) -> torch.Tensor:
        """The decoder start token, the translation and `</s>` per sentence, padded: what generate() returns."""
        # the tokenizer pads on its padding side: keep each row's real tokens, whichever side they sit on
        rows = [ids[mask.bool()].tolist() for ids, mask in zip(input_ids, attention_mask, strict=True)]
        settings = self.generation_config
        # max_length counts the decoder start token; CTranslate2's lengths do not
        limit = max_new_tokens or settings.max_length - 1
        results = self.translator.translate_batch(
            [self.source_tokens(row) for row in rows],
            beam_size=num_beams,
            max_batch_size=len(rows),
            max_decoding_length=limit,
            # as generate(): </s> may come first (CTranslate2's default minimum is 1), and translate() has already
            # cut inputs to max_input_tokens (CTranslate2 would cut at 1024 by itself)
            min_decoding_length=settings.min_new_tokens or 0,
            max_input_length=0,
            length_penalty=settings.length_penalty if settings.length_penalty is not None else 1.0,
            repetition_penalty=settings.repetition_penalty or 1.0,
            no_repeat_ngram_size=settings.no_repeat_ngram_size or 0,
            # generate()'s forbidden tokens (Marian's generation config forbids its pad token, which CTranslate2's own
            # Marian converter removes from the vocabulary instead)
            suppress_sequences=[self.tokenizer.convert_ids_to_tokens(ids) for ids in settings.bad_words_ids or []]
            or None,
            use_vmap=use_shortlist,  # the export's vocabulary map: the lexical shortlist
        )
        start, end, pad = self.config.decoder_start_token_id, self.config.eos_token_id, self.config.pad_token_id
        outputs = [[start, *self.target_ids(r.hypotheses[0]), end] for r in results]
        width = max(len(output) for output in outputs)
        return torch.tensor([output + [pad] * (width - len(output)) for output in outputs])


def _vocabularies(tokenizer: PreTrainedTokenizerBase):
    """(source ids -> tokens, target tokens -> ids). Marian's tokenizer with separate vocabularies keeps two; its
    own conversions read the source vocabulary one way and the target one the other."""
    if not getattr(tokenizer, "separate_vocabs", False):
        return tokenizer.convert_ids_to_tokens, tokenizer.convert_tokens_to_ids
    source = {index: token for token, index in tokenizer.encoder.items()}
    target, unknown = tokenizer.target_encoder, tokenizer.target_encoder[tokenizer.unk_token]
    return (
        lambda ids: [source.get(index, tokenizer.unk_token) for index in ids],
        lambda tokens: [target.get(token, unknown) for token in tokens],
    )


def load_ctranslate2(
    folder: str | Path,
    device: str | None = None,
    compute_type: str = "default",
    threads: int = 0,
    device_index: int = 0,
) -> tuple[CTranslate2Model, PreTrainedTokenizerBase]:
    """An exported folder's translator and tokenizer, ready for `translate`. `device`: None takes "cuda" when
    CTranslate2 sees a GPU, else "cpu"; `compute_type`: CTranslate2's ("default" keeps the export's quantization;
    "int8", "float32", ...); `threads`: CPU threads (0: CTranslate2 chooses); `device_index`: which GPU."""
    ctranslate2 = import_ctranslate2()
    folder = Path(folder)
    if not (folder / "model.bin").is_file() or not (folder / MODEL_CONFIG_FILE).is_file():
        raise FileNotFoundError(
            f"{folder} is no CTranslate2 export of ours (model.bin and {MODEL_CONFIG_FILE} expected): make one with "
            "vanilla-transformer export ctranslate2 FOLDER OUTPUT"
        )
    tokenizer = load_tokenizer(folder, described_as="model")
    config = VanillaTransformerConfig.from_dict(json.loads((folder / MODEL_CONFIG_FILE).read_text()))
    generation_config = GenerationConfig.from_pretrained(folder)
    if device is None:
        device = "cuda" if ctranslate2.get_cuda_device_count() > 0 else "cpu"
    translator = ctranslate2.Translator(
        str(folder), device=device, device_index=device_index, compute_type=compute_type, intra_threads=threads
    )
    return CTranslate2Model(translator, tokenizer, config, generation_config, folder), tokenizer


__all__ = ["CTranslate2Model", "load_ctranslate2"]
