"""CTranslate2 as an engine: `export ctranslate2` writes our folders in its format, `translate --engine ctranslate2`
reads them; a trained model's translations are the same as ours, int8 stays within a stated BLEU; int8 PyTorch."""

import shutil
import sys
from pathlib import Path

import pytest
import sacrebleu
import torch
from helpers import NUMBER_SPLITS, tiny_config, tokenizer_ids

from vanilla_transformer import VanillaTransformerForConditionalGeneration
from vanilla_transformer.cli import main
from vanilla_transformer.export import export_ctranslate2, unsupported_switches
from vanilla_transformer.inference import load_ctranslate2, load_for_translation, translate
from vanilla_transformer.tokenization import train_tokenizer

ctranslate2 = pytest.importorskip("ctranslate2", reason='the CTranslate2 engine is optional: pip install ".[ct2]"')

# German number words -> English: the English side has several words, so BLEU means something
SPLITS = NUMBER_SPLITS  # the held-out numbers of the model conftest trains
HELD_OUT = [german for _, german in SPLITS["test"]]
REFERENCES = [english for english, _ in SPLITS["test"]]
# an int8 model may lose this much BLEU against its float32 original on the 50 held-out sentences: one sentence
# decoded otherwise costs about 2.5 (measured: 0.0 for PyTorch's int8; for CTranslate2's 0.0, then 2.5 once the
# loss was computed in blocks, whose float rounding alone trains this small model into slightly other weights)
INT8_BLEU_TOLERANCE = 3.0


@pytest.fixture(autouse=True, scope="module")
def one_thread():
    """torch's rounding depends on its thread count: translate on one thread, as the model was trained, so that what
    the tolerances below were measured on is what every machine and test worker computes."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def tokenizer():
    return train_tokenizer([sentence for pair in SPLITS["train"] for sentence in pair], vocab_size=400)


@pytest.fixture(scope="module")
def trained_folder(numbers_de_en, tmp_path_factory, one_thread):
    """A small model trained to translate the German numbers into English almost perfectly."""
    return Path(shutil.copytree(numbers_de_en, tmp_path_factory.mktemp("trained") / "numbers"))


@pytest.fixture(scope="module")
def exported(trained_folder, tmp_path_factory):
    return export_ctranslate2(trained_folder, tmp_path_factory.mktemp("ct2") / "float32")


def bleu(hypotheses) -> float:
    return sacrebleu.corpus_bleu(hypotheses, [REFERENCES]).score


def test_the_export_translates_as_the_model_does_greedy_and_beam(trained_folder, exported):
    model, tokenizer = load_for_translation(trained_folder)
    engine, _ = load_ctranslate2(exported, compute_type="float32")
    ours = translate(model, tokenizer, HELD_OUT, num_beams=1, max_new_tokens=24)
    assert bleu(ours) > 90  # the model is trained: equal outputs are not just equal noise
    assert translate(engine, tokenizer, HELD_OUT, num_beams=1, max_new_tokens=24) == ours
    # CTranslate2 ends a beam search once beam_size hypotheses are finished: transformers' early_stopping=True. With
    # transformers' default (False), which searches on while a running beam could still win, 1 of these 50 differs.
    model.generation_config.early_stopping = True
    for beams in (2, 4):
        ours = translate(model, tokenizer, HELD_OUT, num_beams=beams, max_new_tokens=24)
        theirs = translate(engine, tokenizer, HELD_OUT, num_beams=beams, max_new_tokens=24)
        # Two engines round differently: where our own model scores two beams within rounding of each other, either
        # may win (seen once, "thirty" against "thity", when the suite's other tests had changed torch's threads).
        differ = [index for index, (a, b) in enumerate(zip(ours, theirs, strict=True)) if a != b]
        assert len(differ) <= 1, (beams, [(ours[index], theirs[index]) for index in differ])
        for index in differ:
            scores = [
                mean_log_probability(model, tokenizer, HELD_OUT[index], text) for text in (ours[index], theirs[index])
            ]
            assert abs(scores[0] - scores[1]) < 0.05, (beams, ours[index], theirs[index], scores)


def mean_log_probability(model, tokenizer, source: str, translation: str) -> float:
    """What beam search ranks by (length penalty 1): the translation's log-probability per token under `model`."""
    labels = tokenizer([translation], return_tensors="pt")["input_ids"]
    with torch.no_grad():
        return -model(**tokenizer([source], return_tensors="pt"), labels=labels).loss.item()


