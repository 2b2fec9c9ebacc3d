"""The layout registry: every paper table is there, and every layout is well formed."""
from __future__ import annotations

import pytest

from benchmark.errors import ProtobenchError
from reports.columns import KEY_COLUMNS
from reports.layout import ColumnGroup, Layout, Row, text
from reports.layouts import ACC, LAYOUTS, get_layout, list_layouts

PAPER_TABLES = {
    "cub_main": "tab:cub_main",
    "ablation": "tab:cub_ablation",
    "dogs_b": "tab:dogs_main_b",
    "dogs_s": "tab:dogs_main_s",
    "cars": "tab:cars_main",
    "seed_robustness": "tab:supp_seed_robustness",
    "gating": "tab:fg_ablation_supp",
    "offline_aug": "tab:offline_aug_all_supp",
    "expanded": "tab:expanded_backbone_ablation_supp",
    "runtime": "tab:supp_runtime",
}


def test_every_quantitative_table_of_the_paper_has_a_layout() -> None:
    for name, label in PAPER_TABLES.items():
        assert LAYOUTS[name].tex_label == label
    assert "dogs" in LAYOUTS  # all four backbones of Stanford Dogs in one table


def test_list_layouts_names_and_describes_each() -> None:
    listed = list_layouts()
    assert [name for name, _ in listed] == list(LAYOUTS)
    assert all(description for _, description in listed)


def test_unknown_layout_lists_the_known_ones() -> None:
    with pytest.raises(ProtobenchError, match="Unknown layout 'cub'.*cub_main"):
        get_layout("cub")


@pytest.mark.parametrize("name", list(LAYOUTS))
def test_every_cell_selects_a_distinct_key(name: str) -> None:
    layout = LAYOUTS[name]
    cells = [
        (layout.cell_key(row, group), metric.key)
        for row in layout.rows
        for group in layout.columns
        for metric in group.metrics
    ]
    assert len(cells) == len(set(cells))
    assert all(key[0] == layout.dataset and len(key) == len(KEY_COLUMNS) for key, _ in cells)


def test_cub_main_structure_follows_table_1() -> None:
    layout = LAYOUTS["cub_main"]
    assert len(layout.rows) == 21 and layout.n_columns == 17
    assert [g.label.md for g in layout.columns if g.label] == [
        "DINOv2 ViT-B/14", "DINOv2 ViT-S/14", "DINOv3 ViT-B/16", "DINOv3 ViT-S/16"]
    assert [m.header.md for m in layout.columns[0].metrics] == ["Con.", "Sta.", "Dis.", "Acc."]
    shown = [(row.labels[0].md + row.qualifier.md, dict(row.where)) for row in layout.rows]
    assert shown[0] == ("ProtoPNet (J=3)", {"method": "protopnet", "J": 3})
    assert shown[-1] == ("vMFProto (J=7)", {"method": "vmfproto", "J": 7})


def test_runtime_direction_is_lower_is_better_for_epoch_time_only() -> None:
    metrics = LAYOUTS["runtime"].columns[0].metrics
    assert [(m.key, m.higher_is_better) for m in metrics] == [
        ("epoch_seconds_live_trunk", False), ("epoch_seconds", False), ("inference_images_per_second", True)]


def _layout(rows: tuple[Row, ...], **filters: object) -> Layout:
    return Layout(
        name="t", description="t", caption=text("t"), tex_label="tab:t", dataset="cub", filters=filters,
        label_headers=(text(""),), label_align=("l",),
        columns=(ColumnGroup(text("B"), {"backbone": "dinov2_vitb14"}, (ACC,)),), body=rows,
    )


def test_a_layout_must_select_every_key_exactly_once() -> None:
    row = Row((text("x"),), {"method": "nppp", "J": 5})
    _layout((row,), variant="default")
    with pytest.raises(ValueError, match="selects"):
        _layout((row,))
    with pytest.raises(ValueError, match="given twice"):
        _layout((row,), variant="default", J=5)
    with pytest.raises(ValueError, match="needs 1 labels"):
        _layout((Row((text("x"), text("y")), {"method": "nppp", "J": 5}),), variant="default")
