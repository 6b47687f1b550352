"""XCP-D's spelling of the participant level's output names (``--output-spelling xcpd``).

So that a lab's scripts written for XCP-D's outputs read connscale's, each
name connscale builds (:func:`connscale.io.bids.bids_name`, the one place
names are made) is rewritten to XCP-D's (its ``xcp_d/data/xcp_d_bids_config.json``
and the output lists of its tests, ``xcp_d/tests/data/test_*_outputs.txt``)::

    connscale (giga)                                   XCP-D
    _seg-A_meas-PearsonCorrelation_desc-S_relmat.tsv   _atlas-A_stat-pearsoncorrelation_relmat.tsv
    _seg-A_desc-S_timeseries.tsv                    _atlas-A_stat-mean_timeseries.tsv
    _seg-A_stat-coverage_desc-S_bold.tsv            _atlas-A_stat-coverage_bold.tsv
    _seg-A_stat-alff_desc-S_bold.tsv                _atlas-A_stat-alff_bold.tsv
    _stat-reho_desc-S_boldmap.nii.gz                _stat-reho_boldmap.nii.gz
    _stat-alff_desc-S_boldmap.nii.gz                _stat-alff_boldmap.nii.gz
    _desc-S_bold.nii.gz (the denoised BOLD)         _desc-denoised_bold.nii.gz
    _desc-S_qc.tsv (the run's QC row)               _desc-linc_qc.tsv
    _seg-A_den-91k_stat-mean_desc-S_timeseries.ptseries.nii
                                                    _atlas-A_den-91k_stat-mean_timeseries.ptseries.nii

(A the atlas, S the strategy's label), that is: ``seg-`` becomes ``atlas-``
(XCP-D's entity since 0.8); the strategy's ``desc-`` goes (XCP-D's names carry
none: an output folder holds one denoising, and a second strategy's files are
refused as another set's); the Pearson connectome is
``stat-pearsoncorrelation``, the region series ``stat-mean``, the denoised BOLD
``desc-denoised``, the QC table ``desc-linc``; the atlas-level tables lose
``res-``/``den-`` (only XCP-D's CIFTI files keep ``den-``). The other outputs
(windowed stores, maps, networks, reports) keep their entities, the strategy's
``desc-`` dropped. The output sets' own names (locks, manifests,
:func:`connscale.bidsapp.outputs.set_prefix`) keep connscale's spelling, so
resume reads them the same way whichever spelling named the files. The group
level reads connscale's spelling only.
"""

from __future__ import annotations

from contextlib import AbstractContextManager

__all__ = ["output_spelling", "xcpd_entities"]

#: The extensions of CIFTI-2 files: the only atlas-level files XCP-D names with ``den-``.
_CIFTI = (".dtseries.nii", ".ptseries.nii", ".pconn.nii", ".pscalar.nii", ".dscalar.nii")


def xcpd_entities(entities: dict, suffix: str, extension: str) -> tuple[dict, str]:
    """Return the entities and suffix of XCP-D's name for a connscale output.

    Parameters
    ----------
    entities : dict
        BIDS keys to values, in connscale's spelling (``desc`` the strategy).
    suffix, extension : str
        The file's suffix and extension (with its dot).

    Returns
    -------
    entities : dict
    suffix : str

    Examples
    --------
    >>> xcpd_entities({"sub": "01", "seg": "A", "meas": "PearsonCorrelation",
    ...                "desc": "simple"}, "relmat", ".tsv")
    ({'sub': '01', 'atlas': 'A', 'stat': 'pearsoncorrelation'}, 'relmat')
    """
    out = dict(entities)
    out.pop("desc", None)
    if "seg" in out:
        out["atlas"] = out.pop("seg")
        if extension not in _CIFTI:
            out.pop("res", None)
            out.pop("den", None)
    if suffix == "relmat" and out.get("meas") == "PearsonCorrelation":
        del out["meas"]
        out["stat"] = "pearsoncorrelation"
    elif suffix == "timeseries" and "stat" not in out:
        out["stat"] = "mean"
    elif suffix == "bold" and "stat" not in out:
        out["desc"] = "denoised"
    elif suffix == "qc":
        out["desc"] = "linc"
    return out, suffix


def output_spelling(name: str) -> AbstractContextManager:
    """Return the block in which the participant level's names are spelled ``name``.

    ``'giga'``: connscale's own names; ``'xcpd'``: :func:`xcpd_entities`.
    """
    from connscale.io.bids import spelling

    return spelling(xcpd_entities if name == "xcpd" else None)
