"""The encoder-decoder Transformer of "Attention Is All You Need" (Vaswani et al., 2017) as a transformers model.

The paper, section by section, and where it lives:
- 3.1 Encoder and decoder stacks: `VanillaTransformerEncoder` (N x [self-attention, feed-forward]) and
  `VanillaTransformerDecoder` (N x [masked self-attention, attention over the encoder output, feed-forward]) here;
  the layers in `layers.py`; each sublayer inside an "Add & Norm", `residual.AddAndNorm`.
- 3.2 Attention: scaled dot-product and multi-head attention, `attention.py`; the decoder's mask that hides the
  future and the padding masks come from transformers' `masking_utils` (built here, in the stacks).
- 3.3 Position-wise feed-forward networks: `feed_forward.py`.
- 3.4 Embeddings and softmax: `TokenEmbedding` (token embeddings scaled by sqrt(d_model)); one matrix shared by
  both stacks (`VanillaTransformerModel.shared`); the generator, the linear map to next-token logits whose weights
  are the embedding matrix, is `VanillaTransformerForConditionalGeneration.lm_head` (the name transformers'
  weight tying and generation look for); its softmax is in the loss and in `generate()`.
- 3.5 Positional encoding: `positions.py` (sinusoidal, as in the paper).
- 5.4 Regularization: residual dropout in `residual.py` (and on the embedding sums, `TokenEmbedding`), label
  smoothing in `loss.py`.

Switches beyond the paper (`VanillaTransformerConfig`): Pre-LN; RMSNorm; learned and rotary positions; grouped- and
multi-query attention (`num_key_value_heads`); GELU, SiLU and the gated SwiGLU/GeGLU feed-forward; a sliding
attention window; stochastic depth (`drop_path_rate`); attention and activation dropout; untied or unshared
embeddings; Xavier or normal initialisation; and whatever attention kernel transformers offers (eager, sdpa, flash).

This file and its siblings travel to the Hub as remote code: they import only torch and transformers.
"""

import difflib
import inspect

import torch
from torch import nn
from transformers import GenerationMixin, PreTrainedModel
from transformers import initialization as init
from transformers.cache_utils import Cache, DynamicCache, EncoderDecoderCache
from transformers.masking_utils import create_bidirectional_mask, create_causal_mask, create_sliding_window_causal_mask
from transformers.modeling_outputs import (
    BaseModelOutput,
    BaseModelOutputWithPastAndCrossAttentions,
    Seq2SeqLMOutput,
    Seq2SeqModelOutput,
    SequenceClassifierOutput,
    TokenClassifierOutput,
)
from transformers.utils.deprecation import deprecate_kwarg
from transformers.utils.generic import TransformersKwargs, can_return_tuple

from .attention import VanillaTransformerAttention
from .configuration_vanilla_transformer import VanillaTransformerConfig
from .dropout import FastCpuDropout
from .layers import VanillaTransformerDecoderLayer, VanillaTransformerEncoderLayer
from .lexical_shortlist import LexicalShortlist, generate_with_shortlist
from .loss import generator_and_label_smoothed_cross_entropy, label_smoothed_cross_entropy
from .positions import build_absolute_positions, build_linear_biases, build_rotary, embedding_scale
from .residual import AddAndNorm, build_norm
from .weight_files import corrupt_weights_file, is_safetensors_error


def shift_tokens_right(labels: torch.Tensor, pad_token_id: int, decoder_start_token_id: int) -> torch.Tensor:
    """Teacher forcing: the decoder reads <start> y_1 ... y_{n-1} and predicts y_1 ... y_n."""
    decoder_input_ids = labels.new_zeros(labels.shape)
    decoder_input_ids[:, 1:] = labels[:, :-1].clone()
    decoder_input_ids[:, 0] = decoder_start_token_id
    # -100 marks ignored label positions; the decoder must read a real token there
    decoder_input_ids.masked_fill_(decoder_input_ids == -100, pad_token_id)
    return decoder_input_ids


def check_token_ids(token_ids: torch.Tensor, vocab_size: int, name: str, ignore_index: int | None = None) -> None:
    """Fail with the culprit named instead of an index error deep inside the embedding (or a CUDA assert).

    The shape and the dtype are checked always; the values where they are on the CPU, whose memory the host reads
    without waiting for any device. Ids on an accelerator are not read back, which would stall the host until the
    device caught up, every micro-batch: whoever moves ids there checks them on the CPU first (the training loop,
    `translate`), with `check_token_id_values`."""
    if token_ids.dim() != 2:
        raise ValueError(f"{name} must have shape (batch, sequence), got {tuple(token_ids.shape)}")
    if token_ids.dtype.is_floating_point or token_ids.dtype == torch.bool:
        raise ValueError(f"{name} must hold integer token ids, got {token_ids.dtype}")
    if not token_ids.numel():
        raise ValueError(
            f"{name} is empty, shape {tuple(token_ids.shape)}: a batch needs a sequence of a token or more"
        )
    if token_ids.device.type == "cpu" and not torch.compiler.is_compiling():
        check_token_id_values(token_ids, vocab_size, name, ignore_index)


def check_token_id_values(token_ids: torch.Tensor, vocab_size: int, name: str, ignore_index: int | None = None) -> None:
    """Every id (but `ignore_index`) in [0, vocab_size), for ids on the CPU: read with `tolist`, not `.item()`, so
    that a profile of the training step shows no synchronising op (there is no device to wait for here)."""
    if ignore_index is not None:
        token_ids = token_ids.masked_fill(token_ids == ignore_index, 0)
    low, high = (value.tolist() for value in token_ids.aminmax())
    if low < 0 or high >= vocab_size:
        bad = low if low < 0 else high
        raise ValueError(f"{name} contains id {bad}, outside the vocabulary [0, {vocab_size}).")


