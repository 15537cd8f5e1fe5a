"""LoRA through PEFT on the attention and feed-forward projections: train, save the adapter, reload it, merge."""

import pytest
import torch
from helpers import random_tokens, tiny_config, tiny_model

from vanilla_transformer import VanillaTransformerForConditionalGeneration

peft = pytest.importorskip("peft")

# every projection of the attention (fused q/k/v of self-attention, q and fused k/v of cross-attention, output) and
# of the feed-forward network
TARGETS = ["qkv_proj", "q_proj", "kv_proj", "o_proj", "up_proj", "down_proj"]


def test_lora_trains_saves_reloads_and_merges_to_the_same_outputs(tmp_path):
    config = tiny_config(
        norm_placement="pre", position_embedding_type="rope", num_key_value_heads=2, activation_function="swiglu"
    )
    lora_config = peft.LoraConfig(r=4, lora_alpha=8, target_modules=TARGETS, task_type=peft.TaskType.SEQ_2_SEQ_LM)
    model = peft.get_peft_model(tiny_model(config), lora_config)
    trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    assert 0 < trainable < sum(p.numel() for p in model.parameters()) // 2

    source, target = random_tokens(4, 7, seed=0), random_tokens(4, 6, seed=1)
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-2)
    model.train()
    losses = []
    for _ in range(8):
        loss = model(input_ids=source, labels=target).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        losses.append(loss.item())
    assert losses[-1] < losses[0]

    model.save_pretrained(tmp_path / "adapter")
    assert (tmp_path / "adapter" / "adapter_model.safetensors").is_file()
    model.eval()
    reloaded = peft.PeftModel.from_pretrained(tiny_model(config), tmp_path / "adapter").eval()
    with torch.no_grad():
        trained = model(input_ids=source, labels=target).logits
        torch.testing.assert_close(reloaded(input_ids=source, labels=target).logits, trained, atol=0, rtol=0)
        generated = reloaded.generate(input_ids=source, max_new_tokens=5, min_new_tokens=5, num_beams=2)
        merged = reloaded.merge_and_unload()
        assert type(merged) is VanillaTransformerForConditionalGeneration
        assert not any("lora" in name for name, _ in merged.named_parameters())
        torch.testing.assert_close(merged(input_ids=source, labels=target).logits, trained, atol=1e-5, rtol=1e-5)
    assert torch.equal(merged.generate(input_ids=source, max_new_tokens=5, min_new_tokens=5, num_beams=2), generated)
