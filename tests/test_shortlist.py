"""The lexical shortlist: built from a corpus, decoded with (the full computation restricted to the same rows, for
greedy, beam and sampling, with the cache and every switch), off by default, saved and loaded with a folder and as
remote code, written by `train`, used by `translate` and exported as CTranslate2's vocabulary map."""

import json

import pytest
import torch
from helpers import (
    SWITCHES,
    VOCAB,
    config_for,
    random_tokens,
    run_without_our_package,
    switch_id,
    tiny_arguments,
    tiny_config,
    tiny_model,
    tiny_train_flags,
)

from vanilla_transformer.cli import main
from vanilla_transformer.hub.push import files_to_push
from vanilla_transformer.inference import load_for_translation, translate
from vanilla_transformer.inference.quantization import quantize_linear_layers
from vanilla_transformer.lexical_shortlist import SHORTLIST_FILE, LexicalShortlist, ShortlistError
from vanilla_transformer.shortlist import ShortlistAfterTraining
from vanilla_transformer.shortlist.build import build_shortlist
from vanilla_transformer.tokenization import tokenizer_identity
from vanilla_transformer.training import train
from vanilla_transformer.training.corpus import prepare_corpus

SPECIAL = [0, 1, 2, 3]


def random_shortlist(target_vocab_size: int, seed: int = 0, candidates: int = 4) -> LexicalShortlist:
    """Candidates drawn at random (some source tokens with fewer), the special tokens and two frequent ones."""
    generator = torch.Generator().manual_seed(seed)
    table = torch.randint(4, target_vocab_size, (VOCAB, candidates), generator=generator, dtype=torch.int32)
    table[5, 2:] = -1
    table[6, :] = -1
    always = torch.tensor([*SPECIAL, 10, 11], dtype=torch.int32)
    return LexicalShortlist(table, always, {"target_vocab_size": target_vocab_size, "tokenizer": "test:0"})


def restricted_to(model, rows: torch.Tensor):
    """The full computation with every logit outside `rows` at minus infinity, before any softmax."""
    outside = torch.full((model.config.target_vocab_size,), float("-inf"))
    outside[rows] = 0.0
    return model.lm_head.register_forward_hook(lambda module, inputs, output: output + outside)


def source_batch():
    source = random_tokens(3, 7, seed=1)
    mask = torch.ones_like(source)
    mask[1, 5:] = 0
    return source, mask


SETTINGS = [
    dict(num_beams=1),
    dict(num_beams=4),
    dict(num_beams=4, num_return_sequences=2, length_penalty=0.6),
    dict(num_beams=3, use_cache=False),
    dict(num_beams=1, no_repeat_ngram_size=2, repetition_penalty=1.3),
]


@pytest.mark.parametrize("settings", SETTINGS, ids=lambda s: "-".join(f"{k}={v}" for k, v in s.items()))
@pytest.mark.parametrize("switches", SWITCHES[::19], ids=[switch_id(s) for s in SWITCHES[::19]])
def test_decoding_with_the_shortlist_is_the_full_computation_restricted_to_its_rows(switches, settings):
    model = tiny_model(config_for(switches))
    model.lexical_shortlist = random_shortlist(model.config.target_vocab_size)
    source, mask = source_batch()
    rows = model.lexical_shortlist.rows(source, mask, SPECIAL)
    assert len(rows) < model.config.target_vocab_size  # rows are left out, so the check can fail
    common = dict(input_ids=source, attention_mask=mask, max_new_tokens=8, output_scores=True, **settings)
    common["return_dict_in_generate"] = True
    with torch.no_grad():
        hook = restricted_to(model, rows)
        full = model.generate(**common)
        hook.remove()
        shortlisted = model.generate(**common, use_shortlist=True)
    assert torch.equal(shortlisted.sequences, full.sequences)
    if settings["num_beams"] > 1:
        torch.testing.assert_close(shortlisted.sequences_scores, full.sequences_scores)
    for ours, theirs in zip(shortlisted.scores, full.scores, strict=True):
        # scores come back over the whole vocabulary, minus infinity outside the rows
        assert ours.shape == theirs.shape and torch.equal(ours.isinf(), theirs.isinf())
        torch.testing.assert_close(ours.nan_to_num(0, 0, 0), theirs.nan_to_num(0, 0, 0), atol=1e-5, rtol=1e-5)


