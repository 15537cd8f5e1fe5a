"""What a model says it translates, checked against a corpus before hours go into the wrong way: translating it
(`translate-corpus`), or building the model's shortlist from it (`shortlist`); and the languages' names, as the model
card and the browser page say them."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

# ISO 639 codes of many languages (opus-mt's multilingual models): no one language to compare
GROUP_CODES = {"mul", "und", "mis", "zxx"}
LANGUAGE_NAMES = {
    "ar": "Arabic", "cs": "Czech", "de": "German", "en": "English", "es": "Spanish", "fi": "Finnish",
    "fr": "French", "hi": "Hindi", "it": "Italian", "ja": "Japanese", "ko": "Korean", "nl": "Dutch",
    "pl": "Polish", "pt": "Portuguese", "ro": "Romanian", "ru": "Russian", "sv": "Swedish", "tr": "Turkish",
    "uk": "Ukrainian", "zh": "Chinese",
}  # fmt: skip


def language_name(code: str) -> str:
    """The English name of the language `code` names ("de", "de_AT" and "de-AT": German); the code itself where
    `LANGUAGE_NAMES` has none."""
    return LANGUAGE_NAMES.get(_primary(code), code)


def declared_languages(model: str, tokenizer) -> tuple[tuple[str, str], str] | None:
    """(source, target) and where they were read: Marian's tokenizer keeps them (`source_lang`, `target_lang`), and
    the model card of a folder we wrote lists them in its metadata (`language: [source, target]`). None: unknown."""
    source, target = getattr(tokenizer, "source_lang", None), getattr(tokenizer, "target_lang", None)
    if isinstance(source, str) and isinstance(target, str):
        return (source, target), "its tokenizer"
    card = Path(model) / "README.md"
    if not card.is_file():
        return None
    text = card.read_text(encoding="utf-8", errors="replace")
    if not text.startswith("---"):
        return None
    try:
        metadata = yaml.safe_load(text.split("---", 2)[1]) or {}
    except (yaml.YAMLError, IndexError):
        return None  # a card is documentation: one that does not parse says nothing of the languages
    languages = metadata.get("language") if isinstance(metadata, dict) else None
    if isinstance(languages, list) and len(languages) == 2 and all(isinstance(code, str) for code in languages):
        return (languages[0], languages[1]), "its model card"
    return None


def check_languages(model: str, tokenizer, source_lang: str, target_lang: str, reversed_hint: str = "") -> None:
    """Refuse a model that declares other languages than source_lang -> target_lang; `reversed_hint` ends the
    message where the model translates target_lang -> source_lang (what to do then)."""
    declared = declared_languages(model, tokenizer)
    if declared is None:
        return
    (source, target), where = declared
    declared_codes, asked = (_primary(source), _primary(target)), (_primary(source_lang), _primary(target_lang))
    if any(len(code) != len(other) or code in GROUP_CODES for code, other in zip(declared_codes, asked, strict=True)):
        return  # "eng" or "mul" against "en": codes of other kinds, which say nothing certain here
    if declared_codes == asked:
        return
    reversed_model = declared_codes == asked[::-1] and reversed_hint
    raise ValueError(
        f"--model {model} translates {source}->{target} ({where}), but the corpus is asked for "
        f"{source_lang}->{target_lang} (--source_lang {source_lang} --target_lang {target_lang})"
        + (f": it translates the other way ({reversed_hint})" if reversed_model else "")
    )


def _primary(code: str) -> str:
    """The language of a code, without its region or script: "pt_BR" and "pt-br" are "pt", "zh-Hans" is "zh"."""
    return re.split(r"[_-]", code.strip().lower())[0]
