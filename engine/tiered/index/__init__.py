"""RocketMQ 5 tiered-storage index files (format §9), by concern:

  format      constants, header/slot/item codecs and numpy dtypes, sizes, the tiered key hash, errors
  geometry    detect_tiered; layout and geometry of a file from its header, slot table and size
  file        IndexStoreFile: create, open, put_key, close (and the byte accessors the modules below read)
  chains      whole-file chain analysis with numpy (list ranking)
  compaction  compactToNewFile: the uploaded (or mapped) compacted form
  queries     queryAsync on one file (unsealed chain walk / compacted two reads), CountingReader
  inspection  walk_slot, slot_range, the walk of a TOPIC#KEY, stats
  checks      verify: the structural check
  service     the directory query (IndexStoreService), tiered metadata, flat commit-log verifier, local locator
  operations  inspect_files, compact_file, inspect_tier, verify_index/verify_tier: what inspect-index, compact-index
              and verify ask
  keyquery    query_tiered_key: what the old query-key --tiered-dir asks
  flatfile    the INDEX flat file (rmq_sys_INDEX/0): uploaded segments from the metadata, their checks
  table       IndexStoreService's table (local and uploaded files), its geometry and queryAsync
  fetcher     TierIndex: queryMessageAsync over a tier, the checked view, --from-jsonl answers

The names below are the package's public API.
"""
from engine.tiered.index.fetcher import KeyAnswer, KeyQuestion, TierIndex, open_tier_index
from engine.tiered.index.file import IndexStoreFile, open_tiered
from engine.tiered.index.format import (BEGIN_MAGIC_CODE, COMPACT_INDEX_ITEM_SIZE, COMPACT_ITEM_DTYPE,
                                        DEFAULT_HASH_SLOT_NUM, DEFAULT_INDEX_NUM, END_MAGIC_CODE, HASH_SLOT_SIZE,
                                        HEADER_SIZE, INDEX_ITEM_SIZE, ITEM_DTYPE, MAX_COMPACT_READ_ITEMS,
                                        MAX_QUERY_COUNT, TieredIndexError, TieredQueryError, compacted_file_size,
                                        tiered_key_hash, tiered_slot, unsealed_file_size)
from engine.tiered.index.geometry import detect_tiered
from engine.tiered.index.inspection import SlotWalk
from engine.tiered.index.keyquery import TieredKeyAnswer, TieredKeyQuery, query_tiered_key
from engine.tiered.index.operations import FileInspection, compact_file, inspect_files
from engine.tiered.index.queries import CountingReader
from engine.tiered.index.service import TieredQueryResult, list_tiered_index_files, query_tiered_dir

__all__ = [
    "BEGIN_MAGIC_CODE", "COMPACT_INDEX_ITEM_SIZE", "COMPACT_ITEM_DTYPE", "DEFAULT_HASH_SLOT_NUM",
    "DEFAULT_INDEX_NUM", "END_MAGIC_CODE", "HASH_SLOT_SIZE", "HEADER_SIZE", "INDEX_ITEM_SIZE", "ITEM_DTYPE",
    "MAX_COMPACT_READ_ITEMS", "MAX_QUERY_COUNT", "TieredIndexError", "TieredQueryError", "compacted_file_size",
    "tiered_key_hash", "tiered_slot", "unsealed_file_size", "detect_tiered", "IndexStoreFile", "open_tiered",
    "CountingReader", "SlotWalk", "FileInspection", "inspect_files", "compact_file", "TieredQueryResult",
    "list_tiered_index_files", "query_tiered_dir", "TieredKeyQuery", "TieredKeyAnswer", "query_tiered_key",
    "KeyAnswer", "KeyQuestion", "TierIndex", "open_tier_index",
]
