"""ONNX as an engine: `export onnx` writes the encoder and the decoder's two steps with their cache, each weight once;
ONNX Runtime's logits are the model's, its greedy and beam translations generate()'s, int8 stays within a stated
BLEU; every switch an ONNX graph can express exports exactly, the one it cannot is refused by name; the commands."""

import importlib.util
import json
import shutil
import sys
from pathlib import Path

import pytest
import sacrebleu
import torch
from helpers import NUMBER_SPLITS, error_line, tiny_config, tokenizer_ids, truncate

from vanilla_transformer import VanillaTransformerForConditionalGeneration
from vanilla_transformer.cli import main
from vanilla_transformer.common.model_folder import ONNX_GRAPH_FILES, ONNX_WEIGHTS_FILE
from vanilla_transformer.common.onnx_files import ONNX_FILES
from vanilla_transformer.export import export_onnx, unsupported_onnx_switches
from vanilla_transformer.export.onnx_export import load_exportable
from vanilla_transformer.inference import load_for_translation, load_onnx, translate
from vanilla_transformer.lexical_shortlist import SHORTLIST_FILE, LexicalShortlist
from vanilla_transformer.tokenization import tokenizer_identity, train_tokenizer

pytest.importorskip("onnxruntime", reason='the ONNX engine is optional: pip install ".[onnx]"')
pytest.importorskip("onnxscript", reason='the ONNX export is optional: pip install ".[onnx]"')

# German number words -> English, as tests/test_ctranslate2.py
SPLITS = NUMBER_SPLITS  # the held-out numbers of the model conftest trains
HELD_OUT = [german for _, german in SPLITS["test"]]
REFERENCES = [english for english, _ in SPLITS["test"]]
# an int8 export may lose this much BLEU against its float32 original on the held-out set (measured: 0.0)
INT8_BLEU_TOLERANCE = 1.0


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
    folder = Path(shutil.copytree(numbers_de_en, tmp_path_factory.mktemp("trained") / "numbers"))
    (folder / "README.md").write_text("---\nlanguage: [de, en]\n---\n# numbers\n")
    return folder


@pytest.fixture(scope="module")
def exported(trained_folder, tmp_path_factory):
    return export_onnx(trained_folder, tmp_path_factory.mktemp("onnx") / "float32")


@pytest.fixture(scope="module")
def exported_int8(trained_folder, tmp_path_factory):
    """Written by the command, as a user would."""
    output = tmp_path_factory.mktemp("onnx") / "int8"
    assert main(["export", "onnx", str(trained_folder), str(output), "--quantize", "int8"]) == 0
    return output


def bleu(hypotheses) -> float:
    return sacrebleu.corpus_bleu(hypotheses, [REFERENCES]).score


def test_logits_are_the_models_with_padding_in_the_batch(trained_folder, exported, tokenizer):
    model, _ = load_for_translation(trained_folder)
    engine, _ = load_onnx(exported)
    sources = tokenizer(HELD_OUT[:4], padding=True, return_tensors="pt")
    assert (sources["attention_mask"] == 0).any()  # padding in the batch
    targets = tokenizer(REFERENCES[:4], padding=True, return_tensors="pt")["input_ids"]
    assert stepwise_difference(model, engine, sources, model.prepare_decoder_input_ids_from_labels(targets)) < 1e-4


def stepwise_difference(model, engine, sources, decoder_input_ids) -> float:
    """The largest difference between each step's logits of ONNX Runtime, the cache carried from step to step, and
    one teacher-forced pass of the PyTorch model."""
    with torch.no_grad():
        expected = model(**sources, decoder_input_ids=decoder_input_ids).logits
    encoded = engine.get_encoder()(**sources)
    cache, steps = None, []
    for position in range(decoder_input_ids.shape[1]):
        output = engine(
            attention_mask=sources["attention_mask"],
            decoder_input_ids=decoder_input_ids[:, : position + 1],
            encoder_outputs=encoded,
            cache=cache,
        )
        cache = output.cache
        steps.append(output.logits[:, -1])
    return float((torch.stack(steps, dim=1) - expected).abs().max())


