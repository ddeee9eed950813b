"""The consume queue (format §4):

  queue    ConsumeQueue: 20-byte units per topic and queue, the unit layout and its special values
  offsets  a queue's min offset as the broker settles it (queue_min_offset, getMinOffsetInQueue)
"""