def test_sampling_draws_from_the_restricted_distribution():
    """Sampling's warped scores at the first step (before the paths part) are the restricted computation's, and every
    drawn token is one of the rows."""
    model = tiny_model(tiny_config())
    model.lexical_shortlist = random_shortlist(VOCAB)
    source, mask = source_batch()
    rows = model.lexical_shortlist.rows(source, mask, SPECIAL)
    common = dict(input_ids=source, attention_mask=mask, max_new_tokens=6, do_sample=True, top_k=5, temperature=0.7)
    common.update(output_scores=True, return_dict_in_generate=True)
    with torch.no_grad():
        hook = restricted_to(model, rows)
        full = model.generate(**common)
        hook.remove()
        shortlisted = model.generate(**common, use_shortlist=True)
    torch.testing.assert_close(shortlisted.scores[0], full.scores[0], atol=1e-5, rtol=1e-5)
    assert torch.isin(shortlisted.sequences, rows).all()


def test_int8_decoding_uses_the_same_int8_rows():
    model = quantize_linear_layers(tiny_model(tiny_config()))
    model.lexical_shortlist = random_shortlist(VOCAB)
    source, mask = source_batch()
    rows = model.lexical_shortlist.rows(source, mask, SPECIAL)
    with torch.no_grad():
        hook = model.lm_head.register_forward_hook(lambda module, inputs, output: output + restricted_mask(rows))
        full = model.generate(input_ids=source, attention_mask=mask, max_new_tokens=8, num_beams=3)
        hook.remove()
        shortlisted = model.generate(
            input_ids=source, attention_mask=mask, max_new_tokens=8, num_beams=3, use_shortlist=True
        )
    assert torch.equal(shortlisted, full)


def restricted_mask(rows):
    outside = torch.full((VOCAB,), float("-inf"))
    outside[rows] = 0.0
    return outside


def test_without_use_shortlist_nothing_changes_and_the_generation_setting_turns_it_on(tmp_path):
    model = tiny_model(tiny_config())
    source, mask = source_batch()
    with torch.no_grad():
        plain = model.generate(input_ids=source, attention_mask=mask, max_new_tokens=8, num_beams=3)
    model.save_pretrained(tmp_path)
    random_shortlist(VOCAB).save(tmp_path / SHORTLIST_FILE)
    loaded = type(model).from_pretrained(tmp_path).eval()
    with torch.no_grad():
        assert torch.equal(loaded.generate(input_ids=source, attention_mask=mask, max_new_tokens=8, num_beams=3), plain)
        assert loaded.lexical_shortlist is None  # not even read
        loaded.generation_config.use_shortlist = True
        on = loaded.generate(input_ids=source, attention_mask=mask, max_new_tokens=8, num_beams=3)
        by_keyword = loaded.generate(
            input_ids=source, attention_mask=mask, max_new_tokens=8, num_beams=3, use_shortlist=True
        )
    assert loaded.lexical_shortlist is not None and torch.equal(on, by_keyword)


def test_a_streamer_sees_the_full_vocabulary_ids():
    model = tiny_model(tiny_config())
    model.lexical_shortlist = random_shortlist(VOCAB)
    source, mask = source_batch()

    class Collect:
        def __init__(self):
            self.seen = []

        def put(self, value):
            self.seen.append(value.clone())

        def end(self):
            pass

    streamer = Collect()
    with torch.no_grad():
        output = model.generate(
            input_ids=source[:1], attention_mask=mask[:1], max_new_tokens=5, use_shortlist=True, streamer=streamer
        )
    assert torch.equal(torch.cat([value.reshape(-1) for value in streamer.seen]), output[0])


