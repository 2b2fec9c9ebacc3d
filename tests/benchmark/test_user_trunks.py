"""``backbone = "module:factory"``: a user trunk named by import path runs through FrozenTrunk,
the token cache and the runner like a timm one; its key is where the factory is defined; a
trunk that breaks the contract is refused with one message naming the clause, before compute."""
from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file

from benchmark.backbones import backbone_spec, create_backbone
from benchmark.config import build_run_spec
from benchmark.errors import ProtobenchError
from tiny_grid import write_tiny_grid

OWN = "example_trunk:tiny_vit"
SIZE = 112


def test_a_user_trunk_has_the_geometry_of_its_model() -> None:
    trunk = create_backbone(OWN, weights="random", image_size=SIZE)
    out = trunk(torch.randn(2, 3, SIZE, SIZE))
    assert (trunk.grid, trunk.num_prefix_tokens, trunk.embed_dim, trunk.weights_source) == ((7, 7), 5, 32, "random")
    assert out.tokens.shape == (2, 49, 32) and out.block_input.shape == (2, 54, 32) and out.attention.shape == (2, 49)
    assert backbone_spec(OWN).architecture.mean == (0.485, 0.456, 0.406)  # timm's data config of the model


def test_the_key_is_where_the_factory_is_defined_so_one_trunk_has_one_run_id() -> None:
    base = {"dataset": "synthbirds", "method": "protopnet", "prototypes_per_class": 2, "weights": "random"}
    direct = build_run_spec({**base, "backbone": OWN}, where="test")
    reexported = build_run_spec({**base, "backbone": "broken_trunks:tiny_vit"}, where="test")  # imported there
    assert direct.backbone == reexported.backbone == OWN and direct.run_id == reexported.run_id
    other = build_run_spec({**base, "backbone": "broken_trunks:noisy"}, where="test")
    assert other.run_id != direct.run_id


def test_a_weights_file_loads_into_a_user_trunk(tmp_path: Path) -> None:
    torch.manual_seed(1)
    saved = create_backbone(OWN, weights="random", image_size=SIZE)
    path = tmp_path / "own.safetensors"
    save_file(dict(saved.model.state_dict()), path)
    torch.manual_seed(2)  # the factory's own random init must not matter
    loaded = create_backbone(OWN, weights=str(path), image_size=SIZE)
    assert loaded.weights_checksum == saved.weights_checksum and loaded.weights_source == str(path)


@pytest.mark.parametrize(("name", "message"), [
    ("no_such_module:tiny_vit", r"cannot import 'tiny_vit' from 'no_such_module'"),
    ("example_trunk:no_such_factory", r"cannot import 'no_such_factory' from 'example_trunk'"),
    ("example_trunk:annotations", r"is a _Feature, not a callable"),
])
def test_a_name_that_imports_no_factory_is_refused_when_the_grid_is_read(name: str, message: str) -> None:
    spec = {"dataset": "synthbirds", "method": "protopnet", "prototypes_per_class": 2, "backbone": name}
    with pytest.raises(ProtobenchError, match=message):
        build_run_spec(spec, where="test")


def test_the_factorys_own_weights_are_hf_cache_and_its_error_names_it() -> None:
    with pytest.raises(ProtobenchError, match=r"'example_trunk:tiny_vit': the factory raised ValueError: "
                                              r"tiny_vit has no pretrained weights"):
        create_backbone(OWN, image_size=SIZE)  # weights default: the factory's own (pretrained=True)


BROKEN = {
    "not_a_vit": r"the factory returned a Linear, not a timm VisionTransformer or Eva",
    "wrong_prefix": r"its embedding yields 54 tokens, not num_prefix_tokens \+ grid = 2 \+ 49; set num_prefix_tokens",
    "wrong_width": r"tokens are \(2, 49, 32\), not B×N×D = \(2, 49, 64\)",
    "foreign_attention": r"its last block's attention is a HeadAverage.*use timm's Attention or EvaAttention",
    "noisy": r"two passes over the same images give different tokens.*make the trunk deterministic",
    "batch_mixing": r"an image's tokens depend on the other images of its batch",
    "extra_residual": r"with attn.proj and mlp.fc2 zeroed, is not the identity",
}


@pytest.mark.parametrize("name", sorted(BROKEN))
def test_each_broken_trunk_gets_one_message_naming_its_clause(name: str) -> None:
    with pytest.raises(ProtobenchError, match=BROKEN[name]) as caught:
        create_backbone(f"broken_trunks:{name}", weights="random", image_size=SIZE)
    others = [message for other, message in BROKEN.items() if other != name]
    assert not any(re.search(message, str(caught.value)) for message in others)  # its own clause only


def test_a_tiny_grid_runs_end_to_end_on_a_user_trunk(tmp_path: Path) -> None:
    from benchmark.cli import main
    from benchmark.run.store import find_run_dirs

    grid = tmp_path / "own.toml"
    write_tiny_grid(grid, "own", tmp_path / "synthbirds", without=("backbone_args",),
                    dataset_args={"classes": 3, "images_per_class": 6, "seed": 0}, backbone="example_trunk:tiny_vit",
                    image_size=112,
                    method_args={"discovery_epochs": 1, "end_to_end_epochs": 1})
    assert main(["run", str(grid), "--runs-dir", str(tmp_path / "runs")]) == 0
    (run,) = find_run_dirs(tmp_path / "runs")
    result = run.result()
    assert result["spec"]["backbone"] == OWN and result["evaluation"]["map_grid"] == [7, 7]
    assert result["metrics"]["acc"] is not None
    entries = {entry.name.rsplit("-", 1)[0] for entry in (tmp_path / "runs" / ".token-cache").iterdir()}
    assert {f"{OWN}-train-clean", f"{OWN}-test-clean"} <= entries  # through the token cache
