"""``protobench bundle``: a tiny trained grid bundled with its heads; ``evaluate`` of a bundled run
gives its result.json metrics exactly from the safetensors head and the same trunk, ``report`` of
the bundle equals ``report`` of the runs, one flipped byte fails ``bundle verify`` naming the file,
the model card parses with huggingface_hub, and nothing in a bundle is a pickle."""
from __future__ import annotations

import json
import shutil
import tarfile
from pathlib import Path

import pytest
import torch

from benchmark.bundle.head import read_head
from benchmark.bundle.manifest import HEAD_FILE
from benchmark.bundle.manifest import MANIFEST_FILE, sha256_of
from benchmark.cli import main
from benchmark.run.checkpoint import load_checkpoint
from tiny_grid import write_tiny_grid

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    work = tmp_path_factory.mktemp("bundle")
    grid = write_tiny_grid(work / "tiny.toml", "tiny", work / "synthbirds", device="cpu",
                           method_args={"end_to_end_epochs": 1}, sweep=[{"seed": [0, 1]}])
    assert main(["run", str(grid), "--runs-dir", str(work / "runs")]) == 0
    return work / "runs"


@pytest.fixture(scope="module")
def bundle(runs: Path) -> Path:
    out = runs.parent / "b"
    assert main(["bundle", str(runs), "--checkpoints", "--out", str(out)]) == 0
    return out


def run_dirs(root: Path) -> list[Path]:
    return sorted(p.parent for p in root.rglob("result.json"))


def test_bundle_holds_the_runs_files_and_no_pickle(runs: Path, bundle: Path) -> None:
    bundled = run_dirs(bundle)
    assert [(p.parent.name, p.name) for p in bundled] == [(p.parent.name, p.name) for p in run_dirs(runs)]
    for source, copy in zip(run_dirs(runs), bundled):
        assert {p.name for p in copy.iterdir()} == {"spec.json", "result.json", "metrics.jsonl", "per_image.parquet",
                                                    "per_prototype.parquet", "log.txt", HEAD_FILE}
        assert (copy / "result.json").read_bytes() == (source / "result.json").read_bytes()
        state = load_checkpoint(source / "checkpoint.pt")["method"]
        head = read_head(copy / HEAD_FILE)
        assert head.keys() == state.keys()
        for key, value in state.items():
            if isinstance(value, dict):
                assert all(torch.equal(head[key][k], v) for k, v in value.items())
            else:
                assert torch.equal(head[key], value)
    assert not list(bundle.rglob("*.pt")) and not list(bundle.rglob("*.pkl"))


def test_evaluate_of_a_bundled_run_reproduces_its_metrics_exactly(bundle: Path) -> None:
    run = run_dirs(bundle)[0]
    assert main(["evaluate", str(run)]) == 0
    recorded = json.loads((run / "result.json").read_text())
    (evaluation,) = (run / "evaluations").glob("map_pool*.json")
    assert json.loads(evaluation.read_text())["metrics"] == recorded["metrics"]
    assert main(["bundle", "verify", str(bundle)]) == 0  # evaluate's own outputs are set aside, not failures


