"""A method published as its own package: installed with pip (entry point ``protobench.methods``),
it runs by its registry name without PYTHONPATH, its result records the distribution and version
that provided it, and the readers verify it like a suite method (never "unverifiable")."""
from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from plugin_package import DISTRIBUTION, METHOD, PYPROJECT, SPEC, VERSION, write_plugin_package
from tiny_grid import write_adapter_grid

from methods import plugins

REPO = Path(__file__).resolve().parents[2]


def _pip(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "pip", *args], capture_output=True, text=True, timeout=600)


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """The package pip-installed into this interpreter's environment (no network: its only build
    requirement, setuptools, is there), uninstalled afterwards."""
    source = write_plugin_package(tmp_path_factory.mktemp("cosine-plugin"))
    done = _pip("install", "--no-deps", "--no-build-isolation", "--no-index", "-q", str(source))
    assert done.returncode == 0, done.stderr
    plugins.clear_cache()
    try:
        yield
    finally:
        _pip("uninstall", "-y", "-q", DISTRIBUTION)
        plugins.clear_cache()


def _protobench(*argv: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """The command as a user runs it: the suite and the package installed, no PYTHONPATH."""
    env = {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}
    return subprocess.run([sys.executable, "-m", "benchmark.cli", *argv], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=900)


def test_an_installed_method_runs_by_name_and_reads_as_verified(installed: None, tmp_path: Path) -> None:
    grid = write_adapter_grid(tmp_path / "plugin.toml", tmp_path / "synthbirds", method=METHOD)
    done = _protobench("run", str(grid), "--runs-dir", "runs", "--only", "seed=0", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    (result_file,) = (tmp_path / "runs" / "custom").glob("*/result.json")
    result = json.loads(result_file.read_text())
    assert result["method_provider"] == {"distribution": DISTRIBUTION, "version": VERSION,
                                         "adapter": "cosine_plugin.model:CosinePrototypes"}
    assert result["method_display_name"] == "Cosine prototypes"

    report = _protobench("report", "runs/custom", cwd=tmp_path)
    assert report.returncode == 0, report.stderr
    assert "Cosine prototypes" in report.stdout
    assert "unverifiable" not in report.stderr and "stale" not in report.stderr, report.stderr
    status = _protobench("status", "runs/custom", "--json", cwd=tmp_path)
    (record,) = json.loads(status.stdout)
    assert record["state"] == "done" and record["stale"] is None and record["rescore"] is None, record


def test_the_guides_package_is_this_one_and_its_commands_run(installed: None) -> None:
    """docs/guides/adding-a-method.md shows this package's pyproject and declaration, and its
    commands run once the package is installed."""
    guide = (REPO / "docs" / "guides" / "adding-a-method.md").read_text(encoding="utf-8")
    section = guide.split("## Publishing a method as a package")[1].split("\n## ")[0]
    toml, python, bash = re.findall(r"^```\w+\n(.*?)^```", section, re.M | re.S)
    shown = lambda block: [l.split("  #")[0].rstrip() for l in block.splitlines() if l and not l.startswith("#")]  # noqa: E731
    assert all(line in PYPROJECT.splitlines() for line in shown(toml)), toml
    assert all(line.strip() in {l.strip() for l in SPEC.splitlines()} for line in shown(python)), python
    commands = [line for line in shown(bash) if line.startswith("protobench ")]
    assert len(commands) == 2
    for command in commands:
        done = _protobench(*shlex.split(command)[1:], cwd=REPO)
        assert done.returncode == 0, (command, done.stderr)
        assert METHOD in done.stdout or "runs" in done.stdout, done.stdout


def test_a_result_of_a_package_not_installed_here_reads_unverifiable_with_the_install_command(
        installed: None, tmp_path: Path) -> None:
    from benchmark.run.identity import staleness

    result = {"run_id": "0" * 12, "method_fingerprint": "0" * 64,
              "method_provider": {"distribution": "lab-gone", "version": "3.1"},
              "spec": {"dataset": "synthbirds", "backbone": "dinov2_vits14", "method": "gone_method",
                       "prototypes_per_class": 2}}
    reason = staleness(result)
    assert reason is not None and reason.startswith("unverifiable") and "pip install lab-gone==3.1" in reason
