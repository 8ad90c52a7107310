"""Adapters: where each architecture family keeps its heads, MLPs and their weights.

An adapter answers, for one loaded model, the questions every method asks:
which modules are the layers; per layer how many heads of which width; which
module receives the concatenated head outputs (the attention output projection,
whose *input* we gate); which module's *output* is the MLP's contribution to the
residual stream; and which parameter slices belong to each head and each MLP
(for sparsity by parameters, weight masks and physical pruning later).

Families are described by a small table (``FamilySpec``, registered in
``FAMILIES``) rather than one class each, because the transformer families
differ only in module paths and weight orientation. Every family, ResNet
included, is found the same way: ``get_adapter`` looks the model type up in
``FAMILIES`` and calls the family's ``make_adapter``. ResNets have no heads or
MLPs, so their entry builds a ``ResNetAdapter``: the part of the adapter
interface that weight masks and ``Subnetwork`` need (``family``,
``parameter``, ``fingerprint``, ``weight_matrices``, ``layers``,
``module_name``).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from subnetlab.errors import SubnetlabError

if TYPE_CHECKING:  # torch loads with the first model, not with this table (which every command's help reads)
    import torch
    from torch import nn


@dataclass(frozen=True)
class ParamSlice:
    """A slice ``[start:stop]`` along ``dim`` of parameter ``name``; ``share`` of it is the component's.

    ``share`` < 1 marks parameters shared by several heads (grouped-query attention:
    one key/value head serves ``num_heads / num_kv_heads`` query heads).
    """

    name: str
    dim: int
    start: int
    stop: int
    share: float = 1.0

    def numel(self, shape: torch.Size) -> float:
        other = 1
        for i, size in enumerate(shape):
            if i != self.dim:
                other *= size
        return (self.stop - self.start) * other * self.share


def _transformer_adapter(model: nn.Module, spec: FamilySpec) -> Adapter:
    """The head-and-MLP ``Adapter`` of a transformer family, sized from the model's config."""
    config = model.config
    num_heads = getattr(config, "num_attention_heads", None) or getattr(config, "n_head")
    hidden = getattr(config, "hidden_size", None) or getattr(config, "n_embd")
    head_dim = getattr(config, "head_dim", None) or hidden // num_heads
    num_kv = getattr(config, "num_key_value_heads", None) or num_heads
    layers = _get(model.base_model, spec.layers)
    return Adapter(model, spec, len(layers), num_heads, num_kv, head_dim, hidden)


def _resnet_adapter(model: nn.Module, spec: FamilySpec) -> ResNetAdapter:
    return ResNetAdapter(model)


