"""The benchmarks: the speed benchmark runs end to end at a toy size and reports what it measured; the Multi30k
benchmark takes its languages from its config."""

import importlib.util
import itertools
import json
import statistics
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from helpers import write_lines

from benchmarks import multi30k, speed
from vanilla_transformer.training import DataArguments

REPO = Path(__file__).resolve().parents[1]
TOY_SIZE = [
    "--vocab", "60", "--d-model", "16", "--layers", "1", "--heads", "2", "--ffn", "32",
    "--batch", "4", "--src-len", "5", "--tgt-len", "6", "--gen-batch", "3", "--new-tokens", "4",
    "--train-steps", "1", "--gen-calls", "1", "--pairs", "2", "--warmup", "0", "--threads", "1",
]  # fmt: skip


MULTI30K = REPO.parent / "shared" / "data" / "multi30k"


def multi30k_sample(folder: Path, train_lines: int = 3000, other_lines: int = 100) -> Path:
    """The first lines of Multi30k's English and German splits, as the full corpus's files: what a smoke run needs, at
    a tenth of the tokenizing and counting."""
    from vanilla_transformer.tokenization import iter_lines

    folder.mkdir(parents=True, exist_ok=True)
    for split, lines in (("train", train_lines), ("val", other_lines), ("test_2016_flickr", other_lines)):
        for lang in ("en", "de"):
            first = itertools.islice(iter_lines(MULTI30K / f"{split}.{lang}.gz"), lines)
            write_lines(folder / f"{split}.{lang}.gz", list(first))
    return folder