def check_mask(mask: torch.Tensor | None, expected: tuple[int, int], name: str) -> None:
    """A (batch, sequence) mask of the tokens' shape; a 4-D mask is transformers' own (batch, heads, query, key)."""
    if mask is not None and mask.dim() not in (2, 4):
        raise ValueError(f"{name} must have shape (batch, sequence) = {expected}, got {tuple(mask.shape)}")
    if mask is not None and mask.dim() == 2 and tuple(mask.shape) != expected:
        raise ValueError(f"{name} has shape {tuple(mask.shape)} but the tokens it masks have shape {expected}")


# the keywords that reach the stacks through `**kwargs`: transformers' own (as `TransformersKwargs` lists them) and
# those generate() passes on
PASSED_ON_KEYWORDS = frozenset(TransformersKwargs.__annotations__) | {"cache_position", "return_dict"}


def check_keywords(kwargs: dict, forward=None) -> None:
    """A misspelled keyword (`attention_maks=`) would vanish into `**kwargs` and its value be ignored. Checked by the
    model's forward, not the stacks': generate() hands the encoder every keyword it was given. The hint comes from
    the parameters of `forward`, by default the translation model's."""
    unknown = [name for name in kwargs if name not in PASSED_ON_KEYWORDS]
    if unknown:
        forward = forward or VanillaTransformerForConditionalGeneration.forward
        known = [*inspect.signature(forward).parameters, *PASSED_ON_KEYWORDS]
        close = difflib.get_close_matches(unknown[0], known, n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        raise TypeError(f"forward() got an unexpected keyword argument {unknown[0]!r}{hint}")


class TokenEmbedding(nn.Module):
    """Token ids -> vectors scaled by sqrt(d_model), plus the absolute position encoding if there is one."""

    def __init__(self, config, embed_tokens: nn.Embedding):
        super().__init__()
        self.embed_tokens = embed_tokens
        self.scale = embedding_scale(config)
        self.positions = build_absolute_positions(config)
        self.dropout = FastCpuDropout(config.dropout)

    def forward(self, input_ids: torch.Tensor | None, inputs_embeds: torch.Tensor | None, start: int) -> torch.Tensor:
        if inputs_embeds is None:
            inputs_embeds = self.embed_tokens(input_ids)
        # (batch, seq) -> (batch, seq, d_model)
        hidden_states = inputs_embeds * self.scale
        if self.positions is not None:
            # (seq, d_model) broadcast over the batch
            hidden_states = hidden_states + self.positions(
                start, hidden_states.shape[1], hidden_states.device, hidden_states.dtype
            )
        return self.dropout(hidden_states)


def local_window(width: int):
    """Encoder window |i - j| < width: the same reach as the decoder's causal window, on both sides."""

    def inside(batch_idx, head_idx, q_idx, kv_idx):
        return abs(q_idx - kv_idx) < width

    return inside


def may_read_mask(stack: nn.Module, mask: torch.Tensor | None) -> bool:
    """Whether transformers may look into a padding mask for a chance to drop it (no padding: sdpa's causal or
    unmasked kernel instead). Looking reads the mask's values back to the host, which waits for the device: not
    while training, where nearly every token-budget batch has padding anyway."""
    return mask is None or not stack.training


def check_inputs(input_ids, inputs_embeds, vocab_size: int, name: str) -> tuple[int, int]:
    if (input_ids is None) == (inputs_embeds is None):
        raise ValueError(f"Pass exactly one of {name} and its *_embeds counterpart.")
    if input_ids is not None:
        check_token_ids(input_ids, vocab_size, name)
        return tuple(input_ids.shape)
    return tuple(inputs_embeds.shape[:2])


class TransformerStack(nn.Module):
    """What both stacks share: embeddings, the positions of self-attention (rotary tables or ALiBi's biases), N layers
    and, for Pre-LN, a final norm."""

    def __init__(self, config: VanillaTransformerConfig, embed_tokens: nn.Embedding, layer_class, heads, layers):
        super().__init__()
        self.config = config
        self.embeddings = TokenEmbedding(config, embed_tokens)
        self.rotary = build_rotary(config, heads)
        self.linear_biases = build_linear_biases(config, heads, causal=layer_class is VanillaTransformerDecoderLayer)
        self.layers = nn.ModuleList(layer_class(config, layer_idx) for layer_idx in range(layers))
        # Pre-LN leaves the residual stream un-normalised, so the stack ends with a norm
        pre_norm = config.norm_placement == "pre"
        self.final_norm = build_norm(config.norm_type, config.d_model, config.layer_norm_eps) if pre_norm else None

    @property
    def embed_tokens(self) -> nn.Embedding:
        return self.embeddings.embed_tokens

    def self_attention_positions(self, start: int, length: int, like: torch.Tensor) -> dict:
        """What self-attention needs to know where its `length` queries from `start` on sit: rotary cos/sin tables,
        ALiBi's bias over the keys, or nothing (the positions were added to the embeddings)."""
        positions = dict(rotary=None, position_bias=None)
        if self.rotary is not None:
            positions["rotary"] = self.rotary(start, length, like.device, like.dtype)
        if self.linear_biases is not None:
            implementation = self.config._attn_implementation
            if implementation not in ("eager", "sdpa"):
                raise ValueError(
                    f"position_embedding_type='alibi' adds a bias to the attention scores, which "
                    f"attn_implementation={implementation!r} cannot take; use 'sdpa' or 'eager'."
                )
            positions["position_bias"] = self.linear_biases(start, length, like.device, like.dtype)
        return positions

    def run_layers(self, hidden_states, layer_args: tuple, layer_kwargs: dict, output_hidden_states, output_attentions):
        """The N layers, then the Pre-LN final norm. Returns the stack's output; the hidden states (the embeddings,
        then each layer's output, the last one normalised like the output) or None; and for each attention of a
        layer (self; or self and cross) a tuple of every layer's weights, or None."""
        all_hidden_states = (hidden_states,) if output_hidden_states else None
        all_weights = None
        for layer in self.layers:
            hidden_states, *weights = layer(hidden_states, *layer_args, **layer_kwargs)
            if output_hidden_states:
                all_hidden_states += (hidden_states,)
            if output_attentions:
                all_weights = all_weights or [()] * len(weights)
                all_weights = [earlier + (new,) for earlier, new in zip(all_weights, weights, strict=True)]
        if self.final_norm is not None:
            hidden_states = self.final_norm(hidden_states)
            if all_hidden_states is not None:
                all_hidden_states = all_hidden_states[:-1] + (hidden_states,)
        return hidden_states, all_hidden_states, all_weights


class VanillaTransformerEncoder(TransformerStack):
    """N identical layers of self-attention and feed-forward over the source sentence."""

    def __init__(self, config: VanillaTransformerConfig, embed_tokens: nn.Embedding):
        layers, heads = config.encoder_layers, config.encoder_attention_heads
        super().__init__(config, embed_tokens, VanillaTransformerEncoderLayer, heads, layers)

    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        inputs_embeds: torch.Tensor | None = None,
        output_attentions: bool = False,
        output_hidden_states: bool = False,
        **kwargs,
    ) -> BaseModelOutput:
        shape = check_inputs(input_ids, inputs_embeds, self.config.vocab_size, "input_ids")
        check_mask(attention_mask, shape, "attention_mask")
        hidden_states = self.embeddings(input_ids, inputs_embeds, start=0)
        positions = self.self_attention_positions(0, shape[1], hidden_states)
        mask = create_bidirectional_mask(
            config=self.config,
            inputs_embeds=hidden_states,
            attention_mask=attention_mask,
            and_mask_function=local_window(self.config.sliding_window) if self.config.sliding_window else None,
            allow_is_bidirectional_skip=may_read_mask(self, attention_mask),
        )

        hidden_states, all_hidden_states, weights = self.run_layers(
            hidden_states, (mask,), dict(**positions, **kwargs), output_hidden_states, output_attentions
        )
        (self_attentions,) = weights or (None,)
        return BaseModelOutput(
            last_hidden_state=hidden_states, hidden_states=all_hidden_states, attentions=self_attentions
        )


