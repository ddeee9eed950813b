"""Jobs over a whole store: index files rebuilt from the commit log (`rmqtool spark-reindex`). They run on the
runners of engine.exec (inline or Spark), scan engine.exec.ranges, and raise ReindexError for what their own work
finds (a runner's failure is engine.exec.runners.RunnerError).

framework.py      one job: input and output checks, store lock, abort check, staging, publish, result
publish.py        publishing by renames, the rmqtool-index.json marker, repair of interrupted runs
broker_index.py   the broker's index files (scan, build, job: spark_reindex); broker_plan.py its plan
tiered_index.py   RocketMQ 5 compacted tiered index files (scan, build, job: tiered_reindex); tiered_plan.py

Entry points: engine.jobs.broker_index.spark_reindex and engine.jobs.tiered_index.tiered_reindex. Nothing is
imported here, so that `import engine.jobs.framework` (the CLI's) stays free of numpy and pyspark.
"""
