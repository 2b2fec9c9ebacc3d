"""DINO-QPM (``dinoqpm``): what it declares, read without torch (methods/declaration.py)."""
from methods.declaration import MethodDeclaration, choice, count, flag, interval, non_negative, positive
from methods.space import LogUniform

DECLARATION = MethodDeclaration(
    name="dinoqpm",
    display_name="DINO-QPM",
    adapter="methods.dinoqpm.model:DinoQPM",
    hyperparameters={
        "feature_dim": count(512, minimum=1),
        "hidden_dim": count(2048, minimum=1),
        "layers": count(4, minimum=1),
        "n_features": count(50, minimum=1),
        "dense_epochs": count(25),
        "finetune_epochs": count(25, minimum=1),
        "lr_dense": positive(1e-3),
        "lr_finetune": positive(5e-3),
        "weight_decay_dense": non_negative(7e-4),
        "weight_decay_finetune": non_negative(8e-4),
        "dropout_dense": interval(0.2, 0.0, 1.0, high_open=True),
        "dropout_finetune": interval(0.0, 0.0, 1.0, high_open=True),
        "fdl_dense": non_negative(0.5),
        "fdl_finetune": non_negative(1.0),
        "l1_maps": non_negative(5.0),
        "l1_features": non_negative(1.0),
        "similarity_penalty": flag(True),
        "solver": choice("highs", ("highs",)),
        "time_limit": positive(10800.0),
        "mip_gap": interval(5e-3, 0.0, 1.0, high_open=True),
    },
    # a decade around each phase's official learning rate (configs/models/qpm/dinov2.yaml)
    search_space={"lr_dense": LogUniform(3e-4, 3e-3), "lr_finetune": LogUniform(1.5e-3, 1.5e-2)},
    references=(
        "Zimmermann, Norrenbrock and Rosenhahn, DINO-QPM: Adapting Visual Foundation Models for Globally "
        "Interpretable Image Classification, CVPR 2026",
        "Norrenbrock et al., QPM: Discrete Optimization for Globally Interpretable Image Classification, ICLR 2025",
        "official code: RobertZimm/DINO-QPM @ b7509a2, configs/models/qpm/dinov2.yaml",
        "docs/protocol/dinoqpm.md",
    ),
    # the behaviour probe's schedule (benchmark/behaviour/probe.py): 3 dense epochs, the program, 3 fine-tuning
    probe_args={"dense_epochs": 3, "finetune_epochs": 3},
)
