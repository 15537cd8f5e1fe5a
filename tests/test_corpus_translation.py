"""translate-corpus: the corpus it writes (aligned, the carried splits untouched, each chunk what translate() gives),
a kill halfway and a rerun giving the bytes of an uninterrupted run, two processes giving the bytes of one, the
CTranslate2 engine, back-translation of one-language text mixed into training (tagged), a student trained on it."""

import json
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from helpers import (
    QUIET_THREADS,
    TINY_TRAINING_MODEL,
    accelerate_two_cpu_processes,
    tiny_train_flags,
    write_jsonl,
    write_lines,
)

from vanilla_transformer import VanillaTransformerConfig, VanillaTransformerForConditionalGeneration
from vanilla_transformer.cli import main
from vanilla_transformer.common.languages import check_languages
from vanilla_transformer.common.model_folder import load_tokenizer
from vanilla_transformer.inference import load_for_translation, translate
from vanilla_transformer.tokenization import BYTE_TOKENS, SPECIAL_TOKENS, read_lines
from vanilla_transformer.training import parse_arguments, prepare_corpus
from vanilla_transformer.training.corpus import prepare_mix

REPO = Path(__file__).resolve().parents[1]
CHUNK = 70  # the numbers corpus's 300 training sentences make 5 chunks, the last one short


@pytest.fixture(scope="module")
def teacher(tmp_path_factory, corpus_folder) -> Path:
    """A random model sharpened so that its translations differ from sentence to sentence, with a card that says it
    translates en->de, as a trained folder's does."""
    tokenizer = load_tokenizer(corpus_folder / "tokenizer")
    torch.manual_seed(0)
    config = VanillaTransformerConfig(vocab_size=len(tokenizer), **TINY_TRAINING_MODEL)
    model = VanillaTransformerForConditionalGeneration(config).eval()
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.mul_(4)
    byte_ids = list(range(len(SPECIAL_TOKENS), len(SPECIAL_TOKENS) + len(BYTE_TOKENS)))
    model.generation_config.update(suppress_tokens=byte_ids, num_beams=2, max_new_tokens=6)
    folder = tmp_path_factory.mktemp("teacher")
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    (folder / "README.md").write_text("---\nlanguage:\n- en\n- de\n---\n\n# a teacher\n")
    return folder


def flags(teacher: Path, corpus_folder: Path, output: Path, *more: str) -> list[str]:
    return [
        "translate-corpus",
        "--model",
        str(teacher),
        "--dataset",
        str(corpus_folder),
        "--output_dir",
        str(output),
        "--chunk_sentences",
        str(CHUNK),
        "--batch_size",
        "16",
        "--disable_progress_bar",
        *more,
    ]


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory, teacher, corpus_folder) -> Path:
    output = tmp_path_factory.mktemp("uninterrupted") / "corpus"
    assert main(flags(teacher, corpus_folder, output)) == 0
    return output


def corpus_bytes(folder: Path) -> dict[str, bytes]:
    return {path.name: path.read_bytes() for path in sorted(folder.iterdir()) if path.name != "translation.json"}


def test_the_corpus_is_the_sources_beside_translate_of_each_chunk_with_the_other_splits_untouched(
    uninterrupted, teacher, corpus_folder
):
    assert sorted(path.name for path in uninterrupted.iterdir()) == [
        "test.de",
        "test.en",
        "train.de",
        "train.en",
        "translation.json",
        "validation.de",
        "validation.en",
    ]
    sources = read_lines(corpus_folder / "train.en")
    assert read_lines(uninterrupted / "train.en") == sources
    model, tokenizer = load_for_translation(teacher, device="cpu")
    expected = []
    for start in range(0, len(sources), CHUNK):
        expected += translate(model, tokenizer, sources[start : start + CHUNK], batch_size=16)
    written = read_lines(uninterrupted / "train.de")
    assert written == expected
    assert len(set(written)) > 50 and written != read_lines(corpus_folder / "train.de")
    for name in ("validation.en", "validation.de", "test.en", "test.de"):
        assert read_lines(uninterrupted / name) == read_lines(corpus_folder / name)
    record = json.loads((uninterrupted / "translation.json").read_text())
    assert record["sentences"] == {"train": 300, "validation": 12, "test": 12}
    assert record["plan"]["num_beams"] is None and record["plan"]["chunk_sentences"] == CHUNK


def test_a_finished_folder_is_not_translated_again(uninterrupted, teacher, corpus_folder, capsys, tmp_path):
    before = {path.name: path.stat().st_mtime_ns for path in uninterrupted.iterdir()}
    assert main(flags(teacher, corpus_folder, uninterrupted)) == 0
    assert "is already translated (translation.json): nothing to do" in capsys.readouterr().out
    assert {path.name: path.stat().st_mtime_ns for path in uninterrupted.iterdir()} == before


