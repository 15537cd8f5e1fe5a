"""Speed and memory of vanilla_transformer against transformers' MarianMTModel at the same size.

Both models are built in one process with the same shape (post-LN, sinusoidal positions, ReLU, tied
embeddings, sqrt(d_model)-scaled embeddings) and measured in alternating pairs, so that drift of the machine
(frequency, other load) hits both alike; each figure is the median over the pairs, and each ratio the
median of the per-pair ratios. Measured:

  * training tokens/s: forward + backward + AdamW step (fused, as our loop and transformers' Trainer take it),
    source + target tokens counted; with --compile, also our training forward and loss compiled as
    `train --torch_compile` compiles them (inductor, dynamic shapes); with --unfused, also ours with the logits made
    whole before the loss (`loss_blocks=0`, the path before the generator and loss ran in blocks);
  * generate() new tokens/s: exactly --new-tokens per sentence (min_new_tokens = max_new_tokens), greedy
    and beam search, under eval() and torch.inference_mode();
  * peak memory of each phase above the built model: on CPU the peak RSS increase in a fresh process per
    (model, phase); on CUDA torch.cuda.max_memory_allocated; with --unfused, the training step's of both our paths
    (`ours / ours unfused`: what running the generator and loss in blocks saves).

On the CPU in float32, generation is also measured with our model's linear layers in int8 (`ours int8`: torch's
dynamic quantization, what `translate --quantize int8` does). With --ct2, CTranslate2's translate_batch is added on
the same random-weight Marian converted by CTranslate2's own converter, and on our model exported by
`vanilla-transformer export ctranslate2` (float32 and int8 each).

With --marian, the two models hold the same weights: one random-weight MarianMTModel at opus-mt-en-de's size (vocab
58,101, d_model 512, 6+6 layers, 8 heads, FFN 2048, swish) and ours converted from it by `convert marian`'s config
and weight copy; generate() greedy and beam 4 on 32 sentences, and CTranslate2 on the export of the converted model
(training and memory are left out).

With --onnx, our random-weight model exported by `vanilla-transformer export onnx` (float32, and int8 by ONNX Runtime's
dynamic quantization) generates through `load_onnx` (ONNX Runtime behind transformers' generate()), beside the
others, and a row times greedy decoding one sentence at a time (--one-at-a-time sentences, each its own generate()
call, as an interactive user sends them), in ms a sentence; a note gives the export's file sizes against the
model's safetensors.

With --shortlist, our model also generates with a lexical shortlist (`generate(use_shortlist=True)`), and with --ct2
our export also runs with its vocabulary map (CTranslate2's `use_vmap`). A shortlist is only as small as real text
makes it, so the generation inputs become real sentences for every column: Multi30k's test sentences (cut to
--src-len tokens), tokenized by a BPE vocabulary of at most 8,000 trained on its training split, from which the
shortlist is built (`vanilla-transformer shortlist`'s builder and defaults). Where --vocab is larger than that
vocabulary (--marian: 58,101), its ids are spread over the larger one by a fixed random relabelling, so that the
generator has the model's size while the shortlist keeps what real text gives.

    python -m benchmarks.speed                      # defaults: about 3 minutes on 2 idle CPU cores
    python -m benchmarks.speed --compile --unfused  # + the compiled and the unfused training columns
    python -m benchmarks.speed --vocab 37000 --unfused --skip-generation   # the training step's memory at 37,000
    python -m benchmarks.speed --ct2 --json speed.json
    python -m benchmarks.speed --marian --pairs 3 --warmup 1 --gen-calls 1
    python -m benchmarks.speed --shortlist --ct2 --skip-memory
    python -m benchmarks.speed --onnx --ct2 --skip-memory
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import ctypes
import gc
import importlib.util
import multiprocessing
import os
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch
import transformers
from transformers import GenerationConfig, MarianConfig, MarianMTModel

from vanilla_transformer import VanillaTransformerConfig, VanillaTransformerForConditionalGeneration

from .common import MIB, Report, Row, load_average, log, machine_description, publish

PAD_ID, BOS_ID, EOS_ID = 0, 1, 2
DECODER_START_ID = BOS_ID
# the same in both model configs and in the generation config
SPECIAL_TOKEN_IDS = dict(
    pad_token_id=PAD_ID, bos_token_id=BOS_ID, eos_token_id=EOS_ID, decoder_start_token_id=DECODER_START_ID
)
FIRST_WORD_ID = 4  # random sentences use ids from here on (3 is <unk>): never a special token
LEARNING_RATE = 1e-4
MEMORY_TRAIN_STEPS = 2  # the first step allocates AdamW's state, the second runs with it in place

MODEL_NAMES = ("ours", "marian")
MODEL_LABELS = {"ours": "vanilla_transformer", "marian": "Marian (HF)"}
# our model with the whole logits made before the loss (--unfused): the training step as it was before issue 52
UNFUSED = "ours unfused"
CT2_COMPUTE_TYPES = ("float32", "int8")  # int8 is quantised from the float32 files when loading
# the report's columns: the two models, ours in int8, then CTranslate2's translators of Marian ("ct2 float32") and of
# our export ("ours ct2 float32")
COLUMNS = {
    **MODEL_LABELS,
    "ours compiled": "vanilla_transformer compiled",
    UNFUSED: "vanilla_transformer, unfused loss",
    "ours int8": "vanilla_transformer int8",
    **{f"ct2 {kind}": f"CTranslate2 {kind} (Marian)" for kind in CT2_COMPUTE_TYPES},
    **{f"ours ct2 {kind}": f"CTranslate2 {kind} (our export)" for kind in CT2_COMPUTE_TYPES},
    "ours shortlist": "vanilla_transformer + shortlist",
    "onnx float32": "ONNX Runtime float32 (our export)",
    "onnx int8": "ONNX Runtime int8 (our export)",
    **{f"ours ct2 {kind} vmap": f"CTranslate2 {kind} (our export + vocabulary map)" for kind in CT2_COMPUTE_TYPES},
}
RATIO_COLUMNS = {
    "ours": "ours / Marian",
    "ours compiled": "ours compiled / Marian",
    "ours int8": "ours int8 / Marian",
    "ours shortlist": "ours + shortlist / Marian",
    "onnx float32": "ONNX float32 / Marian",
    "onnx int8": "ONNX int8 / Marian",
}
# the export with its vocabulary map against the same export without it
OTHER_RATIOS = {
    "ours / ours unfused": ("ours", UNFUSED),
    **{
        f"our export {kind}: with map / without": (f"ours ct2 {kind} vmap", f"ours ct2 {kind}")
        for kind in CT2_COMPUTE_TYPES
    },
} | {f"ONNX {kind} / ours generate()": (f"onnx {kind}", "ours") for kind in ("float32", "int8")}
ONNX_KINDS = {"onnx float32": None, "onnx int8": "int8"}
SHORTLIST_DATA = Path(__file__).resolve().parents[2] / "shared" / "data" / "multi30k"
SHORTLIST_TOKENIZER_SIZE = 8000
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}


# ----------------------------------------------------------------------------------------------- arguments


def build_parser(description: str | None = None) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        description=description or __doc__.splitlines()[0],
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    size = parser.add_argument_group("model size (both models)")
    size.add_argument("--vocab", type=int, default=8000, help="joint vocabulary size")
    size.add_argument("--d-model", type=int, default=256)
    size.add_argument("--layers", type=int, default=3, help="layers of the encoder and of the decoder each")
    size.add_argument("--heads", type=int, default=4)
    size.add_argument("--ffn", type=int, default=1024, help="inner width of the feed-forward networks")
    size.add_argument("--dropout", type=float, default=0.1, help="dropout while training")

    work = parser.add_argument_group("workload")
    work.add_argument("--batch", type=int, default=64, help="training sentences per step")
    work.add_argument("--src-len", type=int, default=20, help="source tokens per sentence")
    work.add_argument("--tgt-len", type=int, default=20, help="target tokens per training sentence")
    work.add_argument("--train-steps", type=int, default=3, help="training steps per timed measurement")
    work.add_argument("--gen-batch", type=int, default=32, help="sentences per generate() call")
    work.add_argument("--gen-calls", type=int, default=2, help="generate() calls per timed measurement")
    work.add_argument("--new-tokens", type=int, default=30, help="tokens generated per sentence, exactly")
    work.add_argument("--beams", type=int, default=5, help="beam size of the beam-search measurement")

    method = parser.add_argument_group("method")
    method.add_argument("--pairs", type=int, default=7, help="alternating measurement pairs (median taken)")
    method.add_argument("--warmup", type=int, default=2, help="untimed runs of each measurement first")
    method.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's default)")
    method.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    method.add_argument("--dtype", choices=tuple(DTYPES), default="float32")
    method.add_argument("--attn", choices=("sdpa", "eager"), default="sdpa", help="attention implementation")
    method.add_argument("--seed", type=int, default=0)
    method.add_argument("--skip-memory", action="store_true", help="do not measure peak memory")
    method.add_argument("--skip-generation", action="store_true", help="measure training (and its memory) only")
    method.add_argument(
        "--compile",
        action="store_true",
        help="add our training step with the forward and loss compiled, as `train --torch_compile` does",
    )
    method.add_argument("--compile-backend", default="inductor", help="torch.compile backend of --compile")
    method.add_argument(
        "--unfused",
        action="store_true",
        help="add our model with the whole logits made before the loss (loss_blocks=0), to training and its memory",
    )
    method.add_argument("--ct2", action="store_true", help="add CTranslate2 translate_batch (float32, int8)")
    method.add_argument(
        "--marian",
        action="store_true",
        help="the same weights: ours converted from a MarianMTModel; opus-mt-en-de's size and --beams 4 unless given, "
        "--ct2, generation only",
    )
    method.add_argument(
        "--shortlist",
        action="store_true",
        help="add our model with a lexical shortlist (and with --ct2 our export with its vocabulary map); the "
        "generation inputs become real sentences (--shortlist-data)",
    )
    method.add_argument(
        "--shortlist-data",
        type=Path,
        default=SHORTLIST_DATA,
        help="a folder of {train,test_2016_flickr}.{en,de}[.gz]: the shortlist's corpus and the sentences",
    )
    method.add_argument(
        "--onnx",
        action="store_true",
        help="add our model's ONNX export in ONNX Runtime (float32, int8) and a row of one sentence at a time",
    )
    method.add_argument(
        "--one-at-a-time", type=int, default=8, help="sentences of the one-sentence-at-a-time row (--onnx)"
    )
    method.add_argument("--json", type=Path, default=None, help="also write the results as JSON here")
    return parser


# what --marian sets unless a flag says otherwise: opus-mt-en-de's size, beam 4
MARIAN_DEFAULTS = dict(vocab=58101, d_model=512, layers=6, heads=8, ffn=2048, beams=4)


def parse_arguments(argv: list[str] | None) -> argparse.Namespace:
    parser = build_parser()
    if "--marian" in (sys.argv[1:] if argv is None else argv):
        parser.set_defaults(**MARIAN_DEFAULTS)
    args = parser.parse_args(argv)
    if args.marian:
        args.ct2, args.skip_memory = True, True
    return args


def apply_threads(args: argparse.Namespace) -> None:
    if args.threads is not None:
        torch.set_num_threads(args.threads)


# ------------------------------------------------------------------------------------------------- models


def shared_config_fields(args: argparse.Namespace) -> dict:
    """The size and shape both configs take, written once so that the two models cannot drift apart."""
    return dict(
        vocab_size=args.vocab,
        d_model=args.d_model,
        encoder_layers=args.layers,
        decoder_layers=args.layers,
        encoder_attention_heads=args.heads,
        decoder_attention_heads=args.heads,
        encoder_ffn_dim=args.ffn,
        decoder_ffn_dim=args.ffn,
        activation_function="swish" if args.marian else "relu",  # opus-mt's: swish (our "silu")
        dropout=args.dropout,
        attention_dropout=0.0,
        activation_dropout=0.0,
        max_position_embeddings=max_positions(args),
        scale_embedding=True,
        share_encoder_decoder_embeddings=True,
        tie_word_embeddings=True,
        **SPECIAL_TOKEN_IDS,
    )


def build_ours(args: argparse.Namespace, loss_blocks: int | None = None) -> torch.nn.Module:
    if args.marian:
        return converted_marian(args)
    blocks = {} if loss_blocks is None else {"loss_blocks": loss_blocks}
    config = VanillaTransformerConfig(
        **shared_config_fields(args), norm_placement="post", position_embedding_type="sinusoidal", **blocks
    )
    return VanillaTransformerForConditionalGeneration._from_config(config, attn_implementation=args.attn)


def build_marian(args: argparse.Namespace) -> torch.nn.Module:
    # Marian is post-LN with sinusoidal positions by construction
    config = MarianConfig(**shared_config_fields(args), forced_eos_token_id=None)
    return MarianMTModel._from_config(config, attn_implementation=args.attn)


def converted_marian(args: argparse.Namespace) -> torch.nn.Module:
    """Ours with the weights of `build_marian`'s model (built here from the same seed), as `convert marian` makes it."""
    from vanilla_transformer.convert.marian import config_from_marian, copy_weights

    marian = build_marian(args)
    ours = VanillaTransformerForConditionalGeneration._from_config(
        config_from_marian(marian.config), attn_implementation=args.attn
    )
    copy_weights(marian, ours)
    return ours


