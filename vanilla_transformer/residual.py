"""The paper's "Add & Norm" around every sublayer: a residual connection with dropout, and a norm placed after it
(Post-LN, the paper) or before the sublayer (Pre-LN)."""

import torch
from torch import nn

from .dropout import FastCpuDropout


def build_norm(norm_type: str, d_model: int, eps: float) -> nn.Module:
    if norm_type == "rmsnorm":
        return nn.RMSNorm(d_model, eps=eps)
    return nn.LayerNorm(d_model, eps=eps)


class DropPath(nn.Module):
    """Stochastic depth (Huang et al., 2016): drop a whole residual branch for some examples while training."""

    def __init__(self, rate: float):
        super().__init__()
        self.rate = rate

    def forward(self, branch: torch.Tensor) -> torch.Tensor:
        if not self.training or self.rate == 0.0:
            return branch
        keep = 1.0 - self.rate
        # one coin per example, broadcast over (seq, d_model); rescaled so the expectation is unchanged
        mask = branch.new_empty((branch.shape[0],) + (1,) * (branch.dim() - 1)).bernoulli_(keep)
        return branch * mask / keep


class AddAndNorm(nn.Module):
    """Post-LN: LayerNorm(x + Dropout(Sublayer(x))), as in the paper (section 3.1, dropout from 5.4).
    Pre-LN: x + Dropout(Sublayer(Norm(x))), the norm moved in front of the sublayer.
    With residual scaling the branch is multiplied by a learnable scalar `scale` (gamma) first: it starts at 1
    ("learned") or at 0 ("rezero", each layer then starts as the identity of its residual stream).

    A layer asks `sublayer_input(x)` for what its sublayer reads, then `add_and_norm(x, sublayer_output)` for the
    new residual stream.
    """

    def __init__(
        self,
        d_model: int,
        norm_placement: str,
        norm_type: str,
        eps: float,
        dropout: float,
        drop_path: float,
        residual_scaling: str = "none",
    ):
        super().__init__()
        self.pre_norm = norm_placement == "pre"
        self.norm = build_norm(norm_type, d_model, eps)
        self.dropout = FastCpuDropout(dropout)
        self.drop_path = DropPath(drop_path)
        # gamma's value before training; None without residual scaling, where no parameter is made (or saved)
        self.initial_scale = {"learned": 1.0, "rezero": 0.0}.get(residual_scaling)
        if self.initial_scale is not None:
            self.scale = nn.Parameter(torch.tensor(self.initial_scale))

    def sublayer_input(self, residual: torch.Tensor) -> torch.Tensor:
        """Norm(x) under Pre-LN; x itself under Post-LN."""
        return self.norm(residual) if self.pre_norm else residual

    def add_and_norm(self, residual: torch.Tensor, sublayer_output: torch.Tensor) -> torch.Tensor:
        """x + Dropout(sublayer output), normalised under Post-LN."""
        branch = self.drop_path(self.dropout(sublayer_output))
        if self.initial_scale is not None:
            branch = self.scale * branch
        output = residual + branch
        return output if self.pre_norm else self.norm(output)
