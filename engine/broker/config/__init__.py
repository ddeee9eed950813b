"""The broker's configuration and bookkeeping files:

  brokerconf  broker.conf's store keys with RocketMQ's defaults (BrokerConfig, load_config)
  jsonfiles   config/*.json (consumer offsets, topics, delay offsets, subscription groups) with the .bak fallback
  checkpoint  the checkpoint file (format §6)
  lock        the store lock (the broker's `lock` file) and the abort marker (format §7.1)
  consumers   consumer progress and the delay-level queues, from config/*.json and the consume queues
"""
