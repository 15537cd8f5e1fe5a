"""Our ModelTester: tiny configs and inputs for transformers' ModelTesterMixin (written for this model, after the
pattern of transformers' own seq2seq testers: a tester object with the sizes the mixin reads, `get_config()`,
`prepare_config_and_inputs()` and `prepare_config_and_inputs_for_common()`)."""

import torch

from vanilla_transformer import VanillaTransformerConfig

PAD, BOS, EOS = 0, 1, 2


def random_ids(batch_size: int, length: int, vocab_size: int, generator: torch.Generator) -> torch.Tensor:
    # ids >= 3: no special token inside the sentences, so no position is masked as padding
    return torch.randint(3, vocab_size, (batch_size, length), generator=generator)


class VanillaTransformerModelTester:
    def __init__(
        self,
        parent,
        batch_size: int = 13,
        seq_length: int = 7,
        decoder_seq_length: int | None = None,
        is_training: bool = True,
        vocab_size: int = 99,
        hidden_size: int = 32,
        num_hidden_layers: int = 2,
        num_attention_heads: int = 4,
        ffn_dim: int = 37,
        max_position_embeddings: int = 64,
        **config_switches,
    ):
        self.parent = parent
        self.batch_size = batch_size
        self.seq_length = self.encoder_seq_length = self.key_length = seq_length
        # the mixin's eager-vs-sdpa tests reuse the source mask as decoder mask: same lengths, as transformers' testers
        decoder_seq_length = seq_length if decoder_seq_length is None else decoder_seq_length
        self.decoder_seq_length = self.decoder_key_length = decoder_seq_length
        self.is_training = is_training
        self.vocab_size = vocab_size
        self.hidden_size = hidden_size
        self.num_hidden_layers = num_hidden_layers
        self.num_attention_heads = num_attention_heads
        self.ffn_dim = ffn_dim
        self.max_position_embeddings = max_position_embeddings
        self.pad_token_id, self.bos_token_id, self.eos_token_id = PAD, BOS, EOS
        self.config_switches = config_switches
        self.generator = torch.Generator().manual_seed(0)

    def get_config(self) -> VanillaTransformerConfig:
        return VanillaTransformerConfig(
            vocab_size=self.vocab_size,
            d_model=self.hidden_size,
            encoder_layers=self.num_hidden_layers,
            decoder_layers=self.num_hidden_layers,
            encoder_attention_heads=self.num_attention_heads,
            decoder_attention_heads=self.num_attention_heads,
            encoder_ffn_dim=self.ffn_dim,
            decoder_ffn_dim=self.ffn_dim,
            dropout=0.1,
            attention_dropout=0.1,
            max_position_embeddings=self.max_position_embeddings,
            pad_token_id=PAD,
            bos_token_id=BOS,
            eos_token_id=EOS,
            decoder_start_token_id=BOS,
            **self.config_switches,
        )

    def prepare_config_and_inputs(self):
        input_ids = random_ids(self.batch_size, self.seq_length, self.vocab_size, self.generator)
        input_ids[:, -1] = EOS
        decoder_input_ids = random_ids(self.batch_size, self.decoder_seq_length, self.vocab_size, self.generator)
        decoder_input_ids[:, 0] = BOS
        inputs_dict = {
            "input_ids": input_ids,
            "attention_mask": input_ids.ne(PAD).long(),
            "decoder_input_ids": decoder_input_ids,
            "decoder_attention_mask": decoder_input_ids.ne(PAD).long(),
        }
        return self.get_config(), inputs_dict

    def prepare_config_and_inputs_for_common(self):
        return self.prepare_config_and_inputs()
