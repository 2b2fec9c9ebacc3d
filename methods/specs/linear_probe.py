"""Linear probe (``linear_probe``): what it declares, read without torch (methods/declaration.py)."""
from methods.declaration import MethodDeclaration, choice, count, positive
from methods.space import Categorical, LogUniform

DECLARATION = MethodDeclaration(
    name="linear_probe",
    display_name="Linear probe",
    adapter="methods.linear_probe:LinearProbe",
    hyperparameters={
        "pool": choice("cls+mean", ("cls", "mean", "cls+mean")),
        "epochs": count(20, minimum=1),
        "lr": positive(0.005),
    },
    # the official grid of learning rates (1e-5 … 0.1) scaled to batch 128 (lr · 128/256)
    search_space={"lr": LogUniform(5e-06, 0.05), "pool": Categorical(("cls", "mean", "cls+mean"))},
    reference_row=True,
    references=(
        "Oquab et al., DINOv2: Learning Robust Visual Features without Supervision, TMLR 2024",
        "official code: facebookresearch/dinov2 @ 05c66df, dinov2/eval/linear.py",
        "docs/protocol/linear_probe.md",
    ),
)
