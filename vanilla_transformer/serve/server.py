"""The page and its APIs started together on one server: Gradio's page and API (`/gradio_api/...`), and a plain JSON
API beside them (`POST /api/translate`, `GET /api/stats`) that skips Gradio's per-request event machinery, for
programs that call the service many times a second. Both go through the same `Batcher`, so requests from the page, its
Gradio API and the JSON API are translated together and share one bounded queue.
"""

from __future__ import annotations

import dataclasses

from fastapi.responses import JSONResponse

from .batching import QUEUE_SIZE, Batcher, Busy
from .page import build_page
from .service import RequestError, Settings, TranslationService

SETTING_NAMES = {field.name for field in dataclasses.fields(Settings)}
DEFAULTS = Settings()


def start_server(
    service: TranslationService,
    examples: list[str],
    title: str,
    host: str | None = None,
    port: int | None = None,
    share: bool = False,
    queue_size: int = QUEUE_SIZE,
    block: bool = True,
):
    """Build and launch the page, add the JSON API; serve until interrupted when `block`, else return the page (its
    `close()` stops it)."""
    limits = service.limits
    batcher = Batcher(service, limits.max_batch_size, limits.max_wait_ms / 1000, queue_size)
    page = build_page(service, batcher, examples, title, queue_size)
    app, _, _ = page.launch(server_name=host, server_port=port, share=share, show_error=True, prevent_thread_lock=True)
    add_json_api(app, service, batcher)
    if block:
        page.block_thread()
    return page


def add_json_api(app, service: TranslationService, batcher: Batcher) -> None:
    async def translate(body: dict) -> JSONResponse:
        """{"text": ..., and any of Settings' fields} -> {"translation", "tokens", "probabilities"}; a refused request
        is 422 with the limit named, a full queue 503."""
        unknown = set(body) - SETTING_NAMES - {"text"}
        if unknown or not isinstance(body.get("text"), str):
            allowed = ", ".join(["text", *sorted(SETTING_NAMES)])
            return JSONResponse({"error": f"a request is a JSON object with a string 'text' and of {allowed}"}, 422)
        values = {}
        for name, value in body.items():
            kind = type(getattr(DEFAULTS, name, ""))
            if kind is float and type(value) is int:
                try:
                    value = float(value)
                except OverflowError:
                    return JSONResponse({"error": f"{name}={value} is too large"}, 422)
            if type(value) is not kind:
                return JSONResponse({"error": f"{name}={value!r} must be a {kind.__name__}"}, 422)
            values[name] = value
        try:
            translation = await batcher.translate(values.pop("text"), Settings(**values))
        except RequestError as error:
            return JSONResponse({"error": str(error)}, 422)
        except Busy as error:
            return JSONResponse({"error": str(error)}, 503)
        return JSONResponse(
            {
                "translation": translation.text,
                "tokens": translation.tokens,
                "probabilities": translation.probabilities,
            }
        )

    app.add_api_route("/api/translate", translate, methods=["POST"])
    app.add_api_route("/api/stats", service.stats, methods=["GET"])
