"""A named variant holds the method_args its grid gives it fixed in its tuning study (tuning them would
undo the ablation: cub_ablations' ``ce_only`` is λ_ppd = λ_logdet = 0); the default variant's are
trial 0's starting point and tuned with the rest of the space."""
from __future__ import annotations

from pathlib import Path

from tiny_grid import tiny_grid_table

from benchmark.grid import load_grid, parse_grid
from benchmark.method_lookup import declaration
from benchmark.tuning.config import tuning_cells, tuning_config

REPO = Path(__file__).resolve().parents[2]


def test_the_papers_loss_ablations_hold_their_switched_off_terms():
    grid = load_grid(REPO / "benchmark" / "grids" / "cub_ablations.toml")
    cells = {c.base.variant: c for c in tuning_cells(grid, list(grid.runs), tuning_config(grid, trials=2))
             if c.base.method == "vmfproto"}
    declared = set(declaration("vmfproto").search_space)
    for variant, held in (("ce_only", ("lambda_logdet", "lambda_ppd")), ("ce_ppd", ("lambda_logdet",)),
                          ("ce_logdet", ("lambda_ppd",)), ("stage2_off", ())):
        cell = cells[variant]
        assert cell.held == held
        assert set(cell.space) == declared - set(held)
        assert all(cell.base.method_args[name] == 0.0 for name in held)


def test_the_default_variant_tunes_the_values_its_grid_gives(tmp_path):
    sweep = [{"method_args": {"tau": 0.3}}, {"variant": "low_tau", "method_args": {"tau": 0.3}}]
    grid = parse_grid(tiny_grid_table("held", tmp_path, device="cpu", sweep=sweep), source="held (test)")
    cells = {c.base.variant: c for c in tuning_cells(grid, list(grid.runs), tuning_config(grid, trials=2))}
    assert cells["default"].held == () and "tau" in cells["default"].space
    assert cells["default"].defaults["tau"] == 0.3  # trial 0 starts at the grid's value
    assert cells["low_tau"].held == ("tau",) and "tau" not in cells["low_tau"].space


def test_tune_and_the_summary_name_what_a_variant_holds(tmp_path, monkeypatch, capsys):
    import optuna

    import benchmark.tuning.workers as workers
    from benchmark.cli import main
    from benchmark.tuning.study import summary
    from tiny_grid import write_tiny_grid

    grid_path = write_tiny_grid(tmp_path / "held.toml", "held", tmp_path / "data", device="cpu",
                                sweep=[{"variant": "low_tau", "method_args": {"tau": 0.3}}])
    monkeypatch.setattr(workers.TuneJob, "__call__", lambda self: [])  # the listing only: no trial
    assert main(["tune", str(grid_path), "--trials", "2", "--runs-dir", str(tmp_path / "runs")]) == 0
    assert "held by the variant: tau = 0.3" in capsys.readouterr().out
    grid = load_grid(grid_path)
    cell, = tuning_cells(grid, list(grid.runs), tuning_config(grid, trials=2))
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    assert summary(optuna.create_study(), cell, 2)["held_by_variant"] == {"tau": 0.3}
