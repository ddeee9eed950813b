"""rmqtool info: a store at a glance (engine.survey.info), with the tiered store it is configured with."""
from __future__ import annotations


def info(cfg, tier=None, now_ms=None):
    """engine.survey.info.StoreInfo of the store `cfg` names (and of the tier `tier`, a TierSource, describes)."""
    from engine.survey.info import store_info

    return store_info(cfg, now_ms=now_ms, tier=tier)
