"""A Hugging Face Space that runs the page for a model from the Hub alone: `app.py`, `requirements.txt`, the Space
card (its front matter names the model, the Gradio SDK and the app file), and a copy of this package beside the app
(the page's code is this package, which a Space cannot install from the registry).

    vanilla-transformer space --model USER/NAME --output space/        # the folder; `python space/app.py` runs it
    vanilla-transformer push outputs/demo --repo-id USER/NAME --space USER/NAME-demo   # model, then its Space
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import re
import shutil
import tempfile
from pathlib import Path

from huggingface_hub import CommitOperationAdd, HfApi

from ..common.extras import import_gradio
from ..common.model_folder import HUB_ID
from ..hub.push import create_repo, run_push

APP = '''"""The vanilla-transformer page for {model}: translate, and see the attention, positions and masks."""

import os

from vanilla_transformer.serve import serve_model

# a Space sets GRADIO_SERVER_NAME and the port; MODEL may point the app at another repo or a local folder
serve_model(os.environ.get("MODEL", {model!r}))
'''

CARD = """---
title: {title_yaml}
emoji: 🔤
colorFrom: indigo
colorTo: blue
sdk: gradio
sdk_version: {gradio_version}
app_file: app.py
pinned: false
models:
- {model}
---

# {title}

Translate with [{model}](https://huggingface.co/{model}) and look inside it: each new token's probability, the
cross-attention alignment, every head of the encoder's and decoder's self-attention, the model's positions and the
masks of the sentence. Written by `vanilla-transformer space`; the app is the `vanilla-transformer serve` page.
"""

# files of the package the Space does not need
_LEFT_OUT = shutil.ignore_patterns("__pycache__", "*.pyc")


def requirements() -> list[str]:
    """This package's requirements without extras, and the page's (gradio, matplotlib)."""
    needed = []
    for requirement in importlib.metadata.requires("vanilla-transformer") or []:
        name, _, marker = requirement.partition(";")
        if "extra ==" not in marker or re.search(r"extra == ['\"]serve['\"]", marker):
            needed.append(name.strip())
    return sorted(set(needed))


def write_space(model: str, output: str | Path, title: str | None = None) -> Path:
    """Write the Space of `model` (a Hub repo id, or a local folder for a test) into `output`, which must be new or
    empty."""
    import gradio

    import vanilla_transformer

    output = Path(output)
    if output.exists() and any(output.iterdir()):
        raise FileExistsError(f"{output} is not empty: choose a new folder for the Space")
    output.mkdir(parents=True, exist_ok=True)
    title = title or f"{str(model).rstrip('/').split('/')[-1]} translator"
    shutil.copytree(Path(vanilla_transformer.__file__).parent, output / "vanilla_transformer", ignore=_LEFT_OUT)
    (output / "app.py").write_text(APP.format(model=str(model)), encoding="utf-8")
    (output / "requirements.txt").write_text("\n".join(requirements()) + "\n", encoding="utf-8")
    # a JSON string is a YAML string: a title with a colon or a quote keeps the front matter valid
    card = CARD.format(title=title, title_yaml=json.dumps(title), gradio_version=gradio.__version__, model=model)
    (output / "README.md").write_text(card, encoding="utf-8")
    return output


def check_space_id(space_id: str) -> None:
    """A Space repo id, and the gradio it is written with (the Space pins the installed version)."""
    if not HUB_ID.fullmatch(space_id):
        raise ValueError(f"--space {space_id!r} is not a Hub repo id (USER/NAME)")
    import_gradio()


def push_space(model_repo_id: str, space_id: str, *, private: bool = False, token: str | None = None) -> str:
    """Write the Space that serves the page for `model_repo_id` and push it to the Space repo `space_id`; returns
    the commit's URL."""
    check_space_id(space_id)
    api = HfApi(token=token)
    with tempfile.TemporaryDirectory() as scratch:
        folder = write_space(model_repo_id, Path(scratch) / "space")
        create_repo(api, space_id, private=private, repo_type="space", space_sdk="gradio")
        operations = [
            CommitOperationAdd(path_in_repo=path.relative_to(folder).as_posix(), path_or_fileobj=str(path))
            for path in sorted(folder.rglob("*"))
            if path.is_file()
        ]
        info = api.create_commit(space_id, operations, commit_message="The vanilla-transformer page", repo_type="space")
    return str(info.commit_url)


def add_space_to_push(push: argparse.ArgumentParser) -> None:
    """`push ... --space SPACE_ID`: where the Hub's push and the page meet, this room, the higher of the two, joins
    them (the model is pushed by `hub`, then its Space from here)."""
    push.add_argument(
        "--space",
        metavar="SPACE_ID",
        help="also write and push a Gradio Space (USER/NAME) that serves the page for the pushed model (.[serve])",
    )
    push.set_defaults(func=run_push_with_space)


def run_push_with_space(args: argparse.Namespace) -> int:
    if args.space:  # before the model is pushed: a Space that cannot be written is refused first
        check_space_id(args.space)
        if args.revision or args.create_pr:
            raise ValueError("--space serves the model's main branch: push it without --revision and --create-pr")
    run_push(args)
    if args.space and not args.dry_run:
        print(push_space(args.repo_id, args.space, private=args.private, token=args.token))
    return 0
