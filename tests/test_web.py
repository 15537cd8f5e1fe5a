"""The page that translates in the browser (`export web`), paragraphs (`common/paragraphs.py`, `translate
--split-sentences`), and the page's static Space: the pinned npm packages are the lock file's; sentencex's Python and
npm packages split alike; a paragraph translates as its sentences do one by one; in headless Chromium the page gives
the tokens of PyTorch's greedy generate() and fetches nothing but its own static files."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from helpers import headless_chromium, serve_folder, tiny_config, tokenizer_ids
from huggingface_hub import CommitInfo, HfApi
from huggingface_hub.hf_api import RepoUrl

from vanilla_transformer import VanillaTransformerForConditionalGeneration
from vanilla_transformer.cli import build_parser, main
from vanilla_transformer.common.model_folder import load_tokenizer
from vanilla_transformer.common.paragraphs import split_paragraph, translate_paragraphs
from vanilla_transformer.inference import load_for_translation, translate
from vanilla_transformer.web import export_web
from vanilla_transformer.web.page import default_node_modules, integrity, pinned_assets

pytest.importorskip("onnxruntime", reason='the page is an ONNX export: pip install ".[onnx]"')
pytest.importorskip("sentencex", reason='paragraphs need ".[paragraphs]"')

REPO = Path(__file__).resolve().parents[1]
SENTENCE = "seven hundred forty-two thousand three hundred fifty-one"
# five sentences, with the spacing and line breaks a paragraph keeps
PARAGRAPH = "forty-two. one hundred and five!\nseven thousand?  nine.\n\ntwelve."
SEGMENTER_CASES = [
    ["en", "A dog runs in the park. Two men play football! Is it raining? Dr. Smith arrived at 5 p.m. today. The end."],
    [
        "de",
        "Ein Hund läuft im Park. Zwei Männer spielen Fußball! Regnet es? Dr. Müller kam um 5 Uhr. Das ist z. B. gut.",
    ],
    ["en", 'She said "Hello there." Then she left.  New line follows.\nSecond line here. And another one.'],
    ["fr", "Le chat dort. M. Dupont est arrivé. C'est fini !"],
    ["cs", "Pes běží. Dva muži hrají fotbal! Prší? Tj. to je vše."],
    ["en", PARAGRAPH],
]


@pytest.fixture(scope="module")
def model_folder(numbers_en_de, tmp_path_factory) -> Path:
    """A small model trained to translate the numbers demo's English into German, with a card naming its languages;
    its tokenizer lowercases and splits punctuation off, which the page's JavaScript tokenizer does as Python does."""
    folder = Path(shutil.copytree(numbers_en_de, tmp_path_factory.mktemp("model") / "numbers"))
    (folder / "README.md").write_text(f"---\nlanguage: [en, de]\nwidget:\n- text: {SENTENCE}\n---\n# numbers\n")
    return folder


def node_modules() -> Path:
    folder = default_node_modules()
    if not (folder / "onnxruntime-web").is_dir() or shutil.which("node") is None:
        pytest.skip(f"the page's npm packages are not in {folder}: run `npm ci` (.ci/run does)")
    return folder


def test_the_pages_packages_are_the_lock_files_and_their_hashes_the_files():
    pinned = pinned_assets()
    package = json.loads((REPO / "package.json").read_text())["dependencies"]
    locked = json.loads((REPO / "package-lock.json").read_text())["packages"]
    assert {name: entry["version"] for name, entry in pinned.items()} == package
    assert all(locked[f"node_modules/{name}"]["version"] == version for name, version in package.items())
    installed = node_modules()
    for name, entry in pinned.items():
        for role in ("module", "wasm"):
            if role in entry:
                file = installed / name / entry[role]["path"]
                assert integrity(file.read_bytes()) == entry[role]["integrity"], file


