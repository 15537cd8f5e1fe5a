"""What the Chinese Learn pages (docs/learn/*.zh.md) share at build time, around their own snippets.

A page calls `begin()` in a hidden first block and `end()` in a hidden last one (``` python exec="on" ```, no
source shown): every page starts from the same seed and print options, and `end()` gives back the defaults, so that
nothing after the page prints differently. (The whole build runs torch on one thread: docs/hooks.py.)

With LEARN_ZH_TIMINGS=FILE in the environment, `end()` appends the page's snippet time to FILE (a line per page).
"""

import os
import time

import torch

_state: dict = {}


def begin(page: str) -> None:
    """Seed 0, three decimals; notes when the page started."""
    _state[page] = time.perf_counter()
    torch.manual_seed(0)
    torch.set_printoptions(precision=3, sci_mode=False)


def end(page: str) -> None:
    """Restore the print options; note the page's snippet time if asked to."""
    started = _state.pop(page)
    torch.set_printoptions(profile="default")
    timings = os.environ.get("LEARN_ZH_TIMINGS")
    if timings:
        with open(timings, "a", encoding="utf-8") as file:
            file.write(f"{page}\t{time.perf_counter() - started:.2f}\n")
