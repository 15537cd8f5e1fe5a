"""The page and its APIs started together on one server: Gradio's page and API (`/gradio_api/...`), and a plain JSON
API beside them (`POST /api/translate`, `GET /api/stats`) that skips Gradio's per-request event machinery, for
programs that call the service many times a second. Both go through the same `Batcher`, so requests from the page, its
Gradio API and the JSON API are translated together and share one bounded queue.
"""

from __future__ import annotations

import dataclasses
import errno
import json
import logging
import os
import socket

from fastapi import Request
from fastapi.responses import JSONResponse

from .access import Access
from .batching import QUEUE_SIZE, Batcher, Busy
from .page import build_page
from .service import RequestError, Settings, TranslationService

logger = logging.getLogger(__name__)
SETTING_NAMES = {field.name for field in dataclasses.fields(Settings)}
DEFAULTS = Settings()
TYPE_NAMES = {int: "an integer", float: "a number", str: "a string", bool: "true or false"}
JSON_KINDS = {list: "array", str: "string", int: "number", float: "number", bool: "boolean", type(None): "null"}


def start_server(
    service: TranslationService,
    examples: list[str],
    title: str,
    host: str | None = None,
    port: int | None = None,
    share: bool = False,
    queue_size: int = QUEUE_SIZE,
    block: bool = True,
    access: Access | None = None,
):
    """Build and launch the page, add the JSON API; serve until interrupted when `block`, else return the page (its
    `close()` stops it). `access`: who may use it (everyone, by default)."""
    access = access or Access()
    limits = service.limits
    batcher = Batcher(service, limits.max_batch_size, limits.max_wait_ms / 1000, queue_size)
    page = build_page(service, batcher, examples, title, queue_size)
    try:
        app, _, _ = page.launch(
            server_name=host,
            server_port=port,
            share=share,
            show_error=True,
            prevent_thread_lock=True,
            auth=list(access.logins) or None,
        )
    except OSError as error:
        if "Cannot find empty port" not in str(error):
            raise
        # Gradio's message names its own launch() argument: said in the flags' words
        address = listening_address(host, port)
        raise OSError(why_not_listening(*address) or f"cannot listen on {address[0]}:{address[1]}") from None
    add_json_api(app, service, batcher, access)
    if block:
        page.block_thread()
    return page


def listening_address(host: str | None, port: int | None) -> tuple[str, int]:
    """Where the page listens: `host` and `port`, else Gradio's variables (a Space sets them), else 127.0.0.1:7860."""
    return host or os.environ.get("GRADIO_SERVER_NAME", "127.0.0.1"), int(
        port or os.environ.get("GRADIO_SERVER_PORT", 7860)
    )


def why_not_listening(host: str, port: int) -> str | None:
    """Why the web server cannot listen on host:port, in the flags' words, or None when it can."""
    try:
        address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
    except socket.gaierror as error:
        return f"--host {host}: no such address ({error.strerror})"
    with socket.socket(address[0], socket.SOCK_STREAM) as probe:
        # as uvicorn binds: a port left in TIME_WAIT by a server just stopped is free to it
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(address[4])
        except OSError as error:
            if error.errno == errno.EADDRINUSE:
                return f"port {port} of {host} is in use: pass another --port"
            if error.errno == errno.EADDRNOTAVAIL:
                return f"--host {host} is no address of this machine: give one of its own (0.0.0.0: every interface)"
            return f"cannot listen on {host}:{port} ({error.strerror}): pass another --host or --port"
    return None