def test_greedy_and_beam_translations_are_generates(trained_folder, exported):
    model, tokenizer = load_for_translation(trained_folder)
    engine, _ = load_onnx(exported)
    for beams in (1, 4):
        ours = translate(model, tokenizer, HELD_OUT, num_beams=beams, max_new_tokens=24)
        assert bleu(ours) > 90  # the model is trained: equal outputs are not just equal noise
        assert translate(engine, tokenizer, HELD_OUT, num_beams=beams, max_new_tokens=24) == ours, beams


def test_the_greedy_loop_gives_generates_tokens_and_other_settings_go_to_generate(trained_folder, exported):
    """Plain greedy decoding skips generate()'s loop (onnx_engine.py): its tokens are generate()'s, padding, minimum
    length and early end included; a setting with a logits processor is generate()'s own."""
    from transformers import GenerationMixin

    engine, tokenizer = load_onnx(exported)
    inputs = tokenizer(HELD_OUT[:6], padding=True, return_tensors="pt")
    for settings in (dict(max_new_tokens=24), dict(max_new_tokens=12, min_new_tokens=9), dict(max_new_tokens=2)):
        assert engine._plain_greedy_settings(None, {**inputs, **settings}) is not None
        ours = engine.generate(**inputs, num_beams=1, **settings)
        expected = GenerationMixin.generate(engine, **inputs, num_beams=1, **settings)
        assert torch.equal(ours, expected), settings
    # without a mask or a length limit generate() derives them (from the padding, from its default): its own loop
    for leaving_out in ("attention_mask", "max_new_tokens"):
        settings = {**inputs, "max_new_tokens": 12}
        del settings[leaving_out]
        assert torch.equal(engine.generate(**settings), GenerationMixin.generate(engine, **settings)), leaving_out
    assert engine._plain_greedy_settings(None, {**inputs, "repetition_penalty": 1.3}) is None
    assert (
        engine._plain_greedy_settings(None, {**inputs, "output_scores": True, "return_dict_in_generate": True}) is None
    )


def test_each_weight_is_stored_once_and_int8_keeps_the_bleu(trained_folder, exported, exported_int8):
    weights = (trained_folder / "model.safetensors").stat().st_size
    # the tied embedding is read by the encoder, both decoder steps and the generator (transposed), the decoder by
    # both steps: written naively, the weights would be 2.5x the model's file
    assert (exported / ONNX_WEIGHTS_FILE).stat().st_size <= 1.01 * weights
    float32 = sum((exported / name).stat().st_size for name in (*ONNX_GRAPH_FILES, ONNX_WEIGHTS_FILE))
    int8 = sum((exported_int8 / name).stat().st_size for name in (*ONNX_GRAPH_FILES, ONNX_WEIGHTS_FILE))
    assert (exported_int8 / ONNX_WEIGHTS_FILE).stat().st_size <= 0.3 * (exported / ONNX_WEIGHTS_FILE).stat().st_size
    assert int8 < float32
    assert json.loads((exported_int8 / "onnx_export.json").read_text())["quantization"] == "int8"
    engine, tokenizer = load_onnx(exported)
    quantized, _ = load_onnx(exported_int8)
    for beams in (1, 4):
        reference = bleu(translate(engine, tokenizer, HELD_OUT, num_beams=beams, max_new_tokens=24))
        score = bleu(translate(quantized, tokenizer, HELD_OUT, num_beams=beams, max_new_tokens=24))
        assert abs(score - reference) <= INT8_BLEU_TOLERANCE, (beams, reference, score)


