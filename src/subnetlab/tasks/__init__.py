"""Datasets as tasks: examples, label spaces, tokenized batches, metrics, OOD subcases.

See ``subnetlab.tasks.base`` for the Task API and ``subnetlab.tasks.registry``
for the task names (``nli-synthetic``, ``hans-synthetic``, ``mnli``, ``hans``,
``qqp``, ``paws-qqp``, ``arith:<op>``).
"""

from subnetlab.tasks.arithmetic import PAPER_OPERATIONS, arithmetic_tokenizer, make_arithmetic_task, parse_operation
from subnetlab.tasks.base import NLI2, NLI3, PARAPHRASE, Example, Task
from subnetlab.tasks.data_location import data_root, find_data_root
from subnetlab.tasks.nli.files import load_hans, load_mnli
from subnetlab.tasks.nli.hans_generator import SUBCASES as HANS_SUBCASES
from subnetlab.tasks.nli.hans_generator import generate_hans_style
from subnetlab.tasks.nli.hans_vocab import DEFAULT_VOCABULARY, Vocabulary
from subnetlab.tasks.nli.paraphrase_files import load_paraphrase
from subnetlab.tasks.nli.synthetic import generate_synthetic_nli
from subnetlab.tasks.registry import FILE_FORMATS, add_file_split, get_task, load_file, shared_data_dir, task_names

__all__ = [
    "DEFAULT_VOCABULARY",
    "Example",
    "FILE_FORMATS",
    "HANS_SUBCASES",
    "NLI2",
    "NLI3",
    "PAPER_OPERATIONS",
    "PARAPHRASE",
    "Task",
    "Vocabulary",
    "add_file_split",
    "arithmetic_tokenizer",
    "data_root",
    "find_data_root",
    "generate_hans_style",
    "generate_synthetic_nli",
    "get_task",
    "load_file",
    "load_hans",
    "load_mnli",
    "load_paraphrase",
    "make_arithmetic_task",
    "parse_operation",
    "shared_data_dir",
    "task_names",
]
