"""Publish a trained model folder on the Hugging Face Hub: `push_folder` and `vanilla-transformer push`.

A complete folder is what training writes: model.safetensors, config.json (with auto_map), the code files it
names, the tokenizer, generation_config.json and README.md (the model card). Such a repo loads anywhere with
`AutoModelForSeq2SeqLM.from_pretrained(repo_id, trust_remote_code=True)` and `AutoTokenizer.from_pretrained(repo_id)`.
"""

from __future__ import annotations

import argparse
import fnmatch
import json
import os
import warnings
from pathlib import Path

from huggingface_hub import CommitOperationAdd, HfApi, get_token
from huggingface_hub import utils as hub_utils
from transformers.dynamic_module_utils import get_relative_imports
from transformers.utils import SAFE_WEIGHTS_INDEX_NAME, SAFE_WEIGHTS_NAME

from ..common.hub_connection import HubUnreachableError
from ..common.model_folder import TOKENIZER_VOCABULARIES, check_not_an_export

# Failures to connect of the HTTP client huggingface_hub uses (httpx or its fork), which are no OSErrors.
_CONNECTION_ERRORS = (hub_utils.httpx.TransportError,) if hasattr(hub_utils, "httpx") else ()
# Auto classes a translation model folder must map to its code files.
_REQUIRED_AUTO_CLASSES = ("AutoConfig", "AutoModelForSeq2SeqLM")
# Training leftovers beside a model's own files that have no place in a published model.
_IGNORED_FILES = ("*.pyc", "optimizer.pt", "scheduler.pt", "scaler.pt", "rng_state*.pth", "training_args.bin")


class IncompleteModelFolderError(ValueError):
    """The folder lacks files a published model needs; `missing` lists them."""

    def __init__(self, folder: Path, missing: list[str]):
        self.folder, self.missing = folder, missing
        super().__init__(
            f"{folder} is not a complete model folder; missing: {', '.join(missing)}. Save the model "
            "(model.save_pretrained, with `import vanilla_transformer` done so the code files and auto_map are "
            "written) and the tokenizer (tokenizer.save_pretrained) into it first."
        )


def check_publishable(folder: Path) -> None:
    """Refuse a folder that is no complete model folder, listing what it lacks; an export, whose weights are another
    engine's, as such (it lacks model.safetensors, and saving one into it is no way out)."""
    check_not_an_export(folder)
    missing = missing_model_files(folder)
    if missing:
        raise IncompleteModelFolderError(folder, missing)


def missing_model_files(folder: str | os.PathLike) -> list[str]:
    """What `folder` lacks to be a publishable model (empty when complete): weights, config with auto_map, the
    remote-code files auto_map names and those they import, and the tokenizer."""
    folder = Path(folder)
    missing = []
    index = folder / SAFE_WEIGHTS_INDEX_NAME
    if index.is_file():
        shards = sorted(set(json.loads(index.read_text(encoding="utf-8"))["weight_map"].values()))
        missing += [shard for shard in shards if not (folder / shard).is_file()]
    elif not (folder / SAFE_WEIGHTS_NAME).is_file():
        missing.append(SAFE_WEIGHTS_NAME)

    config_file = folder / "config.json"
    if not config_file.is_file():
        missing.append("config.json")
    else:
        auto_map = json.loads(config_file.read_text(encoding="utf-8")).get("auto_map") or {}
        absent = [name for name in _REQUIRED_AUTO_CLASSES if name not in auto_map]
        if absent:
            missing.append(f"auto_map entries for {', '.join(absent)} in config.json")
        missing += _missing_code_files(folder, auto_map)

    if not (folder / "tokenizer_config.json").is_file():
        missing.append("tokenizer_config.json")
    if not any((folder / name).is_file() for name in TOKENIZER_VOCABULARIES):
        missing.append("tokenizer.json")
    return missing


def _missing_code_files(folder: Path, auto_map: dict) -> list[str]:
    """The code files named in auto_map and, transitively, their relative imports, that are not in `folder`."""
    references = []
    for value in auto_map.values():  # "module.Class", "repo--module.Class", or a [slow, fast] tokenizer pair
        references += [value] if isinstance(value, str) else [item for item in value or () if isinstance(item, str)]
    modules = [reference.split("--")[-1].rsplit(".", 1)[0] for reference in references]
    to_check, seen, missing = list(dict.fromkeys(modules)), set(), []
    while to_check:
        module = to_check.pop(0)
        if module in seen:
            continue
        seen.add(module)
        code_file = folder / f"{module}.py"
        if not code_file.is_file():
            missing.append(code_file.name)
            continue
        to_check += get_relative_imports(code_file)
    return missing


