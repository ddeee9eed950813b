"""The broker's own files, one package per on-disk concept (as RocketMQ has one class per file kind), each owning
its layout constants, codec, fast paths and rules:

  layout        every path and file name of a store (StoreLayout), name validation, directory listings
  commitlog/    the message record codec, the segment queue, the bulk decoder, the commit log and its walk
  consumequeue/ consume-queue units, and the min/max queue offsets as the broker computes them
  index/        the IndexFile format, builder, service, chain walker, statistics, geometry, key rules, key query
  config/       broker.conf, config/*.json (with their .bak), the checkpoint, the lock and abort files
  write/        the put path: messages checked and encoded, JSON Lines input, the writer
  store         MessageStore: put, get, walk and query by key under the lock

Nothing is imported here: each command imports only the modules it needs.
"""
