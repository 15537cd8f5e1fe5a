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
import socket
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

from .common import command_line, log, machine_summary

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


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def start_service(args, port: int) -> subprocess.Popen:
    import httpx

    command = [sys.executable, "-m", "vanilla_transformer.cli", "serve", "--model", str(args.model), "--port",
               str(port), "--max-batch-size", str(args.max_batch_size),
               "--max-wait-ms", str(args.max_wait_ms)]  # fmt: skip
    if args.threads:
        command += ["--threads", str(args.threads)]
    service = subprocess.Popen(command, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 300
    while time.time() < deadline:
        if service.poll() is not None:
            sys.exit(f"the service did not start:\n{service.stderr.read()[-3000:]}")
        try:
            httpx.get(f"http://127.0.0.1:{port}/", timeout=5).raise_for_status()
            return service
        except httpx.HTTPError:  # not listening yet
            time.sleep(1)
    service.kill()
    sys.exit("the service did not answer within 300 s")


def gradio_call(client, port: int, endpoint: str, data: list):
    """One call of the page's Gradio API: the answer's data, or an error naming what the service said."""
    response = client.post(f"http://127.0.0.1:{port}/gradio_api/run/{endpoint}", json={"data": data}, timeout=120)
    answer = response.json() if response.headers.get("content-type", "").startswith("application/json") else {}
    if response.status_code != 200 or answer.get("error") or "data" not in answer:
        raise RuntimeError(f"HTTP {response.status_code}: {answer.get('error') or response.text[:200]}")
    return answer["data"]


def request(client, port: int, text: str, args, api: str) -> None:
    """One translation through `api`: "gradio" (the page's Gradio API) or "json" (POST /api/translate)."""
    settings = {"decoding": args.decoding, "num_beams": args.beams}
    if api == "gradio":
        data = [text, args.decoding, args.beams, 1.0, 50, 1.0, "pytorch"]
        translation = gradio_call(client, port, "translate", data)[0]
    else:
        response = client.post(f"http://127.0.0.1:{port}/api/translate", json={"text": text, **settings}, timeout=120)
        if response.status_code != 200:
            raise RuntimeError(f"HTTP {response.status_code}: {response.text[:200]}")
        translation = response.json()["translation"]
    if not translation or translation.startswith("⚠"):
        raise RuntimeError(f"no translation: {translation!r}")


def under_load(args, port: int, clients: int, text: str, api: str) -> dict:
    """`clients` threads, each with its own connection, sending `requests` requests one after another."""
    import httpx

    connections = [httpx.Client() for _ in range(clients)]
    latencies: list[float] = []
    failures: list[str] = []
    stats = connections[0].get(f"http://127.0.0.1:{port}/api/stats").json()

    def client_loop(client) -> None:
        for _ in range(args.requests):
            started = time.perf_counter()
            try:
                request(client, port, text, args, api)
                latencies.append(time.perf_counter() - started)
            except Exception as error:  # noqa: BLE001 - counted and shown
                failures.append(f"{type(error).__name__}: {error}")

    threads = [threading.Thread(target=client_loop, args=(client,)) for client in connections]
    started = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    seconds = time.perf_counter() - started
    after = connections[0].get(f"http://127.0.0.1:{port}/api/stats").json()
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
        import httpx

        rows = []
        for api in args.apis:
            with httpx.Client() as client:
                request(client, port, text, args, api)  # warm-up
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
          "vs one at a time |")  # fmt: skip
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for row in rows:
        print(
            f"| {API_NAMES[row['api']]} | {row['clients']} | {row['requests']} | {row['failures']} | "
            f"{row['per_second']:.1f} | "
            f"{row['p50']:.2f} | {row['p99']:.2f} | {row['mean_batch']:.1f} | {row['per_second'] / baseline:.2f}x |"
        )
    print(f"\none sentence at a time, translate() in one process: {baseline:.1f} sentences/s")
    for row in rows:
        if row["first_failure"]:
            print(f"{API_NAMES[row['api']]}, {row['clients']} clients, first failure: {row['first_failure']}")


if __name__ == "__main__":
    main()
