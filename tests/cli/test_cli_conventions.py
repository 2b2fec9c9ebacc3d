"""Command-line habits: --set, --only aliases and comma lists, weights tables and --weights,
closest-key hints, status --json, --version, per-command help, and no dataset made by accident."""
import json
import os
import re
import socket

import pytest

from benchmark.cli import build_parser, main
from benchmark.config import RunSpec
from benchmark.errors import ProtobenchError
from benchmark.grid import parse_grid, parse_set_options, select_runs, toml_literal
from benchmark.run.store import atomic_write_json, run_lock
from benchmark.estimates.workload import run_epochs

GRID = {
    "name": "habits",
    "defaults": {"dataset": "synthbirds", "data_root": "data/x", "backbone": "dinov2_vits14", "weights": "random",
                 "method": "vmfproto", "method_args": {"kappa_init": 50.0, "lr_mu": 1e-2}},
    "sweep": [{"prototypes_per_class": [3, 5, 7], "seed": [0, 1]}],
}


def grid(overrides=None, **changes):
    return parse_grid({**GRID, **changes}, source="habits.toml", overrides=overrides)


# ---- --set -------------------------------------------------------------------------------------
def test_set_values_are_toml_literals_and_bare_words_strings():
    assert toml_literal("3") == 3 and toml_literal("1e-3") == 1e-3 and toml_literal("true") is True
    assert toml_literal('"x y"') == "x y" and toml_literal("{ depth = 4 }") == {"depth": 4}
    assert toml_literal("vmfproto") == "vmfproto" and toml_literal("data/cub") == "data/cub"


def test_set_overrides_fields_and_one_method_arg_in_every_run():
    overrides = parse_set_options(["batch_size=64", "method_args.lambda_ppd=0.5", "variant=ablation"])
    runs = grid(overrides).runs
    assert len(runs) == 6
    for spec in runs:
        assert spec.batch_size == 64 and spec.variant == "ablation"
        # the grid's other method_args stay
        assert spec.method_args == {"kappa_init": 50.0, "lr_mu": 1e-2, "lambda_ppd": 0.5}


def test_set_unknown_key_names_the_closest():
    with pytest.raises(ProtobenchError, match="did you mean 'batch_size'"):
        parse_set_options(["batch_sise=64"])
    with pytest.raises(ProtobenchError, match="KEY=VALUE"):
        parse_set_options(["batch_size"])
    with pytest.raises(ProtobenchError, match="only method_args, dataset_args, backbone_args"):
        parse_set_options(["seed.x=1"])


def test_misspelt_method_arg_names_the_closest():
    with pytest.raises(ProtobenchError, match="did you mean 'lambda_ppd'"):
        grid(parse_set_options(["method_args.lambda_pdd=0.5"]))


def test_set_through_the_command_line(tmp_path, capsys):
    path = tmp_path / "g.toml"
    path.write_text('name = "g"\n[defaults]\ndataset = "cub"\ndata_root = "/nowhere"\nbackbone = "dinov2_vits14"\n'
                    'method = "vmfproto"\nprototypes_per_class = 3\n')
    assert main(["plan", str(path), "--set", "prototypes_per_class=7", "--set", "method_args.lambda_ppd=0.5"]) == 0
    out = capsys.readouterr().out
    assert "1 runs" in out
    assert main(["plan", str(path), "--set", "prototype_per_class=7"]) == 2
    assert "did you mean 'prototypes_per_class'" in capsys.readouterr().err


# ---- --only --------------------------------------------------------------------------------------
def test_only_takes_j_and_comma_lists():
    runs = select_runs(grid(), ["J=3,5", "seed=0"])
    assert sorted((r.prototypes_per_class, r.seed) for r in runs) == [(3, 0), (5, 0)]
    assert {r.prototypes_per_class for r in select_runs(grid(), ["prototypes_per_class=7"])} == {7}
    with pytest.raises(ProtobenchError, match="did you mean 'seed'"):
        select_runs(grid(), ["sed=0"])
    with pytest.raises(ProtobenchError, match="matches no run"):
        select_runs(grid(), ["J=4"])


# ---- weights by backbone -------------------------------------------------------------------------
def test_weights_table_resolves_per_backbone_and_weights_overrides_it():
    table = {"dinov2_vits14": "/w/s14.safetensors", "dinov2_vitb14": "hf-cache"}
    g = parse_grid({"name": "w", "defaults": {**GRID["defaults"], "weights": table, "prototypes_per_class": 3},
                    "sweep": [{"backbone": ["dinov2_vits14", "dinov2_vitb14"]}]}, source="w.toml")
    assert {(r.backbone, r.weights) for r in g.runs} == {("dinov2_vits14", "/w/s14.safetensors"),
                                                        ("dinov2_vitb14", "hf-cache")}
    assert all(isinstance(r.weights, str) for r in g.runs)
    overridden = parse_grid({"name": "w", "defaults": {**GRID["defaults"], "weights": table, "prototypes_per_class": 3}},
                            source="w.toml", overrides={"weights": "random"})
    assert {r.weights for r in overridden.runs} == {"random"}


