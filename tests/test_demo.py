"""The offline demo, shrunk: it trains, scores held-out numbers, and leaves a folder that translates."""

import pytest
from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

from vanilla_transformer.demo import run_demo
from vanilla_transformer.inference.translate import translate


def test_demo_trains_scores_held_out_numbers_and_saves_a_working_folder(tmp_path, capsys):
    results = run_demo(tmp_path / "demo", minutes=0.15, train_size=400, test_size=20, max_value=9999, examples=3)
    printed = capsys.readouterr().out
    assert "held-out numbers translated exactly:" in printed
    assert results["held_out_examples"] == 20
    assert 0.0 <= results["held_out_accuracy"] <= 1.0
    assert f"{round(results['held_out_accuracy'] * 20)}/20" in printed
    model = AutoModelForSeq2SeqLM.from_pretrained(tmp_path / "demo")
    tokenizer = AutoTokenizer.from_pretrained(tmp_path / "demo")
    assert tokenizer.convert_ids_to_tokens(tokenizer("forty-two")["input_ids"])[:3] == ["▁forty", "-", "two"]
    assert len(translate(model, tokenizer, ["seven", ""], num_beams=1)) == 2
    assert (tmp_path / "demo" / "README.md").exists()
    # a second demo into the same folder is refused unless told to replace it
    with pytest.raises(ValueError, match=r"demo is not empty: pass --overwrite"):
        run_demo(tmp_path / "demo", minutes=0.15, train_size=400, test_size=20, max_value=9999)
