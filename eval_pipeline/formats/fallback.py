"""Files no parser recognises, and files that hold no trajectories at all.

Both still flow through the accounting: every record (or, for a non-JSON file, the file
itself) is quarantined with a reason saying why, so a mis-detected drop is visible in the
quarantine table instead of vanishing. ``format_name`` on ``parse_file`` overrides
detection when the guess is wrong.
"""

from __future__ import annotations

from pathlib import Path
from typing import ClassVar

from eval_pipeline.formats.base import ParseContext, iter_records
from eval_pipeline.models import ParseResult

UNRECOGNIZED = "unrecognized"
NOT_TRAJECTORIES = "not_trajectories"


class _QuarantineAll:
    name: ClassVar[str] = ""
    reason: ClassVar[str] = ""
    message: ClassVar[str] = ""

    def parse(self, path: Path, ctx: ParseContext) -> ParseResult:
        result = ParseResult()
        data = path.read_bytes()
        if not data.lstrip(b"\xef\xbb\xbf \t\r\n").startswith((b"{", b"[")):
            result.quarantined.append(ctx.quarantine(
                1, self.reason, self.message + " (not JSON: the whole file is one record)",
                data[:4000], self.name))
            return result
        for rec in iter_records(data):
            if rec.error:
                result.quarantined.append(ctx.quarantine(
                    rec.line, rec.reason or "unreadable", rec.error, rec.text, self.name))
            else:
                result.quarantined.append(ctx.quarantine(
                    rec.line, self.reason, self.message, rec.text, self.name))
        return result


class UnrecognizedParser(_QuarantineAll):
    """Detection's last resort: nothing is lost, everything is explained."""

    name: ClassVar[str] = UNRECOGNIZED
    reason: ClassVar[str] = "unrecognized_format"
    message: ClassVar[str] = ("no format recognised this file's records; pass format_name "
                              "to parse_file to choose one")

    def sniff(self, path: Path, head: str) -> float:
        return 0.0


class NotTrajectoriesParser(_QuarantineAll):
    """Tool schemas and JSON Schemas that ship next to trajectory data (BFCL function docs,
    DevAI's trajectory schema): reference material, quarantined as ``not_a_trajectory``."""

    name: ClassVar[str] = NOT_TRAJECTORIES
    reason: ClassVar[str] = "not_a_trajectory"
    message: ClassVar[str] = "a tool or JSON schema, not an agent run"

    def sniff(self, path: Path, head: str) -> float:
        h = head.lstrip()
        if '"$schema"' in h or (h.startswith("{") and '"type": "array"' in h[:200]
                                and '"items"' in h[:400]):
            return 0.6
        if (h.startswith('{"name"') and '"parameters"' in h and '"description"' in h
                and '"question"' not in h):
            return 0.5
        return 0.0
