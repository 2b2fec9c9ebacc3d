"""Grid files and run specs: expansion, run ids, and one clear error per bad input."""
from pathlib import Path

import pytest

from benchmark.config import RunSpec
from benchmark.errors import ProtobenchError
from benchmark.grid import load_grid, parse_grid, select_runs

DEMO = Path(__file__).resolve().parents[2] / "benchmark" / "grids" / "demo.toml"
BASE = {"dataset": "synthbirds", "backbone": "dinov2_vits14", "method": "vmfproto", "data_root": "x"}


def grid(**sweep):
    return parse_grid({"name": "g", "defaults": BASE, "sweep": [sweep]}, source="test.toml")


def test_demo_grid_expands_to_four_runs():
    g = load_grid(DEMO)
    assert g.name == "demo"
    assert sorted((r.prototypes_per_class, r.seed) for r in g.runs) == [(3, 0), (3, 1), (5, 0), (5, 1)]
    assert len({r.run_id for r in g.runs}) == 4


def test_sweeps_are_cartesian_and_deduplicated():
    g = parse_grid({"name": "g", "defaults": BASE,
                    "sweep": [{"prototypes_per_class": [3, 5, 7], "seed": [0, 1]},
                              {"prototypes_per_class": 3, "seed": 0}]}, source="t")
    assert len(g.runs) == 6


def test_run_id_depends_on_science_not_on_paths():
    a = grid(prototypes_per_class=3).runs[0]
    assert a.run_id == RunSpec.from_json(a.to_json()).run_id
    assert a.with_overrides(data_root="/elsewhere", device="cpu", cache=False).run_id == a.run_id
    assert a.with_overrides(seed=1).run_id != a.run_id
    assert a.with_overrides(method_args={"lambda_ppd": 0.0}).run_id != a.run_id


@pytest.mark.parametrize("sweep, needle", [
    ({"prototypes_per_class": 3, "sed": 1}, "'sed'"),
    ({"prototypes_per_class": 0}, "J) = 0 must be ≥ 1"),
    ({"prototypes_per_class": 3, "method": "protopnetz"}, "unknown method 'protopnetz'"),
    ({"prototypes_per_class": 3, "backbone": "dinov9"}, "unknown backbone 'dinov9'"),
    ({"prototypes_per_class": 3, "dataset": "imagenet"}, "unknown dataset 'imagenet'"),
    ({"prototypes_per_class": 3, "map_pool": 3}, "map_pool = 3"),
    ({"prototypes_per_class": "3"}, "prototypes_per_class = '3' must be of type int"),
    ({"prototypes_per_class": 3, "method_args": {"lambda_pdp": 1.0}}, "no hyperparameter 'lambda_pdp'"),
    ({"prototypes_per_class": 3, "dataset_args": {"clases": 4}}, "did you mean 'classes'"),
    ({"prototypes_per_class": 3, "dataset_args": {"classes": 4.5}}, "dataset_args.classes = 4.5 must be of type int"),
])
def test_bad_values_fail_with_one_named_error(sweep, needle):
    with pytest.raises(ProtobenchError, match=None) as err:
        grid(**sweep)
    assert needle in str(err.value)


def test_misspelt_key_in_file_names_key_file_and_suggestion(tmp_path):
    path = tmp_path / "bad.toml"
    path.write_text(DEMO.read_text().replace("batch_size = 32", "bach_size = 32"))
    with pytest.raises(ProtobenchError) as err:
        load_grid(path)
    msg = str(err.value)
    assert "'bach_size'" in msg and str(path) in msg and "did you mean 'batch_size'" in msg


def test_missing_or_invalid_file(tmp_path):
    with pytest.raises(ProtobenchError, match="does not exist"):
        load_grid(tmp_path / "nope.toml")
    (tmp_path / "x.toml").write_text("name = [")
    with pytest.raises(ProtobenchError, match="not valid TOML"):
        load_grid(tmp_path / "x.toml")


def test_select_runs_by_key_and_id():
    g = load_grid(DEMO)
    assert {r.seed for r in select_runs(g, ["seed=1"])} == {1}
    first = g.runs[0]
    assert select_runs(g, [first.run_id[:6]]) == [first]
    with pytest.raises(ProtobenchError, match="matches no run"):
        select_runs(g, ["seed=9"])


def test_runs_sharing_a_trunk_with_evalprotopnet_share_its_early_token_cache():
    g = parse_grid({"name": "g", "defaults": {**BASE, "prototypes_per_class": 3},
                    "sweep": [{"method": ["vmfproto", "evalprotopnet"]},
                              {"method": "nppp", "backbone": "dinov2_vitb14"}]}, source="t")
    flags = {(r.method, r.backbone): r.cache_early_tokens for r in g.runs}
    assert flags == {("vmfproto", "dinov2_vits14"): True, ("evalprotopnet", "dinov2_vits14"): True,
                     ("nppp", "dinov2_vitb14"): False}
    assert grid(prototypes_per_class=3).runs[0].cache_early_tokens is False
