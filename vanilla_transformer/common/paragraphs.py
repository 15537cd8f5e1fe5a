"""Paragraphs in, paragraphs out: a model trained on sentences, given a paragraph, drops or garbles sentences, so a
paragraph is split into sentences by sentencex (a multilingual segmenter with the same rules in Python and in
JavaScript: the pages in the browser split with its npm package), its sentences translated as one batch, and the
translations joined with the paragraph's own spacing and line breaks.

```python
from vanilla_transformer.common.paragraphs import translate_paragraphs

translate_paragraphs(["Ein Hund rennt. Zwei Männer spielen.\\n\\nEs regnet."], "de", lambda s: translate(model, tok, s))
```

The Python package is pinned below 1.0: its 1.x line is a rewrite that splits differently from the npm package's
last version that runs in a browser (0.4.2; npm's 1.x is a native Node add-on), and 0.6.1 agrees with it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from .extras import import_sentencex


@dataclass(frozen=True)
class Paragraph:
    """A text as its sentences and what lies around them: `gaps[i]` comes before sentence i, `gaps[-1]` after the
    last one, so that `join(sentences)` gives the text back, character for character."""

    sentences: tuple[str, ...]
    gaps: tuple[str, ...]

    def join(self, translations: Sequence[str]) -> str:
        """The translations of the sentences in the paragraph's own spacing and line breaks."""
        if len(translations) != len(self.sentences):
            raise ValueError(f"{len(translations)} translations for a paragraph of {len(self.sentences)} sentences")
        pieces = [self.gaps[0]]
        for translation, gap in zip(translations, self.gaps[1:], strict=True):
            pieces += [translation, gap]
        return "".join(pieces)


def split_paragraph(text: str, language: str) -> Paragraph:
    """`text` as sentences by sentencex's rules for `language` (an ISO 639 code; an unknown one falls back to
    sentencex's generic rules); a text of spaces alone has no sentence."""
    segment = import_sentencex().segment
    sentences, gaps, position = [], [], 0
    for piece in segment(language, text):
        sentence = piece.strip()
        if not sentence:
            continue
        start = text.find(sentence, position)
        if start < 0:  # not in the text as it is (never seen): the rest is one sentence
            break
        gaps.append(text[position:start])
        sentences.append(sentence)
        position = start + len(sentence)
    rest = text[position:]
    if rest.strip():  # what the segmenter left out, or a piece it changed: kept, and translated, as one sentence
        start = position + len(rest) - len(rest.lstrip())
        gaps.append(text[position:start])
        sentences.append(rest.strip())
        position = start + len(rest.strip())
    gaps.append(text[position:])
    return Paragraph(tuple(sentences), tuple(gaps))


def translate_paragraphs(
    texts: Sequence[str], language: str, translate_sentences: Callable[[list[str]], list[str]]
) -> list[str]:
    """Each text split into sentences, every sentence of every text translated in one call of
    `translate_sentences` (sentences in, translations in the same order out), and each text joined again."""
    paragraphs = [split_paragraph(text, language) for text in texts]
    sentences = [sentence for paragraph in paragraphs for sentence in paragraph.sentences]
    translations = translate_sentences(sentences) if sentences else []
    if len(translations) != len(sentences):
        raise ValueError(f"{len(translations)} translations came back for {len(sentences)} sentences")
    joined, start = [], 0
    for paragraph in paragraphs:
        end = start + len(paragraph.sentences)
        joined.append(paragraph.join(translations[start:end]))
        start = end
    return joined


__all__ = ["Paragraph", "split_paragraph", "translate_paragraphs"]
