"""The prepared corpus and the data path of training: prepared once and found again by its fingerprint (a second run,
a resume, every process of a multi-process run), prepared anew when a file or a setting changes; the tokenizer's
sample; `vanilla-transformer prepare` and a prepared folder as --dataset; and micro-batches collated by the data
loader's workers exactly as in the training loop itself."""

import json
import shutil
import subprocess
from pathlib import Path

import pytest
import torch
from helpers import QUIET_THREADS, accelerate_two_cpu_processes, tiny_arguments, tiny_train_flags

from vanilla_transformer.cli import main
from vanilla_transformer.training import TrainingRun, parse_arguments
from vanilla_transformer.training import corpus as corpus_module
from vanilla_transformer.training.arguments import DataArguments
from vanilla_transformer.training.batches import BatchPlan, OwnMicroBatches, length_array
from vanilla_transformer.training.corpus import FILE_DIGESTS, MANIFEST, prepare_corpus, tokenizer_sample

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture
def data_args(corpus_folder, tmp_path):
    """The numbers corpus with a tokenizer trained for it, prepared into a cache of this test's own."""
    args = tiny_arguments(corpus_folder, tmp_path / "run")[1]
    args.cache_dir = str(tmp_path / "cache")
    return args


@pytest.fixture
def tokenize_calls(monkeypatch):
    calls = []
    tokenize = corpus_module.tokenize
    monkeypatch.setattr(corpus_module, "tokenize", lambda *args, **kwargs: calls.append(1) or tokenize(*args, **kwargs))
    return calls


def prepared_folders(args: DataArguments) -> list[str]:
    return sorted(path.name for path in Path(args.cache_dir).iterdir() if path.name != FILE_DIGESTS)


def test_a_second_preparation_reads_the_cache_and_tokenizes_nothing(data_args, tokenize_calls):
    first = prepare_corpus(data_args)
    assert len(tokenize_calls) == 2  # train and validation (the fixture has no test split)
    assert first.folder.parent == Path(data_args.cache_dir) and (first.folder / MANIFEST).is_file()
    tokenize_calls.clear()
    second = prepare_corpus(data_args)
    assert tokenize_calls == [] and second.folder == first.folder and prepared_folders(data_args) == [first.folder.name]
    assert second.train["input_ids"] == first.train["input_ids"] and second.validation["de"] == first.validation["de"]
    # memory-mapped from the folder, not held in memory
    assert all(Path(f["filename"]).parent == first.folder for f in second.train.cache_files)


def test_a_changed_file_or_setting_prepares_a_new_corpus(corpus_folder, data_args, tmp_path, tokenize_calls):
    original = prepare_corpus(data_args)
    changed_data = tmp_path / "changed"
    shutil.copytree(corpus_folder, changed_data)
    lines = (changed_data / "train.de").read_text().splitlines()
    lines[7] = lines[7] + " und"
    (changed_data / "train.de").write_text("\n".join(lines) + "\n")
    tokenize_calls.clear()
    changed = prepare_corpus(DataArguments(**{**vars(data_args), "dataset": str(changed_data)}))
    assert tokenize_calls and changed.folder != original.folder
    assert changed.train.num_rows == original.train.num_rows and changed.train["labels"] != original.train["labels"]
    tokenize_calls.clear()
    with pytest.warns(UserWarning, match=r"of 300 training pairs left out: longer than .* max_target_length=8"):
        shorter = prepare_corpus(DataArguments(**{**vars(data_args), "max_target_length": 8}))
    assert tokenize_calls and shorter.folder not in (original.folder, changed.folder)
    assert shorter.train.num_rows < original.train.num_rows  # pairs over the new limit left out
    assert len(prepared_folders(data_args)) == 3  # nothing partial left behind


def test_a_second_preparation_does_not_read_the_text_again_unless_a_file_changed(
    corpus_folder, data_args, tmp_path, monkeypatch
):
    corpus_folder = Path(shutil.copytree(corpus_folder, tmp_path / "data"))  # the fixture's files stay as they are
    data_args = DataArguments(**{**vars(data_args), "dataset": str(corpus_folder)})
    opened = []
    open_file = Path.open
    monkeypatch.setattr(
        Path, "open", lambda path, *args, **kwargs: opened.append(path) or open_file(path, *args, **kwargs)
    )
    first = prepare_corpus(data_args)
    assert corpus_folder / "train.de" in opened
    opened.clear()
    assert prepare_corpus(data_args).folder == first.folder
    assert not [path for path in opened if path.parent == corpus_folder]  # its digest was remembered
    # the same size, other bytes: the file's modification time says it changed, and it is read again
    train = corpus_folder / "train.de"
    lines = train.read_text().splitlines()
    lines[0], lines[1] = lines[1], lines[0]
    train.write_text("\n".join(lines) + "\n")
    opened.clear()
    assert prepare_corpus(data_args).folder != first.folder
    assert train in opened