def files_to_push(folder: str | os.PathLike) -> list[str]:
    """The files of `folder` (sorted) that `push_folder` commits: a model folder keeps its files at the top, so
    subfolders stay home (a training run's checkpoints/ with optimizer states and pickled training state, best/,
    logs/, runs/, caches), and so do hidden files and the training leftovers of _IGNORED_FILES."""
    return sorted(
        path.name
        for path in Path(folder).iterdir()
        if path.is_file()
        and not path.name.startswith(".")
        and not any(fnmatch.fnmatch(path.name, pattern) for pattern in _IGNORED_FILES)
    )


def push_folder(
    folder: str | os.PathLike,
    repo_id: str,
    *,
    private: bool = False,
    revision: str | None = None,
    create_pr: bool = False,
    token: str | None = None,
    commit_message: str | None = None,
) -> str:
    """Publish a trained model folder to the Hub model repo `repo_id` ("user/name") in one commit; returns the URL
    of the commit (of the pull request with `create_pr=True`).

    The repo is created when it does not exist (`private` applies then); `revision` is a branch, created from the
    default branch when missing, to commit to (or, with `create_pr`, to open the pull request against). `token`
    defaults to HF_TOKEN or the login stored by `hf auth login`. An incomplete folder is refused with an
    `IncompleteModelFolderError` listing what is missing, before anything is sent.
    """
    folder = Path(folder)
    if not folder.is_dir():
        raise FileNotFoundError(f"{folder}: no such folder")
    check_publishable(folder)
    if not (folder / "README.md").is_file():
        warnings.warn(
            f"{folder} has no README.md: the repo will have no model card "
            "(vanilla_transformer.hub.save_model_card writes one)",
            stacklevel=2,
        )
    if token is None and get_token() is None:
        raise PermissionError(
            "no Hugging Face token: pass token= (--token), set HF_TOKEN, or log in once with `hf auth login`"
        )

    api = HfApi(token=token)
    repo_id = create_repo(api, repo_id, private=private, repo_type="model").repo_id
    if revision is not None:
        api.create_branch(repo_id, branch=revision, exist_ok=True, repo_type="model")
    operations = [
        CommitOperationAdd(path_in_repo=name, path_or_fileobj=str(folder / name)) for name in files_to_push(folder)
    ]
    info = api.create_commit(
        repo_id,
        operations,
        commit_message=commit_message or f"Upload {folder.resolve().name} with vanilla-transformer",
        revision=revision,
        create_pr=create_pr,
        repo_type="model",
    )
    return str(info.pr_url if create_pr and info.pr_url else info.commit_url)


def create_repo(api: HfApi, repo_id: str, **kwargs):
    """`api.create_repo(repo_id, exist_ok=True, **kwargs)`; a network that fails is a HubUnreachableError naming the
    repo (the command would end in a traceback)."""
    try:
        return api.create_repo(repo_id, exist_ok=True, **kwargs)
    except _CONNECTION_ERRORS as error:
        raise HubUnreachableError(
            f"push to {repo_id}", f"check the network ({type(error).__name__}: {error})"
        ) from error


def add_push_subcommand(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """Add `push FOLDER --repo-id USER/NAME [--private] [--revision R] [--create-pr] [--token T]`; handler in `func`."""
    parser = subparsers.add_parser(
        "push",
        help="publish a trained model folder on the Hugging Face Hub",
        description="Publish a trained model folder (weights, config, code files, tokenizer, model card) to a Hub "
        "model repo in one commit, creating the repo if needed. The token comes from --token, HF_TOKEN or "
        "`hf auth login`.",
    )
    parser.add_argument("folder", type=Path, help="the trained model folder")
    parser.add_argument("--repo-id", required=True, help="the Hub repo, USER/NAME or ORG/NAME")
    parser.add_argument("--private", action="store_true", help="create the repo private (if it does not exist)")
    parser.add_argument("--revision", help="branch to commit to (created if missing); default main")
    parser.add_argument("--create-pr", action="store_true", help="open a pull request instead of committing")
    parser.add_argument("--token", help="Hugging Face token; default HF_TOKEN or the stored login")
    parser.add_argument("--commit-message", help="message of the commit")
    parser.add_argument("--dry-run", action="store_true", help="check the folder and list the files; send nothing")
    parser.set_defaults(func=run_push)
    return parser


def run_push(args: argparse.Namespace) -> int:
    if args.dry_run:
        if not args.folder.is_dir():
            raise IncompleteModelFolderError(args.folder, [f"the folder {args.folder}"])
        check_publishable(args.folder)
        print("\n".join(files_to_push(args.folder)))
        return 0
    url = push_folder(
        args.folder,
        args.repo_id,
        private=args.private,
        revision=args.revision,
        create_pr=args.create_pr,
        token=args.token,
        commit_message=args.commit_message,
    )
    print(url)
    return 0


__all__ = [
    "IncompleteModelFolderError",
    "add_push_subcommand",
    "check_publishable",
    "create_repo",
    "files_to_push",
    "missing_model_files",
    "push_folder",
    "run_push",
]