@dataclass(frozen=True)
class FamilySpec:
    """Module paths (relative to a layer) and weight orientation of one architecture family.

    ``make_adapter(model, spec)`` builds the family's adapter; the default is the
    transformer ``Adapter`` over the module paths below. Families without heads
    or MLPs (ResNet) leave the paths empty and bring their own ``make_adapter``.
    """

    family: str
    model_types: tuple[str, ...]
    layers: str = ""  # path from the base model to the ModuleList of layers
    query: str = ""  # for fused QKV (GPT-2, GPT-NeoX) the fused module
    key: str | None = None
    value: str | None = None
    out_proj: str = ""  # input = concatenated head outputs
    mlp_output: str = ""  # output = the MLP's contribution to the residual stream
    mlp_matrices: tuple[str, ...] = ()  # modules whose weights (and biases) belong to the MLP
    transposed: bool = False  # GPT-2 Conv1D stores weights as [in, out]
    # a fused QKV's output columns: "qkv" = [all q | all k | all v] (GPT-2), "per-head" = [q k v of head 0 | ...]
    # (GPT-NeoX)
    fused_layout: str = "qkv"
    example: str = ""
    kind: str = "encoder"  # encoder (text classifiers), decoder (causal LMs) or vision
    # the computation graph (``models.graph``, ``intervene.edges``): embedding modules whose outputs are summed into
    # the residual stream (paths from the base model; token first), the norms in front of attention, the MLP and
    # the output, and whether the residual stream is a plain sum of writer outputs (pre-LN) or normalised after
    # each sub-layer (post-LN: BERT, RoBERTa), or receives each block's output after a norm of its own
    # ("block-norm": Gemma-2, OLMo-2), which edge interventions cannot split into writers; the config flag that
    # makes attention and MLP read the same stream (GPT-NeoX's parallel residual)
    embeddings: tuple[str, ...] = ()
    attn_norm: str = ""
    mlp_norm: str = ""
    final_norm: str = ""
    residual: str = "pre-ln"
    parallel_flag: str = ""
    attention: str = ""  # the attention implementation the family needs ("eager": Gemma-2's soft-capping), "" any
    # the embeddings' outputs enter the stream times sqrt(hidden size) (Gemma's ``normalizer``): the input writer's
    # output is the scaled one, as TransformerLens folds the scale into W_E (EAP-IG's hook_embed)
    scaled_embeddings: bool = False
    # the norm applied to the attention block's output before it joins the stream (Gemma-2's
    # ``post_attention_layernorm``): a cut head edge is seen through it (EAP-IG's ``evaluate_graph``)
    attn_post_norm: str = ""
    make_adapter: Callable[[nn.Module, FamilySpec], Any] = field(default=_transformer_adapter, repr=False)

    @property
    def has_components(self) -> bool:
        """Whether the family has heads and MLPs (what gates, pruning and head analyses need)."""
        return self.make_adapter is _transformer_adapter


FAMILIES: dict[str, FamilySpec] = {
    spec.family: spec
    for spec in [
        FamilySpec(
            "bert", ("bert",), "encoder.layer",
            "attention.self.query", "attention.self.key", "attention.self.value",
            "attention.output.dense", "output.dense", ("intermediate.dense", "output.dense"),
            example="bert-base-cased, minilm",
            embeddings=("embeddings.word_embeddings", "embeddings.position_embeddings"), residual="post-ln",
        ),
        FamilySpec(
            "roberta", ("roberta", "xlm-roberta"), "encoder.layer",
            "attention.self.query", "attention.self.key", "attention.self.value",
            "attention.output.dense", "output.dense", ("intermediate.dense", "output.dense"),
            example="roberta-base",
            embeddings=("embeddings.word_embeddings", "embeddings.position_embeddings"), residual="post-ln",
        ),
        FamilySpec(
            "gpt2", ("gpt2",), "h", "attn.c_attn", None, None,
            "attn.c_proj", "mlp", ("mlp.c_fc", "mlp.c_proj"), transposed=True,
            example="gpt2, small GPT-2s from a config", kind="decoder",
            embeddings=("wte", "wpe"), attn_norm="ln_1", mlp_norm="ln_2", final_norm="ln_f",
        ),
        FamilySpec(
            "vit", ("vit",), "layers",
            "attention.q_proj", "attention.k_proj", "attention.v_proj",
            "attention.o_proj", "mlp", ("mlp.fc1", "mlp.fc2"),
            example="google/vit-base-patch16-224", kind="vision",
        ),
        FamilySpec(
            "llama", ("llama", "mistral", "qwen2", "qwen3"), "layers",
            "self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj",
            "self_attn.o_proj", "mlp", ("mlp.gate_proj", "mlp.up_proj", "mlp.down_proj"),
            example="Llama / Mistral / Qwen2 (grouped-query attention)", kind="decoder",
            embeddings=("embed_tokens",), attn_norm="input_layernorm", mlp_norm="post_attention_layernorm",
            final_norm="norm",
        ),
        FamilySpec(
            "gemma2", ("gemma2",), "layers",
            "self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj",
            "self_attn.o_proj", "post_feedforward_layernorm", ("mlp.gate_proj", "mlp.up_proj", "mlp.down_proj"),
            example="Gemma-2 (norms after attention and MLP; soft-capped logits)", kind="decoder",
            embeddings=("embed_tokens",), attn_norm="input_layernorm", mlp_norm="pre_feedforward_layernorm",
            final_norm="norm", residual="block-norm", attention="eager", scaled_embeddings=True,
            attn_post_norm="post_attention_layernorm",
        ),
        FamilySpec(
            "olmo2", ("olmo2",), "layers",
            "self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj",
            "self_attn.o_proj", "post_feedforward_layernorm", ("mlp.gate_proj", "mlp.up_proj", "mlp.down_proj"),
            example="OLMo-2 (norms after attention and MLP)", kind="decoder",
            embeddings=("embed_tokens",), final_norm="norm", residual="block-norm",
        ),
        FamilySpec(
            "gpt_neox", ("gpt_neox",), "layers", "attention.query_key_value", None, None,
            "attention.dense", "mlp", ("mlp.dense_h_to_4h", "mlp.dense_4h_to_h"), fused_layout="per-head",
            example="Pythia / GPT-NeoX (parallel attention and MLP)", kind="decoder",
            embeddings=("embed_in",), attn_norm="input_layernorm", mlp_norm="post_attention_layernorm",
            final_norm="final_layer_norm", parallel_flag="use_parallel_residual",
        ),
        FamilySpec(
            "resnet", ("resnet",), "encoder.stages",
            example="microsoft/resnet-18, small ResNets from a config", kind="vision",
            make_adapter=_resnet_adapter,
        ),
    ]
}