# every switch ONNX can express, each value in one combination or more (the paper's switches: the trained model
# above); random weights, so the logits are compared step by step and the searches by their ids
EXPRESSIBLE = {
    "pre-rope-ntk-rmsnorm-gqa-swiglu-sliding": dict(
        norm_placement="pre",
        position_embedding_type="rope",
        rope_parameters={"rope_type": "ntk", "factor": 4.0},
        norm_type="rmsnorm",
        num_key_value_heads=2,
        activation_function="swiglu",
        sliding_window=3,
    ),
    "alibi-mqa-geglu-learned-residuals-marian": dict(
        position_embedding_type="alibi",
        num_key_value_heads=1,
        activation_function="geglu",
        residual_scaling="learned",
        final_logits_bias=True,
        decoder_vocab_size=None,  # set below: the tokenizer's size plus five
        share_encoder_decoder_embeddings=False,
    ),
    "learned-rope-linear-untied-gelu-rezero": dict(
        position_embedding_type="learned",
        tie_word_embeddings=False,
        share_encoder_decoder_embeddings=False,
        activation_function="gelu",
        residual_scaling="rezero",
        scale_embedding=False,
    ),
    "rope-linear-silu-sines-then-cosines": dict(
        position_embedding_type="rope",
        rope_parameters={"rope_type": "linear", "factor": 2.0},
        activation_function="silu",
        decoder_attention_heads=2,
    ),
    "marian-sinusoids": dict(sinusoid_layout="sines_then_cosines", final_logits_bias=True, sliding_window=4),
}


@pytest.mark.parametrize("switches", EXPRESSIBLE.values(), ids=EXPRESSIBLE.keys())
def test_every_expressible_switch_exports_exactly(switches, tokenizer, tmp_path):
    switches = dict(switches)
    if "decoder_vocab_size" in switches:
        switches["decoder_vocab_size"] = len(tokenizer) + 5
    config = tiny_config(
        **tokenizer_ids(tokenizer),
        **switches,
    )
    torch.manual_seed(0)
    model = VanillaTransformerForConditionalGeneration(config).eval()
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if name.endswith("residual.scale"):
                parameter.fill_(0.7)  # neither 1 nor 0
        if config.final_logits_bias:
            model.final_logits_bias.normal_(generator=torch.Generator().manual_seed(1))
    model.save_pretrained(tmp_path / "model")
    tokenizer.save_pretrained(tmp_path / "model")
    engine, _ = load_onnx(export_onnx(tmp_path / "model", tmp_path / "onnx"))
    sources = tokenizer(HELD_OUT[:6], padding=True, return_tensors="pt")
    # 12 decoder steps: past the sliding windows, so that the cache slides
    decoder_input_ids = torch.randint(5, len(tokenizer), (6, 12), generator=torch.Generator().manual_seed(2))
    decoder_input_ids[:, 0] = config.decoder_start_token_id
    assert stepwise_difference(model, engine, sources, decoder_input_ids) < 1e-4
    for beams in (1, 3):
        with torch.no_grad():
            ours = model.generate(**sources, num_beams=beams, max_new_tokens=12, min_new_tokens=12)
        assert torch.equal(engine.generate(**sources, num_beams=beams, max_new_tokens=12, min_new_tokens=12), ours)


def test_a_switch_onnx_lacks_is_refused_by_name_before_anything_is_written(tokenizer, tmp_path, capsys):
    switches = dict(position_embedding_type="rope", rope_parameters={"rope_type": "dynamic", "factor": 2.0})
    assert any("rope_type='dynamic'" in problem for problem in unsupported_onnx_switches(tiny_config(**switches)))
    VanillaTransformerForConditionalGeneration(tiny_config(vocab_size=len(tokenizer), **switches)).save_pretrained(
        tmp_path / "model"
    )
    tokenizer.save_pretrained(tmp_path / "model")
    capsys.readouterr()
    assert main(["export", "onnx", str(tmp_path / "model"), str(tmp_path / "onnx")]) == 2
    error = capsys.readouterr().err
    assert error.startswith("vanilla-transformer export: error: ONNX cannot express") and "rope_type='dynamic'" in error
    assert len(error.strip().splitlines()) == 1
    assert not (tmp_path / "onnx").exists()


