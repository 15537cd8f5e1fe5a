"""The page of `export web` as a static Hugging Face Space: the page's folder and a card whose front matter says
`sdk: static`; the Space hands out the files and the visitor's browser translates. `push FOLDER --repo-id ID
--static-space SPACE_ID` pushes the model through `hub`, then the page's Space from here (this room, the higher of
the two, joins them).
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

from huggingface_hub import CommitOperationAdd, HfApi

from ..common.model_folder import HUB_ID
from ..hub.push import create_repo
from .page import export_web

CARD = """---
title: {title_yaml}
emoji: 🔤
colorFrom: indigo
colorTo: blue
sdk: static
app_file: index.html
pinned: false
{models}---

# {title}

A page that translates in the visitor's browser with ONNX Runtime (WebAssembly): the text typed is not sent anywhere.
Written by `vanilla-transformer export web`.
"""


def write_static_space(
    model: str | Path, output: str | Path, *, model_repo_id: str | None = None, title: str | None = None, **page
) -> Path:
    """The page of `model` (a model folder or an ONNX export) and a static Space card in `output`, new or empty;
    `page` takes `export_web`'s keywords (quantize, offline_assets, ...)."""
    output = Path(output)
    title = title or f"{Path(model).resolve().name}: translate in your browser"
    export_web(model, output, title=title, **page)
    models = f"models:\n- {model_repo_id}\n" if model_repo_id else ""
    card = CARD.format(title=title, title_yaml=json.dumps(title), models=models)
    (output / "README.md").write_text(card, encoding="utf-8")
    return output


def push_static_space(
    model: str | Path,
    space_id: str,
    *,
    model_repo_id: str | None = None,
    private: bool = False,
    token: str | None = None,
    **page,
) -> str:
    """Write the page's static Space for `model` and push it to `space_id`; returns the commit's URL."""
    check_static_space_id(space_id)
    api = HfApi(token=token)
    with tempfile.TemporaryDirectory() as scratch:
        folder = write_static_space(model, Path(scratch) / "space", model_repo_id=model_repo_id, **page)
        create_repo(api, space_id, private=private, repo_type="space", space_sdk="static")
        operations = [
            CommitOperationAdd(path_in_repo=path.relative_to(folder).as_posix(), path_or_fileobj=str(path))
            for path in sorted(folder.rglob("*"))
            if path.is_file()
        ]
        info = api.create_commit(space_id, operations, commit_message="The translation page", repo_type="space")
    return str(info.commit_url)


def check_static_space_id(space_id: str) -> None:
    if not HUB_ID.fullmatch(space_id):
        raise ValueError(f"--static-space {space_id!r} is not a Hub repo id (USER/NAME)")


def add_static_space_to_push(push: argparse.ArgumentParser) -> None:
    """`push ... --static-space SPACE_ID [--static-space-int8]`: the model by the push already set on the parser
    (and its Gradio Space, with --space), then the page's static Space from here."""
    push.add_argument(
        "--static-space",
        metavar="SPACE_ID",
        help="also export the pushed model as a page that translates in the browser and push it as a static Space",
    )
    push.add_argument("--static-space-int8", action="store_true", help="the static Space's model in int8")
    push_model = push.get_default("func")

    def run(args: argparse.Namespace) -> int:
        if args.static_space:  # before the model is pushed: a Space that cannot be written is refused first
            check_static_space_id(args.static_space)
            if args.revision or args.create_pr:
                raise ValueError(
                    "--static-space serves the model's main branch: push without --revision and --create-pr"
                )
        code = push_model(args)
        if args.static_space and not args.dry_run:
            print(
                push_static_space(
                    args.folder,
                    args.static_space,
                    model_repo_id=args.repo_id,
                    private=args.private,
                    token=args.token,
                    quantize="int8" if args.static_space_int8 else None,
                )
            )
        return code

    push.set_defaults(func=run)


__all__ = ["add_static_space_to_push", "check_static_space_id", "push_static_space", "write_static_space"]
