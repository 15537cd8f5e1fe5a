"""The page's service under load: `vanilla-transformer serve` started on 127.0.0.1, N concurrent clients (threads,
each with its own HTTP connection, POSTing as curl would) sending a bounded number of requests each through the
page's Gradio API (/gradio_api/run/translate) and through its JSON API (/api/translate); printed per API and N:
requests/s, p50 and p99 latency, failed requests and the mean batch size the service translated together, beside
a loop that calls translate() one sentence at a time in one process.

    python -m benchmarks.serve --model outputs/demo                       # the demo model (vanilla-transformer demo)
    python -m benchmarks.serve --model outputs/demo --clients 1 8 32 --requests 20
"""

from __future__ import annotations

import argparse
import http.client
import json
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

from .common import command_line, free_port, log, machine_summary

REPO = Path(__file__).resolve().parents[1]
API_NAMES = {"gradio": "Gradio (/gradio_api/run/translate)", "json": "JSON (/api/translate)"}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--model", type=Path, required=True, help="a trained folder (the demo: vanilla-transformer demo)"
    )
    parser.add_argument("--clients", type=int, nargs="+", default=[1, 8, 32], help="concurrent clients, each a run")
    parser.add_argument("--requests", type=int, default=10, help="requests each client sends, one after another")
    parser.add_argument("--words", type=int, default=20, help="words of the sentence every request sends")
    parser.add_argument("--apis", nargs="+", default=list(API_NAMES), choices=list(API_NAMES), help="the APIs measured")
    parser.add_argument("--decoding", default="greedy", choices=("greedy", "beam"))
    parser.add_argument("--beams", type=int, default=4)
    parser.add_argument("--max-batch-size", type=int, default=16, help="the service's --max-batch-size")
    parser.add_argument("--max-wait-ms", type=float, default=5.0, help="the service's --max-wait-ms")
    parser.add_argument("--threads", type=int, help="the service's --threads (default: its own, every core but one)")
    parser.add_argument("--baseline-sentences", type=int, default=50, help="sentences of the one-at-a-time loop")
    return parser


def sentence(words: int) -> str:
    """Number words of the demo's language, `words` of them (numbers joined, as a long input)."""
    from vanilla_transformer.demo.number_words import english_words

    found: list[str] = []
    value = 777_777
    while len(found) < words:
        found += english_words(value).split()
        value -= 111_111
    return " ".join(found[:words])


def start_service(args, port: int) -> subprocess.Popen:
    command = [sys.executable, "-m", "vanilla_transformer.cli", "serve", "--model", str(args.model), "--port",
               str(port), "--max-batch-size", str(args.max_batch_size),
               "--max-wait-ms", str(args.max_wait_ms)]  # fmt: skip
    if args.threads:
        command += ["--threads", str(args.threads)]
    # read only if it fails: a pipe nobody reads would fill and stall it
    log_file = tempfile.TemporaryFile(mode="w+")  # noqa: SIM115 - open while the service runs
    service = subprocess.Popen(command, cwd=REPO, stdout=subprocess.DEVNULL, stderr=log_file, text=True)
    deadline = time.time() + 300
    while time.time() < deadline:
        if service.poll() is not None:
            log_file.seek(0)
            sys.exit(f"the service did not start:\n{log_file.read()[-3000:]}")
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=5).close()
            return service
        except OSError:  # not listening yet
            time.sleep(1)
    service.kill()
    sys.exit("the service did not answer within 300 s")


class Connection:
    """One client's keep-alive HTTP connection (the standard library's: the clients share the service's cores, and
    httpx spent about 4 ms of CPU a request, as much as the service)."""

    def __init__(self, port: int):
        self.http = http.client.HTTPConnection("127.0.0.1", port, timeout=120)

    def call(self, method: str, path: str, body=None) -> tuple[int, dict]:
        payload = None if body is None else json.dumps(body).encode()
        headers = {"Content-Type": "application/json"} if payload else {}
        self.http.request(method, path, body=payload, headers=headers)
        response = self.http.getresponse()
        content = response.read()
        try:
            return response.status, json.loads(content)
        except ValueError:
            return response.status, {"error": content[:200].decode(errors="replace")}

    def close(self) -> None:
        self.http.close()


def request(connection: Connection, text: str, args, api: str) -> None:
    """One translation through `api`: "gradio" (the page's Gradio API) or "json" (POST /api/translate)."""
    if api == "gradio":
        data = [text, args.decoding, args.beams, 1.0, 50, 1.0, "pytorch"]
        status, answer = connection.call("POST", "/gradio_api/run/translate", {"data": data})
        translation = answer["data"][0] if status == 200 and "data" in answer else None
    else:
        body = {"text": text, "decoding": args.decoding, "num_beams": args.beams}
        status, answer = connection.call("POST", "/api/translate", body)
        translation = answer.get("translation") if status == 200 else None
    if translation is None:
        raise RuntimeError(f"HTTP {status}: {answer.get('error') or answer}")
    if not translation or translation.startswith("⚠"):
        raise RuntimeError(f"no translation: {translation!r}")


