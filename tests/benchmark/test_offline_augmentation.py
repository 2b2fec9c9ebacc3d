"""The offline-augmentation variant through the harness: the epochs read the augmented copies,
push the un-augmented split and the last-layer phases the copies (official ProtoPNet/TesNet
main.py: ``train_push_loader`` vs ``train_loader``); one augmented set (and token-cache entry)
per dataset whatever the run seed."""
from pathlib import Path

import pytest

import benchmark.run.training
import methods.common.lineage
import methods.protopnet
from benchmark.config import build_run_spec
from benchmark.data import AUGMENTATION_SEED, load_dataset
from benchmark.run.runner import execute_run
from benchmark.run.store import RunDir

IMAGES_PER_CLASS = 4
CLASSES = 2


def tiny_spec(root: Path, seed: int) -> dict:
    return {
        "dataset": "synthbirds", "data_root": str(root),
        "dataset_args": {"classes": CLASSES, "images_per_class": IMAGES_PER_CLASS, "seed": 0},
        "backbone": "dinov2_vits14", "weights": "random",
        "backbone_args": {"depth": 1, "embed_dim": 24, "num_heads": 2}, "image_size": 56,
        "batch_size": 32, "eval_batch_size": 32, "augmentation": "offline40",
        "method": "protopnet", "prototypes_per_class": 1, "seed": seed,
        "method_args": {"warm_epochs": 1, "joint_epochs": 1, "push_epochs": [1], "last_layer_epochs": 1,
                        "prototype_dim": 8},
    }


@pytest.fixture(scope="module")
def two_seeds(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """Two ProtoPNet runs (seeds 0 and 1) under offline40 sharing one cache folder, with what
    push and the last-layer phase read recorded, and the cache entries after each run."""
    work = tmp_path_factory.mktemp("offline40")
    cache = work / "cache"
    reads: dict[str, list[int]] = {"epoch": [], "push": [], "last_layer": []}
    real_push, real_last_layer = methods.protopnet.ProtoPNet.push, methods.common.lineage.last_layer_phase
    real_run_pass = benchmark.run.training.run_pass

    def run_pass(members, order, **kwargs):  # one training epoch's pass over its order
        reads["epoch"].append(len(order))
        return real_run_pass(members, order, **kwargs)

    def push(self, data):
        reads["push"].append(len(data))
        return real_push(self, data)

    def last_layer_phase(last_layer, data, *args, **kwargs):
        reads["last_layer"].append(len(data))
        return real_last_layer(last_layer, data, *args, **kwargs)

    entries, results = [], []
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(methods.protopnet.ProtoPNet, "push", push)
        patch.setattr(methods.common.lineage, "last_layer_phase", last_layer_phase)
        patch.setattr(benchmark.run.training, "run_pass", run_pass)
        for seed in (0, 1):
            spec = build_run_spec(tiny_spec(work / "synthbirds", seed), where="test")
            results.append(execute_run(spec, work / "runs" / spec.run_id, cache_root=cache, progress=False,
                                       log=lambda line: None))
            entries.append(sorted(p.name for p in cache.iterdir() if "-train-" in p.name))
    return {"reads": reads, "entries": entries, "results": results, "work": work}


def _train_size(work: Path) -> int:
    return len(load_dataset("synthbirds", work / "synthbirds", "train", image_size=56))


def test_push_reads_the_clean_split_and_the_last_layer_the_augmented_copies(two_seeds: dict) -> None:
    clean = _train_size(two_seeds["work"])
    assert clean > 0
    # two epochs (warm, joint), one push after global epoch 1 and one last-layer phase per run
    assert two_seeds["reads"]["epoch"] == [40 * clean] * 4
    assert two_seeds["reads"]["push"] == [clean, clean]
    assert two_seeds["reads"]["last_layer"] == [40 * clean, 40 * clean]


def test_two_seeds_share_one_augmented_cache_entry(two_seeds: dict) -> None:
    after_seed0, after_seed1 = two_seeds["entries"]  # training-split entries after each run
    assert len(after_seed0) == 2, after_seed0  # the clean split (push) and the augmented copies
    assert after_seed1 == after_seed0  # the second seed's run built no training entry of its own


def test_the_augmentation_seed_is_recorded_in_provenance(two_seeds: dict) -> None:
    for result in two_seeds["results"]:
        assert result["provenance"]["augmentation_seed"] == AUGMENTATION_SEED
    assert two_seeds["results"][0]["spec"]["seed"] != two_seeds["results"][1]["spec"]["seed"]
    assert RunDir(two_seeds["work"] / "runs" / two_seeds["results"][0]["run_id"]).result() is not None
