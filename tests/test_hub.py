"""Publishing a trained folder: the commit push_folder makes (network intercepted), the refusal of incomplete folders,
a fresh-process load without our package, and a live push-and-load that runs only with HF_TOKEN set."""

import argparse
import json
import os
import shutil
import uuid

import pytest
import torch
from helpers import MODEL_CODE_FILES, run_without_our_package, tiny_config, tiny_model
from huggingface_hub import CommitInfo, HfApi, ModelCard, RepoUrl

import vanilla_transformer.hub.push as hub
from vanilla_transformer.cli import build_parser
from vanilla_transformer.hub.model_card import ModelCardResults, save_model_card
from vanilla_transformer.hub.push import IncompleteModelFolderError, add_push_subcommand, files_to_push, push_folder
from vanilla_transformer.tokenization import train_tokenizer

CORPUS = [f"a small {('cat', 'dog', 'bird', 'man', 'woman')[i % 5]} sat on mat number {i}" for i in range(50)]
SENTENCES = ["a small cat sat", "a dog", "the woman sat on mat number 7"]
MODEL_FILES = {
    "model.safetensors",
    "config.json",
    "generation_config.json",
    "tokenizer.json",
    "tokenizer_config.json",
    "README.md",
    *MODEL_CODE_FILES,
}
RESULTS = ModelCardResults(
    source_lang="de",
    target_lang="en",
    dataset="bentrevett/multi30k",
    split="test_2016_flickr",
    num_beams=2,
    bleu=38.2,
    bleu_lowercased=40.1,
    chrf=60.3,
)


def save_trained_folder(folder):
    """What training leaves: model, tokenizer, generation config, card, and leftovers that must not be pushed."""
    tokenizer = train_tokenizer(CORPUS, vocab_size=300)
    model = tiny_model(tiny_config(vocab_size=len(tokenizer), norm_placement="pre", position_embedding_type="rope"))
    model.generation_config.num_beams = 2
    model.generation_config.max_new_tokens = 5
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    save_model_card(folder, RESULTS)
    leftovers = ("checkpoint-10/optimizer.pt", "runs/events.out", "__pycache__/x.pyc", ".cache/x", "optimizer.pt")
    # what `vanilla-transformer train` leaves beside the model: checkpoints with optimizer and pickled training state
    leftovers += ("checkpoints/step-2/optimizer.bin", "checkpoints/step-2/custom_checkpoint_0.pkl", "best/x", "logs/y")
    for leftover in leftovers:
        (folder / leftover).parent.mkdir(parents=True, exist_ok=True)
        (folder / leftover).write_bytes(b"leftover")
    (folder / "training_args.bin").write_bytes(b"pickle")
    return model, tokenizer


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    folder = tmp_path_factory.mktemp("trained")
    model, tokenizer = save_trained_folder(folder)
    return folder, model, tokenizer


@pytest.fixture
def hub_calls(monkeypatch):
    """HfApi's network calls replaced by recorders; the token the HfApi was built with is recorded too."""
    calls = {}

    def create_repo(self, repo_id, **kwargs):
        calls["create_repo"] = dict(repo_id=repo_id, token=self.token, **kwargs)
        return RepoUrl(f"https://huggingface.co/{repo_id}")

    def create_branch(self, repo_id, **kwargs):
        calls["create_branch"] = dict(repo_id=repo_id, **kwargs)

    def create_commit(self, repo_id, operations, **kwargs):
        operations = list(operations)
        calls["create_commit"] = dict(repo_id=repo_id, token=self.token, **kwargs)
        calls["files"] = {op.path_in_repo: _read(op.path_or_fileobj) for op in operations}
        pr_url = f"https://huggingface.co/{repo_id}/discussions/1" if kwargs.get("create_pr") else None
        return CommitInfo(
            commit_url=f"https://huggingface.co/{repo_id}/commit/abc123",
            commit_message=kwargs["commit_message"],
            commit_description="",
            oid="abc123",
            pr_url=pr_url,
        )

    monkeypatch.setattr(HfApi, "create_repo", create_repo)
    monkeypatch.setattr(HfApi, "create_branch", create_branch)
    monkeypatch.setattr(HfApi, "create_commit", create_commit)
    return calls


def _read(path_or_fileobj) -> bytes:
    if isinstance(path_or_fileobj, bytes):
        return path_or_fileobj
    with open(path_or_fileobj, "rb") as file:
        return file.read()


