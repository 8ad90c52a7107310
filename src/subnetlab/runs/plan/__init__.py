"""A plan before the run: peak memory per device, FLOPs per step, steps, and the largest micro-batch that fits.

``core``: ``plan_run`` (runs the command's own step on fake tensors); ``settings``: what is planned; ``fake``: the
model from its config and batches; ``memory``: the live-bytes counter and the measured peak; ``layers``: a deep
model planned from a few layer counts; ``report``: the table; one module per command's step (``circuit``: prune
and circuit; ``discover``, ``transfer``, ``finetune``, ``lottery``).
"""

from subnetlab.runs.plan.core import (
                                      H100_BF16_DENSE,
                                      MicroBatchLines,
                                      Plan,
                                      count_steps,
                                      default_sizes,
                                      measure_step,
                                      plan_run,
                                      run_step,
)
from subnetlab.runs.plan.fake import PACKAGED_CONFIGS, fake_data, fake_model, read_model_config
from subnetlab.runs.plan.report import format_bytes, parse_memory, plan_table, verdict
from subnetlab.runs.plan.settings import DTYPES, METHODS, PlanSettings

__all__ = ["DTYPES", "H100_BF16_DENSE", "METHODS", "PACKAGED_CONFIGS", "Plan", "PlanSettings", "count_steps",
           "default_sizes", "fake_data", "fake_model", "format_bytes", "MicroBatchLines", "measure_step",
           "parse_memory", "plan_run", "plan_table", "read_model_config", "run_step", "verdict"]
