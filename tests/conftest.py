import itertools

import pytest
import torch

from vanilla_transformer import VanillaTransformerConfig, VanillaTransformerForConditionalGeneration

VOCAB = 40
PAD, BOS, EOS = 0, 1, 2

# every combination of the architecture switches the core issue names
SWITCHES = list(
    itertools.product(
        ("post", "pre"),  # norm_placement
        ("sinusoidal", "learned", "rope"),  # position_embedding_type
        ("layernorm", "rmsnorm"),  # norm_type
        (None, 2, 1),  # num_key_value_heads: MHA, GQA, MQA
        ("relu", "swiglu"),  # activation_function
    )
)


def switch_id(switches) -> str:
    placement, positions, norm, kv_heads, activation = switches
    attention = {None: "mha", 2: "gqa", 1: "mqa"}[kv_heads]
    return f"{placement}-{positions}-{norm}-{attention}-{activation}"


def tiny_config(**overrides) -> VanillaTransformerConfig:
    fields = dict(
        vocab_size=VOCAB,
        d_model=16,
        encoder_layers=2,
        decoder_layers=2,
        encoder_attention_heads=4,
        decoder_attention_heads=4,
        encoder_ffn_dim=32,
        decoder_ffn_dim=32,
        dropout=0.0,
        max_position_embeddings=64,
        pad_token_id=PAD,
        bos_token_id=BOS,
        eos_token_id=EOS,
        decoder_start_token_id=BOS,
    )
    fields.update(overrides)
    return VanillaTransformerConfig(**fields)


def config_for(switches, **overrides) -> VanillaTransformerConfig:
    placement, positions, norm, kv_heads, activation = switches
    return tiny_config(
        norm_placement=placement,
        position_embedding_type=positions,
        norm_type=norm,
        num_key_value_heads=kv_heads,
        activation_function=activation,
        **overrides,
    )


def tiny_model(config, seed: int = 0, **kwargs) -> VanillaTransformerForConditionalGeneration:
    torch.manual_seed(seed)
    return VanillaTransformerForConditionalGeneration._from_config(config, **kwargs).eval()


def random_tokens(batch: int, length: int, seed: int) -> torch.Tensor:
    """Ids that avoid the special tokens, so no sequence ends early by accident."""
    generator = torch.Generator().manual_seed(seed)
    return torch.randint(3, VOCAB, (batch, length), generator=generator)


@pytest.fixture(params=SWITCHES, ids=[switch_id(s) for s in SWITCHES])
def switches(request):
    return request.param
