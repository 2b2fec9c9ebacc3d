"""Names and suggestions: "did you mean" for a misspelt method and layout, ``--set device=…``
blamed on ``--set``, ``report --layout`` with no matching cell exits non-zero, and ``plot --cd``
prints the tables' display names."""
from __future__ import annotations

from pathlib import Path

import pytest

from benchmark.cli import main
from benchmark.errors import ProtobenchError
from benchmark.grid import parse_grid
from benchmark.cli.common import grid_overrides
from reports.layouts import get_layout
from reports_support import write_run
from tiny_grid import tiny_grid_table, write_tiny_grid


def test_a_misspelt_method_and_layout_get_a_suggestion(tmp_path: Path) -> None:
    with pytest.raises(ProtobenchError, match=r"did you mean 'protopnet'\?"):
        parse_grid(tiny_grid_table("g", tmp_path, method="protopent"), source="g.toml")
    with pytest.raises(ProtobenchError, match=r"Unknown layout 'cub_mian' \(did you mean 'cub_main'\?\)"):
        get_layout("cub_mian")


def test_set_device_is_blamed_on_set_and_the_device_option_on_itself(tmp_path: Path) -> None:
    import argparse

    for argv, blamed in ((["--set", "device=gpu"], "--set device=gpu"), (["--device", "gpu"], "--device gpu")):
        args = argparse.Namespace(set=argv[1:] if argv[0] == "--set" else [], sweep=[], data_root=None, weights=None,
                                  device=argv[1] if argv[0] == "--device" else None, no_cache=False)
        with pytest.raises(ProtobenchError) as err:
            parse_grid(tiny_grid_table("g", tmp_path), source="g.toml", overrides=grid_overrides(args))
        assert blamed in str(err.value)
        if argv[0] == "--set":
            assert "--device" not in str(err.value)


