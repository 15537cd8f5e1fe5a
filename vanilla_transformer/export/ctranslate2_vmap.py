"""A model folder's lexical shortlist as CTranslate2's vocabulary map (`vmap.txt`): one line a source token, the
token, a tab and its candidate target tokens, and a first line with an empty key for the tokens every batch gets.
CTranslate2 reads tokens, not ids, so the map is written with the tokenizer's own tokens."""

from __future__ import annotations

from pathlib import Path

from ..lexical_shortlist import LexicalShortlist


def write_vocabulary_map(shortlist: LexicalShortlist, source: list[str], target: list[str], path: Path) -> str:
    """Write the map to `path`; returns it as a string (what CTranslate2's converter takes)."""
    lines = ["\t" + " ".join(_checked(target[i]) for i in shortlist.always.tolist())]
    for source_id, candidates in enumerate(shortlist.candidates.tolist()):
        kept = [target[i] for i in candidates if i >= 0]
        if kept:
            lines.append(f"{_checked(source[source_id])}\t{' '.join(_checked(token) for token in kept)}")
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return str(path)


def _checked(token: str) -> str:
    # CTranslate2 splits the map's lines on spaces and tabs
    if not token or any(character.isspace() for character in token):
        raise ValueError(f"the token {token!r} holds white space, which CTranslate2's vocabulary map cannot")
    return token
