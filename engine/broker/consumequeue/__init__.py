"""The consume queue (format §4):

  queue    ConsumeQueue: 20-byte units per topic and queue, the unit layout and its special values
  offsets  a queue's min and max offsets as the broker computes them: queue_min_offset (getMinOffsetInQueue),
           cut_point and BrokerView (logical truncation after its start-up)
  view     consume queues as an operator asks about them: QueueView, queue_status, dump_cq, logical_truncation
  timerange  messages of a topic by store time, through the consume queues
  verify   verify-cq: every unit against the commit log
"""
