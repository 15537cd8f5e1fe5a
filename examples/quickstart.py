"""Build a small Transformer, generate with it (greedy, beam, sampling), save it and load it back through the Auto
classes. Runs in seconds on a CPU with nothing downloaded."""

import tempfile

import torch
from transformers import AutoModelForSeq2SeqLM

from vanilla_transformer import VanillaTransformerConfig, VanillaTransformerForConditionalGeneration

config = VanillaTransformerConfig(
    vocab_size=1000,
    d_model=128,
    encoder_layers=2,
    decoder_layers=2,
    encoder_attention_heads=4,
    decoder_attention_heads=4,
    encoder_ffn_dim=256,
    decoder_ffn_dim=256,
    norm_placement="pre",
    position_embedding_type="rope",
    num_key_value_heads=2,
    activation_function="swiglu",
)
torch.manual_seed(0)
model = VanillaTransformerForConditionalGeneration(config).eval()
print(f"{type(model).__name__}: {sum(p.numel() for p in model.parameters()):,} parameters")

source = torch.randint(4, config.vocab_size, (2, 12))
for name, options in {"greedy": {}, "beam 4": {"num_beams": 4}, "sampling": {"do_sample": True, "top_k": 20}}.items():
    generated = model.generate(input_ids=source, max_new_tokens=10, min_new_tokens=10, **options)
    print(f"{name:>8}: {generated[0].tolist()}")

with tempfile.TemporaryDirectory() as folder:
    model.save_pretrained(folder)
    reloaded = AutoModelForSeq2SeqLM.from_pretrained(folder).eval()
    same = torch.equal(
        model.generate(input_ids=source, max_new_tokens=10), reloaded.generate(input_ids=source, max_new_tokens=10)
    )
    print(f"reloaded through AutoModelForSeq2SeqLM as {type(reloaded).__name__}; same generations: {same}")
