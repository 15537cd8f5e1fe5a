"""Configuration of the encoder-decoder Transformer of "Attention Is All You Need".

This file travels to the Hub as remote code: it imports only torch, transformers and
huggingface_hub (a dependency of transformers), never our own package.
"""

import dataclasses
import difflib
import warnings

from huggingface_hub.dataclasses import strict
from transformers import PreTrainedConfig

ACTIVATION_FUNCTIONS = ("relu", "gelu", "silu", "swiglu", "geglu")
NORM_PLACEMENTS = ("post", "pre")
NORM_TYPES = ("layernorm", "rmsnorm")
POSITION_EMBEDDING_TYPES = ("sinusoidal", "learned", "rope", "alibi")
# where the paper's sinusoids go in the d_model channels: "interleaved" as in the paper's formula (sin on even channels,
# cos on odd ones); "sines_then_cosines" as in Marian (all sines in the first half, all cosines in the second)
SINUSOID_LAYOUTS = ("interleaved", "sines_then_cosines")
# transformers' rope_type names where it has them ("ntk" is the static NTK-aware scaling, which it has not)
ROPE_TYPES = ("default", "linear", "ntk", "dynamic")
WEIGHT_INITS = ("xavier", "normal")
CLASSIFIER_POOLINGS = ("first", "mean")
RESIDUAL_SCALINGS = ("none", "learned", "rezero")


FIELD_CHOICES = {
    "activation_function": ACTIVATION_FUNCTIONS,
    "norm_placement": NORM_PLACEMENTS,
    "norm_type": NORM_TYPES,
    "residual_scaling": RESIDUAL_SCALINGS,
    "position_embedding_type": POSITION_EMBEDDING_TYPES,
    "sinusoid_layout": SINUSOID_LAYOUTS,
    "weight_init": WEIGHT_INITS,
    "classifier_pooling": CLASSIFIER_POOLINGS,
}
POSITIVE_INTEGER = "a positive integer"
PROBABILITY = "in [0, 1)"
BOOLEAN = "True or False"
TARGET_TOKEN_ID = "a token id of the target vocabulary (below decoder_vocab_size)"
# What each field allows, in words: the validators' error messages say it, and the reference documentation prints it,
# so that the two cannot disagree. A choice field's text begins with its choices.
ALLOWED_VALUES = {
    "vocab_size": POSITIVE_INTEGER,
    "decoder_vocab_size": "None or a positive integer (None: vocab_size); a size other than vocab_size needs "
    "share_encoder_decoder_embeddings=False",
    "d_model": f"{POSITIVE_INTEGER} that the heads of each stack divide",
    "encoder_layers": POSITIVE_INTEGER,
    "decoder_layers": POSITIVE_INTEGER,
    "encoder_attention_heads": f"{POSITIVE_INTEGER} that divides d_model (under rope, into an even head size)",
    "decoder_attention_heads": f"{POSITIVE_INTEGER} that divides d_model (under rope, into an even head size)",
    "num_key_value_heads": "None or a positive divisor of the query heads of each stack (1: multi-query attention, "
    "another divisor: grouped-query attention)",
    "encoder_ffn_dim": POSITIVE_INTEGER,
    "decoder_ffn_dim": POSITIVE_INTEGER,
    "activation_function": ", ".join(ACTIVATION_FUNCTIONS),
    "dropout": PROBABILITY,
    "attention_dropout": PROBABILITY,
    "activation_dropout": PROBABILITY,
    "drop_path_rate": PROBABILITY,
    "norm_placement": ", ".join(NORM_PLACEMENTS),
    "norm_type": ", ".join(NORM_TYPES),
    "residual_scaling": ", ".join(RESIDUAL_SCALINGS),
    "layer_norm_eps": "positive (a number above 0)",
    "position_embedding_type": f"{', '.join(POSITION_EMBEDDING_TYPES)} (rope needs an even head size, d_model / heads)",
    "sinusoid_layout": f"{', '.join(SINUSOID_LAYOUTS)} (anything but interleaved only with sinusoidal positions)",
    "max_position_embeddings": POSITIVE_INTEGER,
    "rope_parameters": f"None, or a dict of rope_type ({', '.join(ROPE_TYPES)}), rope_theta (a positive number) and, "
    "for a rope_type other than default, factor (a number >= 1); rotary positions need the dict, a rope_type other "
    "than default needs rotary positions",
    "scale_embedding": BOOLEAN,
    "share_encoder_decoder_embeddings": BOOLEAN,
    "tie_word_embeddings": BOOLEAN,
    "final_logits_bias": BOOLEAN,
    "sliding_window": "None or a positive integer",
    "label_smoothing": "in [0, 1]",
    "loss_blocks": "0 (the unfused loss) or a positive integer",
    "weight_init": ", ".join(WEIGHT_INITS),
    "init_std": "positive (a number above 0)",
    "classifier_pooling": ", ".join(CLASSIFIER_POOLINGS),
    "classifier_dropout": f"None (use dropout) or {PROBABILITY}",
    "use_cache": BOOLEAN,
    "is_encoder_decoder": BOOLEAN,
    "pad_token_id": "None or a token id of the vocabulary (below vocab_size and decoder_vocab_size)",
    "bos_token_id": f"None or {TARGET_TOKEN_ID}",
    "eos_token_id": f"None, {TARGET_TOKEN_ID}, or a list of them",
    "decoder_start_token_id": f"None or {TARGET_TOKEN_ID}",
    # transformers' own fields (PreTrainedConfig), which transformers checks
    "transformers_version": "None or a version string",
    "architectures": "None or a list of model class names",
    "output_hidden_states": BOOLEAN,
    "return_dict": BOOLEAN,
    "dtype": "None, a torch.dtype or its name (float32, bfloat16, float16)",
    "chunk_size_feed_forward": "0 or a positive integer",
    "id2label": "None or a dict from label index to label name",
    "label2id": "None or a dict from label name to label index",
    "problem_type": "None, regression, single_label_classification, multi_label_classification",
}


