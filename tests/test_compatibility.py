"""Folders saved by an earlier version load into today's classes: the same weights under the same names, the same
outputs. Renaming a module attribute renames its weights, and a folder would then load with random ones."""

from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file
from transformers import AutoModelForSeq2SeqLM

import vanilla_transformer

SAVED = Path(__file__).parent / "data" / "saved_before_the_layout"
FOLDERS = sorted(path.name for path in SAVED.iterdir() if path.is_dir())


def test_there_are_saved_folders_to_check():
    assert FOLDERS == ["post_learned_layernorm_mha_relu_untied", "pre_rope_rmsnorm_gqa_swiglu"]


@pytest.mark.parametrize("name", FOLDERS)
def test_a_folder_saved_before_loads_with_every_weight_and_the_same_outputs(name):
    folder = SAVED / name
    model, info = AutoModelForSeq2SeqLM.from_pretrained(folder, output_loading_info=True)
    assert isinstance(model, vanilla_transformer.VanillaTransformerForConditionalGeneration)
    assert not info["missing_keys"] and not info["unexpected_keys"] and not info["mismatched_keys"]
    expected = load_file(folder / "expected.safetensors")
    model.eval()
    with torch.no_grad():
        logits = model(input_ids=expected["input_ids"], decoder_input_ids=expected["decoder_input_ids"]).logits
    torch.testing.assert_close(logits, expected["logits"], atol=1e-6, rtol=1e-5)
    generated = model.generate(input_ids=expected["input_ids"], max_new_tokens=6, min_new_tokens=6, num_beams=2)
    assert torch.equal(generated, expected["generated"])
