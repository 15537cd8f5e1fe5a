"""The offline demo (`vanilla-transformer demo`): the run, and the number-words corpus it translates."""

from .run import add_demo_subcommand, run_demo

__all__ = ["add_demo_subcommand", "run_demo"]
