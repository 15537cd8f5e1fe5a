"""The residual connection around every sublayer, with its norm placed before (Pre-LN) or after (Post-LN)."""

import torch
from torch import nn

from .dropout import Dropout


def build_norm(config) -> nn.Module:
    if config.norm_type == "rmsnorm":
        return nn.RMSNorm(config.d_model, eps=config.layer_norm_eps)
    return nn.LayerNorm(config.d_model, eps=config.layer_norm_eps)


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


class ResidualConnection(nn.Module):
    """Post-LN: LayerNorm(x + Dropout(Sublayer(x))), as in the paper. Pre-LN: x + Dropout(Sublayer(Norm(x))).

    The layer calls `sublayer_input(x)` to get what the sublayer reads, then `forward(x, sublayer_output)`.
    """

    def __init__(self, config, drop_path_rate: float):
        super().__init__()
        self.pre_norm = config.norm_placement == "pre"
        self.norm = build_norm(config)
        self.dropout = Dropout(config.dropout)
        self.drop_path = DropPath(drop_path_rate)

    def sublayer_input(self, residual: torch.Tensor) -> torch.Tensor:
        return self.norm(residual) if self.pre_norm else residual

    def forward(self, residual: torch.Tensor, sublayer_output: torch.Tensor) -> torch.Tensor:
        output = residual + self.drop_path(self.dropout(sublayer_output))
        return output if self.pre_norm else self.norm(output)
