"""What the pages' build-time snippets call: the package's own source shown by symbol, its pictures drawn into the page,
and the reference tables generated from the config class and the command-line parsers.

A page runs them in a markdown-exec block (```python exec="on"```) and prints what they return (markdown-exec collects
the block's own `print`, not this module's), so a listing is read from the source file, a picture drawn and a table
generated each time the site is built: a page cannot drift from the code.
"""

import base64
import dataclasses
import functools
import html
import inspect
import io
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def source_path(target) -> str:
    """The file that defines `target`, relative to the repository (or to site-packages for an installed package)."""
    # a method behind a decorator (transformers' can_return_tuple, ...) is defined where its wrapped function is
    path = Path(inspect.getsourcefile(inspect.unwrap(target))).resolve()
    return path.relative_to(REPO).as_posix() if path.is_relative_to(REPO) else path.name


def listing(*targets, language: str = "python") -> str:
    """Each function, class or method's source as a code block titled with its file and lines."""
    blocks = []
    for target in targets:
        lines, first = inspect.getsourcelines(inspect.unwrap(target))
        title = f"{source_path(target)}, lines {first}-{first + len(lines) - 1}"
        fence = "`" * 4
        code = "".join(lines).rstrip("\n")
        blocks.append(f'{fence}{language} title="{title}" linenums="{first}"\n{code}\n{fence}\n')
    return "\n".join(blocks)


def picture(drawn, alt: str, width: int | None = None) -> str:
    """A picture of the package (a `Plot` it returned, or a matplotlib figure) as a PNG inside the page."""
    figure = getattr(drawn, "figure", drawn)
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=110)
    data = base64.b64encode(buffer.getvalue()).decode("ascii")
    size = f' width="{width}"' if width else ""
    return f'<img class="drawn" alt="{html.escape(alt)}"{size} src="data:image/png;base64,{data}">\n'


@functools.cache
def trained_number_translator(steps: int = 200) -> Path:
    """The demo's job at the size of a page: numbers below 10,000 from English words into German words, trained by the
    package's own training run (`TrainingRun`, as `vanilla-transformer train` and `demo` do) for `steps` steps, in
    seconds on two cores; it translates the held-out numbers of its test split (100) nearly all right.

    Trained once per build: the English and the Chinese page read the same folder. Returns the saved model folder,
    with `corpus/` beside it (the splits as aligned text files, test.en/test.de held out, and the tokenizer)."""

    from vanilla_transformer.demo.number_words import demo_splits, write_parallel_folder
    from vanilla_transformer.demo.run import demo_arguments
    from vanilla_transformer.tokenization import train_tokenizer
    from vanilla_transformer.training import TrainingRun

    work = Path(tempfile.mkdtemp(prefix="vanilla-transformer-docs-"))
    corpus = work / "corpus"
    splits = demo_splits(train_size=2000, test_size=100, seed=0, max_value=9999)
    splits["validation"] = splits["validation"][:16]  # the run scores it at the end: a handful is enough
    write_parallel_folder(corpus, splits)
    sentences = [text for pair in splits["train"] for text in pair]
    # 400 tokens: the 260 special and byte tokens, and 140 subwords, whole English words and German pieces
    tokenizer = train_tokenizer(sentences, vocab_size=400, min_frequency=2, split_punctuation=True)
    tokenizer.save_pretrained(corpus / "tokenizer")
    model_args, data_args, train_args = demo_arguments(corpus, work / "model", minutes=5.0, seed=0)
    # the demo's model at half its width; about 35 pairs a step, a short warm-up and a linear decay to 0
    model_args = dataclasses.replace(model_args, d_model=64, encoder_ffn_dim=256, decoder_ffn_dim=256)
    train_args = dataclasses.replace(
        train_args, max_steps=steps, max_train_minutes=None, warmup_steps=steps // 10, learning_rate=3e-3,
        lr_scheduler_type="linear", max_tokens=384, logging_steps=steps, disable_progress_bar=True,
        dataloader_num_workers=0,
    )  # fmt: skip
    TrainingRun(model_args, data_args, train_args).run()
    return work / "model"
