"""RoPE scaling for inputs longer than trained, and ALiBi's linear biases: parity with transformers' reference
formulas, the behaviour each promises, and a trained model that reads 4x longer inputs better with NTK scaling."""

import warnings

import pytest
import torch
from helpers import random_tokens, tiny_config, tiny_model
from huggingface_hub.errors import StrictDataclassError
from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS
from transformers.models.bloom.modeling_bloom import build_alibi_tensor

from vanilla_transformer import VanillaTransformerConfig, VanillaTransformerForConditionalGeneration
from vanilla_transformer.positions import LinearBiases, RotaryEmbedding, alibi_slopes, build_rotary

TRAINED = 16


def rotary_config(rope_parameters, heads=4, d_model=32):
    return tiny_config(
        d_model=d_model,
        encoder_attention_heads=heads,
        decoder_attention_heads=heads,
        position_embedding_type="rope",
        rope_parameters=rope_parameters,
        max_position_embeddings=TRAINED,
    )


def angles_of(config, length):
    """The angles (position x frequency) our rotary tables hold, recovered from cos and sin."""
    cos, sin = build_rotary(config, config.encoder_attention_heads)(0, length, torch.device("cpu"), torch.float64)
    return torch.atan2(sin, cos)


def reference_angles(config, length, rope_type):
    inverse_frequencies, _ = ROPE_INIT_FUNCTIONS[rope_type](config, torch.device("cpu"), seq_len=length)
    angles = torch.arange(length, dtype=torch.float32)[:, None] * inverse_frequencies
    angles = torch.cat((angles, angles), dim=-1).double()
    return torch.atan2(angles.sin(), angles.cos())


