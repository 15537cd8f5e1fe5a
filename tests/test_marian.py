"""Marian (opus-mt) checkpoints converted into our model compute what MarianMTModel computes.

Offline, each Marian model is built here from a config that mirrors a real opus-mt one, with random weights, a
non-zero final logits bias and a tiny SentencePiece model standing in for Marian's vocabulary files; the live test
converts Helsinki-NLP/opus-mt-en-de itself when the Hub answers.
"""

from __future__ import annotations

import json

import pytest
import torch
from helpers import run_without_our_package
from transformers import GenerationConfig, MarianConfig, MarianMTModel, MarianTokenizer

from vanilla_transformer import VanillaTransformerForConditionalGeneration
from vanilla_transformer.cli import main
from vanilla_transformer.convert import config_from_marian, convert_marian
from vanilla_transformer.demo.number_words import demo_splits
from vanilla_transformer.inference import load_for_translation, translate

sentencepiece = pytest.importorskip("sentencepiece", reason='Marian\'s tokenizer needs sentencepiece: ".[marian]"')

SPLITS = demo_splits(train_size=400, test_size=20, seed=3, max_value=99_999)
ENGLISH = [english for english, _ in SPLITS["train"]]
GERMAN = [german for _, german in SPLITS["train"]]
SOURCES = [english for english, _ in SPLITS["test"]][:6]
EOS, UNK = 0, 1  # opus-mt's: </s> first, <unk> second, <pad> the last row
# logits of the converted model against MarianMTModel's, float32
LOGIT_TOLERANCE = 1e-5
# opus-mt-en-de's config.json (its architecture; the generation settings are in GENERATION below)
OPUS_MT_EN_DE = dict(
    vocab_size=58101,
    decoder_vocab_size=58101,
    d_model=512,
    encoder_layers=6,
    decoder_layers=6,
    encoder_attention_heads=8,
    decoder_attention_heads=8,
    encoder_ffn_dim=2048,
    decoder_ffn_dim=2048,
    activation_function="swish",
    max_position_embeddings=512,
    scale_embedding=True,
    share_encoder_decoder_embeddings=True,
    dropout=0.1,
    attention_dropout=0.0,
    activation_dropout=0.0,
    init_std=0.02,
    eos_token_id=EOS,
    forced_eos_token_id=EOS,
)
REDUCED = dict(d_model=64, encoder_layers=2, decoder_layers=2, encoder_attention_heads=4, decoder_attention_heads=4,
               encoder_ffn_dim=128, decoder_ffn_dim=128)  # fmt: skip
SIZES = {
    # the reduced size, one vocabulary for both languages, as opus-mt-en-de
    "shared": dict(OPUS_MT_EN_DE, **REDUCED, vocab_size=301, decoder_vocab_size=301),
    # separate source and target vocabularies of their own sizes, embeddings not shared (as opus-mt-tc models)
    "separate": dict(
        OPUS_MT_EN_DE, **REDUCED, vocab_size=301, decoder_vocab_size=257, share_encoder_decoder_embeddings=False
    ),
}


def train_sentencepiece(sentences: list[str], path) -> list[str]:
    """A tiny unigram model at `path` (standing in for Marian's source.spm / target.spm); returns its pieces."""
    with open(path, "wb") as model_file:
        sentencepiece.SentencePieceTrainer.train(
            sentence_iterator=iter(sentences),
            model_writer=model_file,
            vocab_size=80,
            hard_vocab_limit=False,
            character_coverage=1.0,
            minloglevel=2,
        )
    processor = sentencepiece.SentencePieceProcessor(model_file=str(path))
    return [
        processor.id_to_piece(index) for index in range(processor.get_piece_size()) if not processor.is_control(index)
    ]


def marian_vocabulary(pieces: list[str], size: int, pad: int | None = None) -> dict[str, int]:
    """Marian's vocab.json: </s> 0, <unk> 1, the pieces, fillers up to `size` rows, and <pad> at `pad` (default: the
    last row, as opus-mt has it)."""
    tokens = ["</s>", "<unk>", *(piece for piece in dict.fromkeys(pieces) if piece not in ("<unk>", "</s>"))]
    tokens += [f"filler{index}" for index in range(size - 1 - len(tokens))]
    tokens.insert(size - 1 if pad is None else pad, "<pad>")
    return {token: index for index, token in enumerate(tokens)}


