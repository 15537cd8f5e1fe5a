"""Translate the source side of a corpus with a model and write an aligned corpus folder: the teacher's translations
for sequence-level distillation (Kim and Rush 2016), or synthetic sources for back-translation (Sennrich et al. 2016:
a reverse model run on target-language text).

The data flows: find every split's text (nothing read) -> the output folder's plan, checked against a folder already
there -> count each translated split (reading it once, which finds a line that is not UTF-8 before hours are spent)
-> the model (its tokenizer and languages first) -> the plan written -> translate this process's chunks, skipping
those written -> the last process joins the chunks into the corpus.
"""

from __future__ import annotations

import itertools
import sys
import time
from pathlib import Path

from tqdm.auto import tqdm

from ..common.languages import check_languages
from ..common.model_folder import load_tokenizer
from ..inference.ctranslate2_engine import load_ctranslate2
from ..inference.onnx_engine import load_onnx
from ..inference.translate import _translate, load_for_translation
from ..tokenization import iter_lines
from ..training.corpus import FileDigests, default_corpus_cache, read_split, split_source
from .arguments import CorpusTranslationArguments
from .source_side import SourceSide, find_source_side
from .translated_folder import TranslatedFolder

BACK_TRANSLATION_HINT = (
    "back-translation runs a target->source model on target-language text, with --source_lang and --target_lang swapped"
)
# the files of a model folder that are not what it translates with
_NOT_THE_MODEL = {"README.md", "results.json"}


