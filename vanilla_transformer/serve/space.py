"""A Hugging Face Space that runs the page for a model from the Hub alone: `app.py`, `requirements.txt`, the Space
card (its front matter names the model, the Gradio SDK and the app file), and a copy of this package beside the app
(the page's code is this package, which a Space cannot install from the registry).

    vanilla-transformer space --model USER/NAME --output space/        # the folder; `python space/app.py` runs it
    vanilla-transformer push outputs/demo --repo-id USER/NAME --space USER/NAME-demo   # model, then its Space
"""

from __future__ import annotations

import importlib.metadata
import json
import re
import shutil
from pathlib import Path

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
