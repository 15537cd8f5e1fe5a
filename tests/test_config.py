import json

import pytest
from helpers import tiny_config
from huggingface_hub.errors import StrictDataclassError
from transformers import AutoConfig

from vanilla_transformer import VanillaTransformerConfig


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (dict(d_model=18), r"encoder_attention_heads=4 is invalid: d_model=18 must be divisible"),
        (dict(decoder_attention_heads=3, d_model=16), r"decoder_attention_heads=3 is invalid: d_model=16"),
        (dict(num_key_value_heads=3), r"num_key_value_heads=3 is invalid: must be None or a positive divisor"),
        (dict(num_key_value_heads=0), r"num_key_value_heads=0 is invalid"),
        (dict(activation_function="tanh"), r"activation_function='tanh' is invalid: allowed values are relu, gelu"),
        (dict(norm_placement="sandwich"), r"norm_placement='sandwich' is invalid: allowed values are post, pre"),
        (dict(norm_type="batchnorm"), r"norm_type='batchnorm' is invalid: allowed values are layernorm, rmsnorm"),
        (dict(position_embedding_type="alibi"), r"position_embedding_type='alibi' is invalid: allowed values"),
        (
            dict(position_embedding_type="rope", d_model=12, encoder_attention_heads=4, decoder_attention_heads=4),
            r"rotary needs an even head size, d_model / encoder_attention_heads = 3",
        ),
        (dict(dropout=1.0), r"dropout=1.0 is invalid: must be in \[0, 1\)"),
        (dict(drop_path_rate=-0.1), r"drop_path_rate=-0.1 is invalid"),
        (dict(label_smoothing=1.5), r"label_smoothing=1.5 is invalid"),
        (dict(sliding_window=0), r"sliding_window=0 is invalid"),
        (dict(weight_init="kaiming"), r"weight_init='kaiming' is invalid: allowed values are xavier, normal"),
        (dict(init_std=0.0), r"init_std=0.0 is invalid: must be positive"),
        (dict(vocab_size=0), r"vocab_size=0 is invalid: must be a positive integer"),
        (dict(d_model="512"), r"d_model"),
    ],
)
def test_invalid_switch_names_field_value_and_allowed(overrides, message):
    with pytest.raises(StrictDataclassError, match=message):
        tiny_config(**overrides)


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


@pytest.mark.parametrize(
    ("typo", "field"), [("d_modle", "d_model"), ("dropuot", "dropout"), ("layer_norm_epsilon", "layer_norm_eps")]
)
def test_a_misspelled_switch_warns_naming_the_field_meant(typo, field, tmp_path):
    with pytest.warns(UserWarning, match=rf"no field {typo}=0.1, .*changes nothing; did you mean '{field}'"):
        config = tiny_config(**{typo: 0.1})
    assert getattr(config, field) == getattr(tiny_config(), field)
    # the same typo in a saved config.json
    tiny_config().save_pretrained(tmp_path)
    saved = json.loads((tmp_path / "config.json").read_text())
    (tmp_path / "config.json").write_text(json.dumps({**saved, typo: 0.1}))
    with pytest.warns(UserWarning, match=rf"did you mean '{field}'"):
        VanillaTransformerConfig.from_pretrained(tmp_path)


def test_unrelated_keywords_and_transformers_aliases_still_work(recwarn):
    config = tiny_config(my_note="kept", num_attention_heads=2, decoder_attention_heads=2)
    assert not [warning for warning in recwarn if "VanillaTransformerConfig" in str(warning.message)]
    assert config.my_note == "kept"  # transformers keeps unknown keywords as attributes
    assert config.encoder_attention_heads == 2 and config.num_key_value_heads == 2


def test_a_non_positive_layer_norm_eps_is_refused():
    with pytest.raises(StrictDataclassError, match=r"layer_norm_eps=-1.0 is invalid: must be positive"):
        tiny_config(layer_norm_eps=-1.0)
