"""The few chart shapes the notebooks share, with one look: labelled axes, a legend, a grid."""

from __future__ import annotations

from typing import Mapping, Sequence


def _axes(ax):
    if ax is not None:
        return ax
    import matplotlib.pyplot as plt

    _, ax = plt.subplots(figsize=(6.4, 4.0))
    return ax


def line_plot(x: Sequence[float], series: Mapping[str, Sequence[float]], *, xlabel: str, ylabel: str,
              title: str = "", logx: bool = False, logy: bool = False, ax=None):
    """One line per entry of `series` over the shared `x`; returns the matplotlib Axes."""
    ax = _axes(ax)
    for label, ys in series.items():
        ax.plot(list(x), list(ys), marker="o", label=label)
    if logx:
        ax.set_xscale("log", base=2)
    if logy:
        ax.set_yscale("log")
    ax.set(xlabel=xlabel, ylabel=ylabel, title=title)
    ax.grid(True, which="both", alpha=0.3)
    if len(series) > 1 or any(series):
        ax.legend()
    return ax


def bar_plot(labels: Sequence[str], values: Sequence[float], *, ylabel: str, title: str = "",
             annotate: str = "{:.3g}", ax=None):
    """Bars with their values written on top; returns the matplotlib Axes."""
    ax = _axes(ax)
    bars = ax.bar(list(labels), list(values))
    for bar, value in zip(bars, values):
        ax.annotate(annotate.format(value), (bar.get_x() + bar.get_width() / 2, bar.get_height()),
                    ha="center", va="bottom")
    ax.set(ylabel=ylabel, title=title)
    ax.grid(True, axis="y", alpha=0.3)
    return ax