@pytest.mark.parametrize(
    "keywords, named",
    [
        (dict(encoder_repetition_penalty=1.5), "encoder_repetition_penalty"),
        (dict(encoder_no_repeat_ngram_size=2), "encoder_no_repeat_ngram_size"),
        (dict(sequence_bias={(5,): 1.0}), "sequence_bias"),
        (dict(prefix_allowed_tokens_fn=lambda batch, ids: [5]), "prefix_allowed_tokens_fn"),
    ],
)
def test_settings_that_need_the_whole_vocabulary_are_refused_by_name(keywords, named):
    model = tiny_model(tiny_config())
    model.lexical_shortlist = random_shortlist(VOCAB)
    source, mask = source_batch()
    with pytest.raises(ShortlistError, match=named):
        model.generate(input_ids=source, attention_mask=mask, max_new_tokens=3, use_shortlist=True, **keywords)


def test_a_shortlist_round_trips_and_refuses_what_does_not_fit(tmp_path):
    shortlist = random_shortlist(VOCAB)
    loaded = LexicalShortlist.load(shortlist.save(tmp_path / SHORTLIST_FILE))
    assert torch.equal(loaded.candidates, shortlist.candidates) and torch.equal(loaded.always, shortlist.always)
    assert loaded.tokenizer == "test:0" and loaded.target_vocab_size == VOCAB

    with pytest.raises(ShortlistError, match=r"40 source and 40 target tokens .*has 40 and 45"):
        loaded.check_fits(tiny_config(decoder_vocab_size=45, share_encoder_decoder_embeddings=False))
    with pytest.raises(
        ShortlistError, match=r"built for tokenizer test:0, and the model's tokenizer has tokenizer x:1"
    ):
        loaded.check_tokenizer("x:1", "the model's tokenizer")

    path = tmp_path / SHORTLIST_FILE
    path.write_bytes(path.read_bytes()[:-40])
    with pytest.raises(ShortlistError, match=f"the shortlist {path} is damaged"):
        LexicalShortlist.load(path)
    with pytest.raises(ShortlistError, match="has no lexical shortlist .*vanilla-transformer shortlist --model"):
        LexicalShortlist.from_pretrained(tmp_path / "elsewhere")


def test_the_builder_ranks_co_occurring_tokens_and_leaves_out_the_frequent_ones():
    import datasets

    # source 10 is always translated as 20; 11 as 21 (twice) or 22 (once); 30 is in every target (frequent)
    pairs = [([10, 2], [20, 30, 2])] * 3 + [([11, 2], [21, 30, 2])] * 2 + [([11, 10, 2], [22, 20, 30, 2])]
    train = datasets.Dataset.from_dict({"input_ids": [s for s, _ in pairs], "labels": [t for _, t in pairs]})
    shortlist = build_shortlist(train, 40, 40, SPECIAL, candidates=3, frequent=1, min_count=1)
    assert shortlist.candidates[10].tolist() == [20, 22, -1]  # 30 is frequent: every batch gets it anyway
    assert shortlist.candidates[11].tolist() == [21, 20, 22]  # by co-occurrence count, then id
    assert shortlist.always.tolist() == [*SPECIAL, 30]
    strict = build_shortlist(train, 40, 40, SPECIAL, candidates=3, frequent=1, min_count=2)
    assert strict.candidates[11].tolist() == [21, -1, -1]
    rows = shortlist.rows(torch.tensor([[10, 2]]), extra=[1])
    assert rows.tolist() == [*SPECIAL, 20, 22, 30]


@pytest.fixture(scope="module")
def trained_with_shortlist(corpus_folder, tmp_path_factory):
    """A tiny model trained a few steps with `shortlist=True` and the shortlist room's step, as `train --shortlist`
    joins them."""
    output = tmp_path_factory.mktemp("run") / "out"
    arguments = tiny_arguments(corpus_folder, output, shortlist=True, shortlist_candidates=5, shortlist_frequent=10)
    train(*arguments, after_saving=[ShortlistAfterTraining()])
    return output