class VanillaTransformerDecoder(TransformerStack):
    """N identical layers of masked self-attention, attention over the encoder output, and feed-forward."""

    def __init__(self, config: VanillaTransformerConfig, embed_tokens: nn.Embedding):
        layers, heads = config.decoder_layers, config.decoder_attention_heads
        super().__init__(config, embed_tokens, VanillaTransformerDecoderLayer, heads, layers)

    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        encoder_hidden_states: torch.Tensor | None = None,
        encoder_attention_mask: torch.Tensor | None = None,
        cache: Cache | None = None,
        inputs_embeds: torch.Tensor | None = None,
        use_cache: bool = False,
        output_attentions: bool = False,
        output_hidden_states: bool = False,
        **kwargs,
    ) -> BaseModelOutputWithPastAndCrossAttentions:
        shape = check_inputs(input_ids, inputs_embeds, self.config.target_vocab_size, "decoder_input_ids")
        if encoder_hidden_states is None:
            raise ValueError("The decoder needs encoder_hidden_states (or encoder_outputs) to attend to.")
        check_mask(encoder_attention_mask, tuple(encoder_hidden_states.shape[:2]), "attention_mask")
        if use_cache and cache is None:
            cache = new_cache(self.config)
        past_length = cache.get_seq_length() if cache is not None else 0
        check_mask(attention_mask, (shape[0], past_length + shape[1]), "decoder_attention_mask")

        hidden_states = self.embeddings(input_ids, inputs_embeds, start=past_length)
        positions = self.self_attention_positions(past_length, shape[1], hidden_states)
        self_attention_cache = cache.self_attention_cache if cache is not None else None
        make_causal_mask = create_sliding_window_causal_mask if self.config.sliding_window else create_causal_mask
        causal_mask = make_causal_mask(
            config=self.config,
            inputs_embeds=hidden_states,
            attention_mask=attention_mask,
            cache=self_attention_cache,
            allow_is_causal_skip=may_read_mask(self, attention_mask),
        )
        cross_mask = create_bidirectional_mask(
            config=self.config,
            inputs_embeds=hidden_states,
            attention_mask=encoder_attention_mask,
            encoder_hidden_states=encoder_hidden_states,
            allow_is_bidirectional_skip=may_read_mask(self, encoder_attention_mask),
        )

        hidden_states, all_hidden_states, weights = self.run_layers(
            hidden_states,
            (causal_mask, encoder_hidden_states),  # positional, so gradient checkpointing sees the encoder output
            dict(encoder_attention_mask=cross_mask, cache=cache, **positions, **kwargs),
            output_hidden_states,
            output_attentions,
        )
        self_attentions, cross_attentions = weights or (None, None)
        return BaseModelOutputWithPastAndCrossAttentions(
            last_hidden_state=hidden_states,
            hidden_states=all_hidden_states,
            attentions=self_attentions,
            cross_attentions=cross_attentions,
            cache=cache,
        )


# a block of the generator and loss holds this many tokens at least (fewer: one block for the batch)
MIN_BLOCK_TOKENS = 64


