"""What both SDK adapters share: Retry-After parsing and tokenizer-free token estimates."""

from __future__ import annotations

import email.utils
import time
from collections.abc import Mapping


def retry_after_seconds(headers: Mapping[str, str] | None) -> float | None:
    """Seconds the server asked us to wait (retry-after-ms, retry-after seconds or date)."""
    if not headers:
        return None
    headers = {k.lower(): v for k, v in headers.items()}
    for header, divisor in (("retry-after-ms", 1000.0), ("retry-after", 1.0)):
        value = headers.get(header)
        if value is None:
            continue
        try:
            return max(float(value) / divisor, 0.0)
        except ValueError:
            parsed = email.utils.parsedate_tz(value)
            if parsed is not None:
                return max(float(email.utils.mktime_tz(parsed) - time.time()), 0.0)
    return None


def estimate_tokens(*texts: str) -> int:
    """A tokenizer-free estimate (about 4 characters a token) for limits and dry runs."""
    return max(1, sum(len(t) for t in texts) // 4)
