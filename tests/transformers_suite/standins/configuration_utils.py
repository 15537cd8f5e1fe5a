"""Stand-in for transformers' tests/utils/test_configuration_utils.py, absent from the source distribution.

test_configuration_common.py needs one name from it, `config_common_kwargs`: keyword arguments of
`PreTrainedConfig` set to values other than their defaults, which `ConfigTester.check_config_arguments_init`
passes to a config and reads back. This dict is ours, written from `PreTrainedConfig`'s own fields.
"""

MISSING_REASON = "tests/utils/test_configuration_utils.py is not in the transformers {version} source distribution"

config_common_kwargs = {
    "return_dict": False,
    "output_hidden_states": True,
    "dtype": "float16",  # compared with torch.float16 by the tester
    "chunk_size_feed_forward": 3,
    "is_encoder_decoder": True,
    "architectures": ["VanillaTransformerForConditionalGeneration"],
    "id2label": {0: "NEGATIVE", 1: "POSITIVE"},
    "label2id": {"NEGATIVE": 0, "POSITIVE": 1},
    "problem_type": "single_label_classification",
}
