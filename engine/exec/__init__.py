"""Where whole-store work runs, below every job that uses it (the index rebuilds, the tier-out):

  workers      the one way per-segment work runs on N worker processes (--workers); WorkerPool, WorkerDiedError
  runners      InlineRunner (this process, a worker pool for big logs) and SparkRunner; RunnerError
  ranges       segment ranges, the unit of a scan, and the one sequential walk they add up to
  jvmcache     the local Spark JVM's class-data archive in the user's cache directory
  sparkdaemon  the Python daemon of a local Spark job's workers

Nothing is imported here: the runners import numpy (the ranges) and pyspark only when work runs.
"""
