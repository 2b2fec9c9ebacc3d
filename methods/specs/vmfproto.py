"""vMFProto (``vmfproto``): what it declares, read without torch (methods/declaration.py)."""
from methods.declaration import (MethodDeclaration, choice, count, flag, interval, non_negative, optional_positive,
                                 positive)
from methods.space import LogUniform, Uniform

DECLARATION = MethodDeclaration(
    name="vmfproto",
    display_name="vMFProto",  # the paper's spelling, in every table, legend and figure
    adapter="methods.vmfproto.model:VMFProto",
    hyperparameters={
        "gating": choice('attention_pca', ('attention_pca', 'pca', 'attention', 'none')),
        "tau": interval(0.5, 0.0, 1.0),
        "gamma": interval(0.99, 0.0, 1.0, high_open=True),
        "ot_epsilon": positive(0.05),
        "ot_iterations": count(10),
        "ot_tolerance": optional_positive(),
        "ot_max_iterations": count(1000),
        "lambda_ppd": non_negative(0.8),
        "lambda_logdet": non_negative(1.0),
        "logdet_delta": positive(0.0001),
        "kappa_init": positive(5.0),
        "mu_init": choice('patches', ('patches', 'random')),
        "fixed_kappa": optional_positive(),
        "stage2_prototypes": flag(True),
        "discovery_epochs": count(1),
        "end_to_end_epochs": count(19),
        "lr_block": positive(0.0001),
        "lr_mu": positive(0.0005),
        "lr_kappa": positive(0.0012),
        "lr_pi": positive(1e-05),
    },
    batches_trials=True,
    log_density_maps=True,  # activation_maps: s_icj = log C_D(κ) + κ μᵀz (Eq. ot_score), a log density
    # the ranges `protobench tune` searches (methods/space.py), each holding the paper's default:
    # learning rates log-uniform over about a decade either side, loss weights and temperatures
    # uniform over the range their papers discuss (docs/guides/tuning.md)
    search_space={
        "tau": Uniform(0.05, 1.0),
        "gamma": Uniform(0.9, 0.999),
        "lambda_ppd": Uniform(0.0, 2.0),
        "lambda_logdet": LogUniform(0.01, 10.0),
        "kappa_init": LogUniform(1.0, 100.0),
        "lr_block": LogUniform(1e-05, 0.01),
        "lr_mu": LogUniform(5e-05, 0.05),
        "lr_kappa": LogUniform(0.00012, 0.12),
    },
    references=(
        "vMFProto: distributional von Mises-Fisher part prototypes (the paper, shared/paper/vmfproto.tex)",
        "docs/protocol/vmfproto.md",
    ),
    # the settings reported by name (benchmark/grids/cub_ablations.toml, cub_rivals.toml)
    variants={
        "ce_only": {'lambda_ppd': 0.0, 'lambda_logdet': 0.0},
        "ce_ppd": {'lambda_logdet': 0.0},
        "ce_logdet": {'lambda_ppd': 0.0},
        "stage2_off": {'stage2_prototypes': False},
        "kappa_fixed_5": {'fixed_kappa': 5.0},
        "kappa_fixed_1": {'fixed_kappa': 1.0},
        "gating_pca": {'gating': 'pca'},
        "gating_attention": {'gating': 'attention'},
        "gating_none": {'gating': 'none'},
    },
)
