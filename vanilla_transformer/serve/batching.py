"""Requests that arrive while the model is busy wait in a bounded queue and are translated together: a worker thread
takes the first waiting request, gathers those that arrive within the wait limit up to the batch size, and hands the
lot to `TranslationService.translate_batch` (one generate() call per setting). A request that finds the queue full
is answered at once, "busy, try again", so the queue never grows without end.
"""

from __future__ import annotations

import asyncio
import logging
import queue
import threading
import time
from concurrent.futures import Future

from .service import Settings, Translation, TranslationService

logger = logging.getLogger(__name__)
QUEUE_SIZE = 64  # requests waiting at most; one more is answered "busy, try again"


class Busy(RuntimeError):
    """The queue is full: the service says so at once rather than letting the wait grow."""


class Batcher:
    def __init__(self, service: TranslationService, max_batch_size: int, max_wait_s: float, queue_size: int):
        self.service, self.max_batch_size, self.max_wait_s = service, max_batch_size, max_wait_s
        self.waiting: queue.Queue[tuple[str, Settings, Future]] = queue.Queue(maxsize=queue_size)
        threading.Thread(target=self._work, name="translation-batcher", daemon=True).start()

    def submit(self, text: str, settings: Settings) -> Future:
        """Queue one request; its future holds the translation. A refused request raises `RequestError`, a full
        queue `Busy`, at once."""
        self.service.check(text, settings)  # refused before it takes a place in the queue
        done: Future = Future()
        try:
            self.waiting.put_nowait((text, settings, done))
        except queue.Full:
            raise Busy(f"busy: {self.waiting.maxsize} requests are waiting; try again in a moment") from None
        return done

    async def translate(self, text: str, settings: Settings) -> Translation:
        """The translation of one request, awaited without holding a thread: the web server's worker threads are
        few, and a request waiting for one would sit in an unbounded queue of the server's own."""
        return await asyncio.wrap_future(self.submit(text, settings))

    def _work(self) -> None:
        while True:
            try:
                self._translate_one_batch()
            except Exception:  # noqa: BLE001 - the worker must outlive anything, or every later request would wait
                logger.exception("the translation worker's batch failed")

    def _translate_one_batch(self) -> None:
        batch = [self.waiting.get()]
        deadline = time.monotonic() + self.max_wait_s
        while len(batch) < self.max_batch_size:
            try:
                batch.append(self.waiting.get(timeout=max(deadline - time.monotonic(), 0)))
            except queue.Empty:
                break
        # a request whose caller went away (a closed connection cancels its future) is not translated
        batch = [request for request in batch if request[2].set_running_or_notify_cancel()]
        if not batch:
            return
        try:
            results = self.service.translate_batch([text for text, _, _ in batch], [s for _, s, _ in batch])
        except Exception:  # noqa: BLE001 - one request may be what failed: each alone, so the others are answered
            for text, settings, done in batch:
                try:
                    done.set_result(self.service.translate_batch([text], [settings])[0])
                except Exception as error:  # noqa: BLE001 - told to its own request only
                    done.set_exception(error)
            return
        for (_, _, done), result in zip(batch, results, strict=True):
            done.set_result(result)