def test_the_commands_translate_with_the_onnx_engine_as_with_pytorch(trained_folder, exported_int8, tmp_path, capsys):
    source = tmp_path / "source.de"
    source.write_text("\n".join([HELD_OUT[0], "", *HELD_OUT[1:5]]) + "\n")
    translations = {}
    for engine, folder in (("pytorch", trained_folder), ("onnx", exported_int8)):
        path = tmp_path / f"{engine}.en"
        argv = ["translate", "--engine", engine, "--model", str(folder), "--input", str(source), "--output", str(path)]
        assert main([*argv, "--num-beams", "1"]) == 0
        translations[engine] = path.read_text().split("\n")
    assert translations["onnx"][1] == "" and len(translations["onnx"]) == 7  # 6 lines and the final newline
    # int8 against float32 PyTorch: the numbers are learned well enough that both translate them alike
    assert translations["onnx"] == translations["pytorch"]
    capsys.readouterr()
    for argv, said in (
        (["--model", str(trained_folder)], "is no ONNX export of ours"),
        (["--model", str(exported_int8), "--quantize", "int8"], "export onnx FOLDER OUT --quantize int8"),
        (["--model", str(exported_int8), "--shortlist"], "--shortlist takes the pytorch engine"),
    ):
        assert main(["translate", "--engine", "onnx", *argv, "--input", str(source)]) == 2
        error = capsys.readouterr().err.strip()
        assert said in error and len(error.splitlines()) == 1


def test_translate_corpus_takes_the_onnx_engine(exported, trained_folder, tmp_path, capsys):
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    for split, pairs in (("train", SPLITS["test"][:6]), ("validation", SPLITS["test"][6:8])):
        (corpus / f"{split}.de").write_text("".join(german + "\n" for _, german in pairs))
        (corpus / f"{split}.en").write_text("".join(english + "\n" for english, _ in pairs))
    argv = ["translate-corpus", "--model", str(exported), "--output_dir", str(tmp_path / "out"), "--dataset",
            str(corpus), "--source_lang", "de", "--target_lang", "en", "--test_split", "", "--engine", "onnx",
            "--num_beams", "1", "--disable_progress_bar"]  # fmt: skip
    assert main(argv) == 0, capsys.readouterr().err
    model, tokenizer = load_for_translation(trained_folder)
    sources = [german for _, german in SPLITS["test"][:6]]
    written = (tmp_path / "out" / "train.en").read_text().splitlines()
    assert written == translate(model, tokenizer, sources, num_beams=1)


def test_without_onnxruntime_each_command_names_the_extra_in_one_line(exported, trained_folder, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "onnxruntime", None)
    with pytest.raises(ImportError, match=r'pip install "vanilla-transformer\[onnx\]"'):
        load_onnx(exported)
    source = exported.parent / "source.txt"
    source.write_text(HELD_OUT[0] + "\n")
    for argv in (
        ["export", "onnx", str(trained_folder), str(exported.parent / "other")],
        ["translate", "--engine", "onnx", "--model", str(exported), "--input", str(source)],
    ):
        assert main(argv) == 2
        error = capsys.readouterr().err.strip()
        assert error.endswith('pip install "vanilla-transformer[onnx]" (--debug shows the traceback)'), error
        assert len(error.splitlines()) == 1


# --- an export where a model folder or another engine's export is expected; an export's file cut short ---


@pytest.fixture(scope="module")
def exports(trained_folder, exported, tmp_path_factory) -> dict[str, Path]:
    """The trained folder's exports by the engine that runs each (CTranslate2's where it is installed)."""
    written = {"onnx": exported}
    if importlib.util.find_spec("ctranslate2") is not None:
        from vanilla_transformer.export import export_ctranslate2

        written["ctranslate2"] = export_ctranslate2(trained_folder, tmp_path_factory.mktemp("ct2") / "ct2")
    return written


def file_sizes(folder: Path) -> dict[str, int]:
    return {path.name: path.stat().st_size for path in folder.iterdir()}


