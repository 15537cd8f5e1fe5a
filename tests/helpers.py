"""What several test files share: the tiny vocabulary and its special ids, the architecture switch combinations, tiny
configs and models, random token ids, the eager-versus-sdpa comparison, running a script in a fresh Python
process where our package cannot be imported, a folder served on localhost and headless Chromium, a file cut short
and the one line of a command's error. Fixtures live in conftest.py; this module holds plain code."""

import copy
import gzip
import itertools
import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import torch

from benchmarks.common import free_port, serve_folder  # noqa: F401 (serve_folder: for the test files)
from vanilla_transformer import VanillaTransformerConfig, VanillaTransformerForConditionalGeneration
from vanilla_transformer.demo.number_words import demo_splits
from vanilla_transformer.training import DataArguments, ModelArguments, TrainArguments

# the files every saved folder carries as remote code: the model, nothing else
MODEL_CODE_FILES = {
    "configuration_vanilla_transformer.py",
    "modeling_vanilla_transformer.py",
    "attention.py",
    "positions.py",
    "feed_forward.py",
    "residual.py",
    "layers.py",
    "loss.py",
    "lexical_shortlist.py",
    "dropout.py",
    "weight_files.py",
}
VOCAB = 40
PAD, BOS, EOS = 0, 1, 2

