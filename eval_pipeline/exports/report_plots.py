"""The report's PNG plots, drawn with matplotlib.

matplotlib is imported inside :func:`_pyplot` only: the CLI's start-up and
``import eval_pipeline`` must not pay for it, and most code paths never draw. The Agg
backend draws to files without a display (CI, servers, the Dagster daemon).

Each function takes plain data, writes one PNG and returns True, or writes nothing and
returns False when there is nothing to draw (an empty plot would mislead a reader).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

PLOT_DPI = 100


def _pyplot() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _save(fig: Any, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(path, dpi=PLOT_DPI, format="png")
    _pyplot().close(fig)


def plot_score_distribution(scores: Mapping[tuple[str, str], Sequence[float]],
                            path: Path) -> bool:
    """A box plot of clip scores per (judge, tool type): where a judge is harsh or lenient
    on one tool shows as a shifted box, which a mean alone hides."""
    groups = [(k, list(v)) for k, v in sorted(scores.items()) if len(v)]
    if not groups:
        return False
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(max(6.0, 0.9 * len(groups) + 2), 4.5))
    ax.boxplot([v for _k, v in groups], showmeans=True)
    ax.set_xticks(range(1, len(groups) + 1))
    ax.set_xticklabels([f"{judge}\n{tool}" for (judge, tool), _v in groups],
                       rotation=30, ha="right", fontsize=8)
    ax.set_ylim(-0.05, 1.05)
    ax.set_ylabel("clip score (mean of rubric metrics)")
    ax.set_title("Score distribution per judge and tool type")
    ax.grid(axis="y", alpha=0.3)
    _save(fig, path)
    return True


def plot_judge_scatter(pairs: Mapping[tuple[str, str], tuple[Sequence[float], Sequence[float]]],
                       path: Path) -> bool:
    """One scatter per pair of judges over the clips both scored: points off the diagonal
    are the clips they disagree on."""
    drawn = [(k, v) for k, v in sorted(pairs.items()) if len(v[0])]
    if not drawn:
        return False
    plt = _pyplot()
    fig, axes = plt.subplots(1, len(drawn), figsize=(4.2 * len(drawn), 4.2), squeeze=False)
    for ax, ((a, b), (xs, ys)) in zip(axes[0], drawn, strict=True):
        ax.plot([0, 1], [0, 1], color="grey", linewidth=0.8, linestyle="--")
        ax.scatter(xs, ys, alpha=0.5, s=18)
        ax.set_xlim(-0.05, 1.05)
        ax.set_ylim(-0.05, 1.05)
        ax.set_xlabel(a)
        ax.set_ylabel(b)
        ax.set_title(f"{a} vs {b} ({len(xs)} clips)", fontsize=9)
    _save(fig, path)
    return True


def plot_confusion(matrices: Mapping[tuple[str, str], tuple[int, int, int, int]],
                   path: Path) -> bool:
    """One 2x2 confusion matrix per (judge, comparison), the human as the truth; counts are
    ``(true_positive, false_positive, false_negative, true_negative)``."""
    drawn = [(k, v) for k, v in sorted(matrices.items()) if sum(v)]
    if not drawn:
        return False
    plt = _pyplot()
    fig, axes = plt.subplots(1, len(drawn), figsize=(3.6 * len(drawn), 3.6), squeeze=False)
    for ax, ((judge, comparison), (tp, fp, fn, tn)) in zip(axes[0], drawn, strict=True):
        grid = [[tp, fn], [fp, tn]]  # rows: human good / bad; columns: judge good / bad
        ax.imshow(grid, cmap="Blues", vmin=0)
        for r in range(2):
            for c in range(2):
                dark = grid[r][c] > max(tp, fp, fn, tn) / 2
                ax.text(c, r, str(grid[r][c]), ha="center", va="center", fontsize=12,
                        color="white" if dark else "black")
        ax.set_xticks([0, 1])
        ax.set_xticklabels(["judge good", "judge bad"])
        ax.set_yticks([0, 1])
        ax.set_yticklabels(["human good", "human bad"])
        ax.set_title(f"{judge}: {comparison}", fontsize=9)
    _save(fig, path)
    return True
