"""Every lower bound that pyproject.toml declares is one that CI installs and tests (.ci/run's second pass)."""

import re
import tomllib
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

REPO = Path(__file__).resolve().parents[1]


def declared_lower_bounds() -> dict[str, Version]:
    project = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))
    requirements = list(project["project"]["dependencies"])
    for extra in project["project"]["optional-dependencies"].values():
        requirements += extra
    requirements += project["build-system"]["requires"]
    bounds = {}
    for requirement in map(Requirement, requirements):
        for specifier in requirement.specifier:
            if specifier.operator == ">=":
                bounds[canonicalize_name(requirement.name)] = Version(specifier.version)
    return bounds


def pinned_lowest() -> dict[str, Version]:
    pins = {}
    for line in (REPO / ".ci" / "lowest.txt").read_text(encoding="utf-8").splitlines():
        if line.strip() and not line.startswith("#"):
            name, version = re.fullmatch(r"([\w.-]+)==([\w.]+)", line.strip()).groups()
            pins[canonicalize_name(name)] = Version(version)
    return pins


def test_every_lower_bound_is_pinned_for_the_lowest_versions_pass():
    bounds, pins = declared_lower_bounds(), pinned_lowest()
    assert {"torch", "transformers", "accelerate", "datasets", "tokenizers", "huggingface-hub"} <= set(bounds)
    assert bounds == pins


def test_ci_runs_the_readme_test_command_and_the_lowest_versions_pass():
    script = (REPO / ".ci" / "run").read_text(encoding="utf-8")
    assert "README.md" in script and ".ci/lowest.txt" in script
