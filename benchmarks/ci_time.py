"""How long CI takes: `.ci/run` on a clean clone of a commit, start to end, as the before-stop hook runs it.

The clone gets the shared data linked beside it and a torch.compile cache of its own (a fresh machine has none, and a
warm cache hides a minute of compiling). Prints the date, the machine, the commit, when each step `.ci/run` announces
started, each pytest pass's counts and time with its slowest tests, and the time outside pytest (the total less the
passes: installs, npm packages, Chromium). The whole output of `.ci/run` is kept in a log beside the report.

    python -m benchmarks.ci_time                                  # HEAD of this checkout
    python -m benchmarks.ci_time --commit 7eeb62a --durations 40  # an older commit, its 40 slowest tests a pass
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

from .common import command_line, log, machine_summary

REPOSITORY = Path(__file__).resolve().parents[1]

# "+ [125 s] npm ci --ignore-scripts": a step of .ci/run and the second it started at
STEP = re.compile(r"^\+ \[(\d+) s\] (.*)$")
SLOWEST_HEADER = re.compile(r"^=+ slowest (\d+) durations =+$")
DURATION = re.compile(r"^([\d.]+)s (setup|call|teardown)\s+(\S.*)$")
# "2028 passed, 206 skipped, 143 warnings, 4342 subtests passed in 1019.32s (0:16:59)"
SUMMARY = re.compile(r"^=*\s*(\d+ (?:passed|failed|errors?|skipped|deselected)\b.*?) in ([\d.]+)s\b")
EXIT = re.compile(r"^ci_time: \.ci/run exited (-?\d+) after ([\d.]+) s$")


@dataclass
class SlowTest:
    seconds: float
    phase: str
    test: str


@dataclass
class PytestPass:
    counts: str
    seconds: float
    slowest: list[SlowTest]


@dataclass
class CiRun:
    steps: list[tuple[int, str]] = field(default_factory=list)
    passes: list[PytestPass] = field(default_factory=list)
    exit_status: int | None = None
    total_seconds: float | None = None

    @property
    def outside_pytest_seconds(self) -> float | None:
        if self.total_seconds is None:
            return None
        return self.total_seconds - sum(run.seconds for run in self.passes)


def parse_log(text: str) -> CiRun:
    """The steps, pytest passes and exit of a log of `.ci/run` as this module writes it. A pass's slowest tests are
    the durations table printed before its summary line."""
    run = CiRun()
    slowest: list[SlowTest] = []
    in_durations = False
    for line in text.splitlines():
        if in_durations:
            duration = DURATION.match(line)
            if duration:
                slowest.append(SlowTest(float(duration[1]), duration[2], duration[3].strip()))
                continue
            # pytest closes the table with a note on the hidden short ones, or with the summary itself
            in_durations = False
        if SLOWEST_HEADER.match(line):
            in_durations, slowest = True, []
        elif step := STEP.match(line):
            run.steps.append((int(step[1]), step[2]))
        elif summary := SUMMARY.match(line):
            run.passes.append(PytestPass(summary[1], float(summary[2]), slowest))
            slowest = []
        elif exit_line := EXIT.match(line):
            run.exit_status, run.total_seconds = int(exit_line[1]), float(exit_line[2])
    return run


def escape_cell(text: str) -> str:
    return text.replace("|", "\\|")


def minutes(seconds: float) -> str:
    return f"{seconds:,.0f} s ({seconds / 60:.1f} min)"


def render_markdown(run: CiRun, commit: str, log_path: Path, machine: str) -> str:
    lines = [
        "### CI: `.ci/run` on a clean clone",
        "",
        f"- Date: {datetime.now().astimezone().strftime('%Y-%m-%d %H:%M %Z')}",
        f"- Machine: {machine}",
        f"- Commit: {commit}",
        f"- Command: `{command_line()}` (the whole output: {log_path})",
    ]
    if run.total_seconds is None:
        lines.append("- Total: `.ci/run` did not finish")
    else:
        lines.append(f"- Total: {minutes(run.total_seconds)}, exit status {run.exit_status}")
    if run.steps:
        lines += ["", "| Started at (s) | Step |", "|---:|---|"]
        lines += [f"| {second:,} | {escape_cell(text)} |" for second, text in run.steps]
    lines += ["", "| Part | Tests | Time (s) |", "|---|---|---:|"]
    for number, pytest_pass in enumerate(run.passes, start=1):
        lines.append(f"| pytest pass {number} | {pytest_pass.counts} | {pytest_pass.seconds:,.1f} |")
    if run.outside_pytest_seconds is not None:
        lines.append(f"| outside pytest | | {run.outside_pytest_seconds:,.1f} |")
    for number, pytest_pass in enumerate(run.passes, start=1):
        if not pytest_pass.slowest:
            continue
        lines += [
            "",
            f"#### Pass {number}: the {len(pytest_pass.slowest)} slowest",
            "",
            "| Time (s) | Phase | Test |",
            "|---:|---|---|",
        ]
        lines += [f"| {slow.seconds:.2f} | {slow.phase} | `{slow.test}` |" for slow in pytest_pass.slowest]
    return "\n".join(lines)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--repository", type=Path, default=REPOSITORY, help="the git repository to clone (default: this checkout)"
    )
    parser.add_argument("--commit", default="HEAD", help="the commit of the repository to clone and check")
    parser.add_argument(
        "--shared",
        type=Path,
        default=REPOSITORY.parent / "shared",
        help="the shared data folder, linked beside the clone as ../shared (default: the one beside this checkout)",
    )
    parser.add_argument("--durations", type=int, default=20, help="how many of each pass's slowest tests to print")
    parser.add_argument(
        "--log",
        type=Path,
        default=None,
        help="where to keep the output of .ci/run (default: ci_time-COMMIT.log in the temp folder)",
    )
    return parser


def git(repository: Path, *arguments: str) -> str:
    return subprocess.run(
        ["git", *arguments], cwd=repository, check=True, capture_output=True, text=True
    ).stdout.strip()


def installed_package_folder() -> Path | None:
    """The folder `vanilla_transformer` imports from in a fresh interpreter (an editable install points into a
    checkout)."""
    found = subprocess.run(
        [sys.executable, "-I", "-c", "import vanilla_transformer; print(vanilla_transformer.__file__)"],
        capture_output=True,
        text=True,
    )
    return Path(found.stdout.strip()).parent if found.returncode == 0 else None


def run_ci(repository: Path, commit: str, shared: Path, durations: int, log_path: Path) -> None:
    """Clone, link, run `.ci/run` with its output streamed into the log, and end the log with the exit line."""
    package_before = installed_package_folder()
    with tempfile.TemporaryDirectory(prefix="ci_time-") as folder:
        clone = Path(folder) / "main"
        subprocess.run(["git", "clone", "-q", str(repository), str(clone)], check=True)
        subprocess.run(["git", "checkout", "-q", commit], cwd=clone, check=True)
        (Path(folder) / "shared").symlink_to(shared.resolve())
        environment = {
            **os.environ,
            "TORCHINDUCTOR_CACHE_DIR": str(Path(folder) / "torchinductor"),
            # .ci/run puts its own --durations first; the later one wins
            "PYTEST_ADDOPTS": f"--durations={durations}",
        }
        started = time.perf_counter()
        with open(log_path, "w") as output:
            process = subprocess.Popen(
                ["bash", ".ci/run"], cwd=clone, env=environment, stdout=subprocess.PIPE, stderr=subprocess.STDOUT
            )
            for line in process.stdout:
                output.write(line.decode(errors="replace"))
                output.flush()
            status = process.wait()
            output.write(f"ci_time: .ci/run exited {status} after {time.perf_counter() - started:.1f} s\n")
    # .ci/run installs the clone in editable mode, into the folder just removed: put back the install it replaced
    if package_before is not None and installed_package_folder() != package_before:
        project = package_before.parent
        subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "-e", str(project)], check=True)


def main(argv: list[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    if not (args.shared / "data").is_dir():
        raise SystemExit(f"--shared {args.shared} holds no data/ folder: pass the shared folder the tests read")
    if shutil.which("git") is None:
        raise SystemExit("git is not installed: the benchmark clones the repository")
    commit = git(args.repository, "rev-parse", "--verify", f"{args.commit}^{{commit}}")
    description = git(args.repository, "log", "-1", "--format=%h %s", commit)
    log_path = args.log or Path(tempfile.gettempdir()) / f"ci_time-{commit[:7]}.log"
    log(f"running .ci/run on a clone of {description}; its output goes to {log_path}")
    run_ci(args.repository, commit, args.shared, args.durations, log_path)
    print(render_markdown(parse_log(log_path.read_text()), description, log_path, machine_summary()))


if __name__ == "__main__":
    main()
