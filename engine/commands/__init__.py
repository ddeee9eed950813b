"""The command floor (porcelain, as dulwich's porcelain is for git): one function per rmqtool command, the only
engine entry point a module of rmqtool/commands calls. Each takes what the command's options say (a resolved
BrokerConfig, plain values), does the command's engine work (open the store, decide, read) and returns or yields
plain answers for the command to render; the exit code it decides travels with the answer.

A command module parses its options, makes one call here and renders what comes back; it imports nothing else of
the engine but the views (engine.views), the errors (engine.errors) and the progress types (engine.progress):
tests/project/test_commands_floor.py keeps it so, for every command module.

  get.py        rmqtool get: messages by commit-log offset, message id (offset id or UNIQ_KEY) or queue offset;
                the exit code (2: addresses that do not exist, 3: damage) is decided there
  queues.py     rmqtool queues: consume-queue status (mqadmin topicStatus)
  consumers.py  rmqtool consumers: consumer progress (mqadmin consumerProgress)
  delays.py     rmqtool delays: the delay-level queues
  verify_cq.py  rmqtool verify-cq: the units checked against their records, or files and RocksDB compared
  info.py, prune.py, doctor.py, clean.py   the survey or operation of engine/survey, engine/ops each runs
  recover.py    rmqtool recover: broker.conf's recovery settings applied, the recovery run (or planned)
  put.py        rmqtool put: the one message of the options or the JSON lines, put batch by batch
  query_key.py, dump_commitlog.py, dump_cq.py, print_msg.py, inspect_index.py   the read commands: the
                store opened, the answer read as it is rendered, the exit code (3: damage met)
  spark_reindex.py, demo.py   the broker index job; the sample folder of rmqtool demo
  timer.py, repair.py, tiered.py   a group's subcommands, one function each (tiered: on the tier open_tier
                opens, or its index service, open_index)

Option checks that come before the store is named (a count's bound, options that do not go together) are
functions of the command's module too (check_*), called first, as the commands always checked them.

The floor is the top engine layer: it may import every engine package below it; nothing in the engine imports it.
"""
