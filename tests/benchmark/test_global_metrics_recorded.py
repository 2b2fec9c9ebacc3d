"""A grid with ``protopnet`` and ``dinoqpm`` runs on synthbirds and both results record the QPM line's
``class_indep``, ``contrastive``, ``sid5`` and PF-CBM's ``pointing`` as finite percentages
(docs/protocol/metrics.md, "Metrics beyond the paper")."""
import math

from benchmark.grid import parse_grid
from benchmark.run.runner import execute_run
from tiny_grid import tiny_grid_table

GLOBAL_METRICS = ("class_indep", "contrastive", "sid5", "pointing")


def test_protopnet_and_dinoqpm_record_the_four_metrics(tmp_path):
    table = tiny_grid_table("qpm_line", tmp_path / "synthbirds", device="cpu", prototypes_per_class=3,
                            dataset_args={"classes": 4, "images_per_class": 8, "seed": 0},
                            sweep=[{"method": "protopnet",
                                    "method_args": {"warm_epochs": 1, "joint_epochs": 1, "push_epochs": [1],
                                                    "last_layer_epochs": 2}},
                                   {"method": "dinoqpm",
                                    "method_args": {"feature_dim": 16, "hidden_dim": 32, "n_features": 6,
                                                    "dense_epochs": 1, "finetune_epochs": 1}}])
    grid = parse_grid(table, source="qpm_line (test)")
    assert sorted(r.method for r in grid.runs) == ["dinoqpm", "protopnet"]
    for spec in grid.runs:
        result = execute_run(spec, grid.run_dir(tmp_path / "runs", spec), cache_root=tmp_path / "cache",
                             progress=False, log=lambda line: None)
        values = {m: result["metrics"][m] for m in GLOBAL_METRICS}
        assert all(isinstance(v, float) and math.isfinite(v) and 0.0 <= v <= 100.0 for v in values.values()), \
            (spec.method, values)
        assert result["metric_notes"]["sid5"].startswith("SID@3")  # J = 3 < 5: the official fallback
    assert result["diagnostics"]["qp"]["dedup_cuts"] >= 0