def run_speed_benchmark(tmp_path, *flags: str, after: tuple[str, ...] = ()) -> tuple[list[str], dict]:
    """`benchmarks.speed` at the toy size with `flags` (and `after` it, to override it): the printed table's lines and
    the JSON it wrote."""
    report = tmp_path / "speed.json"
    completed = subprocess.run(
        [sys.executable, "-m", "benchmarks.speed", *flags, *TOY_SIZE, *after, "--json", str(report)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert completed.returncode == 0, completed.stderr[-3000:]
    table = [line for line in completed.stdout.splitlines() if line.startswith("| ")]
    return table, json.loads(report.read_text())


def test_speed_benchmark_prints_ratios_of_both_models_and_writes_json(tmp_path):
    ct2 = importlib.util.find_spec("ctranslate2") is not None
    table, results = run_speed_benchmark(tmp_path, "--skip-memory", *(["--ct2"] if ct2 else []))
    assert [line.split(" | ")[0] for line in table[1:]] == [
        "| Training (tokens/s)",
        "| Greedy generate (new tokens/s)",
        "| Beam 5 generate (new tokens/s)",
    ]
    headers = table[0].split(" | ")
    assert "vanilla_transformer int8" in headers and headers[-2:] == ["ours / Marian", "ours int8 / Marian |"]
    if ct2:
        assert {"CTranslate2 int8 (Marian)", "CTranslate2 float32 (our export)"} <= set(headers)
    for row in results["rows"]:
        assert len(row["samples"]["ours"]) == len(row["samples"]["marian"]) == 2
        ratios = [a / b for a, b in zip(row["samples"]["ours"], row["samples"]["marian"], strict=True)]
        assert row["ours_over_marian"] == pytest.approx(statistics.median(ratios))
        assert all(value > 0 for values in row["samples"].values() for value in values)
        if "ours int8" in row["samples"]:
            int8 = [a / b for a, b in zip(row["samples"]["ours int8"], row["samples"]["marian"], strict=True)]
            assert row["over_marian"]["ours int8"] == pytest.approx(statistics.median(int8))
    assert "ours int8" in results["rows"][1]["samples"] and "ours int8" not in results["rows"][0]["samples"]
    if ct2:
        assert {"ours ct2 float32", "ours ct2 int8", "ct2 float32"} <= set(results["rows"][2]["samples"])


def test_the_marian_mode_times_the_same_weights_greedy_and_beam_4(tmp_path):
    pytest.importorskip("ctranslate2", reason='the CTranslate2 rows need ".[ct2]"')
    table, results = run_speed_benchmark(tmp_path, "--marian")
    # generation only, beam 4 unless told otherwise, and CTranslate2 on the converted model's export
    assert [line.split(" | ")[0] for line in table[1:]] == [
        "| Greedy generate (new tokens/s)",
        "| Beam 4 generate (new tokens/s)",
    ]
    assert "CTranslate2 float32 (our export)" in table[0]
    note = next(note for note in results["notes"] if note.startswith("Same weights"))
    difference = float(note.rsplit(" is ", 1)[1].rstrip("."))
    assert difference < 1e-5
    args = speed.parse_arguments(["--marian"])
    assert (args.vocab, args.d_model, args.layers, args.heads, args.ffn, args.beams) == (58101, 512, 6, 8, 2048, 4)


def test_the_shortlist_columns_time_our_model_and_export_with_and_without_it(tmp_path):
    """--shortlist: real sentences for every column, a shortlist of the training split, our model with it beside
    Marian, and with --ct2 the same export with and without its vocabulary map."""
    ct2 = importlib.util.find_spec("ctranslate2") is not None
    flags = ["--skip-memory", "--shortlist", *(["--ct2"] if ct2 else [])]
    table, results = run_speed_benchmark(tmp_path, *flags, after=("--vocab", "400", "--src-len", "12"))
    headers = table[0].split(" | ")
    assert {"vanilla_transformer + shortlist", "ours + shortlist / Marian"} <= set(headers)
    for row in results["rows"][1:]:
        shortlisted = [a / b for a, b in zip(row["samples"]["ours shortlist"], row["samples"]["marian"], strict=True)]
        assert row["over_marian"]["ours shortlist"] == pytest.approx(statistics.median(shortlisted))
        if ct2:
            with_map, without = row["samples"]["ours ct2 int8 vmap"], row["samples"]["ours ct2 int8"]
            ratio = statistics.median([a / b for a, b in zip(with_map, without, strict=True)])
            assert row["other_ratios"]["our export int8: with map / without"] == pytest.approx(ratio)
    note = next(note for note in results["notes"] if note.startswith("Shortlist:"))
    kept = int(note.split("its shortlist keeps ")[1].split(" of")[0].replace(",", ""))
    assert 0 < kept < 400 and "of the generator's 400 rows" in note


def test_ids_of_a_small_vocabulary_spread_over_a_large_one_stay_distinct_and_keep_the_special_tokens():
    relabel = speed.id_relabelling(300, 58101, seed=0)
    assert relabel[:4].tolist() == [0, 1, 2, 3] and len(set(relabel.tolist())) == 300 and int(relabel.max()) < 58101
    assert torch.equal(speed.id_relabelling(300, 300, seed=0), torch.arange(300))


def test_the_shortlist_benchmark_prints_quality_and_build_rows(tmp_path):
    """benchmarks.shortlist at a smoke size: a random model with a small tokenizer of Multi30k's first pairs, 12 test
    sentences, one K, greedy, and a build at 3,000 synthetic pairs."""
    from vanilla_transformer import VanillaTransformerConfig, VanillaTransformerForConditionalGeneration
    from vanilla_transformer.tokenization import iter_lines, train_tokenizer

    data = multi30k_sample(tmp_path / "multi30k")
    tokenizer = train_tokenizer(
        (line for lang in ("en", "de") for line in iter_lines(data / f"train.{lang}.gz")), vocab_size=400
    )
    config = VanillaTransformerConfig(vocab_size=len(tokenizer), d_model=16, encoder_layers=1, decoder_layers=1,
                                      encoder_attention_heads=2, decoder_attention_heads=2, encoder_ffn_dim=32,
                                      decoder_ffn_dim=32)  # fmt: skip
    model_folder = tmp_path / "model"
    torch.manual_seed(0)
    VanillaTransformerForConditionalGeneration(config).save_pretrained(model_folder)
    tokenizer.save_pretrained(model_folder)
    command = [sys.executable, "-m", "benchmarks.shortlist", "--model", str(model_folder), "--work", str(tmp_path),
               "--test-sentences", "12", "--candidates", "5", "--frequent", "100", "--beams", "1",
               "--pairs", "3000"]  # fmt: skip
    completed = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=900)
    assert completed.returncode == 0, completed.stderr[-3000:]
    rows = [line.split(" | ") for line in completed.stdout.splitlines() if line.startswith("| ")]
    assert [row[:2] for row in rows if row[1] == "greedy"] == [["| none", "greedy"], ["| K=5, N=100", "greedy"]]
    shortlisted = next(row for row in rows if row[0] == "| K=5, N=100")
    assert 0 < int(shortlisted[6].split(" ")[0].replace(",", "")) < len(tokenizer)
    builds = [row for row in rows if row[0] in ("| the model's corpus", "| 3,000 synthetic pairs")]
    # (pairs longer than the corpus's length limit are left out: no more than written)
    assert len(builds) == 2 and all(0 < int(row[1].replace(",", "")) <= 29000 and float(row[2]) > 0 for row in builds)


def test_peak_memory_of_a_phase_counts_what_the_phase_allocates():
    args = speed.build_parser().parse_args(TOY_SIZE)
    small = speed.phase_memory(args, "ours", "train")
    args = speed.build_parser().parse_args([*TOY_SIZE, "--batch", "512", "--src-len", "64", "--tgt-len", "64"])
    large = speed.phase_memory(args, "ours", "train")
    # 512 x 64 target tokens x 60 logits alone are 7.5 MiB in float32, kept for the backward pass
    assert large > small + 5 * 2**20


@pytest.mark.parametrize("evaluate_only", [True, False], ids=["evaluate", "train-then-evaluate"])
@pytest.mark.parametrize(
    "config_text, languages",
    [
        ("source_lang: fr\ntarget_lang: en\n", ("fr", "en")),
        ("seed: 2\n", (DataArguments.source_lang, DataArguments.target_lang)),
    ],
    ids=["config-languages", "default-languages"],
)
def test_multi30k_trains_and_scores_in_the_languages_of_its_config(
    tmp_path, monkeypatch, capsys, config_text, languages, evaluate_only
):
    config = tmp_path / "recipe.yaml"
    config.write_text(config_text)
    trained, scored = [], []

    def fake_train(model_args, data_args, train_args):
        trained.append((data_args.source_lang, data_args.target_lang))
        return {}

    def fake_evaluate_folder(folder, data, source_lang, target_lang, split, num_beams, batch_size, quantize):
        assert quantize is None
        scored.append((source_lang, target_lang))
        return {"split": split, "num_beams": num_beams, "bleu_lowercased": 1.0, "bleu": 1.0, "chrf": 1.0}

    monkeypatch.setattr("vanilla_transformer.training.train", fake_train)
    monkeypatch.setattr(multi30k, "evaluate_folder", fake_evaluate_folder)
    evaluate = ["--evaluate", str(tmp_path / "model")] if evaluate_only else ["--output_dir", str(tmp_path / "out")]
    multi30k.main(["--config", str(config), "--data", str(tmp_path / "data"), *evaluate])

    assert scored == [languages]
    assert trained == ([] if evaluate_only else [languages])
    assert capsys.readouterr().out.splitlines()[-1].startswith("| test_2016_flickr | 1.0 | 1.0 | 1.0 | 5 |")


def test_sst2_benchmark_trains_both_models_the_same_number_of_steps_and_prints_the_table(tmp_path):
    for split, count in (("train", 120), ("validation", 30)):
        lines = ["sentence\tlabel", *(f"{'good' if i % 2 else 'bad'} film number {i}\t{i % 2}" for i in range(count))]
        (tmp_path / f"{split}.tsv").write_text("\n".join(lines) + "\n")
    toy = ["--d-model", "16", "--layers", "1", "--heads", "2", "--ffn", "32", "--vocab-size", "300"]
    completed = subprocess.run(
        [sys.executable, "-m", "benchmarks.sst2", "--data", str(tmp_path), "--minutes", "0.05", *toy,
         "--batch-size", "16", "--max-steps", "100000", "--warmup-steps", "2", "--output-dir", str(tmp_path / "out")],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )  # fmt: skip
    assert completed.returncode == 0, completed.stderr[-3000:]
    rows = [line.split(" | ") for line in completed.stdout.splitlines() if line.startswith("| ") and "%" in line]
    assert [row[0] for row in rows] == ["| vanilla-transformer", "| BertForSequenceClassification"]
    ours_steps, bert_steps = int(rows[0][2]), int(rows[1][2])
    assert 0 < ours_steps < 100000 and bert_steps == ours_steps  # the budget ended ours; BERT took as many steps


def test_the_wmt14_recipe_runs_end_to_end_at_a_tiny_size(tmp_path):
    """configs/wmt14_en_de_base.yaml as benchmarks.wmt14 runs it, with the sizes overridden to tiny and a corpus of
    WMT14's shape (train, validation and test in en and de) made of the demo's numbers."""
    from vanilla_transformer.demo.number_words import demo_splits, write_parallel_folder

    data = write_parallel_folder(tmp_path / "wmt-shaped", demo_splits(train_size=400, test_size=8, seed=0))
    tiny = ["--d_model", "16", "--encoder_layers", "1", "--decoder_layers", "1", "--encoder_attention_heads", "2",
            "--decoder_attention_heads", "2", "--encoder_ffn_dim", "32", "--decoder_ffn_dim", "32",
            "--vocab_size", "300",
            "--max_steps", "4", "--warmup_steps", "2", "--tokens_per_step", "512", "--max_tokens", "256",
            "--save_steps", "2", "--eval_steps", "2", "--max_eval_samples", "4", "--use_cpu", "--report_to", "none",
            "--disable_progress_bar"]  # fmt: skip
    output = tmp_path / "out"
    command = [sys.executable, "-m", "benchmarks.wmt14", "--config", "configs/wmt14_en_de_base.yaml",
               "--dataset", str(data), "--output_dir", str(output), "--cache_dir", str(tmp_path / "cache"),
               *tiny]  # fmt: skip
    completed = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=600)
    assert completed.returncode == 0, completed.stderr[-3000:]
    rows = dict(line.strip("| ").split(" | ") for line in completed.stdout.splitlines() if line.startswith("| "))
    assert rows["steps"] == "4" and rows["processes x micro-batches a step x tokens each"] == "1 x 2 x 256"
    assert float(rows["BLEU, sacreBLEU (cased, 13a)"]) >= 0
    assert rows["BLEU, tokenized with compounds split (the paper's scoring)"].endswith("(paper: -)")  # not the base
    results = json.loads((output / "results.json").read_text())
    assert results["averaged_checkpoints"] == 2 and results["mixed_precision"] == "bf16"
    assert {"bleu", "bleu_compound_split", "chrf"} <= results["test"].keys()
    generation = json.loads((output / "generation_config.json").read_text())
    assert (generation["num_beams"], generation["length_penalty"], generation.get("max_new_tokens")) == (4, 0.6, None)
    assert "compounds split: the paper's WMT14 scoring" in (output / "README.md").read_text()


