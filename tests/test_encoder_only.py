"""The encoder on its own: the bare encoder model, the sequence and token classifiers on top of it, their losses,
saving and loading (also as remote code), transfer from a translation folder, Trainer, and transformers' pipelines."""

import json

import pytest
import torch
import torch.nn.functional as F
from helpers import PAD, VOCAB, random_tokens, run_without_our_package, tiny_config, tiny_model
from huggingface_hub.errors import StrictDataclassError
from safetensors.torch import load_file
from transformers import (
    AutoModelForSequenceClassification,
    AutoModelForTextEncoding,
    AutoModelForTokenClassification,
    Trainer,
    TrainingArguments,
    pipeline,
)
from transformers.modeling_outputs import BaseModelOutput

from vanilla_transformer import (
    VanillaTransformerEncoderModel,
    VanillaTransformerForSequenceClassification,
    VanillaTransformerForTokenClassification,
)
from vanilla_transformer.tokenization import train_tokenizer


def tiny_classifier(model_class=VanillaTransformerForSequenceClassification, **overrides):
    torch.manual_seed(0)
    return model_class(tiny_config(**overrides)).eval()


def test_the_encoder_model_builds_and_saves_no_decoder_weights(tmp_path):
    model = tiny_classifier(VanillaTransformerEncoderModel, position_embedding_type="learned")
    names = set(model.state_dict())
    assert names and not [name for name in names if "decoder" in name]
    assert {"shared.weight", "encoder.embeddings.positions.weight"} <= names

    model.save_pretrained(tmp_path)
    saved = load_file(tmp_path / "model.safetensors")
    assert not [name for name in saved if "decoder" in name]
    source = random_tokens(2, 7, seed=0)
    with torch.no_grad():
        output = model(input_ids=source)
        loaded = AutoModelForTextEncoding.from_pretrained(tmp_path).eval()(input_ids=source)
    assert isinstance(output, BaseModelOutput) and output.last_hidden_state.shape == (2, 7, 16)
    assert type(AutoModelForTextEncoding.from_pretrained(tmp_path)) is VanillaTransformerEncoderModel
    torch.testing.assert_close(loaded.last_hidden_state, output.last_hidden_state, atol=0, rtol=0)


@pytest.mark.parametrize("pooling", ["first", "mean"])
@pytest.mark.parametrize(
    "padding_side, positions",
    # absolute positions count from the first pad on the left, so left padding is checked with rotary positions
    [("right", "sinusoidal"), ("left", "rope")],
)
def test_padding_changes_nothing(pooling, padding_side, positions):
    model = tiny_classifier(num_labels=3, classifier_pooling=pooling, position_embedding_type=positions)
    sentence, longer = random_tokens(1, 5, seed=1), random_tokens(1, 9, seed=2)
    pads = torch.full((1, 4), PAD)
    padded = torch.cat([sentence, pads], dim=1) if padding_side == "right" else torch.cat([pads, sentence], dim=1)
    mask = (torch.arange(9) < 5) if padding_side == "right" else (torch.arange(9) >= 4)
    batch = torch.cat([longer, padded])
    batch_mask = torch.stack([torch.ones(9, dtype=torch.long), mask.long()])
    with torch.no_grad():
        alone = model(input_ids=sentence).logits[0]
        in_batch = model(input_ids=batch, attention_mask=batch_mask).logits[1]
    torch.testing.assert_close(in_batch, alone, atol=1e-5, rtol=1e-4)


def expected_loss(problem_type, logits, labels):
    if problem_type == "single_label_classification":
        return F.cross_entropy(logits, labels)
    if problem_type == "multi_label_classification":
        return F.binary_cross_entropy_with_logits(logits, labels)
    return F.mse_loss(logits.squeeze(-1), labels)


@pytest.mark.parametrize("explicit", [True, False], ids=["given", "inferred"])
@pytest.mark.parametrize(
    "problem_type, num_labels, labels",
    [
        ("single_label_classification", 3, torch.tensor([0, 2, 1, 2])),
        ("multi_label_classification", 3, torch.tensor([[1.0, 0, 1], [0, 0, 0], [1, 1, 1], [0, 1, 0]])),
        ("regression", 1, torch.tensor([0.5, -1.0, 2.0, 0.0])),
    ],
)
def test_each_problem_type_has_the_torch_loss(problem_type, num_labels, labels, explicit):
    model = tiny_classifier(num_labels=num_labels, problem_type=problem_type if explicit else None)
    output = model(input_ids=random_tokens(4, 6, seed=3), labels=labels)
    assert output.logits.shape == (4, num_labels)
    torch.testing.assert_close(output.loss, expected_loss(problem_type, output.logits, labels))
    # as in BERT, the problem type is read off num_labels and the labels' dtype when none is given
    assert model.config.problem_type == problem_type


