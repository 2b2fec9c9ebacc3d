"""TesNet (``tesnet``): what it declares, read without torch (methods/declaration.py)."""
from methods.declaration import MethodDeclaration, count, epochs, non_negative, positive, real
from methods.specs.lineage import APPENDED_BLOCK, LAST_LAYER, WARM_JOINT, joint_schedule
from methods.space import LogUniform, Uniform

DECLARATION = MethodDeclaration(
    name="tesnet",
    display_name="TesNet",
    adapter="methods.tesnet:TesNet",
    hyperparameters={
        "basis_dim": count(64, minimum=1),
        **WARM_JOINT,
        "add_on_lr": positive(0.003),
        "basis_lr": positive(0.003),
        "add_on_weight_decay": non_negative(0.001),
        **joint_schedule(5, 0.1),
        "push_epochs": epochs((10,)),
        **LAST_LAYER,
        "orth_weight": real(0.0001),
        "subsep_weight": real(-1e-07),
        **APPENDED_BLOCK,
    },
    # the ranges `protobench tune` searches (methods/space.py), each holding the paper's default:
    # learning rates log-uniform over about a decade either side, loss weights and temperatures
    # uniform over the range their papers discuss (docs/guides/tuning.md)
    search_space={
        "add_on_lr": LogUniform(0.0003, 0.03),
        "basis_lr": LogUniform(0.0003, 0.03),
        "last_layer_lr": LogUniform(1e-05, 0.001),
        "block_lr": LogUniform(1e-05, 0.01),
        "joint_lr_gamma": Uniform(0.05, 0.5),
        "clst_weight": Uniform(0.1, 2.0),
        "sep_weight": Uniform(-0.5, 0.0),
        "orth_weight": LogUniform(1e-05, 0.001),
        "subsep_weight": Uniform(-1e-05, 0.0),
    },
    references=(
        "Wang et al., TesNet, ICCV 2021",
        "official code: JackeyWang96/TesNet",
        "docs/protocol/tesnet.md",
    ),
    # the settings reported by name (benchmark/grids/cub_ablations.toml, cub_rivals.toml)
    variants={
        "expanded": {'expanded': True},
    },
)
