"""Methods and trunks installed packages declare (entry points ``protobench.methods`` and
``protobench.backbones``): found by name like built-ins, and every name clash refused naming both
distributions. The distributions here are metadata folders on ``sys.path``, as pip leaves them."""
from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from methods import plugins, registry
from methods.declaration import MethodDeclaration

SPEC = '''from methods.declaration import MethodDeclaration, positive
DECLARATION = MethodDeclaration(name="{name}", display_name="{label}", adapter="{module}_model:Head",
                                hyperparameters={{"lr": positive(0.1)}})
'''


def _distribution(site: Path, dist: str, version: str, group: str, entries: dict[str, str]) -> None:
    info = site / f"{dist.replace('-', '_')}-{version}.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: {version}\n")
    (info / "entry_points.txt").write_text(f"[{group}]\n" + "".join(f"{k} = {v}\n" for k, v in entries.items()))


@pytest.fixture
def site(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    monkeypatch.syspath_prepend(str(tmp_path))
    plugins.clear_cache()
    yield tmp_path
    plugins.clear_cache()
    for name in [m for m in sys.modules if m.startswith("lab_")]:
        del sys.modules[name]


def test_an_installed_method_is_named_like_a_built_in(site: Path) -> None:
    (site / "lab_a_spec.py").write_text(SPEC.format(name="lab_proto", label="Lab proto", module="lab_a"))
    _distribution(site, "lab-a", "1.2.0", "protobench.methods", {"lab_proto": "lab_a_spec:DECLARATION"})
    assert "lab_proto" in registry.list_methods() and "vmfproto" in registry.list_methods()
    assert isinstance(registry.declaration("lab_proto"), MethodDeclaration)
    assert registry.display_name_of("lab_proto") == "Lab proto"
    assert registry.method_provider("lab_proto").label() == "lab-a 1.2.0"
    assert registry.method_provider("vmfproto").builtin
    assert registry.resolved_method_args("lab_proto", {}) == {"lr": 0.1}
    with pytest.raises(ValueError, match=r"lr = -1\.0 is a learning rate and must be > 0"):
        registry.validate_method_args("lab_proto", {"lr": -1.0})
    with pytest.raises(TypeError, match=r"lr = .x. must be of type int or float"):
        registry.validate_method_args("lab_proto", {"lr": "x"})
    with pytest.raises(ValueError, match=r"unknown method 'lab_prot' \(did you mean 'lab_proto'\?\)"):
        registry.declaration("lab_prot")


def test_a_package_that_names_a_built_in_is_refused_naming_both(site: Path, capsys) -> None:
    (site / "lab_b_spec.py").write_text(SPEC.format(name="vmfproto", label="Not vMFProto", module="lab_b"))
    _distribution(site, "lab-b", "0.3", "protobench.methods", {"vmfproto": "lab_b_spec:DECLARATION"})
    clash = r"'vmfproto' of lab-b 0\.3 clashes with the built-in 'vmfproto' of protobench"
    with pytest.raises(ValueError, match=clash):
        registry.declaration("vmfproto")
    assert "vmfproto" in registry.list_methods()  # the listing goes on, the clash warned once
    assert registry.declaration("protopnet").name == "protopnet"  # other names are not concerned
    err = capsys.readouterr().err
    assert err.count("clashes with the built-in") == 1 and "Traceback" not in err


def test_two_packages_declaring_one_name_refuse_only_that_name(site: Path, capsys) -> None:
    for dist in ("lab-c", "lab-d"):
        module = dist.replace("-", "_")
        (site / f"{module}_spec.py").write_text(SPEC.format(name="shared", label=dist, module=module))
        _distribution(site, dist, "1.0", "protobench.methods", {"shared": f"{module}_spec:DECLARATION"})
    with pytest.raises(ValueError, match=r"'shared' is declared by two installed distributions, lab-[cd] 1\.0 and "
                                         r"lab-[cd] 1\.0"):
        registry.declaration("shared")
    assert "shared" not in registry.list_methods() and "vmfproto" in registry.list_methods()
    assert registry.declaration("vmfproto").name == "vmfproto" and registry.resolved_method_args("knn", {}) is not None
    assert capsys.readouterr().err.count("declared by two installed distributions") == 1
    assert not [m for m in sys.modules if m.startswith("lab_c") or m.startswith("lab_d")]  # never imported


def test_a_package_whose_declaration_does_not_load_fails_alone(site: Path, capsys) -> None:
    (site / "lab_f_spec.py").write_text("raise RuntimeError('broken on import')\n")
    _distribution(site, "lab-f", "0.1", "protobench.methods", {"lab_f": "lab_f_spec:DECLARATION"})
    (site / "lab_g_spec.py").write_text(SPEC.format(name="lab_g", label="Lab G", module="lab_g"))
    _distribution(site, "lab-g", "0.2", "protobench.methods", {"lab_g": "lab_g_spec:DECLARATION"})
    assert registry.declaration("lab_g").display_name == "Lab G"  # found without importing lab_f
    assert "lab_f_spec" not in sys.modules
    listed = registry.list_methods()
    assert "lab_g" in listed and "lab_f" not in listed and "vmfproto" in listed
    registry.list_methods()
    err = capsys.readouterr().err
    assert err.count("warning: protobench.methods entry point 'lab_f' = 'lab_f_spec:DECLARATION' of lab-f 0.1 "
                     "does not load (RuntimeError: broken on import)") == 1 and "Traceback" not in err
    with pytest.raises(ValueError, match=r"'lab_f' .* of lab-f 0\.1 does not load \(RuntimeError: broken on import\)"):
        registry.declaration("lab_f")


def test_an_entry_point_that_is_no_declaration_is_refused_naming_it(site: Path) -> None:
    (site / "lab_e_spec.py").write_text("DECLARATION = 42\n")
    _distribution(site, "lab-e", "2.0", "protobench.methods", {"lab_e": "lab_e_spec:DECLARATION"})
    with pytest.raises(ValueError, match=r"'lab_e' = 'lab_e_spec:DECLARATION' of lab-e 2\.0 is a int, not a "
                                         r"MethodDeclaration"):
        registry.declaration("lab_e")


def test_a_trunk_package_that_names_an_alias_is_refused_and_its_own_trunk_is_found(site: Path) -> None:
    from benchmark.config import canonical_backbone
    from benchmark.errors import ProtobenchError
    from benchmark.trunks import TrunkDeclaration, trunk_declaration

    (site / "lab_trunk.py").write_text(
        "from benchmark.trunks import TrunkDeclaration\n"
        "TRUNK = TrunkDeclaration('lab_vit', patch_size=16, width=192, prefix_tokens=1, depth=4, "
        "factory='lab_trunk_model:create')\n")
    _distribution(site, "lab-trunk", "0.1", "protobench.backbones", {"lab_vit": "lab_trunk:TRUNK"})
    found = trunk_declaration("lab_vit")
    assert found is not None and isinstance(found[0], TrunkDeclaration) and found[1].label() == "lab-trunk 0.1"
    assert canonical_backbone("lab_vit", where="grid") == "lab_vit"  # its name is its key: no timm import

    _distribution(site, "lab-alias", "0.2", "protobench.backbones", {"dinov2_vits14": "lab_trunk:TRUNK"})
    plugins.clear_cache()
    with pytest.raises(ProtobenchError, match=r"'dinov2_vits14' of lab-alias 0\.2 clashes with the built-in"):
        canonical_backbone("dinov2_vits14", where="grid")


DATASET_SPEC = '''from benchmark.data.cub import read_cub
from benchmark.data.declared import DatasetDeclaration

DATASET = DatasetDeclaration("{name}", "Lab birds", reader="lab_data_spec", classes=4, split_images=(16, 16),
                             parts=True, cub_layout=True, loader="lab_data_spec:read")


def read(root, split, image_size=224):
    return read_cub(root, split, name="synthbirds", image_size=image_size)
'''


def test_an_installed_dataset_runs_by_name_and_records_its_distribution(site: Path, tmp_path: Path) -> None:
    """A package's dataset (entry point ``protobench.datasets``): a grid names it like a built-in,
    its loader reads the split, the run records who provided it; a misspelt name gets the closest
    one and a package claiming a built-in's name is refused naming both."""
    import json

    from benchmark.cli import main
    from benchmark.config import build_run_spec
    from benchmark.data import generate_synthbirds, load_dataset
    from benchmark.errors import ProtobenchError
    from tiny_grid import write_tiny_grid

    (site / "lab_data_spec.py").write_text(DATASET_SPEC.format(name="lab_birds"))
    _distribution(site, "lab-data", "0.4", "protobench.datasets", {"lab_birds": "lab_data_spec:DATASET"})
    root = generate_synthbirds(tmp_path / "birds", classes=4, images_per_class=8, seed=0)
    assert len(load_dataset("lab_birds", root, "train", image_size=56)) == 16
    spec = build_run_spec({"dataset": "lab_birds", "backbone": "dinov2_vits14", "method": "vmfproto",
                           "prototypes_per_class": 2}, where="grid")
    assert spec.has_part_annotations
    with pytest.raises(ProtobenchError, match=r"unknown dataset 'lab_bird' \(did you mean 'lab_birds'\?\)"):
        build_run_spec({**spec.to_json(), "dataset": "lab_bird"}, where="grid")

    grid = write_tiny_grid(tmp_path / "g.toml", "g", root, dataset="lab_birds", without=["dataset_args"],
                           method_args={"end_to_end_epochs": 1})
    assert main(["run", str(grid), "--runs-dir", str(tmp_path / "runs")]) == 0
    (result,) = (tmp_path / "runs" / "g").glob("*/result.json")
    assert json.loads(result.read_text())["dataset_provider"] == {"distribution": "lab-data", "version": "0.4"}

    _distribution(site, "lab-cub", "1.0", "protobench.datasets", {"cub": "lab_data_spec:DATASET"})
    plugins.clear_cache()
    with pytest.raises(ProtobenchError, match=r"'cub' of lab-cub 1\.0 clashes with the built-in 'cub' of protobench"):
        build_run_spec({**spec.to_json(), "dataset": "cub"}, where="grid")
