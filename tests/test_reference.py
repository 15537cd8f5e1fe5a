"""The reference pages of the documentation are generated from the code (docs/page_tools.py): every config field
with its help and allowed values, every command and flag with its help, every room and module. These tests hold the
code to having what the pages print, and the pages to printing all of it, a field or flag added included."""

import argparse
import dataclasses
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from huggingface_hub.errors import StrictDataclassError
from transformers import HfArgumentParser

from vanilla_transformer import VanillaTransformerConfig, cli
from vanilla_transformer.configuration_vanilla_transformer import ALLOWED_VALUES, FIELD_CHOICES
from vanilla_transformer.training.arguments import DataArguments, ModelArguments, TrainArguments, config_field_help

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "docs"))
import page_tools  # noqa: E402  (docs/ is no package: the pages import it from beside them too)

HEADING = re.compile(r"^#{2,6} .* \{#(?P<anchor>[^}]+)\}$", re.MULTILINE)


def sections_by_anchor(page: str) -> dict[str, str]:
    """Each heading's anchor and the text under it, up to the next heading."""
    headings = list(HEADING.finditer(page))
    ends = [heading.start() for heading in headings[1:]] + [len(page)]
    return {heading["anchor"]: page[heading.start() : end] for heading, end in zip(headings, ends, strict=True)}


def documented_flags(parser: argparse.ArgumentParser) -> list[argparse.Action]:
    return [
        action
        for action in parser._actions
        if not isinstance(action, (argparse._HelpAction, argparse._SubParsersAction))
        and action.help != argparse.SUPPRESS
    ]


def flags_without_help(parsers: dict[str, argparse.ArgumentParser]) -> list[str]:
    return [
        f"{words} {'/'.join(action.option_strings) or action.dest}".strip()
        for words, parser in parsers.items()
        for action in documented_flags(parser)
        if not (action.help or "").strip()
    ]


def listed_names(parser: argparse.ArgumentParser) -> list[str]:
    """The flags the reference must name: every option string but HfArgumentParser's dashed twin of an underscored
    flag (--d-model beside --d_model), and each positional argument's name."""
    options = [name for action in documented_flags(parser) for name in action.option_strings]
    twins = {name for name in options if "-" in name[2:] and name[:2] + name[2:].replace("-", "_") in options}
    positionals = [action.metavar or action.dest for action in documented_flags(parser) if not action.option_strings]
    return [name for name in options if name not in twins] + positionals


# ---- help text in the code


def test_every_flag_of_every_command_has_help():
    assert flags_without_help(cli.command_parsers()) == []


def test_the_help_check_names_a_flag_without_help():
    parser = argparse.ArgumentParser(prog="vanilla-transformer demo")
    parser.add_argument("--undocumented", type=int)
    parser.add_argument("--documented", help="says what it does")
    assert flags_without_help({"demo": parser}) == ["demo --undocumented"]


def test_every_command_is_its_real_parser_not_a_stub_that_hands_the_line_on():
    for words, parser in cli.command_parsers().items():
        stubs = [action.dest for action in parser._actions if action.nargs == argparse.REMAINDER]
        assert not stubs, f"{words}: {stubs} hand the line to another parser; map it in cli.DATACLASS_COMMAND_PARSERS"


def test_every_config_field_has_docstring_help_and_allowed_values():
    names = [config_field.name for config_field in dataclasses.fields(VanillaTransformerConfig)]
    helps = config_field_help()
    assert [name for name in names if not helps.get(name, "").strip()] == []
    assert [name for name in names if not ALLOWED_VALUES.get(name, "").strip()] == []
    assert sorted(set(ALLOWED_VALUES) - set(names)) == [], "ALLOWED_VALUES names fields the config does not have"
    for name, choices in FIELD_CHOICES.items():
        assert ALLOWED_VALUES[name].startswith(", ".join(choices)), name


@pytest.mark.parametrize(
    ("field_name", "values"),
    [
        ("d_model", dict(d_model=0)),
        ("encoder_attention_heads", dict(d_model=18)),
        ("num_key_value_heads", dict(num_key_value_heads=3)),
        ("dropout", dict(dropout=1.0)),
        ("classifier_dropout", dict(classifier_dropout=-0.5)),
        ("activation_function", dict(activation_function="tanh")),
        ("loss_blocks", dict(loss_blocks=-1)),
        ("bos_token_id", dict(vocab_size=8, bos_token_id=9)),
        ("rope_parameters", dict(position_embedding_type="rope", rope_parameters={"rope_type": "yarn"})),
        ("sinusoid_layout", dict(position_embedding_type="learned", sinusoid_layout="sines_then_cosines")),
    ],
)
def test_the_error_of_a_bad_value_states_what_the_reference_says_the_field_allows(field_name, values):
    with pytest.raises(StrictDataclassError) as caught:
        VanillaTransformerConfig(**values)
    message = str(caught.value.__cause__)
    assert message.startswith(f"VanillaTransformerConfig.{field_name}=")
    assert ALLOWED_VALUES[field_name] in message


# ---- the pages print all of it


