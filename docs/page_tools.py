"""What the pages' build-time snippets call: the package's own source shown by symbol, its pictures drawn into the page,
and the reference tables generated from the config class and the command-line parsers.

A page runs them in a markdown-exec block (```python exec="on"```) and prints what they return (markdown-exec collects
the block's own `print`, not this module's), so a listing is read from the source file, a picture drawn and a table
generated each time the site is built: a page cannot drift from the code.
"""

import argparse
import ast
import base64
import dataclasses
import functools
import html
import importlib
import importlib.util
import inspect
import io
import re
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


# ---------------------------------------------------------------------------- the reference, generated from the code

CODE_SPAN = re.compile(r"(`[^`\n]+`)")
# what markdown, its tables and attr_list would read as markup in plain text
ESCAPES = str.maketrans(
    {
        "\\": "\\\\",
        "`": "\\`",
        "*": "\\*",
        "_": "\\_",
        "[": "\\[",
        "]": "\\]",
        "{": "\\{",
        "}": "\\}",
        "|": "\\|",
        "<": "&lt;",
        ">": "&gt;",
        "&": "&amp;",
    }
)


def markdown_text(text: str) -> str:
    """`text` as it reads, in a paragraph or a table cell: its `code` spans kept, any other markup escaped."""
    parts = CODE_SPAN.split(" ".join(text.split()))
    return "".join(part if index % 2 else part.translate(ESCAPES) for index, part in enumerate(parts))


def code(value) -> str:
    text = str(value)
    return f"`` {text} ``" if "`" in text else f"`{text}`"


def unbroken(value) -> str:
    """`value` as code that a narrow table column does not break inside."""
    return f'{code(value)}{{style="white-space: nowrap"}}'


def table(header: tuple[str, ...], rows: list[tuple[str, ...]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + " --- |" * len(header)]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines) + "\n"


def indented(text: str, spaces: int = 4) -> str:
    return "\n".join(" " * spaces + line if line else line for line in text.splitlines()) + "\n"


def is_transformers(cls: type) -> bool:
    return cls.__module__.split(".")[0] == "transformers"


def declaring_class(cls: type, name: str) -> type | None:
    """The class of `cls`'s MRO whose own annotations declare the field `name`."""
    return next((base for base in cls.__mro__ if name in vars(base).get("__annotations__", {})), None)


def type_name(annotation) -> str:
    return annotation.__name__ if isinstance(annotation, type) else str(annotation).replace("typing.", "")


# ---- config fields


def config_reference(config_class: type | None = None) -> str:
    """Every field of the config class (VanillaTransformerConfig), each a heading anchored by its name, with its
    meaning (the class docstring), type, default, allowed values (`ALLOWED_VALUES`) and the commands that take it as
    a flag: the fields of the class itself first, in its order, then those it has from transformers."""
    from vanilla_transformer import configuration_vanilla_transformer as configuration
    from vanilla_transformer.training.arguments import config_field_help

    config_class = config_class or configuration.VanillaTransformerConfig
    helps, flags = config_field_help(config_class), field_flags()
    fields = {field.name: field for field in dataclasses.fields(config_class)}
    ours = [name for name in own_field_order(config_class) if name in fields]
    theirs = [name for name in fields if name not in ours]
    sections = [f"## The fields of `{config_class.__name__}`\n"]
    sections += [field_section(fields[name], helps, flags) for name in ours]
    sections.append(f"## The fields from transformers' `{configuration.PreTrainedConfig.__name__}`\n")
    sections += [field_section(fields[name], helps, flags) for name in theirs]
    sections.append("## The model flags beside the fields\n")
    sections += [model_flag_section(model_flag, flags) for model_flag in model_flags_beside(fields)]
    return "\n".join(sections)


def model_flags_beside(fields: dict) -> list[dataclasses.Field]:
    """The fields of ModelArguments that are no config field (how attention is computed, the model a run starts
    from): the model's flags beside the config's own."""
    from vanilla_transformer.training.arguments import ModelArguments

    return [model_flag for model_flag in dataclasses.fields(ModelArguments) if model_flag.name not in fields]


def model_flag_section(model_flag: dataclasses.Field, flags: dict[str, dict[str, list[str]]]) -> str:
    from vanilla_transformer.training.arguments import ModelArguments

    name = model_flag.name
    # the class's annotation: HfArgumentParser rewrites a field's type in place (str | None becomes str)
    annotation = ModelArguments.__annotations__[name]
    return (
        f"### `{name}` {{#{name}}}\n\n{markdown_text(model_flag.metadata.get('help', ''))}\n\n"
        f"- **Type**: {code(type_name(annotation))}\n"
        f"- **Default**: {code(repr(model_flag.default))}\n"
        f"- **Flag**: {flag_readers(name, flags)}\n"
    )