def build_marian_folder(folder, architecture: dict, seed: int = 0, train_steps: int = 0):
    """A MarianMTModel folder as the Hub holds one: weights, config, generation config, tokenizer, model card.
    `train_steps` of English -> German number words first, so that what it generates depends on the source (random
    weights with a tied generator repeat one token whatever the input)."""
    folder.mkdir(parents=True, exist_ok=True)
    separate = not architecture["share_encoder_decoder_embeddings"]
    source_pieces = train_sentencepiece(ENGLISH, folder / "source.spm")
    target_pieces = train_sentencepiece(GERMAN, folder / "target.spm")
    if separate:
        # one padding id for both vocabularies: the last row of the smaller one
        pad = min(architecture["vocab_size"], architecture["decoder_vocab_size"]) - 1
        source = marian_vocabulary(source_pieces, architecture["vocab_size"], pad)
        target = marian_vocabulary(target_pieces, architecture["decoder_vocab_size"], pad)
        (folder / "target_vocab.json").write_text(json.dumps(target))
    else:
        source = marian_vocabulary(source_pieces + target_pieces, architecture["vocab_size"])
        pad = len(source) - 1
    (folder / "vocab.json").write_text(json.dumps(source))
    tokenizer = MarianTokenizer(
        source_spm=str(folder / "source.spm"),
        target_spm=str(folder / "target.spm"),
        vocab=str(folder / "vocab.json"),
        target_vocab_file=str(folder / "target_vocab.json") if separate else None,
        separate_vocabs=separate,
    )
    config = MarianConfig(**architecture, pad_token_id=pad, decoder_start_token_id=pad, bos_token_id=EOS)
    torch.manual_seed(seed)
    marian = MarianMTModel(config).eval()
    with torch.no_grad():
        # a bias of zeros (its initial value) would leave the check blind to where it is added
        marian.final_logits_bias.normal_(std=0.05, generator=torch.Generator().manual_seed(seed))
    train(marian, tokenizer, train_steps)
    with torch.no_grad():  # as in every opus-mt model: Marian's pad row is one of zeros, added by the conversion
        for embedding in (marian.model.encoder.embed_tokens, marian.model.decoder.embed_tokens):
            embedding.weight[pad] = 0
    # opus-mt-en-de's generation_config.json
    marian.generation_config = GenerationConfig(
        bad_words_ids=[[pad]],
        bos_token_id=EOS,
        decoder_start_token_id=pad,
        eos_token_id=EOS,
        forced_eos_token_id=EOS,
        max_length=512,
        num_beams=4,
        pad_token_id=pad,
    )
    marian.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    (folder / "README.md").write_text("---\nlicense: cc-by-4.0\ntags:\n- translation\n---\n\n# opus-mt-en-de\n")
    return marian, tokenizer


def train(marian, tokenizer, steps: int) -> None:
    optimizer = torch.optim.Adam(marian.parameters(), lr=3e-3)
    generator = torch.Generator().manual_seed(0)
    marian.train()
    for _ in range(steps):
        chosen = torch.randint(len(ENGLISH), (32,), generator=generator).tolist()
        batch = tokenizer([ENGLISH[i] for i in chosen], text_target=[GERMAN[i] for i in chosen], padding=True,
                          return_tensors="pt")  # fmt: skip
        batch["labels"] = batch["labels"].masked_fill(batch["labels"] == tokenizer.pad_token_id, -100)
        loss = marian(**batch).loss
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    marian.eval()


@pytest.fixture(scope="module", params=sorted(SIZES))
def converted(request, tmp_path_factory):
    """(MarianMTModel, its tokenizer, the folder of our converted model) for each reduced size."""
    root = tmp_path_factory.mktemp(f"marian_{request.param}")
    marian, tokenizer = build_marian_folder(root / "marian", SIZES[request.param], train_steps=150)
    convert_marian(root / "marian", root / "ours")
    return marian, tokenizer, root / "ours"


def padded_batch(tokenizer) -> dict[str, torch.Tensor]:
    """Sources of different lengths (so the batch pads) with teacher-forced targets that start at the pad token."""
    batch = tokenizer(SOURCES, text_target=[german for _, german in SPLITS["test"]][:6], padding=True,
                      return_tensors="pt")  # fmt: skip
    assert (batch["attention_mask"] == 0).any()
    labels = batch.pop("labels")
    start = torch.full((len(labels), 1), tokenizer.pad_token_id)
    batch["decoder_input_ids"] = torch.cat((start, labels[:, :-1]), dim=1)
    return dict(batch)


def largest_logit_difference(marian, ours, batch) -> float:
    with torch.no_grad():
        expected = marian(**batch).logits
        actual = ours(**batch).logits
    assert actual.shape == expected.shape
    return (actual - expected).abs().max().item()


