"""Model behaviour beyond the switch matrix: errors, masks, outputs, generation internals, auto classes."""

import pytest
import torch
from helpers import BOS, EOS, PAD, VOCAB, assert_eager_and_sdpa_agree, random_tokens, tiny_config, tiny_model
from transformers import AutoModel, AutoModelForSeq2SeqLM

from vanilla_transformer import (
    VanillaTransformerForConditionalGeneration,
    VanillaTransformerModel,
    shift_tokens_right,
)


def test_auto_classes_build_our_models():
    config = tiny_config()
    assert type(AutoModel.from_config(config)) is VanillaTransformerModel
    assert type(AutoModelForSeq2SeqLM.from_config(config)) is VanillaTransformerForConditionalGeneration


def test_learned_positions_refuse_a_sequence_longer_than_the_table():
    model = tiny_model(tiny_config(position_embedding_type="learned", max_position_embeddings=8))
    model(input_ids=random_tokens(1, 8, seed=0), decoder_input_ids=random_tokens(1, 3, seed=1))
    with pytest.raises(
        ValueError,
        match=r"9 positions does not fit the learned position table of "
        r"max_position_embeddings=8",
    ):
        model(input_ids=random_tokens(1, 9, seed=0), decoder_input_ids=random_tokens(1, 3, seed=1))


def test_sinusoidal_positions_work_past_max_position_embeddings():
    model = tiny_model(tiny_config(max_position_embeddings=8))
    logits = model(input_ids=random_tokens(1, 30, seed=0), decoder_input_ids=random_tokens(1, 20, seed=1)).logits
    assert torch.isfinite(logits).all()


def test_sinusoidal_encoding_is_the_papers_interleaved_sin_cos():
    model = tiny_model(tiny_config())
    encoding = model.model.encoder.embeddings.positions(0, 50, torch.device("cpu"), torch.float32)
    position, i = 37, 3
    angle = position / 10000 ** (2 * i / 16)
    assert encoding[position, 2 * i].item() == pytest.approx(torch.tensor(angle).sin().item(), abs=1e-6)
    assert encoding[position, 2 * i + 1].item() == pytest.approx(torch.tensor(angle).cos().item(), abs=1e-6)


@pytest.mark.parametrize(
    ("inputs", "message"),
    [
        (dict(input_ids=torch.tensor([[5, 6, VOCAB]])), rf"input_ids contains id {VOCAB}, outside the vocabulary"),
        (dict(input_ids=torch.tensor([[5, -1, 7]])), r"input_ids contains id -1"),
        (dict(input_ids=torch.tensor([5, 6, 7])), r"input_ids must have shape \(batch, sequence\), got \(3,\)"),
        (
            dict(input_ids=torch.tensor([[5, 6, 7]]), attention_mask=torch.ones(1, 4)),
            r"attention_mask has shape \(1, 4\) but the tokens it masks have shape \(1, 3\)",
        ),
        (
            dict(input_ids=torch.tensor([[5, 6]]), decoder_input_ids=torch.tensor([[1, VOCAB + 3]])),
            rf"decoder_input_ids contains id {VOCAB + 3}",
        ),
        (dict(input_ids=torch.tensor([[5, 6]]), labels=torch.tensor([[7, 99]])), r"labels contains id 99"),
    ],
)
def test_bad_inputs_get_a_clear_error(inputs, message):
    model = tiny_model(tiny_config())
    inputs.setdefault("decoder_input_ids", None)
    if inputs["decoder_input_ids"] is None and "labels" not in inputs:
        inputs["decoder_input_ids"] = torch.tensor([[BOS, 5]])
    with pytest.raises(ValueError, match=message):
        model(**inputs)


def test_labels_are_shifted_into_decoder_inputs():
    labels = torch.tensor([[7, 8, EOS, -100], [9, EOS, -100, -100]])
    expected = torch.tensor([[BOS, 7, 8, EOS], [BOS, 9, EOS, PAD]])
    assert torch.equal(shift_tokens_right(labels, PAD, BOS), expected)
    model = tiny_model(tiny_config())
    assert torch.equal(model.prepare_decoder_input_ids_from_labels(labels=labels), expected)
    source = random_tokens(2, 5, seed=0)
    with torch.no_grad():
        implicit = model(input_ids=source, labels=labels).logits
        explicit = model(input_ids=source, decoder_input_ids=expected).logits
    torch.testing.assert_close(implicit, explicit)


