"""Failing fast without the Hugging Face Hub: huggingface_hub retries an unreachable Hub for about a minute before
transformers or datasets give up, so one short connection attempt comes first, and without an answer only the
local cache is read.

```python
from vanilla_transformer.common.hub_connection import from_pretrained_or_cache, load_dataset_or_cache

# the cached copy when the Hub cannot be reached, else a HubUnreachableError (a ConnectionError) naming the repo
model = from_pretrained_or_cache(AutoModelForSeq2SeqLM, "owner/name", "model")
dataset = load_dataset_or_cache("owner/data", split="train")
```
"""

from __future__ import annotations

import functools
import os
import socket
import threading
import urllib.parse
import urllib.request

from huggingface_hub import constants

HUB_PROBE_TIMEOUT = 3.0
_TRUE = {"1", "on", "yes", "true"}
_CACHE_HINT = "check the network, or set HF_HUB_OFFLINE=1 to use only cached files"


class HubUnreachableError(ConnectionError):
    """The Hugging Face Hub could not be reached for `action` (such as "fetch model owner/name")."""

    def __init__(self, action: str, hint: str = "check the network"):
        self.action = action
        super().__init__(f"cannot reach the Hugging Face Hub ({constants.ENDPOINT}) to {action}: {hint}")


def offline_mode(datasets: bool = False) -> bool:
    """Whether HF_HUB_OFFLINE (or, with `datasets=True`, HF_DATASETS_OFFLINE) is set: the libraries then read only
    their cache and never wait on the network."""
    names = ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE") if datasets else ("HF_HUB_OFFLINE",)
    set_in_environment = any(os.environ.get(name, "").strip().lower() in _TRUE for name in names)
    # huggingface_hub reads HF_HUB_OFFLINE once, at import; a program may also have set its constant since
    return set_in_environment or bool(constants.HF_HUB_OFFLINE)


def hub_reachable(timeout: float = HUB_PROBE_TIMEOUT) -> bool:
    """Whether a TCP connection to the host of the Hub endpoint (HF_ENDPOINT, default https://huggingface.co) opens
    within `timeout` seconds; the answer is kept for the rest of the process. Behind a proxy (HTTPS_PROXY, ALL_PROXY
    and the like) the Hub is assumed reachable: only the proxy knows, and a direct connection may well be blocked."""
    endpoint = urllib.parse.urlsplit(constants.ENDPOINT)
    scheme, host = endpoint.scheme or "https", endpoint.hostname
    if not host:
        return True  # not a URL this probe understands: leave the verdict to the libraries
    proxies = urllib.request.getproxies_environment()
    if (proxies.get(scheme) or proxies.get("all")) and not urllib.request.proxy_bypass_environment(host, proxies):
        return True
    port = endpoint.port or (443 if scheme == "https" else 80)
    return _can_connect(host, port, timeout)


@functools.cache
def _can_connect(host: str, port: int, timeout: float) -> bool:
    outcome: list[bool] = []

    def connect() -> None:
        try:
            socket.create_connection((host, port), timeout=timeout).close()
            outcome.append(True)
        except OSError:
            outcome.append(False)

    # The name lookup ignores the socket timeout (a resolver can stall for many seconds); the thread bounds it too.
    probe = threading.Thread(target=connect, name="hub-probe", daemon=True)
    probe.start()
    probe.join(timeout)
    return bool(outcome and outcome[0])


def from_pretrained_or_cache(loader, repo_id: str, kind: str, **kwargs):
    """`loader.from_pretrained(repo_id, **kwargs)` for a Hub repo id; when the Hub cannot be reached, the copy in the
    local cache, else a `HubUnreachableError` naming `kind` ("model", "tokenizer") and `repo_id` at once."""
    if offline_mode() or hub_reachable():
        return loader.from_pretrained(repo_id, **kwargs)
    cache_only = {**kwargs, "local_files_only": True}
    if _is_auto_model_class(loader):
        # transformers does not hand local_files_only on to its check for a PEFT adapter, which would retry the Hub
        cache_only["adapter_kwargs"] = {**(kwargs.get("adapter_kwargs") or {}), "local_files_only": True}
    try:
        return loader.from_pretrained(repo_id, **cache_only)
    except OSError as error:
        raise HubUnreachableError(f"fetch {kind} {repo_id}, and it is not in the local cache", _CACHE_HINT) from error


def load_dataset_or_cache(dataset_id: str, *args, **kwargs):
    """`datasets.load_dataset(dataset_id, *args, **kwargs)` for a Hub dataset id; when the Hub cannot be reached,
    the copy in the local cache, else a `HubUnreachableError` naming `dataset_id` at once."""
    import datasets

    if offline_mode(datasets=True) or hub_reachable():
        return datasets.load_dataset(dataset_id, *args, **kwargs)
    # load_dataset has no local_files_only: its offline mode, for this call only, makes it read the cache instead
    # (datasets reads the flags on each call; a thread loading at the same time would be offline too)
    flags = [name for name in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE") if hasattr(datasets.config, name)]
    saved = {name: getattr(datasets.config, name) for name in flags}
    try:
        for name in flags:
            setattr(datasets.config, name, True)
        return datasets.load_dataset(dataset_id, *args, **kwargs)
    except ConnectionError as error:  # what datasets raises for a dataset it has not cached
        raise HubUnreachableError(
            f"fetch dataset {dataset_id}, and it is not in the local cache", _CACHE_HINT
        ) from error
    finally:
        for name, value in saved.items():
            setattr(datasets.config, name, value)


def _is_auto_model_class(loader) -> bool:
    from transformers.models.auto.auto_factory import _BaseAutoModelClass

    return isinstance(loader, type) and issubclass(loader, _BaseAutoModelClass)


__all__ = [
    "HUB_PROBE_TIMEOUT",
    "HubUnreachableError",
    "from_pretrained_or_cache",
    "hub_reachable",
    "load_dataset_or_cache",
    "offline_mode",
]
