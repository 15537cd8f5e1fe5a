"""Get transformers' common test mixins from the source distribution of the installed transformers.

`load_transformers_tests()` returns them, or raises `MixinsUnavailable` with the reason (no network, pip failure,
a missing test dependency) for the caller to skip on. The sdist's `tests/` folder is cached in
`$VANILLA_TRANSFORMER_CACHE` (default `~/.cache/vanilla-transformer`) as `transformers-<version>-tests`, so pip
runs once per transformers version; `VANILLA_TRANSFORMER_HF_TESTS_DIR` points at an unpacked `tests/` folder
instead. The folder is imported as the package `transformers_sdist_tests` (not `tests`, which is ours).
"""

import importlib
import importlib.util
import os
import subprocess
import sys
import tarfile
import tempfile
import types
import warnings
from dataclasses import dataclass, field
from pathlib import Path

import transformers

PACKAGE = "transformers_sdist_tests"
PIP_TIMEOUT_S = 600

# module of the sdist's tests/ -> our stand-in for it, used only where the sdist lacks the file
STANDINS = {
    "exporters.test_export": "transformers_suite.standins.export_test_export",
    "generation.test_utils": "transformers_suite.standins.generation_test_utils",
    "utils.test_configuration_utils": "transformers_suite.standins.configuration_utils",
}
# test dependencies of transformers' "testing" extra that test_modeling_common imports (in our dev extra)
TEST_DEPENDENCIES = {"parameterized": "parameterized>=0.9"}


class MixinsUnavailable(Exception):
    """transformers' common tests cannot be had here; the message says why."""


@dataclass
class TransformersTests:
    version: str
    folder: Path
    modeling_common: types.ModuleType
    configuration_common: types.ModuleType
    generation_utils: types.ModuleType
    # "generation/test_utils.py" -> why a stand-in took its place
    standins: dict[str, str] = field(default_factory=dict)

    @property
    def generation_available(self) -> bool:
        return "generation/test_utils.py" not in self.standins


def cache_root() -> Path:
    root = os.environ.get("VANILLA_TRANSFORMER_CACHE")
    if root:
        return Path(root)
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "vanilla-transformer"


def _pip(*args: str) -> None:
    command = [sys.executable, "-m", "pip", *args, "--disable-pip-version-check", "--timeout", "20", "--retries", "1"]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=PIP_TIMEOUT_S, check=False)
    except (OSError, subprocess.TimeoutExpired) as error:
        raise MixinsUnavailable(f"`{' '.join(command[2:])}` failed: {error}") from error
    if done.returncode:
        last = (done.stderr.strip() or done.stdout.strip() or "no output").splitlines()[-1]
        raise MixinsUnavailable(f"`{' '.join(command[2:])}` failed (exit {done.returncode}): {last}")


def fetch_tests_folder(version: str) -> Path:
    """The `tests/` folder of the transformers `version` sdist, downloaded once and cached."""
    override = os.environ.get("VANILLA_TRANSFORMER_HF_TESTS_DIR")
    if override:
        folder = Path(override)
        if not (folder / "test_modeling_common.py").is_file():
            raise MixinsUnavailable(f"VANILLA_TRANSFORMER_HF_TESTS_DIR={override} has no test_modeling_common.py")
        return folder
    root = cache_root()
    folder = root / f"transformers-{version}-tests"
    if (folder / "test_modeling_common.py").is_file():
        return folder
    root.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=root, prefix=".download-") as scratch:
        _pip("download", "--no-binary", ":all:", "--no-deps", f"transformers=={version}", "-d", scratch)
        archives = sorted(Path(scratch).glob("transformers-*.tar.gz"))
        if not archives:
            raise MixinsUnavailable(f"pip download of transformers=={version} gave no .tar.gz source distribution")
        prefix = f"{archives[0].name.removesuffix('.tar.gz')}/tests/"
        unpacked = Path(scratch) / "tests"
        with tarfile.open(archives[0]) as archive:
            for member in archive.getmembers():
                if member.name.startswith(prefix) and (member.isfile() or member.isdir()):
                    member.name = member.name.removeprefix(prefix) or "."
                    archive.extract(member, unpacked, filter="data")
        if not (unpacked / "test_modeling_common.py").is_file():
            raise MixinsUnavailable(
                f"the transformers {version} source distribution has no tests/test_modeling_common.py"
            )
        try:
            unpacked.rename(folder)  # atomic: a concurrent run that got there first wins
        except OSError:
            if not (folder / "test_modeling_common.py").is_file():
                raise
    return folder


def _check_test_dependencies() -> None:
    missing = [requirement for module, requirement in TEST_DEPENDENCIES.items() if not importlib.util.find_spec(module)]
    if missing:
        raise MixinsUnavailable(f"{', '.join(missing)} (imported by transformers' test_modeling_common.py) is missing")


def _register_package(name: str, path: Path | None) -> types.ModuleType:
    if name in sys.modules:
        return sys.modules[name]
    if path is not None and (path / "__init__.py").is_file():
        spec = importlib.util.spec_from_file_location(
            name, path / "__init__.py", submodule_search_locations=[str(path)]
        )
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
        return module
    module = types.ModuleType(name)
    module.__path__ = [str(path)] if path is not None and path.is_dir() else []
    sys.modules[name] = module
    return module


def load_transformers_tests() -> TransformersTests:
    version = transformers.__version__
    folder = fetch_tests_folder(version)
    _check_test_dependencies()
    # test_configuration_common.py calls direct_transformers_import(tests/), which executes tests/__init__.py
    (folder / "__init__.py").touch(exist_ok=True)
    _register_package(PACKAGE, folder)

    standins = {}
    for dotted, standin_name in STANDINS.items():
        relative = dotted.replace(".", "/") + ".py"
        if (folder / relative).is_file():
            continue
        subpackage, _, _ = dotted.rpartition(".")
        _register_package(f"{PACKAGE}.{subpackage}", folder / subpackage)
        standin = importlib.import_module(standin_name)
        reason = standin.MISSING_REASON.format(version=version)
        sys.modules[f"{PACKAGE}.{dotted}"] = standin
        standins[relative] = reason

    try:
        with warnings.catch_warnings():
            # transformers registers its pytest marks (flash_attn_test, torch_compile_test, ...) in its own conftest
            warnings.filterwarnings("ignore", message="Unknown pytest.mark", category=UserWarning)
            modeling_common = importlib.import_module(f"{PACKAGE}.test_modeling_common")
            configuration_common = importlib.import_module(f"{PACKAGE}.test_configuration_common")
            generation_utils = importlib.import_module(f"{PACKAGE}.generation.test_utils")
    except ImportError as error:
        raise MixinsUnavailable(f"transformers {version}'s common tests do not import here: {error!r}") from error
    if "generation/test_utils.py" in standins:
        generation_utils.GenerationTesterMixin.generation_tests_missing_reason = standins["generation/test_utils.py"]
    return TransformersTests(version, folder, modeling_common, configuration_common, generation_utils, standins)