def test_weights_table_without_the_runs_backbone_or_with_a_typo_is_an_error():
    with pytest.raises(ProtobenchError, match="not backbone 'dinov2_vits14'.*--weights"):
        grid(defaults={**GRID["defaults"], "weights": {"dinov2_vitb14": "/w/b.safetensors"}})
    with pytest.raises(ProtobenchError, match="did you mean 'dinov2_vitb14'"):
        grid(defaults={**GRID["defaults"], "weights": {"dinov2_vitb41": "/w/b.safetensors"}})


# ---- no dataset made by accident ---------------------------------------------------------------
def test_typo_data_root_errors_and_creates_nothing(tmp_path, capsys):
    path = tmp_path / "g.toml"
    path.write_text('name = "g"\n[defaults]\ndataset = "synthbirds"\n'
                    f'data_root = "{tmp_path / "birds"}"\n'
                    'dataset_args = { classes = 2, images_per_class = 4 }\nbackbone = "dinov2_vits14"\n'
                    'weights = "random"\nmethod = "vmfproto"\nprototypes_per_class = 2\n')
    typo = tmp_path / "brids"
    for command in (["run", str(path)], ["demo"], ["plan", str(path)]):
        rc = main([*command, "--data-root", str(typo), *(["--runs-dir", str(tmp_path / "runs")]
                                                          if command[0] != "plan" else [])])
        assert rc == 2
        assert "does not exist" in capsys.readouterr().err
    assert main(["run", str(path), "--set", f"data_root={typo}", "--runs-dir", str(tmp_path / "runs")]) == 2
    assert sorted(p.name for p in tmp_path.iterdir()) == ["g.toml"]  # no birds, no runs


# ---- status --json ---------------------------------------------------------------------------------
def test_status_json_lists_every_run(tmp_path, capsys):
    spec = RunSpec(dataset="synthbirds", backbone="dinov2_vits14", method="vmfproto", prototypes_per_class=3)
    done, failed = tmp_path / "g" / "aaa", tmp_path / "g" / "bbb"
    for rd in (done, failed):
        atomic_write_json(rd / "spec.json", spec.to_json())
    atomic_write_json(done / "result.json", {"metrics": {"acc": 91.5, "con": 40.0}})
    atomic_write_json(failed / "failure.json", {"reason": "ProtobenchError: boom"})
    assert main(["status", str(tmp_path), "--json"]) == 0
    records = {r["run_id"]: r for r in json.loads(capsys.readouterr().out)}
    # a result without the method's fingerprint is an earlier version's: kept and shown, stale
    assert records["aaa"]["state"] == "stale" and records["aaa"]["metrics"]["acc"] == 91.5
    assert records["aaa"]["stale"].startswith("earlier version")
    assert records["bbb"]["state"] == "failed" and records["bbb"]["failure"] == "ProtobenchError: boom"
    assert records["aaa"]["spec"]["prototypes_per_class"] == 3


def test_status_of_a_local_run_in_progress_says_running_with_epoch_elapsed_and_pid(tmp_path, capsys):
    spec = RunSpec(dataset="synthbirds", backbone="dinov2_vits14", method="vmfproto", prototypes_per_class=3,
                   method_args={"discovery_epochs": 1, "end_to_end_epochs": 2})
    rd = tmp_path / "g" / "aaa"
    atomic_write_json(rd / "spec.json", spec.to_json())
    (rd / "metrics.jsonl").write_text('{"epoch": 2, "stage": "discovery"}\n')
    with run_lock(rd):  # what a local `protobench run` holds while it trains the run
        assert main(["status", str(tmp_path), "--json"]) == 0
    record = json.loads(capsys.readouterr().out)[0]
    assert record["state"] == "running"
    assert re.fullmatch(rf"epoch 2/{run_epochs(spec)}, 0:00:0\d, pid {os.getpid()} on {socket.gethostname()}",
                        record["progress"]), record["progress"]
    assert main(["status", str(tmp_path), "--json"]) == 0  # the lock released: a checkpoint-less run is new
    assert json.loads(capsys.readouterr().out)[0]["state"] == "new"


# ---- the parser ------------------------------------------------------------------------------------
def test_version(capsys):
    from importlib.metadata import version

    with pytest.raises(SystemExit) as exit_:
        main(["--version"])
    assert exit_.value.code == 0
    assert capsys.readouterr().out.strip() == f"protobench {version('protobench')}"


