"""`vanilla-transformer serve`: the service (batching, limits, token probabilities), the page's API through
gradio_client, bad input that never takes the service down, a model that fails to load, the Space folder run as an
app, and the page in a real browser (headless Chromium driven by Selenium)."""

import json
import os
import shutil
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import torch
import yaml
from helpers import free_port, headless_chromium

from vanilla_transformer.cli import main
from vanilla_transformer.serve.service import Limits, RequestError, Settings, Translation, TranslationService

REPO = Path(__file__).resolve().parents[1]
SENTENCE = "seven hundred forty-two thousand three hundred fifty-one"
QUEUE_SIZE = 4  # the served page's queue


@pytest.fixture(scope="module")
def model_folder(numbers_en_de, tmp_path_factory) -> Path:
    """A small model trained to translate the numbers demo's English into German, with a card with examples."""
    folder = Path(shutil.copytree(numbers_en_de, tmp_path_factory.mktemp("model") / "numbers"))
    (folder / "README.md").write_text("---\nwidget:\n- text: forty-two\n- text: one hundred\n---\n# a test model\n")
    return folder


@pytest.fixture(scope="module")
def service(model_folder) -> TranslationService:
    return TranslationService(model_folder, Limits(max_words=50, max_beams=6, max_batch_size=8))


def test_requests_that_arrive_together_are_one_generate_call_per_setting(service, monkeypatch):
    calls = []
    generate = service.model.generate
    monkeypatch.setattr(service.model, "generate", lambda **kw: calls.append(len(kw["input_ids"])) or generate(**kw))
    texts = ["forty-two", "", "one hundred", "seven", "   ", "nine thousand"]
    settings = [
        Settings("greedy"),
        Settings(),
        Settings("greedy"),
        Settings("beam", 3),
        Settings(),
        Settings("beam", 3),
    ]
    results = service.translate_batch(texts, settings)
    assert sorted(calls) == [2, 2]  # greedy: two sentences, beam 3: two; the blank ones never reach the model
    assert [result.text for result in results][1] == "" and results[4].text == ""
    alone = [service.translate_batch([text], [setting])[0] for text, setting in zip(texts, settings, strict=True)]
    assert [r.text for r in results] == [r.text for r in alone]  # a batch changes no translation
    for result in (results[0], results[3]):
        assert result.tokens[-1] == "</s>" and len(result.tokens) == len(result.probabilities)
        assert all(0 < p <= 1 for p in result.probabilities)
    # greedy's probabilities are those of a teacher-forced pass over the translation
    model, tokenizer = service.model, service.tokenizer
    generated = tokenizer.convert_tokens_to_ids(results[0].tokens)
    decoder_input_ids = torch.tensor([[model.config.decoder_start_token_id, *generated[:-1]]])
    with torch.no_grad():
        logits = model(input_ids=tokenizer([texts[0]], return_tensors="pt")["input_ids"],
                       decoder_input_ids=decoder_input_ids).logits[0]  # fmt: skip
    expected = logits.softmax(-1)[torch.arange(len(generated)), generated]
    torch.testing.assert_close(torch.tensor(results[0].probabilities), expected, rtol=1e-4, atol=1e-6)
    sampled = [service.translate_batch(["forty-two"], [Settings("sampling", seed=3)])[0].text for _ in range(2)]
    assert sampled[0] == sampled[1]  # the same request, the same sample


def test_a_ctranslate2_export_is_served_with_its_tokens_probabilities(model_folder, tmp_path):
    pytest.importorskip("ctranslate2", reason='the CTranslate2 engine is optional: pip install ".[ct2]"')
    from vanilla_transformer.export import export_ctranslate2

    exported = TranslationService(export_ctranslate2(model_folder, tmp_path / "ct2"))
    assert list(exported.engines) == ["ctranslate2"] and exported.model is None
    (result,) = exported.translate_batch([SENTENCE], [Settings("greedy", engine="ctranslate2")])
    (ours,) = TranslationService(model_folder).translate_batch([SENTENCE], [Settings("greedy")])
    assert result.tokens == ours.tokens  # the export translates as the model does, cut at the same length
    torch.testing.assert_close(result.probabilities, ours.probabilities, rtol=1e-3, atol=1e-5)
    with pytest.raises(RequestError, match="sampling is not served with CTranslate2: choose another engine"):
        exported.translate_batch([SENTENCE], [Settings("sampling", engine="ctranslate2")])

    pytest.importorskip("gradio", reason='the page needs ".[serve]"')
    from gradio_client import Client

    from vanilla_transformer.serve.server import start_server

    port = free_port()
    page = start_server(exported, [], "export", "127.0.0.1", port, block=False)
    try:  # the page serves the export's translations; the pictures, which need the PyTorch model, are left out
        client = Client(f"http://127.0.0.1:{port}/", verbose=False)
        assert translate_call(client, SENTENCE, engine="ctranslate2")[0] == result.text
        assert set(client.view_api(print_info=False, return_format="dict")["named_endpoints"]) == {
            "/translate",
            "/stats",
        }
    finally:
        page.close()


