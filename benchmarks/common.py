"""What the benchmarks share: the description of the machine they ran on, and the reports they print.

The machine: `machine_description` (the facts a report records, as a dict), `machine_summary` (the same machine in
one line, as results tables quote it), `cpu_model_name` and `load_average`. The reports: a `Report` of `Row`s, each
row holding the samples of every candidate aligned by pair and reading as the median and the median of the per-pair
ratios ours / Marian, rendered by `render_markdown` and `report_json` and printed (and written) by `publish`; with
`command_line` (the command that reproduces the run) and `log` (progress on stderr).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shlex
import socket
import statistics
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from datetime import datetime
from pathlib import Path

import torch
import transformers

MIB = 2**20


# ------------------------------------------------------------------------------------------------ machine


def machine_description(device: str) -> dict[str, str]:
    """The machine, the libraries and the load as a report records them; with the GPU's name on "cuda"."""
    description = {
        "processor": platform.processor() or platform.machine(),
        "cpu_model": cpu_model_name(),
        "cpu_count": str(os.cpu_count()),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "threads": str(torch.get_num_threads()),
        "python": platform.python_version(),
        "load_average_at_start": load_average(),
    }
    if device == "cuda":
        description["gpu"] = torch.cuda.get_device_name()
    return description


def machine_summary() -> str:
    """The GPU, or else the CPU's model and the widest vector instructions torch uses on it, in one line: a
    training recipe's hour holds as many updates as the CPU allows, and two '2-CPU' machines (AMD EPYC with AVX2,
    Intel Xeon with AVX512) differed 1.5-2.2x a step in the Multi30k runs on record (0.67 vs 0.45 s with
    vocabulary 8000, 0.88 vs 0.40 s with 5000)."""
    if torch.cuda.is_available():
        return f"{torch.cuda.get_device_name()}, torch {torch.__version__}"
    return (
        f"{cpu_model_name()} ({torch.backends.cpu.get_cpu_capability()}), {os.cpu_count()} CPUs, "
        f"torch {torch.__version__}, {torch.get_num_threads()} threads"
    )


def load_average() -> str:
    """1-minute load average: above the thread count means something else competed for the cores."""
    return f"{os.getloadavg()[0]:.2f}" if hasattr(os, "getloadavg") else "n/a"


def cpu_model_name() -> str:
    try:
        with open("/proc/cpuinfo") as cpuinfo:
            for line in cpuinfo:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


# ------------------------------------------------------------------------------------------------ reports


@dataclass
class Row:
    """One measured quantity: samples per candidate (aligned by pair) and how to read it."""

    label: str
    unit: str
    higher_is_better: bool
    samples: dict[str, list[float]]

    def median(self, name: str) -> float:
        return statistics.median(self.samples[name])

    def pair_ratios(self, numerator: str = "ours", denominator: str = "marian") -> list[float]:
        return [a / b for a, b in zip(self.samples[numerator], self.samples[denominator], strict=True)]

    def ratio(self, numerator: str = "ours", denominator: str = "marian") -> float:
        """Median of the per-pair ratios `numerator` / `denominator` (Marian): drift that hits both members of a pair
        cancels."""
        return statistics.median(self.pair_ratios(numerator, denominator))

    def ratio_cell(self, numerator: str = "ours", denominator: str = "marian") -> str:
        """The median ratio, with the range of the per-pair ratios when there are several pairs; empty when
        either was not measured in this row."""
        if numerator not in self.samples or denominator not in self.samples:
            return ""
        ratios = self.pair_ratios(numerator, denominator)
        spread = f" [{min(ratios):.2f}-{max(ratios):.2f}]" if len(ratios) > 1 else ""
        better = "higher" if self.higher_is_better else "lower"
        return f"{self.ratio(numerator, denominator):.2f}{spread} ({better} is better)"


@dataclass
class Report:
    """The results of one run. `title`, `setup` (lines saying what was measured and how) and `columns` (candidate
    name -> column header, in column order) are only for the Markdown; `args.json`, when set, is where `publish`
    writes the JSON."""

    args: argparse.Namespace
    machine: dict[str, str]
    parameters: dict[str, int]
    title: str
    setup: list[str]
    columns: dict[str, str]
    rows: list[Row] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    # candidate -> header of a ratio column, candidate / Marian
    ratio_columns: dict[str, str] = field(default_factory=lambda: {"ours": "ours / Marian"})
    # header -> (numerator, denominator) of a ratio column between two other candidates
    other_ratios: dict[str, tuple[str, str]] = field(default_factory=dict)


