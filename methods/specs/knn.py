"""Weighted k-NN (``knn``): what it declares, read without torch (methods/declaration.py)."""
from methods.declaration import MethodDeclaration, choice, count, positive

DECLARATION = MethodDeclaration(
    name="knn",
    display_name="k-NN",
    adapter="methods.knn:WeightedKNN",
    hyperparameters={
        "pool": choice("cls", ("cls", "mean", "cls+mean")),
        "k": count(20, minimum=1),
        "temperature": positive(0.07),
    },
    reference_row=True,
    references=(
        "Caron et al., Emerging Properties in Self-Supervised Vision Transformers, ICCV 2021",
        "official code: facebookresearch/dino @ 04c0ad9, eval_knn.py",
        "docs/protocol/knn.md",
    ),
)