def test_token_classification_ignores_labels_of_minus_100():
    model = tiny_classifier(VanillaTransformerForTokenClassification, num_labels=4)
    source = random_tokens(2, 6, seed=4)
    labels = torch.tensor([[0, 3, 1, -100, -100, -100], [2, -100, 2, 0, 1, 3]])
    output = model(input_ids=source, labels=labels)
    assert output.logits.shape == (2, 6, 4)
    kept = labels != -100
    torch.testing.assert_close(output.loss, F.cross_entropy(output.logits[kept], labels[kept]))
    # what an ignored position's label says does not matter
    relabelled = labels.masked_fill(~kept, 3)
    assert not torch.equal(model(input_ids=source, labels=relabelled).loss, output.loss)
    assert torch.equal(model(input_ids=source, labels=labels.masked_fill(~kept, -100)).loss, output.loss)


@pytest.mark.parametrize(
    "model_class, auto_class",
    [
        (VanillaTransformerForSequenceClassification, AutoModelForSequenceClassification),
        (VanillaTransformerForTokenClassification, AutoModelForTokenClassification),
    ],
)
def test_save_and_load_give_identical_logits(tmp_path, model_class, auto_class):
    model = tiny_classifier(model_class, num_labels=3, classifier_pooling="mean", norm_placement="pre")
    model.save_pretrained(tmp_path)
    auto_map = json.loads((tmp_path / "config.json").read_text())["auto_map"]
    assert set(auto_map) == {"AutoConfig", auto_class.__name__} and auto_map[auto_class.__name__].endswith(
        model_class.__name__
    )

    loaded = auto_class.from_pretrained(tmp_path).eval()
    assert type(loaded) is model_class and loaded.config.classifier_pooling == "mean"
    source, mask = random_tokens(2, 6, seed=5), torch.tensor([[1] * 6, [1] * 4 + [0] * 2])
    with torch.no_grad():
        torch.testing.assert_close(
            loaded(input_ids=source, attention_mask=mask).logits,
            model(input_ids=source, attention_mask=mask).logits,
            atol=0,
            rtol=0,
        )


CHILD = """
    import json, sys
    import torch
    from transformers import AutoModelForSequenceClassification

    folder = sys.argv[1]
    model = AutoModelForSequenceClassification.from_pretrained(folder, trust_remote_code=True).eval()
    with torch.no_grad():
        logits = model(**torch.load(folder + "/inputs.pt")).logits
    torch.save(logits, folder + "/child.pt")
    print(json.dumps({
        "name": type(model).__name__,
        "module": type(model).__module__,
        "ours_imported": "vanilla_transformer" in sys.modules,
    }))
    """


def test_a_classifier_folder_loads_without_our_package(tmp_path):
    model = tiny_classifier(num_labels=2, position_embedding_type="rope", num_key_value_heads=2)
    model.save_pretrained(tmp_path)
    inputs = {"input_ids": random_tokens(2, 6, seed=6), "attention_mask": torch.tensor([[1] * 6, [1] * 3 + [0] * 3])}
    torch.save(inputs, tmp_path / "inputs.pt")

    result = run_without_our_package(CHILD, str(tmp_path), cwd=tmp_path)
    assert result["name"] == "VanillaTransformerForSequenceClassification" and result["ours_imported"] is False
    assert result["module"].startswith("transformers_modules")
    with torch.no_grad():
        torch.testing.assert_close(torch.load(tmp_path / "child.pt"), model(**inputs).logits, atol=0, rtol=0)


@pytest.mark.parametrize("shared", [True, False], ids=["shared-embeddings", "separate-embeddings"])
def test_a_classifier_starts_from_the_encoder_of_a_translation_folder(tmp_path, shared):
    translation = tiny_model(tiny_config(share_encoder_decoder_embeddings=shared, position_embedding_type="learned"))
    translation.save_pretrained(tmp_path)

    classifier, info = VanillaTransformerForSequenceClassification.from_pretrained(
        tmp_path, num_labels=2, output_loading_info=True
    )
    head = {"classifier.out_proj.weight", "classifier.out_proj.bias"}
    assert set(info["missing_keys"]) == head
    assert info["unexpected_keys"] and all(name.startswith("model.decoder.") for name in info["unexpected_keys"])
    assert not info["mismatched_keys"]

    translation_weights, classifier_weights = translation.state_dict(), classifier.state_dict()
    encoder_names = set(classifier_weights) - head
    assert any("encoder.layers.1." in name for name in encoder_names)
    assert "model.encoder.embeddings.embed_tokens.weight" in encoder_names
    for name in encoder_names:
        torch.testing.assert_close(classifier_weights[name], translation_weights[name], atol=0, rtol=0, msg=name)

    source = random_tokens(2, 6, seed=7)
    with torch.no_grad():
        expected = translation.get_encoder()(input_ids=source).last_hidden_state
        torch.testing.assert_close(classifier.eval().model(input_ids=source).last_hidden_state, expected)

    # its folder names the classifier alone, not the translation classes of the folder it came from
    classifier.save_pretrained(tmp_path / "classifier")
    auto_map = json.loads((tmp_path / "classifier" / "config.json").read_text())["auto_map"]
    assert set(auto_map) == {"AutoConfig", "AutoModelForSequenceClassification"}