def test_the_finetune_benchmark_prints_a_row_for_each_way_and_the_seq2seq_trainer_ratio(tmp_path):
    """benchmarks.finetune at a smoke size: a demo of a few seconds, a few steps of each row."""
    pytest.importorskip("peft")
    command = [sys.executable, "-m", "benchmarks.finetune", "--work", str(tmp_path), "--demo-minutes", "0.05",
               "--demo-train-size", "300", "--new-train", "40", "--new-test", "6", "--old-test", "6", "--steps", "2",
               "--warmup-steps", "1", "--max-tokens", "512", "--speed-pairs", "2"]  # fmt: skip
    completed = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=600)
    assert completed.returncode == 0, completed.stderr[-3000:]
    rows = [line.split(" | ") for line in completed.stdout.splitlines() if line.startswith("| ") and "%" in line]
    assert [row[0] for row in rows] == [
        "| full fine-tuning",
        "| full, with replay of the old domain",
        "| encoder frozen",
        "| LoRA",
        "| full fine-tuning, transformers' Seq2SeqTrainer, its default sampler (random batches)",
        "| full fine-tuning, transformers' Seq2SeqTrainer, group_by_length",
    ]
    trainable = [int(row[6].replace(",", "")) for row in rows]
    assert trainable[2] < trainable[0] == trainable[1] == trainable[4] == trainable[5] and trainable[3] < trainable[2]
    assert all(0 < float(row[8].rstrip("% |")) <= 100 for row in rows)  # the share of tokens that are not padding
    for sampler in ("random", "group_by_length"):
        assert f"ours / Seq2SeqTrainer ({sampler}), training tokens/s" in completed.stdout
    results = json.loads((tmp_path / "results.json").read_text())
    assert {sampler: len(ratios) for sampler, ratios in results["speed_ratios"].items()} == {
        "random": 2,
        "group_by_length": 2,
    }
    assert all(ratio > 0 for ratios in results["speed_ratios"].values() for ratio in ratios)
    assert all(0 <= row["new_after"] <= 100 and row["tokens_per_second"] > 0 for row in results["rows"])


