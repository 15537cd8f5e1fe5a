"""Model FLOPs of training steps, for the model FLOPs utilisation (MFU) that the loop reports on a GPU and that
`benchmarks.gpu` prints.

A forward pass over a sentence pair of S source and T target tokens counts its matrix products, 2 FLOPs a
multiply-add (Kaplan et al.'s "2 x parameters x tokens", with attention's own products added, as PaLM's MFU does):

    encoder, a layer a source token:   q, k, v and o projections + the feed-forward network
    decoder, a layer a target token:   the same for self-attention, + cross-attention's q and o
    decoder, a layer a source token:   cross-attention's k and v (of the encoder output)
    attention, a layer:                4 x width x (S^2 + T^2 + T x S)   (scores and weighted values, unmasked)
    generator, a target token:         2 x d_model x vocabulary

A training step is 3 forward passes (the backward pass costs two). Embedding lookups, norms, softmax and the
optimizer are not counted, as usual for MFU.
"""

from __future__ import annotations

import numpy as np
import torch

# dense bf16 tensor-core peaks in TFLOP/s (the makers' data sheets, without sparsity); the first name found in
# torch.cuda.get_device_name() counts
BF16_PEAK_TFLOPS = (
    ("H100 PCIe", 756.0),
    ("H200", 989.0),
    ("H100", 989.0),
    ("H800", 989.0),
    ("GH200", 989.0),
    ("A100", 312.0),
    ("A800", 312.0),
    ("L40S", 362.0),
    ("L4", 121.0),
)


def peak_tflops(device: torch.device | str, given: float | None = None) -> float | None:
    """The bf16 dense peak of a CUDA device to compute MFU against: `given`, else from the table by its name; None
    elsewhere (a CPU, an unknown GPU)."""
    if given is not None:
        return given
    if torch.device(device).type != "cuda" or not torch.cuda.is_available():
        return None
    name = torch.cuda.get_device_name(torch.device(device))
    return next((peak for known, peak in BF16_PEAK_TFLOPS if known in name), None)


def forward_flops(config, source_lengths, target_lengths) -> float:
    """Matrix-product FLOPs of a forward pass over the pairs of these lengths (arrays, or single numbers)."""
    source = np.asarray(source_lengths, dtype=np.float64)
    target = np.asarray(target_lengths, dtype=np.float64)
    d = config.d_model

    def attention_width(heads: int) -> tuple[int, int]:
        head_dim = d // heads
        return heads * head_dim, config.kv_heads(heads) * head_dim  # queries' width, keys' (and values') width

    def feed_forward(ffn_dim: int) -> float:
        gated = config.activation_function in ("swiglu", "geglu")
        return 2 * d * ffn_dim * (3 if gated else 2)

    q_enc, kv_enc = attention_width(config.encoder_attention_heads)
    q_dec, kv_dec = attention_width(config.decoder_attention_heads)
    encoder_token = 2 * d * (q_enc + 2 * kv_enc) + 2 * q_enc * d + feed_forward(config.encoder_ffn_dim)
    decoder_token = 2 * d * (q_dec + 2 * kv_dec) + 2 * q_dec * d + feed_forward(config.decoder_ffn_dim)
    decoder_token += 2 * d * q_dec + 2 * q_dec * d  # cross-attention's queries and output
    cross_source_token = 2 * d * 2 * kv_dec  # cross-attention's keys and values, of each source token
    attention = 4 * (
        config.encoder_layers * q_enc * source**2 + config.decoder_layers * q_dec * (target**2 + target * source)
    )
    total = (
        config.encoder_layers * encoder_token * source
        + config.decoder_layers * (decoder_token * target + cross_source_token * source)
        + attention
        + 2 * d * config.target_vocab_size * target
    )
    return float(np.sum(total))


def training_flops(config, source_lengths, target_lengths) -> float:
    """Model FLOPs of training on these pairs: forward and backward, 3 forward passes."""
    return 3 * forward_flops(config, source_lengths, target_lengths)
