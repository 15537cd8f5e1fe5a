"""A user's mistake on the command line is one line naming the culprit and exit code 2; --debug shows the traceback."""

import io
import sys

import pytest

from vanilla_transformer.cli import main


def error_line(capsys) -> str:
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1, lines
    return lines[0]


def test_a_missing_config_file_is_one_line_naming_it(tmp_path, capsys):
    assert main(["train", "--config", str(tmp_path / "missing.yaml")]) == 2
    line = error_line(capsys)
    assert line.startswith("vanilla-transformer train: error: ") and "missing.yaml" in line


def test_a_yaml_syntax_error_names_the_file_and_line(tmp_path, capsys):
    config = tmp_path / "broken.yaml"
    config.write_text("d_model: 128\nencoder_layers: [4\n")
    assert main(["train", "--config", str(config)]) == 2
    line = error_line(capsys)
    assert "broken.yaml is not valid YAML" in line and "line 2" in line and "<unicode string>" not in line


def test_an_unknown_key_in_a_config_file_is_named(tmp_path, capsys):
    config = tmp_path / "typo.yaml"
    config.write_text("d_modle: 128\n")
    assert main(["train", "--config", str(config)]) == 2
    assert "unknown arguments d_modle" in error_line(capsys)


def test_a_model_folder_that_does_not_exist_is_named_without_a_lecture_on_repo_ids(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(sys, "stdin", io.StringIO(""))
    assert main(["translate", "--model", str(tmp_path / "nowhere")]) == 2
    line = error_line(capsys)
    assert line.startswith("vanilla-transformer translate: error: ") and "nowhere: no such model folder" in line


@pytest.mark.parametrize("how", ["flag", "environment"])
def test_debug_shows_the_traceback(tmp_path, monkeypatch, how):
    argv = ["train", "--config", str(tmp_path / "missing.yaml")]
    if how == "flag":
        argv.append("--debug")
    else:
        monkeypatch.setenv("VANILLA_TRANSFORMER_DEBUG", "1")
    with pytest.raises(FileNotFoundError, match="missing.yaml"):
        main(argv)