def test_the_distill_benchmark_prints_each_model_its_scores_speeds_stages_and_the_goals(tmp_path):
    """benchmarks.distill at a smoke size: a teacher and two students of seconds on 300 Multi30k pairs."""
    pytest.importorskip("ctranslate2")
    command = [sys.executable, "-m", "benchmarks.distill", "--work", str(tmp_path), "--teacher-minutes", "0.05",
               "--student-minutes", "0.05", "--train-sentences", "300", "--test-sentences", "20",
               "--max-new-tokens", "6"]  # fmt: skip
    completed = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=900)
    assert completed.returncode == 0, completed.stderr[-3000:]
    rows = [line.split(" | ") for line in completed.stdout.splitlines() if line.startswith("| ") and "beam" in line]
    rows += [line.split(" | ") for line in completed.stdout.splitlines() if line.startswith("| ") and "greedy" in line]
    assert sorted((row[0], row[1]) for row in rows) == [
        ("| distilled student", "beam 5"),
        ("| distilled student", "greedy"),
        ("| student on references", "beam 5"),
        ("| student on references", "greedy"),
        ("| teacher", "beam 5"),
    ]
    assert all(float(row[4].replace(",", "")) > 0 and float(row[5].replace(",", "")) > 0 for row in rows)
    for stage in ("teacher training", "teacher translation of the training sources", "distilled student, training"):
        assert f"| {stage} | " in completed.stdout
    assert "distilled - on references, BLEU4: greedy" in completed.stdout
    assert "distilled greedy / teacher beam 5, new tokens/s: PyTorch float32" in completed.stdout
    corpus = tmp_path / "distilled-corpus"
    assert sorted(path.name for path in corpus.iterdir() if path.name.startswith("train")) == ["train.de", "train.en"]
    assert len((corpus / "train.de").read_text().splitlines()) == 300


