"""Bad input to the model is an error that names the culprit, not an IndexError, a reshape error or NaN."""

import pytest
import torch
from helpers import VOCAB, random_tokens, tiny_config, tiny_model
from huggingface_hub.errors import StrictDataclassError

SOURCE = random_tokens(2, 5, seed=0)
TARGET = random_tokens(2, 4, seed=1)


@pytest.fixture(scope="module")
def model():
    return tiny_model(tiny_config())


@pytest.mark.parametrize(
    ("inputs", "message"),
    [
        (dict(input_ids=SOURCE.float()), r"input_ids must hold integer token ids, got torch.float32"),
        (dict(input_ids=SOURCE[:0]), r"input_ids is empty, shape \(0, 5\)"),
        (dict(input_ids=SOURCE[:, :0]), r"input_ids is empty, shape \(2, 0\)"),
        (dict(input_ids=SOURCE[0]), r"input_ids must have shape \(batch, sequence\), got \(5,\)"),
        (dict(input_ids=SOURCE + VOCAB), rf"input_ids contains id \d+, outside the vocabulary \[0, {VOCAB}\)"),
        (
            dict(attention_mask=torch.ones(5)),
            r"attention_mask must have shape \(batch, sequence\) = \(2, 5\), got \(5,\)",
        ),
        (dict(attention_mask=torch.ones(2, 5, 1)), r"attention_mask must have shape .* got \(2, 5, 1\)"),
        (dict(attention_mask=torch.ones(2, 4)), r"attention_mask has shape \(2, 4\) but the tokens it masks"),
        (dict(decoder_input_ids=TARGET.float()), r"decoder_input_ids must hold integer token ids"),
        (dict(labels=torch.full((2, 4), VOCAB)), rf"labels contains id {VOCAB}, outside the vocabulary"),
    ],
    ids=[
        "float-ids",
        "empty-batch",
        "zero-length-source",
        "1d-ids",
        "ids-past-vocab",
        "1d-mask",
        "3d-mask",
        "mask-shape",
        "float-decoder-ids",
        "labels-past-vocab",
    ],
)
def test_bad_model_input_names_the_culprit(model, inputs, message):
    arguments = {"input_ids": SOURCE, "decoder_input_ids": TARGET, **inputs}
    if "labels" in inputs:
        del arguments["decoder_input_ids"]
    with pytest.raises(ValueError, match=message):
        model(**arguments)


@pytest.mark.parametrize("field", ["pad_token_id", "bos_token_id", "eos_token_id", "decoder_start_token_id"])
def test_a_special_token_outside_the_vocabulary_is_refused_by_the_config(field):
    with pytest.raises(
        StrictDataclassError, match=rf"{field}={VOCAB} is invalid: must be a token id of the vocabulary"
    ):
        tiny_config(**{field: VOCAB})
