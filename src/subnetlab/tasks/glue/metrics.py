"""The GLUE metrics, computed here without scikit-learn (the authors' ``glue_metrics.py`` uses it).

``glue_scores(task, predictions, labels)`` returns every metric the GLUE
benchmark reports for that task (Wang et al., 2018; the authors' code of
Prasanna et al. 2020, ``src/glue_metrics.py``):

* CoLA: Matthews correlation ``mcc`` (and accuracy);
* MRPC, QQP: accuracy, F1 of the positive class and their mean ``acc_and_f1``;
* STS-B: Pearson and Spearman correlations and their mean ``corr``;
* SST-2, MNLI, QNLI, RTE, WNLI: accuracy.

Conventions follow scikit-learn / scipy where they define a degenerate case:
MCC is 0 when a row or column of the confusion matrix is empty, F1 is 0 when
there are no true positives, Spearman uses average ranks for ties, and a
correlation with a constant input is ``nan``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from subnetlab.errors import SubnetlabError


def _pair(predictions: Sequence, labels: Sequence) -> tuple[list, list]:
    p, y = list(predictions), list(labels)
    if len(p) != len(y):
        raise SubnetlabError(f"{len(p)} predictions for {len(y)} labels")
    if not p:
        raise SubnetlabError("a metric needs at least one prediction")
    return p, y


def accuracy(predictions: Sequence[int], labels: Sequence[int]) -> float:
    p, y = _pair(predictions, labels)
    return sum(int(a == b) for a, b in zip(p, y)) / len(p)


def matthews_corrcoef(predictions: Sequence[int], labels: Sequence[int]) -> float:
    """Matthews correlation of two label sequences (the multi-class form; binary is the usual MCC)."""
    p, y = _pair(predictions, labels)
    classes = sorted(set(p) | set(y))
    index = {c: i for i, c in enumerate(classes)}
    k = len(classes)
    confusion = [[0] * k for _ in range(k)]
    for a, b in zip(y, p):
        confusion[index[a]][index[b]] += 1
    t = [sum(row) for row in confusion]  # true counts per class
    q = [sum(confusion[i][j] for i in range(k)) for j in range(k)]  # predicted counts per class
    c = sum(confusion[i][i] for i in range(k))
    s = len(p)
    cov_ytyp = c * s - sum(a * b for a, b in zip(t, q))
    cov_ypyp = s * s - sum(b * b for b in q)
    cov_ytyt = s * s - sum(a * a for a in t)
    if cov_ypyp == 0 or cov_ytyt == 0:
        return 0.0
    return cov_ytyp / math.sqrt(cov_ytyt * cov_ypyp)


def f1_binary(predictions: Sequence[int], labels: Sequence[int], positive: int = 1) -> float:
    """F1 of class ``positive``: ``2 TP / (2 TP + FP + FN)`` (0 when there is no true positive)."""
    p, y = _pair(predictions, labels)
    tp = sum(1 for a, b in zip(p, y) if a == positive and b == positive)
    fp = sum(1 for a, b in zip(p, y) if a == positive and b != positive)
    fn = sum(1 for a, b in zip(p, y) if a != positive and b == positive)
    return 0.0 if tp == 0 else 2 * tp / (2 * tp + fp + fn)


def pearson(x: Sequence[float], y: Sequence[float]) -> float:
    a, b = _pair(x, y)
    a, b = [float(v) for v in a], [float(v) for v in b]
    ma, mb = sum(a) / len(a), sum(b) / len(b)
    da, db = [v - ma for v in a], [v - mb for v in b]
    sa, sb = math.sqrt(sum(v * v for v in da)), math.sqrt(sum(v * v for v in db))
    if sa == 0 or sb == 0:
        return float("nan")
    return max(-1.0, min(1.0, sum(u * v for u, v in zip(da, db)) / (sa * sb)))


def average_ranks(values: Sequence[float]) -> list[float]:
    """Ranks from 1; tied values share the mean of their ranks."""
    order = sorted(range(len(values)), key=lambda i: values[i])
    ranks = [0.0] * len(values)
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and values[order[j + 1]] == values[order[i]]:
            j += 1
        for k in range(i, j + 1):
            ranks[order[k]] = (i + j) / 2 + 1
        i = j + 1
    return ranks


def spearman(x: Sequence[float], y: Sequence[float]) -> float:
    a, b = _pair(x, y)
    return pearson(average_ranks([float(v) for v in a]), average_ranks([float(v) for v in b]))


def classification_scores(predictions: Sequence[int], labels: Sequence[int], binary: bool) -> dict[str, float]:
    """Accuracy and MCC; with ``binary`` also F1 of class 1 and ``acc_and_f1``."""
    out = {"accuracy": accuracy(predictions, labels), "mcc": matthews_corrcoef(predictions, labels)}
    if binary:
        out["f1"] = f1_binary(predictions, labels)
        out["acc_and_f1"] = (out["accuracy"] + out["f1"]) / 2
    return out


def regression_scores(predictions: Sequence[float], labels: Sequence[float]) -> dict[str, float]:
    """Pearson, Spearman, their mean ``corr`` and the mean squared error."""
    p, y = _pair(predictions, labels)
    r, rho = pearson(p, y), spearman(p, y)
    mse = sum((float(a) - float(b)) ** 2 for a, b in zip(p, y)) / len(p)
    return {"pearson": r, "spearman": rho, "corr": (r + rho) / 2, "mse": mse}


__all__ = ["accuracy", "average_ranks", "classification_scores", "f1_binary", "matthews_corrcoef", "pearson",
           "regression_scores", "spearman"]