def _family_for(model_type: str) -> FamilySpec:
    for spec in FAMILIES.values():
        if model_type in spec.model_types:
            return spec
    supported = ", ".join(f"{s.family} ({'/'.join(s.model_types)})" for s in FAMILIES.values())
    raise SubnetlabError(f"unsupported model type {model_type!r}; supported families: {supported}")


def attention_for(model_type: str, wanted: str) -> str:
    """The attention implementation to load ``model_type`` with: ``wanted`` unless its family needs another."""
    spec = next((s for s in FAMILIES.values() if model_type in s.model_types), None)
    return spec.attention if spec is not None and spec.attention else wanted


def _get(module: nn.Module, path: str) -> nn.Module:
    for part in path.split("."):
        module = getattr(module, part)
    return module


@dataclass
class Adapter:
    """The component map of one model instance (see module docstring)."""

    model: nn.Module
    spec: FamilySpec
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    hidden_size: int
    _names: dict[int, str] = field(repr=False, default_factory=dict)

    @property
    def family(self) -> str:
        return self.spec.family

    @property
    def parallel_attn_mlp(self) -> bool:
        """Whether a layer's attention and MLP both read the layer's input (GPT-NeoX's parallel residual)."""
        return bool(self.spec.parallel_flag and getattr(self.model.config, self.spec.parallel_flag, False))

    # -- modules -----------------------------------------------------------------
    def layers(self) -> list[nn.Module]:
        return list(_get(self.model.base_model, self.spec.layers))

    def embedding_modules(self) -> list[nn.Module]:
        """The token (and position) embedding modules, in ``spec.embeddings`` order: the stream's first writers."""
        return [_get(self.model.base_model, path) for path in self.spec.embeddings]

    def head_output_module(self, layer: int) -> nn.Module:
        """The attention output projection: its input is ``[batch, pos, heads * head_dim]``."""
        return _get(self.layers()[layer], self.spec.out_proj)

    def mlp_output_module(self, layer: int) -> nn.Module:
        """The module whose output is the MLP's contribution to the residual stream."""
        return _get(self.layers()[layer], self.spec.mlp_output)

    def module_name(self, module: nn.Module) -> str:
        if not self._names:
            self._names.update({id(m): n for n, m in self.model.named_modules()})
        return self._names[id(module)]

    def _param(self, layer: int, path: str, kind: str = "weight") -> str:
        return f"{self.module_name(_get(self.layers()[layer], path))}.{kind}"

    def _has_bias(self, layer: int, path: str) -> bool:
        return getattr(_get(self.layers()[layer], path), "bias", None) is not None

    # -- parameters of components ---------------------------------------------------
    def head_params(self, layer: int, head: int) -> list[ParamSlice]:
        """The slices of the Q, K, V and output-projection weights that belong to one head."""
        d, s = self.head_dim, self.spec
        width = self.num_heads * d
        q = (head * d, (head + 1) * d)
        group = self.num_heads // self.num_kv_heads
        kv_head = head // group
        kv = (kv_head * d, (kv_head + 1) * d)
        out_dim_qkv, out_dim_o = (1, 0) if s.transposed else (0, 1)
        slices: list[ParamSlice] = []
        if s.key is None and s.fused_layout == "per-head":  # fused QKV: [q k v] of each head in turn
            rng = (3 * head * d, 3 * (head + 1) * d)
            slices.append(ParamSlice(self._param(layer, s.query), out_dim_qkv, *rng))
            if self._has_bias(layer, s.query):
                slices.append(ParamSlice(self._param(layer, s.query, "bias"), 0, *rng))
        elif s.key is None:  # fused QKV: [q | k | v] along the output axis
            for offset in (0, width, 2 * width):
                slices.append(ParamSlice(self._param(layer, s.query), out_dim_qkv, offset + q[0], offset + q[1]))
                if self._has_bias(layer, s.query):
                    slices.append(ParamSlice(self._param(layer, s.query, "bias"), 0, offset + q[0], offset + q[1]))
        else:
            for path, rng, share in ((s.query, q, 1.0), (s.key, kv, 1 / group), (s.value, kv, 1 / group)):
                slices.append(ParamSlice(self._param(layer, path), out_dim_qkv, *rng, share))
                if self._has_bias(layer, path):
                    slices.append(ParamSlice(self._param(layer, path, "bias"), 0, *rng, share))
        slices.append(ParamSlice(self._param(layer, s.out_proj), out_dim_o, *q))
        return slices

    def mlp_params(self, layer: int) -> list[ParamSlice]:
        """Every weight and bias of the MLP's matrices (an MLP is gated as a whole)."""
        slices = []
        for path in self.spec.mlp_matrices:
            for kind in ("weight", "bias"):
                if kind == "bias" and not self._has_bias(layer, path):
                    continue
                name = self._param(layer, path, kind)
                shape = self.parameter(name).shape
                slices.append(ParamSlice(name, 0, 0, shape[0]))
        return slices

    def parameter(self, name: str) -> torch.Tensor:
        return self.model.get_parameter(name)

    def count(self, slices: list[ParamSlice]) -> float:
        return sum(sl.numel(self.parameter(sl.name).shape) for sl in slices)

    def params_per_head(self) -> torch.Tensor:
        """``[layers, heads]`` parameter counts (shared K/V counted fractionally)."""
        import torch

        return torch.tensor(
            [[self.count(self.head_params(l, h)) for h in range(self.num_heads)] for l in range(self.num_layers)],
            dtype=torch.float64,
        )

    def params_per_mlp(self) -> torch.Tensor:
        import torch

        return torch.tensor([self.count(self.mlp_params(l)) for l in range(self.num_layers)], dtype=torch.float64)

    def weight_matrices(self, include: tuple[str, ...] = ("attention", "mlp")) -> list[str]:
        """Names of the attention and MLP weight matrices (not embeddings, norms or heads): weight-mask targets."""
        s = self.spec
        attention = [p for p in (s.query, s.key, s.value, s.out_proj) if p is not None]
        names = []
        for layer in range(self.num_layers):
            paths = (attention if "attention" in include else []) + (list(s.mlp_matrices) if "mlp" in include else [])
            names.extend(self._param(layer, p) for p in paths)
        return names

    # -- identity -------------------------------------------------------------------
    def fingerprint(self, parameter_names: list[str] | None = None, other_head: bool = False) -> str:
        """Hash of the architecture and the named parameters' shapes: a mask fits only this shape of model.

        Parameter names carry the model's head: a causal LM's body is ``transformer.h.0...``, the same body
        loaded without its head ``h.0...``. ``other_head=True`` hashes the names as the same checkpoint
        loaded the other way would have them (``parameter_names`` then named that way too), so that a
        subnetwork found with the other head is told apart from one of another architecture.
        """
        prefix = f"{getattr(self.model, 'base_model_prefix', '')}."
        bare = self.model.base_model is self.model  # loaded without a head: names have no prefix

        def here(name: str) -> str:  # a name as the other head's model spells it, as this model spells it
            return (name.removeprefix(prefix) if bare else prefix + name) if other_head else name

        def hashed(name: str) -> str:
            return (prefix + name if bare else name.removeprefix(prefix)) if other_head else name

        if parameter_names is None:
            parameter_names = [hashed(n) for n in sorted(
                {sl.name for l in range(self.num_layers) for h in range(self.num_heads) for sl in self.head_params(l, h)}
                | {sl.name for l in range(self.num_layers) for sl in self.mlp_params(l)}
            )]
        shapes = {name: list(self.parameter(here(name)).shape) for name in sorted(parameter_names)}
        blob = json.dumps(
            {"family": self.family, "layers": self.num_layers, "heads": self.num_heads,
             "kv_heads": self.num_kv_heads, "head_dim": self.head_dim, "params": shapes},
            sort_keys=True,
        )
        return hashlib.sha256(blob.encode()).hexdigest()[:16]