def test_loss_is_label_smoothed_cross_entropy_over_real_tokens():
    smoothing = 0.1
    model = tiny_model(tiny_config(label_smoothing=smoothing))
    source, labels = random_tokens(2, 5, seed=0), random_tokens(2, 4, seed=1)
    labels[1, 2:] = -100
    output = model(input_ids=source, labels=labels)
    log_probs = output.logits.log_softmax(-1)
    keep = labels != -100
    nll = -log_probs.gather(-1, labels.clamp(min=0)[..., None]).squeeze(-1)[keep]
    uniform = -log_probs.mean(-1)[keep]
    expected = ((1 - smoothing) * nll + smoothing * uniform).mean()
    torch.testing.assert_close(output.loss, expected)
    # with an external token count (gradient accumulation), the sum is divided by it
    summed = model(input_ids=source, labels=labels, num_items_in_batch=torch.tensor(12)).loss
    torch.testing.assert_close(summed, expected * keep.sum() / 12)


def test_sliding_window_hides_tokens_outside_the_window():
    model = tiny_model(tiny_config(sliding_window=3))
    source, target = random_tokens(1, 10, seed=0), random_tokens(1, 8, seed=1)
    changed_source, changed_target = source.clone(), target.clone()
    changed_source[0, 0] = (source[0, 0] - 2) % 37 + 3
    changed_target[0, 0] = (target[0, 0] - 2) % 37 + 3
    with torch.no_grad():
        base = model.get_encoder()(input_ids=source).last_hidden_state
        moved = model.get_encoder()(input_ids=changed_source).last_hidden_state
        # each encoder layer widens the receptive field by window - 1 = 2: after 2 layers, positions >= 5 are blind
        assert torch.allclose(base[0, 5:], moved[0, 5:], atol=1e-6)
        assert not torch.allclose(base[0, :5], moved[0, :5], atol=1e-4)
        logits = model(input_ids=source, decoder_input_ids=target).logits
        logits_changed = model(input_ids=source, decoder_input_ids=changed_target).logits
        assert torch.allclose(logits[0, 5:], logits_changed[0, 5:], atol=1e-6)
        assert not torch.allclose(logits[0, :5], logits_changed[0, :5], atol=1e-4)


def test_sliding_window_generation_keeps_the_whole_source_in_cross_attention():
    model = tiny_model(tiny_config(sliding_window=2))
    source = random_tokens(2, 12, seed=3)
    for beams in (1, 2):
        kwargs = dict(input_ids=source, max_new_tokens=10, min_new_tokens=10, num_beams=beams)
        assert torch.equal(model.generate(**kwargs), model.generate(**kwargs, use_cache=False))


def test_sliding_window_masks_agree_between_eager_and_sdpa():
    source, target = random_tokens(2, 9, seed=0), random_tokens(2, 7, seed=1)
    mask = torch.ones_like(source)
    mask[1, 6:] = 0
    assert_eager_and_sdpa_agree(tiny_config(sliding_window=3), source, target, mask)


def test_output_attentions_and_hidden_states_from_every_stack():
    config = tiny_config(encoder_layers=2, decoder_layers=3)
    model = tiny_model(config, attn_implementation="eager")
    source, target = random_tokens(2, 6, seed=0), random_tokens(2, 4, seed=1)
    mask = torch.ones_like(source)
    mask[1, 4:] = 0
    with torch.no_grad():
        output = model(
            input_ids=source,
            attention_mask=mask,
            decoder_input_ids=target,
            output_attentions=True,
            output_hidden_states=True,
        )
    assert len(output.encoder_hidden_states) == 3 and len(output.decoder_hidden_states) == 4
    assert len(output.encoder_attentions) == 2 and len(output.decoder_attentions) == 3
    assert len(output.cross_attentions) == 3
    assert output.encoder_attentions[0].shape == (2, 4, 6, 6)
    assert output.decoder_attentions[0].shape == (2, 4, 4, 4)
    assert output.cross_attentions[0].shape == (2, 4, 4, 6)
    torch.testing.assert_close(output.encoder_hidden_states[-1], output.encoder_last_hidden_state)
    for weights in output.encoder_attentions + output.decoder_attentions + output.cross_attentions:
        torch.testing.assert_close(weights.sum(-1), torch.ones(weights.shape[:-1]))
    # padded source positions get no attention; future target positions get none either
    assert output.cross_attentions[0][1, :, :, 4:].abs().max() == 0
    assert output.encoder_attentions[0][1, :, :, 4:].abs().max() == 0
    assert torch.triu(output.decoder_attentions[0], diagonal=1).abs().max() == 0


