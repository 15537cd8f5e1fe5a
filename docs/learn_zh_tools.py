"""What the Chinese Learn pages (docs/learn/*.zh.md) share at build time, around their own snippets.

A page calls `begin()` in a hidden first block and `end()` in a hidden last one (``` python exec="on" ```, no
source shown): between them torch runs on one thread and every page starts from the same seed and print options.

Why one thread: the pages run models of a few thousand parameters, whose matrix products take microseconds; with
two threads on a busy two-core machine each product waits for the other thread to be scheduled (0.87 s against
0.008 s for the same tiny forward pass, measured while another build ran). `end()` gives back the thread count the
build had, so that nothing after the page runs differently.

With LEARN_ZH_TIMINGS=FILE in the environment, `end()` appends the page's snippet time to FILE (a line per page).
"""

import os
import time

import torch

_state: dict = {}


def begin(page: str) -> None:
    """One thread, seed 0, three decimals; remembers what the build had before."""
    _state[page] = (torch.get_num_threads(), time.perf_counter())
    torch.set_num_threads(1)
    torch.manual_seed(0)
    torch.set_printoptions(precision=3, sci_mode=False)


def end(page: str) -> None:
    """Restore the build's thread count and print options; note the page's snippet time if asked to."""
    threads, started = _state.pop(page)
    torch.set_num_threads(threads)
    torch.set_printoptions(profile="default")
    timings = os.environ.get("LEARN_ZH_TIMINGS")
    if timings:
        with open(timings, "a", encoding="utf-8") as file:
            file.write(f"{page}\t{time.perf_counter() - started:.2f}\n")
