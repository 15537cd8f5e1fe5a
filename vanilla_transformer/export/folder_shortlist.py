"""A model folder's lexical shortlist, which an export carries (ONNX) or turns into CTranslate2's vocabulary map:
checked against the model and its tokenizer first, so that a shortlist of another tokenizer stops the export by name
instead of travelling with it."""

from __future__ import annotations

from pathlib import Path

from ..lexical_shortlist import SHORTLIST_FILE, LexicalShortlist, ShortlistError
from ..tokenization import tokenizer_identity


def folder_shortlist(folder, config, tokenizer) -> LexicalShortlist | None:
    """The shortlist of a local model folder (None without one), checked against its model and tokenizer."""
    path = Path(folder) / SHORTLIST_FILE
    if not path.is_file():
        return None
    shortlist = LexicalShortlist.load(path)
    try:
        shortlist.check_fits(config, where=f"the model {folder}")
        shortlist.check_tokenizer(tokenizer_identity(tokenizer), f"the model {folder}")
    except ShortlistError as error:  # its messages say "the shortlist": which file, then
        raise ShortlistError(f"{path}: {error}") from error
    return shortlist


__all__ = ["folder_shortlist"]