MODEL_BUILDERS: dict[str, Callable[[argparse.Namespace], torch.nn.Module]] = {
    "ours": build_ours,
    "marian": build_marian,
    UNFUSED: lambda args: build_ours(args, loss_blocks=0),
}


def trained_model_names(args: argparse.Namespace) -> list[str]:
    """The models whose training is measured: ours and Marian, and with --unfused ours with the unfused loss."""
    return [*MODEL_NAMES, *([UNFUSED] if args.unfused else [])]


def max_positions(args: argparse.Namespace) -> int:
    """Marian's sinusoidal table has this many rows; it must cover sources, targets and generated tokens."""
    return max(512, args.src_len, args.tgt_len, args.new_tokens + 1)


def build_model(name: str, args: argparse.Namespace) -> torch.nn.Module:
    torch.manual_seed(args.seed)
    model = MODEL_BUILDERS[name](args)
    return model.to(device=args.device, dtype=DTYPES[args.dtype])


def count_parameters(model: torch.nn.Module) -> int:
    """Trainable parameters (Marian's fixed sinusoidal table is a frozen parameter: not counted)."""
    return sum(parameter.numel() for parameter in model.parameters() if parameter.requires_grad)


# ----------------------------------------------------------------------------------------------- workload


@dataclass
class Workload:
    train_batch: dict[str, torch.Tensor]
    gen_inputs: dict[str, torch.Tensor]
    shortlist: object = None  # a LexicalShortlist of the generation inputs' vocabulary (--shortlist)

    def train_tokens(self) -> int:
        return self.train_batch["input_ids"].numel() + self.train_batch["labels"].numel()


