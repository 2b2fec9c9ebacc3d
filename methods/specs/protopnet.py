"""ProtoPNet (``protopnet``): what it declares, read without torch (methods/declaration.py)."""
from methods.declaration import MethodDeclaration, choice, count, epochs, non_negative, positive
from methods.specs.lineage import APPENDED_BLOCK, LAST_LAYER, WARM_JOINT, joint_schedule
from methods.space import LogUniform, Uniform

DECLARATION = MethodDeclaration(
    name="protopnet",
    display_name="ProtoPNet",
    adapter="methods.protopnet:ProtoPNet",
    hyperparameters={
        "prototype_dim": count(128, minimum=1),
        **WARM_JOINT,
        "add_on_lr": positive(0.003),
        "prototype_lr": positive(0.003),
        "add_on_weight_decay": non_negative(0.001),
        **joint_schedule(5, 0.1),
        "push_epochs": epochs((10, 19)),
        **LAST_LAYER,
        "similarity": choice('l2', ('l2', 'cosine')),
        **APPENDED_BLOCK,
    },
    batches_trials=True,
    # the ranges `protobench tune` searches (methods/space.py), each holding the paper's default:
    # learning rates log-uniform over about a decade either side, loss weights and temperatures
    # uniform over the range their papers discuss (docs/guides/tuning.md)
    search_space={
        "add_on_lr": LogUniform(0.0003, 0.03),
        "prototype_lr": LogUniform(0.0003, 0.03),
        "last_layer_lr": LogUniform(1e-05, 0.001),
        "block_lr": LogUniform(1e-05, 0.01),
        "joint_lr_gamma": Uniform(0.05, 0.5),
        "clst_weight": Uniform(0.1, 2.0),
        "sep_weight": Uniform(-0.5, 0.0),
        "l1_weight": LogUniform(1e-05, 0.001),
    },
    references=(
        "Chen et al., This Looks Like That, NeurIPS 2019",
        "official code: cfchen-duke/ProtoPNet",
        "cosine head: Willard, Moffett et al., arXiv 2406.14675 (ProtoPNeXt)",
        "docs/protocol/protopnet.md",
    ),
    # the settings reported by name (benchmark/grids/cub_ablations.toml, cub_rivals.toml)
    variants={
        "cosine": {'similarity': 'cosine'},
        "expanded": {'expanded': True},
    },
)
