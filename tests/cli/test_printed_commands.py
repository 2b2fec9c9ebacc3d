"""Every command the suite prints or documents runs as printed: the demo's "next:" lines (on two
tiny finished runs), the command-line examples of the README and of every docs page (parsed, and
run where their inputs exist here), and `report` reads back the CSV that `export` wrote."""
import os
import re
import shlex
import stat
import sys
from pathlib import Path

import pytest

from benchmark.cli import build_parser, main
from benchmark.grid import load_grid
from benchmark.cli.demo_story import print_demo_story, protobench_command
from reports.load import load_csv, load_results
from tiny_grid import write_tiny_grid

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    """A working directory holding runs/demo with two finished tiny runs (J = 2, 3)."""
    root = tmp_path_factory.mktemp("printed")
    grid_file = root / "demo.toml"
    write_tiny_grid(grid_file, "demo", root / "synthbirds", method_args={"end_to_end_epochs": 2},
                    sweep=[{"prototypes_per_class": [2, 3], "seed": [0]}])
    assert main(["run", str(grid_file), "--runs-dir", str(root / "runs")]) == 0
    return root


def run_printed(line: str) -> int:
    """Run one printed command line: its program must be what a shell finds, its arguments go to main."""
    argv = shlex.split(line.split("  #")[0])
    prefix = shlex.split(protobench_command())
    assert argv[:len(prefix)] == prefix, line
    program = Path(prefix[0])
    assert (program.is_file() and os.access(program, os.X_OK)) if "/" in prefix[0] else prefix[0] == "protobench"
    return main(argv[len(prefix):])


def test_demo_next_lines_run_as_printed(workdir, monkeypatch, capsys):
    monkeypatch.chdir(workdir)
    grid = load_grid(workdir / "demo.toml")
    dirs = [Path("runs") / grid.name / spec.run_id for spec in grid.runs]
    print_demo_story(list(grid.runs), dirs, Path("runs") / grid.name)
    out = capsys.readouterr().out
    lines = out.split("next")[1].splitlines()[1:]
    assert len(lines) == 5
    for line in lines:
        assert run_printed(line.strip()) == 0, line
    assert {"con.png", "curves.png"} <= {p.name for p in workdir.iterdir()}
    assert (workdir / "figures" / "comparison.pdf").exists()


def test_report_reads_the_csv_export_wrote(workdir, capsys):
    runs = workdir / "runs" / "demo"
    exported = workdir / "runs.csv"
    assert main(["export", str(runs), "--out", str(exported)]) == 0
    capsys.readouterr()
    assert main(["report", str(runs), "--metrics", "con,acc,epoch_seconds"]) == 0
    direct = capsys.readouterr().out
    assert main(["report", str(exported), "--metrics", "con,acc,epoch_seconds"]) == 0
    assert capsys.readouterr().out == direct
    frame, again = load_results([runs]), load_csv(exported)
    compared = [c for c in frame.columns if c != "source"]  # a CSV row's source is FILE:LINE
    for column in compared:
        assert frame[column].equals(again[column]), (column, frame[column].tolist(), again[column].tolist())


def test_the_prefix_is_what_the_shell_finds(tmp_path, monkeypatch):
    bin_dir = tmp_path / ".venv" / "bin"
    bin_dir.mkdir(parents=True)
    script = bin_dir / "protobench"
    script.write_text("#!/bin/sh\n")
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setattr(sys, "executable", str(bin_dir / "python"))
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("PATH", "/usr/bin:/bin")
    assert protobench_command() == ".venv/bin/protobench"  # after `make demo`, no venv activated
    monkeypatch.setenv("PATH", f"{bin_dir}:/usr/bin:/bin")
    assert protobench_command() == "protobench"  # an activated venv
    script.unlink()
    assert protobench_command() == f"{bin_dir / 'python'} -m benchmark.cli"  # a source tree, no install