def add_json_api(app, service: TranslationService, batcher: Batcher, access: Access | None = None) -> None:
    access = access or Access()

    def refused(request: Request) -> JSONResponse | None:
        if access.allows(request.headers.get("authorization")):
            return None
        return JSONResponse({"error": access.refusal()}, 401, headers={"WWW-Authenticate": access.challenge()})

    async def translate(request: Request) -> JSONResponse:
        """{"text": ..., and any of Settings' fields} -> {"translation", "tokens", "probabilities"}. A body that is
        no JSON object is 400; a refused request 422, naming the field and what it may be; a full queue 503; a
        translation that fails 500 with one line saying what failed (the log has the traceback)."""
        denied = refused(request)
        if denied is not None:
            return denied
        body = await read_json_object(request, max_body_bytes(service))
        if isinstance(body, JSONResponse):
            return body
        allowed = ", ".join(["text", *sorted(SETTING_NAMES)])
        unknown = sorted(set(body) - SETTING_NAMES - {"text"})
        if unknown:
            named = ", ".join(repr(name) for name in unknown)
            return JSONResponse({"error": f"unknown field {named}: a request takes {allowed}"}, 422)
        if not isinstance(body.get("text"), str):
            missing = "is missing" if "text" not in body else f"must be a string, not {type(body['text']).__name__}"
            return JSONResponse({"error": f"'text' {missing}: a request takes {allowed}"}, 422)
        values = {"engine": service.default_engine}
        for name, value in body.items():
            kind = type(getattr(DEFAULTS, name, ""))
            if kind is float and type(value) is int:
                try:
                    value = float(value)
                except OverflowError:
                    return JSONResponse({"error": f"{name}={value} is too large"}, 422)
            if type(value) is not kind:
                return JSONResponse({"error": f"{name}={value!r} must be {TYPE_NAMES[kind]}"}, 422)
            values[name] = value
        try:
            translation = await batcher.translate(values.pop("text"), Settings(**values))
        except RequestError as error:
            return JSONResponse({"error": str(error)}, 422)
        except Busy as error:
            return JSONResponse({"error": str(error)}, 503)
        except Exception as error:  # noqa: BLE001 - the model failed on this request: said in one line, logged whole
            logger.exception("a request of the JSON API failed in translation")
            said = " ".join(str(error).split()) or type(error).__name__
            return JSONResponse({"error": f"the translation failed: {type(error).__name__}: {said}"}, 500)
        return JSONResponse(
            {
                "translation": translation.text,
                "tokens": translation.tokens,
                "probabilities": translation.probabilities,
            }
        )

    async def stats(request: Request) -> JSONResponse:
        return refused(request) or JSONResponse(service.stats())

    app.add_api_route("/api/translate", translate, methods=["POST"])
    app.add_api_route("/api/stats", stats, methods=["GET"])


def max_body_bytes(service: TranslationService) -> int:
    """The most of a body that is read: the longest text the service takes, each character escaped as JSON may
    (\\uXXXX), with the settings; at least a megabyte, so that a text somewhat too long is still read and told the
    limit it broke."""
    return max(2**20, 6 * service.limits.max_characters + 4096)


async def read_json_object(request: Request, max_bytes: int) -> dict | JSONResponse:
    """The request's body as a JSON object, whatever content type it was sent with (`curl -d` says form data), or
    the answer that says why it is not one: 413 beyond `max_bytes` (read no further), 400 when it is no JSON."""
    raw = bytearray()
    async for part in request.stream():
        raw += part
        if len(raw) > max_bytes:
            return JSONResponse({"error": f"the body is over {max_bytes:,} bytes, more than any request needs"}, 413)
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as error:
        return JSONResponse({"error": f"the body is not UTF-8 (byte {error.start}): send JSON in UTF-8"}, 400)
    try:
        body = json.loads(text)
    except ValueError as error:
        return JSONResponse({"error": f"the body is not JSON ({error}): send a JSON object"}, 400)
    except RecursionError:
        return JSONResponse({"error": "the body nests JSON too deep: send a JSON object of text and settings"}, 400)
    if not isinstance(body, dict):
        kind = JSON_KINDS.get(type(body), type(body).__name__)
        return JSONResponse({"error": f"the body is a JSON {kind}, not an object with a 'text'"}, 422)
    return body
