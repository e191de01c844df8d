"""Per-model prices, USD per million tokens, so every row and run carries its cost.

Defaults are list prices for standard (non-batch, uncached-input) usage as published by the
providers in 2025; prices move, so the judges file can override them per judge
(``input_price_per_mtok`` / ``output_price_per_mtok``). A model with no known price is
reported as unpriced rather than free, and a budget cannot be enforced on it.
"""

from __future__ import annotations

from pydantic import BaseModel

from eval_pipeline.judges.config import JudgeConfig


class Price(BaseModel):
    input_per_mtok: float
    output_per_mtok: float

    def cost(self, tokens_in: int, tokens_out: int) -> float:
        return (tokens_in * self.input_per_mtok + tokens_out * self.output_per_mtok) / 1e6


# Longest matching prefix wins, so "gpt-4.1-mini-2025-04-14" finds "gpt-4.1-mini".
DEFAULT_PRICES: dict[str, tuple[float, float]] = {
    # OpenAI
    "gpt-5": (1.25, 10.0),
    "gpt-5-mini": (0.25, 2.0),
    "gpt-5-nano": (0.05, 0.40),
    "gpt-4.1": (2.0, 8.0),
    "gpt-4.1-mini": (0.40, 1.60),
    "gpt-4.1-nano": (0.10, 0.40),
    "gpt-4o": (2.50, 10.0),
    "gpt-4o-mini": (0.15, 0.60),
    "o3": (2.0, 8.0),
    "o3-mini": (1.10, 4.40),
    "o4-mini": (1.10, 4.40),
    # Anthropic
    "claude-opus-4-5": (5.0, 25.0),
    "claude-opus-4": (15.0, 75.0),
    "claude-sonnet-4": (3.0, 15.0),
    "claude-3-7-sonnet": (3.0, 15.0),
    "claude-3-5-sonnet": (3.0, 15.0),
    "claude-haiku-4-5": (1.0, 5.0),
    "claude-3-5-haiku": (0.80, 4.0),
    # DeepSeek (V3.2 pricing for both aliases), Moonshot, Gemini
    "deepseek-chat": (0.28, 0.42),
    "deepseek-reasoner": (0.28, 0.42),
    "kimi-k2": (0.60, 2.50),
    "gemini-2.5-pro": (1.25, 10.0),
    "gemini-2.5-flash": (0.30, 2.50),
    "gemini-2.5-flash-lite": (0.10, 0.40),
    "gemini-2.0-flash": (0.10, 0.40),
}

FREE = Price(input_per_mtok=0.0, output_per_mtok=0.0)


def default_price(model: str) -> Price | None:
    name = model.lower().rsplit("/", 1)[-1]
    matches = [prefix for prefix in DEFAULT_PRICES if name.startswith(prefix)]
    if not matches:
        return None
    return Price(input_per_mtok=DEFAULT_PRICES[max(matches, key=len)][0],
                 output_per_mtok=DEFAULT_PRICES[max(matches, key=len)][1])


def price_for(config: JudgeConfig, model: str | None = None, local: bool = False
              ) -> Price | None:
    """The judge's price: explicit config, else the model's default, else free if local."""
    base = FREE if local or config.provider == "heuristic" else default_price(
        model or config.model)
    if config.input_price_per_mtok is None and config.output_price_per_mtok is None:
        return base
    return Price(
        input_per_mtok=config.input_price_per_mtok
        if config.input_price_per_mtok is not None else (base.input_per_mtok if base else 0.0),
        output_per_mtok=config.output_price_per_mtok
        if config.output_price_per_mtok is not None else (base.output_per_mtok if base else 0.0),
    )


# Batch APIs (OpenAI Batch, Anthropic Message Batches): half the list price above, input and
# output alike, as both providers publish (2025). Longest matching prefix wins, as above.
DEFAULT_BATCH_PRICES: dict[str, tuple[float, float]] = {
    # OpenAI Batch API
    "gpt-5": (0.625, 5.0),
    "gpt-5-mini": (0.125, 1.0),
    "gpt-5-nano": (0.025, 0.20),
    "gpt-4.1": (1.0, 4.0),
    "gpt-4.1-mini": (0.20, 0.80),
    "gpt-4.1-nano": (0.05, 0.20),
    "gpt-4o": (1.25, 5.0),
    "gpt-4o-mini": (0.075, 0.30),
    "o3": (1.0, 4.0),
    "o3-mini": (0.55, 2.20),
    "o4-mini": (0.55, 2.20),
    # Anthropic Message Batches
    "claude-opus-4-5": (2.50, 12.50),
    "claude-opus-4": (7.50, 37.50),
    "claude-sonnet-4": (1.50, 7.50),
    "claude-3-7-sonnet": (1.50, 7.50),
    "claude-3-5-sonnet": (1.50, 7.50),
    "claude-haiku-4-5": (0.50, 2.50),
    "claude-3-5-haiku": (0.40, 2.0),
}
# An OpenAI-compatible server's batch discount is its own business: without a known batch
# price its live price stands (never a made-up discount).


def _lookup(table: dict[str, tuple[float, float]], model: str) -> Price | None:
    name = model.lower().rsplit("/", 1)[-1]
    matches = [prefix for prefix in table if name.startswith(prefix)]
    if not matches:
        return None
    best = table[max(matches, key=len)]
    return Price(input_per_mtok=best[0], output_per_mtok=best[1])


def batch_price_for(config: JudgeConfig, model: str | None = None, local: bool = False
                    ) -> Price | None:
    """What the judge pays per token through its provider's batch API.

    Prices set in the judges file are the judge's own (taken as its batch price too: whoever
    pins a price knows what they pay); otherwise the batch table for the model, else the
    live price (a compatible server with no published batch discount).
    """
    live = price_for(config, model, local)
    if local or config.provider == "heuristic":
        return live
    if config.input_price_per_mtok is not None or config.output_price_per_mtok is not None:
        return live
    return _lookup(DEFAULT_BATCH_PRICES, model or config.model) or live