def per_token_loss(summed: torch.Tensor, labels: torch.Tensor, num_items_in_batch) -> torch.Tensor:
    """A summed loss divided by the token count of the batch (Trainer's `num_items_in_batch` under accumulation),
    else by its own labels that are not -100."""
    if num_items_in_batch is None:
        # labels that are all ignored give a zero loss (and zero gradients), not 0 / 0
        num_items_in_batch = (labels != -100).sum().clamp(min=1)
    if torch.is_tensor(num_items_in_batch):
        num_items_in_batch = num_items_in_batch.to(summed.device)
    return summed / num_items_in_batch


def new_cache(config) -> EncoderDecoderCache:
    """Self-attention keys/values grow each step (and may slide); cross-attention ones are the whole source, once."""
    return EncoderDecoderCache(DynamicCache(config=config), DynamicCache())


class VanillaTransformerPreTrainedModel(PreTrainedModel):
    config_class = VanillaTransformerConfig
    config: VanillaTransformerConfig
    base_model_prefix = "model"
    main_input_name = "input_ids"
    supports_gradient_checkpointing = True
    _no_split_modules = ["VanillaTransformerEncoderLayer", "VanillaTransformerDecoderLayer"]
    _supports_sdpa = True
    _supports_flash_attn = True
    _supports_flex_attn = True

    def __init__(self, config: VanillaTransformerConfig, *inputs, **kwargs):
        # from_pretrained sets its keyword overrides on the config after the config checked itself: check again
        config.validate()
        super().__init__(config, *inputs, **kwargs)

    @classmethod
    def from_pretrained(cls, pretrained_model_name_or_path, *args, **kwargs):
        """transformers' own, with a truncated or garbage weights file named (safetensors' error names none); the
        original error stays chained."""
        try:
            return super().from_pretrained(pretrained_model_name_or_path, *args, **kwargs)
        except Exception as error:
            if not is_safetensors_error(error):
                raise
            hub_options = {name: kwargs[name] for name in ("cache_dir", "revision") if kwargs.get(name)}
            where = (pretrained_model_name_or_path, kwargs.get("subfolder", ""))
            raise corrupt_weights_file(error, *where, **hub_options) from error

    def save_pretrained(self, save_directory, *args, **kwargs):
        """transformers adds the saved class and AutoConfig to the auto_map the config already holds."""
        if self._auto_class is not None:
            encoder_decoder = (VanillaTransformerModel, VanillaTransformerForConditionalGeneration)
            if isinstance(self, encoder_decoder):
                # whichever model is saved, auto_map names both, so AutoModel and AutoModelForSeq2SeqLM load the folder
                auto_map = dict(getattr(self.config, "auto_map", None) or {})
                for model_class in encoder_decoder:
                    if model_class._auto_class is not None:
                        module = model_class.__module__.rsplit(".", 1)[-1]
                        auto_map[model_class._auto_class] = f"{module}.{model_class.__name__}"
            else:
                # an encoder-only model names itself alone: one fine-tuned from a translation folder holds that
                # folder's auto_map, whose classes would look for a decoder its weights do not have
                auto_map = {}
            self.config.auto_map = auto_map
        return super().save_pretrained(save_directory, *args, **kwargs)

    def mark_tied_weights_as_initialized(self, loading_info):
        """transformers flags the targets of tied weights as initialised, as loading the source fills them. Where the
        stacks share the embedding module itself, a target is the source's own parameter: flagging it would hide a
        checkpoint without the embedding (never reported missing, left uninitialised on the meta device)."""
        declared = self.all_tied_weights_keys
        self.all_tied_weights_keys = {
            target: source
            for target, source in declared.items()
            if self.get_parameter(target) is not self.get_parameter(source)
        }
        try:
            super().mark_tied_weights_as_initialized(loading_info)
        finally:
            self.all_tied_weights_keys = declared

    def _resize_token_embeddings(self, new_num_tokens, pad_to_multiple_of=None, mean_resizing=True):
        """Both stacks read one vocabulary: without a shared matrix the decoder's embedding is resized as well
        (transformers resizes the input embedding, the encoder's, and the generator, then ties them again)."""
        if self.config.has_separate_target_vocabulary:
            raise ValueError(
                f"decoder_vocab_size={self.config.decoder_vocab_size}: the target vocabulary is separate, and "
                "resize_token_embeddings resizes the one vocabulary of both stacks"
            )
        resized = super()._resize_token_embeddings(new_num_tokens, pad_to_multiple_of, mean_resizing)
        bias = getattr(self, "final_logits_bias", None)
        if bias is not None and bias.shape[-1] != resized.num_embeddings:
            # the new tokens start without a bias, as in Marian
            kept = bias[:, : resized.num_embeddings]
            grown = bias.new_zeros(1, resized.num_embeddings - kept.shape[-1])
            self.final_logits_bias = torch.cat((kept, grown), dim=-1)
        if not self.config.share_encoder_decoder_embeddings and hasattr(self.base_model, "decoder"):
            decoder = self.get_decoder().embeddings
            decoder.embed_tokens = self._get_resized_embeddings(
                decoder.embed_tokens, resized.num_embeddings, mean_resizing=mean_resizing
            )
        return resized

    def _init_weights(self, module):
        normal = self.config.weight_init == "normal"
        if isinstance(module, nn.Linear):
            if normal:
                init.normal_(module.weight, mean=0.0, std=self.config.init_std)
            else:
                # Glorot/Xavier uniform, as in the reference implementations of the paper (tensor2tensor, fairseq)
                init.xavier_uniform_(module.weight)
            if module.bias is not None:
                init.zeros_(module.bias)
        elif isinstance(module, nn.Embedding):
            # under "xavier" the embedding is multiplied by sqrt(d_model): N(0, d_model^-1/2) gives unit variance
            scaled_unit = self.config.scale_embedding and not normal
            std = self.config.d_model**-0.5 if scaled_unit else self.config.init_std
            init.normal_(module.weight, mean=0.0, std=std)
            if module.padding_idx is not None and not getattr(module.weight, "_is_hf_initialized", False):
                init.zeros_(module.weight[module.padding_idx])
        elif isinstance(module, (nn.LayerNorm, nn.RMSNorm)):
            init.ones_(module.weight)
            if getattr(module, "bias", None) is not None:
                init.zeros_(module.bias)
        elif isinstance(module, AddAndNorm) and module.initial_scale is not None:
            init.constant_(module.scale, module.initial_scale)
        if getattr(module, "final_logits_bias", None) is not None:
            init.zeros_(module.final_logits_bias)


