"""The model card: valid metadata with the measured results, the real figures in the text, no unfilled placeholders."""

import importlib.metadata
import json
import socket
from pathlib import Path

import pytest
import yaml
from huggingface_hub import ModelCard, ModelCardData

import vanilla_transformer.hub.model_card as model_card
from vanilla_transformer import VanillaTransformerConfig
from vanilla_transformer.hub.model_card import ModelCardResults, find_template, render_model_card, save_model_card
from vanilla_transformer.training.evaluation import corpus_scores

RESULTS = ModelCardResults(
    source_lang="de",
    target_lang="en",
    dataset="bentrevett/multi30k",
    split="test_2016_flickr",
    num_beams=5,
    bleu=38.2,
    bleu_lowercased=40.1,
    chrf=60.3,
    steps=12000,
    max_tokens=4096,
    learning_rate=7e-4,
    warmup_steps=4000,
    lr_scheduler_type="inverse_sqrt",
)


def config(**overrides):
    fields = dict(vocab_size=8000, d_model=256, encoder_layers=3, decoder_layers=4, encoder_ffn_dim=1024)
    return VanillaTransformerConfig(**{**fields, **overrides})


def render(results=RESULTS, repo_id="me/vanilla-de-en", model_config=None):
    model_config = model_config or config(
        norm_placement="pre", position_embedding_type="rope", num_key_value_heads=2, activation_function="swiglu"
    )
    return render_model_card(model_config, results, repo_id=repo_id)


def front_matter(text: str) -> dict:
    assert text.startswith("---\n")
    return yaml.safe_load(text.split("---\n")[1])


def test_metadata_parses_and_holds_the_measured_results():
    card = render()
    metadata = front_matter(str(card))
    assert metadata["license"] == "apache-2.0"
    assert metadata["language"] == ["de", "en"]
    assert metadata["tags"] == ["translation", "transformer", "vanilla-transformer"]
    assert metadata["datasets"] == ["bentrevett/multi30k"]
    assert metadata["metrics"] == ["bleu", "chrf"]
    assert metadata["pipeline_tag"] == "translation" and metadata["library_name"] == "transformers"

    (entry,) = metadata["model-index"]
    assert entry["name"] == "vanilla-de-en"
    (result,) = entry["results"]
    assert result["task"]["type"] == "translation"
    assert result["dataset"] == {
        "name": "bentrevett/multi30k (de-en)",
        "type": "bentrevett/multi30k",
        "split": "test_2016_flickr",
    }
    scores = {metric["name"]: (metric["type"], metric["value"]) for metric in result["metrics"]}
    assert scores == {
        "sacreBLEU (cased, 13a)": ("sacrebleu", 38.2),
        "BLEU4 (lowercased, 13a-tokenized)": ("bleu", 40.1),
        "chrF": ("chrf", 60.3),
    }

    # huggingface_hub reads the same metadata back, model-index included
    data = ModelCard(str(card)).data
    assert isinstance(data, ModelCardData)
    assert [(r.metric_type, r.metric_value, r.dataset_split) for r in data.eval_results] == [
        ("sacrebleu", 38.2, "test_2016_flickr"),
        ("bleu", 40.1, "test_2016_flickr"),
        ("chrf", 60.3, "test_2016_flickr"),
    ]


