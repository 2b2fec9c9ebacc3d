"""KMEx (``kmex``): what it declares, read without torch (methods/declaration.py)."""
from methods.declaration import MethodDeclaration, count, non_negative

DECLARATION = MethodDeclaration(
    name="kmex",
    display_name="KMEx",
    adapter="methods.kmex:KMEx",
    hyperparameters={
        "n_init": count(10, minimum=1),
        "max_iter": count(300, minimum=1),
        "tol": non_negative(0.0001),
    },
    clusters_each_class=True,
    references=(
        "Gautam, Boubekki, Höhne, Kampffmeyer, Prototypical self-explainable models without re-training, TMLR 2024",
        "official code: SrishtiGautam/KMEx @ 3e9dfad",
        "docs/protocol/kmex.md",
    ),
)
