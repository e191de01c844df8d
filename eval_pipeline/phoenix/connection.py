"""A Phoenix client from configuration, and errors that read as one line.

The key only ever goes into the client's ``Authorization`` header: every message built here
is redacted of it, since httpx errors may quote a URL or a header back.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, TypeVar

import httpx
from pydantic import BaseModel, Field

from eval_pipeline.judges.errors import redact

if TYPE_CHECKING:
    from phoenix.client import Client

T = TypeVar("T")

DEFAULT_PROJECT = "default"


class PhoenixError(RuntimeError):
    """A Phoenix request that failed; its message is one line, with no secret in it."""


class PhoenixUnreachable(PhoenixError):
    """The server did not answer (refused, timed out, name unknown)."""


class PhoenixConnection(BaseModel):
    """Where the Phoenix server is: what a resource or the CLI hands the domain code."""

    base_url: str
    api_key: str | None = Field(default=None, repr=False)
    project: str = DEFAULT_PROJECT
    timeout_s: float = 30.0

    def client(self) -> Client:
        """The light client (``arize-phoenix-client``); imported here, so only a run that
        talks to Phoenix pays for the import."""
        from phoenix.client import Client

        return Client(base_url=self.base_url, api_key=self.api_key or None)

    def describe(self) -> str:
        return f"Phoenix at {self.base_url} (project {self.project!r})"

    @contextmanager
    def errors(self, doing: str) -> Iterator[None]:
        """Turn the client's exceptions into :class:`PhoenixError` lines naming the server."""
        try:
            yield
        except (httpx.ConnectError, httpx.ConnectTimeout, httpx.ReadTimeout,
                httpx.RemoteProtocolError, httpx.UnsupportedProtocol) as exc:
            raise PhoenixUnreachable(self._line(
                f"{self.describe()} is unreachable while {doing}: {type(exc).__name__}: "
                f"{exc}")) from None
        except httpx.HTTPStatusError as exc:
            body = exc.response.text[:300]
            raise PhoenixError(self._line(
                f"{self.describe()} refused {doing}: HTTP {exc.response.status_code}: "
                f"{body}")) from None
        except httpx.HTTPError as exc:
            raise PhoenixError(self._line(
                f"{self.describe()} failed while {doing}: {type(exc).__name__}: {exc}")
            ) from None

    def call(self, doing: str, request: Callable[[], T]) -> T:
        with self.errors(doing):
            return request()

    def _line(self, text: str) -> str:
        return " ".join(redact(text, (self.api_key,)).split())
