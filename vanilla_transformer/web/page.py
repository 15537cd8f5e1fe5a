"""`vanilla-transformer export web FOLDER OUT`: a static folder that translates in the browser, served by anything
that hands out files (`python -m http.server`, a static Space): an HTML page, a small JavaScript module
(`static/translator.js`: the ONNX export in onnxruntime-web, WebAssembly, one thread; the tokenizer in JavaScript;
paragraphs split by sentencex; greedy decoding), the ONNX export and its tokenizer in `model/`.

The JavaScript packages are the pinned npm packages of the repository's package.json and package-lock.json. By
default the page loads them from a CDN, each checked against its integrity hash (`assets.json`: an import map's
integrity for the modules, fetch's for the WebAssembly binary); `offline_assets=True` copies them, from the
node_modules folder `npm ci` installs, into the page's folder, for machines without the internet.
"""

from __future__ import annotations

import base64
import hashlib
import html
import json
import shutil
from importlib import resources
from pathlib import Path

from transformers import GenerationConfig

from ..common.languages import declared_languages, language_name
from ..common.model_folder import ONNX_GRAPH_FILES, ONNX_WEIGHTS_FILE, check_output_folder, export_engine
from ..common.onnx_files import EXPORT_INFO_FILE, check_onnx_files
from ..export.onnx_export import check_quantization, load_exportable, write_onnx_export
from ..inference.onnx_engine import PLAIN_GREEDY_SETTINGS

CDN = "https://cdn.jsdelivr.net/npm/{package}@{version}/{path}"
MODEL_FOLDER = "model"
ASSETS_FOLDER = "assets"
# the files of an ONNX export the page reads
PAGE_MODEL_FILES = (*ONNX_GRAPH_FILES, ONNX_WEIGHTS_FILE, "tokenizer.json", "tokenizer_config.json")
PAGE_CONFIG_FILES = ("config.json", "generation_config.json")  # read when the page is written
MAX_INPUT_TOKENS = 256  # the service's limit: a page is for a paragraph, not a book


def pinned_assets() -> dict:
    """The npm packages the page loads: version, and for each file (the module; ONNX Runtime's WebAssembly) its path in
    the package and its integrity hash (SHA-384, as browsers check it)."""
    return json.loads(resources.files(__package__).joinpath("assets.json").read_text(encoding="utf-8"))


def integrity(data: bytes) -> str:
    return "sha384-" + base64.b64encode(hashlib.sha384(data).digest()).decode()


def default_node_modules() -> Path:
    """node_modules beside package.json in the repository this package runs from (`npm ci` installs it there)."""
    return Path(__file__).resolve().parents[2] / "node_modules"


def _pinned_files():
    """(package, version, role, path in the package, integrity) of each file the page loads: the module, and ONNX
    Runtime's WebAssembly."""
    for package, pinned in pinned_assets().items():
        for role in ("module", "wasm"):
            if role in pinned:
                yield package, pinned["version"], role, pinned[role]["path"], pinned[role]["integrity"]


def _offline_assets(node_modules: Path | None) -> dict[str, dict[str, Path]]:
    """{package: {role: the file in `node_modules`}}, each checked against its pinned hash: the files
    `--offline-assets` copies into the page."""
    node_modules = Path(node_modules) if node_modules else default_node_modules()
    sources: dict[str, dict[str, Path]] = {}
    for package, version, role, path, expected in _pinned_files():
        source = node_modules / package / path
        if not source.is_file():
            raise FileNotFoundError(
                f"--offline-assets copies the page's JavaScript from {node_modules}, which lacks "
                f"{package}/{path}: run `npm ci` in the repository (package-lock.json), or pass "
                "--node-modules DIR"
            )
        if integrity(source.read_bytes()) != expected:
            raise ValueError(
                f"{source} is not {package} {version} as package-lock.json pins it (its hash "
                "differs): run `npm ci` in the repository"
            )
        sources.setdefault(package, {})[role] = source
    return sources


