"""The put path (format §2.2, §2.5, §2.6, §7):

  encoding   what every encoding shares: record heads, default hosts, per-process topic/shape/TAGS caches
  batch      MessageBatch: messages checked and encoded as they are added
  jsonbatch  plain JSON messages checked and encoded as a whole list (MessageBatch.extend_json's fast path)
  jsonl      JSON Lines input (the helper process for big files) and the put loop of `rmqtool put`
  writer     the batch writer MessageStore.put_batch runs: encode, make room, write (checked), index, flush
"""