def own_field_order(config_class: type) -> list[str]:
    """The fields that the config class and its bases other than transformers' declare, base first, each in its
    class's order (a field that overrides one of transformers' keeps its place here, not transformers')."""
    names = []
    for cls in reversed(config_class.__mro__):
        if not is_transformers(cls) and cls is not object:
            names += [name for name in vars(cls).get("__annotations__", {}) if name not in names]
    return names


def field_flags() -> dict[str, dict[str, list[str]]]:
    """For each field name of the dataclasses that the commands read with HfArgumentParser: the dataclasses that have
    it, each with the commands that read it (a config field is a flag of the same name: ModelArguments is made of
    them, and classify's ClassificationArguments passes its classifier fields on to the config)."""
    from vanilla_transformer import cli

    found = {}
    for words, parser in cli.command_parsers().items():
        for dataclass_type in getattr(parser, "dataclass_types", ()):
            for dataclass_field in dataclasses.fields(dataclass_type):
                commands = found.setdefault(dataclass_field.name, {}).setdefault(dataclass_type.__name__, [])
                commands.append(words)
    return found


def field_section(field: dataclasses.Field, helps: dict[str, str], flags: dict[str, dict[str, list[str]]]) -> str:
    from vanilla_transformer.configuration_vanilla_transformer import ALLOWED_VALUES

    name = field.name
    if field.default is not dataclasses.MISSING:
        default = code(repr(field.default))
    elif field.default_factory is not dataclasses.MISSING:
        default = code(repr(field.default_factory()))
    else:
        default = "required"
    return (
        f"### `{name}` {{#{name}}}\n\n{markdown_text(helps[name])}\n\n"
        f"- **Type**: {code(type_name(field.type))}\n"
        f"- **Default**: {default}\n"
        f"- **Allowed**: {markdown_text(ALLOWED_VALUES[name])}\n"
        f"- **Flag**: {flag_readers(name, flags)}\n"
    )


def flag_readers(name: str, flags: dict[str, dict[str, list[str]]]) -> str:
    """`--name` and the commands that read it, by dataclass, each command linked to its section."""
    readers = [
        ", ".join(f"[{command}](cli.md#{command_anchor(command)})" for command in commands) + f" ({code(source)})"
        for source, commands in flags.get(name, {}).items()
    ]
    return f"{code('--' + name)} of " + "; ".join(readers) if readers else "none: no command takes it as a flag"


# ---- commands and flags

USAGE_WIDTH = 80
USAGE_LINES = 12  # a longer usage (train's lists 110 flags) is cut to its required arguments; the table lists all
NO_VALUE_TYPES = {"string_to_bool": "bool", "Path": "path", "PosixPath": "path"}


def command_name(words: str) -> str:
    return f"vanilla-transformer {words}".strip()


def command_anchor(words: str) -> str:
    return words.replace(" ", "-") or "vanilla-transformer"


def cli_reference() -> str:
    """Every command of `vanilla-transformer` (cli.command_parsers), each a heading anchored by its words joined by
    "-" (`#export-onnx`), with what it does, its usage, its subcommands and a table of its flags: type or choices,
    default and help. A command whose flags are those of a later one (prepare reads train's) shows them folded."""
    from vanilla_transformer import cli

    parsers = cli.command_parsers()
    tables = {words: flag_tables(parser) for words, parser in parsers.items()}
    shown_at = {flags: words for words, flags in tables.items() if flags}
    sections = []
    for words, parser in parsers.items():
        flags = tables[words]
        if flags and shown_at[flags] != words:
            link = f"[`{command_name(shown_at[flags])}`](#{command_anchor(shown_at[flags])})"
            flags = f'Its flags are those of {link}.\n\n??? note "The flags"\n\n{indented(flags)}'
        sections.append(command_section(words, parser) + flags)
    return "\n".join(sections)


def command_section(words: str, parser) -> str:
    level = "#" * (2 + max(len(words.split()) - 1, 0))
    heading = f"{level} `{command_name(words)}` {{#{command_anchor(words)}}}\n\n"
    description = f"{markdown_text(parser.description)}\n\n" if parser.description else ""
    subcommands = [f"[`{word}`](#{command_anchor(f'{words} {word}'.strip())})" for word in subcommand_words(parser)]
    listed = f"Subcommands: {', '.join(subcommands)}.\n\n" if subcommands else ""
    return f"{heading}{description}{listed}```text\n{usage(parser)}\n```\n\n"


def subcommand_words(parser) -> list[str]:
    """The name of each subcommand, not its aliases (cli.command_parsers keeps the first name of each parser)."""
    names = {}
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for word, subparser in action.choices.items():
                names.setdefault(id(subparser), word)
    return list(names.values())


