"""Jobs over a whole store: index files rebuilt from the commit log (`rmqtool spark-reindex`).

framework.py      one job: input and output checks, store lock, abort check, staging, publish, result
ranges.py         segment ranges, the unit of scan work, and the one sequential walk they add up to
publish.py        publishing by renames, the rmqtool-index.json marker, repair of interrupted runs
runners.py        where the work runs: InlineRunner (this process, a worker pool for big logs), SparkRunner
broker_index.py   the broker's index files (scan, build, job: spark_reindex); broker_plan.py its plan
tiered_index.py   RocketMQ 5 compacted tiered index files (scan, build, job: tiered_reindex); tiered_plan.py

Entry points: engine.jobs.broker_index.spark_reindex and engine.jobs.tiered_index.tiered_reindex. Nothing is
imported here, so that `import engine.jobs.framework` (the CLI's) stays free of numpy and pyspark.
"""