# every combination of the architecture switches the core issue names; the residual scaling takes its three values
# in turn across them, and the rotary combinations take RoPE's scalings in turn ("rope:ntk"), so that each meets every
# other switch without multiplying the matrix. Dynamic NTK changes the rotation with the length, so padding and the
# cache change its outputs by design (as in transformers); test_positions.py checks it on its own.
RESIDUAL_SCALINGS = ("none", "learned", "rezero")
# Marian's details, taken together in every other combination: the sines-then-cosines layout (where positions are
# sinusoidal), a final logits bias, and a target vocabulary of its own size with unshared embeddings
VOCABULARY_DETAILS = ("paper", "marian")
ROPE_SCALINGS = ("rope", "rope:linear", "rope:ntk")
COMBINATIONS = list(
    itertools.product(
        ("post", "pre"),  # norm_placement
        ("sinusoidal", "learned", "rope", "alibi"),  # position_embedding_type
        ("layernorm", "rmsnorm"),  # norm_type
        (None, 2, 1),  # num_key_value_heads: MHA, GQA, MQA
        ("relu", "swiglu"),  # activation_function
    )
)
SWITCHES = [
    (
        placement,
        ROPE_SCALINGS[index // 3 % 3] if positions == "rope" else positions,
        *others,
        RESIDUAL_SCALINGS[index % 3],
        VOCABULARY_DETAILS[index // 2 % 2],
    )
    for index, (placement, positions, *others) in enumerate(COMBINATIONS)
]


def switch_id(switches) -> str:
    placement, positions, norm, kv_heads, activation, scaling, details = switches
    attention = {None: "mha", 2: "gqa", 1: "mqa"}[kv_heads]
    positions = positions.replace(":", "_")
    name = f"{placement}-{positions}-{norm}-{attention}-{activation}" + ("" if scaling == "none" else f"-{scaling}")
    return name + ("" if details == "paper" else f"-{details}")


def tiny_config(**overrides) -> VanillaTransformerConfig:
    fields = dict(
        vocab_size=VOCAB,
        d_model=16,
        encoder_layers=2,
        decoder_layers=2,
        encoder_attention_heads=4,
        decoder_attention_heads=4,
        encoder_ffn_dim=32,
        decoder_ffn_dim=32,
        dropout=0.0,
        max_position_embeddings=64,
        pad_token_id=PAD,
        bos_token_id=BOS,
        eos_token_id=EOS,
        decoder_start_token_id=BOS,
    )
    fields.update(overrides)
    return VanillaTransformerConfig(**fields)


def config_for(switches, **overrides) -> VanillaTransformerConfig:
    placement, positions, norm, kv_heads, activation, scaling, details = switches
    positions, _, rope_type = positions.partition(":")
    if rope_type:
        # a factor of 4 moves every rotation the tiny sequences make, so the checks meet the scaled angles
        overrides.setdefault("rope_parameters", {"rope_type": rope_type, "factor": 4.0})
    if details == "marian":
        overrides.update(final_logits_bias=True, decoder_vocab_size=VOCAB + 5, share_encoder_decoder_embeddings=False)
        if positions == "sinusoidal":
            overrides["sinusoid_layout"] = "sines_then_cosines"
    return tiny_config(
        norm_placement=placement,
        position_embedding_type=positions,
        norm_type=norm,
        num_key_value_heads=kv_heads,
        activation_function=activation,
        residual_scaling=scaling,
        **overrides,
    )


def tiny_model(config, **kwargs) -> VanillaTransformerForConditionalGeneration:
    """Seeded; under ReZero each layer's scale is set to 0.5, as after some training: at 0 the sublayers would
    contribute nothing, and the checks that padding, the future or the cache change nothing would hold trivially."""
    torch.manual_seed(0)
    model = VanillaTransformerForConditionalGeneration._from_config(config, **kwargs).eval()
    if config.final_logits_bias:
        # a zero bias (its initial value) would leave the checks blind to where it is added
        with torch.no_grad():
            model.final_logits_bias.normal_(generator=torch.Generator().manual_seed(1))
    if config.residual_scaling == "rezero":
        with torch.no_grad():
            for name, parameter in model.named_parameters():
                if name.endswith("residual.scale"):
                    parameter.fill_(0.5)
    return model


def random_tokens(batch: int, length: int, seed: int) -> torch.Tensor:
    """Ids that avoid the special tokens, so no sequence ends early by accident."""
    generator = torch.Generator().manual_seed(seed)
    return torch.randint(3, VOCAB, (batch, length), generator=generator)


def assert_eager_and_sdpa_agree(config, source, target, mask) -> None:
    """The same weights under the eager and the sdpa attention give the same logits."""
    # _from_config writes the attention implementation into the config it is given
    sdpa = tiny_model(copy.deepcopy(config), attn_implementation="sdpa")
    eager = tiny_model(copy.deepcopy(config), attn_implementation="eager")
    eager.load_state_dict(sdpa.state_dict())
    assert sdpa.config._attn_implementation == "sdpa" and eager.config._attn_implementation == "eager"
    with torch.no_grad():
        expected = eager(input_ids=source, attention_mask=mask, decoder_input_ids=target).logits
        actual = sdpa(input_ids=source, attention_mask=mask, decoder_input_ids=target).logits
    torch.testing.assert_close(actual, expected, atol=1e-5, rtol=1e-4)


BLOCK_OUR_PACKAGE = """
import importlib.abc, sys

class BlockOurPackage(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] == "vanilla_transformer":
            raise ImportError("vanilla_transformer is deliberately not importable here")

sys.meta_path.insert(0, BlockOurPackage())
"""


def run_without_our_package(script: str, *args: str, cwd: Path) -> dict:
    """Runs `script` (dedented) with `args` as sys.argv[1:] in a fresh Python process where importing
    vanilla_transformer raises ImportError, offline, with its Hugging Face caches and HOME under `cwd`; asserts it
    succeeded and returns its last line of output, which must be JSON."""
    result = subprocess.run(
        [sys.executable, "-c", BLOCK_OUR_PACKAGE + textwrap.dedent(script), *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        env={
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "HF_HUB_OFFLINE": "1",
            "HF_MODULES_CACHE": str(cwd / "modules"),
            "HF_HOME": str(cwd / "hf_home"),
            "HOME": str(cwd),
        },
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout.strip().splitlines()[-1])


# training runs of a tiny model on the numbers corpus (the `corpus_folder` fixture)
QUIET_THREADS = {**os.environ, "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}
TINY_TRAINING_MODEL = dict(
    d_model=16,
    encoder_layers=1,
    decoder_layers=1,
    encoder_attention_heads=2,
    decoder_attention_heads=2,
    encoder_ffn_dim=32,
    decoder_ffn_dim=32,
)


def accelerate_two_cpu_processes() -> list[str]:
    """`accelerate launch` of two CPU processes (gloo), rendezvousing on a free port: tests that launch in parallel
    (pytest-xdist's workers) would otherwise meet on the default port 29500."""
    return [sys.executable, "-m", "accelerate.commands.launch", "--multi_gpu", "--num_processes", "2",
            "--num_machines", "1", "--main_process_port", str(free_port()), "--mixed_precision", "no",
            "--dynamo_backend", "no"]  # fmt: skip


def tiny_arguments(corpus_folder: Path, output_dir: Path, **train_overrides):
    model_args = ModelArguments(**TINY_TRAINING_MODEL, dropout=0.1)
    data_args = DataArguments(
        dataset=str(corpus_folder),
        validation_split="validation",
        test_split=None,
        tokenizer=str(corpus_folder / "tokenizer"),
        max_eval_samples=8,
    )
    train_fields = dict(
        output_dir=str(output_dir),
        max_steps=4,
        max_tokens=256,
        warmup_steps=2,
        save_steps=2,
        eval_steps=0,
        num_beams=1,
        max_new_tokens=8,
        report_to="none",
        disable_progress_bar=True,
        seed=3,
    )
    train_fields.update(train_overrides)
    return model_args, data_args, TrainArguments(**train_fields)


def tiny_train_flags(corpus_folder: Path) -> list[str]:
    """`vanilla-transformer train` flags for a 3-step run of a tiny model on the numbers corpus."""
    model = dict(TINY_TRAINING_MODEL, dropout=0)
    data = dict(dataset=corpus_folder, validation_split="validation", test_split="test", max_eval_samples=4)
    data.update(tokenizer=corpus_folder / "tokenizer")
    run = dict(max_steps=3, max_tokens=256, warmup_steps=2, save_steps=0, eval_steps=0, num_beams=1, max_new_tokens=4)
    run.update(report_to="none")
    flags = [item for name, value in {**model, **data, **run}.items() for item in (f"--{name}", str(value))]
    return [*flags, "--disable_progress_bar"]


# parallel text files
EN = ["A dog runs.", "Two men, one hat.", "She smiles  twice\t"]
DE = ["Ein Hund läuft.", "Zwei Männer, ein Hut.", "Sie lächelt zweimal\t"]


def write_lines(path: Path, lines: list[str]) -> Path:
    text = "".join(line + "\n" for line in lines)
    if path.suffix == ".gz":
        with gzip.open(path, "wt", encoding="utf-8") as file:
            file.write(text)
    else:
        path.write_text(text, encoding="utf-8")
    return path


def write_jsonl(path: Path, records: list[dict]) -> Path:
    return write_lines(path, [json.dumps(record, ensure_ascii=False) for record in records])


def tokenizer_ids(tokenizer) -> dict[str, int]:
    """The config fields a model takes from its tokenizer: the vocabulary's size and the special tokens' ids (the
    decoder starts from the sentence-start token)."""
    return dict(
        vocab_size=len(tokenizer),
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        decoder_start_token_id=tokenizer.bos_token_id,
    )


# the numbers demo's pairs the small translators of several test files learn from (train), and the numbers they never
# saw (test)
NUMBER_SPLITS = demo_splits(train_size=2000, test_size=50, seed=0, max_value=9999)


def train_number_translator(folder: Path, tokenizer, pairs, source_side: int, steps: int = 300) -> Path:
    """A small model trained for `steps` steps (about 12 s) on the numbers demo's (english, german) pairs, translating
    side `source_side` into the other almost perfectly; saved with `tokenizer` into `folder`.

    On one thread: torch's rounding depends on its thread count, and one thread gives the same weights on every
    machine and in every test worker (and a second thread only slows a model this small)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return _train_number_translator(folder, tokenizer, pairs, source_side, steps)
    finally:
        torch.set_num_threads(threads)


def _train_number_translator(folder: Path, tokenizer, pairs, source_side: int, steps: int) -> Path:
    torch.manual_seed(0)
    config = VanillaTransformerConfig(
        d_model=64,
        encoder_layers=2,
        decoder_layers=2,
        encoder_attention_heads=4,
        decoder_attention_heads=4,
        encoder_ffn_dim=128,
        decoder_ffn_dim=128,
        dropout=0.0,
        **tokenizer_ids(tokenizer),
    )
    model = VanillaTransformerForConditionalGeneration(config)
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    generator = torch.Generator().manual_seed(0)
    for _ in range(steps):
        batch = [pairs[index] for index in torch.randint(len(pairs), (32,), generator=generator).tolist()]
        source = tokenizer([pair[source_side] for pair in batch], padding=True, return_tensors="pt")
        target = tokenizer([pair[1 - source_side] for pair in batch], padding=True, return_tensors="pt")["input_ids"]
        loss = model(**source, labels=target.masked_fill(target == tokenizer.pad_token_id, -100)).loss
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def headless_chromium(window_size: str = "1280,900", network_log: bool = False):
    """Chromium and its chromedriver found on PATH (Debian's; .ci/run installs them), driven by Selenium headless;
    or a pytest skip that names what is missing. `network_log`: DevTools' performance log (every URL requested)."""
    import pytest

    pytest.importorskip("selenium", reason='the browser tests need selenium (".[dev]")')
    programs = {name: shutil.which(name) for name in ("chromium", "chromedriver")}
    missing = [name for name, path in programs.items() if path is None]
    if missing:
        pytest.skip(f"{' and '.join(missing)} not found: apt-get install chromium chromium-driver (.ci/run does)")
    from selenium import webdriver
    from selenium.webdriver.chrome.options import Options
    from selenium.webdriver.chrome.service import Service

    options = Options()
    options.binary_location = programs["chromium"]
    # as root Chromium needs --no-sandbox; with no network here its background connections would only fail
    for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", f"--window-size={window_size}", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"):  # fmt: skip
        options.add_argument(flag)
    if network_log:
        options.set_capability("goog:loggingPrefs", {"performance": "ALL", "browser": "ALL"})
    return webdriver.Chrome(service=Service(programs["chromedriver"]), options=options)


def truncate(path: Path) -> None:
    """Cut a file to half its size, as an interrupted copy or download leaves it."""
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


def error_line(capsys, command: str) -> str:
    """The one line a user error prints, checked to start as every command's does."""
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1, lines
    assert lines[0].startswith(f"vanilla-transformer {command}: error: "), lines[0]
    return lines[0]