def make_workload(args: argparse.Namespace) -> Workload:
    generator = torch.Generator().manual_seed(args.seed)

    def sentences(rows: int, length: int) -> torch.Tensor:
        return torch.randint(FIRST_WORD_ID, args.vocab, (rows, length), generator=generator).to(args.device)

    source = sentences(args.batch, args.src_len)
    gen_source = sentences(args.gen_batch, args.src_len)
    gen_inputs = {"input_ids": gen_source, "attention_mask": torch.ones_like(gen_source)}
    shortlist = None
    if args.shortlist:
        gen_inputs, shortlist = real_sentences_and_shortlist(args)
    return Workload(
        train_batch={
            "input_ids": source,
            "attention_mask": torch.ones_like(source),
            "labels": sentences(args.batch, args.tgt_len),
        },
        gen_inputs=gen_inputs,
        shortlist=shortlist,
    )


def real_sentences_and_shortlist(args: argparse.Namespace):
    """--gen-batch test sentences of --shortlist-data (ids, cut to --src-len) and the shortlist of its training
    split, in a vocabulary of --vocab ids (see the module's docstring)."""
    import datasets

    from vanilla_transformer.lexical_shortlist import CANDIDATES, FREQUENT, MIN_COUNT
    from vanilla_transformer.shortlist.build import build_shortlist
    from vanilla_transformer.tokenization import iter_lines, train_tokenizer

    def lines(split: str, lang: str) -> list[str]:
        found = [args.shortlist_data / f"{split}.{lang}{suffix}" for suffix in ("", ".gz")]
        path = next((path for path in found if path.is_file()), None)
        if path is None:
            sys.exit(f"--shortlist needs {found[0]} (or .gz): pass --shortlist-data FOLDER")
        return list(iter_lines(path))

    log("shortlist: a tokenizer and a shortlist from the training split ...")
    english, german = lines("train", "en"), lines("train", "de")
    size = min(args.vocab, SHORTLIST_TOKENIZER_SIZE)
    tokenizer = train_tokenizer(iter([*english, *german]), vocab_size=size)
    pairs = datasets.Dataset.from_dict(
        {"input_ids": tokenizer(english)["input_ids"], "labels": tokenizer(text_target=german)["input_ids"]}
    )
    special = [*tokenizer.all_special_ids, PAD_ID, BOS_ID, EOS_ID]
    built = build_shortlist(pairs, len(tokenizer), len(tokenizer), special, CANDIDATES, FREQUENT, MIN_COUNT)
    ids = [row[: args.src_len - 1] + [EOS_ID] for row in tokenizer(lines("test_2016_flickr", "en"))["input_ids"]]
    ids = ids[: args.gen_batch]
    relabel = id_relabelling(len(tokenizer), args.vocab, args.seed)
    width = max(len(row) for row in ids)
    source = torch.tensor([[int(relabel[i]) for i in row] + [PAD_ID] * (width - len(row)) for row in ids])
    mask = torch.tensor([[1] * len(row) + [0] * (width - len(row)) for row in ids])
    return {"input_ids": source.to(args.device), "attention_mask": mask.to(args.device)}, relabelled(
        built, relabel, args.vocab
    )