def test_the_onnx_columns_time_our_export_beside_the_others_and_one_sentence_at_a_time(tmp_path):
    pytest.importorskip("onnxruntime", reason='the ONNX columns need ".[onnx]"')
    table, results = run_speed_benchmark(tmp_path, "--skip-memory", "--onnx", "--one-at-a-time", "2")
    headers = table[0].split(" | ")
    assert {"ONNX Runtime float32 (our export)", "ONNX Runtime int8 (our export)", "ONNX int8 / Marian"} <= set(headers)
    assert "ONNX float32 / ours generate()" in headers
    assert [line.split(" | ")[0] for line in table[1:]][
        -1
    ] == "| Greedy, one sentence at a time (2 sentences) (ms a sentence)"
    for row in results["rows"][1:]:
        onnx = [a / b for a, b in zip(row["samples"]["onnx int8"], row["samples"]["marian"], strict=True)]
        assert row["over_marian"]["onnx int8"] == pytest.approx(statistics.median(onnx))
    note = next(note for note in results["notes"] if note.startswith("ONNX export:"))
    assert "x the model's safetensors" in note


def test_the_onnx_benchmark_prints_bleu_identity_and_sizes(tmp_path):
    """benchmarks.onnx at a smoke size: a random tiny model with a tokenizer of Multi30k's first pairs, 6 test
    sentences."""
    pytest.importorskip("onnxruntime", reason='benchmarks.onnx needs ".[onnx]"')
    from vanilla_transformer import VanillaTransformerConfig, VanillaTransformerForConditionalGeneration
    from vanilla_transformer.tokenization import iter_lines, train_tokenizer

    data = multi30k_sample(tmp_path / "multi30k")
    tokenizer = train_tokenizer(
        (line for lang in ("en", "de") for line in iter_lines(data / f"train.{lang}.gz")), vocab_size=400
    )
    config = VanillaTransformerConfig(vocab_size=len(tokenizer), d_model=16, encoder_layers=1, decoder_layers=1,
                                      encoder_attention_heads=2, decoder_attention_heads=2, encoder_ffn_dim=32,
                                      decoder_ffn_dim=32, max_position_embeddings=64)  # fmt: skip
    model_folder = tmp_path / "model"
    torch.manual_seed(0)
    model = VanillaTransformerForConditionalGeneration(config)
    model.generation_config.max_new_tokens = 8
    model.save_pretrained(model_folder)
    tokenizer.save_pretrained(model_folder)
    command = [
        sys.executable,
        "-m",
        "benchmarks.onnx",
        "--model",
        str(model_folder),
        "--data",
        str(data),
        "--sentences",
        "6",
        "--beams",
        "2",
    ]
    completed = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=900)
    assert completed.returncode == 0, completed.stderr[-3000:]
    rows = [line.split(" | ") for line in completed.stdout.splitlines() if line.startswith("| ") and "/6" in line]
    engines = ["| PyTorch generate()", "| ONNX Runtime float32", "| ONNX Runtime int8"]
    assert [(row[0], row[1]) for row in rows] == [(e, d) for d in ("greedy", "beam 2") for e in engines]
    assert all(row[3] == "6/6" for row in rows if row[0] != "| ONNX Runtime int8")
    assert "x the safetensors" in completed.stdout and "Largest logit difference" in completed.stdout