KILLED_IN_THE_THIRD_CHUNK = """
import os, signal, sys
from vanilla_transformer.cli import main
from vanilla_transformer.corpus_translation.translated_folder import TranslatedFolder

write_chunk = TranslatedFolder.write_chunk
written = []

def write_chunk_then_die_in_the_third(self, role, index, translations):
    if len(written) == 2:  # halfway through writing it: a partial file, no chunk
        partial = self.chunk_file(role, index).with_name(f".chunk-{index:07d}.txt.{os.getpid()}.partial")
        partial.write_text("half a chunk\\n")
        os.kill(os.getpid(), signal.SIGKILL)
    write_chunk(self, role, index, translations)
    written.append(index)

TranslatedFolder.write_chunk = write_chunk_then_die_in_the_third
sys.exit(main(sys.argv[1:]))
"""


def test_killed_halfway_a_rerun_continues_after_the_last_whole_chunk_and_writes_the_same_bytes(
    uninterrupted, teacher, corpus_folder, tmp_path
):
    output = tmp_path / "killed"
    command = [sys.executable, "-c", KILLED_IN_THE_THIRD_CHUNK, *flags(teacher, corpus_folder, output)]
    killed = subprocess.run(command, capture_output=True, text=True, env=QUIET_THREADS, timeout=600)
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-2000:]
    left = sorted(path.name for path in (output / ".translating" / "train").iterdir())
    assert left[0].startswith(".chunk-0000002.txt.") and left[1:] == ["chunk-0000000.txt", "chunk-0000001.txt"]
    assert not (output / "translation.json").exists()

    again = [sys.executable, "-m", "vanilla_transformer.cli", *flags(teacher, corpus_folder, output)]
    rerun = subprocess.run(again, capture_output=True, text=True, env=QUIET_THREADS, timeout=600)
    assert rerun.returncode == 0, rerun.stderr[-2000:]
    # the chunks already written are kept: 160 of the 300 sentences were left to translate
    assert "translated 160 sentences" in rerun.stdout
    assert corpus_bytes(output) == corpus_bytes(uninterrupted)
    assert not (output / ".translating").exists()