def id_relabelling(size: int, vocab: int, seed: int) -> torch.Tensor:
    """Ids of a `size`-token vocabulary as distinct ids of a `vocab`-token one: the special tokens keep theirs, the
    others are spread at random (the identity when the sizes agree)."""
    if size == vocab:
        return torch.arange(size)
    spread = torch.randperm(vocab - FIRST_WORD_ID, generator=torch.Generator().manual_seed(seed)) + FIRST_WORD_ID
    return torch.cat((torch.arange(FIRST_WORD_ID), spread[: size - FIRST_WORD_ID]))


def relabelled(shortlist, relabel: torch.Tensor, vocab: int):
    from vanilla_transformer.lexical_shortlist import LexicalShortlist

    table = torch.full((vocab, shortlist.candidates.shape[1]), -1, dtype=torch.int32)
    kept = shortlist.candidates >= 0
    mapped = torch.where(kept, relabel[shortlist.candidates.long().clamp(min=0)], -1).to(torch.int32)
    table[relabel] = mapped
    always = relabel[shortlist.always.long()].sort().values.to(torch.int32)
    return LexicalShortlist(table, always, {**shortlist.metadata, "target_vocab_size": vocab})


def generation_config(args: argparse.Namespace, num_beams: int, use_shortlist: bool = False) -> GenerationConfig:
    """Exactly `new_tokens` per sentence: EOS is masked until then and the length limit stops it there."""
    return GenerationConfig(
        max_new_tokens=args.new_tokens,
        min_new_tokens=args.new_tokens,
        num_beams=num_beams,
        do_sample=False,
        use_cache=True,
        **SPECIAL_TOKEN_IDS,
        forced_eos_token_id=None,
        **({"use_shortlist": True} if use_shortlist else {}),
    )


# ------------------------------------------------------------------------------------------------ phases


def make_optimizer(model: torch.nn.Module) -> torch.optim.Optimizer:
    """AdamW with its fused kernel, which transformers' Trainer takes by default and our training loop too."""
    return torch.optim.AdamW(model.parameters(), lr=LEARNING_RATE, fused=True)


def train_steps(
    model: torch.nn.Module, optimizer: torch.optim.Optimizer, batch: dict, steps: int, forward=None
) -> None:
    """`steps` training steps of `model`, its forward called through `forward` (a compiled wrapper) if given."""
    model.train()
    for _ in range(steps):
        (forward or model)(**batch).loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)


def generate(model: torch.nn.Module, inputs: dict, config: GenerationConfig) -> None:
    model.eval()
    with torch.inference_mode():
        sequences = model.generate(**inputs, generation_config=config)
    # the decoder start token plus exactly the requested tokens
    if sequences.shape[1] - 1 != config.max_new_tokens:
        raise RuntimeError(f"generate() made {sequences.shape[1] - 1} tokens, not {config.max_new_tokens}")


# ------------------------------------------------------------------------------------------------- timing


