"""The site's robustness page: one bar chart per method of its local-perturbation profile, drawn from
result.json alone (no torch), and a page saying why when no run has a profile."""
from __future__ import annotations

import json
import re
from pathlib import Path

import pandas as pd
import pytest

from reports.site.robustnesspage import method_profiles, robustness_page


def _run(root: Path, method: str, seed: int, profile: dict[str, float] | None) -> str:
    folder = root / f"{method}-{seed}"
    folder.mkdir(parents=True)
    result = {"metrics": {"acc": 50.0}}
    if profile is not None:
        result["robustness"] = {"metrics": {"acc_attacked": 40.0, **profile}}
    (folder / "result.json").write_text(json.dumps(result))
    return str(folder / "result.json")


def test_one_bar_chart_per_method_with_its_mean_profile(tmp_path: Path) -> None:
    frame = pd.DataFrame({"method": ["vmfproto", "vmfproto", "protopnet", "linear_probe"],
                          "source": [_run(tmp_path, "vmfproto", 0, {"lpa_hue_focus": 0.2, "lpa_hue_dual": 0.0}),
                                     _run(tmp_path, "vmfproto", 1, {"lpa_hue_focus": 0.4, "lpa_hue_dual": None}),
                                     _run(tmp_path, "protopnet", 0, {"lpa_blur_focus": 0.1}),
                                     _run(tmp_path, "linear_probe", 0, {"lpa_hue_focus": None})],
                          "method_display_name": [None] * 4})
    profiles = method_profiles(frame)
    assert set(profiles) == {"vmfproto", "protopnet"} and profiles["vmfproto"][1] == 2
    html = robustness_page(frame)
    specs = [json.loads(s) for s in re.findall(r'<script type="application/json" data-figure="[^"]+">(.*?)</script>',
                                               html)]
    assert len(specs) == 2  # one chart per method with a profile
    vmf = next(s for s in specs if "vmfproto" in s["layout"]["title"]["text"] or "vMF" in s["layout"]["title"]["text"])
    focus = next(t for t in vmf["data"] if t["name"] == "focus")
    assert focus["y"][focus["x"].index("hue")] == pytest.approx(0.3)  # the mean over its two runs
    dual = next(t for t in vmf["data"] if t["name"] == "dual")
    assert dual["y"][dual["x"].index("hue")] == 0.0 and dual["y"][dual["x"].index("blur")] is None


def test_without_profiles_the_page_says_how_to_record_one(tmp_path: Path) -> None:
    frame = pd.DataFrame({"method": ["vmfproto"], "source": [_run(tmp_path, "vmfproto", 0, None)],
                          "method_display_name": [None]})
    assert "--robustness perturbation" in robustness_page(frame)
