"""Half precision on the CPU: eager and sdpa attention agree in bfloat16 and float16 within a stated tolerance."""

import copy

import pytest
import torch
from helpers import SWITCHES, config_for, random_tokens, switch_id, tiny_model

# Two implementations that round differently may differ by a few units of the dtype's epsilon at the logits' scale;
# measured on these models: at most 1.5 (bfloat16, 0.048 on logits up to 4.2) and 1.2 (float16, 0.0049).
TOLERANCE_IN_EPSILONS = 4


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bf16", "fp16"])
@pytest.mark.parametrize("switches", SWITCHES, ids=[switch_id(s) for s in SWITCHES])
def test_eager_and_sdpa_agree_in_half_precision(switches, dtype):
    config = config_for(switches)
    sdpa = tiny_model(copy.deepcopy(config), attn_implementation="sdpa").to(dtype)
    eager = tiny_model(copy.deepcopy(config), attn_implementation="eager").to(dtype)
    eager.load_state_dict(sdpa.state_dict())
    source, target = random_tokens(3, 9, seed=0), random_tokens(3, 7, seed=1)
    mask = torch.ones_like(source)
    mask[0, 6:] = 0
    with torch.no_grad():
        expected = eager(input_ids=source, attention_mask=mask, decoder_input_ids=target).logits.float()
        actual = sdpa(input_ids=source, attention_mask=mask, decoder_input_ids=target).logits.float()
    assert actual.dtype == expected.dtype and torch.isfinite(actual).all()
    tolerance = TOLERANCE_IN_EPSILONS * torch.finfo(dtype).eps * expected.abs().max().item()
    torch.testing.assert_close(actual, expected, atol=tolerance, rtol=0)
