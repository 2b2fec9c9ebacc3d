"""NPPP (``nppp``): what it declares, read without torch (methods/declaration.py)."""
from methods.declaration import MethodDeclaration, choice, count, interval, non_negative, positive, real
from methods.space import LogUniform, Uniform

DECLARATION = MethodDeclaration(
    name="nppp",
    display_name="NPPP",
    adapter="methods.nppp.model:NPPP",
    hyperparameters={
        "discovery_epochs": count(1),
        "finetune_epochs": count(19),
        "momentum": interval(0.99, 0.0, 1.0, high_open=True),
        "temperature": positive(0.2),
        "sa_init": real(0.5),
        "lambda_ppd": non_negative(0.8),
        "ppd_temperature": positive(0.1),
        "background_weight": non_negative(0.1),
        "ot_epsilon": positive(0.05),
        "ot_iterations": count(3, minimum=1),
        "fg_threshold": interval(0.5, 0.0, 1.0),
        "pca_niter": count(10),
        "sign": choice('native', ('native', 'attention')),
        "lr_block": positive(0.0001),
        "lr_sa": positive(1e-06),
        "prototype_std": positive(0.02),
    },
    # the ranges `protobench tune` searches (methods/space.py), each holding the paper's default:
    # learning rates log-uniform over about a decade either side, loss weights and temperatures
    # uniform over the range their papers discuss (docs/guides/tuning.md)
    search_space={
        "temperature": Uniform(0.05, 1.0),
        "momentum": Uniform(0.9, 0.999),
        "sa_init": Uniform(0.1, 0.9),
        "lambda_ppd": Uniform(0.0, 2.0),
        "ppd_temperature": Uniform(0.02, 0.5),
        "background_weight": Uniform(0.0, 1.0),
        "lr_block": LogUniform(1e-05, 0.01),
        "lr_sa": LogUniform(1e-07, 1e-05),
    },
    references=(
        "Zhu et al., Interpretable Image Classification via Non-parametric Part Prototype Learning, CVPR 2025",
        "official code: zijizhu/proto-non-param",
        "docs/protocol/nppp.md",
    ),
    # the settings reported by name (benchmark/grids/cub_ablations.toml, cub_rivals.toml)
    variants={
        "attention_sign": {'sign': 'attention'},
    },
)
