"""Subtask induction: transfer a frozen subnetwork into a re-initialised model, with its controls.

    from subnetlab.transfer import build_transfer_model, random_matched, train_model

    sub = Subnetwork.load("subnetwork.safetensors", adapter)
    tm = build_transfer_model(trained, "subnetwork", seed=0, subnetwork=sub)
    result = train_model(tm.model, train, eval, test, TrainSettings(epochs=100), seed=0)
"""

from subnetlab.transfer.build import TransferModel, build_transfer_model, embedding_names, fresh_copy
from subnetlab.transfer.conditions import (
    CONDITIONS,
    MASKED_CONDITIONS,
    REINIT,
    SHAPE_BIAS_CONDITIONS,
    Condition,
    check_conditions,
    check_reinit,
    get_condition,
)
from subnetlab.transfer.controls import complement_matched, kept_counts, random_matched, random_released
from subnetlab.transfer.data import LMSplit, lm_split
from subnetlab.transfer.train import TrainResult, TrainSettings, accuracy, last_logits, train_model

__all__ = [
    "CONDITIONS", "MASKED_CONDITIONS", "REINIT", "SHAPE_BIAS_CONDITIONS", "Condition", "LMSplit", "TrainResult",
    "TrainSettings", "TransferModel", "accuracy", "build_transfer_model", "check_conditions", "check_reinit",
    "complement_matched", "embedding_names", "fresh_copy", "get_condition", "kept_counts", "last_logits", "lm_split",
    "random_matched", "random_released", "train_model",
]