def usage(parser) -> str:
    text = formatted_usage(parser, parser._actions)
    if text.count("\n") < USAGE_LINES:
        return text
    needed = [action for action in parser._actions if action.required or not action.option_strings]
    return formatted_usage(parser, needed) + " [FLAGS]"


def formatted_usage(parser, actions: list) -> str:
    formatter = argparse.HelpFormatter(parser.prog, width=USAGE_WIDTH)
    formatter.add_usage(parser.usage, actions, parser._mutually_exclusive_groups)
    return formatter.format_help().strip()


def flag_tables(parser) -> str:
    """The parser's flags as tables: the parser's own, then those of each dataclass an HfArgumentParser reads
    (transformers' own fields folded)."""
    tables = []
    for source, actions in flag_sources(parser).items():
        rendered = table(("Flag", "Value", "Help"), [flag_row(parser, group) for group in by_dest(actions)])
        if source is None:
            tables.append(rendered)
        elif is_transformers(source):
            title = f"{len(by_dest(actions))} flags of transformers' {source.__name__}"
            tables.append(f'??? note "{title}"\n\n{indented(rendered)}')
        else:
            tables.append(f"{code(source.__name__)}{class_summary(source)}\n\n{rendered}")
    return "\n".join(tables)


def flag_sources(parser) -> dict[type | None, list]:
    """The parser's arguments by the class that declares each (None: the parser's own), the parser's own first."""
    sources = {None: []}
    for action in documented_actions(parser):
        sources.setdefault(field_source(parser, action.dest), []).append(action)
    return {source: actions for source, actions in sources.items() if actions}


def documented_actions(parser) -> list:
    """The arguments `--help` describes: not --help itself, not the subcommands (each has its own section), not an
    argument its parser hides (help=SUPPRESS)."""
    return [
        action
        for action in parser._actions
        if not isinstance(action, (argparse._HelpAction, argparse._SubParsersAction))
        and action.help != argparse.SUPPRESS
    ]


def field_source(parser, dest: str) -> type | None:
    """The class that declares the field behind `dest`, of the dataclasses an HfArgumentParser reads; None for the
    parser's own arguments."""
    for dataclass_type in getattr(parser, "dataclass_types", ()):
        if dest in {field.name for field in dataclasses.fields(dataclass_type)}:
            return declaring_class(dataclass_type, dest)
    return None


def class_summary(cls: type) -> str:
    """The first paragraph of the class's docstring after a colon, where it has one of its own (not dataclass's)."""
    doc = cls.__doc__ or ""
    if not doc.strip() or doc.startswith(f"{cls.__name__}("):
        return ""
    return ": " + markdown_text(inspect.cleandoc(doc).split("\n\n")[0])


def by_dest(actions: list) -> list[list]:
    """The actions grouped by the argument they set: a boolean field's --name and --no_name are one argument."""
    groups = {}
    for action in actions:
        groups.setdefault(action.dest, []).append(action)
    return list(groups.values())


def flag_names(actions: list) -> list[str]:
    """The flags of one argument, or its name for a positional one; not HfArgumentParser's dashed twin of each
    (--d-model beside --d_model), which the page says once."""
    names = [name for action in actions for name in action.option_strings]
    names = [name for name in names if underscored(name) == name or underscored(name) not in names]
    return names or [actions[0].metavar or actions[0].dest]


def underscored(flag: str) -> str:
    return flag[:2] + flag[2:].replace("-", "_")


def flag_row(parser, actions: list) -> tuple[str, str, str]:
    first = actions[0]
    default = default_text(first)
    return (
        "<br>".join(unbroken(name) for name in flag_names(actions)),
        value_type(first) + (f"<br>{default}" if default else ""),
        markdown_text(argparse.HelpFormatter(parser.prog)._expand_help(first) if first.help else ""),
    )


def value_type(action) -> str:
    if action.nargs == 0:
        return "no value"
    if action.choices:
        return ", ".join(unbroken(getattr(choice, "value", choice)) for choice in action.choices)
    name = getattr(action.type, "__name__", "str") if action.type else "str"
    many = {"+": " (one or more)", "*": " (any number)"}.get(action.nargs, "")
    if isinstance(action, argparse._AppendAction):
        many = " (repeatable)"
    return unbroken(NO_VALUE_TYPES.get(name, name)) + many


def default_text(action) -> str:
    """Whether the argument is required, its default, or nothing for a flag that takes no value or has no default."""
    default = action.default
    if action.required:
        return "required"
    if action.nargs == 0 or default is None or default == argparse.SUPPRESS:
        return ""
    if isinstance(default, list | tuple):
        items = " ".join(unbroken(getattr(item, "value", item)) for item in default) if default else code("[]")
        return f"default {items}"
    return f"default {unbroken(getattr(default, 'value', default))}"


