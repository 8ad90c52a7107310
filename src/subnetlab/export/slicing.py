"""Physically removing heads and MLPs: the plan of what an exported model keeps, and the surgery.

One function, ``apply_plan``, turns a model of the source's shape into the
exported shape. It runs twice in an export's life: on the source model (with
the folded biases, ``folding.py``), and on a freshly built model when
``subnetlab.load_model`` reads an exported directory back (shapes only; the
weights then come from ``subnetlab_model.safetensors``). So the saved weights and the
rebuilt modules cannot disagree.

Per layer, with ``d`` the head dimension:

* kept heads: the rows ``h*d:(h+1)*d`` of the query (and key/value) projections
  and the matching input columns of the output projection stay; for GPT-2's
  fused ``c_attn`` (Conv1D, ``[in, 3 * H * d]``) the same columns of each of its
  q, k and v thirds. The attention modules infer their head count from the
  projections' widths (``view(..., -1, d)``); the attributes that record it
  (``num_attention_heads``, ``all_head_size``, GPT-2's ``split_size``,
  Llama's ``num_key_value_groups``) are set to the layer's own values.
* grouped-query attention: a key/value head is dropped only when every query
  head that reads it is; a kept one may serve fewer query heads than before,
  and different kept key/value heads may serve different numbers. When they all
  serve the same number ``c`` the layer stays a plain ``LlamaAttention`` with
  ``num_key_value_groups = c``; otherwise its key and value projections become
  ``SharedKeyValue`` (an ``nn.Linear`` that hands each query head its
  key/value head by index), and ``num_key_value_groups = 1``.
* no head left: the attention block becomes ``NoHeads``, whose output is the
  output projection's bias (``Constant``), the place where the closed heads'
  means are folded.
* a removed MLP becomes ``Constant``: its folded mean, or zero. No matrix stays.

Why not torch-pruning (checked: torch-pruning 1.6.1). Its dependency graph
finds which channels are coupled by tracing the model; subnetlab's adapter
already names that coupling exactly (a head's Q/K/V rows and its columns of the
output projection), and the trace fails outright on GPT-2 and Llama models of
transformers 5 (their forward returns tuples and caches the tracer does not
follow). Of its per-layer functions only ``prune_linear_out/in_channels`` fit
here, and they are an ``index_select`` each; it has no pruner for transformers'
``Conv1D`` (GPT-2), cannot remove every channel of a layer (a layer with no
head, a removed MLP), knows nothing of key/value heads shared unevenly after
pruning, of folding ablation values into biases, or of a file format that
loads back. A core dependency for two ``index_select`` calls is not worth it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor, nn
from transformers.pytorch_utils import Conv1D

from subnetlab.errors import SubnetlabError
from subnetlab.models.adapters import FamilySpec


@dataclass(frozen=True)
class LayerPlan:
    """What one layer keeps: query heads, key/value heads, its MLP, and which biases it ends with.

    ``out_bias``: the attention output projection has a bias after export (it may
    gain one: a bias-free family gets one to hold folded means). ``mlp_constant``:
    a removed MLP leaves its folded mean behind (False: it leaves zero).
    """

    heads: tuple[int, ...]
    kv_heads: tuple[int, ...]
    mlp: bool = True
    out_bias: bool = True
    mlp_constant: bool = False

    def to_json(self) -> dict[str, Any]:
        return {"heads": list(self.heads), "kv_heads": list(self.kv_heads), "mlp": self.mlp,
                "out_bias": self.out_bias, "mlp_constant": self.mlp_constant}


@dataclass(frozen=True)
class Plan:
    """The exported shape of a whole model: its family's sizes and one ``LayerPlan`` per layer."""

    family: str
    num_heads: int
    num_kv_heads: int
    head_dim: int
    hidden_size: int
    layers: tuple[LayerPlan, ...]

    @property
    def group(self) -> int:
        """Query heads per key/value head in the source model (1 without grouped-query attention)."""
        return self.num_heads // self.num_kv_heads

    def kv_heads_for(self, heads: tuple[int, ...]) -> tuple[int, ...]:
        """The key/value heads that the query heads ``heads`` read."""
        return tuple(sorted({h // self.group for h in heads}))

    def to_json(self) -> dict[str, Any]:
        return {"family": self.family, "num_heads": self.num_heads, "num_kv_heads": self.num_kv_heads,
                "head_dim": self.head_dim, "hidden_size": self.hidden_size,
                "layers": [layer.to_json() for layer in self.layers]}

    @classmethod
    def from_json(cls, data: Any, where: str) -> "Plan":
        """Read and check a plan; ``where`` names the file in error messages."""
        try:
            plan = cls(
                str(data["family"]), int(data["num_heads"]), int(data["num_kv_heads"]), int(data["head_dim"]),
                int(data["hidden_size"]),
                tuple(LayerPlan(tuple(int(h) for h in layer["heads"]), tuple(int(k) for k in layer["kv_heads"]),
                                bool(layer["mlp"]), bool(layer["out_bias"]), bool(layer["mlp_constant"]))
                      for layer in data["layers"]),
            )
        except (KeyError, TypeError, ValueError) as e:
            raise SubnetlabError(f"{where}: malformed pruning record ({type(e).__name__}: {e})") from None
        if plan.num_kv_heads < 1 or plan.num_heads % plan.num_kv_heads:
            raise SubnetlabError(f"{where}: {plan.num_heads} heads cannot share {plan.num_kv_heads} key/value heads")
        for i, layer in enumerate(plan.layers):
            if list(layer.heads) != sorted(set(layer.heads)) or any(not 0 <= h < plan.num_heads for h in layer.heads):
                raise SubnetlabError(f"{where}: layer {i}: heads {list(layer.heads)} are not distinct heads "
                                     f"0..{plan.num_heads - 1} in order")
            if layer.kv_heads != plan.kv_heads_for(layer.heads):
                raise SubnetlabError(f"{where}: layer {i}: key/value heads {list(layer.kv_heads)} do not match "
                                     f"the kept query heads {list(layer.heads)}")
        return plan


# -- modules that stand for what was removed -------------------------------------------------------
class Constant(nn.Module):
    """Stands for a removed module whose output no longer depends on its input.

    Returns ``bias`` (``[width]``) at every position, or zeros when there is no
    bias: a removed MLP's folded mean, the output projection of a layer with no
    head left (its bias plus the folded means of its heads), or an empty
    ``[..., 0]`` activation feeding such a module. The parameter is named
    ``bias`` so a layer's state-dict key keeps the name of the bias it replaces.
    """

    def __init__(self, width: int, bias: Tensor | None = None) -> None:
        super().__init__()
        self.width = width
        if bias is None:
            self.register_parameter("bias", None)
        else:
            self.bias = nn.Parameter(bias.detach().clone().reshape(width))

    def forward(self, x: Tensor, *args: Any, **kwargs: Any) -> Tensor:
        shape = (*x.shape[:-1], self.width)
        if self.bias is None:
            return x.new_zeros(shape)
        return self.bias.expand(shape).contiguous()  # a copy: callers may add to it in place

    def extra_repr(self) -> str:
        return f"width={self.width}, bias={self.bias is not None}"


class NoHeads(nn.Module):
    """Stands for an attention block whose every head was removed; returns ``(output, None)``.

    ``output`` is the ``Constant`` that replaced the output projection when that
    projection lives inside the block (GPT-2, ViT, Llama), registered under the
    projection's own name; otherwise (BERT, RoBERTa) the block returns an empty
    ``[..., 0]`` tensor and the projection outside it is the ``Constant``. Under a
    key/value cache it stores one zero key/value head per position, because
    transformers reads the sequence length from layer 0's cache (an empty cache
    would read as length 0 and shift positions when generating).
    """

    def __init__(self, output: str | None, head_dim: int, layer_idx: int | None) -> None:
        super().__init__()
        self.output_name = output
        self.head_dim = head_dim
        self.layer_idx = layer_idx

    def forward(self, hidden_states: Tensor, *args: Any, **kwargs: Any) -> tuple[Tensor, None]:
        cache = kwargs.get("past_key_values")
        if cache is not None and self.layer_idx is not None and hasattr(cache, "update"):
            cache = getattr(cache, "self_attention_cache", cache)
            batch, length = hidden_states.shape[0], hidden_states.shape[1]
            placeholder = hidden_states.new_zeros(batch, 1, length, self.head_dim)
            cache.update(placeholder, placeholder, self.layer_idx)
        if self.output_name is None:
            return hidden_states.new_zeros((*hidden_states.shape[:-1], 0)), None
        return getattr(self, self.output_name)(hidden_states), None


class SharedKeyValue(nn.Linear):
    """A key or value projection whose kept heads serve different numbers of query heads.

    Grouped-query attention repeats each key/value head for a fixed number of
    query heads; after pruning, one kept key/value head may serve two query
    heads and another one. This projection computes each kept key/value head
    once and hands every kept query head its own by index (``expand``), so the
    attention sees one key/value head per query head
    (``num_key_value_groups = 1``) while the weights stay one copy per kept
    key/value head. The index is rebuilt from the plan, not saved.
    """

    def __init__(self, in_features: int, out_features: int, bias: bool, expand: list[int], head_dim: int,
                 device: Any = None, dtype: Any = None) -> None:
        super().__init__(in_features, out_features, bias=bias, device=device, dtype=dtype)
        self.head_dim = head_dim
        self.register_buffer("expand", torch.tensor(expand, dtype=torch.long, device=device), persistent=False)

    @classmethod
    def from_linear(cls, linear: nn.Linear, expand: list[int], head_dim: int) -> "SharedKeyValue":
        new = cls(linear.in_features, linear.out_features, linear.bias is not None, expand, head_dim,
                  device=linear.weight.device, dtype=linear.weight.dtype)
        new.weight = linear.weight
        if linear.bias is not None:
            new.bias = linear.bias
        return new

    def forward(self, x: Tensor) -> Tensor:
        y = super().forward(x)  # [batch, pos, kv_heads * d]
        y = y.unflatten(-1, (-1, self.head_dim)).index_select(-2, self.expand)  # [batch, pos, heads, d]
        return y.flatten(-2)


# -- the surgery ---------------------------------------------------------------------------------
def apply_plan(
    model: nn.Module,
    spec: FamilySpec,
    plan: Plan,
    out_biases: list[Tensor | None] | None = None,
    mlp_constants: list[Tensor | None] | None = None,
) -> nn.Module:
    """Remove, in place, every head and MLP that ``plan`` does not keep; returns ``model``.

    ``out_biases[l]`` is layer ``l``'s new output-projection bias (its own plus
    the folded means of its removed heads) and ``mlp_constants[l]`` a removed
    MLP's folded mean; None keeps the bias as it is. Without them (loading an
    exported model) biases the plan asks for are created as zeros, to be
    overwritten by the saved weights.
    """
    layers = list(model.base_model.get_submodule(spec.layers))
    if len(layers) != len(plan.layers):
        raise SubnetlabError(f"the pruning plan has {len(plan.layers)} layers, the model {len(layers)}")
    for index, (block, layer) in enumerate(zip(layers, plan.layers)):
        new_bias = out_biases[index] if out_biases is not None else None
        _slice_attention(block, spec, plan, layer, new_bias)
        if not layer.mlp:
            _remove_mlp(block, spec, plan.hidden_size, layer, mlp_constants[index] if mlp_constants else None)
    return model


def _rows(heads: tuple[int, ...], d: int, device: torch.device) -> Tensor:
    """The channel indices ``h*d:(h+1)*d`` of ``heads``, in order."""
    if not heads:
        return torch.zeros(0, dtype=torch.long, device=device)
    return torch.cat([torch.arange(h * d, (h + 1) * d, device=device) for h in heads])


def _keep_outputs(module: nn.Module, index: Tensor) -> None:
    """Keep output channels ``index`` of a Linear (weight ``[out, in]``) or Conv1D (``[in, out]``)."""
    dim = _weight_dim(module, output=True)
    module.weight = nn.Parameter(module.weight.detach().index_select(dim, index),
                                 requires_grad=module.weight.requires_grad)
    if module.bias is not None:
        module.bias = nn.Parameter(module.bias.detach().index_select(0, index), requires_grad=module.bias.requires_grad)
    if isinstance(module, nn.Linear):
        module.out_features = len(index)
    else:
        module.nf = len(index)


def _keep_inputs(module: nn.Module, index: Tensor) -> None:
    """Keep input channels ``index`` of a Linear or Conv1D."""
    dim = _weight_dim(module, output=False)
    module.weight = nn.Parameter(module.weight.detach().index_select(dim, index),
                                 requires_grad=module.weight.requires_grad)
    if isinstance(module, nn.Linear):
        module.in_features = len(index)
    else:
        module.nx = len(index)


def _weight_dim(module: nn.Module, output: bool) -> int:
    if isinstance(module, nn.Linear):
        return 0 if output else 1
    if isinstance(module, Conv1D):
        return 1 if output else 0
    raise SubnetlabError(f"cannot slice a {type(module).__name__}: only Linear and Conv1D projections")


def _out_width(module: nn.Module) -> int:
    return module.out_features if isinstance(module, nn.Linear) else module.nf


def _final_bias(module: nn.Module, wanted: bool, new: Tensor | None) -> Tensor | None:
    """The bias ``module`` ends with: ``new``, else its own, else zeros when the plan wants one."""
    ref = module.weight
    if new is not None:
        return new.to(device=ref.device, dtype=ref.dtype)
    if not wanted:
        return None
    if module.bias is not None:
        return module.bias.detach()
    return torch.zeros(_out_width(module), device=ref.device, dtype=ref.dtype)


def _set_bias(module: nn.Module, wanted: bool, new: Tensor | None) -> None:
    """Give ``module`` the bias the plan asks for: ``new``, its own, a zero one to load into, or none."""
    ref = module.weight
    if new is not None:
        module.bias = nn.Parameter(new.to(device=ref.device, dtype=ref.dtype).clone())
    elif not wanted:
        module.register_parameter("bias", None)
    elif module.bias is None:
        module.bias = nn.Parameter(torch.zeros(_out_width(module), device=ref.device, dtype=ref.dtype))


def _slice_attention(block: nn.Module, spec: FamilySpec, plan: Plan, layer: LayerPlan, new_bias: Tensor | None) -> None:
    d, H = plan.head_dim, plan.num_heads
    attn_path = spec.query.rsplit(".", 1)[0]
    attn = block.get_submodule(attn_path)
    out = block.get_submodule(spec.out_proj)
    if not layer.heads:
        constant = Constant(plan.hidden_size, _final_bias(out, layer.out_bias, new_bias))
        inner = spec.out_proj[len(attn_path) + 1:] if spec.out_proj.startswith(attn_path + ".") else None
        if inner is not None and "." in inner:
            raise SubnetlabError(f"{spec.family}: cannot remove every head of a layer whose output projection "
                                 f"sits at {spec.out_proj}")
        no_heads = NoHeads(inner, d, getattr(attn, "layer_idx", None))
        if inner is None:
            block.set_submodule(spec.out_proj, constant)
        else:
            no_heads.add_module(inner, constant)
        block.set_submodule(attn_path, no_heads)
        return
    if layer.heads != tuple(range(H)):
        if spec.family == "olmo2":
            raise SubnetlabError("olmo2: cannot slice out some of a layer's heads: its query and key norms "
                                 "(q_norm, k_norm) normalise over every head at once, so the kept heads' values "
                                 "depend on the removed ones; gate them instead (or remove every head of the layer)")
        device = out.weight.device
        q_index = _rows(layer.heads, d, device)
        if spec.key is None and spec.fused_layout == "per-head":  # fused [q k v] of each head in turn (GPT-NeoX)
            _keep_outputs(block.get_submodule(spec.query), _rows(layer.heads, 3 * d, device))
        elif spec.key is None:  # fused [q | k | v] along the output axis
            width = H * d
            _keep_outputs(block.get_submodule(spec.query), torch.cat([q_index, q_index + width, q_index + 2 * width]))
        else:
            kv_index = _rows(layer.kv_heads, d, device)
            _keep_outputs(block.get_submodule(spec.query), q_index)
            _keep_outputs(block.get_submodule(spec.key), kv_index)
            _keep_outputs(block.get_submodule(spec.value), kv_index)
        _keep_inputs(out, q_index)
        groups = _share_key_values(block, spec, plan, layer)
        n = len(layer.heads)
        for name, value in (("num_attention_heads", n), ("num_heads", n), ("all_head_size", n * d),
                            ("split_size", n * d), ("num_key_value_groups", groups)):
            if hasattr(attn, name):
                setattr(attn, name, value)
    _set_bias(out, layer.out_bias, new_bias)


def _share_key_values(block: nn.Module, spec: FamilySpec, plan: Plan, layer: LayerPlan) -> int:
    """Query heads per kept key/value head when uniform; else install ``SharedKeyValue`` and return 1."""
    if spec.key is None:
        return 1
    served = [sum(1 for h in layer.heads if h // plan.group == kv) for kv in layer.kv_heads]
    if len(set(served)) == 1:
        return served[0]
    position = {kv: i for i, kv in enumerate(layer.kv_heads)}
    expand = [position[h // plan.group] for h in layer.heads]
    for path in (spec.key, spec.value):
        block.set_submodule(path, SharedKeyValue.from_linear(block.get_submodule(path), expand, plan.head_dim))
    return 1


def _remove_mlp(block: nn.Module, spec: FamilySpec, hidden: int, layer: LayerPlan, value: Tensor | None) -> None:
    """Replace the MLP by its constant; matrices outside the MLP output module (BERT's intermediate) go too."""
    ref = next(block.parameters())
    bias = value.to(device=ref.device, dtype=ref.dtype) if value is not None else (
        torch.zeros(hidden, device=ref.device, dtype=ref.dtype) if layer.mlp_constant else None)
    for path in spec.mlp_matrices:
        if path != spec.mlp_output and not path.startswith(spec.mlp_output + "."):
            block.set_submodule(path, Constant(0))  # an empty [..., 0] activation: nothing reads it but the MLP
    block.set_submodule(spec.mlp_output, Constant(hidden, bias))

