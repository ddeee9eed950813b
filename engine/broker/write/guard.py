"""The write guard: every writer asks it before it plans or changes anything (issue 30).

A writer that cannot write the store's mode exactly as the broker does (engine.broker.mode.StoreMode.write_refusal)
refuses in one line naming the mode, exit 2, nothing changed; a dry run refuses the same way, since its plan would
describe changes rmqtool must not make.
"""
from __future__ import annotations

from engine.broker.config.brokerconf import BrokerConfig
from engine.broker.mode import StoreMode, detect_mode
from engine.errors import ModeRefusedError


def require_writable(cfg: BrokerConfig, writer: str) -> StoreMode:
    """The store's mode, or ModeRefusedError when `writer` (put, recover, clean, repair config ..., spark-reindex
    --replace, tiered dispatch, tiered reindex) cannot write it as the broker does."""
    mode = detect_mode(cfg)
    why = mode.write_refusal(writer)
    if why:
        raise ModeRefusedError(why)
    return mode
