"""Learnable residual scaling, x + gamma * Sublayer(x): gamma starts at 1 ("learned", the paper's model until it
learns otherwise) or at 0 ("rezero", every layer the identity of its residual stream), and it learns."""

import pytest
import torch
from helpers import random_tokens, tiny_config

from vanilla_transformer import VanillaTransformerForConditionalGeneration

SOURCE, TARGET = random_tokens(2, 6, seed=0), random_tokens(2, 5, seed=1)
SUBLAYERS = ("self_attn.", "cross_attn.", "feed_forward.")


def build(scaling: str, placement: str = "post") -> VanillaTransformerForConditionalGeneration:
    torch.manual_seed(0)
    config = tiny_config(residual_scaling=scaling, norm_placement=placement)
    return VanillaTransformerForConditionalGeneration._from_config(config).eval()


def logits(model) -> torch.Tensor:
    with torch.no_grad():
        return model(input_ids=SOURCE, decoder_input_ids=TARGET).logits


def scramble_sublayers(model) -> None:
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if any(part in name for part in SUBLAYERS):
                parameter.normal_()


@pytest.mark.parametrize("placement", ["post", "pre"])
def test_rezero_starts_every_layer_as_the_identity_so_the_sublayers_weights_do_not_matter(placement):
    rezero, learned = build("rezero", placement), build("learned", placement)
    before_rezero, before_learned = logits(rezero), logits(learned)
    scramble_sublayers(rezero)
    scramble_sublayers(learned)
    torch.testing.assert_close(logits(rezero), before_rezero)
    assert not torch.allclose(logits(learned), before_learned, atol=1e-3)  # the check above can fail


def test_learned_scaling_starts_at_one_and_is_then_the_papers_model():
    plain, learned = build("none"), build("learned")
    scales = {name: p for name, p in learned.named_parameters() if name.endswith("residual.scale")}
    # 2 encoder layers x 2 sublayers + 2 decoder layers x 3 sublayers
    assert len(scales) == 10 and all(p.item() == 1.0 for p in scales.values())
    assert not any(name.endswith("residual.scale") for name, _ in plain.named_parameters())
    missing, unexpected = learned.load_state_dict(plain.state_dict(), strict=False)
    assert sorted(missing) == sorted(scales) and not unexpected
    torch.testing.assert_close(logits(learned), logits(plain))


def test_gamma_learns_and_rezero_sublayers_get_their_signal_through_it():
    model = build("rezero").train()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    labels = random_tokens(2, 5, seed=2)
    scales = {name: p for name, p in model.named_parameters() if name.endswith("residual.scale")}
    encoder_layer = model.model.encoder.layers[0]
    encoder_weights = [
        p
        for module in (encoder_layer.self_attn, encoder_layer.feed_forward)
        for p in module.parameters()
        if p.dim() == 2
    ]
    for step in range(3):
        optimizer.zero_grad()
        model(input_ids=SOURCE, labels=labels).loss.backward()
        if step == 0:
            # at zero, gamma holds the sublayers' gradient back: only the decoder's gammas learn at first (the
            # encoder is reached through cross-attention, whose gamma is zero too)
            assert all(scales[n].grad.abs() > 0 for n in scales if ".decoder." in f".{n}")
            assert all(p.grad.abs().sum() == 0 for p in encoder_weights)
        optimizer.step()
    # the gammas moved off zero, and the signal reaches the encoder's sublayers through them
    assert all(p.item() != 0.0 for p in scales.values())
    assert all(p.grad.abs().sum() > 0 for p in encoder_weights)


def test_scales_survive_a_save_and_load(tmp_path):
    model = build("rezero")
    with torch.no_grad():
        model.model.decoder.layers[1].feed_forward_residual.scale.fill_(0.25)
    model.save_pretrained(tmp_path)
    loaded = VanillaTransformerForConditionalGeneration.from_pretrained(tmp_path).eval()
    assert loaded.model.decoder.layers[1].feed_forward_residual.scale.item() == 0.25
    torch.testing.assert_close(logits(loaded), logits(model))