@pytest.mark.parametrize("where", ["export", "load"])
def test_int8_stays_within_a_stated_bleu_of_float32(trained_folder, exported, tmp_path, where):
    engine, tokenizer = load_ctranslate2(exported, compute_type="float32")
    float32 = bleu(translate(engine, tokenizer, HELD_OUT, num_beams=4, max_new_tokens=24))
    if where == "export":
        engine, _ = load_ctranslate2(export_ctranslate2(trained_folder, tmp_path / "int8", quantization="int8"))
    else:
        engine, _ = load_ctranslate2(exported, compute_type="int8")
    int8 = bleu(translate(engine, tokenizer, HELD_OUT, num_beams=4, max_new_tokens=24))
    assert abs(int8 - float32) <= INT8_BLEU_TOLERANCE, (float32, int8)


def test_pytorch_int8_quantizes_every_linear_layer_and_keeps_the_bleu(trained_folder):
    model, tokenizer = load_for_translation(trained_folder)
    float32 = bleu(translate(model, tokenizer, HELD_OUT, num_beams=4, max_new_tokens=24))
    quantized, _ = load_for_translation(trained_folder, quantize="int8")
    assert not any(isinstance(module, torch.nn.Linear) for module in quantized.modules())
    int8 = bleu(translate(quantized, tokenizer, HELD_OUT, num_beams=4, max_new_tokens=24))
    assert abs(int8 - float32) <= INT8_BLEU_TOLERANCE, (float32, int8)
    with pytest.raises(ValueError, match="runs float32 models on the CPU, not torch.bfloat16"):
        load_for_translation(trained_folder, dtype="bfloat16", quantize="int8")


# every switch CTranslate2 can express, in combinations; random weights, so greedy and beam decide among close scores
EXPRESSIBLE = {
    "paper": {},
    "pre-rope-rmsnorm-gqa-swiglu": dict(
        norm_placement="pre",
        position_embedding_type="rope",
        norm_type="rmsnorm",
        num_key_value_heads=2,
        activation_function="swiglu",
    ),
    "learned-mqa-geglu-learned-residuals": dict(
        position_embedding_type="learned",
        num_key_value_heads=1,
        activation_function="geglu",
        residual_scaling="learned",
    ),
    "rope-linear-untied-gelu": dict(
        position_embedding_type="rope",
        rope_parameters={"rope_type": "linear", "factor": 2.0},
        share_encoder_decoder_embeddings=False,
        tie_word_embeddings=False,
        activation_function="gelu",
    ),
    "pre-rezero-silu-unscaled-two-decoder-heads": dict(
        norm_placement="pre",
        residual_scaling="rezero",
        activation_function="silu",
        scale_embedding=False,
        decoder_attention_heads=2,
    ),
}


@pytest.mark.parametrize("switches", EXPRESSIBLE.values(), ids=EXPRESSIBLE.keys())
def test_every_expressible_switch_exports_exactly(switches, tokenizer, tmp_path):
    config = tiny_config(
        **tokenizer_ids(tokenizer),
        **switches,
    )
    torch.manual_seed(0)
    model = VanillaTransformerForConditionalGeneration(config).eval()
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if name.endswith("residual.scale"):
                parameter.fill_(0.7)  # neither 1 nor 0: folding the scale into the projections is what is tested
    model.save_pretrained(tmp_path / "model")
    tokenizer.save_pretrained(tmp_path / "model")
    model.generation_config.early_stopping = True  # CTranslate2's way of ending a beam search (see above)
    engine, _ = load_ctranslate2(export_ctranslate2(tmp_path / "model", tmp_path / "ct2"), compute_type="float32")
    for beams in (1, 3):
        ours = translate(model, tokenizer, HELD_OUT[:16], num_beams=beams, max_new_tokens=10)
        assert translate(engine, tokenizer, HELD_OUT[:16], num_beams=beams, max_new_tokens=10) == ours, beams