def test_report_layout_matching_no_result_exits_non_zero(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    runs = tmp_path / "runs"
    write_run(runs, "a", method="vmfproto", metrics={"acc": 80.0})
    assert main(["report", str(runs), "--layout", "cub_main"]) == 1
    err = capsys.readouterr().err
    assert "no result fills any cell of layout cub_main" in err and "synthbirds" in err
    assert main(["report", str(runs)]) == 0


def test_plot_cd_prints_display_names(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    runs = tmp_path / "runs"
    for method, base in (("vmfproto", 80.0), ("protopnet", 70.0)):
        for j in (3, 5, 7):
            write_run(runs, f"{method}{j}", method=method, J=j, metrics={"acc": base + j})
    assert main(["plot", "--cd", str(runs), "--out", str(tmp_path / "cd.png")]) == 0
    out = capsys.readouterr().out
    assert "mean ranks vMFProto 1.00, ProtoPNet 2.00" in out


def test_plan_warns_that_an_absent_relative_data_root_will_be_generated(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    write_tiny_grid(tmp_path / "grid.toml", "g", "data/synthbirds")
    assert main(["plan", "grid.toml"]) == 0
    line = next(line for line in capsys.readouterr().out.splitlines() if "data synthbirds" in line)
    assert line.startswith("[warn]") and "will be generated" in line and str(tmp_path) in line


def test_compare_by_method_prints_display_names(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    runs = tmp_path / "runs"
    for method, base in (("vmfproto", 80.0), ("protopnet", 70.0)):
        for seed in (0, 1, 2):
            write_run(runs, f"{method}{seed}", method=method, seed=seed, metrics={"acc": base + seed})
    assert main(["compare", str(runs), "--by", "method", "--baseline", "protopnet"]) == 0
    out = capsys.readouterr().out
    assert "vMFProto" in out and "ProtoPNet" in out and "vmfproto" not in out


# ---- round 5: every misspelt name gets the closest valid one; errors name where a value came from ----
@pytest.mark.parametrize(("argv", "expected"), [
    (["reprot"], "invalid choice: 'reprot' (did you mean 'report'?)"),
    (["report", "{runs}", "--metrics", "accc"], "--metrics accc: unknown (did you mean 'acc'?)"),
    (["plot", "{runs}", "--x", "J", "--y", "accc", "--out", "{tmp}/p.png"], "--y accc: unknown metric (did you mean 'acc'?)"),
    (["report", "{runs}", "--where", "metod=vmfproto"], "unknown key 'metod' (did you mean 'method'?)"),
    (["run", "{grid}", "--only", "method=vmfprot"], "method=vmfprot (did you mean 'vmfproto'?); its runs have method = "
                                                     "vmfproto"),
    (["tune", "{grid}", "--trials", "0"], "protobench: error: --trials 0 must be an integer ≥ 1"),
], ids=["subcommand", "metrics", "plot-y", "where-key", "only-value", "trials-option"])
def test_each_misspelt_name_gets_a_suggestion_and_each_value_its_origin(
        argv: list[str], expected: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    runs = tmp_path / "runs"
    write_run(runs / "g", "a", metrics={"acc": 50.0})
    grid = write_tiny_grid(tmp_path / "g.toml", "g", tmp_path / "synthbirds")
    filled = [a.format(runs=runs, tmp=tmp_path, grid=grid) for a in argv]
    if argv[0] == "reprot":  # argparse's own exit
        with pytest.raises(SystemExit):
            main(filled)
    else:
        assert main(filled) == 2
    assert expected in capsys.readouterr().err


def test_a_value_written_in_defaults_is_blamed_on_defaults(tmp_path: Path) -> None:
    table = tiny_grid_table("g", tmp_path, prototypes_per_class=0)
    table["sweep"] = [{"seed": [0, 1]}]
    with pytest.raises(ProtobenchError, match=r"^g\.toml \[defaults\]: prototypes_per_class \(J\) = 0 must be ≥ 1"):
        parse_grid(table, source="g.toml")
    table["sweep"] = [{"seed": [0, 1], "prototypes_per_class": 0}]
    with pytest.raises(ProtobenchError, match=r"^g\.toml \[\[sweep\]\] #1: prototypes_per_class \(J\) = 0"):
        parse_grid(table, source="g.toml")


def test_the_field_an_error_carries_decides_the_block_it_is_blamed_on(tmp_path: Path) -> None:
    """The error names its field (benchmark.errors.FieldError), not a word of its message: an
    unknown dataset written in [defaults] is blamed there, though its message starts "unknown"."""
    table = tiny_grid_table("g", tmp_path, dataset="synthbird")
    table["sweep"] = [{"seed": [0, 1]}]
    with pytest.raises(ProtobenchError, match=r"^g\.toml \[defaults\]: unknown dataset 'synthbird' \(did you mean"):
        parse_grid(table, source="g.toml")
    table["dataset_args"] = {}
    del table["defaults"]["dataset_args"]
    table["defaults"].pop("dataset")
    table["sweep"] = [{"seed": [0, 1], "dataset": "synthbird"}]
    with pytest.raises(ProtobenchError, match=r"^g\.toml \[\[sweep\]\] #1: unknown dataset 'synthbird'"):
        parse_grid({k: v for k, v in table.items() if k != "dataset_args"}, source="g.toml")


def test_a_tuning_seed_numpy_cannot_take_is_refused_naming_it(tmp_path: Path) -> None:
    from benchmark.tuning.config import tuning_config

    table = tiny_grid_table("g", tmp_path)
    table["tuning"] = {"trials": 2, "seed": 2**32}
    with pytest.raises(ProtobenchError, match=r"\[tuning\]: seed = 4294967296 must be an integer in \[0, 4294967295\]"):
        tuning_config(parse_grid(table, source="g.toml"))


@pytest.mark.parametrize("value", ["nan", "inf", "-1"])
def test_a_heartbeat_that_is_not_a_finite_positive_number_is_refused_before_compute(
        value: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    grid = write_tiny_grid(tmp_path / "g.toml", "g", tmp_path / "synthbirds")
    assert main(["tune", str(grid), "--trials", "2", "--heartbeat-seconds", value,
                 "--runs-dir", str(tmp_path / "runs")]) == 2
    assert f"--heartbeat-seconds {float(value)} must be a finite number > 0" in capsys.readouterr().err
    assert not (tmp_path / "runs").exists()


# ---- issue 54: errors point to the right word ----
def _every_parser(parser: object) -> list[object]:
    import argparse

    found = [parser]
    for action in parser._actions:  # type: ignore[attr-defined]
        if isinstance(action, argparse._SubParsersAction):
            for child in action.choices.values():
                found += _every_parser(child)
    return found


def test_every_parser_matches_options_whole() -> None:
    from benchmark.cli import build_parser

    parsers = _every_parser(build_parser())
    assert len(parsers) > 20 and all(not p.allow_abbrev for p in parsers)  # type: ignore[attr-defined]


@pytest.mark.parametrize(("argv", "usage", "expected"), [
    (["run", "{grid}", "--onl", "J=3"], "usage: protobench run ", "--onl: not an option of protobench run (did you "
                                                                  "mean '--only'?)"),
    (["plan", "{grid}", "--onyl", "J=3"], "usage: protobench plan ", "(did you mean '--only'?)"),
    (["status", "{runs}", "--jsn"], "usage: protobench status ", "--jsn: not an option of protobench status (did "
                                                                 "you mean '--json'?)"),
], ids=["run-prefix-refused", "plan-typo", "status-typo"])
def test_an_unrecognised_option_gets_its_commands_usage_and_the_closest_option(
        argv: list[str], usage: str, expected: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    runs = tmp_path / "runs"
    write_run(runs / "g", "a", metrics={"acc": 50.0})
    grid = write_tiny_grid(tmp_path / "g.toml", "g", tmp_path / "synthbirds")
    with pytest.raises(SystemExit) as exit_:
        main([a.format(runs=runs, grid=grid) for a in argv])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith(usage) and expected in err
    assert not (tmp_path / "synthbirds").exists()  # refused before the data set is generated


@pytest.mark.parametrize(("argv", "make", "expected"), [
    (["report", "{tmp}/runs/dmeo"], "runs/demo", "does not exist (did you mean '{tmp}/runs/demo'?)"),
    (["plan", "{tmp}/dem.toml"], "demo.toml", "grid file '{tmp}/dem.toml' does not exist (did you mean "
                                              "'{tmp}/demo.toml'?)"),
    (["leaderboard", "{tmp}/labB-bundle.tgz", "--out", "{tmp}/lb"], "labA-bundle.tgz",
     "source {tmp}/labB-bundle.tgz does not exist (did you mean '{tmp}/labA-bundle.tgz'?)"),
    (["plan", "{grid}", "--data-root", "{tmp}/data/synthbird"], "data/synthbirds",
     "--data-root) does not exist (did you mean '{tmp}/data/synthbirds'?)"),
    (["bundle", "{tmp}/runs/dmeo", "--out", "{tmp}/b"], "runs/demo", "does not exist (did you mean '{tmp}/runs/demo'?)"),
], ids=["report", "grid-file", "leaderboard-source", "data-root", "bundle"])
def test_a_path_that_does_not_exist_suggests_the_nearest_sibling(
        argv: list[str], make: str, expected: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    target = tmp_path / make
    if target.suffix:
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text("")
    else:
        target.mkdir(parents=True)
    grid = write_tiny_grid(tmp_path / "g.toml", "g", tmp_path / "synthbirds")
    assert main([a.format(tmp=tmp_path, grid=grid) for a in argv]) == 2
    assert expected.format(tmp=tmp_path) in capsys.readouterr().err


def test_a_missing_data_root_suggests_make_data_only_for_a_generated_dataset(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from benchmark.cli.data import GENERATORS
    from benchmark.data.declared import GENERATED_DATASETS

    assert tuple(GENERATORS) == GENERATED_DATASETS
    generated = write_tiny_grid(tmp_path / "g.toml", "g", tmp_path / "synthbirds")
    assert main(["plan", str(generated), "--data-root", "/nonexistent/x"]) == 2
    assert "`protobench make-data synthbirds --out /nonexistent/x`" in capsys.readouterr().err
    table = tiny_grid_table("c", tmp_path, dataset="cub", without=["dataset_args"])
    with pytest.raises(ProtobenchError) as err:
        parse_grid(table, source="c.toml", overrides=grid_overrides(_namespace(data_root="/data/CUB_200_2011")))
    assert "'/data/CUB_200_2011' given on the command line (--data-root) does not exist" in str(err.value)
    assert "make-data" not in str(err.value)


def _namespace(**given: object) -> object:
    import argparse

    return argparse.Namespace(**{"set": [], "sweep": [], "data_root": None, "weights": None, "device": None,
                                 "no_cache": False, **given})


def test_bundle_of_a_folder_without_runs_says_it_is_not_a_runs_folder(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "notes").mkdir()
    assert main(["bundle", str(tmp_path / "notes"), "--out", str(tmp_path / "b")]) == 2
    assert f"{tmp_path / 'notes'} is not a runs folder" in capsys.readouterr().err
    assert not (tmp_path / "b").exists()


@pytest.mark.parametrize(("argv", "expected"), [
    (["list", "method"], "nothing named like 'method' in methods, backbones, datasets, grids (did you mean 'methods'?)"),
    (["compare", "{runs}", "--by", "methd"], "--by 'methd' is not a key of the results (did you mean 'method'?)"),
    (["make-data", "nabird", "--out", "{tmp}/x"], "unknown generator 'nabird' (did you mean 'nabirds'?)"),
    (["plan", "{grid}", "--set", "seed=0,1"], "--set seed=0,1: a list of values is a sweep; use --sweep seed=0,1"),
], ids=["list-section", "compare-by", "make-data", "set-list"])
def test_misspelt_sections_keys_generators_and_set_lists_get_the_right_word(
        argv: list[str], expected: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    runs = tmp_path / "runs"
    for seed in (0, 1):
        write_run(runs, f"v{seed}", seed=seed, metrics={"acc": 50.0 + seed})
    grid = write_tiny_grid(tmp_path / "g.toml", "g", tmp_path / "synthbirds")
    rc = main([a.format(runs=runs, tmp=tmp_path, grid=grid) for a in argv])
    assert rc == (1 if argv[0] == "list" else 2)
    captured = capsys.readouterr()
    assert expected in captured.out + captured.err
    assert not (tmp_path / "x").exists()
