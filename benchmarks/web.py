"""The page of `export web` in headless Chromium: how long it takes to be ready to translate after it is opened, how
long a 20-word sentence takes once it is loaded (onnxruntime-web, WebAssembly, one thread), and the model files'
size, float32 against int8. The pages are served by `python -m http.server` on 127.0.0.1 with their packages copied
in (--offline-assets, so that no CDN's latency enters the figures).

    python -m benchmarks.web --model outputs/multi30k_en_de      # needs `npm ci`, chromium and chromedriver

Goals (issue 53): a 20-word sentence in at most 60 ms once loaded; ready within 1.5 s of opening; the int8 page's
model files at most 0.3x the float32 ones.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

from vanilla_transformer.tokenization import iter_lines
from vanilla_transformer.web import export_web

from .common import command_line, log, machine_summary, serve_folder

DATA = Path(__file__).resolve().parents[2] / "shared" / "data" / "multi30k"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", required=True, help="a trained translation model folder")
    parser.add_argument("--sentence", help="the sentence to translate (default: the first 20-word one of --data)")
    parser.add_argument("--data", type=Path, default=DATA / "test_2016_flickr.en.gz")
    parser.add_argument("--loads", type=int, default=5, help="times each page is opened (median taken)")
    parser.add_argument("--translations", type=int, default=10, help="timed translations a load (median taken)")
    return parser


def twenty_words(path: Path) -> str:
    lines = list(iter_lines(path))
    found = next((line for line in lines if len(line.split()) == 20), None)
    return found or " ".join(" ".join(lines).split()[:20])


def browser():
    from selenium import webdriver
    from selenium.webdriver.chrome.options import Options
    from selenium.webdriver.chrome.service import Service

    options = Options()
    options.binary_location = "/usr/bin/chromium"
    for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-sync",
                 "--disable-background-networking", "--disable-component-update"):  # fmt: skip
        options.add_argument(flag)
    return webdriver.Chrome(service=Service("/usr/bin/chromedriver"), options=options)


def measure(folder: Path, sentence: str, loads: int, translations: int) -> tuple[list[float], list[float], int]:
    """(ready ms of each load, ms of each timed translation, the new tokens of the translation)."""
    server, port = serve_folder(folder)
    ready, translating, tokens = [], [], 0
    try:
        for _ in range(loads):
            driver = browser()  # a fresh browser each time: nothing cached from the load before
            try:
                driver.get(f"http://127.0.0.1:{port}/")
                for _ in range(1200):
                    state = driver.execute_script("return [window.readyMilliseconds, window.loadError]")
                    if state[0] or state[1]:
                        break
                    time.sleep(0.05)
                if not state[0]:
                    raise RuntimeError(f"the page did not load: {state[1]}")
                ready.append(state[0])
                script = (
                    "const done = arguments[arguments.length - 1];"
                    "window.translator.translate(arguments[0]).then((r) => done([r.milliseconds, "
                    "r.ids.reduce((sum, row) => sum + row.length, 0)]));"
                )
                tokens = driver.execute_async_script(script, sentence)[1]  # warm-up
                translating += [driver.execute_async_script(script, sentence)[0] for _ in range(translations)]
            finally:
                driver.quit()
    finally:
        server.terminate()
        server.wait(timeout=30)
    return ready, translating, tokens


def main(argv: list[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    sentence = args.sentence or twenty_words(args.data)
    rows, sizes = [], {}
    with tempfile.TemporaryDirectory() as scratch:
        for name, quantize in (("float32", None), ("int8", "int8")):
            log(f"export web {name} ...")
            folder = export_web(args.model, Path(scratch) / name, quantize=quantize, offline_assets=True)
            sizes[name] = sum(path.stat().st_size for path in (folder / "model").glob("*.onnx*"))
            log(f"{name}: {args.loads} loads ...")
            ready, translating, tokens = measure(folder, sentence, args.loads, args.translations)
            rows.append((name, sizes[name], statistics.median(ready), statistics.median(translating), tokens))
    print(f"### The page of `export web` in headless Chromium: {Path(args.model).name}")
    print(f"\n- Date: {time.strftime('%Y-%m-%d %H:%M %Z')}; machine: {machine_summary()}")
    print(f"- Command: `{command_line()}`")
    print(f"- Sentence ({len(sentence.split())} words): {json.dumps(sentence, ensure_ascii=False)}")
    print(f"- Median of {args.loads} loads (a fresh browser each) and of {args.translations} translations a load\n")
    print("| page | model files (MiB) | ready after opening (ms) | 20-word sentence (ms) | new tokens |")
    print("|---|---:|---:|---:|---:|")
    for name, size, ready, translating, tokens in rows:
        print(f"| {name} | {size / 2**20:.1f} | {ready:,.0f} | {translating:,.1f} | {tokens} |")
    print(f"\n- int8 model files / float32: {sizes['int8'] / sizes['float32']:.3f} (goal: at most 0.3); goals: ready "
          "within 1,500 ms, a 20-word sentence in at most 60 ms")  # fmt: skip


if __name__ == "__main__":
    main()
