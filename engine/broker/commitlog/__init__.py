"""The commit log (format §2, §3):

  message      the record codec: MessageRecord, check_message (one record), encode_record, properties, message ids
  compression  compressed bodies (ZLIB, ZSTD, LZ4) decoded as a consumer decodes them
  segments     SegmentQueue: fixed-size files named by their start offset (MappedFileQueue), also the consume queue's
  records      the one bulk decoder: a segment's records as numpy columns (decode_segment)
  log          CommitLog: append, find the end of data, the one segment walk (walk_segments) every reader goes
               through; open_commitlog (the segment size rule)
  logrun       the log read in runs of records (scan_runs, lookup_runs): the bulk read path of dump-commitlog and get
  walk         the checking walk: valid records a window at a time and the gaps between them (recovery, verify)
  dump         dump-commitlog's filters and segment files read on their own
  ranges       a segment cut into byte ranges, the walk of one range, the guess of where its first record starts
  placeholder  the recovery placeholder as a reader meets it
  startup      what a broker's start-up settles: the recovery's start segment and its scan
"""
