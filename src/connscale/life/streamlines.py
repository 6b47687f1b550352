"""Streamlines for LiFE, re-exported from :mod:`connscale.io.streamlines`.

The .trk/.tck reader and writer live in ``io``.
"""

from connscale.io.streamlines import StreamlineArray, load_streamlines, save_streamlines

__all__ = ["StreamlineArray", "load_streamlines", "save_streamlines"]