def synchronize(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def throughput(work: Callable[[], None], units: int, device: str) -> float:
    """Units per second of one call of `work`."""
    synchronize(device)
    start = time.perf_counter()
    work()
    synchronize(device)
    return units / (time.perf_counter() - start)


def training_measurement(model, workload: Workload, args, forward=None) -> Callable[[], float]:
    """A callable that times `train_steps` training steps of `model` (through `forward`) and returns tokens/s."""
    optimizer = make_optimizer(model)
    work = repeated(lambda: train_steps(model, optimizer, workload.train_batch, 1, forward), args.train_steps)
    return lambda: throughput(work, args.train_steps * workload.train_tokens(), args.device)


def compiled_forward(model: torch.nn.Module, backend: str):
    """Our model's forward as `train --torch_compile` compiles it (`training.compiled_step`), with `backend`."""
    from vanilla_transformer.training.compiled_step import CompiledForward

    compiled = CompiledForward(model)
    if backend != "inductor":
        compiled.backend.inductor = torch._dynamo.lookup_backend(backend)
    return compiled


def generation_measurement(
    model, workload: Workload, args, num_beams: int, use_shortlist: bool = False
) -> Callable[[], float]:
    """A callable that times `gen_calls` generate() calls of `model` and returns new tokens/s."""
    config = generation_config(args, num_beams, use_shortlist)
    work = repeated(lambda: generate(model, workload.gen_inputs, config), args.gen_calls)
    return lambda: throughput(work, generated_tokens(args), args.device)


def generated_tokens(args: argparse.Namespace) -> int:
    """New tokens of one generation measurement: `gen_calls` calls of `gen_batch` x `new_tokens`."""
    return args.gen_calls * args.gen_batch * args.new_tokens


def repeated(work: Callable[[], None], times: int) -> Callable[[], None]:
    """`work` run `times` times in a row, as one callable."""

    def run() -> None:
        for _ in range(times):
            work()

    return run


def alternate(measurements: dict[str, Callable[[], float]], pairs: int, warmup: int, title: str) -> dict:
    """Warm each candidate up, then time them in turn `pairs` times, rotating who goes first."""
    names = list(measurements)
    started = time.perf_counter()
    for name in names:
        for _ in range(warmup):
            measurements[name]()
    samples: dict[str, list[float]] = {name: [] for name in names}
    for index in range(pairs):
        shift = index % len(names)
        for name in names[shift:] + names[:shift]:
            samples[name].append(measurements[name]())
        figures = ", ".join(f"{name} {samples[name][-1]:,.0f}" for name in names)
        log(f"{title}: pair {index + 1}/{pairs}: {figures}")
    log(f"{title}: {time.perf_counter() - started:.0f} s")
    return samples


# ------------------------------------------------------------------------------------------------- memory


def current_rss() -> int:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def peak_rss() -> int:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("no VmHWM in /proc/self/status")


def reset_peak_rss() -> None:
    """Linux >= 4.0: writing 5 to clear_refs resets the peak RSS (VmHWM, ru_maxrss) to the current RSS."""
    with open("/proc/self/clear_refs", "w") as clear_refs:
        clear_refs.write("5")


def release_free_memory() -> None:
    """Hand the memory that glibc's malloc keeps in its free lists back to the OS, so RSS counts live memory."""
    gc.collect()
    # not glibc (no libc.so.6 or no malloc_trim): RSS then also counts freed memory the allocator kept
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6").malloc_trim(0)


class PeakMemory:
    """Peak memory above the level at entry: RSS on CPU, the caching allocator's allocations on CUDA."""

    def __init__(self, device: str):
        self.device = device
        self.increase = 0

    def __enter__(self) -> PeakMemory:
        if self.device == "cuda":
            gc.collect()
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
            self.base = torch.cuda.memory_allocated()
        else:
            release_free_memory()
            reset_peak_rss()
            self.base = current_rss()
        return self

    def __exit__(self, *exc_info) -> None:
        if self.device == "cuda":
            torch.cuda.synchronize()
            self.increase = torch.cuda.max_memory_allocated() - self.base
        else:
            self.increase = peak_rss() - self.base


def phase_runner(model: torch.nn.Module, workload: Workload, args: argparse.Namespace, phase: str) -> Callable:
    """One run of a phase: `MEMORY_TRAIN_STEPS` steps with a fresh AdamW (its state is counted), or one generate()."""
    if phase == "train":
        return lambda: train_steps(model, make_optimizer(model), workload.train_batch, MEMORY_TRAIN_STEPS)
    config = generation_config(args, 1 if phase == "greedy" else args.beams)
    return lambda: generate(model, workload.gen_inputs, config)


def phase_memory(args: argparse.Namespace, name: str, phase: str) -> int:
    """Bytes that one phase (train / greedy / beam) of model `name` needs on top of the built model.

    The phase runs once untimed first: one-time allocations (allocator arenas, oneDNN/MKL buffers, lazily built
    tables) would otherwise dominate the small generation figures and differ from run to run by ~10 MiB.
    """
    apply_threads(args)
    model = build_model(name, args)
    run = phase_runner(model, make_workload(args), args, phase)
    run()
    with PeakMemory(args.device) as peak:
        run()
    return peak.increase


def measure_memory(args: argparse.Namespace) -> dict[str, dict[str, int]]:
    """{phase: {model: bytes}}; on CPU each (model, phase) runs in a fresh process so RSS starts clean."""
    phases = ("train",) if args.skip_generation else ("train", "greedy", "beam")
    jobs = [
        (args, name, phase)
        for phase in phases
        for name in (trained_model_names(args) if phase == "train" else MODEL_NAMES)
    ]
    if args.device == "cuda":
        results = [phase_memory(*job) for job in jobs]
    else:
        if not Path("/proc/self/clear_refs").exists():
            raise RuntimeError("peak-RSS measurement needs Linux /proc; run with --skip-memory")
        # fresh processes (maxtasksperchild=1); two at a time only to halve the ~10 s import of each
        context = multiprocessing.get_context("spawn")
        with context.Pool(processes=min(2, os.cpu_count() or 1), maxtasksperchild=1) as pool:
            results = pool.starmap(phase_memory, jobs)
    memory: dict[str, dict[str, int]] = {}
    for (_, name, phase), increase in zip(jobs, results, strict=True):
        memory.setdefault(phase, {})[name] = increase
    return memory


# ---------------------------------------------------------------------------------------------- CTranslate2


def ct2_vocabulary(vocab_size: int) -> list[str]:
    """Token names by id. The last one is "<pad>" because CTranslate2's Marian loader always drops the last
    embedding row (Marian's own pad) and pops the vocabulary's last token only when it is named "<pad>"."""
    words = [f"w{index}" for index in range(FIRST_WORD_ID, vocab_size - 1)]
    return ["<blank>", "<s>", "</s>", "<unk>", *words, "<pad>"]


def save_with_tokenizer(model: torch.nn.Module, vocabulary: list[str], directory: str):
    from tokenizers import Tokenizer
    from tokenizers.models import WordLevel
    from tokenizers.pre_tokenizers import WhitespaceSplit
    from transformers import PreTrainedTokenizerFast

    backend = Tokenizer(WordLevel({token: index for index, token in enumerate(vocabulary)}, unk_token="<unk>"))
    backend.pre_tokenizer = WhitespaceSplit()
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=backend, pad_token="<blank>", bos_token="<s>", eos_token="</s>", unk_token="<unk>"
    )
    model.to("cpu", torch.float32).save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    return tokenizer


