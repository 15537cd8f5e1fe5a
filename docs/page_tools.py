"""What the pages' build-time snippets call: the package's own source shown by symbol, its pictures drawn into the page,
and the reference tables generated from the config class and the command-line parsers.

A page runs them in a markdown-exec block (```python exec="on"```) and prints what they return (markdown-exec collects
the block's own `print`, not this module's), so a listing is read from the source file, a picture drawn and a table
generated each time the site is built: a page cannot drift from the code.
"""

import base64
import html
import inspect
import io
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def source_path(target) -> str:
    """The file that defines `target`, relative to the repository (or to site-packages for an installed package)."""
    path = Path(inspect.getsourcefile(target)).resolve()
    return path.relative_to(REPO).as_posix() if path.is_relative_to(REPO) else path.name


def listing(*targets, language: str = "python") -> str:
    """Each function, class or method's source as a code block titled with its file and lines."""
    blocks = []
    for target in targets:
        lines, first = inspect.getsourcelines(target)
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
