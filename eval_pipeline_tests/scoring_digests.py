"""Digests of averaging's and the summaries' outputs, to prove faster scoring writes the same
tables (#12.2), as ``stage_digests`` does for parse, preprocess and clips (#12.1).

Two scenarios per input file:

- ``one``: the heuristic judge alone, tables in memory (as the benchmark and most tests
  call the functions), with the routing checks;
- ``three``: the heuristic and two judges derived from it that disagree (other scores,
  flipped ReAct labels, failed rows with errors, judge text with ``<``, ``>`` and ``&``),
  some clips no judge could score, a disagreement threshold, and every table through a
  Parquet round trip between the stages, as the IO manager hands them to the assets.

Each scenario pins ``averaged_scores``, ``trajectory_summaries`` (every value, float bit for
bit, columns and dtypes: ``digest_table``; and each column's Arrow type) and the
``evaluated.jsonl`` lines built from the summaries.
``python -m eval_pipeline_tests.scoring_digests CORPORA`` rewrites the expected digests from
the code it runs: only after a deliberate change of output.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import sys
from pathlib import Path

import pandas as pd
import pyarrow as pa

from eval_pipeline import ingest
from eval_pipeline.exports.evaluated import evaluated_record
from eval_pipeline.judges import make_judge
from eval_pipeline.judges.config import JudgeConfig
from eval_pipeline.judges.runner import run_judge
from eval_pipeline.local_run import EVALUATED_FIELDS
from eval_pipeline.preprocess import PreprocessConfig
from eval_pipeline.routing import routing_table
from eval_pipeline.rubrics import REACT_EVALUATIONS
from eval_pipeline.scoring import average_judgments, summarize_trajectories
from eval_pipeline.tool_registry import default_registry
from eval_pipeline_tests import parquet_io
from eval_pipeline_tests.stage_digests import SAMPLES, digest_table

HERE = Path(__file__).resolve().parent
EXPECTED = HERE / "scoring_digests.json"
# One or two files of each corpus (every XML-tag file the benchmark reads, step-labelled
# AgentProcessBench, the ReAct-style and tool-calling formats), kept small enough to run
# in the fast suite.
CORPORA_FILES = [
    "agent_data_platform/trajectories-2.5-pro_2025-07-12.jsonl",
    "agent_data_platform/trajectories-flash_2025-07-12.jsonl",
    "agent_data_platform/trajectories-lite_2025-07-12.jsonl",
    "agent_data_platform/trajectories_2025-07-04.jsonl",
    "agent_data_platform/trajectories_2025-07-05.jsonl",
    "agent_data_platform/trajectories_2025-07-16.jsonl",
    "agent_data_platform/trajectories_2025-07-19.jsonl",
    "dataeva/demo01.jsonl",
    "dataeva/demo02.jsonl",
    "dataeva/example_0721_evaluated.jsonl",
    "agentprocessbench/hotpotqa.jsonl",
    "bfcl/berkeley-function-call-leaderboard/bfcl_eval/data/BFCL_v4_multi_turn_base.json",
    "fireact/hotpotqa_dev_0_500_ft_gpt-3.5-turbo-0613_princeton-nlp__7woQRsdi_0.0_"
    "2023-09-21-16-19-51.json",
    "reflexion_react/hotpotqa_ReAct_reflexion_50_sample_react_reflect_correct.txt",
    "swe_agent/trajectories/demonstrations/function_calling_simple.traj",
    "tau_bench/historical_trajectories/gpt-4o-airline.trials0-1.json",
    "toolbench/data_example/answer/G2_answer/10_ChatGPT_DFS_woFilter_w2.json",
]
MODEL = "heuristic_heuristic-v1"


def _parquet(table: pd.DataFrame) -> pd.DataFrame:
    """The table as the IO manager hands it to the next asset (written, read back)."""
    return parquet_io.round_trip(table)


def _derived(table: pd.DataFrame, factor: float, fail_every: int, flip_every: int,
             name: str) -> pd.DataFrame:
    """Another judge's rows: scores scaled and rounded, every ``fail_every``-th row failed
    with an error, every ``flip_every``-th ReAct label flipped, its own words."""
    other = table.copy()
    ok = other["status"] == "ok"
    other["scores"] = [json.dumps({k: round(v * factor, 3) for k, v in json.loads(s).items()})
                       if good else s for s, good in zip(other["scores"], ok, strict=True)]
    react = other["evaluation_kind"].isin(list(REACT_EVALUATIONS))
    flip = react & (other.index % flip_every == 0)
    other.loc[flip, "label"] = [
        spec.negative if label == spec.positive else spec.positive
        for label, spec in zip(other.loc[flip, "label"],
                               other.loc[flip, "evaluation_kind"].map(REACT_EVALUATIONS),
                               strict=True)]
    other["summary"] = [f"{name} <says> {s} & more" if i % 4 else ""
                        for i, s in enumerate(other["summary"])]
    other["reasoning"] = [f"{r} [{name}]" for r in other["reasoning"]]
    failed = other.index % fail_every == 0
    other.loc[failed, "status"] = "failed"
    other.loc[failed, "scores"] = "{}"
    other.loc[failed, "error"] = f"{name}: HTTP 500 <b>&</b>"
    return other


def _evaluated_lines(summaries: pd.DataFrame) -> list[str]:
    """The lines ``evaluated.jsonl`` gets from these summaries (``write_evaluated``)."""
    ordered = summaries.sort_values(["batch", "source_line"]) if len(summaries) else summaries
    lines = []
    for row in ordered.to_dict("records"):
        plain = {str(k): (None if isinstance(v, float) and pd.isna(v) else v)
                 for k, v in row.items()}
        lines.append(json.dumps(evaluated_record(plain, EVALUATED_FIELDS),
                                ensure_ascii=False))
    return lines


def scoring_tables(path: Path) -> dict[str, pd.DataFrame | list[str]]:
    """Both scenarios' averaged table, summaries and evaluated.jsonl lines for one file."""
    raw, _quarantined = ingest.read_batch(path, None, path.stem)
    kept, _removed, _stats = ingest.preprocess_batch(raw, PreprocessConfig(),
                                                     default_registry())
    clips = ingest.clips_table(kept)
    routing, _results = routing_table(kept, "subset")
    judge = make_judge(JudgeConfig(name="heuristic"))
    rows = asyncio.run(run_judge(judge, ingest.clip_tasks(clips, kept)))
    one = pd.DataFrame([r.model_dump() for r in rows])
    out: dict[str, pd.DataFrame | list[str]] = {}
    averaged = average_judgments({"heuristic": one})
    summaries = summarize_trajectories(kept, clips, averaged, [MODEL], routing)
    out |= {"one/averaged": averaged, "one/summaries": summaries,
            "one/evaluated": _evaluated_lines(summaries)}
    if len(one):
        first = one.copy()
        never = first.index % 11 == 0  # failed with the others on every 77th row
        first.loc[never, ["status", "scores", "error"]] = ["failed", "{}", "timeout"]
        judges = {"heuristic": first, "b": _derived(one, 0.9, 7, 3, "b"),
                  "c": _derived(one, 0.7, 7, 5, "c")}
    else:
        judges = {"heuristic": one}
    averaged = average_judgments({k: _parquet(v) for k, v in judges.items()}, 0.1)
    summaries = summarize_trajectories(_parquet(kept), _parquet(clips), _parquet(averaged),
                                       [MODEL, "b_b", "c_c"], _parquet(routing))
    out |= {"three/averaged": averaged, "three/summaries": summaries,
            "three/evaluated": _evaluated_lines(summaries)}
    return out