def test_the_command_line_joins_the_shortlist_to_train_and_python_without_its_step_is_refused(corpus_folder, tmp_path):
    output = tmp_path / "out"
    flags = ["--shortlist", "--shortlist_candidates", "5", "--shortlist_frequent", "10"]
    assert main(["train", *tiny_train_flags(corpus_folder), "--output_dir", str(output), *flags]) == 0
    assert LexicalShortlist.load(output / SHORTLIST_FILE).candidates.shape[1] == 5
    assert json.loads((output / "results.json").read_text())["shortlist"]["bytes"] > 0

    with pytest.raises(ValueError, match="ShortlistAfterTraining"):
        train(*tiny_arguments(corpus_folder, tmp_path / "refused", shortlist=True))
    assert not (tmp_path / "refused").exists()  # refused before anything is written


def test_train_writes_the_shortlist_of_its_corpus(trained_with_shortlist, corpus_folder):
    shortlist = LexicalShortlist.load(trained_with_shortlist / SHORTLIST_FILE)
    model, tokenizer = load_for_translation(trained_with_shortlist, device="cpu")
    shortlist.check_fits(model.config)
    assert shortlist.tokenizer == tokenizer_identity(tokenizer)
    assert shortlist.candidates.shape == (len(tokenizer), 5)
    assert json.loads((trained_with_shortlist / "results.json").read_text())["shortlist"]["bytes"] > 0
    assert SHORTLIST_FILE in files_to_push(trained_with_shortlist)  # `push` publishes it with the model
    # the corpus the run trained on, built again by the command: the same file
    corpus = prepare_corpus(tiny_arguments(corpus_folder, trained_with_shortlist)[1], tokenizer)
    again = build_shortlist(corpus.train, len(tokenizer), len(tokenizer), shortlist_special(tokenizer, model), 5, 10, 2)
    assert torch.equal(again.candidates, shortlist.candidates) and torch.equal(again.always, shortlist.always)


def shortlist_special(tokenizer, model):
    config = model.config
    return [*tokenizer.all_special_ids, config.decoder_start_token_id, config.pad_token_id, config.eos_token_id]