def test_sentencex_splits_alike_in_python_and_in_javascript(tmp_path):
    import sentencex

    installed = node_modules()
    script = tmp_path / "segment.mjs"
    script.write_text(
        f"import segment from {json.dumps((installed / 'sentencex/dist/esm/index.js').as_uri())};\n"
        "const cases = JSON.parse(process.argv[2]);\n"
        "console.log(JSON.stringify(cases.map(([lang, text]) => Array.from(segment(lang, text)))));\n"
    )
    completed = subprocess.run(
        ["node", str(script), json.dumps(SEGMENTER_CASES)], capture_output=True, text=True, timeout=60
    )
    assert completed.returncode == 0, completed.stderr
    javascript = json.loads(completed.stdout)
    python = [list(sentencex.segment(language, text)) for language, text in SEGMENTER_CASES]
    assert python == javascript
    assert sum(len(sentences) > 2 for sentences in python) >= 5  # real paragraphs, split


def test_a_paragraph_translates_as_its_five_sentences_do_one_by_one(model_folder, tmp_path):
    paragraph = split_paragraph(PARAGRAPH, "en")
    assert len(paragraph.sentences) == 5 and paragraph.join(paragraph.sentences) == PARAGRAPH
    model, tokenizer = load_for_translation(model_folder)
    calls = []

    def translate_sentences(sentences):
        calls.append(list(sentences))
        return translate(model, tokenizer, sentences, num_beams=1)

    (joined,) = translate_paragraphs([PARAGRAPH], "en", translate_sentences)
    assert calls == [list(paragraph.sentences)]  # one batch
    one_by_one = [translate(model, tokenizer, [sentence], num_beams=1)[0] for sentence in paragraph.sentences]
    assert joined == paragraph.join(one_by_one)
    assert joined.count("\n") == 3 and "?  " not in joined  # the paragraph's line breaks; its spaces after each
    assert translate_paragraphs(["", "   "], "en", translate_sentences) == ["", "   "]

    source = tmp_path / "paragraphs.en"
    source.write_text(PARAGRAPH.replace("\n", " ") + "\n\n" + SENTENCE + "\n")
    output = tmp_path / "out.de"
    argv = ["translate", "--model", str(model_folder), "--input", str(source), "--output", str(output)]
    assert main([*argv, "--num-beams", "1", "--split-sentences", "en"]) == 0
    lines = output.read_text().split("\n")
    expected = translate_paragraphs([PARAGRAPH.replace("\n", " ")], "en", translate_sentences)[0]
    assert lines == [expected, "", translate(model, tokenizer, [SENTENCE], num_beams=1)[0], ""]


def onnx_export_of(model_folder: Path, numbers_en_de_onnx: Path, folder: Path) -> Path:
    """The run's ONNX export of `model_folder`'s weights, copied into `folder` with `model_folder`'s card."""
    export = Path(shutil.copytree(numbers_en_de_onnx, folder))
    shutil.copyfile(model_folder / "README.md", export / "README.md")
    return export


@pytest.fixture(scope="module")
def page(model_folder, numbers_en_de_onnx, tmp_path_factory) -> Path:
    """The page of the model's ONNX export with the npm packages copied in (`--offline-assets`), or a skip where
    `npm ci` has not run."""
    node_modules()
    export = onnx_export_of(model_folder, numbers_en_de_onnx, tmp_path_factory.mktemp("export") / "numbers")
    site = tmp_path_factory.mktemp("page") / "site"
    return export_web(export, site, offline_assets=True, title="Numbers, English to German")


