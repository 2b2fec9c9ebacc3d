"""plot --cd, the critical-difference diagram: mean ranks and Friedman's p against autorank, the
Wilcoxon–Holm post-hoc against scipy + statsmodels, bars on a known case, the figure and its
errors (source: issue 19 item 5)."""
from __future__ import annotations

import itertools

import numpy as np
import pandas as pd
import pytest
from scipy import stats as sps
from statsmodels.stats.multitest import multipletests

from example_adapter import CosinePrototypes

from benchmark.cli import main
from reports.cd import critical_difference
from reports.load import load_csv

METHODS = ("protopnet", "tesnet", "nppp", "vmfproto")


def published(tmp_path, shift: dict[str, float], blocks: int = 8, seed: int = 0):
    """A tidy CSV: every method on ``blocks`` (backbone, J) blocks, acc = noise + the method's shift."""
    rng = np.random.default_rng(seed)
    rows = [{"dataset": "cub", "backbone": f"b{b % 4}", "method": m, "J": 3 + b // 4, "variant": "default",
             "acc": 50 + shift[m] + rng.normal(0, 1)} for b in range(blocks) for m in METHODS]
    path = tmp_path / "grid.csv"
    pd.DataFrame(rows).to_csv(path, index=False)
    return path


def test_ranks_and_friedman_equal_autorank(tmp_path) -> None:
    autorank = pytest.importorskip("autorank")
    path = published(tmp_path, {"protopnet": 0.0, "tesnet": 0.5, "nppp": 1.0, "vmfproto": 3.0})
    cd = critical_difference(load_csv(path), "acc")
    table = load_csv(path).pivot_table(index=["backbone", "J"], columns="method", values="acc")
    oracle = autorank.autorank(table, alpha=0.05, verbose=False, force_mode="nonparametric", order="descending")
    assert oracle.omnibus == "friedman"
    assert cd.friedman_p == pytest.approx(oracle.pvalue, rel=1e-9)
    expected = oracle.rankdf["meanrank"].sort_values()
    assert cd.treatments == list(expected.index)
    assert cd.mean_ranks == pytest.approx(list(expected))
    pairs = list(itertools.combinations(range(4), 2))
    raw = [sps.wilcoxon(table[cd.treatments[i]], table[cd.treatments[j]]).pvalue for i, j in pairs]
    assert [cd.p_holm[p] for p in pairs] == pytest.approx(list(multipletests(raw, method="holm")[1]))


def test_bars_join_only_treatments_no_test_separates(tmp_path) -> None:
    # vmfproto far ahead on every block; the other three within noise of one another
    path = published(tmp_path, {"protopnet": 0.0, "tesnet": 0.1, "nppp": 0.2, "vmfproto": 10.0}, blocks=12)
    cd = critical_difference(load_csv(path), "acc")
    assert cd.treatments[0] == "vmfproto" and cd.mean_ranks[0] == 1.0
    assert all(cd.p_holm[(0, j)] < 0.05 for j in (1, 2, 3))  # exact Wilcoxon, 12 blocks: 2/2^12 · 3
    assert cd.cliques == [(1, 3)]


def test_plot_cd_writes_the_figure_and_refuses_too_few_blocks(tmp_path, capsys) -> None:
    path = published(tmp_path, {"protopnet": 0.0, "tesnet": 0.5, "nppp": 1.0, "vmfproto": 3.0})
    out = tmp_path / "cd.png"
    assert main(["plot", str(path), "--cd", "--out", str(out)]) == 0
    assert out.stat().st_size > 10_000 and "over 8 block(s)" in capsys.readouterr().out
    assert main(["plot", str(path), "--cd", "--where", "backbone=b0", "--where", "J=3", "--out",
                 str(tmp_path / "x.png")]) == 2
    assert "at least two common blocks" in capsys.readouterr().err
    assert main(["plot", str(path), "--cd", "--x", "J", "--out", str(tmp_path / "x.png")]) == 2
    assert not (tmp_path / "x.png").exists()


class RenamedCosine(CosinePrototypes):
    """Another own adapter with the example adapter's display name."""


def test_plot_cd_tells_apart_own_methods_sharing_a_display_name(tmp_path, capsys) -> None:
    """Two own adapters whose results carry one display name get one label each (``name (method)``),
    in the printed ranks as in compare's table (reports.pivot.method_labels)."""
    from reports_support import write_run

    runs = tmp_path / "runs"
    own = ("example_adapter:CosinePrototypes", "test_critical_difference:RenamedCosine")
    for b in range(6):
        for i, method in enumerate(("vmfproto", *own)):
            write_run(runs, f"{i}-{b}", method=method, J=3 + b, metrics={"acc": 50.0 + 5 * i + 0.1 * b},
                      method_display_name="Cosine prototypes" if method in own else "vMFProto")
    assert main(["plot", str(runs), "--cd", "--out", str(tmp_path / "cd.png")]) == 0
    ranks = capsys.readouterr().out.split("mean ranks ")[1]
    assert f"Cosine prototypes ({own[1]}) 1.00" in ranks and f"Cosine prototypes ({own[0]}) 2.00" in ranks
    assert "vMFProto 3.00" in ranks
