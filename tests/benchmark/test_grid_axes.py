"""Grid-wide axes written once: a list in ``[defaults]`` crosses every ``[[sweep]]`` block (a
block's own value of that field wins), and a bad value is blamed on the block it was written in."""
from __future__ import annotations

import pytest

from benchmark.errors import ProtobenchError
from benchmark.grid import parse_grid
from tiny_grid import tiny_grid_table


def test_a_list_in_defaults_is_an_axis_of_every_block(tmp_path) -> None:
    table = tiny_grid_table("g", tmp_path, prototypes_per_class=[3, 5], seed=[0, 1, 2],
                            sweep=[{"method": "vmfproto"}, {"method": "protopnet", "seed": 7}])
    runs = parse_grid(table, source="g.toml").runs
    points = sorted((s.method, s.prototypes_per_class, s.seed) for s in runs)
    assert points == sorted([("vmfproto", j, seed) for j in (3, 5) for seed in (0, 1, 2)]
                            + [("protopnet", j, 7) for j in (3, 5)])


def test_without_sweep_blocks_the_defaults_axes_make_the_grid(tmp_path) -> None:
    runs = parse_grid(tiny_grid_table("g", tmp_path, seed=[0, 1]), source="g.toml").runs
    assert sorted(s.seed for s in runs) == [0, 1]


@pytest.mark.parametrize(("defaults", "sweep", "blamed"), [
    ({"prototypes_per_class": [3, "five"]}, [{"seed": [0, 1]}], r"g\.toml \[defaults\]: prototypes_per_class"),
    ({"seed": []}, [{"method": "vmfproto"}], r"g\.toml \[defaults\]: seed = \[\] is a grid-wide axis"),
    ({"seed": [1, 1]}, [{"method": "vmfproto"}], r"g\.toml \[defaults\]: seed = \[1, 1\]"),
    ({}, [{"seed": [0]}, {"seed": ["x"]}], r"g\.toml \[\[sweep\]\] #2"),
    ({"dataset": "birds"}, (), r"g\.toml \[defaults\]: unknown dataset 'birds'"),
])
def test_a_bad_value_names_the_block_it_was_written_in(tmp_path, defaults, sweep, blamed) -> None:
    with pytest.raises(ProtobenchError, match=blamed):
        parse_grid(tiny_grid_table("g", tmp_path, sweep=sweep, **defaults), source="g.toml")