def under_load(args, port: int, clients: int, text: str, api: str) -> dict:
    """`clients` threads, each with its own connection, sending `requests` requests one after another."""
    connections = [Connection(port) for _ in range(clients)]
    latencies: list[float] = []
    failures: list[str] = []
    stats = connections[0].call("GET", "/api/stats")[1]

    def client_loop(connection: Connection) -> None:
        for _ in range(args.requests):
            started = time.perf_counter()
            try:
                request(connection, text, args, api)
                latencies.append(time.perf_counter() - started)
            except Exception as error:  # noqa: BLE001 - counted and shown
                failures.append(f"{type(error).__name__}: {error}")

    threads = [threading.Thread(target=client_loop, args=(connection,)) for connection in connections]
    started, cpu = time.perf_counter(), time.process_time()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    seconds, cpu = time.perf_counter() - started, time.process_time() - cpu
    after = connections[0].call("GET", "/api/stats")[1]
    for connection in connections:
        connection.close()
    batches = after["batches"] - stats["batches"]
    ordered = sorted(latencies)
    return {
        "api": api,
        "clients": clients,
        "requests": clients * args.requests,
        "failures": len(failures),
        "first_failure": failures[0] if failures else "",
        "per_second": len(latencies) / seconds,
        "p50": statistics.median(ordered) if ordered else float("nan"),
        "p99": ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))] if ordered else float("nan"),
        "mean_batch": (after["requests"] - stats["requests"]) / max(batches, 1),
        "client_cpu_ms": 1000 * cpu / max(clients * args.requests, 1),
    }


def one_at_a_time(args, text: str) -> float:
    """Sentences/s of translate() called with one sentence at a time, the same model and decoding, in one process."""
    from vanilla_transformer.inference import load_for_translation, translate

    model, tokenizer = load_for_translation(args.model, device="cpu")
    beams = args.beams if args.decoding == "beam" else 1
    translate(model, tokenizer, [text], num_beams=beams)  # warm-up
    started = time.perf_counter()
    for _ in range(args.baseline_sentences):
        translate(model, tokenizer, [text], num_beams=beams)
    return args.baseline_sentences / (time.perf_counter() - started)


def main(argv: list[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    text = sentence(args.words)
    log(f"one sentence at a time: {args.baseline_sentences} sentences of {args.words} words")
    baseline = one_at_a_time(args, text)
    port = free_port()
    service = start_service(args, port)
    try:
        rows = []
        for api in args.apis:
            warm_up = Connection(port)
            request(warm_up, text, args, api)
            warm_up.close()
            for clients in args.clients:
                log(f"{API_NAMES[api]}: {clients} clients x {args.requests} requests")
                rows.append(under_load(args, port, clients, text, api))
    finally:
        service.terminate()
        service.wait(timeout=60)
    import torch

    from vanilla_transformer.serve import default_threads

    decoding = "greedy" if args.decoding == "greedy" else f"beam {args.beams}"
    print(f"\n{command_line()}\n{machine_summary()}, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}")
    threads = f"{args.threads or default_threads()} in the service, {torch.get_num_threads()} in the loop"
    print(f"model {args.model}; every request: a {args.words}-word sentence, {decoding}; service batches of at most "
          f"{args.max_batch_size}, waiting {args.max_wait_ms:g} ms at most for a batch to fill; the model's torch "
          f"threads: {threads}\n")  # fmt: skip
    print("| API | clients | requests | failed | requests/s | p50 latency (s) | p99 latency (s) | mean batch | "
          "clients' CPU a request (ms) | vs one at a time |")  # fmt: skip
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for row in rows:
        print(
            f"| {API_NAMES[row['api']]} | {row['clients']} | {row['requests']} | {row['failures']} | "
            f"{row['per_second']:.1f} | "
            f"{row['p50']:.2f} | {row['p99']:.2f} | {row['mean_batch']:.1f} | {row['client_cpu_ms']:.1f} | "
            f"{row['per_second'] / baseline:.2f}x |"
        )
    print(f"\none sentence at a time, translate() in one process: {baseline:.1f} sentences/s")
    for row in rows:
        if row["first_failure"]:
            print(f"{API_NAMES[row['api']]}, {row['clients']} clients, first failure: {row['first_failure']}")


if __name__ == "__main__":
    main()