def test_copying_the_files_elsewhere_finds_the_same_corpus(corpus_folder, data_args, tmp_path, tokenize_calls):
    original = prepare_corpus(data_args)
    copied = Path(shutil.copytree(corpus_folder, tmp_path / "copy"))
    tokenize_calls.clear()
    assert prepare_corpus(DataArguments(**{**vars(data_args), "dataset": str(copied)})).folder == original.folder
    assert tokenize_calls == []


def test_a_resumed_run_maps_the_corpus_its_first_launch_prepared(data_args, corpus_folder, tmp_path, tokenize_calls):
    model_args, _, train_args = tiny_arguments(corpus_folder, tmp_path / "run", max_steps=2, save_steps=2)
    TrainingRun(model_args, data_args, train_args).run()
    tokenize_calls.clear()
    resumed = tiny_arguments(corpus_folder, tmp_path / "run", max_steps=4, resume_from_checkpoint="latest")
    assert TrainingRun(resumed[0], data_args, resumed[2]).run()["train_steps"] == 4
    assert tokenize_calls == []


def test_the_tokenizer_trains_on_a_reproducible_sample_of_a_large_corpus(data_args):
    texts = corpus_module.read_split(corpus_module.split_sources(data_args)["train"])
    everything = list(tokenizer_sample(texts, ("en", "de"), sentences=10**9, seed=0))
    assert len(everything) == 2 * texts.num_rows
    sample = list(tokenizer_sample(texts, ("en", "de"), sentences=100, seed=3))
    assert len(sample) == 100 and sample == list(tokenizer_sample(texts, ("en", "de"), sentences=100, seed=3))
    assert sample != list(tokenizer_sample(texts, ("en", "de"), sentences=100, seed=4))
    # the drawn rows' English sentences, then their German ones
    assert set(sample[:50]) <= set(texts["en"]) and set(sample[50:]) <= set(texts["de"])


def test_the_sample_settings_name_a_corpus_of_their_own(corpus_folder, data_args, tmp_path):
    trained = DataArguments(**{**vars(data_args), "tokenizer": None, "vocab_size": 300})
    full = prepare_corpus(trained)
    sampled = prepare_corpus(DataArguments(**{**vars(trained), "tokenizer_sample_sentences": 100}))
    assert sampled.folder != full.folder
    assert sampled.tokenizer.get_vocab() != full.tokenizer.get_vocab()  # trained on 100 sentences, not 600


def test_prepare_command_then_train_on_the_prepared_folder(corpus_folder, tmp_path, capsys, tokenize_calls):
    cache = tmp_path / "cache"
    flags = [*tiny_train_flags(corpus_folder), "--cache_dir", str(cache)]
    assert main(["prepare", *flags]) == 0
    printed = capsys.readouterr().out
    (folder,) = (path for path in cache.iterdir() if path.name != FILE_DIGESTS)
    assert f"prepared {folder} (train 300 pairs, validation 12 pairs, test 12 pairs" in printed
    tokenize_calls.clear()
    # the same flags find the folder; so does --dataset naming it
    assert main(["train", *flags, "--output_dir", str(tmp_path / "one")]) == 0
    assert main(["train", *flags, "--dataset", str(folder), "--output_dir", str(tmp_path / "two")]) == 0
    assert tokenize_calls == []
    assert json.loads((tmp_path / "two" / "results.json").read_text())["train_steps"] == 3
    assert main(["train", *flags, "--dataset", str(folder), "--source_lang", "de", "--target_lang", "en"]) == 2
    assert "is prepared for en->de, not de->en" in capsys.readouterr().err


def collected_micro_batches(run: TrainingRun, count: int) -> list[dict[str, torch.Tensor]]:
    run.start_micro_batches()
    try:
        return [next(run.micro_batches) for _ in range(count)]
    finally:
        run.micro_batches = None


