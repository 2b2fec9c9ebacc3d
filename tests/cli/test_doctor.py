"""protobench doctor: names each wrong path of a grid with its fix, passes a grid that can run
here, estimates the token caches' disk use like the cache writes it; plan flags placeholders."""
from pathlib import Path

import huggingface_hub.constants
import pytest

from benchmark.cache.sizing import cache_entry_bytes
from benchmark.cli import doctor_checks as doctor
from benchmark.cli import main
from benchmark.grid import parse_grid
from tiny_grid import write_tiny_grid

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def empty_hf_cache(tmp_path, monkeypatch):
    """An empty Hugging Face cache, whatever this machine holds."""
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(tmp_path / "hf-hub"))


def write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


def test_doctor_names_each_wrong_path(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(doctor.shutil, "disk_usage", lambda path: type("U", (), {"free": 2**50})())
    grid = write(tmp_path / "wrong.toml", f"""
name = "wrong"
[defaults]
method = "vmfproto"
prototypes_per_class = 3
[[sweep]]
dataset = "cub"
data_root = "{tmp_path / 'CUB_typo'}"
backbone = "dinov2_vits14"
weights = "{tmp_path / 'missing_s14.safetensors'}"
[[sweep]]
dataset = "dogs"
data_root = "/path/to/StanfordDogs"
backbone = "dinov2_vitb14"
weights = "hf-cache"
""")
    assert main(["doctor", str(grid), "--cache-dir", str(tmp_path / "cache")]) == 1
    out = capsys.readouterr().out
    lines = {line.split(":")[0]: line for line in out.splitlines() if line.startswith("[")}
    fails = [line for line in out.splitlines() if line.startswith("[fail]")]
    assert len(fails) == 4, out
    assert "CUB_typo" in lines[f"[fail] data cub {tmp_path / 'CUB_typo'}"]
    assert "placeholder" in lines["[fail] data dogs /path/to/StanfordDogs"]
    assert "--data-root" in lines["[fail] data dogs /path/to/StanfordDogs"]
    assert "does not exist" in lines[f"[fail] weights dinov2_vits14 {tmp_path / 'missing_s14.safetensors'}"]
    hf = lines["[fail] weights dinov2_vitb14 hf-cache"]
    assert "Hugging Face cache" in hf and "→" in hf
    assert "[  ok] python" in out and "slurm" in out


def test_doctor_passes_a_grid_that_runs_here(tmp_path, capsys):
    grid = write_tiny_grid(tmp_path / "ok.toml", "ok", tmp_path / "birds",
                           dataset_args={"classes": 2, "images_per_class": 4})
    assert main(["doctor", str(grid), "--cache-dir", str(tmp_path / "cache")]) == 0
    out = capsys.readouterr().out
    assert "[warn] data synthbirds" in out and "will be generated" in out  # exit 0: a warning, not a failure
    assert "[  ok] weights dinov2_vits14 random" in out and "[  ok] disk" in out
    assert not (tmp_path / "birds").exists()  # the doctor generates nothing


def test_doctor_without_a_grid_checks_the_machine(capsys):
    assert main(["doctor"]) == 0
    out = capsys.readouterr().out
    assert "python" in out and "torch" in out and "cuda" in out and "hf cache" in out


def test_disk_check_fails_when_the_caches_do_not_fit(tmp_path, monkeypatch):
    grid = parse_grid({"name": "d", "defaults": {"dataset": "cub", "data_root": "/x", "backbone": "dinov2_vitb14",
                                                 "method": "vmfproto", "prototypes_per_class": 3}}, source="d.toml")
    monkeypatch.setattr(doctor.shutil, "disk_usage", lambda path: type("U", (), {"free": 2**30})())
    check = doctor.disk_check(grid, tmp_path / "cache")
    assert check.status == "fail" and "--cache-dir" in check.fix
    # CUB with ViT-B/14 at 224: 256 patches + 1 CLS, 768 wide, float16 block inputs, float32
    # attention (docs/protocol/harness.md); 3 arrays of 3 entries, each with a .npy header of at most 128 bytes
    per_image = 257 * 768 * 2 + 256 * 4 + 8
    data = (5994 + 5794 + 5794) * per_image
    assert 0 < doctor.grid_cache_bytes(grid) - data <= 3 * 3 * 128


def test_cache_estimate_matches_the_arrays_the_cache_writes(tmp_path):
    from benchmark.config import RunSpec
    from benchmark.run.prepare import prepare

    spec = RunSpec(dataset="synthbirds", backbone="dinov2_vits14", method="vmfproto", prototypes_per_class=2,
                   data_root=str(tmp_path / "birds"), dataset_args={"classes": 2, "images_per_class": 4},
                   weights="random", backbone_args={"depth": 2, "embed_dim": 48, "num_heads": 2},
                   cache_early_tokens=True, device="cpu")
    prep = prepare(spec)
    source = prep.train_source(tmp_path / "cache")
    arrays = list((tmp_path / "cache").rglob("*.npy"))
    on_disk = sum(p.stat().st_size for p in arrays)
    assert len(arrays) == 4  # block_input, attention, labels, early_tokens
    assert cache_entry_bytes(spec, len(source), early_tokens=True) == on_disk


def test_plan_flags_placeholders_and_still_plans(capsys):
    assert main(["plan", str(REPO / "benchmark" / "grids" / "cub_main.toml")]) == 0
    out = capsys.readouterr().out
    assert "GPU-hours" in out
    assert "[fail] data cub /path/to/CUB_200_2011: a placeholder" in out
    assert "protobench doctor" in out