def test_the_page_loads_its_packages_from_a_cdn_with_integrity_hashes_unless_offline(page, tmp_path):
    site = export_web(page / "model", tmp_path / "cdn")  # an ONNX export is taken as it is
    index = (site / "index.html").read_text()
    pinned = pinned_assets()
    for name, entry in pinned.items():
        url = f"https://cdn.jsdelivr.net/npm/{name}@{entry['version']}/{entry['module']['path']}"
        assert f'"{url}": "{entry["module"]["integrity"]}"' in index
    assert not (site / "assets").exists()
    wasm = json.loads((site / "translator.json").read_text())["assets"]["wasm"]
    assert wasm["integrity"] == pinned["onnxruntime-web"]["wasm"]["integrity"] and wasm["url"].startswith("https://")
    offline = json.loads((page / "translator.json").read_text())["assets"]["wasm"]["url"]
    assert offline.startswith("./assets/") and (page / offline).is_file()
    assert "cdn" not in (page / "index.html").read_text()
    with pytest.raises(ValueError, match="is an ONNX export already"):
        export_web(page / "model", tmp_path / "again", quantize="int8")


def test_the_page_names_the_cards_languages_and_their_codes_where_it_has_no_names(page, tmp_path):
    def note(site: Path) -> str:
        return (site / "index.html").read_text().split('<p class="note">')[1].split("</p>")[0]

    said = "here, in this browser (ONNX Runtime, WebAssembly): the text you type is not sent anywhere."
    assert note(page) == f"The model translates English to German {said}"
    assert json.loads((page / "translator.json").read_text())["language"] == "en"  # sentencex's rules
    export = Path(shutil.copytree(page / "model", tmp_path / "model"))
    (export / "README.md").write_text("---\nlanguage: [gsw, de-CH]\n---\n# Swiss German\n")
    assert note(export_web(export, tmp_path / "codes")) == f"The model translates gsw to German {said}"
    (export / "README.md").unlink()
    assert note(export_web(export, tmp_path / "no-card")) == f"The model translates {said}"


def requested_urls(driver) -> list[str]:
    """Every URL the browser asked for, from its DevTools network log."""
    urls = []
    for entry in driver.get_log("performance"):
        message = json.loads(entry["message"])["message"]
        if message["method"] == "Network.requestWillBeSent":
            urls.append(message["params"]["request"]["url"])
    return urls


