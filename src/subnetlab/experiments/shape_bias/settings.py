"""The shape-bias study's typed settings (the keys of its presets, ``reproduce.PRESETS``).

``data`` picks the images: ``generated`` (the demo's shape/texture benchmark: ``num_classes`` and the
``pretrain_*_correlation`` settings) or ``imagenet16`` (the paper's: ``imagenet_train``, ``imagenet_val`` and
``cue_conflict`` directories). The keys only one of them reads are optional: absent from the other's preset and from
its ``config.json``. Each family of ``models`` has its settings under its own name (``resnet``, ``vit``; see
``models.py``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from subnetlab.errors import SubnetlabError
from subnetlab.experiments.settings import StudySettings, optional

FAMILIES = ("resnet", "vit")
# the generated benchmark's splits, each sized by ``sizes``
GENERATED = ("pretrain", "train", "discovery", "discovery-eval", "test", "cue-conflict", "texture-free")


@dataclass(frozen=True, kw_only=True)
class ShapeBiasSettings(StudySettings):
    """Per family of ``models``: a base model, continuous-sparsification discovery, and one transfer run per
    condition of ``conditions``, on the images ``data`` names at ``image_size`` pixels (``sizes`` per split)."""

    reproduction = "shape-bias"

    data: str
    threads: int
    imagenet_train: str | None = optional()
    imagenet_val: str | None = optional()
    cue_conflict: str | None = optional()
    models: list[str]
    conditions: list[str]
    seed: int
    num_classes: int | None = optional()
    image_size: int
    pretrain_texture_correlation: float | None = optional()
    pretrain_shape_correlation: float | None = optional()
    sizes: dict[str, Any]
    segmentation: str
    segmentation_params: dict[str, Any]
    resnet: dict[str, Any]
    vit: dict[str, Any]

    def family(self, name: str) -> dict[str, Any]:
        """The settings of model family ``name`` (``resnet`` or ``vit``)."""
        return getattr(self, name)

    def check(self) -> None:
        """Families, conditions, each family's reinit and kept mask, the data source, the seed and, for generated
        data, the benchmark's design and split sizes. The ImageNet directories are checked when the study runs."""
        from subnetlab.methods.continuous_sparsification import KEEP
        from subnetlab.transfer.conditions import REINIT, SHAPE_BIAS_CONDITIONS, check_conditions

        for family in self.models:
            if family not in FAMILIES:
                raise SubnetlabError(f"models: unknown family {family!r}; choose resnet and/or vit")
        if self.conditions:
            check_conditions(self.conditions, table=SHAPE_BIAS_CONDITIONS, setting="conditions")
        for family in self.models:
            fs = self.family(family) or {}
            reinit = fs.get("transfer_reinit", "all")
            if reinit not in REINIT:
                raise SubnetlabError(f"{family}.transfer_reinit {reinit!r}: choose 'all' (the paper's text) or "
                                     "'masked' (its released code)", setting=family)
            keep = (fs.get("discovery") or {}).get("keep", "best")
            if keep not in KEEP:
                raise SubnetlabError(f"{family}.discovery.keep {keep!r}: choose from {', '.join(KEEP)}", setting=family)
        if self.data not in ("generated", "imagenet16"):
            raise SubnetlabError(f"data: {self.data!r} is not 'generated' or 'imagenet16'")
        if self.seed < 0:
            raise SubnetlabError(f"seed {self.seed!r}: expected a non-negative integer", setting="seed")
        if self.data == "generated":  # the benchmark's design and split sizes, before anything is generated
            from subnetlab.tasks.images.shapes import ShapeTextureConfig

            for key in ("num_classes", "pretrain_texture_correlation", "pretrain_shape_correlation"):
                if getattr(self, key) is None:
                    raise SubnetlabError(f"{key}: generated data needs it", setting=key)
            ShapeTextureConfig(num_classes=self.num_classes, image_size=self.image_size)
            sizes = self.sizes
            for name in GENERATED:
                if name not in sizes or isinstance(sizes[name], bool) or not isinstance(sizes[name], int) or sizes[name] < 1:
                    raise SubnetlabError(f"sizes.{name} {sizes.get(name)!r}: expected a positive number of images",
                                         setting="sizes")
