"""Circuit tasks: prompt pairs (clean, corrupted) with the answer and the wrong answer token.

``pairs`` (the ``CircuitTask`` and its checks), ``metrics`` (logit difference,
answer probability, KL), and the builtin generators ``ioi``, ``greater_than``
and ``arithmetic``; ``files`` reads your own pairs. Registered in
``tasks.registry`` as ``circuit:ioi``, ``circuit:greater-than``,
``circuit:arith:<op>``, and ``file:PATH`` with a corrupted-prompt column.
"""

from subnetlab.tasks.circuits.metrics import METRICS, answer_probability, circuit_metrics, kl_to_full, logit_difference
from subnetlab.tasks.circuits.pairs import CircuitPair, CircuitTask, clean_inputs, corrupted_inputs

__all__ = ["METRICS", "CircuitPair", "CircuitTask", "answer_probability", "circuit_metrics", "clean_inputs",
           "corrupted_inputs", "kl_to_full", "logit_difference"]