# ---- the package's layout


def house_plan():
    """tests/house_plan.py, with which tests/test_layout.py checks the package: the page shows the floors the test
    sees. Loaded from its file, as the tests folder is no package."""
    path = REPO / "tests" / "house_plan.py"
    spec = importlib.util.spec_from_file_location("house_plan", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def package_folder() -> Path:
    import vanilla_transformer

    return Path(vanilla_transformer.__file__).parent


def floors_reference() -> str:
    """The rooms floor by floor from the bottom (tests/house_plan.py's floors), each room with the rooms it imports."""
    plan, package = house_plan(), package_folder()
    edges = plan.room_imports(package)
    rows = []
    for number, level in enumerate(plan.floors(edges, plan.rooms_of(package))):
        for room in level:
            imported = sorted(target for source, target in edges if source == room)
            floor = str(number) if room == level[0] else ""
            rows.append((floor, unbroken(room), ", ".join(map(unbroken, imported)) or "nothing of the package"))
    return table(("Floor", "Room", "Imports"), rows)


def modules_reference() -> str:
    """Every module of the package with the first paragraph of its docstring (with the next one, where the first
    ends in a colon that introduces it)."""
    package = package_folder()
    rows = []
    for path in sorted(package.rglob("*.py")):
        docstring = ast.get_docstring(ast.parse(path.read_text(encoding="utf-8")))
        if not docstring:
            raise ValueError(f"{path} has no docstring: every module says what it is for")
        paragraphs = docstring.split("\n\n")
        summary = paragraphs[0] + (" " + paragraphs[1] if paragraphs[0].endswith(":") and len(paragraphs) > 1 else "")
        rows.append((unbroken(path.relative_to(package).as_posix()), markdown_text(summary)))
    return table((f"Module (in {package.name}/)", "What it is for"), rows)


# The paper's sections and the code that implements each, as "module.symbol" of the package, resolved when the
# page is built: a renamed or removed symbol fails the build instead of leaving the page wrong.
PAPER_SECTIONS = (
    (
        "3.1 Encoder and decoder stacks",
        "N identical layers in each stack; every sublayer inside a residual connection and a norm",
        (
            "modeling_vanilla_transformer.VanillaTransformerEncoder",
            "modeling_vanilla_transformer.VanillaTransformerDecoder",
            "layers.VanillaTransformerEncoderLayer",
            "layers.VanillaTransformerDecoderLayer",
            "residual.AddAndNorm",
        ),
    ),
    (
        "3.2 Attention",
        "scaled dot-product attention, multi-head, over the padding and causal masks the stacks build with "
        "transformers' masking_utils",
        ("attention.eager_attention_forward", "attention.VanillaTransformerAttention"),
    ),
    (
        "3.3 Position-wise feed-forward networks",
        "FFN(x) = W2 act(W1 x + b1) + b2",
        ("feed_forward.PositionwiseFeedForward",),
    ),
    (
        "3.4 Embeddings and softmax",
        "token embeddings scaled by sqrt(d_model), one matrix shared by both stacks and the generator (lm_head)",
        (
            "modeling_vanilla_transformer.TokenEmbedding",
            "modeling_vanilla_transformer.VanillaTransformerModel",
            "modeling_vanilla_transformer.VanillaTransformerForConditionalGeneration",
        ),
    ),
    (
        "3.5 Positional encoding",
        "the paper's sinusoids, and learned, rotary and ALiBi positions beyond it",
        (
            "positions.SinusoidalPositionalEncoding",
            "positions.LearnedPositionalEmbedding",
            "positions.RotaryEmbedding",
            "positions.LinearBiases",
        ),
    ),
    (
        "5.4 Regularization",
        "residual dropout, and label smoothing in the loss",
        (
            "residual.AddAndNorm",
            "dropout.FastCpuDropout",
            "loss.label_smoothed_cross_entropy",
            "loss.generator_and_label_smoothed_cross_entropy",
        ),
    ),
)


def paper_reference() -> str:
    """The paper's sections and the package's symbols that implement each, every symbol looked up in its module."""
    rows = []
    for section, what, symbols in PAPER_SECTIONS:
        found = []
        for symbol in symbols:
            module_name, name = symbol.split(".", 1)
            module = importlib.import_module(f"vanilla_transformer.{module_name}")
            functools.reduce(getattr, name.split("."), module)  # AttributeError: the page names what is not there
            found.append(f"{unbroken(name)} in {unbroken(module_name + '.py')}")
        rows.append((section, markdown_text(what), "<br>".join(found)))
    return table(("Paper", "What", "Code"), rows)
