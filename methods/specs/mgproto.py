"""MGProto (``mgproto``): what it declares, read without torch (methods/declaration.py)."""
from methods.declaration import MethodDeclaration, count, epochs, flag, interval, non_negative, optional_count, positive
from methods.space import LogUniform, Uniform

DECLARATION = MethodDeclaration(
    name="mgproto",
    display_name="MGProto",
    adapter="methods.mgproto.model:MGProto",
    hyperparameters={
        "epochs": count(20, minimum=1),
        "latent_dim": count(64, minimum=1),
        "lr_add_on": positive(0.003),
        "add_on_weight_decay": non_negative(0.001),
        "lr_block": positive(0.0001),
        "block_weight_decay": non_negative(0.0),
        "lr_milestones": epochs((5, 8, 10, 13, 15)),
        "lr_gamma": positive(0.4),
        "lambda_mine": non_negative(0.2),
        "mine_levels": optional_count(1),
        "mine_start_epoch": count(7),
        "memory_capacity": count(134, minimum=1),
        "em_start_epoch": count(6),
        "em_loops": count(3, minimum=1),
        "em_alpha": non_negative(0.1),
        "em_lr": positive(0.003),
        "em_diversity": non_negative(1.0),
        "prior_momentum": interval(0.99, 0.0, 1.0, high_open=True),
        "push_epochs": epochs((17, 19)),
        "prune_top_m": count(8, minimum=1),
        "expanded": flag(False),
    },
    # the ranges `protobench tune` searches (methods/space.py), each holding the paper's default:
    # learning rates log-uniform over about a decade either side, loss weights and temperatures
    # uniform over the range their papers discuss (docs/guides/tuning.md)
    search_space={
        "lr_add_on": LogUniform(0.0003, 0.03),
        "lr_block": LogUniform(1e-05, 0.01),
        "lr_gamma": Uniform(0.1, 0.9),
        "lambda_mine": Uniform(0.0, 1.0),
        "em_lr": LogUniform(0.0003, 0.03),
        "em_alpha": Uniform(0.01, 0.5),
        "prior_momentum": Uniform(0.9, 0.999),
    },
    references=(
        "Wang et al., MGProto",
        "official code: cwangrun/MGProto",
        "docs/protocol/mgproto.md",
    ),
    # the settings reported by name (benchmark/grids/cub_ablations.toml, cub_rivals.toml)
    variants={
        "expanded": {'expanded': True},
    },
)