def test_the_config_reference_has_a_section_for_every_field_anchored_by_its_name():
    sections = sections_by_anchor(page_tools.config_reference())
    for config_field in dataclasses.fields(VanillaTransformerConfig):
        section = sections[config_field.name]
        assert section.startswith(f"### `{config_field.name}` {{#{config_field.name}}}")
        assert page_tools.markdown_text(config_field_help()[config_field.name]) in section
        assert page_tools.markdown_text(ALLOWED_VALUES[config_field.name]) in section
        assert f"`{config_field.default!r}`" in section
    assert "`--norm_placement` of" in sections["norm_placement"]
    assert "[train](cli.md#train)" in sections["norm_placement"]
    assert "no command takes it as a flag" in sections["pad_token_id"]
    config_fields = {config_field.name for config_field in dataclasses.fields(VanillaTransformerConfig)}
    for model_flag in dataclasses.fields(ModelArguments):  # the model flags that are no config field: attention...
        if model_flag.name not in config_fields:
            assert page_tools.markdown_text(model_flag.metadata["help"]) in sections[model_flag.name]
    assert "`--attn_implementation` of" in sections["attn_implementation"]
    assert (
        "`--classifier_pooling` of [classify](cli.md#classify) (`ClassificationArguments`)"
        in sections["classifier_pooling"]
    )


def test_a_field_added_to_the_config_appears_in_the_reference(monkeypatch):
    class ConfigWithANewSwitch(VanillaTransformerConfig):
        __doc__ = VanillaTransformerConfig.__doc__.rstrip() + "\n        brand_new_switch: a switch the test adds.\n"
        brand_new_switch: int = 3

    with pytest.raises(KeyError, match="brand_new_switch"):  # no allowed values: the build fails
        page_tools.config_reference(ConfigWithANewSwitch)
    monkeypatch.setitem(ALLOWED_VALUES, "brand_new_switch", "one, two or three")
    section = sections_by_anchor(page_tools.config_reference(ConfigWithANewSwitch))["brand_new_switch"]
    assert "a switch the test adds." in section and "one, two or three" in section and "`3`" in section


def test_the_cli_reference_has_a_section_for_every_command_listing_every_flag():
    sections = sections_by_anchor(page_tools.cli_reference())
    parsers = cli.command_parsers()
    assert {"train", "export-onnx", "plot-alignment", "tokenizer-train", "translate-corpus"} <= set(sections)
    for words, parser in parsers.items():
        section = sections[words.replace(" ", "-") or "vanilla-transformer"]
        assert parser.description and page_tools.markdown_text(parser.description) in section, words
        missing = [name for name in listed_names(parser) if f"`{name}`" not in section]
        assert missing == [], f"{words}: {missing}"
    # classify's own flags in full, transformers' TrainingArguments folded beside them
    assert "`--classifier_pooling`" in sections["classify"] and '??? note "' in sections["classify"]
    assert "`--gradient_checkpointing`" in sections["classify"]


def with_a_new_command_and_flag(build_parser):
    def built() -> argparse.ArgumentParser:
        parser = build_parser()
        (subcommands,) = [action for action in parser._actions if isinstance(action, argparse._SubParsersAction)]
        subcommands.choices["demo"].add_argument("--brand-new-flag", type=int, help="a flag the test adds")
        added = subcommands.add_parser("brand-new", help="a command the test adds")
        added.add_argument("--its-flag", choices=("a", "b"), default="a", help="the new command's flag")
        return parser

    return built


@dataclass
class ExtraArguments:
    brand_new_field: int = field(default=7, metadata={"help": "a dataclass field the test adds"})


def test_a_command_or_flag_added_to_the_parsers_appears_in_the_reference(monkeypatch):
    monkeypatch.setattr(cli, "build_parser", with_a_new_command_and_flag(cli.build_parser))
    monkeypatch.setitem(
        cli.DATACLASS_COMMAND_PARSERS,
        "train",
        lambda: HfArgumentParser((ModelArguments, DataArguments, TrainArguments, ExtraArguments)),
    )
    sections = sections_by_anchor(page_tools.cli_reference())
    assert "`--brand-new-flag`" in sections["demo"] and "a flag the test adds" in sections["demo"]
    assert "a command the test adds" in sections["brand-new"]
    assert "`--its-flag`" in sections["brand-new"] and "`a`" in sections["brand-new"]
    assert "`ExtraArguments`" in sections["train"] and "`--brand_new_field`" in sections["train"]
    assert "a dataclass field the test adds" in sections["train"]


# ---- the layout page


def test_the_layout_page_shows_every_room_and_every_module():
    package = REPO / "vanilla_transformer"
    floors, modules = page_tools.floors_reference(), page_tools.modules_reference()
    for path in package.rglob("*.py"):
        assert f"`{path.relative_to(package).as_posix()}`" in modules
        room = path.relative_to(package).parts[0].removesuffix(".py")
        assert f"| `{room}`" in floors, room


def test_a_module_without_a_docstring_fails_the_layout_page(monkeypatch, tmp_path):
    package = tmp_path / "house"
    package.mkdir()
    (package / "__init__.py").write_text('"""A house."""\n')
    (package / "room.py").write_text("import os\n")
    monkeypatch.setattr(page_tools, "package_folder", lambda: package)
    with pytest.raises(ValueError, match="room.py has no docstring"):
        page_tools.modules_reference()


def test_the_paper_table_names_only_symbols_that_exist(monkeypatch):
    table = page_tools.paper_reference()
    assert "`VanillaTransformerEncoder`" in table and "`modeling_vanilla_transformer.py`" in table
    renamed = (("3.2 Attention", "attention", ("attention.scaled_dot_product_attention_by_another_name",)),)
    monkeypatch.setattr(page_tools, "PAPER_SECTIONS", renamed)
    with pytest.raises(AttributeError, match="scaled_dot_product_attention_by_another_name"):
        page_tools.paper_reference()