def test_the_int8_engine_translates_as_translate_quantize_int8_does(model_folder):
    from vanilla_transformer.inference import load_for_translation, translate

    service = TranslationService(model_folder)
    service.add_int8()
    assert list(service.engines) == ["pytorch", "int8"]
    (result,) = service.translate_batch([SENTENCE], [Settings("beam", 3, engine="int8")])
    model, tokenizer = load_for_translation(model_folder, device="cpu", quantize="int8")
    assert result.text == translate(model, tokenizer, [SENTENCE], num_beams=3)[0]


@pytest.mark.parametrize(
    "text, settings, named",
    [
        ("word " * 10_000, Settings(), "the text has 10,000 words; this service translates at most 50"),
        ("go. " * 40, Settings(), "the text has 40 sentences; this service translates at most 32 a request"),
        ("forty-two", Settings("beam", 0), "num_beams=0 is outside 1 to 6"),
        ("forty-two", Settings("beam", 1000), "num_beams=1000 is outside 1 to 6"),
        ("forty-two", Settings(engine="ctranslate2"), "engine 'ctranslate2' is not served here"),
        ("forty-two", Settings("sampling", temperature=0), "temperature=0 is outside 0.01 to 10"),
        ("forty-two", Settings("sampling", top_p=0.0), r"top_p=0.0 is outside 0 \(excluded\) to 1"),
        ("forty-two", Settings("sampling", top_k=-1), "top_k=-1 is outside 0 to 10000"),
        ("forty-two", Settings("nucleus"), "decoding 'nucleus' is not one of"),
    ],
)
def test_a_request_beyond_the_limits_is_refused_naming_the_limit(service, text, settings, named):
    with pytest.raises(RequestError, match=named):
        service.translate_batch([text], [settings])


def test_text_of_any_kind_is_translated_as_text(service):
    odd = ["🙂🙂 שלום עולם مرحبا بالعالم", "<script>alert(1)</script>", "a\tb\nc", "\u200b", "x" * 400]
    results = service.translate_batch(odd, [Settings("greedy")] * len(odd))
    assert all(result.tokens and len(result.tokens) == len(result.probabilities) for result in results)


@pytest.fixture(scope="module")
def served(service):
    """The page of `service`, listening on 127.0.0.1, and a gradio_client on it."""
    pytest.importorskip("gradio", reason='the page needs ".[serve]"')
    from gradio_client import Client

    from vanilla_transformer.serve.server import start_server

    port = free_port()
    page = start_server(service, ["forty-two"], "test", "127.0.0.1", port, queue_size=QUEUE_SIZE, block=False)
    yield page, Client(f"http://127.0.0.1:{port}/", verbose=False), port
    page.close()


def translate_call(client, text, decoding="greedy", beams=2, engine="pytorch"):
    return client.predict(text, decoding, beams, 1.0, 50, 1.0, engine, api_name="/translate")


def test_the_api_translates_with_token_probabilities_and_draws_the_attention(served, service):
    _, client, _ = served
    text, tokens = translate_call(client, SENTENCE, "beam", 3)
    assert text == service.translate_batch([SENTENCE], [Settings("beam", 3)])[0].text
    expected = service.translate_batch([SENTENCE], [Settings("beam", 3)])[0]
    assert [entry["token"] for entry in tokens] == expected.tokens
    assert [entry["class_or_confidence"] for entry in tokens] == [f"{p:.0%}" for p in expected.probabilities]
    pictures = client.predict(SENTENCE, text, "encoder", "1", "2", api_name="/inspect")
    assert len(pictures) == 5 and all(picture["type"] == "matplotlib" for picture in pictures)


def test_bad_input_through_the_api_gets_an_answer_and_the_service_stays_up(served):
    from gradio_client.exceptions import AppError

    _, client, _ = served
    assert translate_call(client, "")[0] == "" and translate_call(client, "    ")[0] == ""
    assert "at most 50" in translate_call(client, "word " * 10_000)[0]  # the cap named in the answer
    for odd in ("🙂 שלום مرحبا", "<b>x</b><script>alert(1)</script>"):
        translation, tokens = translate_call(client, odd)
        assert not translation.startswith("⚠") and tokens  # translated, as text
    for beams in (0, 1000):  # the control's own limits refuse them
        with pytest.raises(AppError, match="(less|greater) than (minimum|maximum) value"):
            translate_call(client, "forty-two", "beam", beams)
    assert translate_call(client, "forty-two")[0] is not None  # still serving


def json_call(port: int, body, method: str = "post"):
    import httpx

    url = f"http://127.0.0.1:{port}/api/translate"
    content = json.dumps(body)  # ASCII: a lone surrogate travels as the escape JSON allows
    headers = {"Content-Type": "application/json"}
    response = httpx.request(method.upper(), url, content=content, headers=headers, timeout=120)
    return response.status_code, response.json()


