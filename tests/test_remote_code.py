"""A saved folder loads through the Auto classes with trust_remote_code=True where our package cannot be imported."""

import json

import torch
from helpers import random_tokens, run_without_our_package, tiny_config, tiny_model

CHILD = """
    import json, sys
    import torch
    from transformers import AutoConfig, AutoModel, AutoModelForSeq2SeqLM

    folder = sys.argv[1]
    inputs = torch.load(folder + "/inputs.pt")
    config = AutoConfig.from_pretrained(folder, trust_remote_code=True)
    base = AutoModel.from_pretrained(folder, trust_remote_code=True).eval()
    model = AutoModelForSeq2SeqLM.from_pretrained(folder, trust_remote_code=True).eval()
    with torch.no_grad():
        logits = model(**inputs).logits
        hidden = base(**inputs).last_hidden_state
    generated = model.generate(input_ids=inputs["input_ids"], max_new_tokens=5, min_new_tokens=5, num_beams=2)
    torch.save({"logits": logits, "hidden": hidden, "generated": generated}, folder + "/child.pt")
    print(json.dumps({
        "config_module": type(config).__module__,
        "base_name": type(base).__name__,
        "model_module": type(model).__module__,
        "ours_imported": "vanilla_transformer" in sys.modules,
    }))
    """


def test_saved_folder_loads_without_our_package(tmp_path):
    model = tiny_model(tiny_config(norm_placement="pre", position_embedding_type="rope", num_key_value_heads=2))
    model.save_pretrained(tmp_path)
    inputs = {"input_ids": random_tokens(2, 6, seed=0), "decoder_input_ids": random_tokens(2, 4, seed=1)}
    torch.save(inputs, tmp_path / "inputs.pt")

    auto_map = json.loads((tmp_path / "config.json").read_text())["auto_map"]
    assert set(auto_map) == {"AutoConfig", "AutoModel", "AutoModelForSeq2SeqLM"}
    for code_file in ("configuration_vanilla_transformer.py", "modeling_vanilla_transformer.py", "attention.py"):
        assert (tmp_path / code_file).exists()

    result = run_without_our_package(CHILD, str(tmp_path), cwd=tmp_path)
    assert result["config_module"].startswith("transformers_modules")
    assert result["model_module"].startswith("transformers_modules")
    assert result["base_name"] == "VanillaTransformerModel" and result["ours_imported"] is False

    child = torch.load(tmp_path / "child.pt")
    with torch.no_grad():
        torch.testing.assert_close(child["logits"], model(**inputs).logits, atol=0, rtol=0)
        torch.testing.assert_close(child["hidden"], model.model(**inputs).last_hidden_state, atol=0, rtol=0)
    expected = model.generate(input_ids=inputs["input_ids"], max_new_tokens=5, min_new_tokens=5, num_beams=2)
    assert torch.equal(child["generated"], expected)