class VanillaTransformerModel(VanillaTransformerPreTrainedModel):
    """The bare encoder-decoder: returns the decoder's last hidden states (`Seq2SeqModelOutput`)."""

    def __init__(self, config: VanillaTransformerConfig):
        super().__init__(config)
        pad = config.pad_token_id
        if config.share_encoder_decoder_embeddings:
            # one matrix for both languages (a joint BPE vocabulary), as in the paper
            self.shared = nn.Embedding(config.vocab_size, config.d_model, pad)
            encoder_embeddings = decoder_embeddings = self.shared
            self._tied_weights_keys = {
                "encoder.embeddings.embed_tokens.weight": "shared.weight",
                "decoder.embeddings.embed_tokens.weight": "shared.weight",
            }
        else:
            encoder_embeddings = nn.Embedding(config.vocab_size, config.d_model, pad)
            decoder_embeddings = nn.Embedding(config.target_vocab_size, config.d_model, pad)
        self.encoder = VanillaTransformerEncoder(config, encoder_embeddings)
        self.decoder = VanillaTransformerDecoder(config, decoder_embeddings)
        self.post_init()

    def get_input_embeddings(self) -> nn.Embedding:
        return self.encoder.embed_tokens

    def set_input_embeddings(self, value: nn.Embedding):
        if self.config.share_encoder_decoder_embeddings:
            self.shared = value
            self.decoder.embeddings.embed_tokens = value
        self.encoder.embeddings.embed_tokens = value

    def get_encoder(self, modality=None):
        return self.encoder

    def get_decoder(self):
        return self.decoder

    @can_return_tuple
    @deprecate_kwarg("past_key_values", "5.40.0", new_name="cache")
    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        decoder_input_ids: torch.LongTensor | None = None,
        decoder_attention_mask: torch.Tensor | None = None,
        encoder_outputs: tuple | BaseModelOutput | None = None,
        cache: Cache | None = None,
        inputs_embeds: torch.Tensor | None = None,
        decoder_inputs_embeds: torch.Tensor | None = None,
        use_cache: bool | None = None,
        output_attentions: bool | None = None,
        output_hidden_states: bool | None = None,
        **kwargs,
    ) -> Seq2SeqModelOutput:
        check_keywords(kwargs)
        if isinstance(cache, tuple):
            raise ValueError("Legacy tuple caches are not supported; pass an EncoderDecoderCache.")
        output_attentions = output_attentions if output_attentions is not None else self.config.output_attentions
        output_hidden_states = (
            output_hidden_states if output_hidden_states is not None else self.config.output_hidden_states
        )
        use_cache = use_cache if use_cache is not None else (self.config.use_cache and not self.training)

        if encoder_outputs is None:
            encoder_outputs = self.encoder(
                input_ids=input_ids,
                attention_mask=attention_mask,
                inputs_embeds=inputs_embeds,
                output_attentions=output_attentions,
                output_hidden_states=output_hidden_states,
                **kwargs,
            )
        elif not isinstance(encoder_outputs, BaseModelOutput):
            encoder_outputs = BaseModelOutput(
                last_hidden_state=encoder_outputs[0],
                hidden_states=encoder_outputs[1] if len(encoder_outputs) > 1 else None,
                attentions=encoder_outputs[2] if len(encoder_outputs) > 2 else None,
            )

        decoder_outputs = self.decoder(
            input_ids=decoder_input_ids,
            attention_mask=decoder_attention_mask,
            encoder_hidden_states=encoder_outputs.last_hidden_state,
            encoder_attention_mask=attention_mask,
            cache=cache,
            inputs_embeds=decoder_inputs_embeds,
            use_cache=use_cache,
            output_attentions=output_attentions,
            output_hidden_states=output_hidden_states,
            **kwargs,
        )
        return Seq2SeqModelOutput(
            last_hidden_state=decoder_outputs.last_hidden_state,
            decoder_hidden_states=decoder_outputs.hidden_states,
            decoder_attentions=decoder_outputs.attentions,
            cross_attentions=decoder_outputs.cross_attentions,
            encoder_last_hidden_state=encoder_outputs.last_hidden_state,
            encoder_hidden_states=encoder_outputs.hidden_states,
            encoder_attentions=encoder_outputs.attentions,
            cache=decoder_outputs.cache if use_cache else None,
        )


