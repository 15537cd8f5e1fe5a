"""The CPU dropout and the one-pass label-smoothed loss behave exactly like the torch functions they replace."""

import pytest
import torch
from torch import nn

from vanilla_transformer.dropout import FastCpuDropout
from vanilla_transformer.loss import label_smoothed_cross_entropy


@pytest.mark.parametrize("rate", [0.1, 0.2, 0.5])
def test_dropout_keeps_each_element_with_probability_one_minus_rate_and_rescales(rate):
    torch.manual_seed(0)
    inputs = torch.rand(256, 1024) + 1.0
    outputs = FastCpuDropout(rate)(inputs)
    kept = outputs != 0
    # 262,144 draws: the standard error of the kept fraction is below 0.001
    assert abs(kept.float().mean().item() - (1 - rate)) < 0.005
    # each of the four 16-bit draws cut from one 64-bit word is uniform (the word's sign bit included)
    for offset in range(4):
        assert abs(kept.flatten()[offset::4].float().mean().item() - (1 - rate)) < 0.01
    dropped = round(rate * 65536)
    torch.testing.assert_close(outputs[kept], inputs[kept] * 65536 / (65536 - dropped))


def test_dropout_gradient_uses_the_forward_mask():
    torch.manual_seed(1)
    inputs = (torch.rand(64, 33) + 0.5).requires_grad_()
    outputs = FastCpuDropout(0.3)(inputs)
    outputs.backward(torch.ones_like(outputs))
    torch.testing.assert_close(inputs.grad, outputs.detach() / inputs.detach())


def test_dropout_is_seeded_and_differs_between_calls():
    layer, inputs = FastCpuDropout(0.2), torch.ones(40, 50)
    torch.manual_seed(7)
    first, second = layer(inputs), layer(inputs)
    torch.manual_seed(7)
    assert torch.equal(layer(inputs), first)
    assert not torch.equal(first, second)


def test_dropout_is_the_identity_in_eval_mode_and_without_rate():
    inputs = torch.randn(8, 9)
    assert torch.equal(FastCpuDropout(0.5).eval()(inputs), inputs)
    assert torch.equal(FastCpuDropout(0.0)(inputs), inputs)
    assert torch.equal(FastCpuDropout(1.0)(inputs), torch.zeros_like(inputs))


def test_dropout_inplace_writes_into_its_input():
    inputs = torch.ones(10, 12)
    outputs = FastCpuDropout(0.5, inplace=True)(inputs)
    assert outputs.data_ptr() == inputs.data_ptr() and (inputs == 0).any()


@pytest.mark.parametrize("smoothing", [0.0, 0.1, 0.3])
def test_label_smoothed_loss_and_gradient_equal_torch_cross_entropy(smoothing):
    torch.manual_seed(0)
    logits = torch.randn(60, 37, dtype=torch.float64)
    labels = torch.randint(0, 37, (60,))
    labels[::5] = -100
    ours_input, torch_input = logits.clone().requires_grad_(), logits.clone().requires_grad_()
    ours = label_smoothed_cross_entropy(ours_input, labels, smoothing)
    reference = nn.functional.cross_entropy(
        torch_input, labels, ignore_index=-100, reduction="sum", label_smoothing=smoothing
    )
    torch.testing.assert_close(ours, reference)
    # an upstream factor (the division by the token count) scales the gradient
    (ours / 7).backward()
    (reference / 7).backward()
    torch.testing.assert_close(ours_input.grad, torch_input.grad)
    assert ours_input.grad[::5].abs().sum() == 0


def test_label_smoothed_loss_without_gradient_and_with_every_token_ignored():
    logits = torch.randn(4, 11)
    loss = label_smoothed_cross_entropy(logits, torch.tensor([1, 2, 3, 4]), 0.1)
    expected = nn.functional.cross_entropy(logits, torch.tensor([1, 2, 3, 4]), reduction="sum", label_smoothing=0.1)
    torch.testing.assert_close(loss, expected)
    assert label_smoothed_cross_entropy(logits, torch.full((4,), -100), 0.1).item() == 0.0
