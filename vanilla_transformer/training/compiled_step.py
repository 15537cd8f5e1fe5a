"""`--torch_compile`: the training forward and its loss compiled by torch.compile with inductor.

The micro-batches of token-budget batching have a new shape nearly every step (sentences x longest source x longest
target). Compiled for shapes as they come, every new shape would be a compilation; compiled with dynamic shapes
(`dynamic=True`), one graph serves them all, and only a size of 1 in a dimension (a lone over-long sentence)
compiles again. The lengths are also padded to a multiple of `LENGTH_MULTIPLE` by the collator, which tensor cores
and vector units prefer and which changes no output (padding is masked). The graphs the backend compiles are
counted, and the loop logs them. Evaluation and generate() run the model itself, eager.
"""

from __future__ import annotations

import torch

LENGTH_MULTIPLE = 8


class CountingInductor:
    """torch.compile's inductor backend, counting the graphs it is given (a recompilation is a new graph; under DDP
    each bucket of the split graph is one)."""

    def __init__(self):
        self.inductor = torch._dynamo.lookup_backend("inductor")
        self.graphs = 0

    def __call__(self, graph_module, example_inputs):
        compiled = self.inductor(graph_module, example_inputs)
        # counted once compiled: dynamo may abandon a graph and trace again (a restart), which compiles nothing
        self.graphs += 1
        return compiled


class CompiledForward:
    """The prepared model (DDP, PEFT and Accelerate's autocast wrappers included) behind torch.compile; called like
    the model."""

    def __init__(self, model: torch.nn.Module):
        self.backend = CountingInductor()
        self.module = torch.compile(model, backend=self.backend, dynamic=True)

    @property
    def graphs(self) -> int:
        return self.backend.graphs

    def __call__(self, *args, **kwargs):
        return self.module(*args, **kwargs)
