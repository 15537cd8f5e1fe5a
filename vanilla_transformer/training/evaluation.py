"""Validation loss, and BLEU/chrF of beam-search translations, scored with sacreBLEU."""

import contextlib
import re

import sacrebleu
import torch

from ..common.extras import MissingExtraError
from ..inference.translate import translate
from .batches import sequence_lengths, token_budget_batches


def corpus_scores(
    hypotheses: list[str], references: list[str], compound_split_language: str | None = None
) -> dict[str, float]:
    """sacreBLEU (cased, detokenized, 13a), chrF, and BLEU4 on lowercased 13a-tokenized text, the figure that
    published Multi30k results report (multi-bleu on lowercased tokenized text); with `compound_split_language`,
    also `bleu_compound_split`, scored as the paper's WMT14 table was (`compound_split_bleu`)."""
    scores = {
        "bleu": sacrebleu.corpus_bleu(hypotheses, [references]).score,
        "chrf": sacrebleu.corpus_chrf(hypotheses, [references]).score,
        "bleu_lowercased": sacrebleu.corpus_bleu(hypotheses, [references], lowercase=True, tokenize="13a").score,
    }
    if compound_split_language:
        scores["bleu_compound_split"] = compound_split_bleu(hypotheses, references, compound_split_language)
    return scores


# "Nord-Süd" -> "Nord ##AT##-##AT## Süd", as tensor2tensor's get_ende_bleu.sh splits compounds
_HYPHEN_INSIDE_A_WORD = re.compile(r"(\S)-(\S)")


def compound_split_bleu(hypotheses: list[str], references: list[str], language: str) -> float:
    """BLEU as the paper's WMT14 EN-DE table was scored (tensor2tensor's get_ende_bleu.sh, multi-bleu.perl): cased,
    on Moses-tokenized text (sacremoses, the Python port of Moses' tokenizer.perl) with hyphenated compounds split
    into three tokens. It runs higher than sacreBLEU's detokenized score, the figure to compare with other work."""
    try:
        from sacremoses import MosesTokenizer
    except ImportError as error:
        raise MissingExtraError(
            'compound-split BLEU needs sacremoses: pip install "vanilla-transformer[wmt]"'
        ) from error
    tokenizer = MosesTokenizer(lang=language)

    def split(text: str) -> str:
        # one pass, as the script's perl: of "a-b-c" it splits the first hyphen only (the matches may not overlap)
        return _HYPHEN_INSIDE_A_WORD.sub(
            r"\1 ##AT##-##AT## \2", tokenizer.tokenize(text, escape=False, return_str=True)
        )

    return sacrebleu.corpus_bleu(
        [split(text) for text in hypotheses], [[split(text) for text in references]], tokenize="none"
    ).score


def gpu_bfloat16(device) -> contextlib.AbstractContextManager:
    """On a CUDA GPU that has bf16, autocast to it: evaluation reads every weight each decoding step, and the model
    trains in float32 weights whatever the run's precision. Elsewhere nothing changes."""
    device = torch.device(device)
    if device.type == "cuda" and torch.cuda.is_bf16_supported():
        return torch.autocast("cuda", dtype=torch.bfloat16)
    return contextlib.nullcontext()


@torch.no_grad()
def validation_loss(model, dataset, collator, max_tokens: int, device) -> float:
    """Token-averaged cross-entropy of the (label-smoothed) model loss over a tokenized split."""
    was_training = model.training
    model.eval()
    summed, tokens = 0.0, 0
    with gpu_bfloat16(device):
        for indices in token_budget_batches(sequence_lengths(dataset), max_tokens):
            examples = [{"input_ids": dataset[i]["input_ids"], "labels": dataset[i]["labels"]} for i in indices]
            batch = {name: value.to(device) for name, value in collator(examples).items()}
            count = int((batch["labels"] != -100).sum())
            # the loss without the logits: the generator runs inside it, a block of tokens at a time
            summed += model(**batch, return_logits=False).loss.item() * count
            tokens += count
    model.train(was_training)
    return summed / max(tokens, 1)


def translation_scores(
    model, tokenizer, dataset, source_lang: str, target_lang: str, compound_split: bool = False, **translate_options
):
    """corpus_scores of the translations of a split's source column (translate() evaluates in eval mode; on a GPU in
    bf16, with batches cut by tokens)."""
    with gpu_bfloat16(model.device):
        hypotheses = translate(model, tokenizer, list(dataset[source_lang]), **translate_options)
    return corpus_scores(hypotheses, list(dataset[target_lang]), target_lang if compound_split else None)
