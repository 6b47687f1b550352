"""LiFE and ReAl-LiFE: streamline weights that best explain the diffusion signal.

On the CPU or a CUDA GPU (ENCODE model, SBB-NNLS solver).
"""

from connscale.io.streamlines import StreamlineArray, load_streamlines
from connscale.life.api import (
    DiffusionData,
    LiFE,
    LiFEFit,
    fit,
    lambda_max,
    lambda_sweep,
    solve,
    split_rmse,
)
from connscale.life.encode import LiFEModel, build_model
from connscale.life.evaluate import cross_validated_rmse, strength_of_evidence
from connscale.life.operators import LiFEOperator
from connscale.life.sbb import sbb_nnls

__all__ = [
    "DiffusionData",
    "LiFE",
    "LiFEFit",
    "LiFEModel",
    "LiFEOperator",
    "StreamlineArray",
    "build_model",
    "cross_validated_rmse",
    "fit",
    "lambda_max",
    "lambda_sweep",
    "load_streamlines",
    "sbb_nnls",
    "solve",
    "split_rmse",
    "strength_of_evidence",
]