def test_generate_runs_the_encoder_once_and_projects_cross_attention_once():
    model = tiny_model(tiny_config(decoder_layers=2))
    encoder_calls, cross_projection_calls = [], []
    model.get_encoder().register_forward_hook(lambda *args: encoder_calls.append(1))
    for layer in model.get_decoder().layers:
        layer.cross_attn.kv_proj.register_forward_hook(lambda *args: cross_projection_calls.append(1))
    model.generate(input_ids=random_tokens(2, 6, seed=0), max_new_tokens=7, min_new_tokens=7, num_beams=2)
    assert len(encoder_calls) == 1
    assert len(cross_projection_calls) == 2  # once per decoder layer, not once per step


def test_sampling_generates_and_is_reproducible_with_a_seed():
    model = tiny_model(tiny_config())
    source = random_tokens(2, 6, seed=0)
    torch.manual_seed(5)
    first = model.generate(input_ids=source, do_sample=True, top_k=10, max_new_tokens=6)
    torch.manual_seed(5)
    second = model.generate(input_ids=source, do_sample=True, top_k=10, max_new_tokens=6)
    assert torch.equal(first, second) and first.shape[0] == 2


def test_activation_checkpointing_gives_the_same_gradients():
    source, labels = random_tokens(2, 6, seed=0), random_tokens(2, 5, seed=1)
    gradients = []
    for checkpointing in (False, True):
        model = tiny_model(tiny_config()).train()
        if checkpointing:
            model.activation_checkpointing_enable()
            assert model.is_activation_checkpointing
        model(input_ids=source, labels=labels).loss.backward()
        gradients.append([p.grad.clone() for p in model.parameters()])
    for plain, checkpointed in zip(*gradients, strict=True):
        torch.testing.assert_close(checkpointed, plain)


def test_unshared_untied_embeddings_stay_separate(tmp_path):
    config = tiny_config(share_encoder_decoder_embeddings=False, tie_word_embeddings=False)
    model = tiny_model(config)
    encoder_weight = model.model.encoder.embed_tokens.weight
    decoder_weight = model.model.decoder.embed_tokens.weight
    assert encoder_weight.data_ptr() != decoder_weight.data_ptr()
    assert model.lm_head.weight.data_ptr() != decoder_weight.data_ptr()
    model.save_pretrained(tmp_path)
    loaded = VanillaTransformerForConditionalGeneration.from_pretrained(tmp_path)
    for name, tensor in model.state_dict().items():
        assert torch.equal(loaded.state_dict()[name], tensor), name


def test_unshared_but_tied_head_follows_the_decoder_embeddings():
    model = tiny_model(tiny_config(share_encoder_decoder_embeddings=False, tie_word_embeddings=True))
    assert model.lm_head.weight.data_ptr() == model.model.decoder.embed_tokens.weight.data_ptr()
    assert model.model.encoder.embed_tokens.weight.data_ptr() != model.model.decoder.embed_tokens.weight.data_ptr()


@pytest.mark.parametrize("weight_init", ["xavier", "normal"])
def test_weight_init_sets_the_spread_of_linear_layers_and_embeddings(weight_init):
    config = tiny_config(
        d_model=64, encoder_ffn_dim=256, decoder_ffn_dim=256, vocab_size=2000, init_std=0.05, weight_init=weight_init
    )
    model = tiny_model(config)
    up_proj = model.model.encoder.layers[0].feed_forward.up_proj  # weight (256, 64)
    embedding = model.model.shared.weight[PAD + 1 :]
    if weight_init == "xavier":
        # Glorot uniform: std sqrt(2 / (fan_in + fan_out)); scaled embeddings N(0, d_model^-1/2)
        expected_linear, expected_embedding = (2 / (64 + 256)) ** 0.5, 64**-0.5
    else:
        expected_linear = expected_embedding = 0.05
    assert up_proj.weight.std().item() == pytest.approx(expected_linear, rel=0.05)
    assert embedding.std().item() == pytest.approx(expected_embedding, rel=0.05)
    assert up_proj.bias.abs().max() == 0
    assert model.model.shared.weight[PAD].abs().max() == 0
