from helpers import tiny_config
from transformers import AutoConfig

from vanilla_transformer import VanillaTransformerConfig


def test_defaults_are_the_paper_base_model():
    config = VanillaTransformerConfig()
    assert (config.d_model, config.encoder_layers, config.decoder_layers) == (512, 6, 6)
    assert (config.encoder_attention_heads, config.encoder_ffn_dim, config.dropout) == (8, 2048, 0.1)
    assert (config.norm_placement, config.position_embedding_type, config.activation_function) == (
        "post",
        "sinusoidal",
        "relu",
    )
    assert config.scale_embedding and config.share_encoder_decoder_embeddings and config.tie_word_embeddings
    assert config.is_encoder_decoder
    # the transformers-wide names map onto ours
    assert (config.hidden_size, config.num_attention_heads, config.num_hidden_layers) == (512, 8, 6)
    assert config.kv_heads(8) == 8 and VanillaTransformerConfig(num_key_value_heads=2).kv_heads(8) == 2


def test_config_round_trips_through_json_and_auto_config(tmp_path):
    config = tiny_config(norm_placement="pre", position_embedding_type="rope", num_key_value_heads=1)
    config.save_pretrained(tmp_path)
    loaded = AutoConfig.from_pretrained(tmp_path)
    assert isinstance(loaded, VanillaTransformerConfig)
    ignored = {"_name_or_path"}
    assert {k: v for k, v in loaded.to_dict().items() if k not in ignored} == {
        k: v for k, v in config.to_dict().items() if k not in ignored
    }


def test_unrelated_keywords_and_transformers_aliases_still_work(recwarn):
    config = tiny_config(my_note="kept", num_attention_heads=2, decoder_attention_heads=2)
    assert not [warning for warning in recwarn if "VanillaTransformerConfig" in str(warning.message)]
    assert config.my_note == "kept"  # transformers keeps unknown keywords as attributes
    assert config.encoder_attention_heads == 2 and config.num_key_value_heads == 2
