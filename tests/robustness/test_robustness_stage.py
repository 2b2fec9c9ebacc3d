"""``protobench evaluate RUN --robustness``: options refused by name before compute, scores in
result.json and per image, a killed stage resumed without repeating finished images, a reference row
scored on accuracy under attack only, faithfulness equal to direct Quantus calls."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from benchmark.cli import main
from benchmark.robustness import stage as stage_module
from benchmark.robustness.options import RobustnessOptions
from benchmark.robustness.stage import run_robustness
from benchmark.run.records import read_records
from benchmark.run.store import STAGE_PARTIAL_DIR

FAST = {"steps": 2, "images": 6, "batch_size": 3}


def _trained(root: Path, method: str = "vmfproto", image_size: int = 28) -> Path:
    from benchmark.run.runner import execute_run
    from tiny_grid import tiny_grid

    spec = tiny_grid("g", root / "data").runs[0].with_overrides(
        method=method, image_size=image_size, method_args={"end_to_end_epochs": 1} if method == "vmfproto" else {})
    run_dir = root / "runs" / "g" / spec.run_id
    execute_run(spec, run_dir, cache_root=root / "runs" / ".token-cache", progress=False)
    return run_dir


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _trained(tmp_path_factory.mktemp("robust"))


@pytest.mark.parametrize("option, value, named", [
    ("--robustness-epsilon", "0", "--robustness-epsilon"), ("--robustness-epsilon", "1.5", "--robustness-epsilon"),
    ("--robustness-steps", "0", "--robustness-steps"), ("--robustness-percentile", "100", "--robustness-percentile"),
    ("--robustness-percentile", "0", "--robustness-percentile"), ("--robustness-images", "33", "--robustness-images"),
])
def test_an_option_out_of_range_is_refused_by_name_before_compute(
        trained: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], option: str, value: str,
        named: str) -> None:
    def no_compute(*args: object, **kwargs: object) -> None:
        raise AssertionError("the trunk was loaded before the options were checked")

    monkeypatch.setattr("benchmark.run.reevaluate.load_trained", no_compute)
    assert main(["evaluate", str(trained), "--robustness", "misalignment", option, value]) != 0
    assert named in capsys.readouterr().err
    assert "robustness" not in json.loads((trained / "result.json").read_text())


def test_an_unknown_family_is_refused(trained: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["evaluate", str(trained), "--robustness", "stability"]) != 0
    assert "--robustness 'stability': unknown stability" in capsys.readouterr().err


def test_a_killed_stage_resumes_without_repeating_images_and_leaves_nothing_partial(
        trained: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    options = RobustnessOptions(("misalignment",), **FAST)
    scored: list[list[int]] = []
    real = stage_module._score_batch

    def dying(live, prep, chunk, options, *, reference, number):  # noqa: ANN001, ANN202
        scored.append(list(chunk))
        if len(scored) == 2:
            raise KeyboardInterrupt  # killed in the second batch
        return real(live, prep, chunk, options, reference=reference, number=number)

    monkeypatch.setattr(stage_module, "_score_batch", dying)
    with pytest.raises(KeyboardInterrupt):
        run_robustness(trained, options)
    assert "robustness" not in json.loads((trained / "result.json").read_text())
    assert read_records(trained, "robustness") is None
    monkeypatch.setattr(stage_module, "_score_batch", lambda *a, **k: (scored.append(list(a[2])), real(*a, **k))[1])
    section = run_robustness(trained, options)
    assert scored[2:] == [scored[1]]  # the first batch was not scored again
    assert not (trained / STAGE_PARTIAL_DIR).exists()
    result = json.loads((trained / "result.json").read_text())
    assert result["robustness"]["metrics"] == section["metrics"]
    assert section["num_images"] == 6 and section["families"]["misalignment"]["steps"] == 2
    records = read_records(trained, "robustness")
    assert len(records) == 6 and records["index"].is_monotonic_increasing
    assert set(records.columns) >= {"image", "correct_clean", "correct_attacked", "pac", "prc", "plc"}
    assert section["metrics"]["acc_attacked"] == pytest.approx(100 * records["correct_attacked"].mean())
    assert section["metrics"]["plc"] == pytest.approx(records["plc"].mean())
    # an uninterrupted stage gives the same numbers (seeded per batch)
    (trained / "robustness.parquet").unlink(missing_ok=True)
    again = run_robustness(trained, options)
    assert again["metrics"] == section["metrics"]


def test_a_family_run_later_on_the_same_images_keeps_the_earlier_ones(trained: Path) -> None:
    misaligned = run_robustness(trained, RobustnessOptions(("misalignment",), **FAST))
    both = run_robustness(trained, RobustnessOptions(("perturbation",), **FAST))
    assert set(both["families"]) == {"misalignment", "perturbation"}
    assert {k: both["metrics"][k] for k in ("pac", "prc", "plc", "acc_attacked")} == \
        {k: misaligned["metrics"][k] for k in ("pac", "prc", "plc", "acc_attacked")}
    records = read_records(trained, "robustness")
    assert {"plc", "lpa_hue_focus"} <= set(records.columns)
    other = run_robustness(trained, RobustnessOptions(("perturbation",), steps=2, images=4, batch_size=2))
    assert set(other["families"]) == {"perturbation"} and "misalignment" in other["notes"]["earlier families"]
    assert "plc" not in read_records(trained, "robustness").columns


def test_a_reference_row_gets_accuracy_under_attack_only_and_says_why(tmp_path: Path) -> None:
    run_dir = _trained(tmp_path, "linear_probe")
    section = run_robustness(run_dir, RobustnessOptions(("misalignment",), **FAST))
    assert section["metrics"]["acc_attacked"] is not None
    assert all(section["metrics"][k] is None for k in ("pac", "prc", "plc"))
    assert "reference row" in section["notes"]["pac, prc, plc"]


class _Direct(torch.nn.Module):
    """The model written out for the test: normalise, the trunk, the method's logits."""

    def __init__(self, method, trunk, mean, std) -> None:  # noqa: ANN001
        super().__init__()
        self.method, self.trunk = method, trunk
        self.mean, self.std = torch.tensor(mean).view(1, 3, 1, 1), torch.tensor(std).view(1, 3, 1, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        from methods.base import TokenBatch

        out = self.trunk((x - self.mean) / self.std)
        labels = torch.zeros(len(x), dtype=torch.int64)
        return self.method.logits(TokenBatch(out.tokens, out.block_input, out.attention, labels, labels,
                                             self.trunk.grid).only(self.method.reads))


def test_faithfulness_equals_a_direct_quantus_call_on_the_same_model_and_attributions(trained: Path) -> None:
    import quantus

    from benchmark.robustness.faithfulness import faithfulness_batch, flipping_step, pixel_imputation
    from benchmark.robustness.live import LiveMethod, normalisation, pixel_images
    from benchmark.run.reevaluate import load_trained
    from metrics import upsample_maps
    from metrics.class_evidence import class_evidence_maps
    from methods.base import TokenBatch

    prep = load_trained(trained)
    mean, std = normalisation(prep.test_set)
    pixels = pixel_images(prep.test_set, [0, 5])
    labels = torch.tensor([int(prep.test_set.labels[i]) for i in (0, 5)])
    ours = faithfulness_batch(LiveMethod(prep.method, prep.trunk, mean, std).eval(), pixels, labels, seed=11)

    model = _Direct(prep.method, prep.trunk, mean, std).eval()
    with torch.no_grad():
        out = prep.trunk((pixels - model.mean) / model.std)
        batch = TokenBatch(out.tokens, out.block_input, out.attention, labels, labels, prep.trunk.grid)
        evidence = class_evidence_maps(prep.method.activation_maps(batch, labels),
                                       prep.method.prototype_contributions(batch, labels))
    a = upsample_maps(evidence, 28)[:, None].float().numpy()
    x, y = pixels.numpy(), labels.numpy()
    quiet = {"disable_warnings": True, "display_progressbar": False}

    def call(metric, a_batch=a):  # noqa: ANN001, ANN202
        np.random.seed(11)
        return metric(model=model, x_batch=x, y_batch=y, a_batch=a_batch, channel_first=True, device="cpu",
                      batch_size=2)

    curves = call(quantus.PixelFlipping(features_in_step=flipping_step(28), **quiet))
    assert np.abs(ours["pixel_flipping"] - [np.trapezoid(c, dx=1) for c in curves]).max() < 1e-6
    regions = call(quantus.RegionPerturbation(**quiet))
    assert np.abs(ours["region_perturbation"] - [np.mean(c) for c in regions]).max() < 1e-6
    road = quantus.ROAD(perturb_func=pixel_imputation, **quiet)
    road.custom_postprocess = lambda **kwargs: None
    assert np.abs(ours["road"] - np.asarray(call(road)[0]).mean(axis=1)).max() < 1e-6
    infidelity = call(quantus.Infidelity(normalise=True, **quiet))
    assert np.abs(ours["infidelity"] - np.asarray(infidelity)).max() <= 1e-6 * np.abs(infidelity).max()


def test_infidelity_reads_the_map_at_a_common_scale(trained: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A method whose maps are 1000× larger (its logit units) gets the same infidelity: the map is divided by
    its largest magnitude first (Quantus' default would multiply the squared error's map term by 1000)."""
    from benchmark.robustness import faithfulness
    from benchmark.robustness.live import LiveMethod, normalisation, pixel_images
    from benchmark.run.reevaluate import load_trained

    prep = load_trained(trained)
    live = LiveMethod(prep.method, prep.trunk, *normalisation(prep.test_set)).eval()
    pixels = pixel_images(prep.test_set, [0, 5])
    labels = torch.tensor([int(prep.test_set.labels[i]) for i in (0, 5)])
    every = faithfulness.quantus_metrics
    monkeypatch.setattr(faithfulness, "quantus_metrics", lambda size: {"infidelity": every(size)["infidelity"]})
    plain = faithfulness.faithfulness_batch(live, pixels, labels, seed=3)["infidelity"]
    real = faithfulness.evidence_attributions
    monkeypatch.setattr(faithfulness, "evidence_attributions", lambda *a: 1000.0 * real(*a))
    scaled = faithfulness.faithfulness_batch(live, pixels, labels, seed=3)["infidelity"]
    assert np.allclose(plain, scaled, rtol=1e-5) and np.all(plain > 0)


def test_vmfproto_maps_are_read_as_log_densities_by_pac_and_the_profile(
        trained: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """vMFProto declares log-density maps, so its relative changes are of exp(map); a method that does not
    (ProtoPNet) keeps the official ratio of its activations."""
    from methods.registry import declaration

    assert declaration("vmfproto").log_density_maps and not declaration("protopnet").log_density_maps
    seen: dict[str, bool] = {}
    real_misalignment, real_perturbation = stage_module.misalignment_batch, stage_module.perturbation_batch

    def misalignment(*args, log_density, **kwargs):  # noqa: ANN002, ANN003, ANN202
        seen["misalignment"] = log_density
        return real_misalignment(*args, log_density=log_density, **kwargs)

    def perturbation(*args, log_density, **kwargs):  # noqa: ANN002, ANN003, ANN202
        seen["perturbation"] = log_density
        return real_perturbation(*args, log_density=log_density, **kwargs)

    monkeypatch.setattr(stage_module, "misalignment_batch", misalignment)
    monkeypatch.setattr(stage_module, "perturbation_batch", perturbation)
    section = run_robustness(trained, RobustnessOptions(("misalignment", "perturbation"), steps=2, images=3,
                                                        batch_size=3))
    assert seen == {"misalignment": True, "perturbation": True}
    assert section["metrics"]["pac"] is not None  # a density is positive: PAC is defined on every image


def test_a_stage_finishing_while_another_process_holds_the_run_writes_nothing_then_finishes_from_its_batches(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Records and result are written together under the run's lock: while another holder has it (here a
    second open of the lock file, as another process would), the finished stage writes neither, keeps its
    batches, and a second call finishes without scoring an image again."""
    from benchmark.run.store import RunBusy, run_lock

    run_dir = _trained(tmp_path)
    options = RobustnessOptions(("misalignment",), **FAST)
    monkeypatch.setattr(stage_module, "RESULT_LOCK_WAIT_S", 0.0)
    with run_lock(run_dir), pytest.raises(RunBusy):
        run_robustness(run_dir, options)
    assert read_records(run_dir, "robustness") is None
    assert "robustness" not in json.loads((run_dir / "result.json").read_text())
    assert len(list((run_dir / STAGE_PARTIAL_DIR).glob("*/batch-*.json"))) == 2
    monkeypatch.setattr(stage_module, "_score_batch", lambda *a, **k: pytest.fail("an image was scored again"))
    section = run_robustness(run_dir, options)
    assert section["num_images"] == 6 and read_records(run_dir, "robustness") is not None