TRANSLATE = ["--input", "{tmp}/in.txt", "--output", "{tmp}/out"]
EXPORT_KINDS = {"onnx": "an ONNX export", "ctranslate2": "a CTranslate2 export"}
PASS_ENGINE = {
    engine: "--model {export} is " + f"{kind} (`export {engine}` wrote it): pass --engine {engine}"
    for engine, kind in EXPORT_KINDS.items()
}
NOT_A_MODEL_FOLDER = {
    engine: "{export} is " + f"{kind} (`export {engine}` wrote it), not a model folder: give the trained model folder "
    "it was exported from"
    for engine, kind in EXPORT_KINDS.items()
}


@pytest.mark.parametrize(
    ("engine", "argv", "message"),
    [
        pytest.param("onnx", ["translate", "--model", "{export}", *TRANSLATE], PASS_ENGINE["onnx"],
                     id="translate-onnx"),
        pytest.param("ctranslate2", ["translate", "--model", "{export}", *TRANSLATE], PASS_ENGINE["ctranslate2"],
                     id="translate-ctranslate2"),
        pytest.param("onnx", ["translate", "--engine", "ctranslate2", "--model", "{export}", *TRANSLATE],
                     PASS_ENGINE["onnx"], id="translate-engine-ctranslate2-onnx"),
        pytest.param("ctranslate2", ["translate", "--engine", "onnx", "--model", "{export}", *TRANSLATE],
                     PASS_ENGINE["ctranslate2"], id="translate-engine-onnx-ctranslate2"),
        pytest.param("onnx", ["translate-corpus", "--model", "{export}", "--output_dir", "{tmp}/out", "--dataset",
                              "{tmp}", "--source_lang", "de", "--target_lang", "en"],
                     PASS_ENGINE["onnx"], id="translate-corpus-onnx"),
        pytest.param("onnx", ["export", "onnx", "{export}", "{tmp}/out", "--quantize", "int8"],
                     NOT_A_MODEL_FOLDER["onnx"], id="export-onnx-onnx"),
        pytest.param("ctranslate2", ["export", "onnx", "{export}", "{tmp}/out"], NOT_A_MODEL_FOLDER["ctranslate2"],
                     id="export-onnx-ctranslate2"),
        pytest.param("onnx", ["export", "ctranslate2", "{export}", "{tmp}/out"], NOT_A_MODEL_FOLDER["onnx"],
                     id="export-ctranslate2-onnx"),
        pytest.param("ctranslate2", ["export", "web", "{export}", "{tmp}/out"], NOT_A_MODEL_FOLDER["ctranslate2"],
                     id="export-web-ctranslate2"),
        pytest.param("onnx", ["push", "{export}", "--repo-id", "me/numbers"], NOT_A_MODEL_FOLDER["onnx"],
                     id="push-onnx"),
        pytest.param("ctranslate2", ["push", "{export}", "--repo-id", "me/numbers", "--dry-run"],
                     NOT_A_MODEL_FOLDER["ctranslate2"], id="push-dry-run-ctranslate2"),
    ],
)  # fmt: skip
def test_an_export_where_it_does_not_belong_is_named_with_what_to_pass_and_nothing_is_written(
    exports, tmp_path, capsys, engine, argv, message
):
    if engine not in exports:
        pytest.skip('CTranslate2 is optional: pip install ".[ct2]"')
    export = exports[engine]
    before = file_sizes(export)
    (tmp_path / "in.txt").write_text(HELD_OUT[0] + "\n")
    argv = [argument.replace("{export}", str(export)).replace("{tmp}", str(tmp_path)) for argument in argv]
    capsys.readouterr()
    assert main(argv) == 2
    expected = message.replace("{export}", str(export))
    said = error_line(capsys, argv[0])
    assert said == f"vanilla-transformer {argv[0]}: error: {expected} (--debug shows the traceback)"
    assert not (tmp_path / "out").exists()
    assert file_sizes(export) == before


