"""The participant level's parameters: what every run task needs."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

from connscale._choices import REGION_MEASURES, VOXEL_MEASURES
from connscale.io.bids import strategy_desc

__all__ = ["WINDOWED", "ParticipantConfig"]

#: The region measures computed over sliding windows.
WINDOWED = ("dfc", "pairs")


@dataclass(frozen=True)
class ParticipantConfig:
    """What every run task needs (picklable; paths absolute)."""

    derivatives: str
    output: str
    atlas: str
    atlas_name: str
    atlas_labels: str | None = None
    atlas_space: str | None = None
    strategy: str = "simple"
    strategy_params: dict = field(default_factory=dict)
    measures: tuple = ("fc", "timeseries")
    window_length: int | None = None
    step: int = 1
    pairs_threshold: float = 0.5
    detrend: bool = True
    standardize: str | None = "zscore_sample"
    low_pass: float | None = None
    high_pass: float | None = None
    device: str = "cpu"
    dtype: str = "float32"
    threads: int = 1
    memory_limit: str | int | None = None
    reports: bool = True
    degree_thresholds: tuple = (0.25,)
    precision: str = "exact"
    n_atoms: int = 10
    network_sparsity: int | float = 0.07
    overwrite: bool = False
    min_dof: float = 10.0

    @property
    def desc(self) -> str:
        """The ``desc-`` label of the outputs: the strategy's
        (:func:`connscale.io.bids.strategy_desc`; ``ica_aroma`` gives ``icaaroma``)."""
        return strategy_desc(self.strategy)

    def parameters(self) -> dict:
        """What changes a run's outputs (not where it ran, nor which runs are refused)."""
        kept = asdict(self)
        for key in (
            "derivatives",
            "output",
            "device",
            "threads",
            "memory_limit",
            "reports",
            "overwrite",
            "min_dof",
        ):
            kept.pop(key)
        return kept

    def region_parameters(self) -> dict:
        """What changes the run's atlas-level set."""
        kept = self.parameters()
        kept["measures"] = [m for m in self.measures if m in REGION_MEASURES]
        for key in ("degree_thresholds", "precision", "n_atoms", "network_sparsity"):
            kept.pop(key)
        if not any(m in WINDOWED for m in self.measures):
            for key in ("window_length", "step", "pairs_threshold"):
                kept.pop(key)
        return kept

    def voxel_parameters(self) -> dict:
        """What changes the run's voxel-level set (not the atlas, not the windows)."""
        kept = {
            k: v
            for k, v in self.parameters().items()
            if k
            in (
                "strategy",
                "strategy_params",
                "detrend",
                "standardize",
                "low_pass",
                "high_pass",
                "dtype",
            )
        }
        kept["measures"] = [m for m in self.measures if m in VOXEL_MEASURES]
        return kept
