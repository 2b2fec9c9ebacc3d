"""Def. ProtoPNet (``deformable_protopnet``): what it declares, read without torch (methods/declaration.py)."""
import math

from methods.declaration import MethodDeclaration, count, epochs, interval, non_negative, positive, real
from methods.specs.lineage import APPENDED_BLOCK, WARM_JOINT, joint_schedule
from methods.space import LogUniform, Uniform

DECLARATION = MethodDeclaration(
    name="deformable_protopnet",
    display_name="Def. ProtoPNet",  # as the paper's tables name it
    adapter="methods.deformable.model:DeformableProtoPNet",
    hyperparameters={
        "margin": interval(0.1, 0.0, math.pi / 2, high_open=True),
        "incorrect_class_connection": real(-0.5),
        "clst_weight": real(-0.8),
        "sep_weight": real(0.08),
        "orth_weight": real(0.1),
        **WARM_JOINT,
        "push_epochs": epochs((10, 19)),
        "add_on_lr": positive(0.003),
        "prototype_lr": positive(0.003),
        "offset_lr": positive(0.0001),
        "add_on_weight_decay": non_negative(0.001),
        **joint_schedule(5, 0.2),
        "offset_channels": count(128, minimum=1),
        "offset_init_std": non_negative(2e-05),
        **APPENDED_BLOCK,
    },
    # the ranges `protobench tune` searches (methods/space.py), each holding the paper's default:
    # learning rates log-uniform over about a decade either side, loss weights and temperatures
    # uniform over the range their papers discuss (docs/guides/tuning.md)
    search_space={
        "add_on_lr": LogUniform(0.0003, 0.03),
        "prototype_lr": LogUniform(0.0003, 0.03),
        "offset_lr": LogUniform(1e-05, 0.001),
        "block_lr": LogUniform(1e-05, 0.01),
        "joint_lr_gamma": Uniform(0.05, 0.5),
        "margin": Uniform(0.0, 0.5),
        "clst_weight": Uniform(-2.0, -0.1),
        "sep_weight": Uniform(0.0, 0.5),
        "orth_weight": LogUniform(0.001, 1.0),
    },
    references=(
        "Donnelly et al., Deformable ProtoPNet, CVPR 2022",
        "official code: jdonnelly36/Deformable-ProtoPNet",
        "docs/protocol/deformable_protopnet.md",
    ),
    # the settings reported by name (benchmark/grids/cub_ablations.toml, cub_rivals.toml)
    variants={
        "expanded": {'expanded': True},
    },
)
