"""Conventions that transformers and the libraries around it rely on."""

import pytest
import torch
from helpers import VOCAB, random_tokens, tiny_config, tiny_model
from transformers.modeling_outputs import BaseModelOutputWithPastAndCrossAttentions

from vanilla_transformer import VanillaTransformerConfig


@pytest.mark.parametrize("bare", [False, True], ids=["with_generator", "bare"])
def test_return_dict_false_returns_the_tuple_of_the_output(bare):
    model = tiny_model(tiny_config())
    model = model.model if bare else model
    inputs = {"input_ids": random_tokens(2, 6, seed=0), "decoder_input_ids": random_tokens(2, 4, seed=1)}
    with torch.no_grad():
        output = model(**inputs)
        as_tuple = model(**inputs, return_dict=False)
    assert isinstance(as_tuple, tuple) and len(as_tuple) == len(output.to_tuple())
    for expected, actual in zip(output.to_tuple(), as_tuple, strict=True):
        if torch.is_tensor(expected):
            assert torch.equal(expected, actual)


def test_num_key_value_heads_is_a_number_for_multi_head_attention():
    assert VanillaTransformerConfig().num_key_value_heads == 8
    assert tiny_config().num_key_value_heads == 4
    assert tiny_config(num_key_value_heads=2).num_key_value_heads == 2
    # with different head counts in the two stacks, multi-head attention has no single number
    unequal = tiny_config(encoder_attention_heads=4, decoder_attention_heads=2)
    assert unequal.num_key_value_heads is None
    assert (unequal.kv_heads(4), unequal.kv_heads(2)) == (4, 2)


def test_the_decoder_returns_a_model_output_with_its_cache():
    model = tiny_model(tiny_config())
    source = random_tokens(2, 6, seed=0)
    with torch.no_grad():
        encoded = model.model.encoder(input_ids=source).last_hidden_state
        output = model.model.decoder(
            input_ids=random_tokens(2, 3, seed=1), encoder_hidden_states=encoded, use_cache=True
        )
    assert isinstance(output, BaseModelOutputWithPastAndCrossAttentions)
    assert output.last_hidden_state.shape == (2, 3, 16) and output.cache.get_seq_length() == 3


def test_the_old_cache_keyword_still_works_with_a_deprecation_warning():
    model = tiny_model(tiny_config())
    source, target = random_tokens(1, 5, seed=0), random_tokens(1, 4, seed=1)
    with torch.no_grad():
        first = model(input_ids=source, decoder_input_ids=target[:, :3], use_cache=True)
        expected = model(input_ids=source, decoder_input_ids=target[:, 3:], cache=first.cache).logits
        first = model(input_ids=source, decoder_input_ids=target[:, :3], use_cache=True)
        with pytest.warns(FutureWarning, match="past_key_values"):
            actual = model(input_ids=source, decoder_input_ids=target[:, 3:], past_key_values=first.cache).logits
    assert torch.equal(actual, expected)


@pytest.mark.parametrize(
    ("share", "tie"), [(True, True), (False, True), (False, False)], ids=["shared-tied", "unshared-tied", "untied"]
)
def test_resize_token_embeddings_keeps_the_generator_tied_and_the_embedding_shared(share, tie):
    model = tiny_model(tiny_config(share_encoder_decoder_embeddings=share, tie_word_embeddings=tie))
    old = {name: tensor.clone() for name, tensor in model.state_dict().items()}
    model.resize_token_embeddings(VOCAB + 8)
    encoder, decoder = model.model.encoder.embed_tokens, model.model.decoder.embed_tokens
    assert model.config.vocab_size == VOCAB + 8
    assert encoder.num_embeddings == decoder.num_embeddings == model.lm_head.out_features == VOCAB + 8
    assert (encoder is decoder is getattr(model.model, "shared", None)) is share
    assert (model.lm_head.weight is decoder.weight) is tie
    prefix = "model.shared" if share else "model.decoder.embeddings.embed_tokens"
    assert torch.equal(decoder.weight[:VOCAB], old[f"{prefix}.weight"])  # the known tokens keep their vectors
    new_ids = torch.full((1, 3), VOCAB + 7)
    with torch.no_grad():
        logits = model(input_ids=new_ids, decoder_input_ids=new_ids).logits
    assert logits.shape == (1, 3, VOCAB + 8) and torch.isfinite(logits).all()


@pytest.mark.parametrize("placement", ["post", "pre"])
def test_activation_checkpointing_gives_the_same_gradients(placement):
    config = tiny_config(norm_placement=placement, dropout=0.1, drop_path_rate=0.1, position_embedding_type="rope")
    source, target = random_tokens(2, 6, seed=0), random_tokens(2, 5, seed=1)
    gradients, layer_calls = [], []
    for checkpointing in (False, True):
        model = tiny_model(config).train()
        if checkpointing:
            model.activation_checkpointing_enable()
        calls = []
        for layer in (*model.model.encoder.layers, *model.model.decoder.layers):
            # a sublayer's hook: transformers checkpoints a layer's forward, so the layer's own hooks run once
            layer.feed_forward.register_forward_hook(lambda *_, calls=calls: calls.append(1))
        torch.manual_seed(7)  # the same dropout masks, which the recomputation must reproduce
        model(input_ids=source, labels=target).loss.backward()
        gradients.append({name: p.grad for name, p in model.named_parameters() if p.grad is not None})
        layer_calls.append(len(calls))
    assert layer_calls == [4, 8]  # with checkpointing, backward runs each of the 4 layers again
    assert gradients[0].keys() == gradients[1].keys() and len(gradients[0]) > 20
    for name, gradient in gradients[0].items():
        torch.testing.assert_close(gradients[1][name], gradient, atol=1e-6, rtol=1e-5, msg=name)


def test_labels_that_are_all_ignored_give_a_zero_loss_and_zero_gradients():
    model = tiny_model(tiny_config()).train()
    labels = torch.full((2, 4), -100)
    loss = model(input_ids=random_tokens(2, 5, seed=0), labels=labels).loss
    loss.backward()
    assert loss.item() == 0.0
    assert all(torch.isfinite(p.grad).all() and not p.grad.any() for p in model.parameters() if p.grad is not None)