def _invalid(field: str, value, reason: str = "", context: str = "") -> ValueError:
    """The error of a field's value, which states what the field allows (ALLOWED_VALUES). `reason`, before it: why
    the value fails where the allowed values alone do not say; `context`, after it: the values of other fields that
    the value fails against."""
    allowed = ALLOWED_VALUES[field]
    if reason:
        explained = f"{reason}; allowed: {allowed}"
    else:
        explained = f"allowed values are {allowed}" if field in FIELD_CHOICES else f"must be {allowed}"
    given = f"; given {context}" if context else ""
    return ValueError(f"VanillaTransformerConfig.{field}={value!r} is invalid: {explained}{given}.")


@strict
class VanillaTransformerConfig(PreTrainedConfig):
    r"""
    The switches of the encoder-decoder Transformer. Defaults are the base model of Vaswani et al. (2017), but for
    label_smoothing: 0, so that `loss` is the plain cross-entropy that transformers' tools expect (the paper
    trained with 0.1). The arguments from transformers_version on are transformers' own (`PreTrainedConfig`'s), as
    this model uses them. What each field allows is `ALLOWED_VALUES`, which the errors of a bad value state.

    Args:
        vocab_size: size of the (joint source/target) vocabulary; with decoder_vocab_size, the source vocabulary.
        decoder_vocab_size: rows of the decoder's embedding and of the generator; None (one vocabulary for both
            languages) becomes vocab_size. Another size is a separate target vocabulary (Marian's separate
            vocabularies), which needs share_encoder_decoder_embeddings=False.
        d_model: width of every sublayer's input and output.
        encoder_layers / decoder_layers: N, the number of layers in each stack.
        encoder_attention_heads / decoder_attention_heads: h, the number of query heads.
        num_key_value_heads: heads of keys and values; one per query head is multi-head attention, 1 is
            multi-query attention, any other divisor of the query heads is grouped-query attention. None means
            multi-head and becomes the number of heads when both stacks have the same (transformers reads this
            field for cache shapes, as Llama's); with different head counts it stays None, each stack multi-head.
        encoder_ffn_dim / decoder_ffn_dim: inner width d_ff of the position-wise feed-forward network.
        activation_function: relu (the paper), gelu, silu, or the gated swiglu / geglu.
        dropout: P_drop applied to each sublayer output and to the embedding sums.
        attention_dropout: dropout on the attention probabilities.
        activation_dropout: dropout inside the feed-forward network, after the activation.
        drop_path_rate: probability of skipping a whole residual branch per example (stochastic depth).
        norm_placement: "post" is LayerNorm(x + Sublayer(x)) as in the paper; "pre" is x + Sublayer(Norm(x))
            with a final norm after each stack.
        norm_type: "layernorm" or "rmsnorm".
        residual_scaling: "none" is x + Sublayer(x) as in the paper; "learned" is x + gamma * Sublayer(x) with a
            learnable scalar gamma per sublayer starting at 1; "rezero" starts gamma at 0 (Bachlechner et al., 2020),
            so that every layer starts as the identity of its residual stream.
        layer_norm_eps: epsilon of the norms.
        position_embedding_type: "sinusoidal" (computed for any length), "learned" (a table of
            max_position_embeddings rows), "rope" (rotary, applied to queries and keys of self-attention) or "alibi"
            (a bias on self-attention scores, minus a per-head slope times the distance; Press et al., 2022).
        sinusoid_layout: where sinusoidal positions put their sines and cosines: "interleaved" (the paper: sin on even
            channels, cos on odd ones) or "sines_then_cosines" (Marian: all sines first, then all cosines).
        max_position_embeddings: rows of the learned position table (a longer input is an error); under rope, the
            length trained on, beyond which "dynamic" scaling starts.
        rope_parameters: transformers' RoPE dict: {"rope_type": default | linear | ntk | dynamic, "rope_theta": base
            of the rotary frequencies (10000), "factor": how many times longer than trained the inputs may be}; linear
            divides positions by factor, ntk raises the base by factor^(d/(d-2)), dynamic does so by what the current
            length needs. A legacy rope_theta or rope_scaling keyword is read into it.
        scale_embedding: multiply token embeddings by sqrt(d_model).
        share_encoder_decoder_embeddings: one embedding matrix for source and target tokens.
        tie_word_embeddings: the generator reuses the (decoder) embedding matrix.
        final_logits_bias: add a bias vector to the generator's logits (Marian's final_logits_bias, a buffer kept in
            the weights file and not trained, as in Marian).
        sliding_window: None, or the width of a local self-attention window.
        label_smoothing: epsilon_ls of the model's cross-entropy loss.
        loss_blocks: a training forward computes the generator and the loss together in this many blocks of the
            target tokens, each block's gradient written before the next block's logits exist, so that no (tokens x
            vocabulary) float32 tensor outlives its block, and returns no logits; 0 makes the whole logits, then the
            loss from them (the unfused path). How the loss is computed, not what: no weight depends on it.
        weight_init: "xavier" (the reference implementations of the paper, tensor2tensor and fairseq): Glorot
            uniform linear layers and N(0, d_model^-1/2) embeddings when they are scaled by sqrt(d_model);
            "normal" (BART, Marian): every linear layer and embedding N(0, init_std).
        init_std: standard deviation of "normal" initialisation, and of unscaled embeddings under "xavier".
        classifier_pooling: how the encoder-only sequence classifier sums up a sentence: "first", the vector of its
            first (non-padded) token; "mean", the mean over its non-padded tokens.
        classifier_dropout: dropout before the classifiers' linear layer; None means `dropout`.
        use_cache: generate() keeps the keys and values of the tokens already decoded (the cache) instead of
            computing them again at every step; a training forward never caches.
        is_encoder_decoder: what transformers' generation and Trainer take the model for: an encoder-decoder (this
            model always is one).
        pad_token_id: the padding token: the row of the embeddings that stays zero, and what shifted labels' -100
            become in the decoder's input.
        bos_token_id: the tokenizer's beginning-of-sentence token, <s>.
        eos_token_id: the end-of-sentence token, </s> (or several), whose generation ends a translation.
        decoder_start_token_id: the token the decoder reads first, in training (labels shifted right behind it) and
            in generate(): <s>.
        transformers_version: the transformers version that saved the config (save_pretrained writes it).
        architectures: the model classes whose weights the saved folder holds (save_pretrained writes it).
        output_hidden_states: a forward also returns the hidden states of every layer.
        return_dict: a forward returns a ModelOutput; False, a plain tuple.
        dtype: the dtype of the saved weights, which from_pretrained(dtype="auto") loads them in.
        chunk_size_feed_forward: transformers' chunked feed-forward, which this model does not do: any value
            computes the same.
        id2label / label2id: the classifiers' label names by index, and indices by name (classify sets both).
        problem_type: the sequence classifier's loss: regression (mean squared error), single_label_classification
            (cross-entropy) or multi_label_classification (binary cross-entropy); None chooses from num_labels and the
            labels' dtype.
    """

    model_type = "vanilla_transformer"
    keys_to_ignore_at_inference = ["cache"]
    attribute_map = {
        "hidden_size": "d_model",
        "num_attention_heads": "encoder_attention_heads",
        "num_hidden_layers": "encoder_layers",
    }

    vocab_size: int = 37000
    decoder_vocab_size: int | None = None
    d_model: int = 512
    encoder_layers: int = 6
    decoder_layers: int = 6
    encoder_attention_heads: int = 8
    decoder_attention_heads: int = 8
    num_key_value_heads: int | None = None
    encoder_ffn_dim: int = 2048
    decoder_ffn_dim: int = 2048
    activation_function: str = "relu"
    dropout: float | int = 0.1
    attention_dropout: float | int = 0.0
    activation_dropout: float | int = 0.0
    drop_path_rate: float | int = 0.0
    norm_placement: str = "post"
    norm_type: str = "layernorm"
    residual_scaling: str = "none"
    layer_norm_eps: float | int = 1e-5
    position_embedding_type: str = "sinusoidal"
    sinusoid_layout: str = "interleaved"
    max_position_embeddings: int = 512
    rope_parameters: dict | None = None
    scale_embedding: bool = True
    share_encoder_decoder_embeddings: bool = True
    tie_word_embeddings: bool = True
    final_logits_bias: bool = False
    sliding_window: int | None = None
    label_smoothing: float | int = 0.0
    loss_blocks: int = 16
    weight_init: str = "xavier"
    init_std: float | int = 0.02
    classifier_pooling: str = "first"
    classifier_dropout: float | int | None = None
    use_cache: bool = True
    is_encoder_decoder: bool = True
    pad_token_id: int | None = 0
    bos_token_id: int | None = 1
    eos_token_id: int | list[int] | None = 2
    decoder_start_token_id: int | None = 1

    def __post_init__(self, **kwargs):
        own_fields = list(type(self).__annotations__)
        known = {field.name for field in dataclasses.fields(self)} | set(self.attribute_map)
        for name in kwargs.keys() - known:
            # transformers keeps unknown keywords as attributes; one that is a near miss of a switch is likely a typo
            # that leaves the switch at its default. A warning, not an error: transformers' testing utilities set such
            # attributes (layer_norm_epsilon) on every config, and saved folders carry them.
            near = difflib.get_close_matches(name, own_fields, n=1, cutoff=0.8)
            if near:
                given = f"{name}={kwargs[name]!r}"
                warnings.warn(
                    f"VanillaTransformerConfig has no field {given}, which is kept as an attribute and changes nothing;"
                    f" did you mean {near[0]!r}?",
                    stacklevel=3,
                )
        super().__post_init__(**kwargs)  # sets what the keywords of attribute_map name, e.g. num_attention_heads
        # as in Marian: transformers reads the decoder vocabulary from here (get_text_config(decoder=True))
        if self.decoder_vocab_size is None:
            self.decoder_vocab_size = self.vocab_size
        if self.num_key_value_heads is None and self.encoder_attention_heads == self.decoder_attention_heads:
            self.num_key_value_heads = self.decoder_attention_heads

    def __setattr__(self, key, value):
        # one vocabulary stays one when vocab_size is changed on a built config (as resize_token_embeddings does)
        if key == "vocab_size" and getattr(self, "decoder_vocab_size", None) == getattr(self, "vocab_size", None):
            super().__setattr__("decoder_vocab_size", value)
        # from_pretrained(folder, rope_parameters={"rope_type": "ntk", "factor": 4}) sets the field on the folder's
        # config: the rotation keeps the base it was trained with unless the new dict names one
        if key == "rope_parameters" and isinstance(value, dict) and "rope_theta" not in value:
            trained = getattr(self, "rope_parameters", None) or {}
            if "rope_theta" in trained:
                rope_type = value.get("rope_type", value.get("type", "default"))  # "type": the legacy name
                value = {**value, "rope_type": rope_type, "rope_theta": trained["rope_theta"]}
        super().__setattr__(key, value)

    def validate_sizes(self):
        for field in (
            "vocab_size",
            "d_model",
            "encoder_layers",
            "decoder_layers",
            "encoder_attention_heads",
            "decoder_attention_heads",
            "encoder_ffn_dim",
            "decoder_ffn_dim",
            "max_position_embeddings",
        ):
            value = getattr(self, field)
            if value < 1:
                raise _invalid(field, value)
        for field in ("encoder_attention_heads", "decoder_attention_heads"):
            heads = getattr(self, field)
            if self.d_model % heads:
                raise _invalid(field, heads, f"d_model={self.d_model} must be divisible by the number of heads")
        for field in ("init_std", "layer_norm_eps"):
            if not getattr(self, field) > 0:
                raise _invalid(field, getattr(self, field))
        if self.decoder_vocab_size is not None and self.decoder_vocab_size < 1:
            raise _invalid("decoder_vocab_size", self.decoder_vocab_size)
        if self.has_separate_target_vocabulary and self.share_encoder_decoder_embeddings:
            raise _invalid(
                "decoder_vocab_size",
                self.decoder_vocab_size,
                f"a target vocabulary of another size than vocab_size={self.vocab_size} cannot share the embedding "
                "matrix: it needs share_encoder_decoder_embeddings=False",
            )
        if self.loss_blocks < 0:
            raise _invalid("loss_blocks", self.loss_blocks)
        if self.sliding_window is not None and self.sliding_window < 1:
            raise _invalid("sliding_window", self.sliding_window)

    def validate_special_tokens(self):
        # the padding id is the padding row of both embeddings; the others are ids the decoder reads or writes
        both = min(self.vocab_size, self.target_vocab_size)
        for field in ("pad_token_id", "bos_token_id", "eos_token_id", "decoder_start_token_id"):
            size = both if field == "pad_token_id" else self.target_vocab_size
            value = getattr(self, field)
            for token_id in value if isinstance(value, list) else [value]:
                if token_id is not None and not 0 <= token_id < size:
                    raise _invalid(field, value, f"must be a token id of the vocabulary, in [0, {size})")

    def validate_key_value_heads(self):
        if self.num_key_value_heads is None:
            return
        for field in ("encoder_attention_heads", "decoder_attention_heads"):
            heads = getattr(self, field)
            if self.num_key_value_heads < 1 or heads % self.num_key_value_heads:
                raise _invalid("num_key_value_heads", self.num_key_value_heads, context=f"{field}={heads}")

    def validate_choices(self):
        for field, allowed in FIELD_CHOICES.items():
            value = getattr(self, field)
            if value not in allowed:
                raise _invalid(field, value)

    def validate_sinusoid_layout(self):
        if self.sinusoid_layout != "interleaved" and self.position_embedding_type != "sinusoidal":
            raise _invalid(
                "sinusoid_layout",
                self.sinusoid_layout,
                f"lays out sinusoidal positions, which position_embedding_type={self.position_embedding_type!r} "
                "does not use; leave it 'interleaved'",
            )

    def validate_rope(self):
        """Our own, instead of transformers' (which knows no "ntk" and warns where a switch should raise)."""
        if self.position_embedding_type == "rope":
            for field in ("encoder_attention_heads", "decoder_attention_heads"):
                head_dim = self.d_model // getattr(self, field)
                if head_dim % 2:
                    raise _invalid(
                        "position_embedding_type",
                        "rope",
                        f"rotary needs an even head size, d_model / {field} = {head_dim}",
                    )
        if self.rope_parameters is None and self.position_embedding_type == "rope":
            raise _invalid("rope_parameters", None, "rotary positions need the dict, at least {'rope_type': 'default'}")
        parameters = self.rope_parameters or {}
        rope_type = parameters.get("rope_type", "default")
        if parameters.get("type", rope_type) != rope_type:
            raise _invalid("rope_parameters", parameters, "'type' (the legacy name of rope_type) contradicts rope_type")
        if rope_type not in ROPE_TYPES:
            raise _invalid("rope_parameters", parameters, f"rope_type must be one of {', '.join(ROPE_TYPES)}")
        # "type" is the legacy name of rope_type, which transformers copies over
        known = {"rope_type", "type", "rope_theta"} | ({"factor"} if rope_type != "default" else set())
        for key in sorted(parameters.keys() - known):
            unknown = f"{key!r} is no key of rope_type {rope_type!r}; its keys are {sorted(known)}"
            raise _invalid("rope_parameters", parameters, unknown)
        theta = parameters.get("rope_theta", 1)
        if isinstance(theta, bool) or not isinstance(theta, (int, float)) or not theta > 0:
            raise _invalid("rope_parameters", parameters, "rope_theta must be a positive number")
        if rope_type == "default":
            return
        if self.position_embedding_type != "rope":
            raise _invalid(
                "rope_parameters",
                parameters,
                f"rope_type {rope_type!r} scales rotary positions, which "
                f"position_embedding_type={self.position_embedding_type!r} does not use",
            )
        factor = parameters.get("factor")
        if isinstance(factor, bool) or not isinstance(factor, (int, float)) or not factor >= 1:
            raise _invalid("rope_parameters", parameters, f"rope_type {rope_type!r} needs a number factor >= 1")

    def validate_probabilities(self):
        for field in ("dropout", "attention_dropout", "activation_dropout", "drop_path_rate"):
            value = getattr(self, field)
            if not 0.0 <= value < 1.0:
                raise _invalid(field, value)
        if self.classifier_dropout is not None and not 0.0 <= self.classifier_dropout < 1.0:
            raise _invalid("classifier_dropout", self.classifier_dropout)
        if not 0.0 <= self.label_smoothing <= 1.0:
            raise _invalid("label_smoothing", self.label_smoothing)

    @property
    def target_vocab_size(self) -> int:
        """Rows of the decoder's embedding and of the generator: the target vocabulary."""
        return self.decoder_vocab_size if self.decoder_vocab_size is not None else self.vocab_size

    @property
    def has_separate_target_vocabulary(self) -> bool:
        return self.target_vocab_size != self.vocab_size

    def kv_heads(self, attention_heads: int) -> int:
        """Key/value heads used beside `attention_heads` query heads."""
        return self.num_key_value_heads or attention_heads


__all__ = ["VanillaTransformerConfig"]