def test_push_commits_exactly_the_model_files_with_the_options(trained, hub_calls):
    folder = trained[0]
    url = push_folder(
        folder, "me/tiny", private=True, revision="v1", create_pr=True, token="hf_arg", commit_message="m"
    )

    assert url == "https://huggingface.co/me/tiny/discussions/1"
    assert hub_calls["create_repo"] == {
        "repo_id": "me/tiny",
        "token": "hf_arg",
        "private": True,
        "exist_ok": True,
        "repo_type": "model",
    }
    assert hub_calls["create_branch"] == {"repo_id": "me/tiny", "branch": "v1", "exist_ok": True, "repo_type": "model"}
    commit = hub_calls["create_commit"]
    assert (commit["revision"], commit["create_pr"], commit["commit_message"], commit["token"]) == (
        "v1",
        True,
        "m",
        "hf_arg",
    )

    assert set(hub_calls["files"]) == MODEL_FILES
    assert hub_calls["files"]["model.safetensors"] == (folder / "model.safetensors").read_bytes()
    card = ModelCard(hub_calls["files"]["README.md"].decode("utf-8"))
    assert card.data.language == ["de", "en"] and "vanilla-transformer" in card.data.tags
    assert [result.metric_value for result in card.data.eval_results] == [38.2, 40.1, 60.3]
    assert "| sacreBLEU (cased, 13a) | 38.2 |" in card.text and "trust_remote_code=True" in card.text


def test_push_defaults_use_the_stored_token_main_and_no_pr(trained, hub_calls, monkeypatch):
    monkeypatch.setenv("HF_TOKEN", "hf_env")
    url = push_folder(trained[0], "me/tiny")
    assert url == "https://huggingface.co/me/tiny/commit/abc123"
    assert hub_calls["create_repo"]["private"] is False and hub_calls["create_repo"]["token"] is None
    assert "create_branch" not in hub_calls  # HfApi resolves HF_TOKEN / the stored login itself
    commit = hub_calls["create_commit"]
    assert commit["revision"] is None and commit["create_pr"] is False and commit["commit_message"]

    monkeypatch.setattr(hub, "get_token", lambda: None)  # no argument, no HF_TOKEN, no login
    with pytest.raises(PermissionError, match="HF_TOKEN"):
        push_folder(trained[0], "me/tiny")


def test_push_command(trained, hub_calls, capsys):
    parser = argparse.ArgumentParser()
    add_push_subcommand(parser.add_subparsers())
    args = parser.parse_args(["push", str(trained[0]), "--repo-id", "me/tiny", "--private", "--token", "hf_cli"])
    assert args.func(args) == 0
    assert capsys.readouterr().out.strip() == "https://huggingface.co/me/tiny/commit/abc123"
    assert hub_calls["create_repo"]["private"] is True and hub_calls["create_commit"]["token"] == "hf_cli"
    assert set(hub_calls["files"]) == MODEL_FILES

    args = parser.parse_args(["push", str(trained[0]), "--repo-id", "me/tiny", "--revision", "v2", "--create-pr"])
    hub_calls.clear()
    args.token = "hf_cli"
    args.func(args)
    assert capsys.readouterr().out.strip() == "https://huggingface.co/me/tiny/discussions/1"
    assert hub_calls["create_commit"]["revision"] == "v2" and hub_calls["create_commit"]["create_pr"] is True

    args = parser.parse_args(["push", str(trained[0]), "--repo-id", "me/tiny", "--dry-run"])
    hub_calls.clear()
    args.func(args)
    assert set(capsys.readouterr().out.split()) == MODEL_FILES and hub_calls == {}


def test_push_with_a_space_pushes_the_model_then_a_gradio_space_that_serves_it(trained, hub_calls, capsys):
    pytest.importorskip("gradio", reason='a Space is written with ".[serve]"')
    parser = build_parser()  # push --space is where the command line joins the Hub's push and the page's Space
    args = parser.parse_args(["push", str(trained[0]), "--repo-id", "me/tiny", "--space", "me/tiny-demo"])
    args.token = "hf_cli"
    assert args.func(args) == 0
    assert capsys.readouterr().out.split()[0] == "https://huggingface.co/me/tiny/commit/abc123"
    assert hub_calls["create_repo"] == {"repo_id": "me/tiny-demo", "token": "hf_cli", "private": False,
                                        "exist_ok": True, "repo_type": "space", "space_sdk": "gradio"}  # fmt: skip
    files = hub_calls["files"]
    assert {"app.py", "requirements.txt", "README.md", "vanilla_transformer/serve/page.py"} <= set(files)
    assert b"'me/tiny'" in files["app.py"] and b"- me/tiny\n" in files["README.md"]

    hub_calls.clear()
    args = parser.parse_args(["push", str(trained[0]), "--repo-id", "me/tiny", "--space", "not a repo"])
    with pytest.raises(ValueError, match="--space 'not a repo' is not a Hub repo id"):
        args.func(args)
    args = parser.parse_args(["push", str(trained[0]), "--repo-id", "me/tiny", "--space", "me/d", "--create-pr"])
    with pytest.raises(ValueError, match="--space serves the model's main branch"):
        args.func(args)
    assert hub_calls == {}  # refused before the model was pushed