class VanillaTransformerForConditionalGeneration(VanillaTransformerPreTrainedModel, GenerationMixin):
    """The Transformer with its generator (`lm_head`): next-token logits, label-smoothed loss, and `generate()`."""

    def __init__(self, config: VanillaTransformerConfig):
        super().__init__(config)
        self.model = VanillaTransformerModel(config)
        # the generator (section 3.4): decoder output -> next-token logits, tied to the embedding matrix
        self.lm_head = nn.Linear(config.d_model, config.target_vocab_size, bias=False)
        if config.final_logits_bias:
            # a buffer, as Marian's: saved with the weights, left alone by the optimizer
            self.register_buffer("final_logits_bias", torch.zeros(1, config.target_vocab_size))
        source = (
            "model.shared.weight"
            if config.share_encoder_decoder_embeddings
            else ("model.decoder.embeddings.embed_tokens.weight")
        )
        self._tied_weights_keys = {"lm_head.weight": source}
        # generate(use_shortlist=True): the folder's lexical shortlist, read when first used (or assigned)
        self.lexical_shortlist: LexicalShortlist | None = None
        self._restricted_generator = None  # set while a shortlisted generate() runs
        self.post_init()

    def get_encoder(self, modality=None):
        return self.model.encoder

    def get_decoder(self):
        return self.model.decoder

    def get_output_embeddings(self) -> nn.Linear:
        return self.lm_head

    def set_output_embeddings(self, new_embeddings: nn.Linear):
        self.lm_head = new_embeddings

    def prepare_decoder_input_ids_from_labels(self, labels: torch.Tensor) -> torch.Tensor:
        return shift_tokens_right(labels, self.config.pad_token_id, self.config.decoder_start_token_id)

    def _validate_generation_mode(self, generation_mode, generation_config, generation_mode_kwargs):
        """What transformers leaves to fail later: no beams at all (a ZeroDivisionError), special tokens outside the
        vocabulary (written into the output, then fed back as decoder input)."""
        super()._validate_generation_mode(generation_mode, generation_config, generation_mode_kwargs)
        if generation_config.num_beams is not None and generation_config.num_beams < 1:
            raise ValueError(
                f"num_beams={generation_config.num_beams} must be 1 (greedy or sampling) or more (beam search)"
            )
        vocab_size = self.config.target_vocab_size
        for name in ("pad_token_id", "eos_token_id", "decoder_start_token_id"):
            value = getattr(generation_config, name, None)
            ids = value.tolist() if torch.is_tensor(value) else value
            # a negative eos and pad id is transformers' "never stop", which it warns about and runs; the start
            # token is the decoder's first input, always
            lowest = 0 if name == "decoder_start_token_id" else -float("inf")
            for token_id in ids if isinstance(ids, list) else [ids]:
                if token_id is not None and not lowest <= token_id < vocab_size:
                    raise ValueError(f"{name}={token_id} is outside the vocabulary [0, {vocab_size})")

    def generate(self, inputs=None, generation_config=None, **kwargs):
        """transformers' generate(), plus `use_shortlist=True` (a generation setting, so also
        `generation_config.use_shortlist`): decode each batch in the target tokens its source tokens' lexical
        shortlist allows (see `lexical_shortlist.py`); the output is in the full vocabulary as always."""
        use_shortlist = kwargs.pop("use_shortlist", None)
        if use_shortlist is None:
            use_shortlist = getattr(generation_config or self.generation_config, "use_shortlist", False)
        if not use_shortlist:
            return super().generate(inputs, generation_config, **kwargs)
        return generate_with_shortlist(self, self.shortlist(), super().generate, inputs, generation_config, kwargs)

    def shortlist(self) -> LexicalShortlist:
        """The lexical shortlist generate(use_shortlist=True) decodes with: the one assigned to
        `lexical_shortlist`, else the one saved in the folder (or Hub repo) the model was loaded from."""
        if self.lexical_shortlist is None:
            if not self.name_or_path:
                raise ValueError(
                    "this model was not loaded from a folder, so it has no lexical shortlist: assign one "
                    "(model.lexical_shortlist = LexicalShortlist.load(path))"
                )
            self.lexical_shortlist = LexicalShortlist.from_pretrained(self.name_or_path)
        self.lexical_shortlist.check_fits(self.config)
        return self.lexical_shortlist

    def _prepare_cache_for_generation(self, generation_config, model_kwargs, *args, **kwargs):
        super()._prepare_cache_for_generation(generation_config, model_kwargs, *args, **kwargs)
        # generate() builds the cross-attention cache from the config too, which would make it slide with
        # sliding_window and forget source positions: cross-attention always keeps the whole source
        cache = model_kwargs.get("cache")
        if isinstance(cache, EncoderDecoderCache) and self.config.sliding_window:
            model_kwargs["cache"] = EncoderDecoderCache(cache.self_attention_cache, DynamicCache())

    def _reorder_cache(self, cache: Cache, beam_idx: torch.LongTensor) -> Cache:
        """Beam search: the surviving beams take over the self-attention keys/values of the beams they extend.

        The cross-attention cache is left as it is: beam search only picks among the beams of the same sentence,
        whose cross-attention keys/values are identical copies of that sentence's source, so reordering them would
        copy every layer's source keys/values at every step for nothing.
        """
        if isinstance(cache, EncoderDecoderCache):
            cache.self_attention_cache.reorder_cache(beam_idx)
        else:
            cache.reorder_cache(beam_idx)
        return cache

    def loss_function(self, logits, labels, num_items_in_batch=None, **kwargs) -> torch.Tensor:
        """Label-smoothed cross-entropy over the target tokens (-100 is ignored), averaged per token.

        With gradient accumulation, Trainer passes the token count of the whole accumulated batch as
        `num_items_in_batch`, so the summed loss is divided by it and micro-batches add up exactly.
        """
        summed = label_smoothed_cross_entropy(
            logits.to(torch.promote_types(logits.dtype, torch.float32)).reshape(-1, logits.shape[-1]),
            labels.reshape(-1).to(logits.device),
            smoothing=self.config.label_smoothing,
        )
        return per_token_loss(summed, labels, num_items_in_batch)

    def generator_loss(self, hidden_states, labels, num_items_in_batch=None) -> torch.Tensor:
        """`loss_function(lm_head(hidden_states), labels, ...)` without the logits: the generator inside the loss,
        `config.loss_blocks` blocks of the target tokens at a time (`loss.py`); one block for fewer tokens than
        `MIN_BLOCK_TOKENS` a block, whose overhead would outweigh what blocks save (one threshold, so a compiled step
        has at most two graphs for it)."""
        tokens = labels.numel()
        blocks = self.config.loss_blocks if tokens >= MIN_BLOCK_TOKENS * self.config.loss_blocks else 1
        summed = generator_and_label_smoothed_cross_entropy(
            hidden_states.reshape(-1, hidden_states.shape[-1]),
            self.lm_head.weight,
            self.final_logits_bias.reshape(-1) if self.config.final_logits_bias else None,
            labels.reshape(-1).to(hidden_states.device),
            smoothing=self.config.label_smoothing,
            blocks=blocks,
        )
        return per_token_loss(summed, labels, num_items_in_batch)

    def fuses_generator_and_loss(self, labels, return_logits: bool | None) -> bool:
        """A forward with labels computes the generator inside the loss and returns no logits when training or told
        `return_logits=False`; never when `config.loss_blocks` is 0 or the generator is not the plain linear map
        (a shortlist's rows, an adapter on it)."""
        if labels is None or self.config.loss_blocks == 0 or return_logits:
            return False
        if return_logits is None and not self.training:
            return False
        return type(self.lm_head) is nn.Linear and self._restricted_generator is None

    @can_return_tuple
    @deprecate_kwarg("past_key_values", "5.40.0", new_name="cache")
    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        decoder_input_ids: torch.LongTensor | None = None,
        decoder_attention_mask: torch.Tensor | None = None,
        encoder_outputs: tuple | BaseModelOutput | None = None,
        cache: Cache | None = None,
        inputs_embeds: torch.Tensor | None = None,
        decoder_inputs_embeds: torch.Tensor | None = None,
        labels: torch.LongTensor | None = None,
        use_cache: bool | None = None,
        output_attentions: bool | None = None,
        output_hidden_states: bool | None = None,
        num_items_in_batch: int | torch.Tensor | None = None,
        return_logits: bool | None = None,
        **kwargs,
    ) -> Seq2SeqLMOutput:
        """transformers' seq2seq forward. With `labels` the loss too; in training it is then computed with the
        generator, a block of tokens at a time, and no logits are returned: `return_logits=True` returns them (and
        computes the loss from them), `return_logits=False` leaves them out in evaluation too."""
        if labels is not None:
            check_token_ids(labels, self.config.target_vocab_size, "labels", ignore_index=-100)
            use_cache = False
            if decoder_input_ids is None and decoder_inputs_embeds is None:
                decoder_input_ids = self.prepare_decoder_input_ids_from_labels(labels)
        restricted = self._restricted_generator  # a shortlisted generate(): its ids are rows of the shortlist
        if restricted is not None and decoder_input_ids is not None:
            decoder_input_ids = restricted.full_ids(decoder_input_ids)

        outputs = self.model(
            input_ids=input_ids,
            attention_mask=attention_mask,
            decoder_input_ids=decoder_input_ids,
            decoder_attention_mask=decoder_attention_mask,
            encoder_outputs=encoder_outputs,
            cache=cache,
            inputs_embeds=inputs_embeds,
            decoder_inputs_embeds=decoder_inputs_embeds,
            use_cache=use_cache,
            output_attentions=output_attentions,
            output_hidden_states=output_hidden_states,
            **kwargs,
        )
        if self.fuses_generator_and_loss(labels, return_logits):
            logits, loss = None, self.generator_loss(outputs.last_hidden_state, labels, num_items_in_batch)
        else:
            # (batch, target_len, d_model) -> (batch, target_len, vocab_size)
            if restricted is not None:
                logits = restricted.logits(outputs.last_hidden_state)
            else:
                logits = self.lm_head(outputs.last_hidden_state)
                if self.config.final_logits_bias:
                    logits = logits + self.final_logits_bias
            loss = None if labels is None else self.loss_function(logits, labels, num_items_in_batch)

        return Seq2SeqLMOutput(
            loss=loss,
            logits=logits,
            decoder_hidden_states=outputs.decoder_hidden_states,
            decoder_attentions=outputs.decoder_attentions,
            cross_attentions=outputs.cross_attentions,
            encoder_last_hidden_state=outputs.encoder_last_hidden_state,
            encoder_hidden_states=outputs.encoder_hidden_states,
            encoder_attentions=outputs.encoder_attentions,
            cache=outputs.cache,
        )