@dataclass
class ResNetAdapter:
    """Component map of a transformers ResNet: its residual blocks and convolution weights."""

    model: nn.Module
    _names: dict[int, str] = field(repr=False, default_factory=dict)

    family = "resnet"
    num_heads = 0

    @property
    def spec(self) -> FamilySpec:
        return FAMILIES[self.family]

    @property
    def num_layers(self) -> int:
        return len(self.layers())

    def layers(self) -> list[nn.Module]:
        """The residual blocks, stage by stage."""
        return [block for stage in _get(self.model.base_model, self.spec.layers) for block in stage.layers]

    def module_name(self, module: nn.Module) -> str:
        if not self._names:
            self._names.update({id(m): n for n, m in self.model.named_modules()})
        return self._names[id(module)]

    def weight_matrices(self) -> list[str]:
        """Every convolution weight (stem, blocks, shortcuts), in forward order: weight-mask targets."""
        from torch import nn

        return [f"{name}.weight" for name, m in self.model.named_modules() if isinstance(m, nn.Conv2d)]

    def parameter(self, name: str) -> torch.Tensor:
        return self.model.get_parameter(name)

    def fingerprint(self, parameter_names: list[str] | None = None) -> str:
        """Hash of the architecture and the named parameters' shapes (default: every convolution)."""
        names = sorted(parameter_names if parameter_names is not None else self.weight_matrices())
        shapes = {name: list(self.parameter(name).shape) for name in names}
        cfg = self.model.config
        blob = json.dumps({"family": self.family, "depths": list(cfg.depths), "hidden_sizes": list(cfg.hidden_sizes),
                           "layer_type": cfg.layer_type, "params": shapes}, sort_keys=True)
        return hashlib.sha256(blob.encode()).hexdigest()[:16]


def get_adapter(model: nn.Module) -> Adapter:
    """Build the adapter for a Hugging Face model, or fail listing the supported families.

    The model type picks the family in ``FAMILIES``; the family's ``make_adapter``
    builds the adapter (a ``ResNetAdapter`` for ResNets, which have no heads or MLPs).
    """
    config = getattr(model, "config", None)
    if config is None or not hasattr(config, "model_type"):
        raise SubnetlabError(f"{type(model).__name__} has no Hugging Face config; cannot find its components")
    spec = _family_for(config.model_type)
    return spec.make_adapter(model, spec)


def head_name(layer: int, head: int) -> str:
    return f"L{layer}.H{head}"


def mlp_name(layer: int) -> str:
    return f"L{layer}.MLP"