def _asset_urls(offline: dict[str, dict[str, Path]] | None, output: Path) -> dict[str, dict[str, dict]]:
    """{package: {role: {"url", "integrity"}}}: the CDN's, or with `offline` assets (`_offline_assets`) the files
    copied into `output`."""
    urls: dict[str, dict[str, dict]] = {}
    for package, version, role, path, expected in _pinned_files():
        if offline is None:
            url = CDN.format(package=package, version=version, path=path)
        else:
            target = output / ASSETS_FOLDER / package.replace("/", "-") / Path(path).name
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(offline[package][role], target)
            url = "./" + target.relative_to(output).as_posix()
        urls.setdefault(package, {})[role] = {"url": url, "integrity": expected}
    return urls


def _first_example(folder: Path) -> str:
    """The first example sentence the model card lists (its widget), or ""."""
    from huggingface_hub import ModelCard

    card = folder / "README.md"
    if not card.is_file():
        return ""
    try:
        metadata = ModelCard.load(card).data.to_dict()
    except Exception:  # noqa: BLE001 - a card is documentation: one that does not parse says nothing
        return ""
    examples = [entry.get("text") for entry in metadata.get("widget") or [] if isinstance(entry, dict)]
    return next((text for text in examples if isinstance(text, str)), "")


def _languages(declared: tuple[str, str] | None, language: str | None) -> str:
    """What the page says the model translates, by the languages' names as the model card gives them (" English to
    German"; a code where the name is unknown), else the source language given (" from German"), else nothing."""
    if declared:
        return f" {language_name(declared[0])} to {language_name(declared[1])}"
    return f" from {language_name(language)}" if language else ""


def check_page_can_decode(model: Path) -> None:
    """The page reads the tokenizer from tokenizer.json and decodes greedily as generate() does under the generation
    settings of the ONNX engine's own loop (its beam and sampling settings aside: the page decodes greedily); a folder
    it would translate otherwise than Python is refused, naming why."""
    if not (model / "tokenizer.json").is_file():
        raise ValueError(
            f"{model} has no tokenizer.json, which the page's tokenizer (tokenizers in JavaScript) reads: a Marian "
            "folder's SentencePiece tokenizer has none; the page takes our own folders"
        )
    if (model / "generation_config.json").is_file():
        settings = GenerationConfig.from_pretrained(model).to_diff_dict()
        unapplied = sorted(set(settings) - PLAIN_GREEDY_SETTINGS)
        if unapplied:
            raise ValueError(
                f"{model}'s generation config sets {', '.join(unapplied)}, which the page's greedy decoding does not "
                "apply: it would translate otherwise than generate(); remove them from generation_config.json"
            )