def test_the_page_in_a_browser_translates_as_greedy_generate_and_fetches_only_its_files(model_folder, page, tmp_path):
    """As a person uses it: open the page (served on 127.0.0.1, the packages copied in), type a sentence, press
    Translate; the tokens are PyTorch's greedy generate()'s, and no request went anywhere but the page's own files."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    model, tokenizer = load_for_translation(model_folder)
    inputs = tokenizer([SENTENCE], return_tensors="pt")
    with torch.no_grad():
        expected = model.generate(**inputs, num_beams=1, do_sample=False)[0, 1:].tolist()
    server, port = serve_folder(page)
    driver = headless_chromium("1000,760", network_log=True)
    try:
        driver.get(f"http://127.0.0.1:{port}/")
        wait = WebDriverWait(driver, 120)
        button = driver.find_element(By.ID, "translate")
        wait.until(lambda d: button.is_enabled() or d.execute_script("return window.loadError"))
        assert driver.execute_script("return window.loadError") is None
        box = driver.find_element(By.ID, "source")
        assert box.get_attribute("value") == SENTENCE  # the card's example
        box.clear()
        box.send_keys(SENTENCE)
        button.click()
        wait.until(lambda d: d.find_element(By.ID, "time").text)
        shown = driver.find_element(By.ID, "translation").text
        assert shown == tokenizer.decode(expected, skip_special_tokens=True).strip()
        assert "nothing you typed left the machine" in driver.find_element(By.ID, "time").text
        found = driver.execute_async_script(
            "const done = arguments[arguments.length - 1];"
            "window.translator.generate([arguments[0]]).then((ids) => done(ids[0]));",
            SENTENCE,
        )
        assert found == expected
        # generate()'s minimum length and length limit, as in Python
        shortest = driver.execute_async_script(
            "const done = arguments[arguments.length - 1];"
            "window.translator.page.min_new_tokens = arguments[1];"
            "window.translator.generate([arguments[0]], arguments[1] + 2).then((ids) => done(ids[0]));",
            SENTENCE,
            len(expected) + 3,
        )
        driver.execute_script("window.translator.page.min_new_tokens = 0;")
        with torch.no_grad():
            longer = model.generate(
                **inputs, num_beams=1, min_new_tokens=len(expected) + 3, max_new_tokens=len(expected) + 5
            )
        assert shortest == [token for token in longer[0, 1:].tolist() if token != tokenizer.pad_token_id]
        # a translation that fails in the page is said there, and the page stays usable
        driver.execute_script(
            "window.generate = window.translator.generate;"
            "window.translator.generate = async () => { throw new Error('out of memory'); };"
        )
        button.click()
        wait.until(lambda d: "failed" in d.find_element(By.ID, "time").text)
        assert driver.find_element(By.ID, "time").text == "The translation failed: out of memory"
        assert button.is_enabled()
        driver.execute_script("window.translator.generate = window.generate;")
        # a paragraph in the page is its sentences, as in Python
        paragraph = driver.execute_async_script(
            "const done = arguments[arguments.length - 1];"
            "window.translator.translate(arguments[0]).then((result) => done(result.translation));",
            PARAGRAPH,
        )
        assert (
            paragraph
            == translate_paragraphs(
                [PARAGRAPH], "en", lambda sentences: translate(model, tokenizer, sentences, num_beams=1)
            )[0]
        )
        urls = requested_urls(driver)
        own = f"http://127.0.0.1:{port}/"
        assert urls and all(url.startswith(own) for url in urls), urls
        assert {url.removeprefix(own).split("?")[0] for url in urls} <= {
            "",
            *(path.relative_to(page).as_posix() for path in page.rglob("*") if path.is_file()),
        }
        screenshot = Path(os.environ.get("VANILLA_TRANSFORMER_WEB_SCREENSHOT", tmp_path / "web.png"))
        driver.save_screenshot(str(screenshot))
        assert screenshot.stat().st_size > 10_000
    finally:
        driver.quit()
        server.terminate()
        server.wait(timeout=30)


def test_the_web_benchmark_prints_the_ready_time_the_sentence_time_and_the_sizes(model_folder):
    headless_chromium().quit()  # or a skip, naming what is missing
    node_modules()
    command = [sys.executable, "-m", "benchmarks.web", "--model", str(model_folder), "--sentence", PARAGRAPH,
               "--loads", "1", "--translations", "1"]  # fmt: skip
    completed = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=900)
    assert completed.returncode == 0, completed.stderr[-3000:]
    rows = [line.split(" | ") for line in completed.stdout.splitlines() if line.startswith("| float32") or
            line.startswith("| int8")]  # fmt: skip
    assert [row[0] for row in rows] == ["| float32", "| int8"]
    assert all(float(cell.replace(",", "").rstrip(" |")) > 0 for row in rows for cell in row[1:])
    ratio = float(completed.stdout.split("int8 model files / float32: ")[1].split()[0])
    assert 0 < ratio < 0.6  # at this size the graphs' own bytes weigh against the weights


@pytest.fixture
def hub_calls(monkeypatch):
    """HfApi's network calls replaced by recorders (as tests/test_hub.py does): every repo and commit."""
    calls = {"repos": [], "commits": []}

    def create_repo(self, repo_id, **kwargs):
        calls["repos"].append(dict(repo_id=repo_id, **kwargs))
        return RepoUrl(f"https://huggingface.co/{repo_id}")

    def create_commit(self, repo_id, operations, **kwargs):
        files = {op.path_in_repo: Path(op.path_or_fileobj).read_bytes() for op in operations}
        calls["commits"].append(dict(repo_id=repo_id, files=files))
        return CommitInfo(
            commit_url=f"https://huggingface.co/{repo_id}/commit/abc123",
            commit_message=kwargs["commit_message"],
            commit_description="",
            oid="abc123",
            pr_url=None,
        )

    monkeypatch.setattr(HfApi, "create_repo", create_repo)
    monkeypatch.setattr(HfApi, "create_commit", create_commit)
    return calls