def test_the_shortlist_command_writes_into_the_folder_and_refuses_what_it_cannot(
    trained_with_shortlist, corpus_folder, tmp_path, capsys
):
    import shutil

    folder = tmp_path / "model"
    shutil.copytree(trained_with_shortlist, folder)
    data = ["--dataset", str(corpus_folder), "--validation_split", "validation", "--test_split", ""]
    assert main(["shortlist", "--model", str(folder), *data]) == 2
    assert "shortlist.safetensors exists: pass --force" in capsys.readouterr().err
    before = (folder / SHORTLIST_FILE).read_bytes()
    assert main(["shortlist", "--model", str(folder), *data, "--candidates", "100000"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "candidates=100000 is more than the model's" in err
    assert (folder / SHORTLIST_FILE).read_bytes() == before  # nothing lost
    assert main(["shortlist", "--model", str(folder), *data, "--candidates", "7", "--force"]) == 0
    assert "wrote" in capsys.readouterr().out
    assert LexicalShortlist.load(folder / SHORTLIST_FILE).candidates.shape[1] == 7


def test_translate_with_the_shortlist_and_without_one(trained_with_shortlist, tmp_path, capsys, monkeypatch):
    import io
    import shutil

    model, tokenizer = load_for_translation(trained_with_shortlist, device="cpu")
    texts = ["one hundred", "seven thousand two", "forty-two"]
    # every token a candidate of every source token: the same translations as without the shortlist
    everything = LexicalShortlist.load(trained_with_shortlist / SHORTLIST_FILE)
    every = torch.arange(len(tokenizer), dtype=torch.int32).expand(len(tokenizer), -1).contiguous()
    model.lexical_shortlist = LexicalShortlist(every, everything.always, everything.metadata)
    assert translate(model, tokenizer, texts, shortlist=True) == translate(model, tokenizer, texts)

    bare = tmp_path / "bare"
    shutil.copytree(trained_with_shortlist, bare)
    (bare / SHORTLIST_FILE).unlink()
    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(b"forty-two\n")))
    capsys.readouterr()
    assert main(["translate", "--model", str(bare), "--shortlist", "--num-beams", "1"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"{bare} has no lexical shortlist" in err and "vanilla-transformer shortlist" in err


def test_the_folder_with_its_shortlist_decodes_as_remote_code(tmp_path):
    model = tiny_model(tiny_config())
    model.save_pretrained(tmp_path)
    random_shortlist(VOCAB).save(tmp_path / SHORTLIST_FILE)
    source, mask = source_batch()
    torch.save({"input_ids": source, "attention_mask": mask}, tmp_path / "inputs.pt")
    script = """
        import json, sys
        import torch
        from transformers import AutoModelForSeq2SeqLM

        folder = sys.argv[1]
        inputs = torch.load(folder + "/inputs.pt")
        model = AutoModelForSeq2SeqLM.from_pretrained(folder, trust_remote_code=True).eval()
        generated = model.generate(**inputs, max_new_tokens=6, num_beams=2, use_shortlist=True)
        print(json.dumps({"generated": generated.tolist(), "module": type(model).__module__}))
        """
    result = run_without_our_package(script, str(tmp_path), cwd=tmp_path)
    assert result["module"].startswith("transformers_modules")
    model.lexical_shortlist = LexicalShortlist.load(tmp_path / SHORTLIST_FILE)
    with torch.no_grad():
        expected = model.generate(
            input_ids=source, attention_mask=mask, max_new_tokens=6, num_beams=2, use_shortlist=True
        )
    assert result["generated"] == expected.tolist()


def test_the_ctranslate2_export_carries_the_shortlist_as_its_vocabulary_map(trained_with_shortlist, tmp_path, capsys):
    pytest.importorskip("ctranslate2", reason='the CTranslate2 engine is optional: pip install ".[ct2]"')
    import shutil

    from vanilla_transformer.export import export_ctranslate2
    from vanilla_transformer.inference import load_ctranslate2

    shortlist = LexicalShortlist.load(trained_with_shortlist / SHORTLIST_FILE)
    exported = export_ctranslate2(trained_with_shortlist, tmp_path / "ct2")
    lines = (exported / "vmap.txt").read_text(encoding="utf-8").splitlines()
    model, tokenizer = load_ctranslate2(exported, "cpu")
    tokens = tokenizer.convert_ids_to_tokens
    assert lines[0] == "\t" + " ".join(tokens(shortlist.always.tolist()))
    source_id = next(i for i, row in enumerate(shortlist.candidates.tolist()) if row[0] >= 0)
    kept = [i for i in shortlist.candidates[source_id].tolist() if i >= 0]
    assert f"{tokens(source_id)}\t{' '.join(tokens(kept))}" in lines

    # CTranslate2 decodes each batch within the candidates of its source tokens and the fixed ones
    texts = ["one hundred", "seven thousand two", "forty-two", "nine"]
    source = [tokenizer(text)["input_ids"] for text in texts]
    results = model.translator.translate_batch([tokens(ids) for ids in source], beam_size=2, use_vmap=True)
    allowed = set(tokens(shortlist.rows(torch.tensor([i for ids in source for i in ids])).tolist()))
    assert all(set(result.hypotheses[0]) <= allowed for result in results)
    assert translate(model, tokenizer, texts, shortlist=True)  # through translate()

    # every token a candidate: the same translations as without the map
    everything = tmp_path / "everything"
    shutil.copytree(trained_with_shortlist, everything)
    every = torch.arange(len(tokenizer), dtype=torch.int32).expand(len(tokenizer), -1).contiguous()
    LexicalShortlist(every, shortlist.always, shortlist.metadata).save(everything / SHORTLIST_FILE)
    wide, _ = load_ctranslate2(export_ctranslate2(everything, tmp_path / "ct2-everything"), "cpu")
    assert translate(wide, tokenizer, texts, shortlist=True) == translate(wide, tokenizer, texts)

    (everything / SHORTLIST_FILE).unlink()
    bare = export_ctranslate2(everything, tmp_path / "ct2-bare")
    assert not (bare / "vmap.txt").exists()
    lines = tmp_path / "lines.txt"
    lines.write_text("nine\n", encoding="utf-8")
    capsys.readouterr()
    command = ["translate", "--engine", "ctranslate2", "--model", str(bare), "--shortlist", "--input", str(lines)]
    assert main(command) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"the export {bare} has no vocabulary map" in err