@pytest.mark.parametrize("rope_type", ["linear", "dynamic"])
@pytest.mark.parametrize("length", [TRAINED // 2, TRAINED, 4 * TRAINED])
def test_rope_scaling_matches_transformers_reference(rope_type, length):
    config = rotary_config({"rope_type": rope_type, "factor": 4.0, "rope_theta": 100.0})
    expected = reference_angles(config, length, rope_type)
    torch.testing.assert_close(angles_of(config, length), expected, atol=1e-4, rtol=0)


def test_ntk_slows_the_lowest_frequency_by_the_factor_and_keeps_the_highest():
    plain = RotaryEmbedding(8, 100.0)
    ntk = RotaryEmbedding(8, 100.0, "ntk", 4.0)
    lowest = [1 / rotary.base(TRAINED) ** (6 / 8) for rotary in (plain, ntk)]
    assert lowest[0] / lowest[1] == pytest.approx(4.0)
    # the highest frequency, 1 radian a position, does not depend on the base
    cos, sin = ntk(0, 3, torch.device("cpu"), torch.float64)
    torch.testing.assert_close(torch.atan2(sin, cos)[:, 0], torch.tensor([0.0, 1.0, 2.0], dtype=torch.float64))


def test_dynamic_is_plain_rope_up_to_the_trained_length_and_ntk_beyond():
    plain = rotary_config({"rope_theta": 100.0})
    dynamic = rotary_config({"rope_type": "dynamic", "factor": 4.0, "rope_theta": 100.0})
    torch.testing.assert_close(angles_of(dynamic, TRAINED), angles_of(plain, TRAINED))
    # at 4x the trained length dynamic needs the factor 4 * 4 - 3 = 13
    ntk = rotary_config({"rope_type": "ntk", "factor": 13.0, "rope_theta": 100.0})
    torch.testing.assert_close(angles_of(dynamic, 4 * TRAINED), angles_of(ntk, 4 * TRAINED))
    assert not torch.allclose(angles_of(dynamic, 4 * TRAINED), angles_of(plain, 4 * TRAINED))


def test_legacy_rope_keywords_are_read_into_rope_parameters():
    assert VanillaTransformerConfig(rope_theta=500.0).rope_parameters == {"rope_type": "default", "rope_theta": 500.0}
    config = VanillaTransformerConfig(position_embedding_type="rope", rope_scaling={"type": "linear", "factor": 2.0})
    assert (config.rope_parameters["rope_type"], config.rope_parameters["factor"]) == ("linear", 2.0)


def test_a_trained_folder_takes_a_scaling_at_load_time_and_keeps_its_base(tmp_path):
    model = tiny_model(tiny_config(position_embedding_type="rope", rope_parameters={"rope_theta": 500.0}))
    model.save_pretrained(tmp_path)
    load = VanillaTransformerForConditionalGeneration.from_pretrained
    for scaling in (
        {"rope_parameters": {"rope_type": "ntk", "factor": 4.0}},
        {"rope_scaling": {"type": "ntk", "factor": 4.0}},
    ):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", FutureWarning)  # transformers' notice that rope_scaling is deprecated
            loaded = load(tmp_path, **scaling)
        rotary = loaded.model.encoder.rotary
        assert (rotary.theta, rotary.rope_type, rotary.factor) == (500.0, "ntk", 4.0), scaling
    bad = [
        ({"rope_parameters": None}, "rope_parameters=None is invalid: rotary positions need the dict"),
        ({"rope_parameters": {"rope_type": "default", "type": "ntk"}}, "'type' .* contradicts rope_type"),
        ({"rope_parameters": {"rope_theta": "ten"}}, "rope_theta must be a positive number"),
        ({"rope_parameters": {"rope_type": "ntk"}}, "rope_type 'ntk' needs a number factor >= 1"),
    ]
    for overrides, message in bad:
        with pytest.raises(StrictDataclassError, match=message):
            load(tmp_path, **overrides)


def most_recent_marker(batch: int, length: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Tokens 4-7 are markers (one in five tokens, and the first), 8-23 noise; each position's label is the last marker
    so far. Telling the latest marker from older ones needs the slow rotary frequencies, whose angles beyond the
    trained length the model has never seen."""
    generator = torch.Generator().manual_seed(seed)
    is_marker = torch.rand(batch, length, generator=generator) < 0.2
    is_marker[:, 0] = True
    tokens = torch.where(
        is_marker,
        torch.randint(4, 8, (batch, length), generator=generator),
        torch.randint(8, 24, (batch, length), generator=generator),
    )
    # the index of the latest marker at or before each position
    latest = torch.cummax(torch.where(is_marker, torch.arange(length), 0), dim=1).values
    return tokens, tokens.gather(1, latest)


def test_ntk_scaling_lowers_the_loss_on_inputs_4x_longer_than_trained(tmp_path):
    torch.manual_seed(0)
    config = rotary_config({"rope_theta": 100.0}, heads=2)
    config.encoder_layers, config.vocab_size = 1, 24
    model = VanillaTransformerForConditionalGeneration(config)
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    source = torch.full((32, 1), 3)
    for step in range(200):
        tokens, labels = most_recent_marker(32, TRAINED, seed=step)
        loss = model(input_ids=source, decoder_input_ids=tokens, labels=labels).loss
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    model.save_pretrained(tmp_path)

    tokens, labels = most_recent_marker(32, 4 * TRAINED, seed=10_000)
    losses = {}
    for rope_type, scaling in (("default", {}), ("ntk", {"rope_parameters": {"rope_type": "ntk", "factor": 4.0}})):
        # the same weights with other rotary tables; the folder's trained base (100) stays
        loaded = VanillaTransformerForConditionalGeneration.from_pretrained(tmp_path, **scaling).eval()
        assert loaded.config.rope_parameters["rope_theta"] == 100.0
        with torch.no_grad():
            short = loaded(input_ids=source, decoder_input_ids=tokens[:, :TRAINED], labels=labels[:, :TRAINED])
            long = loaded(input_ids=source, decoder_input_ids=tokens, labels=labels)
        losses[rope_type] = (short.loss.item(), long.loss.item())
    # learned at the trained length, by either table; at 4x the length NTK's loss is well below plain RoPE's
    assert losses["default"][0] < 0.05 and losses["ntk"][0] < 0.05, losses
    assert losses["ntk"][1] < 0.6 * losses["default"][1], losses


@pytest.mark.parametrize("heads", range(1, 13))
def test_alibi_slopes_match_transformers_bloom(heads):
    # BLOOM's tensor is slope_h * position for a row of keys: its values at position 1 are the slopes
    bloom = build_alibi_tensor(torch.ones(1, 2), heads, torch.float64)[:, 0, 1]
    torch.testing.assert_close(torch.tensor(alibi_slopes(heads), dtype=torch.float64), bloom)


def test_alibi_biases_fall_linearly_with_distance():
    slopes = torch.tensor(alibi_slopes(4))
    # the decoder's third step (position 2) looks back 2, 1 and 0 positions
    decoder = LinearBiases(4, causal=True)(2, 1, torch.device("cpu"), torch.float32)
    torch.testing.assert_close(decoder[0, :, 0], -slopes[:, None] * torch.tensor([2.0, 1.0, 0.0]))
    encoder = LinearBiases(4, causal=False)(0, 3, torch.device("cpu"), torch.float32)
    torch.testing.assert_close(encoder[0, :, 1], -slopes[:, None] * torch.tensor([1.0, 0.0, 1.0]))


@pytest.mark.parametrize("implementation", ["eager", "sdpa"])
def test_alibi_attention_is_the_softmax_of_its_biases_when_scores_are_flat(implementation):
    """With query and key projections at zero every score is equal, so attention is softmax(bias) alone: each
    decoder head spreads over the past by its slope, each encoder head over both sides."""
    config = tiny_config(position_embedding_type="alibi")
    model = tiny_model(config, attn_implementation="eager")
    with torch.no_grad():
        for module in model.modules():
            if hasattr(module, "qkv_proj"):
                module.qkv_proj.weight[: config.d_model] = 0
                module.qkv_proj.bias[: 2 * config.d_model] = 0
                module.qkv_proj.weight[config.d_model : 2 * config.d_model] = 0
        source, target = random_tokens(1, 5, seed=1), random_tokens(1, 4, seed=2)
        output = model(input_ids=source, decoder_input_ids=target, output_attentions=True)
    encoder_bias = LinearBiases(4, causal=False)(0, 5, torch.device("cpu"), torch.float32)
    decoder_bias = LinearBiases(4, causal=True)(0, 4, torch.device("cpu"), torch.float32)
    decoder_bias = decoder_bias.masked_fill(torch.ones(4, 4, dtype=torch.bool).triu(1), float("-inf"))
    for weights in output.encoder_attentions:
        torch.testing.assert_close(weights, encoder_bias.softmax(-1))
    for weights in output.decoder_attentions:
        torch.testing.assert_close(weights, decoder_bias.softmax(-1))
    if implementation == "sdpa":
        sdpa = tiny_model(config, attn_implementation="sdpa")
        sdpa.load_state_dict(model.state_dict())
        with torch.no_grad():
            torch.testing.assert_close(sdpa(input_ids=source, decoder_input_ids=target).logits, output.logits)


def test_alibi_with_a_sliding_window_generates_the_same_with_and_without_cache():
    model = tiny_model(tiny_config(position_embedding_type="alibi", sliding_window=3, num_key_value_heads=2))
    source = random_tokens(2, 7, seed=3)
    kwargs = dict(input_ids=source, max_new_tokens=8, min_new_tokens=8)
    for beams in (1, 3):
        cached = model.generate(**kwargs, num_beams=beams)
        assert torch.equal(cached, model.generate(**kwargs, num_beams=beams, use_cache=False)), f"num_beams={beams}"


def test_alibi_with_a_static_cache_generates_what_the_dynamic_cache_does():
    model = tiny_model(tiny_config(position_embedding_type="alibi", num_key_value_heads=2))
    kwargs = dict(input_ids=random_tokens(2, 7, seed=3), max_new_tokens=8, min_new_tokens=8)
    for beams in (1, 3):
        dynamic = model.generate(**kwargs, num_beams=beams)
        assert torch.equal(model.generate(**kwargs, num_beams=beams, cache_implementation="static"), dynamic), beams
    # a static sliding-window cache rolls its slots over, so the keys no longer sit at their positions
    windowed = tiny_model(tiny_config(position_embedding_type="alibi", sliding_window=3))
    with pytest.raises(ValueError, match="alibi' with sliding_window needs the dynamic cache"):
        windowed.generate(**kwargs, cache_implementation="static")


def test_alibi_refuses_an_attention_that_cannot_add_a_bias():
    model = tiny_model(tiny_config(position_embedding_type="alibi"))
    model.config._attn_implementation = "flash_attention_2"
    with pytest.raises(ValueError, match="position_embedding_type='alibi' adds a bias .*='flash_attention_2' cannot"):
        model(input_ids=random_tokens(1, 4, seed=4), decoder_input_ids=random_tokens(1, 2, seed=5))