def test_the_json_api_translates_as_the_service_does_and_refuses_bad_requests_naming_why(served, service):
    _, _, port = served
    status, answer = json_call(port, {"text": SENTENCE, "decoding": "beam", "num_beams": 3})
    expected = service.translate_batch([SENTENCE], [Settings("beam", 3)])[0]
    assert status == 200 and answer["translation"] == expected.text and answer["tokens"] == expected.tokens
    assert answer["probabilities"] == pytest.approx(expected.probabilities)
    assert json_call(port, {"text": "   "}) == (200, {"translation": "", "tokens": [], "probabilities": []})
    refused = [
        ({"text": "word " * 10_000}, "the text has 10,000 words; this service translates at most 50"),
        ({"text": "forty-two", "decoding": "beam", "num_beams": 1000}, "num_beams=1000 is outside 1 to 6"),
        ({"text": "forty-two", "num_beams": "four"}, "num_beams='four' must be an integer"),
        ({"text": "forty-two", "engine": "tensorrt"}, "engine 'tensorrt' is not served here"),
        ({"decoding": "greedy"}, "'text' is missing: a request takes text, decoding, engine, num_beams, seed"),
        ({"text": 42}, "'text' must be a string, not int"),
        ({"text": "x" * 100_000}, "the text has 100,000 characters; this service translates at most 1,500"),
        ({"text": "forty-two", "seed": 2**70}, f"seed={2**70} is outside 0 to 2**63 - 1"),
        ({"text": "forty-two", "decoding": "sampling", "temperature": 10**400}, "temperature=1000"),
    ]
    for body, named in refused:
        status, answer = json_call(port, body)
        assert status == 422 and answer["error"].startswith(named), (body, answer)
    assert json_call(port, ["forty-two"])[0] == 422  # not an object
    assert json_call(port, {"text": "forty-two"})[0] == 200  # still serving


def test_requests_that_wait_together_are_translated_together_from_both_apis(served, service):
    from gradio_client import Client

    _, _, port = served
    answers = []
    clients = [Client(f"http://127.0.0.1:{port}/", verbose=False) for _ in range(2)]
    calls = [lambda: json_call(port, {"text": SENTENCE})[1]["translation"]] * 3 + [
        lambda client=client: translate_call(client, SENTENCE)[0] for client in clients
    ]
    threads = [threading.Thread(target=lambda call=call: answers.append(call())) for call in calls]
    service.batch_sizes.clear()
    with service.lock:  # the model is busy: the five requests wait
        for thread in threads:
            thread.start()
        time.sleep(3)
    for thread in threads:
        thread.join()
    expected = service.translate_batch([SENTENCE], [Settings("greedy")])[0].text
    assert answers == [expected] * 5 and sum(service.batch_sizes[:-1]) == 5
    assert max(service.batch_sizes[:-1]) > 1  # those that waited went through one call


def test_a_cancelled_request_is_skipped_and_a_failing_one_fails_alone(service, monkeypatch):
    import asyncio

    from vanilla_transformer.serve.batching import Batcher

    batcher = Batcher(service, max_batch_size=8, max_wait_s=0.005, queue_size=8)
    translate_batch = service.translate_batch

    def failing_on_boom(texts, settings):
        if "boom" in texts:
            raise RuntimeError("boom")
        return translate_batch(texts, settings)

    monkeypatch.setattr(service, "translate_batch", failing_on_boom)
    with service.lock:  # the worker waits: a caller gives up, another sends what fails
        gone = batcher.submit(SENTENCE, Settings())
        failing = batcher.submit("boom", Settings())
        good = batcher.submit("forty-two", Settings())
        assert gone.cancel()
    with pytest.raises(RuntimeError, match="boom"):
        failing.result(timeout=60)
    assert good.result(timeout=60).text == translate_batch(["forty-two"], [Settings()])[0].text
    assert asyncio.run(batcher.translate("forty-two", Settings())).text  # the worker lives on


def test_a_full_queue_answers_busy_at_once_and_every_waiting_request_is_translated(service):
    pytest.importorskip("gradio", reason='the page needs ".[serve]"')
    from gradio_client import Client
    from gradio_client.exceptions import AppError

    from vanilla_transformer.serve.server import start_server

    # a queue longer than the web server's worker threads (40): a waiting request must hold none, or those beyond
    # the threads would wait in the server's own unbounded queue instead of hearing "busy"
    port, queue_size, requests = free_port(), 48, 70
    page = start_server(service, [], "busy", "127.0.0.1", port, queue_size=queue_size, block=False)
    client = Client(f"http://127.0.0.1:{port}/", verbose=False)
    statuses = []

    def one_request():
        statuses.append(json_call(port, {"text": SENTENCE})[0])

    threads = [threading.Thread(target=one_request) for _ in range(requests)]
    try:
        with service.lock:  # the model is busy: the worker holds a batch, the queue fills, the rest hear "busy"
            for thread in threads:
                thread.start()
            refused_while_busy = requests - service.limits.max_batch_size - queue_size
            deadline = time.time() + 60
            while statuses.count(503) < refused_while_busy and time.time() < deadline:
                time.sleep(0.05)
            assert statuses.count(503) >= refused_while_busy and 200 not in statuses
            with pytest.raises(AppError, match=f"busy: {queue_size} requests are waiting; try again"):
                translate_call(client, "forty-two")  # the page's API says the same
        for thread in threads:
            thread.join()
        assert set(statuses) == {200, 503} and len(statuses) == requests  # the waiting ones translated, none lost
        assert json_call(port, {"text": "forty-two"})[0] == 200
    finally:
        page.close()


