"""The nine GLUE tasks (``glue-cola`` ... ``glue-wnli``): TSV / hub loaders and the GLUE metrics."""

from subnetlab.tasks.glue.formats import GLUE, GlueFormat, glue_format, read_glue
from subnetlab.tasks.glue.metrics import classification_scores, regression_scores
from subnetlab.tasks.glue.task import GlueRegressionTask, GlueTask, make_glue_task, metric_value, task_metric

__all__ = ["GLUE", "GlueFormat", "GlueRegressionTask", "GlueTask", "classification_scores", "glue_format",
           "make_glue_task", "metric_value", "read_glue", "regression_scores", "task_metric"]
