"""EvalProtoPNet (``evalprotopnet``): what it declares, read without torch (methods/declaration.py)."""
from methods.declaration import MethodDeclaration, count, non_negative, positive, real
from methods.specs.lineage import APPENDED_BLOCK, WARM_JOINT, joint_schedule
from methods.space import LogUniform, Uniform

DECLARATION = MethodDeclaration(
    name="evalprotopnet",
    display_name="EvalProtoPNet",
    adapter="methods.evalprotopnet:EvalProtoPNet",
    hyperparameters={
        "basis_dim": count(64, minimum=1),
        **WARM_JOINT,
        "add_on_lr": positive(0.003),
        "basis_lr": positive(0.003),
        "aggregation_lr": positive(1e-06),
        "add_on_weight_decay": non_negative(0.001),
        **joint_schedule(3, 0.2),
        "sdfa_margin": non_negative(0.1),
        "clst_weight": real(0.8),
        "sep_weight": real(-0.08),
        "orth_weight": real(0.0001),
        "sdfa_weight": real(0.5),
        **APPENDED_BLOCK,
    },
    # the ranges `protobench tune` searches (methods/space.py), each holding the paper's default:
    # learning rates log-uniform over about a decade either side, loss weights and temperatures
    # uniform over the range their papers discuss (docs/guides/tuning.md)
    search_space={
        "add_on_lr": LogUniform(0.0003, 0.03),
        "basis_lr": LogUniform(0.0003, 0.03),
        "block_lr": LogUniform(1e-05, 0.01),
        "joint_lr_gamma": Uniform(0.05, 0.5),
        "clst_weight": Uniform(0.1, 2.0),
        "sep_weight": Uniform(-0.5, 0.0),
        "orth_weight": LogUniform(1e-05, 0.001),
        "sdfa_weight": Uniform(0.0, 2.0),
        "sdfa_margin": Uniform(0.01, 0.5),
    },
    needs_early_tokens=True,
    references=(
        "Huang et al., EvalProtoPNet, ICCV 2023",
        "official code: hqhQAQ/EvalProtoPNet",
        "docs/protocol/evalprotopnet.md",
    ),
    # the settings reported by name (benchmark/grids/cub_ablations.toml, cub_rivals.toml)
    variants={
        "expanded": {'expanded': True},
    },
)