def format_value(value: float, unit: str) -> str:
    if unit == "MiB":
        return f"{value / MIB:,.1f}"
    if unit == "%":
        return f"{value:.1f}"
    return f"{value:,.0f}"


def render_markdown(report: Report) -> str:
    machine = report.machine
    candidates = [name for name in report.columns if any(name in row.samples for row in report.rows)]
    ratios = [name for name in report.ratio_columns if any(name in row.samples for row in report.rows)]
    headers = ["Measurement", *(report.columns[name] for name in candidates)]
    headers += [report.ratio_columns[name] for name in ratios]
    others = {
        header: pair
        for header, pair in report.other_ratios.items()
        if any(set(pair) <= set(row.samples) for row in report.rows)
    }
    headers += list(others)
    lines = [
        f"### {report.title}",
        "",
        f"- Date: {datetime.now().astimezone().strftime('%Y-%m-%d %H:%M %Z')}",
        f"- Machine: {machine['processor']} ({machine['cpu_model']}), {machine['cpu_count']} CPUs"
        + (f", {machine['gpu']}" if "gpu" in machine else "")
        + f", torch {machine['torch']}, transformers {machine['transformers']}, {machine['threads']} threads; "
        f"1-min load average {machine['load_average_at_start']} at start, {machine['load_average_at_end']} at end",
        f"- Command: `{command_line()}`",
        *report.setup,
        "",
        "| " + " | ".join(headers) + " |",
        "|" + "---|" + "---:|" * (len(headers) - 1),
    ]
    for row in report.rows:
        cells = [format_value(row.median(name), row.unit) if name in row.samples else "" for name in candidates]
        cells += [row.ratio_cell(name) for name in ratios]
        cells += [row.ratio_cell(*pair) for pair in others.values()]
        lines.append(f"| {row.label} ({row.unit}) | " + " | ".join(cells) + " |")
    lines += ["", *(f"- {note}" for note in report.notes)]
    return "\n".join(lines)


def report_json(report: Report) -> dict:
    return {
        "date": datetime.now().astimezone().isoformat(timespec="seconds"),
        "command": command_line(),
        "machine": report.machine,
        "arguments": {
            key: (str(value) if isinstance(value, Path) else value) for key, value in vars(report.args).items()
        },
        "parameters": report.parameters,
        "rows": [
            {
                **asdict(row),
                "median": {name: row.median(name) for name in row.samples},
                "ours_over_marian": row.ratio(),
                "ours_over_marian_per_pair": row.pair_ratios(),
                "over_marian": {name: row.ratio(name) for name in report.ratio_columns if name in row.samples},
                "other_ratios": {
                    header: row.ratio(*pair)
                    for header, pair in report.other_ratios.items()
                    if set(pair) <= set(row.samples)
                },
            }
            for row in report.rows
        ],
        "notes": report.notes,
    }


def publish(report: Report) -> None:
    """Print the Markdown table and, with --json, write the results."""
    print(render_markdown(report))
    if report.args.json:
        report.args.json.write_text(json.dumps(report_json(report), indent=2) + "\n")
        log(f"wrote {report.args.json}")


def command_line() -> str:
    """The command that ran: `python -m benchmarks.NAME ...` for a module run with -m, else `python SCRIPT ...`."""
    spec = getattr(sys.modules["__main__"], "__spec__", None)
    words = (
        ["python", *sys.argv] if spec is None else ["python", "-m", spec.name.removesuffix(".__main__"), *sys.argv[1:]]
    )
    return " ".join(shlex.quote(word) for word in words)


def free_port() -> int:
    """A port of 127.0.0.1 that nothing listens on now (the system picks it)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def serve_folder(folder: Path) -> tuple[subprocess.Popen, int]:
    """`python -m http.server` on 127.0.0.1 at a free port, as the pages' READMEs say to serve them, once it accepts
    connections: (server, port)."""
    port = free_port()
    server = subprocess.Popen(
        [sys.executable, "-m", "http.server", str(port), "--bind", "127.0.0.1", "-d", str(folder)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    for _ in range(100):
        with socket.socket() as client:
            if client.connect_ex(("127.0.0.1", port)) == 0:
                return server, port
        time.sleep(0.1)
    server.terminate()
    raise RuntimeError("http.server did not start")


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)