@pytest.mark.parametrize("workers", [0, 2])
def test_the_loader_collates_the_plans_batches_with_or_without_workers(corpus_folder, tmp_path, workers):
    arguments = tiny_arguments(corpus_folder, tmp_path / "run", dataloader_num_workers=workers, max_tokens=64)
    run = TrainingRun(*arguments)
    run.state.epoch, run.state.batch_in_epoch = 0, 3  # as a resumed run would start
    batches, epoch, _ = run.plan.take(0, 3, len(run.plan.epoch_batches(0)) + 5)  # into the next epoch
    assert epoch == 1
    loaded = collected_micro_batches(run, len(batches))
    for indices, batch in zip(batches, loaded, strict=True):
        expected = run.collator([run.corpus.train[int(i)] for i in indices])
        assert batch.keys() == expected.keys()
        for name, tensor in expected.items():
            assert torch.equal(batch[name], tensor), name


def test_each_process_gets_its_share_of_every_step():
    plan = BatchPlan(length_array_of([(i % 7 + 1, i % 5 + 1) for i in range(200)]), max_tokens=16, seed=0)
    steps, epoch, index = [], 0, 0
    for _ in range(6):
        batches, epoch, index = plan.take(epoch, index, 2 * 3)
        steps.append(batches)
    for rank in (0, 1):
        sampler = iter(OwnMicroBatches(plan, 0, 0, processes=2, rank=rank, accumulation=3))
        own = [next(sampler) for _ in range(6 * 3)]
        expected = [batch for batches in steps for batch in batches[rank::2]]
        assert all(a.tolist() == b.tolist() for a, b in zip(own, expected, strict=True))


def length_array_of(pairs):
    import datasets

    return length_array(
        datasets.Dataset.from_dict({"input_ids": [[1] * s for s, _ in pairs], "labels": [[1] * t for _, t in pairs]})
    )


TWO_PROCESSES_PREPARE_ONCE = """
import sys
from vanilla_transformer.training import TrainingRun, corpus, parse_arguments

build = corpus.build_corpus
def counted(*args):
    print("PREPARED BY A PROCESS", flush=True)
    return build(*args)
corpus.build_corpus = counted
run = TrainingRun(*parse_arguments(sys.argv[1:]))
print(f"CORPUS {run.corpus.folder}", flush=True)
run.run()
"""


def test_two_processes_prepare_the_corpus_once_and_map_the_same_folder(corpus_folder, tmp_path):
    script = tmp_path / "prepare_once.py"
    script.write_text(TWO_PROCESSES_PREPARE_ONCE)
    flags = [
        *tiny_train_flags(corpus_folder),
        "--output_dir",
        str(tmp_path / "run"),
        "--cache_dir",
        str(tmp_path / "c"),
    ]
    command = [*accelerate_two_cpu_processes(), str(script), *flags]
    result = subprocess.run(command, capture_output=True, text=True, env=QUIET_THREADS, cwd=REPO, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.count("PREPARED BY A PROCESS") == 1
    folders = {line for line in result.stdout.splitlines() if line.startswith("CORPUS ")}
    assert len(folders) == 1 and result.stdout.count("CORPUS ") == 2
    cached = [path.name for path in (tmp_path / "c").iterdir() if path.name != FILE_DIGESTS]
    assert cached == [next(iter(folders)).rsplit("/", 1)[1]]


def test_a_step_budget_of_tokens_derives_micro_batches_for_any_number_of_processes():
    _, _, args = parse_arguments(["--tokens_per_step", "25000", "--max_tokens", "12500"])
    assert [args.micro_batches_for(n) for n in (1, 2, 3, 8)] == [(12500, 2), (12500, 1), (8334, 1), (3125, 1)]
    with pytest.raises(ValueError, match="tokens_per_step=25000 derives the gradient accumulation"):
        parse_arguments(["--tokens_per_step", "25000", "--gradient_accumulation_steps", "2"])


@pytest.mark.parametrize("limits", [(None, None), (6, 4)])
def test_the_fast_encoder_gives_the_tokenizers_own_ids(corpus_folder, limits):
    from vanilla_transformer.inference import load_tokenizer

    tokenizer = load_tokenizer(corpus_folder / "tokenizer")
    sources = (corpus_folder / "train.en").read_text().splitlines()[:50] + ["", "ünïcödé ☃ not in training"]
    targets = (corpus_folder / "train.de").read_text().splitlines()[:50] + ["x", ""]
    source_ids, target_ids = corpus_module.encoder(tokenizer, limits)(sources, targets)
    source_cut, target_cut = ({"truncation": True, "max_length": limit} if limit else {} for limit in limits)
    assert source_ids == tokenizer(sources, **source_cut)["input_ids"]
    assert target_ids == tokenizer(text_target=targets, **target_cut)["input_ids"]
    assert max(map(len, source_ids)) == (limits[0] or max(map(len, source_ids)))