def test_converted_logits_equal_marians_with_padding_in_the_batch(converted):
    marian, tokenizer, folder = converted
    ours = VanillaTransformerForConditionalGeneration.from_pretrained(folder).eval()
    assert ours.config.sinusoid_layout == "sines_then_cosines" and ours.config.final_logits_bias
    assert ours.config.activation_function == "silu"
    assert ours.config.target_vocab_size == marian.config.decoder_vocab_size
    assert ours.final_logits_bias.abs().sum() > 0
    difference = largest_logit_difference(marian, ours, padded_batch(tokenizer))
    print(f"largest absolute logit difference, reduced size: {difference:.2e}")
    assert difference <= LOGIT_TOLERANCE


@pytest.mark.parametrize("num_beams", [1, 4])
def test_generate_is_token_identical_greedy_and_beam_4(converted, num_beams):
    marian, tokenizer, folder = converted
    ours = VanillaTransformerForConditionalGeneration.from_pretrained(folder).eval()
    inputs = tokenizer(SOURCES, padding=True, return_tensors="pt")
    settings = dict(num_beams=num_beams, max_new_tokens=12)
    expected = marian.generate(**inputs, **settings)
    actual = ours.generate(**inputs, **settings)
    assert torch.equal(actual, expected)
    assert len(set(actual[:, 1:].flatten().tolist())) > 5  # the sentences differ: the weights decide, not the bias
    # Marian's generation settings came along: it never writes its pad token after the start
    assert ours.generation_config.bad_words_ids == [[tokenizer.pad_token_id]]
    assert (actual[:, 1:] != tokenizer.pad_token_id).any(dim=1).all()


def test_the_folder_translates_and_loads_without_our_package(converted, tmp_path):
    marian, tokenizer, folder = converted
    model, loaded_tokenizer = load_for_translation(folder)
    assert isinstance(loaded_tokenizer, MarianTokenizer)
    expected = tokenizer.batch_decode(
        marian.generate(**tokenizer(SOURCES, padding=True, return_tensors="pt"), num_beams=4, max_new_tokens=12),
        skip_special_tokens=True,
    )
    assert translate(model, loaded_tokenizer, SOURCES, batch_size=len(SOURCES), max_new_tokens=12) == expected

    batch = padded_batch(tokenizer)
    torch.save(batch, tmp_path / "inputs.pt")
    result = run_without_our_package(CHILD, str(folder), str(tmp_path), cwd=tmp_path)
    assert result["model_module"].startswith("transformers_modules") and not result["ours_imported"]
    assert result["tokenizer"] == "MarianTokenizer"
    child = torch.load(tmp_path / "child.pt")
    with torch.no_grad():
        assert (child["logits"] - marian(**batch).logits).abs().max().item() <= LOGIT_TOLERANCE
    expected_ids = marian.generate(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"],
                                   num_beams=4, max_new_tokens=8)  # fmt: skip
    assert torch.equal(child["generated"], expected_ids)


CHILD = """
    import json, sys
    import torch
    from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

    folder, work = sys.argv[1], sys.argv[2]
    inputs = torch.load(work + "/inputs.pt")
    model = AutoModelForSeq2SeqLM.from_pretrained(folder, trust_remote_code=True).eval()
    tokenizer = AutoTokenizer.from_pretrained(folder, trust_remote_code=True)  # it reads the config first
    with torch.no_grad():
        logits = model(**inputs).logits
    generated = model.generate(
        input_ids=inputs["input_ids"], attention_mask=inputs["attention_mask"], num_beams=4, max_new_tokens=8
    )
    torch.save({"logits": logits, "generated": generated}, work + "/child.pt")
    print(json.dumps({
        "model_module": type(model).__module__,
        "tokenizer": type(tokenizer).__name__,
        "ours_imported": "vanilla_transformer" in sys.modules,
    }))
    """


def test_the_folder_holds_what_a_model_of_ours_does_and_a_card_naming_the_source(converted):
    _, _, folder = converted
    for name in ("config.json", "model.safetensors", "generation_config.json", "modeling_vanilla_transformer.py",
                 "source.spm", "target.spm", "vocab.json", "tokenizer_config.json", "README.md"):  # fmt: skip
        assert (folder / name).is_file(), name
    card = (folder / "README.md").read_text()
    assert "license: cc-by-4.0" in card and "cc-by-4.0" in card.split("---", 2)[2]
    assert "converted from the local folder" in card and str(folder.parent / "marian") in card


