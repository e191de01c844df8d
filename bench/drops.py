"""Generated drops of XML-tag trajectories shaped like the real corpora, for the benches.

Sizes follow ``dataeva`` and ``agent_data_platform``: nine records in ten are 5-30 kB, one
in ten 100-300 kB (long search results and code output). Records carry the quirks the
real logs have: an unclosed ``<answer>`` (often), an unclosed ``<think>`` that the tag
repair must close and re-cut (sometimes), consecutive identical calls, calls over the beta
threshold, Chinese text and URLs in results, and a few unreadable lines to quarantine.
Generated into a temporary folder by the bench; never committed.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

_WORDS = [
    "the", "agent", "search", "result", "code", "python", "value", "table", "answer",
    "query", "source", "page", "link", "city", "state", "recorded", "vocals", "theme", "song",
    "studio", "mixed", "mastered", "release", "album", "function", "error", "output", "print",
    "import", "numpy", "pandas", "compute", "total", "mean", "year", "population",
    "浏览器", "操作", "完成", "原始", "结果", "搜索", "链接", "摘要", "找到", "相关",
]
_TOOLS = [
    ("microsandbox", "microsandbox_execute", "code"),
    ("browser_use", "browser_search_google", "query"),
    ("deepsearch", "research", "question"),
    ("search_tool", "search_file_content", "pattern"),
    ("tavily", "tavily_search", "query"),
]


class _Text:
    """Random prose cut from one pre-built pool: fast enough for hundreds of MB."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        words = rng.choices(_WORDS, k=400_000)
        for i in range(0, len(words), 37):
            words[i] = f"https://example.org/{words[i]}/{i}"
        self.pool = " ".join(words)

    def __call__(self, n: int) -> str:
        start = self.rng.randrange(0, len(self.pool) - n - 1)
        return self.pool[start:start + n]


def _record(rng: random.Random, text: _Text, index: int, size: int) -> dict[str, object]:
    parts: list[str] = []
    n_calls = rng.choice([1, 2, 3, 4, 5, 6, 8, 10, 12]) if rng.random() > 0.03 else 18
    result_len = max(200, size // n_calls - 400)
    previous = None
    for call in range(n_calls):
        tag, action, key = rng.choice(_TOOLS)
        if previous is not None and rng.random() < 0.03:
            tag, action, key, body = previous  # a stuck repeat
        else:
            body = json.dumps({key: text(rng.randint(20, 120))}, ensure_ascii=False)
        previous = (tag, action, key, body)
        think = text(rng.randint(80, 600))
        closer = "" if rng.random() < 0.02 and call else "</think>"
        parts.append(f"<think>\n{think}\n{closer}\n<{tag}>\n  <{action}>{body}</{action}>\n"
                     f"</{tag}>\n<execute_tools />\n<result>{text(result_len)}</result>\n")
    answer = f"<answer>\\boxed{{{text(30)}}}"
    parts.append(answer if rng.random() < 0.4 else answer + "</answer>")
    return {
        "timestamp": "2025-07-12T19:37:38.723536",
        "task_id": f"gen_{index}",
        "task_description": text(rng.randint(60, 300)),
        "duration": round(rng.uniform(5, 300), 3),
        "success": rng.random() < 0.7,
        "final_result": f"\\boxed{{{text(20)}}}",
        "raw_response": "".join(parts),
    }


def write_drop(path: Path, megabytes: float, seed: int = 12) -> int:
    """Write a JSONL drop of about ``megabytes`` MB; returns the number of lines."""
    rng = random.Random(seed)
    text = _Text(rng)
    target = int(megabytes * 1_000_000)
    written = lines = 0
    with path.open("w", encoding="utf-8") as fh:
        while written < target:
            if rng.random() < 0.004:
                line = '{"task_id": "cut", "raw_response": "<think>never closed'
            else:
                size = (rng.randint(100_000, 300_000) if rng.random() < 0.1
                        else rng.randint(5_000, 30_000))
                line = json.dumps(_record(rng, text, lines, size), ensure_ascii=False)
            fh.write(line + "\n")
            written += len(line.encode("utf-8")) + 1
            lines += 1
    return lines


def corpus_records(corpora: Path) -> list[str]:
    """The XML-tag records of the corpora (agent-data-platform, DataEva), as JSON lines."""
    files = [*sorted((corpora / "agent_data_platform").glob("*.jsonl")),
             corpora / "dataeva" / "demo01.jsonl", corpora / "dataeva" / "demo02.jsonl"]
    lines: list[str] = []
    for path in files:
        if path.exists():
            lines += [line for line in path.read_text("utf-8").splitlines()
                      if '"raw_response"' in line]
    return lines


def write_corpus_drop(path: Path, megabytes: float, corpora: Path, seed: int = 12) -> int:
    """A drop of about ``megabytes`` MB cut from the corpora's XML records with new task ids.

    The records keep their real sizes and quirks (mostly 5-30 kB, some 100-300 kB); each copy
    gets a fresh ``task_id`` so duplicate detection sees distinct tasks.
    """
    rng = random.Random(seed)
    records = corpus_records(corpora)
    if not records:
        return write_drop(path, megabytes, seed)
    target = int(megabytes * 1_000_000)
    written = lines = 0
    with path.open("w", encoding="utf-8") as fh:
        while written < target:
            value = json.loads(rng.choice(records))
            value["task_id"] = f"copy{lines}_{value.get('task_id', '')}"
            line = json.dumps(value, ensure_ascii=False)
            fh.write(line + "\n")
            written += len(line.encode("utf-8")) + 1
            lines += 1
    return lines
