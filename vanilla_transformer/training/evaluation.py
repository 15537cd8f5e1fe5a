"""Validation loss, and BLEU/chrF of beam-search translations, scored with sacreBLEU."""

import sacrebleu
import torch

from ..inference.translate import translate
from .batches import sequence_lengths, token_budget_batches


def corpus_scores(hypotheses: list[str], references: list[str]) -> dict[str, float]:
    """sacreBLEU (cased, detokenized, 13a), chrF, and BLEU4 on lowercased 13a-tokenized text, the figure that
    published Multi30k results report (multi-bleu on lowercased tokenized text)."""
    return {
        "bleu": sacrebleu.corpus_bleu(hypotheses, [references]).score,
        "chrf": sacrebleu.corpus_chrf(hypotheses, [references]).score,
        "bleu_lowercased": sacrebleu.corpus_bleu(hypotheses, [references], lowercase=True, tokenize="13a").score,
    }


@torch.no_grad()
def validation_loss(model, dataset, collator, max_tokens: int, device) -> float:
    """Token-averaged cross-entropy of the (label-smoothed) model loss over a tokenized split."""
    was_training = model.training
    model.eval()
    summed, tokens = 0.0, 0
    for indices in token_budget_batches(sequence_lengths(dataset), max_tokens):
        examples = [{"input_ids": dataset[i]["input_ids"], "labels": dataset[i]["labels"]} for i in indices]
        batch = {name: value.to(device) for name, value in collator(examples).items()}
        count = int((batch["labels"] != -100).sum())
        summed += model(**batch).loss.item() * count
        tokens += count
    model.train(was_training)
    return summed / max(tokens, 1)


def translation_scores(model, tokenizer, dataset, source_lang: str, target_lang: str, **translate_options):
    """corpus_scores of the translations of a split's source column (translate() evaluates in eval mode)."""
    hypotheses = translate(model, tokenizer, list(dataset[source_lang]), **translate_options)
    return corpus_scores(hypotheses, list(dataset[target_lang]))