def _commands():
    sub = next(a for a in build_parser()._actions if a.choices and isinstance(a.choices, dict))
    return sub.choices


def test_each_command_lists_only_its_own_options():
    commands = _commands()
    options = {name: {o for a in p._actions for o in a.option_strings} for name, p in commands.items()}
    for execution in ("--executor", "--profile", "--retry-failed", "--tensorboard"):
        assert execution in options["run"] and execution in options["demo"]
        assert execution not in options["perf"], f"perf --help lists {execution}"
    assert {"--only", "--data-root", "--weights", "--set", "--device"} <= options["perf"]
    assert {"--weights", "--set", "--data-root"} <= options["plan"]


def test_positionals_have_help_and_defaults_are_shown():
    for name, parser in _commands().items():
        for action in parser._actions:
            if not action.option_strings:
                assert action.help, f"`protobench {name}` positional {action.dest} has no help"
    perf_help = _commands()["perf"].format_help()
    assert "(default: 5)" in perf_help  # --warmup
    assert "(default: None)" not in perf_help


# ---- method-scoped --set, --sweep, errors naming the option -----------------------------------------
TWO_METHODS = {**GRID, "sweep": [{"method": "vmfproto", "prototypes_per_class": 3},
                                 {"method": "protopnet", "prototypes_per_class": 3, "method_args": {}}]}


def test_set_method_name_reaches_that_methods_runs_only():
    from benchmark.grid import parse_grid

    runs = parse_grid(TWO_METHODS, source="two.toml", overrides=parse_set_options(["vmfproto.lambda_ppd=0.5"])).runs
    args = {spec.method: spec.method_args for spec in runs}
    assert args["vmfproto"]["lambda_ppd"] == 0.5 and "lambda_ppd" not in args["protopnet"]
    with pytest.raises(ProtobenchError, match=r"--set vmfprot.lambda_ppd=0.5: no run .* \(did you mean 'vmfproto'"):
        parse_grid(TWO_METHODS, source="two.toml", overrides=parse_set_options(["vmfprot.lambda_ppd=0.5"]))


def test_sweep_adds_an_axis_to_every_run():
    from benchmark.grid import parse_sweep_options

    runs = grid({**parse_sweep_options(["seed=0,1,2", "vmfproto.lambda_ppd=0.1,0.5"])}).runs
    points = sorted((r.prototypes_per_class, r.seed, r.method_args["lambda_ppd"]) for r in runs)
    assert points == sorted((j, s, lam) for j in (3, 5, 7) for s in (0, 1, 2) for lam in (0.1, 0.5))
    assert parse_sweep_options(["backbone_args={depth=2},{depth=4}"])["backbone_args"].values == (
        {"depth": 2}, {"depth": 4})


def test_a_list_in_set_points_to_sweep_and_errors_name_the_option():
    with pytest.raises(ProtobenchError, match=r"--set seed=\[0,1,2\]: a list of values is a sweep; "
                                              r"use --sweep seed=0,1,2"):
        parse_set_options(["seed=[0,1,2]"])
    with pytest.raises(ProtobenchError, match="with command-line --set seed=x: seed = 'x' must be of type int"):
        grid(parse_set_options(["seed=x"]))
    with pytest.raises(ProtobenchError, match="habits.toml .*batch_size = 'x' must be of type int") as bad_grid:
        grid(parse_set_options(["seed=3"]), defaults={**GRID["defaults"], "batch_size": "x"})
    assert "command-line" not in str(bad_grid.value)  # the grid file is at fault, not --set


def test_plan_takes_only_and_set_as_run_does(capsys):
    assert main(["plan", "benchmark/grids/demo.toml", "--only", "J=3", "--set", "seed=5"]) == 0
    assert "demo (benchmark/grids/demo.toml): 1 runs" in capsys.readouterr().out


def test_list_filters_by_section_and_pattern_and_prints_json(capsys):
    assert main(["list", "backbones", "vitb14"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("backbones:\n") and "dinov2_vitb14:" in out and "dinov2_vits14" not in out
    assert "methods:" not in out
    assert main(["list", "dinov3*", "--json"]) == 0
    listing = json.loads(capsys.readouterr().out)
    assert set(listing["backbones"]) and all(k.startswith("dinov3") for k in listing["backbones"])
    assert listing["methods"] == {} and listing["grids"] == []
    assert main(["list", "example_adapter:CosinePrototypes", "--json"]) == 0  # a method by import path
    assert json.loads(capsys.readouterr().out)["methods"]["example_adapter:CosinePrototypes"]["epochs"] == 10
    assert main(["list", "zzz"]) == 1 and "nothing named like 'zzz'" in capsys.readouterr().out