def test_without_gradio_and_with_a_model_that_does_not_load_the_command_says_so_in_one_line(
    model_folder, tmp_path, capsys, monkeypatch
):
    broken = tmp_path / "broken"
    shutil.copytree(model_folder, broken)
    (broken / "model.safetensors").write_bytes(b"not weights")
    pytest.importorskip("gradio")
    assert main(["serve", "--model", str(broken), "--port", str(free_port())]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "model.safetensors is corrupt or truncated" in err
    for flag, value in (("--threads", "0"), ("--queue-size", "0"), ("--max-wait-ms", "-1")):
        assert main(["serve", "--model", str(model_folder), flag, value]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and f"{flag}={float(value) if 'wait' in flag else value}" in err
    monkeypatch.setitem(sys.modules, "gradio", None)  # as if it were not installed
    assert main(["serve", "--model", str(model_folder)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and 'pip install "vanilla-transformer[serve]"' in err


def test_the_space_folder_runs_the_page_for_the_model(model_folder, service, tmp_path):
    pytest.importorskip("gradio")
    from gradio_client import Client

    title = 'Numbers: en -> de, "tiny"'
    assert main(["space", "--model", str(model_folder), "--output", str(tmp_path / "space"), "--title", title]) == 0
    space = tmp_path / "space"
    card = (space / "README.md").read_text()
    front_matter = yaml.safe_load(card.split("---")[1])
    assert front_matter["title"] == title and front_matter["sdk"] == "gradio" and front_matter["app_file"] == "app.py"
    assert front_matter["models"] == [str(model_folder)]
    assert "gradio" in (space / "requirements.txt").read_text() and (space / "vanilla_transformer").is_dir()
    port = free_port()
    env = {**os.environ, "GRADIO_SERVER_PORT": str(port), "GRADIO_SERVER_NAME": "127.0.0.1", "PYTHONPATH": ""}
    output = subprocess.PIPE
    app = subprocess.Popen([sys.executable, "app.py"], cwd=space, env=env, stdout=output, stderr=output, text=True)
    try:
        deadline = time.time() + 240
        while time.time() < deadline:
            try:
                client = Client(f"http://127.0.0.1:{port}/", verbose=False)
                break
            except Exception:  # noqa: BLE001 - not up yet
                assert app.poll() is None, app.communicate()[1][-3000:]
                time.sleep(1)
        text, tokens = translate_call(client, "forty-two")
        expected = service.translate_batch(["forty-two"], [Settings("greedy")])[0]
        assert text == expected.text and [entry["token"] for entry in tokens] == expected.tokens
    finally:
        app.terminate()
        app.wait(timeout=30)


def test_the_page_in_a_browser(served, service, tmp_path, monkeypatch):
    """As a person uses it: type a sentence, press Translate, wait for the translation and the alignment, pick
    another head; what was typed is shown as text, never run; a screenshot."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys
    from selenium.webdriver.support.ui import WebDriverWait

    _, _, port = served
    driver = headless_chromium("1280,2300")
    try:
        driver.get(f"http://127.0.0.1:{port}/")
        wait = WebDriverWait(driver, 120)
        box = wait.until(lambda d: d.find_element(By.CSS_SELECTOR, "#text textarea"))
        box.send_keys("<script>window.injected = 1</script>")
        # an answer that is markup too: the page shows it, runs none of it
        markup = "<img src=x onerror=window.injected=2>"
        with monkeypatch.context() as patched:
            patched.setattr(service, "translate_batch", lambda texts, _: [Translation(markup, [markup], [0.5])])
            driver.find_element(By.ID, "translate-button").click()
            wait.until(lambda d: "%" in d.find_element(By.ID, "tokens").text)  # the answer is there
        shown = driver.find_element(By.CSS_SELECTOR, "#translation textarea").get_attribute("value")
        assert shown == markup and markup in driver.find_element(By.ID, "tokens").text
        assert driver.execute_script("return window.injected") is None
        assert box.get_attribute("value") == "<script>window.injected = 1</script>"

        box.send_keys(Keys.CONTROL, "a")
        box.send_keys(SENTENCE)
        driver.find_element(By.ID, "translate-button").click()

        def translated(d) -> bool:
            shown = d.find_element(By.CSS_SELECTOR, "#translation textarea").get_attribute("value")
            return (
                bool(shown) and not shown.startswith("⚠") and bool(d.find_elements(By.CSS_SELECTOR, "#alignment img"))
            )

        wait.until(translated)
        shown = driver.find_element(By.CSS_SELECTOR, "#translation textarea").get_attribute("value")
        assert shown == service.translate_batch([SENTENCE], [Settings("beam", 4)])[0].text  # the page's default
        tokens = driver.find_element(By.ID, "tokens").text
        assert "%" in tokens and "</s>" in tokens
        big = lambda d: d.find_element(By.CSS_SELECTOR, "#one-head img").get_attribute("src")  # noqa: E731
        wait.until(big)
        before = big(driver)
        driver.find_element(By.CSS_SELECTOR, "#head input").click()
        option = wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, '#head [role=option][aria-label="2"]'))
        option[0].click()
        wait.until(lambda d: big(d) != before)  # the large head is now head 2
        screenshot = Path(os.environ.get("VANILLA_TRANSFORMER_SCREENSHOT", tmp_path / "serve.png"))
        driver.save_screenshot(str(screenshot))
        assert screenshot.stat().st_size > 10_000
    finally:
        driver.quit()


def test_the_load_benchmark_prints_a_row_for_each_api_and_number_of_clients(model_folder):
    pytest.importorskip("gradio")
    command = [sys.executable, "-m", "benchmarks.serve", "--model", str(model_folder), "--clients", "1", "3",
               "--requests", "2", "--baseline-sentences", "3", "--words", "6"]  # fmt: skip
    completed = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=600)
    assert completed.returncode == 0, completed.stderr[-3000:]
    rows = [line.split(" | ") for line in completed.stdout.splitlines() if line.startswith("| ") and "x |" in line]
    apis = ["| Gradio (/gradio_api/run/translate)", "| JSON (/api/translate)"]
    counts = [("1", "2", "0"), ("3", "6", "0")]  # clients, requests, failed
    assert [tuple(row[:4]) for row in rows] == [(api, *count) for api in apis for count in counts]
    assert all(float(row[4]) > 0 and float(row[7]) >= 1 for row in rows)
    assert "one sentence at a time, translate() in one process:" in completed.stdout


# --------------------------------------------------- faults found by trying the service as a careless client would


def raw_call(port: int, content: bytes, headers: dict | None = None, path: str = "/api/translate"):
    import httpx

    response = httpx.post(f"http://127.0.0.1:{port}{path}", content=content, headers=headers or {}, timeout=120)
    return response.status_code, response.json()


def still_serving(port: int, service) -> None:
    expected = service.translate_batch(["forty-two"], [Settings("greedy")])[0].text
    status, answer = json_call(port, {"text": "forty-two"})
    assert status == 200 and answer["translation"] == expected


def test_a_temperature_so_small_that_the_probabilities_overflow_is_refused_naming_its_range(served, service):
    _, _, port = served
    body = {"text": "forty-two", "decoding": "sampling", "temperature": 1e-300}
    assert json_call(port, body) == (422, {"error": "temperature=1e-300 is outside 0.01 to 10"})
    still_serving(port, service)


def test_a_lone_surrogate_in_the_text_is_refused_naming_where(served, service):
    _, _, port = served
    assert json_call(port, {"text": "forty-\ud800two"}) == (
        422,
        {"error": "the text is not valid Unicode at character 6"},
    )
    still_serving(port, service)


def test_a_body_that_is_not_utf8_is_refused_naming_the_byte(served, service):
    _, _, port = served
    status, answer = raw_call(port, b'{"text": "f\xfcnf"}', {"Content-Type": "application/json"})
    assert (status, answer) == (400, {"error": "the body is not UTF-8 (byte 11): send JSON in UTF-8"})
    status, answer = raw_call(port, b"text=forty-two")  # a form, as curl -d sends one
    assert status == 400 and answer["error"].startswith("the body is not JSON (Expecting value")
    still_serving(port, service)


def test_a_body_too_big_or_nested_too_deep_is_refused_unread(served, service):
    _, _, port = served
    from vanilla_transformer.serve.server import max_body_bytes

    limit = max_body_bytes(service)
    status, answer = raw_call(port, b'{"text": "' + b"x" * 10_000_000 + b'"}')
    assert (status, answer) == (413, {"error": f"the body is over {limit:,} bytes, more than any request needs"})
    status, answer = raw_call(port, b"[" * 5000 + b"]" * 5000)
    assert status == 400 and answer == {
        "error": "the body nests JSON too deep: send a JSON object of text and settings"
    }
    still_serving(port, service)


def test_a_json_body_sent_without_its_content_type_is_translated(served, service):
    _, _, port = served
    # `curl -d '{"text": ...}'` says application/x-www-form-urlencoded
    status, answer = raw_call(port, b'{"text": "forty-two"}', {"Content-Type": "application/x-www-form-urlencoded"})
    assert status == 200 and answer["translation"] == service.translate_batch(["forty-two"], [Settings()])[0].text


def test_a_field_the_api_does_not_take_is_named(served, service):
    _, _, port = served
    status, answer = json_call(port, {"text": "forty-two", "beams": 4, "lang": "de"})
    assert status == 422
    assert answer["error"] == (
        "unknown field 'beams', 'lang': a request takes text, decoding, engine, num_beams, seed, split_sentences, "
        "temperature, top_k, top_p"
    )
    still_serving(port, service)


def test_a_translation_that_fails_is_a_500_saying_what_failed_and_the_log_has_the_traceback(
    served, service, monkeypatch, caplog
):
    _, _, port = served
    translate_batch = service.translate_batch

    def failing_on_boom(texts, settings):
        if "boom" in texts:
            raise RuntimeError("probability tensor contains either inf, nan or element < 0\nsecond line")
        return translate_batch(texts, settings)

    monkeypatch.setattr(service, "translate_batch", failing_on_boom)
    with caplog.at_level("ERROR", logger="vanilla_transformer.serve.server"):
        status, answer = json_call(port, {"text": "boom"})
    assert status == 500
    assert answer == {
        "error": "the translation failed: RuntimeError: probability tensor contains either inf, nan or element < 0 "
        "second line"
    }
    assert "Traceback" in caplog.text and "RuntimeError" in caplog.text  # the details are in the log
    still_serving(port, service)


def test_inspect_without_a_translation_is_answered_naming_what_it_takes(served, service):
    from gradio_client.exceptions import AppError

    _, client, port = served
    with pytest.raises(AppError, match=r"/inspect takes the text and its translation \(a string each\)"):
        client.predict(SENTENCE, None, "cross", "0", "0", api_name="/inspect")
    with pytest.raises(AppError, match="the text has 10,000 words"):  # capped as /translate is
        client.predict("word " * 10_000, "wort", "cross", "0", "0", api_name="/inspect")
    assert client.predict(SENTENCE, "", "cross", "0", "0", api_name="/inspect") == (None,) * 5  # nothing to draw
    still_serving(port, service)


def test_a_ctranslate2_export_answers_a_request_that_names_no_engine(model_folder, tmp_path):
    pytest.importorskip("ctranslate2", reason='the CTranslate2 engine is optional: pip install ".[ct2]"')
    pytest.importorskip("gradio", reason='the page needs ".[serve]"')
    from vanilla_transformer.export import export_ctranslate2
    from vanilla_transformer.serve.server import start_server

    exported = TranslationService(export_ctranslate2(model_folder, tmp_path / "ct2"))
    port = free_port()
    page = start_server(exported, [], "export", "127.0.0.1", port, block=False)
    try:  # the serving guide's own request: no engine, so the one the page shows first
        status, answer = json_call(port, {"text": SENTENCE})
        assert status == 200
        assert answer["translation"] == exported.translate_batch([SENTENCE], [Settings(engine="ctranslate2")])[0].text
    finally:
        page.close()


def shortlist_of(model_folder: Path, folder: Path, tokenizer_identity: str) -> Path:
    from vanilla_transformer.lexical_shortlist import SHORTLIST_FILE, LexicalShortlist

    shutil.copytree(model_folder, folder)
    vocab = json.loads((model_folder / "config.json").read_text())["vocab_size"]
    candidates = torch.arange(vocab, dtype=torch.int32).expand(vocab, -1)[:, :4].contiguous()
    metadata = {"source_vocab_size": vocab, "target_vocab_size": vocab, "tokenizer": tokenizer_identity}
    LexicalShortlist(candidates, torch.arange(4, dtype=torch.int32), metadata).save(folder / SHORTLIST_FILE)
    return folder


def test_a_shortlist_of_another_tokenizer_of_the_same_size_stops_serve_at_start(model_folder, tmp_path, capsys):
    folder = shortlist_of(model_folder, tmp_path / "model", "another-tokenizer-of-the-same-size")
    assert main(["serve", "--model", str(folder), "--port", str(free_port())]) == 2
    err = capsys.readouterr().err.strip().splitlines()  # after the weights' loading bar: the one line of the error
    assert err[-1].startswith("vanilla-transformer serve: error: the shortlist was built for tokenizer another-")
    assert "Traceback" not in "".join(err)
    assert (folder / "shortlist.safetensors").is_file()  # nothing lost


def test_a_damaged_shortlist_stops_serve_at_start(model_folder, tmp_path, capsys):
    from vanilla_transformer.tokenization import tokenizer_identity

    folder = shortlist_of(
        model_folder, tmp_path / "model", tokenizer_identity(TranslationService(model_folder).tokenizer)
    )
    TranslationService(folder)  # whole, it serves
    damaged = (folder / "shortlist.safetensors").read_bytes()[:-10]
    (folder / "shortlist.safetensors").write_bytes(damaged)
    assert main(["serve", "--model", str(folder), "--port", str(free_port())]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith(f"vanilla-transformer serve: error: the shortlist {folder}/shortlist.safetensors is dama")
    assert "Traceback" not in "".join(err)


@pytest.mark.parametrize(
    "flags, named",
    [
        (["--port", "{taken}"], "port {taken} of 127.0.0.1 is in use: pass another --port"),
        (["--host", "nohost.invalid"], "--host nohost.invalid: no such address"),
        (["--host", "192.0.2.1"], "--host 192.0.2.1 is no address of this machine: give one of its own"),
        (["--port", "70000"], "--port=70000 is beyond 65535, the highest port"),
    ],
    ids=["port-in-use", "unknown-host", "host-of-another-machine", "port-out-of-range"],
)
def test_where_the_page_cannot_listen_is_named_as_the_flag_that_sets_it_before_the_model_loads(
    model_folder, capsys, monkeypatch, flags, named
):
    pytest.importorskip("gradio", reason='the page needs ".[serve]"')
    monkeypatch.setattr(TranslationService, "__init__", lambda *_, **__: pytest.fail("the model was loaded"))
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        argv = [flag.format(taken=port) for flag in flags]
        assert main(["serve", "--model", str(model_folder), *argv]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(f"vanilla-transformer serve: error: {named.format(taken=port)}")


def test_int8_of_a_ctranslate2_export_is_refused_naming_how_to_quantize_it(model_folder, tmp_path, capsys):
    pytest.importorskip("ctranslate2", reason='the CTranslate2 engine is optional: pip install ".[ct2]"')
    pytest.importorskip("gradio", reason='the page needs ".[serve]"')
    from vanilla_transformer.export import export_ctranslate2

    exported = export_ctranslate2(model_folder, tmp_path / "ct2")
    assert main(["serve", "--model", str(exported), "--quantize", "int8", "--port", str(free_port())]) == 2
    assert said(capsys) == [
        f"vanilla-transformer serve: error: --quantize int8 quantizes a PyTorch model, and {exported} is a "
        "CTranslate2 export: quantize it when exporting it (export ctranslate2 --quantization int8) (--debug shows the "
        "traceback)"
    ]


def test_the_badges_take_their_colour_from_the_probability_on_one_scale():
    pytest.importorskip("gradio", reason='the page needs ".[serve]"')
    from vanilla_transformer.serve.page import PROBABILITY_COLOURS, percent

    def green(label: str) -> int:
        return int(PROBABILITY_COLOURS[label][3:5], 16) - int(PROBABILITY_COLOURS[label][1:3], 16)

    labels = [percent(share / 100) for share in range(101)]
    assert list(PROBABILITY_COLOURS) == labels  # a colour for every label the page shows
    greener = [green(label) for label in labels]
    assert greener == sorted(greener) and greener[0] < 0 < greener[-1]  # red at 0%, greener as it rises
    assert green("100%") > green("93%") > green("50%")


def test_the_page_is_titled_with_the_models_name_not_the_machines_path(model_folder, tmp_path, monkeypatch, capsys):
    pytest.importorskip("gradio", reason='the page needs ".[serve]"')
    started = {}
    monkeypatch.setattr("vanilla_transformer.serve.server.start_server", lambda *args, **kw: started.update(args=args))
    assert main(["serve", "--model", str(model_folder)]) == 0
    assert started["args"][2] == "vanilla-transformer: a test model"  # the card's title
    bare = shutil.copytree(model_folder, tmp_path / "numbers-en-de", ignore=shutil.ignore_patterns("README.md"))
    assert main(["serve", "--model", str(bare)]) == 0
    assert started["args"][2] == "vanilla-transformer: numbers-en-de" and str(tmp_path) not in started["args"][2]
    assert said(capsys) == []  # loopback, no login: no warning


def test_a_token_guards_the_json_api_and_logins_the_page(service, tmp_path):
    pytest.importorskip("gradio", reason='the page needs ".[serve]"')
    import base64

    import httpx
    from gradio_client import Client

    from vanilla_transformer.serve.access import Access
    from vanilla_transformer.serve.server import start_server

    port = free_port()
    access = Access(token="s3cret-token", logins=(("ada", "lovelace"),))
    page = start_server(service, [], "guarded", "127.0.0.1", port, block=False, access=access)
    try:
        url = f"http://127.0.0.1:{port}"
        body = json.dumps({"text": "forty-two"})
        malformed = {"Authorization": b"Basic \xfc"}  # not base64, not even ASCII
        for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": "Basic " + "eA=="}, malformed):
            response = httpx.post(f"{url}/api/translate", content=body, headers=headers, timeout=60)
            assert response.status_code == 401 and "translation" not in response.json(), headers
            assert response.headers["www-authenticate"] == 'Bearer, Basic realm="vanilla-transformer"'
        assert "s3cret" not in repr(access) and "lovelace" not in repr(access)
        assert httpx.get(f"{url}/api/stats", timeout=60).status_code == 401
        expected = service.translate_batch(["forty-two"], [Settings()])[0].text
        for authorization in ("Bearer s3cret-token", "Basic " + base64.b64encode(b"ada:lovelace").decode()):
            response = httpx.post(f"{url}/api/translate", content=body, headers={"Authorization": authorization})
            assert response.status_code == 200 and response.json()["translation"] == expected
        # the page and Gradio's API ask for the login
        gradio_run = httpx.post(f"{url}/gradio_api/run/translate", json={"data": ["forty-two"]}, timeout=60)
        assert gradio_run.status_code == 401
        with pytest.raises(Exception, match="(?i)login|auth|401"):
            Client(url, verbose=False)
        client = Client(url, auth=("ada", "lovelace"), verbose=False)
        assert translate_call(client, "forty-two")[0] == expected
    finally:
        page.close()


def said(capsys) -> list[str]:
    """What serve said on stderr, without the loading bars of transformers."""
    return [line for line in capsys.readouterr().err.splitlines() if line.startswith("vanilla-transformer serve:")]


def test_a_service_beyond_loopback_without_login_or_token_warns_once_and_reads_them_from_files_only(
    model_folder, tmp_path, monkeypatch, capsys
):
    pytest.importorskip("gradio", reason='the page needs ".[serve]"')
    from vanilla_transformer.serve.access import TOKEN_VARIABLE, Access

    started = {}
    monkeypatch.setattr("vanilla_transformer.serve.server.start_server", lambda *args, **kw: started.update(kw))
    monkeypatch.delenv(TOKEN_VARIABLE, raising=False)
    assert main(["serve", "--model", str(model_folder), "--host", "0.0.0.0"]) == 0
    assert said(capsys) == [
        "vanilla-transformer serve: warning: serving on 0.0.0.0, and the page and its API have no login "
        "(--logins-file) and the JSON API has no token (--token-file): anyone who can reach it may use the model"
    ]
    (tmp_path / "token").write_text("s3cret\n")
    (tmp_path / "logins").write_text("# who may\nada:love:lace\n")
    argv = ["serve", "--model", str(model_folder), "--host", "0.0.0.0", "--token-file", str(tmp_path / "token")]
    assert main([*argv, "--logins-file", str(tmp_path / "logins")]) == 0
    assert said(capsys) == [] and started["access"] == Access("s3cret", (("ada", "love:lace"),))
    monkeypatch.setenv(TOKEN_VARIABLE, "from-the-environment")
    assert main(["serve", "--model", str(model_folder), "--host", "0.0.0.0"]) == 0
    assert started["access"].token == "from-the-environment"
    assert said(capsys) == [  # the JSON API has its token; the page has no login
        "vanilla-transformer serve: warning: serving on 0.0.0.0, and the page and its API have no login "
        "(--logins-file): anyone who can reach it may use the model"
    ]
    (tmp_path / "logins").write_text("ada lovelace\n")
    assert main([*argv, "--logins-file", str(tmp_path / "logins")]) == 2
    assert (
        capsys.readouterr()
        .err.strip()
        .endswith(f"--logins-file {tmp_path / 'logins'}: line 1 is not user:password (--debug shows the traceback)")
    )
    # no flag takes the token itself, not even as an abbreviation of --token-file
    assert main(["serve", "--model", str(model_folder), "--token", "s3cret"]) == 2
    assert "unrecognized arguments: --token" in capsys.readouterr().err


# ------------------------------------------------------------------------------ paragraphs and the ONNX engine

PARAGRAPH = "forty-two. seven hundred one.  nine thousand.\n\nsixty-six. three hundred thousand."


def test_a_paragraph_is_translated_as_its_five_sentences_are_one_by_one_through_the_service_and_both_apis(
    served, service
):
    from vanilla_transformer.common.paragraphs import split_paragraph

    paragraph = split_paragraph(PARAGRAPH, "en")
    assert len(paragraph.sentences) == 5
    alone = [service.translate_batch([sentence], [Settings()])[0] for sentence in paragraph.sentences]
    (together,) = service.translate_batch([PARAGRAPH], [Settings()])
    assert together.text == paragraph.join([translation.text for translation in alone])
    assert "\n\n" in together.text  # the paragraph's own line breaks
    assert together.tokens == [token for translation in alone for token in translation.tokens]
    (whole,) = service.translate_batch([PARAGRAPH], [Settings(split_sentences=False)])
    assert whole.tokens != together.tokens  # one sentence of the whole text: what splitting avoids

    _, client, port = served
    assert json_call(port, {"text": PARAGRAPH})[1]["translation"] == together.text
    assert json_call(port, {"text": PARAGRAPH, "split_sentences": False})[1]["translation"] == whole.text
    assert json_call(port, {"text": PARAGRAPH, "split_sentences": "no"}) == (
        422,
        {"error": "split_sentences='no' must be true or false"},
    )
    assert translate_call(client, PARAGRAPH)[0] == together.text  # the page's API splits too


def test_an_onnx_export_is_served_with_the_models_tokens_and_answers_a_request_naming_no_engine(
    model_folder, numbers_en_de_onnx
):
    pytest.importorskip("onnxruntime", reason='the ONNX engine is optional: pip install ".[onnx]"')
    pytest.importorskip("gradio", reason='the page needs ".[serve]"')
    from vanilla_transformer.serve.server import start_server

    exported = TranslationService(numbers_en_de_onnx)  # model_folder's weights, exported
    assert list(exported.engines) == ["onnx"] and exported.model is None
    ours = TranslationService(model_folder)
    for settings in (Settings("greedy", engine="onnx"), Settings("beam", 3, engine="onnx")):
        (result,) = exported.translate_batch([SENTENCE], [settings])
        (expected,) = ours.translate_batch([SENTENCE], [Settings(settings.decoding, settings.num_beams)])
        assert result.tokens == expected.tokens
        torch.testing.assert_close(result.probabilities, expected.probabilities, rtol=1e-4, atol=1e-6)
    port = free_port()
    page = start_server(exported, [], "onnx", "127.0.0.1", port, block=False)
    try:
        status, answer = json_call(port, {"text": SENTENCE})
        assert status == 200 and answer["tokens"] == ours.translate_batch([SENTENCE], [Settings()])[0].tokens
    finally:
        page.close()
