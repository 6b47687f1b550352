"""Figures and the HTML report of a connscale run.

matplotlib and nilearn are imported by the plotting functions when called.
"""

from connscale.report.html import render_report, write_report
from connscale.report.plots import (
    plot_confusion_matrix,
    plot_connectome,
    plot_correlation_matrix,
    plot_edge_timecourses,
    plot_metric_comparison,
    plot_network_maps,
    plot_network_timecourses,
    plot_rmse_map,
    plot_roc,
    plot_weight_histogram,
    plot_window_similarity,
    window_similarity,
)

__all__ = [
    "plot_confusion_matrix",
    "plot_connectome",
    "plot_correlation_matrix",
    "plot_edge_timecourses",
    "plot_metric_comparison",
    "plot_network_maps",
    "plot_network_timecourses",
    "plot_rmse_map",
    "plot_roc",
    "plot_weight_histogram",
    "plot_window_similarity",
    "render_report",
    "window_similarity",
    "write_report",
]
