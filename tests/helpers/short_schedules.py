"""method_args that cut each method's schedule to two epochs while keeping every stage and hook
it has (push, last-layer phases, EM and mining from the first epoch): GPU checks and perf tests."""
from __future__ import annotations

TWO_EPOCHS: dict[str, dict[str, object]] = {
    "vmfproto": {"discovery_epochs": 1, "end_to_end_epochs": 1},
    "nppp": {"discovery_epochs": 1, "finetune_epochs": 1},
    "protopnet": {"warm_epochs": 1, "joint_epochs": 1, "push_epochs": [1], "last_layer_epochs": 2},
    "tesnet": {"warm_epochs": 1, "joint_epochs": 1, "push_epochs": [1], "last_layer_epochs": 2},
    "evalprotopnet": {"warm_epochs": 1, "joint_epochs": 1},
    "deformable_protopnet": {"warm_epochs": 1, "joint_epochs": 1, "push_epochs": [1]},
    "mgproto": {"epochs": 2, "em_start_epoch": 0, "mine_start_epoch": 0, "push_epochs": [1]},
    # pretraining and the joint stage (its step shrink, last-epoch shrink and zeroing pass)
    "pipnet": {"pretrain_epochs": 1, "epochs": 1, "finetune_epochs": 0},
    "kmex": {},  # one clustering epoch is its whole schedule
    "comfe": {"epochs": 2, "warmup_epochs": 1},
    "linear_probe": {"epochs": 2},
    "knn": {},  # one fitting epoch (the memory bank) is its whole schedule
    "dinoqpm": {"dense_epochs": 1, "finetune_epochs": 1},  # the QP runs between them
}
#: methods whose whole schedule is shorter than two epochs
ONE_EPOCH = {"kmex", "knn"}
