"""A page to translate and look inside a model, and its HTTP API (`vanilla-transformer serve`, a Hub Space)."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from ..common.extras import import_gradio
from ..common.model_folder import EXPORTS
from .access import LOGINS_VARIABLE, TOKEN_VARIABLE, Access
from .batching import QUEUE_SIZE
from .service import Limits


def add_serve_subcommand(subparsers) -> argparse.ArgumentParser:
    parser = subparsers.add_parser(
        "serve",
        help="a page (and its HTTP API) to translate with a model and see its attention, positions and masks",
        description="Serve a model folder, Hub id, CTranslate2 or ONNX export on a Gradio page, with Gradio's HTTP "
        "API. Listens on 127.0.0.1 unless --host says otherwise; no public link unless --share.",
        allow_abbrev=False,  # --token is no short --token-file: a token typed as a flag must not be read as a path
    )
    parser.add_argument("--model", required=True, help="a model folder, a Hub repo id, or a CTranslate2 or ONNX export")
    parser.add_argument("--host", default="127.0.0.1", help="the address to listen on (0.0.0.0: every interface)")
    parser.add_argument("--port", type=int, default=7860, help="the port to listen on (1 to 65535)")
    parser.add_argument("--share", action="store_true", help="also open a public gradio.live link")
    parser.add_argument(
        "--quantize", choices=["int8"], help="also offer the model with int8 linear layers (as translate --quantize)"
    )
    parser.add_argument("--max-words", type=int, default=Limits.max_words, help="longest text a request may send")
    parser.add_argument(
        "--max-sentences", type=int, default=Limits.max_sentences, help="most sentences of a paragraph a request sends"
    )
    parser.add_argument(
        "--max-beams", type=int, default=Limits.max_beams, help="most beams a request may ask for (the page's slider)"
    )
    parser.add_argument(
        "--max-batch-size", type=int, default=Limits.max_batch_size, help="requests translated in one generate() call"
    )
    parser.add_argument(
        "--max-wait-ms",
        type=float,
        default=Limits.max_wait_ms,
        help="how long a request waits for others to share its generate() call",
    )
    parser.add_argument(
        "--queue-size", type=int, default=QUEUE_SIZE, help="requests waiting at most; one more is answered busy"
    )
    parser.add_argument(
        "--threads", type=int, help="torch's threads for the model (default: every core but one, for the web server)"
    )
    parser.add_argument(
        "--trust-remote-code", action="store_true", help="run the model code stored with the model (Hub repos)"
    )
    parser.add_argument(
        "--token-file",
        type=Path,
        help=f"a file holding the token the JSON API asks for (Authorization: Bearer TOKEN); default ${TOKEN_VARIABLE}",
    )
    parser.add_argument(
        "--logins-file",
        type=Path,
        help=f"a file of user:password lines, the page's logins (Gradio's login; the JSON API takes them as HTTP "
        f"Basic too); default ${LOGINS_VARIABLE}",
    )
    parser.set_defaults(func=run_serve)
    return parser


def run_serve(args: argparse.Namespace) -> int:
    for name in ("max_words", "max_sentences", "max_beams", "max_batch_size", "port", "queue_size", "threads"):
        if getattr(args, name) is not None and getattr(args, name) < 1:
            raise ValueError(f"--{name.replace('_', '-')}={getattr(args, name)} must be a positive integer")
    if args.port > 65535:
        raise ValueError(f"--port={args.port} is beyond 65535, the highest port")
    if not 0 <= args.max_wait_ms <= 10_000:
        raise ValueError(f"--max-wait-ms={args.max_wait_ms} must be between 0 and 10000")
    limits = Limits(
        max_words=args.max_words,
        max_sentences=args.max_sentences,
        max_beams=args.max_beams,
        max_batch_size=args.max_batch_size,
        max_wait_ms=args.max_wait_ms,
    )
    serve_model(
        args.model,
        args.host,
        args.port,
        args.share,
        limits,
        args.quantize == "int8",
        args.trust_remote_code,
        args.queue_size,
        args.threads,
        Access.read(args.token_file, args.logins_file),
    )
    return 0


def serve_model(
    model: str,
    host: str | None = None,
    port: int | None = None,
    share: bool = False,
    limits: Limits | None = None,
    int8: bool = False,
    trust_remote_code: bool = False,
    queue_size: int = QUEUE_SIZE,
    threads: int | None = None,
    access: Access | None = None,
) -> None:
    """Load `model` and serve its page until interrupted. `host`/`port` None: Gradio's GRADIO_SERVER_NAME and
    GRADIO_SERVER_PORT (a Space sets them), else 127.0.0.1:7860. `threads`: torch's threads for the model, by
    default every core but one. `access`: who may use it, by default from $VANILLA_TRANSFORMER_TOKEN and
    $VANILLA_TRANSFORMER_LOGINS (a Space's secrets)."""
    import_gradio()
    import torch

    access = access if access is not None else Access.read()
    from .server import listening_address, start_server, why_not_listening
    from .service import TranslationService

    address = listening_address(host, port)
    problem = why_not_listening(*address)  # before the model loads: a port in use is said at once
    if problem:
        raise OSError(problem)

    # the model first: a folder that does not load stops here, in one line, before any page is started
    # the web server handles every request in Python beside the model: a core of its own serves more requests a
    # second than a second thread of the model's products (docs/experiments/serve.md)
    threads = threads or default_threads()
    service = TranslationService(model, limits, trust_remote_code=trust_remote_code, threads=threads)
    torch.set_num_threads(threads)
    if int8:
        if service.model is None:
            how = {"ctranslate2": "export ctranslate2 --quantization int8", "onnx": "export onnx --quantize int8"}
            kind = service.default_engine
            raise ValueError(
                f"--quantize int8 quantizes a PyTorch model, and {model} is {EXPORTS[kind]}: quantize it "
                f"when exporting it ({how[kind]})"
            )
        service.add_int8()
    warning = access.warning(address[0], share)
    if warning:
        print(f"vanilla-transformer serve: {warning}", file=sys.stderr)
    card = model_card(model)
    title = f"vanilla-transformer: {model_name(model, card)}"
    start_server(service, model_examples(card), title, host, port, share, queue_size, access=access)


def default_threads() -> int:
    """Every core this process may use but one, and at least one."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    return max(1, cores - 1)


def add_space_subcommand(subparsers) -> argparse.ArgumentParser:
    parser = subparsers.add_parser(
        "space",
        help="write a Hugging Face Space (Gradio) that serves the page for a model from the Hub",
        description="Write app.py, requirements.txt, the Space card and a copy of this package into OUTPUT; "
        "`python OUTPUT/app.py` runs it here (MODEL=FOLDER runs it on a local folder). "
        "`vanilla-transformer push FOLDER --repo-id ID --space SPACE_ID` writes and pushes one.",
    )
    parser.add_argument("--model", required=True, help="the model's Hub repo id (or a local folder, to try it)")
    parser.add_argument("--output", required=True, type=Path, help="a new or empty folder for the Space")
    parser.add_argument("--title", help="the Space's title (default: from the model's name)")
    parser.set_defaults(func=run_space)
    return parser


def run_space(args: argparse.Namespace) -> int:
    import_gradio()
    from .space import write_space

    output = write_space(args.model, args.output, args.title)
    print(f"wrote the Space for {args.model} into {output} (python {output / 'app.py'} runs it here)")
    return 0


def model_name(model: str, card) -> str:
    """What the page calls the model: its card's title, else a Hub id as it is or a folder's own name (never the
    machine's path to it)."""
    if card is not None:
        for line in card.text.splitlines():
            if line.startswith("# ") and line[2:].strip():
                return line[2:].strip()
    return Path(model).resolve().name if Path(model).is_dir() else str(model)


def model_card(model: str):
    """The model's card (huggingface_hub's ModelCard), or None."""
    from huggingface_hub import ModelCard

    # a folder's own card, else the Hub's (ModelCard.load takes a card file or a repo id, not a folder)
    card_file = Path(model) / "README.md"
    try:
        return ModelCard.load(card_file if Path(model).is_dir() else model)
    except Exception:  # noqa: BLE001 - a folder without a card, or an unreachable Hub: none
        return None


def model_examples(card, count: int = 3) -> list[str]:
    """The example sentences the model's card lists (its `widget` entries), if any."""
    widget = (card.data.to_dict().get("widget") or []) if card is not None else []
    return [entry["text"] for entry in widget if isinstance(entry, dict) and entry.get("text")][:count]
