"""vanilla-transformer: the encoder-decoder Transformer of "Attention Is All You Need", as a transformers model."""

from transformers import (
    AutoConfig,
    AutoModel,
    AutoModelForSeq2SeqLM,
    AutoModelForSequenceClassification,
    AutoModelForTextEncoding,
    AutoModelForTokenClassification,
)

from .configuration_vanilla_transformer import VanillaTransformerConfig
from .modeling_vanilla_transformer import (
    VanillaTransformerEncoderModel,
    VanillaTransformerForConditionalGeneration,
    VanillaTransformerForSequenceClassification,
    VanillaTransformerForTokenClassification,
    VanillaTransformerModel,
    VanillaTransformerPreTrainedModel,
    shift_tokens_right,
)

__version__ = "0.1.0"

# Registered with the Auto classes here, and for remote code: every saved folder carries our configuration and
# modeling files and an auto_map, so it loads with trust_remote_code=True where this package is not installed.
# AutoModel is the encoder-decoder; the encoder alone is AutoModelForTextEncoding, as T5EncoderModel is for T5.
AUTO_CLASSES = {
    AutoModel: VanillaTransformerModel,
    AutoModelForSeq2SeqLM: VanillaTransformerForConditionalGeneration,
    AutoModelForTextEncoding: VanillaTransformerEncoderModel,
    AutoModelForSequenceClassification: VanillaTransformerForSequenceClassification,
    AutoModelForTokenClassification: VanillaTransformerForTokenClassification,
}


def _register_with_the_auto_classes():
    AutoConfig.register(VanillaTransformerConfig.model_type, VanillaTransformerConfig, exist_ok=True)
    VanillaTransformerConfig.register_for_auto_class("AutoConfig")
    for auto_class, model_class in AUTO_CLASSES.items():
        auto_class.register(VanillaTransformerConfig, model_class, exist_ok=True)
        model_class.register_for_auto_class(auto_class.__name__)


_register_with_the_auto_classes()

__all__ = [
    "VanillaTransformerConfig",
    "VanillaTransformerEncoderModel",
    "VanillaTransformerForConditionalGeneration",
    "VanillaTransformerForSequenceClassification",
    "VanillaTransformerForTokenClassification",
    "VanillaTransformerModel",
    "VanillaTransformerPreTrainedModel",
    "shift_tokens_right",
]