def build_ct2_translators(args: argparse.Namespace, shortlist=None) -> dict[str, object]:
    """{"ct2 float32": Translator, "ct2 int8": Translator} of the same random-weight Marian as `build_marian`, and
    {"ours ct2 float32", "ours ct2 int8"} of our random-weight model exported by `export ctranslate2` (with
    `shortlist`, the export holds it as its vocabulary map)."""
    import ctranslate2

    from vanilla_transformer.export import export_ctranslate2
    from vanilla_transformer.lexical_shortlist import SHORTLIST_FILE, LexicalShortlist
    from vanilla_transformer.tokenization import tokenizer_identity

    transformers.utils.logging.disable_progress_bar()
    translators = {}
    for name in MODEL_NAMES:
        prefix = "ours ct2" if name == "ours" else "ct2"
        with tempfile.TemporaryDirectory() as hf_dir, tempfile.TemporaryDirectory() as ct2_dir:
            tokenizer = save_with_tokenizer(build_model(name, args).eval(), ct2_vocabulary(args.vocab), hf_dir)
            if name == "ours":
                if shortlist is not None:  # the shortlist's ids are the word-level vocabulary's
                    metadata = {**shortlist.metadata, "tokenizer": tokenizer_identity(tokenizer)}
                    LexicalShortlist(shortlist.candidates, shortlist.always, metadata).save(
                        Path(hf_dir) / SHORTLIST_FILE
                    )
                export_ctranslate2(hf_dir, ct2_dir, force=True)
            else:
                ctranslate2.converters.TransformersConverter(hf_dir).convert(ct2_dir, force=True)
            for compute_type in CT2_COMPUTE_TYPES:
                translators[f"{prefix} {compute_type}"] = ctranslate2.Translator(
                    ct2_dir,
                    device=args.device,
                    compute_type=compute_type,
                    inter_threads=1,
                    intra_threads=args.threads or torch.get_num_threads(),
                )
    return translators


def ct2_translate(
    translator, source: list[list[str]], args: argparse.Namespace, beam_size: int, use_vmap: bool = False
) -> None:
    results = translator.translate_batch(
        source,
        beam_size=beam_size,
        max_batch_size=len(source),
        min_decoding_length=args.new_tokens,
        max_decoding_length=args.new_tokens,
        use_vmap=use_vmap,
    )
    lengths = {len(result.hypotheses[0]) for result in results}
    if lengths != {args.new_tokens}:
        raise RuntimeError(f"CTranslate2 made {sorted(lengths)} tokens, not {args.new_tokens}")


def ct2_measurement(
    translator, source: list[list[str]], args: argparse.Namespace, beams: int, use_vmap: bool = False
) -> Callable[[], float]:
    """A callable that times `gen_calls` translate_batch() calls and returns new tokens/s."""
    work = repeated(lambda: ct2_translate(translator, source, args, beams, use_vmap), args.gen_calls)
    return lambda: throughput(work, generated_tokens(args), "cpu")


def ct2_measurements(args, workload: Workload) -> tuple[dict[str, dict[str, Callable[[], float]]], str]:
    """{"greedy"/"beam": {translator name: measurement}} and a note for the report."""
    if importlib.util.find_spec("ctranslate2") is None:
        return {}, "CTranslate2 is not installed (`pip install ctranslate2`): no CTranslate2 rows."
    try:
        translators = build_ct2_translators(args, workload.shortlist)
    except Exception as error:  # noqa: BLE001 - the reference rows are optional, the report says why
        return {}, f"CTranslate2 could not convert the random-weight Marian: {type(error).__name__}: {error}"
    vocabulary = ct2_vocabulary(args.vocab)
    inputs = workload.gen_inputs
    source = [
        [vocabulary[i] for i, real in zip(row, mask, strict=True) if real]
        for row, mask in zip(inputs["input_ids"].tolist(), inputs["attention_mask"].tolist(), strict=True)
    ]
    measurements = {
        phase: {name: ct2_measurement(translator, source, args, beams) for name, translator in translators.items()}
        for phase, beams in (("greedy", 1), ("beam", args.beams))
    }
    if workload.shortlist is not None:  # the same export, translating with its vocabulary map
        for phase, beams in (("greedy", 1), ("beam", args.beams)):
            for kind in CT2_COMPUTE_TYPES:
                translator = translators[f"ours ct2 {kind}"]
                measurements[phase][f"ours ct2 {kind} vmap"] = ct2_measurement(translator, source, args, beams, True)
    note = (
        "CTranslate2 runs the same random-weight Marian, converted with TransformersConverter (its Marian loader "
        f"drops the last vocabulary row, so it has {args.vocab - 1} tokens, and starts the decoder from a zero "
        "embedding, as Marian does), and our random-weight model written by `export ctranslate2`; int8 is "
        "quantised on load."
    )
    return measurements, note


# ------------------------------------------------------------------------------------------------ results


