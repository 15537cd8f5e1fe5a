"""Inference: translating text with a trained model (`translate`, `load_for_translation`, the `translate` command)."""

from .translate import add_translate_subcommand, load_for_translation, run_translate, translate

__all__ = ["add_translate_subcommand", "load_for_translation", "run_translate", "translate"]