def test_the_gpu_benchmark_runs_every_part_at_a_tiny_size_on_the_cpu(tmp_path):
    """benchmarks.gpu's prepared script at the smoke size, eager (compiling takes minutes on a CPU, and
    tests/test_training_speed.py compiles the same step): the loop, the bare model, Seq2SeqTrainer's Marian and
    generation each measured, and the table and JSON written."""
    report = tmp_path / "gpu.json"
    command = [sys.executable, "-m", "benchmarks.gpu", "--device", "cpu", "--sizes", "tiny", "--pairs", "600",
               "--vocab-size", "400", "--steps", "2", "--warmup-steps", "1", "--tokens-per-step", "1000",
               "--max-tokens", "500", "--gen-sentences", "4", "--new-tokens", "3", "--modes", "eager",
               "--work", str(tmp_path / "work"), "--json", str(report)]  # fmt: skip
    completed = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=600)
    assert completed.returncode == 0, completed.stderr[-3000:]
    # "| measurement | value |", the value empty where a CPU has none (MFU, GPU memory)
    cells = [[cell.strip() for cell in line.strip()[1:-1].split("|")] for line in completed.stdout.splitlines()]
    rows = dict(row for row in cells if len(row) == 2)
    for label in ("train loop, eager: training tokens/s", "bare model, eager: training tokens/s",
                  "MarianMTModel + Seq2SeqTrainer: training tokens/s", "generate, greedy, dynamic cache: new tokens/s",
                  "generate, beam 4, static cache: new tokens/s"):  # fmt: skip
        assert float(rows[label].replace(",", "")) > 0, label
    measured = json.loads(report.read_text())["measured"]["tiny"]
    assert measured["loop eager"]["compiled_graphs"] is None and "loop compiled" not in measured