def setup_lines(args: argparse.Namespace, parameters: dict[str, int]) -> list[str]:
    """The report's lines on the size of the models and the method of measuring."""
    return [
        f"- Size: vocab {args.vocab}, d_model {args.d_model}, {args.layers}+{args.layers} layers, {args.heads} heads, "
        f"FFN {args.ffn}, post-LN, sinusoidal, {'swish' if args.marian else 'ReLU'}, tied embeddings, {args.attn} "
        "attention; parameters: " + ", ".join(f"{MODEL_LABELS[name]} {count:,}" for name, count in parameters.items()),
        f"- Method: median of {args.pairs} alternating pairs after {args.warmup} warm-up runs; ratio = median of "
        "per-pair ratios [lowest-highest pair]. "
        + (
            ""
            if args.marian
            else f"Training: batch {args.batch} x ({args.src_len} + {args.tgt_len}) tokens, dropout {args.dropout}, "
            f"forward + backward + AdamW, source + target tokens counted, {args.train_steps} steps per measurement. "
        )
        + f"Generation: {args.gen_batch} x {args.src_len} source tokens -> exactly {args.new_tokens} new tokens "
        f"each, {args.gen_calls} calls per measurement.",
    ]


# -------------------------------------------------------------------------------------------------- main


def speed_rows(
    args: argparse.Namespace, models: dict[str, torch.nn.Module], workload: Workload
) -> tuple[list[Row], list[str]]:
    """Training and generation rows (with CTranslate2 beside generation under --ct2), and notes; under --marian
    generation only, and a note of how far the converted model's logits are from Marian's."""
    rows, notes = [], []
    if args.marian:
        notes.append(same_weights_note(models, workload))
    else:
        training = {name: training_measurement(model, workload, args) for name, model in models.items()}
        if args.compile:
            forward = compiled_forward(models["ours"], args.compile_backend)
            training["ours compiled"] = training_measurement(models["ours"], workload, args, forward)
        rows.append(Row("Training", "tokens/s", True, alternate(training, args.pairs, args.warmup, "training")))
        if args.compile:
            notes.append(
                f"Compiled: {forward.graphs} graph(s) ({args.compile_backend}); the compilation ran in the warm-up."
            )
    if args.skip_generation:
        return rows, notes
    models = {name: models[name] for name in MODEL_NAMES}
    references, note = ct2_measurements(args, workload) if args.ct2 else ({}, None)
    quantized = int8_model(models["ours"], args)
    if workload.shortlist is not None:
        models["ours"].lexical_shortlist = workload.shortlist
        notes.append(shortlist_note(workload, args))
    exported, onnx_note = onnx_models(models["ours"], args) if args.onnx else ({}, None)
    for phase, beams, label in (("greedy", 1, "Greedy generate"), ("beam", args.beams, f"Beam {args.beams} generate")):
        measurements = {name: generation_measurement(model, workload, args, beams) for name, model in models.items()}
        if quantized is not None:
            measurements["ours int8"] = generation_measurement(quantized, workload, args, beams)
        for name, model in exported.items():
            measurements[name] = generation_measurement(model, workload, args, beams)
        if workload.shortlist is not None:
            measurements["ours shortlist"] = generation_measurement(models["ours"], workload, args, beams, True)
        measurements.update(references.get(phase, {}))
        rows.append(Row(label, "new tokens/s", True, alternate(measurements, args.pairs, args.warmup, phase)))
    if exported:
        candidates = {**models, **({"ours int8": quantized} if quantized is not None else {}), **exported}
        latency = {name: one_at_a_time_measurement(model, workload, args) for name, model in candidates.items()}
        label = f"Greedy, one sentence at a time ({args.one_at_a_time} sentences)"
        rows.append(Row(label, "ms a sentence", False, alternate(latency, args.pairs, args.warmup, "one at a time")))
        notes.append(onnx_note)
    return rows, notes + ([note] if note else [])


def onnx_models(ours: torch.nn.Module, args: argparse.Namespace) -> tuple[dict[str, torch.nn.Module], str]:
    """{"onnx float32": model, "onnx int8": model}: our random-weight model written by `export onnx` and loaded by
    `load_onnx` with the benchmark's threads; and a note of the files' sizes."""
    from vanilla_transformer.common.model_folder import ONNX_GRAPH_FILES, ONNX_WEIGHTS_FILE
    from vanilla_transformer.export import export_onnx
    from vanilla_transformer.inference import load_onnx

    transformers.utils.logging.disable_progress_bar()
    loaded, sizes = {}, {}
    with tempfile.TemporaryDirectory() as scratch:
        folder = Path(scratch) / "model"
        save_with_tokenizer(copy.deepcopy(ours).eval(), ct2_vocabulary(args.vocab), str(folder))
        sizes["safetensors"] = (folder / "model.safetensors").stat().st_size
        for name, quantize in ONNX_KINDS.items():
            log(f"{name}: export onnx ...")
            output = export_onnx(folder, Path(scratch) / name.replace(" ", "_"), quantize=quantize)
            sizes[name] = sum((output / file).stat().st_size for file in (*ONNX_GRAPH_FILES, ONNX_WEIGHTS_FILE))
            loaded[name] = load_onnx(output, threads=args.threads or 0)[0]
    mib = {name: size / MIB for name, size in sizes.items()}
    note = (
        f"ONNX export: graphs and weights {mib['onnx float32']:.1f} MiB in float32, "
        f"{sizes['onnx float32'] / sizes['safetensors']:.3f}x the model's safetensors ({mib['safetensors']:.1f} MiB); "
        f"int8 {mib['onnx int8']:.1f} MiB, {sizes['onnx int8'] / sizes['onnx float32']:.3f}x float32. ONNX Runtime "
        f"runs the graphs with {args.threads or 'its default number of'} threads inside an operator (`load_onnx`: "
        "plain greedy decoding in its own loop, beam search in transformers' generate())."
    )
    return loaded, note


