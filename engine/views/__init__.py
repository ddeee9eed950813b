"""Stored records as text, the rendering that must be fast (the codecs stay in engine.broker):

  recordjson  one record straight from its bytes: its NDJSON line (json_line), its table row, the field encoders
  runjson     a run of records at once: the same NDJSON bytes from one line template per group of records
  times       store times as text (local_time: the one form)
"""
