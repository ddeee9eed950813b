"""rmqtool's storage engine: RocketMQ store files read and written byte for byte as the broker does.

Nothing is imported here, so that each command imports only what it needs (docs/architecture.md has the floors).
The entry points the command line calls, one per command or concern:

  the store              engine.broker.store.MessageStore (put, get, walk), engine.broker.store.query_store,
                         engine.broker.config.brokerconf.load_config, engine.broker.write.batch.MessageBatch
                         (messages to put), engine.broker.write.jsonl (put --from-jsonl), engine.broker.config.lock
  reading the log        engine.broker.commitlog.logrun.scan_runs / lookup_runs, engine.views.runjson.run_json_text,
                         engine.views.recordjson.run_table_rows (dump-commitlog, get), engine.broker.commitlog.dump
                         (dump-commitlog's filters), engine.broker.read.read_by_queue_offset / find_by_msg_id (get by
                         queue offset, by offset message id or UNIQ_KEY)
  store geometry         engine.broker.index.geometry.resolve_index_geometry (index slots and items from the files)
  query by key           engine.broker.index.keyquery (broker index), engine.tiered.index.query_tiered_key (tiered)
  index files            engine.broker.index.inspect.inspect_index_files, engine.tiered.index.inspect_files /
                         compact_file
  operations             engine.ops.recovery.recover, engine.ops.clean.clean, engine.broker.consumequeue.view.queue_status /
                         dump_cq, engine.broker.consumequeue.timerange.scan_time_range, engine.broker.config.consumers.consumer_progress /
                         delay_status
  jobs                   engine.jobs.broker_index.spark_reindex, engine.jobs.tiered_index.tiered_reindex
  tiered flat store      engine.tiered.flat.store.open_flat_store, engine.tiered.flat.answers (queue_rows,
                         segment_rows, get_messages, offsets_by_time, cq_rows), engine.tiered.flat.verify.verify,
                         engine.tiered.flat.dispatch.dispatch, engine.tiered.flat.retention.plan_clean /
                         apply_clean, engine.tiered.flat.rebuild.rebuild_metadata

Every error meant for the user is an engine.errors.StoreError (one line, with an exit code).
"""