@pytest.mark.parametrize(
    ("switches", "named"),
    [
        (dict(position_embedding_type="alibi"), "position_embedding_type='alibi'"),
        (
            dict(position_embedding_type="rope", rope_parameters={"rope_type": "ntk", "factor": 4.0}),
            "rope_type='ntk'",
        ),
        (dict(sliding_window=4), "sliding_window=4"),
    ],
)
def test_switches_ctranslate2_lacks_are_refused_by_name(switches, named, tokenizer, tmp_path, capsys):
    assert any(named in problem for problem in unsupported_switches(tiny_config(**switches)))
    model = VanillaTransformerForConditionalGeneration(tiny_config(vocab_size=len(tokenizer), **switches))
    model.save_pretrained(tmp_path / "model")
    tokenizer.save_pretrained(tmp_path / "model")
    capsys.readouterr()
    assert main(["export", "ctranslate2", str(tmp_path / "model"), str(tmp_path / "ct2")]) == 2
    error = capsys.readouterr().err
    assert error.startswith("vanilla-transformer export: error: CTranslate2 cannot express") and named in error
    assert len(error.strip().splitlines()) == 1
    assert not (tmp_path / "ct2").exists()


def test_the_commands_export_and_translate_with_the_same_lines(trained_folder, tmp_path, capsys, monkeypatch):
    source = tmp_path / "source.de"
    source.write_text("\n".join([HELD_OUT[0], "", *HELD_OUT[1:5]]) + "\n")
    output = tmp_path / "ct2"
    assert main(["export", "ctranslate2", str(trained_folder), str(output), "--quantization", "int8"]) == 0
    assert f"wrote {output} (CTranslate2, int8)" in capsys.readouterr().out
    assert main(["export", "ctranslate2", str(trained_folder), str(output)]) == 2
    assert "is not empty: choose a new folder, or pass --force" in capsys.readouterr().err
    translations = {}
    for engine, folder in (("pytorch", trained_folder), ("ctranslate2", output)):
        path = tmp_path / f"{engine}.en"
        argv = ["translate", "--engine", engine, "--model", str(folder), "--input", str(source), "--output", str(path)]
        assert main([*argv, "--quantize", "int8", "--num-beams", "1"]) == 0
        translations[engine] = path.read_text().split("\n")
    assert translations["ctranslate2"] == translations["pytorch"]
    assert translations["pytorch"][1] == "" and len(translations["pytorch"]) == 7  # 6 lines and the final newline
    assert main(["translate", "--engine", "ctranslate2", "--model", str(trained_folder), "--input", str(source)]) == 2
    assert "is no CTranslate2 export of ours" in capsys.readouterr().err


def test_without_ctranslate2_each_command_names_the_extra_in_one_line(exported, trained_folder, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "ctranslate2", None)
    with pytest.raises(ImportError, match=r'pip install "vanilla-transformer\[ct2\]"'):
        load_ctranslate2(exported)
    source = exported / "source.txt"
    source.write_text(HELD_OUT[0] + "\n")
    for argv in (
        ["export", "ctranslate2", str(trained_folder), str(exported.parent / "other")],
        ["translate", "--engine", "ctranslate2", "--model", str(exported), "--input", str(source)],
    ):
        assert main(argv) == 2
        error = capsys.readouterr().err.strip()
        assert error.endswith(
            'CTranslate2 is not installed: pip install "vanilla-transformer[ct2]" (--debug shows the traceback)'
        )
        assert len(error.splitlines()) == 1


def test_force_never_deletes_the_folder_it_exports(trained_folder, capsys):
    for output in (trained_folder, trained_folder.parent):
        assert main(["export", "ctranslate2", str(trained_folder), str(output), "--force"]) == 2
        assert "holds the model folder" in capsys.readouterr().err
    assert (trained_folder / "model.safetensors").is_file()


def test_a_translation_that_ends_at_once_is_empty_in_both_engines(tokenizer, tmp_path):
    """CTranslate2 forbids </s> as the first token unless told otherwise; generate() allows it."""
    config = tiny_config(vocab_size=len(tokenizer))
    model = VanillaTransformerForConditionalGeneration(config).eval()
    with torch.no_grad():
        model.lm_head.weight.zero_()  # tied: the embeddings too, so every logit is 0 ...
        model.model.shared.weight[config.eos_token_id] = 1.0  # ... but </s>'s, which every output makes positive
        for layer in (*model.model.encoder.layers, *model.model.decoder.layers):
            layer.feed_forward.down_proj.bias.fill_(1.0)
    model.save_pretrained(tmp_path / "model")
    tokenizer.save_pretrained(tmp_path / "model")
    ours = translate(model, tokenizer, HELD_OUT[:3], num_beams=1, max_new_tokens=5)
    engine, _ = load_ctranslate2(export_ctranslate2(tmp_path / "model", tmp_path / "ct2"))
    assert ours == ["", "", ""] and translate(engine, tokenizer, HELD_OUT[:3], num_beams=1, max_new_tokens=5) == ours