def test_the_converted_folder_exports_to_ctranslate2_as_ctranslate2s_own_conversion(converted, tmp_path):
    """CTranslate2's own converter takes Marian's pad token to be the last row of each vocabulary, which two
    vocabularies of different sizes cannot both have: there the export is checked against MarianMTModel itself."""
    ctranslate2 = pytest.importorskip("ctranslate2", reason='the CTranslate2 engine is optional: ".[ct2]"')
    from vanilla_transformer.export import export_ctranslate2
    from vanilla_transformer.inference import load_ctranslate2

    marian, tokenizer, folder = converted
    ours, our_tokenizer = load_ctranslate2(export_ctranslate2(folder, tmp_path / "ours"), threads=2)
    inputs = tokenizer(SOURCES, padding=True, return_tensors="pt")
    one_vocabulary = marian.config.share_encoder_decoder_embeddings
    if one_vocabulary:
        ctranslate2.converters.TransformersConverter(str(folder.parent / "marian")).convert(str(tmp_path / "theirs"))
        theirs = ctranslate2.Translator(str(tmp_path / "theirs"), intra_threads=2)
    for num_beams in (1, 4):
        generated = ours.generate(**inputs, num_beams=num_beams, max_new_tokens=12)
        our_tokens = [our_tokenizer.convert_ids_to_tokens(row[1:]) for row in generated.tolist()]
        if one_vocabulary:
            results = theirs.translate_batch(
                [tokenizer.convert_ids_to_tokens(ids) for ids in tokenizer(SOURCES)["input_ids"]],
                beam_size=num_beams,
                max_decoding_length=12,
                min_decoding_length=0,
                length_penalty=1.0,
            )
            expected = [result.hypotheses[0] for result in results]
        else:
            # CTranslate2 has no forced end token at the length limit
            rows = marian.generate(**inputs, num_beams=num_beams, max_new_tokens=12, forced_eos_token_id=None).tolist()
            expected = [tokenizer.convert_ids_to_tokens(row[1:]) for row in rows]
        for tokens, hypothesis in zip(our_tokens, expected, strict=True):
            hypothesis = [token for token in hypothesis if token not in ("</s>", "<pad>")]
            assert tokens[: len(hypothesis)] == hypothesis
            assert all(token in ("</s>", "<pad>") for token in tokens[len(hypothesis) :])


def test_the_full_opus_mt_en_de_size_converts_with_equal_logits(tmp_path):
    marian, tokenizer = build_marian_folder(tmp_path / "marian", OPUS_MT_EN_DE)
    convert_marian(tmp_path / "marian", tmp_path / "ours")
    ours = VanillaTransformerForConditionalGeneration.from_pretrained(tmp_path / "ours").eval()
    # Marian's sinusoid table is a frozen parameter; ours computes it
    assert ours.num_parameters() == marian.num_parameters(only_trainable=True)
    batch = padded_batch(tokenizer)
    difference = largest_logit_difference(marian, ours, batch)
    print(f"largest absolute logit difference, opus-mt-en-de size: {difference:.2e}")
    assert difference <= LOGIT_TOLERANCE
    inputs = {key: batch[key] for key in ("input_ids", "attention_mask")}
    assert torch.equal(ours.generate(**inputs, num_beams=4, max_new_tokens=6),
                       marian.generate(**inputs, num_beams=4, max_new_tokens=6))  # fmt: skip


def test_the_config_carries_each_marian_detail():
    config = config_from_marian(MarianConfig(**SIZES["separate"], pad_token_id=250, decoder_start_token_id=250))
    assert (config.vocab_size, config.decoder_vocab_size) == (301, 257)
    assert not config.share_encoder_decoder_embeddings and config.tie_word_embeddings
    assert (config.pad_token_id, config.decoder_start_token_id, config.eos_token_id) == (250, 250, EOS)
    assert config.norm_placement == "post" and config.scale_embedding and config.position_embedding_type == "sinusoidal"


@pytest.mark.parametrize(
    ("field", "value", "named"),
    [
        ("activation_function", "tanh", "activation_function='tanh' (the converter takes swish, silu, relu, gelu)"),
        ("normalize_before", True, "normalize_before=True (Marian's architecture has False"),
        ("encoder_layerdrop", 0.1, "encoder_layerdrop=0.1 (our model has no layer drop"),
    ],
)
def test_what_the_converter_cannot_express_is_named_before_any_weight_is_read(tmp_path, capsys, field, value, named):
    folder = tmp_path / "marian"
    folder.mkdir()
    architecture = {**SIZES["shared"], field: value}
    MarianConfig(**architecture, pad_token_id=300, decoder_start_token_id=300).save_pretrained(folder)
    (folder / "model.safetensors").write_bytes(b"not a weights file")  # never read
    assert main(["convert", "marian", str(folder), str(tmp_path / "out")]) == 2
    error = capsys.readouterr().err.strip()
    assert len(error.splitlines()) == 1 and named in error and "MarianConfig" in error
    assert not (tmp_path / "out").exists()


