"""The position-wise feed-forward network FFN(x) = W2 act(W1 x + b1) + b2, plain or gated (GLU variants)."""

import torch
from torch import nn
from transformers.activations import ACT2FN

from .dropout import FastCpuDropout

# gated variant -> the activation applied to its gate
GATED_ACTIVATIONS = {"swiglu": "silu", "geglu": "gelu"}


class _CompiledCpuRelu(torch.autograd.Function):
    """ReLU whose backward pass reads its output (grad * sign(out)), which the next matrix product keeps anyway.

    Why: from `torch.relu`'s own backward, torch.compile's CPU code saves a boolean mask of the negative inputs,
    and its vectorised code stores booleans one at a time (106 ms of a 1.05 s compiled step at benchmarks.speed's
    default size, 1 thread, AVX2). Eager PyTorch and other devices use `torch.relu`.
    """

    @staticmethod
    def forward(ctx, hidden_states):
        output = hidden_states.clamp_min(0)
        ctx.save_for_backward(output)
        return output

    @staticmethod
    def backward(ctx, grad_output):
        (output,) = ctx.saved_tensors
        return grad_output * output.sign()


class PositionwiseFeedForward(nn.Module):
    """Applied to every position separately and identically.

    For swiglu/geglu (Shazeer, 2020) one fused matrix produces gate and value: act(x W_g) * (x W_v).
    """

    def __init__(self, d_model: int, ffn_dim: int, activation: str, activation_dropout: float):
        super().__init__()
        self.is_gated = activation in GATED_ACTIVATIONS
        self.is_relu = activation == "relu"
        self.activation = ACT2FN[GATED_ACTIVATIONS.get(activation, activation)]
        self.up_proj = nn.Linear(d_model, 2 * ffn_dim if self.is_gated else ffn_dim)
        self.down_proj = nn.Linear(ffn_dim, d_model)
        self.activation_dropout = FastCpuDropout(activation_dropout)

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        hidden_states = self.up_proj(hidden_states)
        if self.is_gated:
            # (batch, seq, 2 * ffn_dim) -> gate, value: (batch, seq, ffn_dim) each
            gate, value = hidden_states.chunk(2, dim=-1)
            hidden_states = self.activation(gate) * value
        elif self.is_relu and hidden_states.device.type == "cpu" and torch.compiler.is_compiling():
            hidden_states = _CompiledCpuRelu.apply(hidden_states)
        else:
            hidden_states = self.activation(hidden_states)
        return self.down_proj(self.activation_dropout(hidden_states))
