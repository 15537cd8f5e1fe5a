"""The documentation site (mkdocs.yml, docs/): built strictly into a temporary folder, so every page's snippets run
against the installed package, every picture is drawn and every link and anchor is checked (a warning fails the
build); every Learn page exists in English and in Chinese and shows the package's own source; in headless Chromium
the home page opens, a Learn page in each language shows its drawn picture and its formula, and the search finds a
term in each language."""

import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from helpers import headless_chromium, serve_folder

pytest.importorskip("mkdocs", reason='the site needs the docs extra: pip install -e ".[docs]"')

REPO = Path(__file__).resolve().parents[1]
CJK = re.compile(r"[\u4e00-\u9fff]")


class KeepTags(yaml.SafeLoader):
    """mkdocs.yml may hold tags such as !ENV; reading the nav needs none of them."""


KeepTags.add_multi_constructor("!", lambda loader, suffix, node: None)


def learn_pages() -> list[str]:
    """The Learn section of the nav, in order: 'learn/whole.md', ..."""
    nav = yaml.load((REPO / "mkdocs.yml").read_text(encoding="utf-8"), Loader=KeepTags)["nav"]
    (learn,) = [entry["Learn"] for entry in nav if isinstance(entry, dict) and "Learn" in entry]
    return [page if isinstance(page, str) else next(iter(page.values())) for page in learn]


def built_page(site: Path, page: str, language: str = "en") -> str:
    """The HTML of a nav page ('learn/attention.md') in a language of the site."""
    folder = site if language == "en" else site / language
    path = page.removesuffix(".md")
    path = path.removesuffix("index") if path.endswith("index") else path + "/"
    return (folder / path / "index.html").read_text(encoding="utf-8")


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    output = tmp_path_factory.mktemp("site")
    started = time.monotonic()
    completed = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(output)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=1200,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
    )
    problems = [line for line in completed.stderr.splitlines() if "WARNING" in line or "ERROR" in line]
    assert completed.returncode == 0, "\n".join(problems) or completed.stderr[-5000:]
    print(f"the site built in {time.monotonic() - started:.0f} s")
    return output


def test_the_site_builds_strictly_and_every_learn_page_is_in_english_and_in_chinese(site):
    pages = learn_pages()
    assert len(pages) >= 10 and pages[0] == "learn/index.md"
    for page in pages:
        assert (REPO / "docs" / page).is_file() and (REPO / "docs" / page.replace(".md", ".zh.md")).is_file(), page
        english, chinese = built_page(site, page), built_page(site, page, "zh")
        assert '<html lang="en"' in english and '<html lang="zh"' in chinese, page
        article = chinese.split("<article", 1)[1].split("</article>", 1)[0]
        assert len(CJK.findall(article)) > 200, f"{page}: the Chinese page is not written in Chinese"
        if page != "learn/index.md":
            # every chapter shows the package's own code, read from its source file when the site was built
            for html in (english, chinese):
                assert 'class="filename">vanilla_transformer/' in html, f"{page}: no listing of the package's source"


def test_the_pictures_and_formulas_are_made_at_build_time(site):
    drawn = [page for page in learn_pages() if 'class="drawn"' in built_page(site, page)]
    formulas = [page for page in learn_pages() if "<math" in built_page(site, page)]
    assert len(drawn) >= 5 and len(formulas) >= 5, (drawn, formulas)
    # MathML written by the build, no script or CDN to render it
    assert "mathjax" not in built_page(site, "learn/attention.md").lower()


NO_TRANSITIONS = """
const style = document.createElement("style");
style.textContent = "*, *::before, *::after { transition: none !important; animation: none !important; }";
document.head.appendChild(style);
"""
SEARCH_RESULT_LINKS = "return Array.from(document.querySelectorAll('.md-search-result__item a'), a => a.href)"


def test_the_site_in_a_browser_shows_pictures_and_formulas_and_searches_in_both_languages(site, tmp_path):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys
    from selenium.webdriver.support.ui import WebDriverWait

    server, port = serve_folder(site)  # search fetches its index: file:// would not do
    driver = headless_chromium("1300,1000")
    shots = Path(os.environ.get("VANILLA_TRANSFORMER_DOCS_SCREENSHOTS", tmp_path))
    try:
        root = f"http://127.0.0.1:{port}/"
        driver.get(root)
        assert "vanilla-transformer" in driver.title
        assert driver.find_element(By.CSS_SELECTOR, "article h1").text
        wait = WebDriverWait(driver, 60)
        for language, prefix, term in (("en", "", "attention"), ("zh", "zh/", "注意力")):
            driver.get(f"{root}{prefix}learn/attention/")
            wait.until(lambda d: d.execute_script("return document.readyState") == "complete")
            assert driver.find_element(By.TAG_NAME, "html").get_attribute("lang") == language
            picture = driver.find_element(By.CSS_SELECTOR, "article img.drawn")
            assert driver.execute_script("return arguments[0].complete && arguments[0].naturalWidth", picture) > 100
            formula = driver.find_element(By.CSS_SELECTOR, "article math[display=block]")
            assert formula.size["height"] > 5 and formula.size["width"] > 20  # drawn by the browser's MathML
            driver.execute_script(NO_TRANSITIONS)  # the header's title would be caught sliding in the screenshot
            driver.execute_script("arguments[0].scrollIntoView({block: 'center'})", picture)
            driver.save_screenshot(str(shots / f"learn-attention-{language}.png"))
            box = driver.find_element(By.CSS_SELECTOR, "input.md-search__input")  # in the header at this width
            box.click()
            box.send_keys(term)
            box.send_keys(Keys.SPACE)
            # the results are drawn again as the query grows: read their links in one go, until a Learn page is one
            learn_pages = f"{root}{prefix}learn/"
            wait.until(
                lambda d, pages=learn_pages: any(
                    link.startswith(pages) for link in d.execute_script(SEARCH_RESULT_LINKS)
                ),
                f"searching {term!r} found no page under {learn_pages}",
            )
    finally:
        driver.quit()
        server.terminate()
        server.wait(timeout=30)
