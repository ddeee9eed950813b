"""The RocketMQ 5 tiered flat store (PosixFileSegment + DefaultMetadataStore), by concern (docs/tiered-flat-store.md):

  config          the plugin's configuration keys (TieredConfig, load_tiered_config)
  layout          paths and names under tieredStoreFilePath: md5 prefixes, segment names, listings
  metadata        tieredStoreMetadata.json: the DefaultMetadataStore tables as ConcurrentHashMaps, decode/encode,
                  load with the .bak fallback, persist with the .bak one change behind
  segments        segments as a restarted broker holds them, FlatAppendFile reads, the size rule for appends
  scan            records and units of segment files, segment times from the records
  reader          FlatQueue: min/max offsets, the fetcher, the batch read, offset by time, consume-queue units
  store           open_flat_store: the tier, the cluster and broker, the metadata, the queues the broker loads
  answers         what the read commands answer, as dicts with RocketMQ's field names
  verify          the whole-tier check
  queue_dispatch  tier-out of one queue (pure: the Spark partition function)
  runner          the only module that touches a job runner (inline or Spark)
  dispatch        the tier-out driver (lock, tasks, metadata changes)
  retention       FlatFileStore's retention
  rebuild         rebuild-metadata
"""