class ToyTask(torch.utils.data.Dataset):
    """Sentences of low token ids are label 0, of high ones label 1: separable by any bag of words."""

    def __init__(self, size: int, seed: int):
        generator = torch.Generator().manual_seed(seed)
        self.labels = torch.randint(0, 2, (size,), generator=generator)
        half = (VOCAB + 3) // 2
        low = torch.randint(3, half, (size, 8), generator=generator)
        self.input_ids = torch.where(self.labels[:, None].bool(), low + (VOCAB - half), low)

    def __len__(self):
        return len(self.labels)

    def __getitem__(self, index):
        return {"input_ids": self.input_ids[index], "labels": self.labels[index]}


def accuracy(model, task: ToyTask) -> float:
    with torch.no_grad():
        predicted = model.eval()(input_ids=task.input_ids).logits.argmax(-1)
    return (predicted == task.labels).float().mean().item()


def test_trainer_fine_tunes_a_classifier(tmp_path):
    model = tiny_classifier(num_labels=2, classifier_pooling="mean")
    train, held_out = ToyTask(256, seed=0), ToyTask(64, seed=1)
    before = accuracy(model, held_out)
    arguments = TrainingArguments(
        output_dir=str(tmp_path),
        max_steps=30,
        per_device_train_batch_size=16,
        learning_rate=3e-3,
        logging_steps=5,
        save_strategy="no",
        report_to="none",
        disable_tqdm=True,
        use_cpu=True,
        seed=0,
    )
    trainer = Trainer(model=model.train(), args=arguments, train_dataset=train)
    trainer.train()
    losses = [entry["loss"] for entry in trainer.state.log_history if "loss" in entry]
    assert losses[-1] < 0.5 * losses[0], losses
    assert accuracy(model, held_out) > max(before, 0.9)


SENTENCES = ["a small dog runs home", "two big cats sleep", "the red bird sings", "one old man walks slowly"] * 5


def test_pipelines_read_labels_from_id2label(tmp_path):
    tokenizer = train_tokenizer(SENTENCES, vocab_size=300)
    tokenizer.save_pretrained(tmp_path / "sequence")
    tokenizer.save_pretrained(tmp_path / "tokens")
    vocab_size = len(tokenizer)
    sentence_labels = {0: "NEGATIVE", 1: "POSITIVE"}
    tiny_classifier(vocab_size=vocab_size, id2label=sentence_labels).save_pretrained(tmp_path / "sequence")
    token_labels = {0: "B-ANIMAL", 1: "I-ANIMAL", 2: "B-PLACE"}  # no "O": the pipeline leaves out tokens labelled O
    tagger = tiny_classifier(VanillaTransformerForTokenClassification, vocab_size=vocab_size, id2label=token_labels)
    tagger.save_pretrained(tmp_path / "tokens")

    classify = pipeline("text-classification", model=str(tmp_path / "sequence"), tokenizer=str(tmp_path / "sequence"))
    (result,) = classify("a small bird sings")
    with torch.no_grad():
        logits = classify.model(**tokenizer("a small bird sings", return_tensors="pt")).logits[0]
    assert result["label"] == sentence_labels[int(logits.argmax())]

    tag = pipeline("token-classification", model=str(tmp_path / "tokens"), tokenizer=str(tmp_path / "tokens"))
    entities = tag("two old cats walk home")
    encoded = tokenizer("two old cats walk home", return_tensors="pt")
    with torch.no_grad():
        predicted = tagger(**encoded).logits[0].argmax(-1)
    words = encoded.input_ids.shape[1] - 1  # every token but the closing </s>
    assert [entity["entity"] for entity in entities] == [token_labels[int(i)] for i in predicted[:words]]


def test_invalid_classifier_switches_are_refused_naming_the_field():
    with pytest.raises(
        StrictDataclassError, match=r"classifier_pooling='max' is invalid: allowed values are first, mean"
    ):
        tiny_config(classifier_pooling="max")
    with pytest.raises(StrictDataclassError, match=r"classifier_dropout=1\.5 is invalid"):
        tiny_config(classifier_dropout=1.5)


def test_classifier_dropout_defaults_to_dropout():
    assert tiny_classifier(dropout=0.2).classifier.dropout.p == 0.2
    assert tiny_classifier(dropout=0.2, classifier_dropout=0.0).classifier.dropout.p == 0.0


def test_a_misspelled_keyword_of_a_classifier_names_the_one_meant():
    model = tiny_classifier(num_labels=2)
    with pytest.raises(TypeError, match="did you mean 'labels'"):
        model(input_ids=random_tokens(1, 4, seed=8), lables=torch.tensor([1]))
