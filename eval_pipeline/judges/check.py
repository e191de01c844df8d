"""Is each LLM judge's endpoint there, and does it take the key? One cheap request each.

A wrong ``base_url``, a server that is down or a refused key otherwise shows up only when
the first batch reaches the judges: after the ingest work, as a breaker-open failed row for
every judgment. One request before any batch turns that into one line naming the judge and
its base URL (never the key).

The request is a one-token completion (Chat Completions, or Anthropic Messages), not the
SDKs' ``models.list``: every server a judge can use answers the endpoint the judge will call,
while ``/models`` is missing on some compatible servers (a 404 there says nothing about the
judge's endpoint). It costs one input message and one output token.

What fails the check is what would fail every judgment of the run: no connection, no answer
within the judge's ``timeout_s``, or a status the runner treats as fatal (401, 402, 403, 404).
Any other answer (400, 429, 5xx) shows a server that is there and took the key; the run's
own retries and fallbacks deal with the rest.
"""

from __future__ import annotations

import hashlib
import os
import threading
from collections.abc import Mapping, Sequence

import anthropic
import openai

from eval_pipeline.judges.config import JudgeConfig
from eval_pipeline.judges.errors import redact
from eval_pipeline.judges.presets import resolve_endpoint
from eval_pipeline.judges.sdk_judge import FATAL_STATUSES

__all__ = ["JudgeCheckError", "check_judge", "check_judge_once", "check_judges"]

_PROMPT = "Reply with the word OK."
_WHY = {401: "refused the key", 402: "refused the account (payment required)",
        403: "refused the key (permission denied)",
        404: "answered 404 Not Found (check base_url and model)"}


class JudgeCheckError(Exception):
    """A judge whose endpoint cannot be used, in one line naming the judge and its base URL;
    the key is never in it."""


def _describe(status: int, key_env: str | None) -> str:
    why = _WHY.get(status, f"answered HTTP {status}")
    if status in (401, 403) and key_env:
        why += f" from {key_env}"
    return why


def _server_message(exc: openai.APIStatusError | anthropic.APIStatusError) -> str:
    """The server's own words (``error.message`` in both APIs' bodies), else the SDK's."""
    body = exc.body
    error = body.get("error", body) if isinstance(body, dict) else None
    message = error.get("message") if isinstance(error, dict) else None
    return message if isinstance(message, str) and message else exc.message


def check_judge(config: JudgeConfig, api_key: str | None) -> None:
    """One one-token request to the judge's endpoint; :class:`JudgeCheckError` if the run
    could not use it. Heuristic judges have no endpoint and pass."""
    if config.provider == "heuristic":
        return
    endpoint = resolve_endpoint(config)
    url = endpoint.base_url
    secrets = (api_key,)
    try:
        if endpoint.provider == "anthropic":
            # base_url explicit and a key always given, as the judge does, so neither
            # ANTHROPIC_BASE_URL nor ANTHROPIC_API_KEY is picked up behind the config's back.
            with anthropic.Anthropic(api_key=api_key or "no-key-needed", base_url=url,
                                     timeout=config.timeout_s, max_retries=0) as client:
                client.messages.create(model=endpoint.model, max_tokens=1,
                                       messages=[{"role": "user", "content": _PROMPT}])
        else:
            with openai.OpenAI(api_key=api_key or "no-key-needed", base_url=url,
                               timeout=config.timeout_s, max_retries=0) as client:
                client.chat.completions.create(  # type: ignore[call-overload]
                    model=endpoint.model, messages=[{"role": "user", "content": _PROMPT}],
                    **{endpoint.tokens_param: 1})
    except (openai.APITimeoutError, anthropic.APITimeoutError):
        raise JudgeCheckError(f"judge {config.name!r}: no answer from {url} within "
                              f"{config.timeout_s:g} s (timeout_s)") from None
    except (openai.APIConnectionError, anthropic.APIConnectionError) as exc:
        cause = exc.__cause__ or exc
        reason = " ".join(redact(str(cause), secrets).split())[:200]
        raise JudgeCheckError(f"judge {config.name!r}: cannot reach {url}: {reason}") from None
    except (openai.APIStatusError, anthropic.APIStatusError) as exc:
        if exc.status_code not in FATAL_STATUSES:
            return  # the server is there and took the key; the run handles the rest
        detail = " ".join(redact(_server_message(exc), secrets).split())[:200]
        raise JudgeCheckError(
            f"judge {config.name!r}: {url} {_describe(exc.status_code, endpoint.key_env)} "
            f"({detail})") from None


def check_judges(configs: Sequence[JudgeConfig],
                 environ: Mapping[str, str] | None = None) -> None:
    """Check every LLM judge in turn, the key read from its variable; the first failure
    raises. The key variables are assumed set (the CLI checks them first)."""
    env = os.environ if environ is None else environ
    for config in configs:
        variable = config.key_env()
        check_judge(config, env.get(variable) if variable else None)


# Endpoints that passed in this process: a UI run's steps (or several runs in one process)
# set the resource up more than once, and one good answer is enough. Failures are not
# remembered, so a server started after a failed run is seen at the next one.
_PASSED: set[str] = set()
_PASSED_LOCK = threading.Lock()


def _fingerprint(config: JudgeConfig, api_key: str | None) -> str:
    # A digest, so the set holds no copy of the key.
    text = f"{config.model_dump_json()}\x00{api_key or ''}"
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def check_judge_once(config: JudgeConfig, api_key: str | None) -> None:
    """:func:`check_judge`, at most once per process for a configuration and key that
    passed."""
    fingerprint = _fingerprint(config, api_key)
    with _PASSED_LOCK:
        if fingerprint in _PASSED:
            return
    check_judge(config, api_key)
    with _PASSED_LOCK:
        _PASSED.add(fingerprint)
