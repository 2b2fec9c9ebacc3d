"""ComFe (``comfe``): what it declares, read without torch (methods/declaration.py)."""
from methods.declaration import (Hyperparameter, MethodDeclaration, count, flag, interval, names, non_negative,
                                 optional_count, positive)
from methods.space import LogUniform, Uniform

DECLARATION = MethodDeclaration(
    name="comfe",
    display_name="ComFe",
    adapter="methods.comfe.model:ComFe",
    hyperparameters={
        "epochs": count(50),
        "image_prototypes": count(5, minimum=1),
        "background_prototypes": optional_count(0),
        "background_class": flag(True),
        "temp_pred": positive(0.1),
        "temp_class": positive(0.02),
        "temp_contrastive": positive(0.02),
        "label_smoothing": interval(0.1, 0.0, 1.0, high_open=True),
        "layers": count(2, minimum=1),
        "heads": count(8, minimum=1),
        "feedforward_dim": count(2048, minimum=1),
        "dropout": interval(0.1, 0.0, 1.0, high_open=True),
        "terms": names(('pyz', 'pyp', 'pz', 'image_contrast', 'patch_consistency'),
                       ('pyz', 'pyp', 'pz', 'image_contrast', 'patch_consistency', 'class_contrast')),
        "views": Hyperparameter("int", 2, low=1, high=2),
        "lr": positive(0.0005),
        "start_lr": positive(5e-05),
        "final_lr": positive(5e-06),
        "warmup_epochs": count(10),
        "cosine_end": interval(0.8, 0.0, 1.0, low_open=True),
        "weight_decay": non_negative(0.05),
        "clip_grad_norm": positive(0.01),
    },
    # The reference rate a decade either side of 5e-4, kept above start_lr and final_lr (the warm-up
    # climbs, the cosine falls); weight decay a decade either side of 0.05; the temperatures τ1,
    # τ2, τc (the released config's 0.1, 0.02, 0.02) over about a factor 5 either way; label
    # smoothing ε and dropout over [0, 0.3]. The decoder's shape and the schedule's length are not
    # tuned (the epochs are the budget).
    search_space={
        "lr": LogUniform(0.0001, 0.005),
        "weight_decay": LogUniform(0.005, 0.5),
        "temp_pred": LogUniform(0.02, 0.5),
        "temp_class": LogUniform(0.005, 0.1),
        "temp_contrastive": LogUniform(0.005, 0.1),
        "label_smoothing": Uniform(0.0, 0.3),
        "dropout": Uniform(0.0, 0.3),
    },
    references=(
        "Mannix, Hodgkinson, Bondell, ComFe: An Interpretable Head for Vision Transformers, "
        "arXiv 2403.04125 / TMLR 2025",
        "official code: emannix/comfe-component-features @ 2feeb21",
        "docs/protocol/comfe.md",
    ),
    # the behaviour probe's schedule (benchmark/behaviour/probe.py): 12 epochs, the first 2 warm-up
    probe_args={"epochs": 12, "warmup_epochs": 2},
)