def older_export(exported: Path, folder: Path) -> Path:
    """A copy of `exported` as an export from before the sizes were recorded: its manifest lists the files' names."""
    older = Path(shutil.copytree(exported, folder))
    info = json.loads((older / "onnx_export.json").read_text())
    (older / "onnx_export.json").write_text(json.dumps({**info, "files": list(info["files"])}))
    return older


@pytest.mark.parametrize("manifest", ["sizes", "older"], ids=["sizes-recorded", "older-export"])
@pytest.mark.parametrize(
    "argv",
    [["translate", "--engine", "onnx", "--model", "{export}", *TRANSLATE], ["export", "web", "{export}", "{tmp}/out"]],
    ids=["translate", "export-web"],
)
def test_an_onnx_weights_file_cut_short_is_named_with_its_size_and_nothing_is_written(
    exported, tmp_path, capsys, manifest, argv
):
    """An interrupted copy: ONNX Runtime would name a graph and an initializer's offset, and a page would fail in the
    browser. An export from before the sizes were recorded is checked against the offsets its graphs read."""
    info = json.loads((exported / "onnx_export.json").read_text())
    assert info["files"] == {name: size for name, size in file_sizes(exported).items() if name in ONNX_FILES}
    copy = older_export if manifest == "older" else shutil.copytree
    damaged = Path(copy(exported, tmp_path / "damaged"))
    weights = damaged / ONNX_WEIGHTS_FILE
    full = weights.stat().st_size
    truncate(weights)
    (tmp_path / "in.txt").write_text(HELD_OUT[0] + "\n")
    argv = [argument.replace("{export}", str(damaged)).replace("{tmp}", str(tmp_path)) for argument in argv]
    capsys.readouterr()
    assert main(argv) == 2
    expected = "and the export wrote" if manifest == "sizes" else "and decoder_model.onnx reads up to byte"
    assert error_line(capsys, argv[0]) == (
        f"vanilla-transformer {argv[0]}: error: {weights} is corrupt or truncated (it holds {full // 2:,} bytes, "
        f"{expected} {full:,}): copy the export again, or write it again with vanilla-transformer export onnx FOLDER "
        "OUTPUT (--debug shows the traceback)"
    )
    assert not (tmp_path / "out").exists()


def test_an_export_from_before_the_sizes_were_recorded_still_translates(exported, tmp_path):
    older = older_export(exported, tmp_path / "older")
    engine, tokenizer = load_onnx(exported)
    expected = translate(engine, tokenizer, HELD_OUT[:2], num_beams=1, max_new_tokens=24)
    engine, tokenizer = load_onnx(older)
    assert translate(engine, tokenizer, HELD_OUT[:2], num_beams=1, max_new_tokens=24) == expected


def test_a_shortlist_of_another_tokenizer_stops_the_export_by_name(trained_folder, tokenizer, tmp_path, capsys):
    """The export carries the folder's shortlist: one built with another tokenizer would travel with it unnoticed
    (`export ctranslate2` refused it already)."""
    folder = Path(shutil.copytree(trained_folder, tmp_path / "model"))
    size = len(tokenizer)

    def write_shortlist(identity: str) -> None:
        candidates = torch.full((size, 2), -1, dtype=torch.int32)
        always = torch.tensor([0, 1, 2], dtype=torch.int32)
        LexicalShortlist(candidates, always, {"target_vocab_size": size, "tokenizer": identity}).save(
            folder / SHORTLIST_FILE
        )

    write_shortlist(tokenizer_identity(tokenizer))
    load_exportable(folder)  # its own tokenizer's: taken
    write_shortlist("another:0")
    capsys.readouterr()
    assert main(["export", "onnx", str(folder), str(tmp_path / "onnx")]) == 2
    assert error_line(capsys, "export") == (
        f"vanilla-transformer export: error: {folder / SHORTLIST_FILE}: the shortlist was built for tokenizer "
        f"another:0, and the model {folder} has tokenizer {tokenizer_identity(tokenizer)}: build it again for this "
        "model (vanilla-transformer shortlist) (--debug shows the traceback)"
    )
    assert not (tmp_path / "onnx").exists()