def translate_corpus(args: CorpusTranslationArguments) -> dict:
    """Translate the splits `args.translate` names and copy the others; returns what this process did."""
    from accelerate import PartialState

    from ..training.loop import use_cpu

    state = PartialState(cpu=use_cpu(args.device == "cpu"))
    names = args.split_names()
    sides = {
        role: find_source_side(args.dataset, args.source_lang, names[role], args.dataset_config)
        for role in args.translate
    }
    carried = {
        role: split_source(args.dataset, args.source_lang, args.target_lang, name, name=args.dataset_config)
        for role, name in names.items()
        if role not in args.translate
    }
    digests = FileDigests(default_corpus_cache())
    plan = {
        "model": model_identity(args.model, digests),
        "source_lang": args.source_lang,
        "target_lang": args.target_lang,
        "splits": names,
        "translated": {role: side.identity(digests) for role, side in sides.items()},
        "carried": {role: source.identity(digests) for role, source in carried.items()},
        **args.generation_settings(),
        "dtype": args.dtype,
    }
    folder = TranslatedFolder(Path(args.output_dir), plan)
    folder.check()
    if folder.finished:
        return {"finished": True, "already": True, "folder": str(folder.folder)}
    # the tokenizer says what the model translates: a wrong model is refused before the text is read or weights load
    declared_by = load_tokenizer(args.model, described_as="model")
    check_languages(args.model, declared_by, args.source_lang, args.target_lang, BACK_TRANSLATION_HINT)
    counts = {role: count_sentences(side) for role, side in sides.items()}
    for source in carried.values():  # a carried split is refused now, not copied broken after hours of translation
        check_aligned(source)
    model, tokenizer = load_translator(args, state)
    if args.length_penalty is not None:
        model.generation_config.length_penalty = args.length_penalty
    folder.start()  # nothing is written before the model, its languages and the whole text are found good

    chunks = {role: -(-count // args.chunk_sentences) for role, count in counts.items()}
    mine = {role: [i for i in range(chunks[role]) if i % state.num_processes == state.process_index] for role in sides}
    todo = {role: [i for i in indices if not folder.has_chunk(role, i)] for role, indices in mine.items()}
    sentences_of = lambda role, i: min(args.chunk_sentences, counts[role] - i * args.chunk_sentences)  # noqa: E731
    total = sum(sentences_of(role, i) for role, indices in mine.items() for i in indices)
    remaining = sum(sentences_of(role, i) for role, indices in todo.items() for i in indices)
    bar = tqdm(
        total=total,
        initial=total - remaining,
        unit="sent",
        desc="translating",
        file=sys.stderr,
        disable=args.disable_progress_bar or not state.is_main_process,
        smoothing=0.05,
    )
    started = time.perf_counter()
    with bar:
        for role, side in sides.items():
            wanted = set(todo[role])
            texts = side.texts()
            for index in range(chunks[role]):
                chunk = list(itertools.islice(texts, args.chunk_sentences))
                if index not in wanted:
                    continue
                first = index * args.chunk_sentences
                folder.remove_partial_chunk(role, index)
                translations = _translate(
                    model,
                    tokenizer,
                    chunk,
                    num_beams=args.num_beams,
                    max_new_tokens=args.max_new_tokens,
                    batch_size=args.batch_size,
                    max_input_tokens=args.max_input_tokens,
                    device=None,
                    progress=False,
                    line_names=[side.line_name(first + k) for k in range(len(chunk))],
                    on_batch=bar.update,
                )
                bar.update(len(chunk) - sum(1 for text in chunk if text.strip()))  # empty lines skip the model
                folder.write_chunk(role, index, translations)
    seconds = time.perf_counter() - started
    done = {"translated_sentences": remaining, "seconds": round(seconds, 1), "folder": str(folder.folder)}
    done["sentences_per_second"] = round(remaining / seconds, 1) if remaining and seconds > 0 else None

    every_chunk = all(folder.has_chunk(role, i) for role in sides for i in range(chunks[role]))
    with folder.finishing() as to_finish:
        if not (to_finish and every_chunk):
            return {**done, "finished": folder.finished}
        written = {}
        for role, side in sides.items():
            name = names[role]
            written[name] = folder.write_split(name, args.source_lang, side.texts())
            translated = folder.write_split(name, args.target_lang, folder.chunk_lines(role, chunks[role]))
            if translated != written[name]:  # a chunk changed under the run: never a misaligned corpus
                raise RuntimeError(f"{name}: {written[name]} sources but {translated} translations")
        for role, source in carried.items():
            if len(source.files) == 2:  # two text files: copied as they are, line numbers and bytes kept
                folder.copy_split(source.files)
                written[names[role]] = sum(1 for _ in iter_lines(source.files[0]))
            else:  # a table or a Hub dataset: its pairs as text files
                pairs = read_split(source)
                folder.write_split(names[role], args.source_lang, pairs[args.source_lang])
                folder.write_split(names[role], args.target_lang, pairs[args.target_lang])
                written[names[role]] = pairs.num_rows
        folder.finish(
            {
                "model": args.model,
                "translated_splits": [names[role] for role in sides],
                "carried_splits": [names[role] for role in carried],
                "sentences": written,
            }
        )
    return {**done, "finished": True, "sentences": written}


def load_translator(args: CorpusTranslationArguments, state):
    """The model and tokenizer of `args.model` on this process's device (each process of a launch has its own)."""
    device = args.device or ("cpu" if args.quantize and args.engine == "pytorch" else state.device.type)
    if args.engine == "ctranslate2":
        compute_type = args.quantize or args.dtype or "default"
        index = state.local_process_index if device == "cuda" else 0
        return load_ctranslate2(args.model, device, compute_type, device_index=index)
    if args.engine == "onnx":
        return load_onnx(args.model)
    if device == "cuda":
        device = str(state.device)
    return load_for_translation(args.model, device, args.dtype, args.trust_remote_code, args.quantize)


def count_sentences(side: SourceSide) -> int:
    count = sum(1 for _ in side.texts())
    if not count:
        raise ValueError(f"{side.describe()} holds no text to translate")
    return count


def check_aligned(source) -> None:
    """A split of two text files has as many lines in each (a table or a Hub dataset is aligned by its rows)."""
    if len(source.files) != 2:
        return
    lines = [sum(1 for _ in iter_lines(path)) for path in source.files]
    if lines[0] != lines[1]:
        raise ValueError(
            f"{source.files[0]} has {lines[0]} lines but {source.files[1]} has {lines[1]}: parallel files must be "
            "aligned line by line"
        )


def model_identity(model: str, digests: FileDigests) -> str | dict[str, str]:
    """A local model folder by the bytes of each of its files (not its card), a Hub id by its name."""
    path = Path(model)
    if not path.is_dir():
        return f"hub:{model}"
    files = sorted(entry for entry in path.iterdir() if entry.is_file() and entry.name not in _NOT_THE_MODEL)
    return {entry.name: digests(entry) for entry in files}
