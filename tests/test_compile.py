"""torch.compile and torch.export: whole graphs (fullgraph=True, no graph break) that compute what eager does."""

import pytest
import torch
from helpers import random_tokens, tiny_config, tiny_model

CONFIGS = {
    "post-sinusoidal-mha": dict(norm_placement="post", position_embedding_type="sinusoidal"),
    "pre-rope-gqa": dict(norm_placement="pre", position_embedding_type="rope", num_key_value_heads=2),
}


@pytest.fixture(params=list(CONFIGS), ids=list(CONFIGS))
def config(request):
    return tiny_config(**CONFIGS[request.param], dropout=0.0)


def padded_batch():
    source = random_tokens(2, 7, seed=0)
    mask = torch.ones_like(source)
    mask[1, 5:] = 0
    return source, mask


def test_a_compiled_training_step_gives_the_eager_loss_and_gradients(config):
    source, mask = padded_batch()
    target = random_tokens(2, 6, seed=1)
    results = []
    for compiled in (False, True):
        model = tiny_model(config).train()
        # aot_eager traces forward and backward as whole graphs (fullgraph fails on any break) without the minute
        # that inductor's code generation takes on the CPU
        run = torch.compile(model, fullgraph=True, backend="aot_eager") if compiled else model
        loss = run(input_ids=source, attention_mask=mask, labels=target).loss
        loss.backward()
        results.append((loss.detach(), {name: p.grad for name, p in model.named_parameters()}))
    (eager_loss, eager_grads), (compiled_loss, compiled_grads) = results
    torch.testing.assert_close(compiled_loss, eager_loss)
    for name, gradient in eager_grads.items():
        torch.testing.assert_close(compiled_grads[name], gradient, msg=name)


def test_generate_with_a_static_cache_and_a_compiled_step_gives_the_eager_tokens(config):
    model = tiny_model(config)
    source, mask = padded_batch()
    options = dict(input_ids=source, attention_mask=mask, max_new_tokens=6, min_new_tokens=6)
    expected = model.generate(**options)
    assert torch.equal(model.generate(**options, cache_implementation="static"), expected)
    model.forward = torch.compile(model.forward, fullgraph=True)  # inductor, as users compile
    assert torch.equal(model.generate(**options, cache_implementation="static"), expected)


def test_the_encoder_exports_with_torch_export(config):
    encoder = tiny_model(config).get_encoder()
    source, mask = padded_batch()
    exported = torch.export.export(encoder, args=(), kwargs={"input_ids": source, "attention_mask": mask})
    with torch.no_grad():
        expected = encoder(input_ids=source, attention_mask=mask).last_hidden_state
        actual = exported.module()(input_ids=source, attention_mask=mask).last_hidden_state
    torch.testing.assert_close(actual, expected, atol=0, rtol=0)
