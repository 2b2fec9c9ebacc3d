"""The docs site cannot rot: its reference pages are generated from the code and cover all of it
(every command and option of the parser, every RunSpec field, every registered method with its
hyperparameters, every recorded metric), every method has a protocol page, every shell line of
the docs is one a test runs, and ``mkdocs build --strict`` passes (broken links, anchors and
missing snippets fail it)."""
from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
from dataclasses import fields
from importlib.util import find_spec
from pathlib import Path

import pytest

from benchmark.cli import build_parser
from benchmark.cli.docs_catalog import METRIC_MODULES, grid_keys, method_section, methods_reference, metric_keys, metrics_reference
from benchmark.cli.docs_cli import cli_reference, documented_actions, subcommands, table_cell
from benchmark.config import RunSpec
from benchmark.spec_fields import OPERATIONAL_FIELDS
from methods import contract
from methods.registry import get_method_class, list_methods, method_hyperparameters
from methods.space import LogUniform, describe

REPO = Path(__file__).resolve().parents[2]


def _section(text: str, command: str) -> str:
    """The part of the CLI reference about ``protobench COMMAND``: its heading to the next one."""
    start = text.index(f"## `protobench {command}`\n")
    following = text.find("\n## `protobench ", start + 1)
    return text[start:following if following >= 0 else len(text)]


def _uncovered(parser: argparse.ArgumentParser, text: str) -> list[str]:
    """Every command or argument of ``parser`` that the reference ``text`` does not show."""
    missing = []
    for name, sub, _ in subcommands(parser):
        if f"## `protobench {name}`\n" not in text:
            missing.append(f"command {name}")
            continue
        section = _section(text, name)
        for action in documented_actions(sub):
            shown = action.option_strings or [action.metavar if isinstance(action.metavar, str) else action.dest]
            missing += [f"{name} {s}" for s in shown if s not in section]
            missing += [f"{name} {shown[0]} choice {c}" for c in (action.choices or []) if f"`{c}`" not in section]
    return missing


def test_the_cli_reference_lists_every_command_and_option_of_the_parser():
    parser = build_parser()
    assert len(list(subcommands(parser))) >= 15
    text = cli_reference(parser)
    assert _uncovered(parser, text) == []
    assert {"tune", "site", "bundle"} <= {name for name, _, _ in subcommands(parser)}
    assert "bundle verify DIR" in _section(text, "bundle")  # a verb of its positional argument


def test_an_option_or_command_added_to_the_parser_appears_in_the_reference():
    parser = build_parser()
    run = next(sub for name, sub, _ in subcommands(parser) if name == "run")
    run.add_argument("--an-option-added-later", metavar="N", help="a help text added later")
    commands = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    later = commands.add_parser("added-later", help="a command added later")
    later.add_argument("thing", choices=["x", "y"])
    text = cli_reference(parser)
    assert _uncovered(parser, text) == []
    assert "--an-option-added-later N" in _section(text, "run") and "a help text added later" in text
    assert "a command added later" in _section(text, "added-later")
    # and the coverage check itself notices an option the text leaves out
    assert _uncovered(parser, text.replace("--an-option-added-later", "--renamed")) == ["run --an-option-added-later"]


def test_the_grid_keys_reference_lists_every_runspec_field_and_whether_it_changes_the_run_id():
    text = grid_keys()
    rows = {m.group(1): m.group(2) for m in re.finditer(r"^\| `(\w+)` \|.*\| (yes|no \(operational\)) \|", text, re.M)}
    assert set(rows) == {f.name for f in fields(RunSpec)}
    assert {k for k, v in rows.items() if v != "yes"} == set(OPERATIONAL_FIELDS)
    assert "| `seed` | `int` | `0` | yes |" in text


def test_the_methods_reference_lists_every_method_with_its_hyperparameters_and_defaults():
    text = methods_reference()
    for name in list_methods():
        section = text[text.index(f"## `{name}`"):]
        section = section[:section.find("\n## ", 1) if "\n## " in section[1:] else len(section)]
        for key, default in method_hyperparameters(get_method_class(name)).items():
            assert f"| `{key}` | `{default!r}` |" in section, (name, key)


def test_a_declared_search_space_appears_beside_the_defaults(monkeypatch):
    dimension = LogUniform(1e-3, 1e-2)  # not ProtoPNet's own range: the row must follow the class
    cls = get_method_class("protopnet")
    monkeypatch.setattr(cls, "search_space", {"add_on_lr": dimension})
    section = method_section("protopnet")
    assert "| hyperparameter | default | search space |" in section
    row = next(line for line in section.splitlines() if line.startswith("| `add_on_lr` |"))
    assert row.count("|") == 4 and row.split("|")[3].strip() == table_cell(describe(dimension)) != "", row


def test_every_declared_search_space_is_in_the_methods_reference():
    text = methods_reference()
    declared = {n: get_method_class(n).search_space for n in list_methods() if getattr(get_method_class(n), "search_space", None)}
    assert {"pipnet", "comfe", "vmfproto"} <= set(declared)
    for name, space in declared.items():
        section = method_section(name)
        assert section in text
        for key, dimension in space.items():
            assert any(line.startswith(f"| `{key}` |") and line.split("|")[3].strip() == table_cell(describe(dimension))
                       for line in section.splitlines()), (name, key)


def test_the_metrics_reference_covers_every_recorded_metric_with_its_module():
    text = metrics_reference()
    for key in metric_keys():
        assert f"## `{key}`" in text
        assert (REPO / (METRIC_MODULES[key].replace(".", "/") + ".py")).is_file(), key


