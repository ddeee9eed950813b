"""The commit log (format §2, §3):

  message      the record codec: MessageRecord, check_message (one record), encode_record, properties, message ids
  compression  compressed bodies (ZLIB, ZSTD, LZ4) decoded as a consumer decodes them
  segments     SegmentQueue: fixed-size files named by their start offset (MappedFileQueue), also the consume queue's
  records      the one bulk decoder: a segment's records as numpy columns (decode_segment)
  log          CommitLog: append, find the end of data, the one segment walk; open_commitlog (the segment size rule)
  logrun       the log read in runs of records (scan_runs, lookup_runs): the bulk read path of dump-commitlog and get
  startup      what a broker's start-up settles: the recovery's start segment and its scan
"""
