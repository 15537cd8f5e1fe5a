"""transformers' common model tests (ModelTesterMixin, GenerationTesterMixin, ConfigTester) run on our model.

The mixins come from the source distribution of the installed transformers, downloaded once and cached by
`transformers_suite.sdist` (the wheel does not ship them); the whole module skips, with the reason, where they
cannot be had. Three configurations, each with both model classes: the paper's (Post-LN, sinusoidal positions,
multi-head attention), Pre-LN + rotary + grouped-query attention, and Pre-LN + learned positions + RMSNorm + SwiGLU.
"""

import unittest

import pytest
from transformers.models.auto import modeling_auto
from transformers_suite.model_tester import VanillaTransformerModelTester
from transformers_suite.sdist import MixinsUnavailable, load_transformers_tests

from vanilla_transformer import (
    VanillaTransformerConfig,
    VanillaTransformerForConditionalGeneration,
    VanillaTransformerModel,
)

try:
    HF_TESTS = load_transformers_tests()
except MixinsUnavailable as error:
    pytest.skip(f"transformers' common test mixins are unavailable: {error}", allow_module_level=True)

ModelTesterMixin = HF_TESTS.modeling_common.ModelTesterMixin
GenerationTesterMixin = HF_TESTS.generation_utils.GenerationTesterMixin
ConfigTester = HF_TESTS.configuration_common.ConfigTester

MODEL_TYPE = VanillaTransformerConfig.model_type
# The mixins look classes up by name in static maps that AutoModel.register() does not touch.
NAME_MAPS = (
    (modeling_auto.MODEL_MAPPING_NAMES, VanillaTransformerModel.__name__),
    (modeling_auto.MODEL_FOR_SEQ_TO_SEQ_CAUSAL_LM_MAPPING_NAMES, VanillaTransformerForConditionalGeneration.__name__),
)


def setup_module(module):
    for names, class_name in NAME_MAPS:
        names[MODEL_TYPE] = class_name


def teardown_module(module):
    for names, _ in NAME_MAPS:
        names.pop(MODEL_TYPE, None)


class CommonTests(ModelTesterMixin, GenerationTesterMixin):
    """Shared by the three configurations; each subclass names its switches."""

    all_model_classes = (VanillaTransformerModel, VanillaTransformerForConditionalGeneration)
    is_encoder_decoder = True
    # test_can_init_all_missing_weights dates models by a "# Copyright YYYY" line, which our modeling file lacks
    test_can_init_all_missing_weights_before_2023 = True
    switches: dict = {}

    def setUp(self):
        self.model_tester = VanillaTransformerModelTester(self, **self.switches)
        self.config_tester = ConfigTester(
            self, config_class=VanillaTransformerConfig, d_model=32, encoder_attention_heads=4, **self.switches
        )

    def test_config(self):
        self.config_tester.run_common_tests()

    # transformers' test sets rope_parameters on config.get_text_config(decoder=True), which for an encoder-decoder
    # config is a copy: the models it builds never see the scaling. test_positions.py checks ours instead (against
    # transformers' ROPE_INIT_FUNCTIONS; dynamic unchanged up to the trained length; NTK on 4x longer inputs).
    ROPE_SCALING_SKIP = "the mixin scales a copy of an encoder-decoder config; tests/test_positions.py covers it"

    def test_model_rope_scaling_from_config_0_linear(self):
        self.skipTest(self.ROPE_SCALING_SKIP)

    def test_model_rope_scaling_from_config_1_dynamic(self):
        self.skipTest(self.ROPE_SCALING_SKIP)

    def test_model_rope_scaling_from_config_2_yarn(self):
        self.skipTest(self.ROPE_SCALING_SKIP)


class PostLNSinusoidalMultiHeadTest(CommonTests, unittest.TestCase):
    switches = {"norm_placement": "post", "position_embedding_type": "sinusoidal", "num_key_value_heads": None}


class PreLNRotaryGroupedQueryTest(CommonTests, unittest.TestCase):
    switches = {"norm_placement": "pre", "position_embedding_type": "rope", "num_key_value_heads": 2}


class PreLNLearnedRMSNormSwiGLUTest(CommonTests, unittest.TestCase):
    switches = {
        "norm_placement": "pre",
        "position_embedding_type": "learned",
        "norm_type": "rmsnorm",
        "activation_function": "swiglu",
    }
