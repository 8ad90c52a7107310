"""``model.onnx`` beside the exported weights, so a pruned model deploys without subnetlab or PyTorch.

Written by ``torch.onnx.export`` with the dynamo exporter (needs ``onnx`` and
``onnxscript``: ``pip install 'subnetlab[export]'``), with batch and sequence
length dynamic. The TorchScript exporter is not used: on transformers 5 its trace
of BERT and GPT-2 freezes data-dependent branches of the attention-mask code,
and the graph it writes disagrees with the model even before any pruning.
When ``onnxruntime`` is installed the file is run on inputs of another batch
size and length and compared with the model, and refused if they disagree.

Inputs: ``input_ids`` and ``attention_mask`` for text models, ``pixel_values``
for vision models; output: the model's first output (``logits`` with a task
head, else ``last_hidden_state``), without a key/value cache.
"""

from __future__ import annotations

import contextlib
import io
import logging
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path

import torch
from torch import Tensor, nn

from subnetlab.errors import SubnetlabError
from subnetlab.export.slicing import Plan

ONNX_FILE = "model.onnx"
TOLERANCE = 1e-4


def require_onnx() -> None:
    """Fail before any work when the exporter's packages are missing."""
    for package in ("onnx", "onnxscript"):
        try:
            __import__(package)
        except ImportError:
            raise SubnetlabError(f"onnx: writing model.onnx needs the package {package} "
                                 "(pip install 'subnetlab[export]')", setting="onnx") from None


class _TextModel(nn.Module):
    """A text model as a function of plain tensors, returning its first output (what ONNX can name)."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, input_ids: Tensor, attention_mask: Tensor) -> Tensor:
        extra = {"use_cache": False} if getattr(self.model.config, "use_cache", None) is not None else {}
        return self.model(input_ids=input_ids, attention_mask=attention_mask, **extra)[0]


class _VisionModel(nn.Module):
    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, pixel_values: Tensor) -> Tensor:
        return self.model(pixel_values=pixel_values)[0]


def _example(model: nn.Module, plan: Plan, batch: int, length: int, seed: int) -> dict[str, Tensor]:
    config = model.config
    g = torch.Generator().manual_seed(seed)
    if plan.family == "vit":
        size = config.image_size
        return {"pixel_values": torch.randn(batch, config.num_channels, size, size, generator=g)}
    ids = torch.randint(0, config.vocab_size, (batch, length), generator=g)
    mask = torch.ones(batch, length, dtype=torch.long)
    mask[1:, length - 2:] = 0  # padding on every row but the first
    return {"input_ids": ids, "attention_mask": mask}


def onnx_writer(model: nn.Module, plan: Plan) -> Callable[[Path], None]:
    """A function that writes ``model.onnx`` of ``model`` into a directory (and checks it)."""
    require_onnx()

    def write(directory: Path) -> None:
        example = _example(model, plan, batch=2, length=8, seed=0)
        names = tuple(example)
        wrapped = (_VisionModel(model) if plan.family == "vit" else _TextModel(model)).eval()
        dynamic = torch.export.Dim.DYNAMIC
        shapes = {name: {0: dynamic} if name == "pixel_values" else {0: dynamic, 1: dynamic} for name in names}
        size = sum(p.numel() * p.element_size() for p in model.parameters())
        path = directory / ONNX_FILE
        with _quiet(), torch.no_grad():
            torch.onnx.export(wrapped, tuple(example.values()), str(path), dynamo=True, opset_version=18,
                              input_names=list(names), output_names=["output"], dynamic_shapes=shapes,
                              external_data=size > 1_800_000_000)
        _verify(path, wrapped, _example(model, plan, batch=3, length=5, seed=1))

    return write


@contextlib.contextmanager
def _quiet() -> Iterator[None]:
    """The exporter prints its steps, warns about optional packages and deprecations: none of it is ours to show."""
    loggers = [logging.getLogger(name) for name in ("torch.onnx", "torch.export", "torch._dynamo", "onnxscript")]
    levels = [logger.level for logger in loggers]
    try:
        for logger in loggers:
            logger.setLevel(logging.ERROR)
        with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):
            warnings.simplefilter("ignore")
            yield
    finally:
        for logger, level in zip(loggers, levels):
            logger.setLevel(level)


def _verify(path: Path, wrapped: nn.Module, inputs: dict[str, Tensor]) -> None:
    try:
        import onnxruntime
    except ImportError:
        return  # written but unchecked; the check runs where onnxruntime is installed
    session = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    got = torch.from_numpy(session.run(None, {k: v.numpy() for k, v in inputs.items()})[0])
    with torch.no_grad():
        want = wrapped(*inputs.values()).float()
    gap = float((got - want).abs().max())
    if not gap <= TOLERANCE:
        raise SubnetlabError(f"onnx: {path.name} differs from the model by {gap:.2e} on a test input "
                             f"(tolerance {TOLERANCE}); not written", setting="onnx")