def one_at_a_time_measurement(model, workload: Workload, args) -> Callable[[], float]:
    """A callable that translates the first --one-at-a-time sentences one generate() call each (greedy, exactly
    --new-tokens) and returns the mean milliseconds a sentence."""
    config = generation_config(args, 1)
    inputs = workload.gen_inputs
    count = min(args.one_at_a_time, len(inputs["input_ids"]))
    rows = [{key: value[index : index + 1] for key, value in inputs.items()} for index in range(count)]
    rows = [{key: value[:, : int(row["attention_mask"].sum())] for key, value in row.items()} for row in rows]

    def run() -> float:
        start = time.perf_counter()
        for row in rows:
            generate(model, row, config)
        return 1000 * (time.perf_counter() - start) / len(rows)

    return run


def shortlist_note(workload: Workload, args: argparse.Namespace) -> str:
    """What the shortlist holds, and how many of the generator's rows the generation batch keeps."""
    inputs, shortlist = workload.gen_inputs, workload.shortlist
    rows = shortlist.rows(inputs["input_ids"], inputs["attention_mask"], [PAD_ID, BOS_ID, EOS_ID])
    lengths = inputs["attention_mask"].sum(dim=1).tolist()
    meta = shortlist.metadata
    return (
        f"Shortlist: built from the {meta['pairs']:,} pairs of {args.shortlist_data}/train ({meta['candidates']} "
        f"candidates a source token, the {meta['frequent']} most frequent target tokens); the generation batch is "
        f"its first {len(lengths)} test_2016_flickr sentences, {min(lengths)}-{max(lengths)} tokens "
        f"(cut at {args.src_len}), for every column; its shortlist keeps {len(rows):,} of the generator's "
        f"{args.vocab:,} rows ({len(rows) / args.vocab:.1%})."
    )


def same_weights_note(models: dict[str, torch.nn.Module], workload: Workload) -> str:
    """The largest absolute difference between the two models' logits on the generation inputs."""
    inputs = workload.gen_inputs
    start = torch.full_like(inputs["input_ids"][:, :1], DECODER_START_ID)
    decoder_input_ids = torch.cat((start, inputs["input_ids"][:, :-1]), dim=1)
    with torch.inference_mode():
        logits = [models[name].eval()(**inputs, decoder_input_ids=decoder_input_ids).logits for name in MODEL_NAMES]
    difference = (logits[0].float() - logits[1].float()).abs().max().item()
    return (
        "Same weights: ours is the MarianMTModel converted (`convert marian`'s config and weight copy); the largest "
        f"absolute difference of their logits on the {len(start)} generation inputs, teacher-forced, is "
        f"{difference:.1e}."
    )


def int8_model(model: torch.nn.Module, args: argparse.Namespace) -> torch.nn.Module | None:
    """A copy of our model with int8 linear layers (torch's dynamic quantization, CPU and float32 only), or None."""
    if args.device != "cpu" or args.dtype != "float32":
        return None
    from vanilla_transformer.inference import quantize_linear_layers

    return quantize_linear_layers(copy.deepcopy(model).eval())


def memory_rows(args: argparse.Namespace) -> tuple[list[Row], list[str]]:
    """Peak-memory rows of the three phases, and a note on how they were measured."""
    log("peak memory: one fresh process per (model, phase) ...")
    memory = measure_memory(args)
    labels = {
        "train": "Peak memory, training step",
        "greedy": "Peak memory, greedy",
        "beam": f"Peak memory, beam {args.beams}",
    }
    labels = {phase: label for phase, label in labels.items() if phase in memory}
    rows = [
        Row(label, "MiB", False, {name: [value] for name, value in memory[phase].items()})
        for phase, label in labels.items()
    ]
    where = (
        "RSS increase, in a fresh process per (model, phase)"
        if args.device == "cpu"
        else "increase of torch.cuda.max_memory_allocated"
    )
    note = (
        f"Peak memory is the {where}, above the built model (weights excluded), measured on the second run of "
        f"the phase (the first one is a warm-up): training = {MEMORY_TRAIN_STEPS} steps with a fresh AdamW (its "
        "state included), generation = one call. Lower is better."
    )
    return rows, [note]


def run_benchmark(args: argparse.Namespace) -> Report:
    apply_threads(args)
    models = {name: build_model(name, args) for name in trained_model_names(args)}
    parameters = {name: count_parameters(models[name]) for name in MODEL_NAMES}
    report = Report(
        args,
        machine_description(args.device),
        parameters,
        title=f"vanilla_transformer vs MarianMTModel ({args.device}, {args.dtype})"
        + (", the same weights at opus-mt-en-de's size" if args.marian else ""),
        setup=setup_lines(args, parameters),
        columns=COLUMNS,
        ratio_columns=RATIO_COLUMNS,
        other_ratios=OTHER_RATIOS,
    )
    log(f"parameters: {report.parameters}; threads {torch.get_num_threads()}")
    rows, notes = speed_rows(args, models, make_workload(args))
    report.rows += rows
    report.notes += notes
    del models
    gc.collect()
    report.machine["load_average_at_end"] = load_average()  # before the memory processes, which run two at a time
    if not args.skip_memory:
        rows, notes = memory_rows(args)
        report.rows += rows
        report.notes += notes
    return report


def main(argv: list[str] | None = None) -> None:
    args = parse_arguments(argv)
    if args.device == "cuda" and not torch.cuda.is_available():
        sys.exit("--device cuda was asked for, but torch.cuda.is_available() is False.")
    started = time.perf_counter()
    publish(run_benchmark(args))
    log(f"total time {time.perf_counter() - started:.0f} s")


if __name__ == "__main__":
    main()
