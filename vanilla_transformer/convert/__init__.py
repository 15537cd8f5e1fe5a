"""Other libraries' models as our folders: Marian (`vanilla-transformer convert marian`)."""

from .marian import add_convert_subcommand, config_from_marian, convert_marian, unsupported_fields

__all__ = ["add_convert_subcommand", "config_from_marian", "convert_marian", "unsupported_fields"]