def test_every_registered_method_has_a_protocol_page():
    missing = [n for n in list_methods() if not (REPO / "docs" / "protocol" / f"{n}.md").is_file()]
    assert missing == [], f"write docs/protocol/<method>.md (what the adapter implements, its deviations) for {missing}"


def test_the_readme_is_a_short_front_door_whose_links_resolve():
    text = (REPO / "README.md").read_text(encoding="utf-8")
    assert len(text.splitlines()) <= 150
    first_block = re.search(r"^```bash\n(.*?)^```", text, re.M | re.S).group(1)
    assert [line.split()[:2] for line in first_block.splitlines()] == [["make", "demo"], ["make", "test"]]
    targets = [t for t in re.findall(r"\]\(([^)\s]+)\)", text) if not t.startswith(("http://", "https://", "#"))]
    assert len(targets) >= 20
    missing = [t for t in targets if not (REPO / t.split("#")[0]).exists()]
    assert missing == [], missing


def _shell_lines() -> list[tuple[str, str]]:
    """(page, line) of every line of a ```bash block in the README and the docs."""
    found = []
    for page in [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]:
        for block in re.findall(r"^```bash\n(.*?)^```", page.read_text(encoding="utf-8"), re.M | re.S):
            found += [(page.relative_to(REPO).as_posix(), line.strip()) for line in block.splitlines() if line.strip()]
    return found


def test_every_shell_example_is_one_a_test_runs(capsys):
    """`protobench …` lines run in tests/cli/test_printed_commands.py (where their inputs exist);
    `make TARGET` must be a Makefile target (CI runs them); the contract check runs here."""
    targets = set(re.findall(r"^([\w-]+):", (REPO / "Makefile").read_text(encoding="utf-8"), re.M))
    lines = _shell_lines()
    assert len(lines) >= 15
    unknown = []
    for page, line in lines:
        command = re.sub(r"^(PYTHONPATH=\S+ )?(\.venv/bin/)?", "", line.split("  #")[0]).strip()
        if command.startswith("protobench ") or line.startswith("#"):  # a comment continues the line above
            continue
        if command.startswith("make "):
            assert command.split()[1] in targets, (page, line)
        elif command.startswith("pip install ./"):  # the guide's plugin package: tests/cli/test_plugin_package.py
            from plugin_package import DISTRIBUTION  # installs it with pip and runs it
            assert command.split()[2] == f"./{DISTRIBUTION}", (page, line)
        elif command.startswith("python -m methods.contract "):
            assert contract.main(command.split()[3:]) == 0, (page, line, capsys.readouterr().out)
        elif command.startswith("python -m pytest "):  # plugins of tests/helpers (tests/test_maxdiff_plugin.py runs them)
            words = command.split()[3:]
            plugins = [words[i + 1] for i, word in enumerate(words) if word == "-p"]
            paths = [w for i, w in enumerate(words) if not w.startswith("-") and (i == 0 or words[i - 1] != "-p")]
            assert plugins and all((REPO / "tests" / "helpers" / f"{name}.py").is_file() for name in plugins), (page, line)
            assert paths and all((REPO / path).exists() for path in paths), (page, line)
        else:
            unknown.append((page, line))
    assert unknown == [], "a shell example no test runs; add it to this test or to test_printed_commands"


@pytest.mark.skipif(find_spec("mkdocs") is None or find_spec("material") is None,
                    reason="mkdocs-material is not installed (pip install -e '.[docs]')")
def test_the_site_builds_strictly(tmp_path):
    """Strict build: a broken link or anchor, a missing snippet, a page outside the nav or a failing
    generator is a warning, and a warning fails."""
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    done = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
                          cwd=REPO, capture_output=True, text=True, env=env, timeout=1800)
    assert done.returncode == 0, done.stderr[-4000:]
    assert "WARNING" not in done.stderr, done.stderr[-4000:]
    cli = (tmp_path / "site" / "reference" / "cli" / "index.html").read_text(encoding="utf-8")
    assert "--rerun-stale" in cli and "<!-- generated" not in cli


def test_the_committed_reference_pages_equal_the_generated_ones() -> None:
    """docs/reference/*.md hold their generated blocks (GitHub shows them); each equals what the code
    generates now (benchmark.cli.docs_pages), the CLI reference first of all."""
    from benchmark.cli.docs_pages import REFERENCE, REFRESH_COMMAND, filled

    pages = sorted(REFERENCE.glob("*.md"))
    assert REFERENCE / "cli.md" in pages
    for page in pages:
        committed = page.read_text(encoding="utf-8")
        assert "<!-- end generated: " in committed, f"{page} holds no generated block; run `{REFRESH_COMMAND}`"
        assert filled(committed, str(page)) == committed, \
            f"{page.relative_to(REPO)} differs from the generated page; run `{REFRESH_COMMAND}` and commit it"


def test_a_changed_generator_shows_in_the_refreshed_block_only() -> None:
    from benchmark.cli.docs_pages import filled

    page = "# T\n\nintro\n\n<!-- generated: x -->\nold\n<!-- end generated: x -->\n\nafter\n"
    assert filled(page, "t.md", {"x": lambda: "new\n"}) == page.replace("old", "new")
    fresh = "# T\n\n<!-- generated: x -->\n\nafter\n"
    assert filled(fresh, "t.md", {"x": lambda: "new"}) == "# T\n\n<!-- generated: x -->\nnew\n<!-- end generated: x -->\n\nafter\n"
    with pytest.raises(KeyError, match="no generator 'y'"):
        filled("<!-- generated: y -->\n", "t.md", {"x": lambda: ""})
