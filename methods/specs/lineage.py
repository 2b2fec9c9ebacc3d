"""Hyperparameters the ProtoPNet lineage's declarations share (ProtoPNet, Deformable ProtoPNet,
TesNet, EvalProtoPNet), each group in its constructors' order; ``methods/common/lineage.py`` is
the code they share. The contract's drift check holds every declaration to its constructor."""
from methods.declaration import count, flag, non_negative, optional_count, positive, real

#: warm-up then joint epochs (the official 5 + 15)
WARM_JOINT = {"warm_epochs": count(5), "joint_epochs": count(15)}
#: the last-layer phases after each push, and the cluster, separation and L1 weights
LAST_LAYER = {"last_layer_epochs": count(20), "last_layer_lr": positive(0.0001),
              "last_layer_batch_size": count(128, minimum=1), "clst_weight": real(0.8), "sep_weight": real(-0.08),
              "l1_weight": real(0.0001)}
#: the appended trainable block of the expanded protocol
APPENDED_BLOCK = {"block_lr": positive(0.0001), "block_weight_decay": non_negative(0.001), "expanded": flag(False)}


def joint_schedule(step: int, gamma: float) -> dict:
    """The joint stage's StepLR (every ``step`` epochs by ``gamma``) and its compressed-curve option."""
    return {"joint_lr_step": count(step, minimum=1), "joint_lr_gamma": positive(gamma),
            "joint_lr_curve_epochs": optional_count(1)}
