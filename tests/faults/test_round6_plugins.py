"""Reliability round 6: one bad third-party plugin fails alone, and reading imports no plugin code.
Distributions are metadata folders on PYTHONPATH (tests/helpers/fake_distributions.py); every
command runs as a user runs it, in its own process: two distributions declaring one name refuse
only a grid that names it; a plugin whose declaration does not load is one warning in `list
methods` (rc 0); and `status`, `report`, `export` and `site` on a working plugin's runs, with a
broken plugin installed beside it, read them as current and import neither plugin's modules."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from fake_distributions import install_fake_distribution
from tiny_grid import write_tiny_grid

REPO = Path(__file__).resolve().parents[2]
HELPERS = REPO / "tests" / "helpers"


def _env(site: Path) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(site), str(REPO), str(HELPERS)])}


def _protobench(site: Path, *argv: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "benchmark.cli", *argv], cwd=cwd, env=_env(site),
                          capture_output=True, text=True, timeout=600)


def test_a_name_two_distributions_declare_refuses_only_the_grids_that_name_it(tmp_path: Path) -> None:
    site = tmp_path / "site"
    install_fake_distribution(site, "lab-one", "0.1", "labone", {"shared": "One"})
    install_fake_distribution(site, "lab-two", "0.2", "labtwo", {"shared": "Two"})
    builtin = _protobench(site, "plan", str(REPO / "benchmark" / "grids" / "demo.toml"), cwd=tmp_path)
    assert builtin.returncode == 0, builtin.stderr
    grid = write_tiny_grid(tmp_path / "shared.toml", "shared", tmp_path / "birds", method="shared")
    named = _protobench(site, "plan", str(grid), cwd=tmp_path)
    assert named.returncode == 2 and "Traceback" not in named.stderr
    assert "'shared' is declared by two installed distributions, lab-one 0.1 and lab-two 0.2" in named.stderr


def test_a_plugin_that_does_not_load_is_one_warning_and_the_rest_is_listed(tmp_path: Path) -> None:
    site = tmp_path / "site"
    install_fake_distribution(site, "lab-broken", "0.1", "labbroken", {"broken": "Broken"}, spec_attr="DECLARATON")
    install_fake_distribution(site, "lab-good", "0.3", "labgood", {"goodm": "Good method"})
    done = _protobench(site, "list", "methods", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "goodm" in done.stdout and "vmfproto" in done.stdout and "broken" not in done.stdout
    assert done.stderr.count("warning:") == 1 and "Traceback" not in done.stderr
    assert ("protobench.methods entry point 'broken' = 'labbroken.spec_broken:DECLARATON' of lab-broken 0.1 does "
            "not load (AttributeError") in done.stderr


@pytest.fixture(scope="module")
def plugin_runs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A working plugin's finished run (written by a process that imports it, as `run` does), and
    a site where that plugin has a marker in its declaration module and a broken plugin sits beside."""
    root = tmp_path_factory.mktemp("plugin-runs")
    site, marker = root / "site", root / "marker"
    mark = f"import pathlib; pathlib.Path({str(marker)!r}).mkdir(exist_ok=True); " \
           "pathlib.Path({0!r}, __name__).touch()".format(str(marker))
    install_fake_distribution(site, "lab-good", "0.3", "labgood", {"goodm": "Good method"}, prelude=mark)
    install_fake_distribution(site, "lab-broken", "0.1", "labbroken", {"broken": "Broken"}, spec_attr="DECLARATON",
                              prelude=mark)
    writer = ("from pathlib import Path; from reports_support import write_run\n"
              "from benchmark.run.provenance import providers\n"
              f"path = write_run(Path({str(root / 'runs' / 'grid')!r}), 'r0', method='goodm', J=2, seed=0, "
              "**providers('goodm', 'dinov2_vits14', 'synthbirds'))\n"
              "import json; (path.parent / 'spec.json').write_text(json.dumps(json.loads(path.read_text())['spec']))\n")
    done = subprocess.run([sys.executable, "-c", writer], env=_env(site), capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    result = json.loads((root / "runs" / "grid" / "r0" / "result.json").read_text())
    assert result["method_provider"] == {"distribution": "lab-good", "version": "0.3",
                                         "adapter": "labgood.model:CosinePrototypes"}
    import shutil

    shutil.rmtree(marker)  # the writer imported the plugin; the readers must not
    return site, root


@pytest.mark.parametrize("command", ["status", "report", "export", "site"])
def test_reading_a_plugins_runs_imports_no_plugin_and_reads_them_current(plugin_runs, command: str,
                                                                         tmp_path: Path) -> None:
    site, root = plugin_runs
    argv = {"status": ["status", "runs", "--json"], "report": ["report", "runs"],
            "export": ["export", "runs", "--out", str(tmp_path / "x.csv")],
            "site": ["site", "runs", "--out", str(tmp_path / "site")]}[command]
    done = _protobench(site, *argv, cwd=root)
    assert done.returncode == 0, done.stderr
    assert not (root / "marker").exists(), sorted(p.name for p in (root / "marker").iterdir())
    assert "not installed here" not in done.stderr + done.stdout and "stale" not in done.stderr
    assert "unverifiable" not in done.stderr + done.stdout
    if command == "status":
        (record,) = json.loads(done.stdout)
        assert record["stale"] is None and record["code"] == "current · lab-good 0.3", record
    if command == "report":
        assert "Good method" in done.stdout


def _lock_both_sources(package: Path, result: dict) -> None:
    """A probe lock in ``package`` recording the result's source and the package's current one
    with one behaviour and one blind digest."""
    import numpy as np

    from benchmark.behaviour.lock import Lock, MethodLock, SourceEntry, write_lock
    from benchmark.run.identity import _source_digest, harness_files, method_source_files

    current = _source_digest({**method_source_files("labgood.model", "goodm"), **harness_files()})
    entry = SourceEntry("b0", "blind", 0.0, "2026-12-07")
    golden = {"default": {"logits": np.zeros((2, 2))}}
    write_lock(Lock(package / "probe-lock.json", {"goodm": MethodLock(
        "float64", {"default": {}}, {"b0": {"golden": golden}},
        {result["method_fingerprint"]: entry, current: entry})}))


def test_an_edited_plugin_reads_changed_and_an_uninstalled_one_unverifiable(plugin_runs, tmp_path: Path) -> None:
    """An edit reads changed by the byte rule, or current where the package's probe lock records
    the edited source with the same behaviour (read from disk: the plugin is never imported)."""
    import shutil

    from benchmark.run.identity import code_state, staleness
    from methods import plugins

    site, root = plugin_runs
    copy = Path(shutil.copytree(site, tmp_path / "site"))
    result = json.loads((root / "runs" / "grid" / "r0" / "result.json").read_text())
    sys.path.insert(0, str(copy))
    plugins.clear_cache()
    try:
        assert staleness(result) is None
        model = copy / "labgood" / "model.py"
        model.write_text(model.read_text() + "\n# an edit\n")
        assert staleness(result).startswith("the method's code changed since it ran (its package keeps no probe lock")
        _lock_both_sources(copy / "labgood", result)  # as `protobench check-code goodm` records a neutral edit
        state = code_state(result)
        assert state.stale is None and state.note.startswith("code refactored since; behaviour identical"), state
        shutil.rmtree(copy / "lab_good-0.3.dist-info")
        plugins.clear_cache()
        assert "which is not installed here: pip install lab-good==0.3" in staleness(result)
    finally:
        sys.path.remove(str(copy))
        plugins.clear_cache()
    assert "labgood" not in sys.modules and "labgood.spec_goodm" not in sys.modules