def test_the_training_profile_splits_the_step_into_matrix_products_and_the_rest(tmp_path):
    completed = subprocess.run(
        [
            sys.executable,
            "-m",
            "benchmarks.training_profile",
            *TOY_SIZE,
            "--steps",
            "1",
            "--compile-backend",
            "aot_eager",
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert completed.returncode == 0, completed.stderr[-3000:]
    cells = [
        [cell.strip() for cell in line[1:-1].split("|")] for line in completed.stdout.splitlines() if line[:2] == "| "
    ]
    rows = {row[0]: row[1:] for row in cells}
    assert list(rows) == ["ms a step", "step (wall)", "matrix products", "attention", "compiled graphs' kernels",
                          "everything else", "matrix products and attention, share of operator time",
                          "warm-up (1 steps, compilation included), s"]  # fmt: skip
    assert float(rows["matrix products"][0]) > 0 and float(rows["compiled graphs' kernels"][0]) == 0
    # the compiled step was compiled (aot_eager's graphs run as eager operators, so they count as the rest)
    assert "compiled: 1 graph(s) (aot_eager)" in completed.stdout
    assert float(rows["warm-up (1 steps, compilation included), s"][1]) > float(
        rows["warm-up (1 steps, compilation included), s"][0]
    )


def test_the_ci_benchmark_runs_a_clone_with_the_shared_folder_and_reports_its_steps_passes_and_slowest_tests(tmp_path):
    from benchmarks import ci_time

    repository, shared = tmp_path / "repository", tmp_path / "shared"
    (repository / ".ci").mkdir(parents=True)
    (shared / "data").mkdir(parents=True)
    # a stand-in for .ci/run that prints what the real one does: steps, a durations table before each summary
    (repository / ".ci" / "run").write_text(
        'cd "$(dirname "$0")/.."\n'
        "echo '+ [0 s] pip install the project'\n"
        'echo "PYTEST_ADDOPTS=$PYTEST_ADDOPTS"\n'
        "test -d ../shared/data && echo 'the shared data is beside the clone'\n"
        "echo '============================ slowest 2 durations ============================'\n"
        "echo '3.50s call     tests/test_a.py::test_slow'\n"
        "echo '0.20s setup    tests/test_a.py::test_fast[1]'\n"
        "echo ''\n"
        "echo '3 passed, 1 skipped, 5 subtests passed in 4.50s (0:00:04)'\n"
        "echo '+ [5 s] pytest with the lowest | versions'\n"
        "echo '2 passed in 1.00s'\n"
        "exit 3\n"
    )
    subprocess.run(["git", "init", "-q", str(repository)], check=True)
    subprocess.run(["git", "-C", str(repository), "add", "."], check=True)
    subprocess.run(
        ["git", "-C", str(repository), "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "stand-in CI"],
        check=True,
    )
    log_path = tmp_path / "ci.log"
    arguments = ["--repository", str(repository), "--shared", str(shared), "--durations", "7", "--log", str(log_path)]
    result = subprocess.run(
        [sys.executable, "-m", "benchmarks.ci_time", *arguments], cwd=REPO, capture_output=True, text=True
    )
    assert result.returncode == 0, result.stderr
    output_log = log_path.read_text()
    assert "PYTEST_ADDOPTS=--durations=7" in output_log
    assert "the shared data is beside the clone" in output_log
    report = result.stdout
    assert "- Commit: " in report and "stand-in CI" in report
    assert ", exit status 3" in report
    assert "| 0 | pip install the project |" in report
    assert "| 5 | pytest with the lowest \\| versions |" in report
    assert "| pytest pass 1 | 3 passed, 1 skipped, 5 subtests passed | 4.5 |" in report
    assert "| pytest pass 2 | 2 passed | 1.0 |" in report
    run = ci_time.parse_log(output_log)
    assert run.exit_status == 3 and run.total_seconds is not None
    assert f"| outside pytest | | {run.total_seconds - 5.5:,.1f} |" in report
    assert [slow.test for slow in run.passes[0].slowest] == [
        "tests/test_a.py::test_slow",
        "tests/test_a.py::test_fast[1]",
    ]
    assert run.passes[0].slowest[0].seconds == 3.5 and run.passes[0].slowest[1].phase == "setup"
    assert "#### Pass 1: the 2 slowest" in report and "#### Pass 2" not in report