def export_web(
    model: str | Path,
    output: str | Path,
    *,
    quantize: str | None = None,
    offline_assets: bool = False,
    node_modules: str | Path | None = None,
    language: str | None = None,
    title: str | None = None,
    force: bool = False,
) -> Path:
    """Write the page for `model` (a translation model folder, exported here with `quantize`; or a folder
    `export onnx` wrote) into `output`; returns `output`."""
    model, output = Path(model), Path(output)
    check_output_folder(output, model, "model", force)
    check_quantization(quantize)
    exported = export_engine(model) == "onnx"
    if exported and quantize:
        raise ValueError(f"{model} is an ONNX export already: its precision is its own (no --quantize)")
    if not exported and not (model / "config.json").is_file():
        raise FileNotFoundError(f"{model} is neither a model folder nor an ONNX export (`export onnx` writes one)")
    check_page_can_decode(model)
    # every refusal before the first file is written (or --force deletes one): the offline assets' hashes, the
    # export's files, the model's loading
    assets = _offline_assets(node_modules) if offline_assets else None
    if exported:
        check_onnx_files(model)  # a file cut short would fail in the visitor's browser, far from its cause
        missing = [name for name in (*PAGE_MODEL_FILES, *PAGE_CONFIG_FILES) if not (model / name).is_file()]
        if missing:
            raise FileNotFoundError(f"the ONNX export {model} lacks {', '.join(missing)}, which the page reads")
    else:
        exportable = load_exportable(model)
    if output.exists() and force:
        shutil.rmtree(output)
    output.mkdir(parents=True, exist_ok=True)  # an empty folder given
    if exported:
        (output / MODEL_FOLDER).mkdir()
        for name in (*PAGE_MODEL_FILES, *PAGE_CONFIG_FILES, EXPORT_INFO_FILE, "README.md"):
            if (model / name).is_file():
                shutil.copyfile(model / name, output / MODEL_FOLDER / name)
    else:
        write_onnx_export(*exportable, model, output / MODEL_FOLDER, quantize)
    urls = _asset_urls(assets, output)
    folder = output / MODEL_FOLDER
    config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    generation = json.loads((folder / "generation_config.json").read_text(encoding="utf-8"))
    example = _first_example(folder)
    # sentencex's rules for the source language the model declares, as serve takes them (else its generic rules)
    declared = declared_languages(str(folder), None)
    described = _languages(declared[0] if declared else None, language)
    language = language or (declared[0][0] if declared else "en")
    title = title or f"{model.resolve().name}: translate in your browser"
    # a learned position table has no row past its last: no input, and no output, longer than it
    positions = config.get("max_position_embeddings") if config.get("position_embedding_type") == "learned" else None
    limits = [limit for limit in (generation.get("max_new_tokens"), positions) if limit]
    page = {
        "title": title,
        "language": language,
        "model_folder": MODEL_FOLDER,
        "weights_file": ONNX_WEIGHTS_FILE,
        "max_new_tokens": min(limits) if limits else None,  # none: the longest source and 50, as the page decides
        "min_new_tokens": max(generation.get("min_new_tokens") or 0, (generation.get("min_length") or 0) - 1),
        "max_input_tokens": min(MAX_INPUT_TOKENS, positions or MAX_INPUT_TOKENS),
        "config": {name: config[name] for name in ("pad_token_id", "eos_token_id", "decoder_start_token_id")},
        "assets": {"wasm": urls["onnxruntime-web"]["wasm"]},
    }
    (output / "translator.json").write_text(json.dumps(page, indent=2) + "\n", encoding="utf-8")
    import_map = {
        "imports": {package: roles["module"]["url"] for package, roles in urls.items()},
        "integrity": {roles["module"]["url"]: roles["module"]["integrity"] for roles in urls.values()},
    }
    static = resources.files(__package__).joinpath("static")
    (output / "translator.js").write_text(static.joinpath("translator.js").read_text(encoding="utf-8"))
    description = (
        f"The model translates{described} here, in this browser (ONNX Runtime, WebAssembly): the text you type is not "
        "sent anywhere."
    )
    index = static.joinpath("index.html").read_text(encoding="utf-8")
    (output / "index.html").write_text(
        index.format(
            title=html.escape(title),
            description=html.escape(description),
            example=html.escape(example),
            import_map=json.dumps(import_map, indent=2).replace("</", "<\\/"),
        ),
        encoding="utf-8",
    )
    return output


def add_web_format(formats) -> None:
    """`export web FOLDER OUTPUT [--quantize int8] [--offline-assets] ...`, added to `export`'s formats."""
    parser = formats.add_parser(
        "web",
        help="a static page that translates in the browser (serve it with: python -m http.server -d OUTPUT)",
        description="Write a static folder (index.html, a JavaScript module, the ONNX export and its tokenizer) that "
        "translates in the browser with onnxruntime-web; its JavaScript comes from a CDN with integrity hashes, or "
        "with --offline-assets from the repository's node_modules (npm ci).",
    )
    parser.add_argument("folder", type=Path, help="a trained model folder, or a folder `export onnx` wrote")
    parser.add_argument("output", type=Path, help="the new page's folder")
    parser.add_argument("--quantize", choices=("int8",), help="int8 weights: about a quarter of the download")
    parser.add_argument("--offline-assets", action="store_true", help="copy the JavaScript packages into the folder")
    parser.add_argument("--node-modules", type=Path, help="where `npm ci` installed them (default: the repository's)")
    parser.add_argument("--language", help="the source language's code for the sentence splitter (default: the card's)")
    parser.add_argument("--title", help="the page's title")
    parser.add_argument("--force", action="store_true", help="replace OUTPUT if it holds files")
    parser.set_defaults(func=_run_export_web)


def _run_export_web(args) -> int:
    output = export_web(
        args.folder,
        args.output,
        quantize=args.quantize,
        offline_assets=args.offline_assets,
        node_modules=args.node_modules,
        language=args.language,
        title=args.title,
        force=args.force,
    )
    print(f"wrote {output}: serve it with `python -m http.server -d {output}` and open http://127.0.0.1:8000/")
    return 0


__all__ = ["add_web_format", "export_web", "integrity", "pinned_assets"]
