"""MkDocs hooks of the documentation site (mkdocs.yml `hooks:`).

- The pages' build-time snippets import `page_tools` (beside this file) and the installed package.
- Formulas: pymdownx.arithmatex marks them; here they become MathML, which browsers draw themselves, so a page
  shows its formulas with no script and no CDN (the site is read offline too).
"""

import html
import os
import re
import sys
from pathlib import Path

import torch
from latex2mathml.converter import convert

DOCS = Path(__file__).resolve().parent

# arithmatex's generic output: \( ... \) in a span, \[ ... \] in a div
INLINE = re.compile(r'<span class="arithmatex">\\\((.+?)\\\)</span>', re.DOTALL)
DISPLAY = re.compile(r'<div class="arithmatex">\\\[(.+?)\\\]</div>', re.DOTALL)


def on_config(config, **kwargs):
    # mkdocs restores sys.path after loading this file: the pages' snippets need it while they run
    if str(DOCS) not in sys.path:
        sys.path.insert(0, str(DOCS))
    os.environ.setdefault("MPLBACKEND", "Agg")  # pictures are drawn without a screen
    # The pages' models have a few thousand parameters: their products take microseconds, and a second thread only
    # waits to be scheduled (25x slower on two busy cores, measured while tests ran beside the build)
    torch.set_num_threads(1)
    return config


def formula(match: re.Match, display: str) -> str:
    latex = html.unescape(match.group(1)).strip()
    return f'<span class="formula formula-{display}">{convert(latex, display=display)}</span>'


def on_page_content(content: str, **kwargs) -> str:
    content = DISPLAY.sub(lambda match: formula(match, "block"), content)
    return INLINE.sub(lambda match: formula(match, "inline"), content)
