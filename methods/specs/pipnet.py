"""PIP-Net (``pipnet``): what it declares, read without torch (methods/declaration.py)."""
from methods.declaration import MethodDeclaration, count, flag, interval, optional_count, positive, real
from methods.space import LogUniform, Uniform

DECLARATION = MethodDeclaration(
    name="pipnet",
    display_name="PIP-Net",
    adapter="methods.pipnet.model:PIPNet",
    hyperparameters={
        "num_prototypes": optional_count(1),
        "pretrain_epochs": count(10),
        "epochs": count(60, minimum=1),
        "finetune_epochs": count(3),
        "classifier_lr": positive(0.05),
        "add_on_lr": positive(0.005),
        "lr_block": positive(0.0005),
        "align_weight": real(5.0),
        "tanh_weight": real(2.0),
        "ce_weight": real(2.0),
        "pretrain_tanh_weight": real(5.0),
        "test_shrinks_per_epoch": count(0),
        "bias": flag(False),
        "view_dropout": interval(0.0, 0.0, 1.0, high_open=True),
        "expanded": flag(False),
    },
    # Learning rates a decade either side of the official defaults (``util/args.py``: 0.05 for the
    # classifier, 0.0005 for the network); the loss weights λ_A, λ_T, λ_C (paper defaults 5, 2, 2)
    # over a range about them. Epoch counts are the budget, never tuned.
    search_space={
        "classifier_lr": LogUniform(0.005, 0.5),
        "add_on_lr": LogUniform(0.0005, 0.05),
        "lr_block": LogUniform(5e-05, 0.005),
        "align_weight": Uniform(0.5, 10.0),
        "tanh_weight": Uniform(0.0, 5.0),
        "ce_weight": Uniform(0.5, 5.0),
    },
    references=(
        "Nauta, Schlötterer, van Keulen, Seifert, PIP-Net, CVPR 2023",
        "official code: M-Nauta/PIPNet @ 12c4da7",
        "docs/protocol/pipnet.md",
    ),
)
