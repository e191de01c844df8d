"""Where our preprocessing departs from the original tool's code, measured (#8.6).

Run: ``.venv/bin/python bench/departures.py [--corpora DIR]``
(default ../shared/corpora or $EVAL_PIPELINE_CORPORA). Reads every XML-tag file of the
corpora (records with ``raw_response``, or the evaluator's ``full_response_with_evaluation``)
and prints the figures quoted in docs/departures.md. Asserts nothing, writes nothing.

The ``original_*`` functions re-state DataEva's ``src/preprocess_agent_data.py``
(``Drip-Data/DataEva`` @ NewEva 29c293c) as a reference: they live here, not in the
product, because the product deliberately does not behave like them.
"""

from __future__ import annotations

import argparse
import json
import os
import re
from collections import defaultdict
from datetime import date
from itertools import pairwise
from pathlib import Path

from eval_pipeline.formats.xml_tags import parse_xml_response, strip_clip_evaluations
from eval_pipeline.models import Step, Trajectory
from eval_pipeline.preprocess import PreprocessConfig, call_identity, preprocess_one
from eval_pipeline.tool_registry import ToolRegistry, default_registry

ROOT = Path(__file__).resolve().parents[1]
CORPORA = Path(os.environ.get("EVAL_PIPELINE_CORPORA", ROOT.parent / "shared" / "corpora"))
XML_FOLDERS = ("dataeva", "agent_data_platform")
ORIGINAL_SERVERS = ("microsandbox", "deepsearch", "browser_use", "search_tool")
BETA = 15


# --- the original's rules, as its code has them -------------------------------------------

def original_tag_content(raw: str) -> dict[str, list[str]]:
    """``extract_xml_tags``: non-overlapping ``<t>..</t>`` pairs, plus self-closing tags."""
    content: dict[str, list[str]] = defaultdict(list)
    for tag, body in re.findall(r"<(\w+)(?:\s[^>]*)?>(.*?)</\1>", raw, re.DOTALL | re.I):
        content[tag.lower()].append(body.strip())
    for tag in re.findall(r"<(\w+)(?:\s[^>]*)?/>", raw, re.I):
        content[tag.lower()].append("")
    return content


def original_tool_call_count(content: dict[str, list[str]]) -> int:
    """``count_tool_calls``: every server block, and every ``<execute_tools />`` again."""
    return sum(len(content.get(s, [])) for s in ORIGINAL_SERVERS) + len(
        content.get("execute_tools", []))


def original_has_duplicates(content: dict[str, list[str]]) -> bool:
    """``detect_duplicate_tool_calls``: the same server body twice, anywhere."""
    for server in ORIGINAL_SERVERS:
        calls = content.get(server, [])
        if len(set(calls)) < len(calls):
            return True
    return False


def blocks_after_unclosed_answer(raw: str, registry: ToolRegistry) -> tuple[int, int]:
    """(tags, tool calls) after the first ``<answer>`` never closed.

    The original's ``validate_xml_format`` adds the missing ``</answer>`` at the end of the
    response, so everything after that opening becomes part of the answer.
    """
    for opening in re.finditer(r"<answer(?:\s[^<>]*)?>", raw, re.I):
        nxt = re.compile(r"<answer(?:\s[^<>]*)?>|</answer\s*>", re.I).search(raw, opening.end())
        if nxt is None or not nxt.group(0).startswith("</"):
            rest = raw[opening.end():]
            names = ("think", "result", "tool_param", "tool_call", "execute_tools",
                     *registry.tool_tags)
            alternation = "|".join(re.escape(n) for n in names)
            tags = re.findall(rf"<({alternation})\b", rest, re.I)
            tools = [t for t in tags if t.lower() in registry.tool_tags or t == "tool_call"]
            return len(tags), len(tools)
    return 0, 0


# --- ours, before #8.6, for the "how many more repeats" figure -----------------------------

def signature_before_8_6(step: Step) -> str:
    """The duplicate key before #8.6: the parser's name and input, wrapper tags included."""
    body = step.tool_input if step.tool_input is not None else step.content
    return f"{step.tool_type}:{step.tool_name}:{' '.join(body.split())}"


def _consecutive(keys: list[str]) -> int:
    return sum(a == b for a, b in pairwise(keys))