class VanillaTransformerEncoderModel(VanillaTransformerPreTrainedModel):
    """The encoder on its own: token embeddings (scaled), positions and the encoder stack; no decoder is built.
    Returns the encoder's last hidden states (`BaseModelOutput`).

    Its weights carry the names they have in `VanillaTransformerModel` (`shared`, `encoder.*`), so the encoder of a
    translation checkpoint loads into it as it is, the decoder's weights left out as unexpected.
    """

    def __init__(self, config: VanillaTransformerConfig):
        super().__init__(config)
        embed_tokens = nn.Embedding(config.vocab_size, config.d_model, config.pad_token_id)
        if config.share_encoder_decoder_embeddings:
            # the name a translation checkpoint stores the matrix under, which its encoder and decoder both read
            self.shared = embed_tokens
            self._tied_weights_keys = {"encoder.embeddings.embed_tokens.weight": "shared.weight"}
        self.encoder = VanillaTransformerEncoder(config, embed_tokens)
        self.post_init()

    def get_input_embeddings(self) -> nn.Embedding:
        return self.encoder.embed_tokens

    def set_input_embeddings(self, value: nn.Embedding):
        if self.config.share_encoder_decoder_embeddings:
            self.shared = value
        self.encoder.embeddings.embed_tokens = value

    def get_encoder(self, modality=None):
        return self.encoder

    @can_return_tuple
    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        inputs_embeds: torch.Tensor | None = None,
        output_attentions: bool | None = None,
        output_hidden_states: bool | None = None,
        **kwargs,
    ) -> BaseModelOutput:
        check_keywords(kwargs, type(self).forward)
        output_attentions = output_attentions if output_attentions is not None else self.config.output_attentions
        output_hidden_states = (
            output_hidden_states if output_hidden_states is not None else self.config.output_hidden_states
        )
        return self.encoder(
            input_ids=input_ids,
            attention_mask=attention_mask,
            inputs_embeds=inputs_embeds,
            output_attentions=output_attentions,
            output_hidden_states=output_hidden_states,
            **kwargs,
        )


