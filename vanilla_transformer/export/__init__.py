"""Our folders in other engines' formats: CTranslate2 (`vanilla-transformer export ctranslate2`)."""

from .ctranslate2_spec import add_export_subcommand, build_spec, export_ctranslate2, unsupported_switches

__all__ = ["add_export_subcommand", "build_spec", "export_ctranslate2", "unsupported_switches"]