def arrow_types(table: pd.DataFrame) -> str:
    """The Arrow type of each column as the IO manager's Parquet stores it (``str`` columns
    are ``large_string`` whichever way pandas built them; this says so)."""
    schema = pa.Schema.from_pandas(table, preserve_index=False)
    return ";".join(f"{field.name}:{field.type}" for field in schema)


def scoring_digests(path: Path) -> dict[str, str]:
    def digest(value: pd.DataFrame | list[str]) -> str:
        if isinstance(value, pd.DataFrame):
            types = hashlib.sha256(arrow_types(value).encode()).hexdigest()[:8]
            return f"{digest_table(value)}/{types}"
        text = "\n".join(value)
        return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:16]
    return {name: digest(value) for name, value in scoring_tables(path).items()}


def inputs(corpora: Path | None) -> dict[str, Path]:
    """The sample drops and the chosen corpora files, keyed by a stable name."""
    found = {f"data/{p.name}": p for p in sorted(SAMPLES.glob("*.jsonl"))}
    if corpora is not None and corpora.is_dir():
        found |= {f"corpora/{name}": corpora / name for name in CORPORA_FILES
                  if (corpora / name).is_file()}
    return found


def main() -> None:
    corpora = Path(sys.argv[1]) if len(sys.argv) > 1 else None
    digests = {name: scoring_digests(path) for name, path in inputs(corpora).items()}
    EXPECTED.write_text(json.dumps(digests, indent=1, sort_keys=True) + "\n", "utf-8")
    print(f"{len(digests)} inputs -> {EXPECTED}")


if __name__ == "__main__":
    main()