def pool_sentences(hidden_states: torch.Tensor, attention_mask: torch.Tensor | None, pooling: str) -> torch.Tensor:
    """(batch, seq, d_model) -> (batch, d_model): one vector a sentence, whatever padding its batch adds."""
    if attention_mask is None:
        attention_mask = torch.ones(hidden_states.shape[:2], device=hidden_states.device)
    elif attention_mask.dim() != 2:
        raise ValueError(
            f"classifier_pooling={pooling!r} needs the (batch, sequence) attention_mask to find the padding, got "
            f"shape {tuple(attention_mask.shape)}"
        )
    mask = attention_mask.to(hidden_states.dtype)
    if pooling == "mean":
        summed = (hidden_states * mask.unsqueeze(-1)).sum(dim=1)
        return summed / mask.sum(dim=1, keepdim=True).clamp(min=1)
    # the first real token, which is not position 0 in a batch padded on the left
    first = mask.argmax(dim=1)
    return hidden_states[torch.arange(hidden_states.shape[0], device=hidden_states.device), first]


class ClassifierHead(nn.Module):
    """Dropout, then a linear map from d_model to the `num_labels` logits."""

    def __init__(self, config: VanillaTransformerConfig):
        super().__init__()
        dropout = config.classifier_dropout if config.classifier_dropout is not None else config.dropout
        self.dropout = FastCpuDropout(dropout)
        self.out_proj = nn.Linear(config.d_model, config.num_labels)

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        return self.out_proj(self.dropout(hidden_states))


class EncoderWithClassifier(VanillaTransformerPreTrainedModel):
    """What both classifiers are made of: the encoder, at the name a translation checkpoint keeps it under
    (`model`), and a `ClassifierHead`."""

    # their losses are batch means: Trainer then divides them by the gradient-accumulation steps itself
    accepts_loss_kwargs = False

    def __init__(self, config: VanillaTransformerConfig):
        super().__init__(config)
        self.model = VanillaTransformerEncoderModel(config)
        self.classifier = ClassifierHead(config)
        self.post_init()


class VanillaTransformerForSequenceClassification(EncoderWithClassifier):
    """The encoder, a sentence vector (`config.classifier_pooling`) and a linear classifier: one label a sentence,
    or scores (`problem_type` regression) or several labels (multi_label_classification), with transformers'
    losses for each (cross-entropy, MSE, binary cross-entropy)."""

    @can_return_tuple
    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        inputs_embeds: torch.Tensor | None = None,
        labels: torch.Tensor | None = None,
        output_attentions: bool | None = None,
        output_hidden_states: bool | None = None,
        **kwargs,
    ) -> SequenceClassifierOutput:
        check_keywords(kwargs, type(self).forward)
        outputs = self.model(
            input_ids=input_ids,
            attention_mask=attention_mask,
            inputs_embeds=inputs_embeds,
            output_attentions=output_attentions,
            output_hidden_states=output_hidden_states,
            **kwargs,
        )
        pooled = pool_sentences(outputs.last_hidden_state, attention_mask, self.config.classifier_pooling)
        # (batch, d_model) -> (batch, num_labels)
        logits = self.classifier(pooled)
        # transformers' ForSequenceClassification loss: sets problem_type from num_labels and the labels' dtype
        loss = None if labels is None else self.loss_function(labels=labels, pooled_logits=logits, config=self.config)
        return SequenceClassifierOutput(
            loss=loss, logits=logits, hidden_states=outputs.hidden_states, attentions=outputs.attentions
        )


class VanillaTransformerForTokenClassification(EncoderWithClassifier):
    """The encoder and a linear classifier on each token's vector: a label a token; labels of -100 are ignored."""

    @can_return_tuple
    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        inputs_embeds: torch.Tensor | None = None,
        labels: torch.LongTensor | None = None,
        output_attentions: bool | None = None,
        output_hidden_states: bool | None = None,
        **kwargs,
    ) -> TokenClassifierOutput:
        check_keywords(kwargs, type(self).forward)
        outputs = self.model(
            input_ids=input_ids,
            attention_mask=attention_mask,
            inputs_embeds=inputs_embeds,
            output_attentions=output_attentions,
            output_hidden_states=output_hidden_states,
            **kwargs,
        )
        # (batch, seq, d_model) -> (batch, seq, num_labels)
        logits = self.classifier(outputs.last_hidden_state)
        # transformers' ForTokenClassification loss: cross-entropy averaged over the tokens whose label is not -100
        loss = None if labels is None else self.loss_function(logits, labels, self.config)
        return TokenClassifierOutput(
            loss=loss, logits=logits, hidden_states=outputs.hidden_states, attentions=outputs.attentions
        )


__all__ = [
    "VanillaTransformerAttention",
    "VanillaTransformerModel",
    "VanillaTransformerForConditionalGeneration",
    "VanillaTransformerEncoderModel",
    "VanillaTransformerForSequenceClassification",
    "VanillaTransformerForTokenClassification",
    "VanillaTransformerPreTrainedModel",
    "shift_tokens_right",
]