def test_two_processes_translate_their_own_chunks_into_the_corpus_one_process_writes(
    uninterrupted, teacher, corpus_folder, tmp_path
):
    output = tmp_path / "two"
    command = [*accelerate_two_cpu_processes(), "-m", "vanilla_transformer.cli", *flags(teacher, corpus_folder, output)]
    result = subprocess.run(command, capture_output=True, text=True, env=QUIET_THREADS, cwd=REPO, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    # chunks 0, 2, 4 (70 + 70 + 20 sentences) in one process, 1 and 3 in the other; the last to finish joins them
    assert sorted(line.split(" sentences")[0] for line in result.stdout.splitlines() if "translated" in line) == [
        "translated 140",
        "translated 160",
    ]
    assert corpus_bytes(output) == corpus_bytes(uninterrupted)


def test_the_ctranslate2_engine_in_int8_writes_what_its_translate_gives(teacher, corpus_folder, tmp_path):
    pytest.importorskip("ctranslate2")
    from vanilla_transformer.export.ctranslate2_spec import export_ctranslate2
    from vanilla_transformer.inference import load_ctranslate2

    exported = export_ctranslate2(teacher, tmp_path / "ct2")
    assert (exported / "README.md").read_text() == (teacher / "README.md").read_text()  # the languages travel
    output = tmp_path / "corpus"
    more = ["--engine", "ctranslate2", "--quantize", "int8", "--test_split", "", "--num_beams", "1"]
    assert main(flags(exported, corpus_folder, output, *more)) == 0
    model, tokenizer = load_ctranslate2(exported, "cpu", "int8")
    sources = read_lines(corpus_folder / "train.en")
    expected = []
    for start in range(0, len(sources), CHUNK):
        expected += translate(model, tokenizer, sources[start : start + CHUNK], batch_size=16, num_beams=1)
    assert read_lines(output / "train.de") == expected
    assert not (output / "test.en").exists()


def test_a_line_break_inside_a_table_text_becomes_a_space_so_the_corpus_stays_aligned(teacher, tmp_path):
    texts = ["one hundred", "two\nthousand", "three\r\nhundred twelve", "four"]
    table = write_jsonl(tmp_path / "train.jsonl", [{"en": text, "de": "x"} for text in texts])
    output = tmp_path / "corpus"
    assert main(["translate-corpus", "--model", str(teacher), "--dataset", str(table), "--output_dir", str(output),
                 "--disable_progress_bar"]) == 0  # fmt: skip
    assert read_lines(output / "train.en") == ["one hundred", "two thousand", "three hundred twelve", "four"]
    assert len(read_lines(output / "train.de")) == 4


@pytest.mark.parametrize(
    ("declared", "asked", "refused"),
    [
        (["en", "de"], ("en", "de"), False),
        (["pt_BR", "en"], ("pt", "en"), False),
        (["eng", "zho"], ("en", "zh"), False),  # ISO 639-3 codes in an opus-mt tokenizer: not comparable, not refused
        (["mul", "en"], ("fr", "en"), False),
        (["de", "en"], ("en", "de"), True),
        (["en", "fr"], ("en", "de"), True),
    ],
)
def test_the_languages_a_model_declares_are_compared_by_language(declared, asked, refused, tmp_path):
    (tmp_path / "README.md").write_text(f"---\nlanguage:\n- {declared[0]}\n- {declared[1]}\n---\n")
    if refused:
        with pytest.raises(ValueError, match=f"translates {declared[0]}->{declared[1]} \\(its model card\\)"):
            check_languages(str(tmp_path), object(), *asked)
    else:
        check_languages(str(tmp_path), object(), *asked)


def test_validation_is_translated_on_request_and_a_jsonl_source_reads_as_a_folder_does(
    teacher, corpus_folder, tmp_path
):
    table = write_jsonl(
        tmp_path / "train.jsonl",
        [{"translation": {"en": line, "de": "x"}} for line in read_lines(corpus_folder / "train.en")[:30]],
    )
    output = tmp_path / "from_table"
    assert main(flags(teacher, table, output, "--validation_split", "", "--test_split", "")) == 0
    from_folder = tmp_path / "from_folder"
    assert main(flags(teacher, corpus_folder, from_folder, "--translate", "train", "validation")) == 0
    assert read_lines(output / "train.de") == read_lines(from_folder / "train.de")[:30]
    assert read_lines(from_folder / "validation.en") == read_lines(corpus_folder / "validation.en")
    assert read_lines(from_folder / "validation.de") != read_lines(corpus_folder / "validation.de")


def test_back_translation_of_one_language_text_is_mixed_into_training_with_a_tag(teacher, corpus_folder, tmp_path):
    # German text alone, translated by a (here: the same random) model "de->en": its card says so
    reverse = tmp_path / "reverse"
    reverse.mkdir()
    for path in teacher.iterdir():
        (reverse / path.name).write_bytes(path.read_bytes())
    (reverse / "README.md").write_text("---\nlanguage:\n- de\n- en\n---\n")
    monolingual = tmp_path / "german"
    monolingual.mkdir()
    write_lines(monolingual / "train.de", read_lines(corpus_folder / "train.de")[:120])
    synthetic = tmp_path / "synthetic"
    more = ["--source_lang", "de", "--target_lang", "en", "--validation_split", "", "--test_split", ""]
    assert main(flags(reverse, monolingual, synthetic, *more)) == 0
    assert sorted(path.name for path in synthetic.iterdir()) == ["train.de", "train.en", "translation.json"]
    assert read_lines(synthetic / "train.de") == read_lines(corpus_folder / "train.de")[:120]

    train_flags = [*tiny_train_flags(corpus_folder), "--output_dir", str(tmp_path / "student")]
    train_flags += ["--mix_dataset", str(synthetic), "--mix_ratio", "0.3", "--mix_tag", "<BT>"]
    train_flags = [flag for flag in train_flags if flag not in ("--tokenizer", str(corpus_folder / "tokenizer"))]
    train_flags += ["--vocab_size", "300"]
    assert main(["train", *train_flags]) == 0
    tokenizer = load_tokenizer(tmp_path / "student")
    tag = tokenizer.convert_tokens_to_ids("<BT>")
    assert tag == len(tokenizer) - 1  # one token the run's tokenizer holds
    _, data_args, _ = parse_arguments(train_flags)
    mixed = prepare_mix(data_args, tokenizer)
    assert mixed.num_rows == 120 and all(ids[0] == tag for ids in mixed["input_ids"])
    real = prepare_corpus(data_args, tokenizer).train
    assert not any(tag in ids for ids in real["input_ids"])


def test_a_student_trains_on_the_teachers_corpus(uninterrupted, corpus_folder, tmp_path):
    student = tmp_path / "student"
    train_flags = [*tiny_train_flags(corpus_folder), "--output_dir", str(student)]
    train_flags[train_flags.index("--dataset") + 1] = str(uninterrupted)
    assert main(["train", *train_flags, "--encoder_layers", "2"]) == 0
    results = json.loads((student / "results.json").read_text())
    assert results["train_steps"] == 3 and "test" in results