def load(corpora: Path) -> list[tuple[str, str]]:
    """(file/line, response text) of every XML-tag record."""
    records = []
    for folder in XML_FOLDERS:
        for path in sorted((corpora / folder).glob("*.jsonl")):
            for n, line in enumerate(path.read_text("utf-8").splitlines(), 1):
                value = json.loads(line) if line.strip() else None
                if not isinstance(value, dict):
                    continue
                raw = value.get("raw_response")
                if raw is None and isinstance(value.get("full_response_with_evaluation"), str):
                    raw, _ = strip_clip_evaluations(value["full_response_with_evaluation"])
                if isinstance(raw, str):
                    records.append((f"{folder}/{path.name}:{n}", raw))
    return records


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--corpora", type=Path, default=CORPORA)
    args = ap.parse_args()
    reg = default_registry()
    records = load(args.corpora)
    config = PreprocessConfig(beta_threshold=BETA)
    orig_counts, our_counts = [], []
    orig_dup = our_anywhere = our_consecutive = before_consecutive = 0
    pairs_now = pairs_before = 0
    answer_records = answer_tags = answer_tools = 0
    newly_found: list[str] = []
    for where, raw in records:
        content = original_tag_content(raw)
        orig_counts.append(original_tool_call_count(content))
        orig_dup += original_has_duplicates(content)
        traj = Trajectory(trajectory_id=where, batch="b", source_file=where, source_line=1,
                          source_format="xml_tags", task_id=where, task_description="",
                          raw_response=raw, steps=parse_xml_response(raw, reg))
        outcome = preprocess_one(traj, config, reg, lambda t: parse_xml_response(t, reg))
        our_counts.append(outcome.tool_call_count)
        calls = [s for s in outcome.trajectory.steps if s.kind == "tool_call"]
        now = [call_identity(s, reg) for s in calls]
        before = [signature_before_8_6(s) for s in calls]
        our_anywhere += len(set(now)) < len(now)
        our_consecutive += bool(outcome.duplicate_calls)
        before_consecutive += _consecutive(before) > 0
        pairs_now += _consecutive(now)
        pairs_before += _consecutive(before)
        if _consecutive(now) > _consecutive(before):
            newly_found.append(where)
        tags, tools = blocks_after_unclosed_answer(raw, reg)
        if tags:
            answer_records += 1
            answer_tags += tags
            answer_tools += tools

    n = len(records)
    print(f"departures.py, {date.today().isoformat()}: {n} XML-tag records from "
          f"{args.corpora} ({', '.join(XML_FOLDERS)})")
    orig_removed = {i for i, c in enumerate(orig_counts) if c > BETA}
    print(f"\n1. beta threshold {BETA}")
    print(f"   original's count (server blocks + <execute_tools />) removes {len(orig_removed)}")
    print(f"   ours (one per tool call)                             removes "
          f"{sum(c > BETA for c in our_counts)}")
    ratios = sorted(o / c for o, c in zip(orig_counts, our_counts, strict=True) if c)
    print(f"   original count / our count, median {ratios[len(ratios) // 2]:.2f} "
          f"(range {ratios[0]:.2f}-{ratios[-1]:.2f}) over {len(ratios)} records with calls")
    print("   our beta  removes  same decision as the original's beta 15")
    for beta in range(5, 16):
        ours = {i for i, c in enumerate(our_counts) if c > beta}
        agree = n - len(ours ^ orig_removed)
        print(f"   {beta:>8}  {len(ours):>7}  {agree}/{n}")
    print("\n2. repeated tool calls (records)")
    print(f"   original (same server body anywhere)          {orig_dup}")
    print(f"   ours, identical call anywhere                 {our_anywhere}")
    print(f"   ours, consecutive identical calls (the rule)  {our_consecutive}")
    print("\n3. blocks after an unclosed <answer> (the original closes it at the end)")
    print(f"   records {answer_records}, tags inside the answer {answer_tags}, "
          f"of which tool calls {answer_tools}")
    print("\n4. stray wrapper tags (#8.6): consecutive repeats, before -> after the fix")
    print(f"   records {before_consecutive} -> {our_consecutive}, "
          f"repeat pairs {pairs_before} -> {pairs_now}")
    for where in newly_found:
        print(f"   newly found: {where}")


if __name__ == "__main__":
    main()