def documented_pages() -> list[Path]:
    """The README and every page of the docs site written by hand: the reference pages are generated
    from the parser's help (their code spans quote fragments such as `protobench run --executor
    slurm`, not examples) and kept equal to it by tests/cli/test_docs_site.py."""
    generated = REPO / "docs" / "reference"
    return [REPO / "README.md", *sorted(p for p in (REPO / "docs").rglob("*.md") if generated not in p.parents)]


def documented_examples(text: str) -> list[str]:
    """`protobench …` commands of a page's code blocks (after an optional `PYTHONPATH=…` and
    `.venv/bin/`) and inline code, without the placeholders (… < [ | and upper-case words such as
    NAME) that mark a synopsis rather than an example."""
    found = re.findall(r"^(?:PYTHONPATH=\S+ )?(?:\.venv/bin/)?(protobench [^#\n]*)", text, flags=re.M)
    found += [c for c in re.findall(r"`(protobench [^`]*)`", text) if len(c.split()) > 2]  # not a bare name
    return sorted({c.strip() for c in found if not re.search(r"[…<\[|]|\b[A-Z][A-Z_]{2,}\b", c)})


def all_documented_examples() -> list[str]:
    """The examples of the README and of every docs page."""
    return sorted({c for page in documented_pages() for c in documented_examples(page.read_text(encoding="utf-8"))})


#: commands that train, need a GPU cluster or a missing dataset: parsed only (``tune`` trains its
#: trials; tests/cli/test_tune.py runs it and ``report --tuning`` on a finished study)
PARSED_ONLY = ("run", "demo", "perf", "cancel", "evaluate", "figures", "doctor", "tune", "check-code")


PLUGIN_METHOD = "cosine_plugin"  # tests/helpers/plugin_package.METHOD


def test_documented_examples_parse_and_run_where_their_inputs_exist(workdir, monkeypatch, capsys):
    examples = all_documented_examples()
    assert len(examples) >= 10, examples
    monkeypatch.chdir(workdir)
    for name in ("reports", "benchmark", "slurm"):
        if not (workdir / name).exists():
            (workdir / name).symlink_to(REPO / name)
    parser = build_parser()
    ran = []
    for example in examples:
        argv = shlex.split(example)[1:]
        try:
            parser.parse_args(argv)  # every option and choice exists
        except SystemExit as stop:  # --version and --help stop with 0, a bad option with 2
            assert stop.code == 0, (example, capsys.readouterr().err)
            continue
        paths = [a for a in argv[1:] if "/" in a and not a.startswith("-") and "=" not in a]
        inputs = [p for p in paths if not p.endswith((".tex", ".csv", ".pdf", ".png", ".json")) or Path(p).exists()]
        inputs += [value for option, value in zip(argv, argv[1:]) if option == "--perf"]  # read, never written
        if argv[0] in PARSED_ONLY or "--tuning" in argv or not all(Path(p).exists() for p in inputs):
            continue
        if PLUGIN_METHOD in example:  # needs the guide's package installed: tests/cli/test_plugin_package.py runs it
            continue
        code, err = main(argv), capsys.readouterr().err
        # a paper layout on the workdir's synthbirds runs fills no cell: exit 1, saying so
        assert code == 0 or ("--layout" in argv and "no result fills any cell" in err), (example, err)
        ran.append(example)
    assert any(c.startswith("protobench report runs/") for c in ran) and any("plan" in c for c in ran), ran
    # the demo page's next commands and the adding-a-method guide's own adapter
    assert {"protobench report runs/demo", "protobench status runs/demo --json",
            "protobench list example_adapter:CosinePrototypes"} <= set(ran), ran
    # the sharing guide's commands, in its order (sorted: bundle, bundle verify, site)
    assert {"protobench bundle runs/demo --checkpoints --out demo-bundle", "protobench bundle verify demo-bundle",
            "protobench site demo-bundle --out demo-site"} <= set(ran), ran