def test_push_with_a_static_space_pushes_the_model_then_the_page(model_folder, hub_calls, capsys):
    parser = build_parser()  # the command line joins hub's push and the web room's Space
    args = parser.parse_args(["push", str(model_folder), "--repo-id", "me/numbers", "--static-space", "me/page",
                              "--static-space-int8", "--token", "hf_x"])  # fmt: skip
    assert args.func(args) == 0
    printed = capsys.readouterr().out.split()
    assert printed == [
        "https://huggingface.co/me/numbers/commit/abc123",
        "https://huggingface.co/me/page/commit/abc123",
    ]
    assert [repo["repo_id"] for repo in hub_calls["repos"]] == ["me/numbers", "me/page"]
    assert hub_calls["repos"][1]["repo_type"] == "space" and hub_calls["repos"][1]["space_sdk"] == "static"
    files = hub_calls["commits"][1]["files"]
    assert {"index.html", "translator.js", "translator.json", "model/model.onnx_data", "README.md"} <= set(files)
    assert b"sdk: static" in files["README.md"] and b"- me/numbers\n" in files["README.md"]
    assert json.loads(files["model/onnx_export.json"])["quantization"] == "int8"

    hub_calls["repos"].clear()
    for flags, said in ((["--static-space", "not a repo"], "is not a Hub repo id"),
                        (["--static-space", "me/p", "--create-pr"], "serves the model's main branch")):  # fmt: skip
        args = parser.parse_args(["push", str(model_folder), "--repo-id", "me/numbers", *flags])
        with pytest.raises(ValueError, match=said):
            args.func(args)
    assert hub_calls["repos"] == []  # refused before the model was pushed


def test_export_web_refuses_a_folder_the_page_would_translate_otherwise_and_fills_an_empty_folder(
    model_folder, numbers_en_de_onnx, tmp_path
):
    marian_like = Path(shutil.copytree(model_folder, tmp_path / "sentencepiece"))
    (marian_like / "tokenizer.json").unlink()
    with pytest.raises(ValueError, match="has no tokenizer.json, which the page's tokenizer"):
        export_web(marian_like, tmp_path / "refused")
    forbidding = Path(shutil.copytree(model_folder, tmp_path / "forbidding"))
    generation = json.loads((forbidding / "generation_config.json").read_text())
    (forbidding / "generation_config.json").write_text(json.dumps({**generation, "bad_words_ids": [[5]]}))
    with pytest.raises(ValueError, match="generation config sets bad_words_ids, which the page's greedy decoding"):
        export_web(forbidding, tmp_path / "refused")
    assert not (tmp_path / "refused").exists()  # refused before anything is written

    (tmp_path / "empty").mkdir()  # an empty folder given as the output is filled
    site = export_web(onnx_export_of(model_folder, numbers_en_de_onnx, tmp_path / "export"), tmp_path / "empty")
    page = json.loads((site / "translator.json").read_text())
    assert page["max_new_tokens"] == generation.get("max_new_tokens") and page["min_new_tokens"] == 0


def test_a_learned_position_table_caps_what_the_page_reads_and_writes(model_folder, tmp_path):
    tokenizer = load_tokenizer(model_folder)
    config = tiny_config(
        **tokenizer_ids(tokenizer),
        position_embedding_type="learned",
        max_position_embeddings=12,
    )
    VanillaTransformerForConditionalGeneration(config).save_pretrained(tmp_path / "model")
    tokenizer.save_pretrained(tmp_path / "model")
    page = json.loads((export_web(tmp_path / "model", tmp_path / "site") / "translator.json").read_text())
    assert page["max_new_tokens"] == 12 and page["max_input_tokens"] == 12