def test_an_incomplete_folder_is_refused_before_any_network_call(trained, tmp_path, hub_calls):
    folder = tmp_path / "incomplete"
    shutil.copytree(trained[0], folder)
    for name in ("model.safetensors", "attention.py", "tokenizer.json"):
        (folder / name).unlink()
    with pytest.raises(IncompleteModelFolderError) as refused:
        push_folder(folder, "me/tiny", token="hf_arg")
    assert refused.value.missing == ["model.safetensors", "attention.py", "tokenizer.json"]
    assert "model.safetensors, attention.py, tokenizer.json" in str(refused.value)
    assert hub_calls == {}

    # a config without auto_map was saved without our package's registration: no remote code
    config = json.loads((trained[0] / "config.json").read_text())
    del config["auto_map"]
    (folder / "config.json").write_text(json.dumps(config))
    with pytest.raises(IncompleteModelFolderError, match="auto_map entries for AutoConfig, AutoModelForSeq2SeqLM"):
        push_folder(folder, "me/tiny", token="hf_arg")
    with pytest.raises(FileNotFoundError):
        push_folder(tmp_path / "nowhere", "me/tiny", token="hf_arg")
    assert files_to_push(trained[0]) == sorted(MODEL_FILES)


CHILD = """
    import json, sys
    from transformers import AutoConfig, AutoModel, AutoModelForSeq2SeqLM, AutoTokenizer

    folder, sentences = sys.argv[1], json.loads(sys.argv[2])
    config = AutoConfig.from_pretrained(folder, trust_remote_code=True)
    base = AutoModel.from_pretrained(folder, trust_remote_code=True)
    model = AutoModelForSeq2SeqLM.from_pretrained(folder, trust_remote_code=True).eval()
    tokenizer = AutoTokenizer.from_pretrained(folder, trust_remote_code=True)
    inputs = tokenizer(sentences, return_tensors="pt", padding=True)
    generated = model.generate(**inputs)  # beams and length from generation_config.json
    print(json.dumps({
        "classes": [type(config).__name__, type(base).__name__, type(model).__name__],
        "modules": [type(config).__module__, type(model).__module__],
        "ours_imported": any(name.startswith("vanilla_transformer") for name in sys.modules),
        "input_ids": inputs["input_ids"].tolist(),
        "generated": generated.tolist(),
        "text": tokenizer.batch_decode(generated, skip_special_tokens=True),
    }))
    """


def test_a_saved_folder_loads_in_a_fresh_process_without_our_package(trained, tmp_path):
    folder, model, tokenizer = trained
    child = run_without_our_package(CHILD, str(folder), json.dumps(SENTENCES), cwd=tmp_path)
    assert child["classes"] == [
        "VanillaTransformerConfig",
        "VanillaTransformerModel",
        "VanillaTransformerForConditionalGeneration",
    ]
    assert all(module.startswith("transformers_modules") for module in child["modules"])
    assert child["ours_imported"] is False

    inputs = tokenizer(SENTENCES, return_tensors="pt", padding=True)
    assert child["input_ids"] == inputs["input_ids"].tolist()
    expected = model.generate(**inputs)
    assert expected.shape[0] == 3 and expected.shape[1] > 1
    assert child["generated"] == expected.tolist()
    assert child["text"] == tokenizer.batch_decode(expected, skip_special_tokens=True)


@pytest.mark.skipif(not os.environ.get("HF_TOKEN"), reason="live Hub test: set HF_TOKEN to run it")
def test_live_push_and_load(tmp_path):
    from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

    folder = tmp_path / "model"
    folder.mkdir()
    model, tokenizer = save_trained_folder(folder)
    api = HfApi()
    repo_id = f"{api.whoami()['name']}/vanilla-transformer-test-{uuid.uuid4().hex[:8]}"
    try:
        url = push_folder(folder, repo_id, private=True)
        assert repo_id in url
        assert set(api.list_repo_files(repo_id)) >= MODEL_FILES
        loaded = AutoModelForSeq2SeqLM.from_pretrained(repo_id, trust_remote_code=True).eval()
        loaded_tokenizer = AutoTokenizer.from_pretrained(repo_id)
        inputs = loaded_tokenizer(SENTENCES, return_tensors="pt", padding=True)
        assert torch.equal(loaded.generate(**inputs), model.generate(**inputs))
    finally:
        api.delete_repo(repo_id, missing_ok=True)
