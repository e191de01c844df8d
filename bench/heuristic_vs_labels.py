"""The heuristic judge against the corpora's human labels: the README's figures (#8.9).

Run: ``.venv/bin/python bench/heuristic_vs_labels.py [--corpora DIR]``
(default ../shared/corpora or $EVAL_PIPELINE_CORPORA). Each labelled corpus goes through the
whole CLI (heuristic judge, fresh DAGSTER_HOME and store in a temporary folder, nothing
written into the project), then :func:`eval_pipeline.agreement_report.build_agreement`
runs over all its batches at once, so each corpus gets one figure. Prints per corpus and
comparison: items, accuracy, Cohen's kappa, the confusion matrix (human as truth, judge
pass = score >= 0.5) and the AUC. Asserts nothing.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pandas as pd
from tabulate import tabulate

from eval_pipeline.agreement_report import build_agreement

ROOT = Path(__file__).resolve().parents[1]
CORPORA = Path(os.environ.get("EVAL_PIPELINE_CORPORA", ROOT.parent / "shared" / "corpora"))
LABELLED = {
    "AgentProcessBench hotpotqa (step + final labels)": "agentprocessbench/hotpotqa.jsonl",
    "DevAI OpenHands (human requirement judgments)":
        "devai_agent_as_a_judge/benchmark/judgment/OpenHands/human_as_a_judge",
    "DevAI MetaGPT (human requirement judgments)":
        "devai_agent_as_a_judge/benchmark/judgment/MetaGPT/human_as_a_judge",
    "DevAI GPT-Pilot (human requirement judgments)":
        "devai_agent_as_a_judge/benchmark/judgment/GPT-Pilot/human_as_a_judge",
    "tau-bench airline gpt-4o (reward)":
        "tau_bench/historical_trajectories/gpt-4o-airline.trials0-1.json",
    "FireAct hotpotqa dev (reward)": "fireact/hotpotqa_dev_0_500_ft_gpt-3.5-turbo-0613_"
                                     "princeton-nlp__7woQRsdi_0.0_2023-09-21-16-19-51.json",
}


def run_corpus(path: Path, tmp: Path) -> pd.DataFrame:
    out = tmp / "out"
    env = {**os.environ, "DAGSTER_HOME": str(tmp / "home"),
           "EVAL_PIPELINE_STORE": str(tmp / "store"),
           "PYTHONPATH": str(ROOT)}
    subprocess.run([sys.executable, "-m", "eval_pipeline.cli", "run", str(path), "--output",
                    str(out), "--split-size", "1000", "--store", str(tmp / "store")],
                   env=env, check=True, capture_output=True)
    agreement, _ = build_agreement(
        "ALL", {"heuristic": pd.read_parquet(out / "judgments__heuristic.parquet")},
        pd.read_parquet(out / "clips.parquet"),
        pd.read_parquet(out / "preprocessed_trajectories.parquet"))
    return agreement


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--corpora", type=Path, default=CORPORA)
    args = parser.parse_args()
    rows = []
    for name, rel in LABELLED.items():
        path = args.corpora / rel
        if not path.exists():
            print(f"skipped (not found): {path}", file=sys.stderr)
            continue
        with tempfile.TemporaryDirectory() as tmp:
            agreement = run_corpus(path, Path(tmp))
        for r in agreement.to_dict("records"):
            rows.append([name, r["comparison"], r["items"], r["accuracy"], r["cohen_kappa"],
                         f"{r['true_positive']}/{r['false_positive']}/"
                         f"{r['false_negative']}/{r['true_negative']}", r["auc"]])
        print(f"done: {name}", file=sys.stderr)
    print(tabulate(rows, headers=["corpus", "labels", "items", "accuracy", "Cohen's kappa",
                                  "TP/FP/FN/TN", "AUC"], floatfmt=".3f"))


if __name__ == "__main__":
    main()