def test_the_text_carries_the_real_figures_and_no_placeholders():
    text = render().text
    assert "{{" not in text and "{%" not in text and "}}" not in text
    for row in ("| sacreBLEU (cased, 13a) | 38.2 |", "| BLEU4 (lowercased, 13a-tokenized) | 40.1 |", "| chrF | 60.3 |"):
        assert row in text
    assert "test_2016_flickr" in text and "5 beams" in text
    # the architecture table from the config, beside the paper's base model
    for row in (
        "| d_model | 256 | 512 |",
        "| layers (encoder / decoder) | 3 / 4 | 6 / 6 |",
        "| attention | grouped-query (2 key/value heads) | multi-head |",
        "| d_ff (encoder / decoder) | 1024 / 2048 | 2048 / 2048 |",
        "| activation | swiglu | relu |",
        "| norm placement | pre-LN | post-LN (paper) |",
        "| positions | rotary (theta 10000) | sinusoidal |",
    ):
        assert row in text
    # the training recipe
    for row in (
        "| optimizer steps | 12000 |",
        "| tokens per micro-batch and process (source + target) | 4096 |",
        "| peak learning rate | 0.0007 |",
    ):
        assert row in text
    assert "| warm-up steps | 4000 |" in text and "| learning-rate schedule | inverse_sqrt |" in text
    # usage with and without the package, for this repo
    assert 'load_for_translation("me/vanilla-de-en")' in text
    assert 'AutoModelForSeq2SeqLM.from_pretrained("me/vanilla-de-en", trust_remote_code=True)' in text
    assert 'AutoTokenizer.from_pretrained("me/vanilla-de-en")' in text
    assert "German → English" in text and "## Limitations and bias" in text
    assert "Multi30k is image descriptions" in text
    assert "M parameters" in text


def test_a_card_without_results_or_hub_ids_is_still_valid():
    learned = config(position_embedding_type="learned", max_position_embeddings=256)
    card = render(ModelCardResults("de", "en", dataset="/data/my corpus"), repo_id=None, model_config=learned)
    metadata = front_matter(str(card))
    assert "model-index" not in metadata and "datasets" not in metadata  # a local path is no Hub dataset id
    assert ModelCard(str(card)).data.eval_results is None
    text = card.text
    assert "not been evaluated" in text and "No training details" in text and "{{" not in text
    assert "Inputs longer than 256 tokens" in text and '"path/to/model-folder"' in text


def test_save_model_card_writes_readme_from_the_folder(tmp_path):
    config(encoder_layers=2).save_pretrained(tmp_path)
    (tmp_path / "generation_config.json").write_text(json.dumps({"num_beams": 4, "max_new_tokens": 77}))
    path = save_model_card(tmp_path, ModelCardResults("en", "fr", bleu=12.5, steps=10))
    assert path == tmp_path / "README.md"
    card = ModelCard.load(path)
    assert card.data.language == ["en", "fr"] and card.data.eval_results[0].metric_value == 12.5
    assert "| layers (encoder / decoder) | 2 / 4 |" in card.text and "| optimizer steps | 10 |" in card.text
    assert "num_beams=4, max_new_tokens=77" in card.text and "English → French" in card.text


def test_the_template_is_a_file_of_the_package_that_renders_it(tmp_path, monkeypatch):
    package_template = Path(model_card.__file__).resolve().parent / "model_card.md"
    assert find_template() == package_template
    assert package_template.is_file() and not package_template.is_symlink()

    package = tmp_path / "site-packages" / "vanilla_transformer" / "hub"
    package.mkdir(parents=True)
    (package / "model_card.md").write_text("---\n{{ card_data }}\n---\n\n# {{ model_name }}\n")
    monkeypatch.setattr(model_card.resources, "files", lambda name: package)
    assert find_template() == package / "model_card.md"
    assert render(repo_id="me/x").text.strip() == "# x"

    (package / "model_card.md").unlink()
    with pytest.raises(FileNotFoundError, match="model_card.md"):
        find_template()


def _hub_reachable() -> bool:
    try:
        socket.create_connection(("huggingface.co", 443), timeout=3).close()
    except OSError:
        return False
    return True


def test_jinja2_is_a_declared_dependency_so_every_output_folder_gets_its_card():
    requirements = importlib.metadata.requires("vanilla-transformer")
    assert any(requirement.split(">")[0].strip().lower() == "jinja2" for requirement in requirements)


def test_the_card_names_each_score_as_the_evaluation_does():
    scores = corpus_scores(["ein Hund läuft ."], ["ein Hund rennt ."])
    fields = [score.name for score, _ in ModelCardResults("en", "de", **scores).rows("score")]
    assert fields and set(fields) == set(scores)  # every score has a row, and every row is a score


@pytest.mark.skipif(not _hub_reachable(), reason="card.validate() asks the Hub; it is not reachable")
def test_the_hub_accepts_the_card():
    render().validate()