def test_the_command_converts_and_refuses_a_folder_holding_other_files(converted, tmp_path, capsys):
    _, _, folder = converted
    marian_folder = folder.parent / "marian"
    output = tmp_path / "out"
    assert main(["convert", "marian", str(marian_folder), str(output)]) == 0
    assert f"wrote {output}" in capsys.readouterr().out
    (tmp_path / "busy").mkdir()
    (tmp_path / "busy" / "notes.txt").write_text("mine")
    assert main(["convert", "marian", str(marian_folder), str(tmp_path / "busy")]) == 2
    error = capsys.readouterr().err.strip()
    assert len(error.splitlines()) == 1 and "is not empty" in error and "--force" in error
    assert (tmp_path / "busy" / "notes.txt").read_text() == "mine"
    (tmp_path / "a_file").write_text("mine")
    assert main(["convert", "marian", str(marian_folder), str(tmp_path / "a_file"), "--force"]) == 2
    assert "a_file is a file, not a folder" in capsys.readouterr().err
    assert main(["convert", "marian", str(marian_folder), str(marian_folder.parent), "--force"]) == 2
    assert "holds the Marian folder" in capsys.readouterr().err and marian_folder.is_dir()


def test_translate_and_plot_take_the_converted_folder_unchanged(converted, tmp_path):
    pytest.importorskip("matplotlib", reason='pictures need ".[plot]"')
    marian, tokenizer, folder = converted
    source = tmp_path / "source.en"
    source.write_text("\n".join(SOURCES[:3]) + "\n")
    translated = tmp_path / "translated.de"
    assert main(["translate", "--model", str(folder), "--input", str(source), "--output", str(translated),
                 "--num-beams", "4"]) == 0  # fmt: skip
    inputs = tokenizer(SOURCES[:3], padding=True, return_tensors="pt")
    expected = tokenizer.batch_decode(marian.generate(**inputs, num_beams=4), skip_special_tokens=True)
    assert translated.read_text().splitlines() == expected
    picture = tmp_path / "alignment.png"
    assert main(["plot", "alignment", "--model", str(folder), "--text", SOURCES[0], "--output", str(picture)]) == 0
    assert picture.stat().st_size > 0


def test_without_sentencepiece_the_command_names_the_extra_in_one_line(converted, tmp_path, capsys, monkeypatch):
    import builtins

    real_import = builtins.__import__

    def without_sentencepiece(name, *args, **kwargs):
        if name == "sentencepiece":
            raise ImportError("No module named 'sentencepiece'")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", without_sentencepiece)
    _, _, folder = converted
    assert main(["convert", "marian", str(folder.parent / "marian"), str(tmp_path / "out")]) == 2
    error = capsys.readouterr().err.strip()
    assert len(error.splitlines()) == 1 and 'pip install "vanilla-transformer[marian]"' in error


def test_a_model_that_is_not_marian_is_refused_by_its_model_type(tmp_path, capsys):
    from helpers import tiny_config, tiny_model

    tiny_model(tiny_config()).save_pretrained(tmp_path / "ours")
    capsys.readouterr()  # the progress bar of saving
    assert main(["convert", "marian", str(tmp_path / "ours"), str(tmp_path / "out")]) == 2
    error = capsys.readouterr().err.strip()
    assert len(error.splitlines()) == 1 and "model_type='vanilla_transformer'" in error


def _hub_answers() -> bool:
    from vanilla_transformer.common.hub_connection import hub_reachable, offline_mode

    return not offline_mode() and hub_reachable()


@pytest.mark.skipif(not _hub_answers(), reason="live test: the Hub is unreachable")
def test_live_opus_mt_en_de_translates_as_marian(tmp_path):
    source = "Helsinki-NLP/opus-mt-en-de"
    convert_marian(source, tmp_path / "ours")
    tokenizer = MarianTokenizer.from_pretrained(source)
    marian = MarianMTModel.from_pretrained(source).eval()
    sentences = ["The house is wonderful.", "I would like a cup of coffee, please."]
    inputs = tokenizer(sentences, padding=True, return_tensors="pt")
    expected = tokenizer.batch_decode(marian.generate(**inputs), skip_special_tokens=True)
    model, ours_tokenizer = load_for_translation(tmp_path / "ours")
    assert translate(model, ours_tokenizer, sentences, batch_size=2) == expected
    assert "license: cc-by-4.0" in (tmp_path / "ours" / "README.md").read_text()