def test_report_of_the_bundle_equals_report_of_the_runs(runs: Path, bundle: Path,
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    outputs = []
    for root in (runs, bundle):
        capsys.readouterr()
        assert main(["report", str(root), "--ci", "--significance"]) == 0
        outputs.append(capsys.readouterr().out)
    assert outputs[0] == outputs[1] and "vMFProto" in outputs[0]


def test_one_flipped_byte_fails_verify_naming_the_file(bundle: Path, tmp_path: Path,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    copy = tmp_path / "b"
    shutil.copytree(bundle, copy)
    assert main(["bundle", "verify", str(copy)]) == 0
    target = run_dirs(copy)[1] / "per_image.parquet"
    data = bytearray(target.read_bytes())
    data[len(data) // 2] ^= 0x01
    target.write_bytes(bytes(data))
    capsys.readouterr()
    assert main(["bundle", "verify", str(copy)]) == 1
    err = capsys.readouterr().err
    assert f"{target}: changed" in err and "FAILED" in err and err.count(": changed") == 1


def test_a_run_added_after_bundling_fails_verify(bundle: Path, tmp_path: Path,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    copy = tmp_path / "b"
    shutil.copytree(bundle, copy)
    source = run_dirs(copy)[0]
    shutil.copytree(source, source.parent / "forged000000")
    capsys.readouterr()
    assert main(["bundle", "verify", str(copy)]) == 1
    assert "forged000000/result.json: not in the manifest" in capsys.readouterr().err


def test_model_card_parses_with_the_metrics_of_every_run(bundle: Path) -> None:
    from huggingface_hub import ModelCard

    card = ModelCard.load(bundle / "README.md")
    assert card.data.library_name == "protobench" and card.data.license == "unknown"
    assert card.data.datasets == ["synthbirds"]
    values = {e.metric_name: e.metric_value for e in card.data.eval_results}
    for run in run_dirs(bundle):
        result = json.loads((run / "result.json").read_text())
        assert values[f"acc tiny/{result['run_id']}"] == result["metrics"]["acc"]
        assert values[f"con tiny/{result['run_id']}"] == result["metrics"]["con"]


def test_archive_holds_the_same_files(bundle: Path) -> None:
    archive = bundle.parent / "b.tar.gz"
    with tarfile.open(archive) as tar:
        members = {m.name.removeprefix("b/"): tar.extractfile(m).read() for m in tar.getmembers() if m.isfile()}
    listed = dict(reversed(line.split("  ", 1)) for line in (bundle / MANIFEST_FILE).read_text().splitlines())
    assert set(members) == {*listed, MANIFEST_FILE}
    import hashlib
    assert all(hashlib.sha256(members[name]).hexdigest() == digest for name, digest in listed.items())
    assert all(sha256_of(bundle / name) == digest for name, digest in listed.items())


def test_refusals_before_writing(runs: Path, bundle: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["bundle", str(runs), "--out", str(bundle)]) == 2
    assert "already exists" in capsys.readouterr().err
    bare = tmp_path / "bare"
    shutil.copytree(run_dirs(runs)[0], bare / "tiny" / "x")
    (bare / "tiny" / "x" / "checkpoint.pt").unlink()
    assert main(["bundle", str(bare), "--checkpoints", "--out", str(tmp_path / "out")]) == 2
    assert "no checkpoint.pt" in capsys.readouterr().err
    assert not (tmp_path / "out").exists() and not (tmp_path / "out.tar.gz").exists()
    assert main(["bundle", "verify", str(tmp_path)]) == 2
    assert "has no SHA256SUMS" in capsys.readouterr().err


def test_figures_and_site_read_a_bundle(bundle: Path, tmp_path: Path) -> None:
    run = run_dirs(bundle)[0]
    assert main(["figures", str(run), "--out", str(tmp_path / "figures"), "--images", "1", "--top", "1"]) == 0
    assert list((tmp_path / "figures").glob("*.png"))
    assert main(["site", str(bundle), "--out", str(tmp_path / "site")]) == 0
    assert len(list((tmp_path / "site" / "runs").glob("*.html"))) == len(run_dirs(bundle))


def test_two_labs_split_by_seed_make_one_leaderboard(runs: Path, tmp_path: Path) -> None:
    """The leaderboard's done-when: the trained runs split by seed into two labs, each bundled; the
    leaderboard pools the seeds, re-scores them from their records (equal to result.json), and a
    second build is byte-identical."""
    import jsonschema

    for run in run_dirs(runs):
        seed = json.loads((run / "result.json").read_text())["spec"]["seed"]
        shutil.copytree(run, tmp_path / f"lab{seed}" / run.parent.name / run.name, ignore=shutil.ignore_patterns("*.pt"))
    for seed in (0, 1):
        assert main(["bundle", str(tmp_path / f"lab{seed}"), "--out", str(tmp_path / f"bundle{seed}")]) == 0
    boards = []
    for out in ("L", "L2"):
        assert main(["leaderboard", str(tmp_path / "bundle0"), str(tmp_path / "bundle1.tar.gz"),
                     "--out", str(tmp_path / out)]) == 0
        boards.append({p.name: p.read_bytes() for p in (tmp_path / out).iterdir() if p.is_file()})
    assert boards[0] == boards[1]
    document = json.loads(boards[0]["leaderboard.json"])
    jsonschema.Draft202012Validator(json.loads(boards[0]["leaderboard.schema.json"])).validate(document)
    entry = document["boards"][0]["entries"][0]
    assert entry["seeds"] == [0, 1] and entry["rescored"] and entry["verified"]
    acc = next(r for r in document["boards"][0]["rankings"] if r["metric"] == "acc")["standings"][0]
    recorded = [json.loads((r / "result.json").read_text())["metrics"]["acc"] for r in run_dirs(runs)]
    assert acc["mean"] == pytest.approx(sum(recorded) / 2, abs=1e-9)
