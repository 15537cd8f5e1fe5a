"""keep_freed_memory: repeated large CPU tensors reuse the pages of freed ones instead of faulting in fresh ones."""

import platform
import subprocess
import sys

import pytest

# Allocates and frees a 96 MiB tensor (the size of a batch's logits) ten times and prints the page faults it cost;
# run in a fresh process because the setting, once made, holds for the whole process.
_FAULTS_OF_REPEATED_LARGE_TENSORS = """
import resource, sys, torch
from vanilla_transformer.training.cpu_memory import keep_freed_memory
kept = keep_freed_memory() if sys.argv[1] == "keep" else False
faults = lambda: resource.getrusage(resource.RUSAGE_SELF).ru_minflt
# the first blocks grow the heap, not always in a row: up to the 5th in 18 processes watched block by block, and
# never after 8 in 40 runs of this script
for _ in range(8):
    torch.empty(24_000_000).fill_(1.0)
before = faults()
for _ in range(10):
    torch.empty(24_000_000).fill_(1.0)
print(kept, faults() - before)
"""


def page_faults(mode: str) -> tuple[bool, int]:
    printed = subprocess.run(
        [sys.executable, "-c", _FAULTS_OF_REPEATED_LARGE_TENSORS, mode],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    return printed[0] == "True", int(printed[1])


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="mallopt is glibc's")
def test_kept_memory_serves_repeated_large_tensors_without_new_page_faults():
    kept, faults_kept = page_faults("keep")
    _, faults_default = page_faults("default")
    assert kept
    # by default each 96 MiB block comes fresh from the kernel: ~24,000 faults of 4 KiB pages (fewer with huge pages)
    assert faults_default > 1000
    assert faults_kept < faults_default / 20
