"""The local Spark workers' daemon (engine.exec.sparkdaemon): pyspark imported compiled from the installation
that is SPARK_HOME, not from Spark's source zip; anything else leaves the workers' path as Spark made it."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

from engine.exec.sparkdaemon import prefer_installed_pyspark

pyspark = pytest.importorskip("pyspark")
INSTALLED = Path(pyspark.__file__).resolve().parent  # pip's pyspark: SPARK_HOME of a local job
SITE = str(INSTALLED.parent)
ZIPS = [str(INSTALLED / "python" / "lib" / "py4j-0.10.9.9-src.zip"), str(INSTALLED / "python" / "lib" / "pyspark.zip")]


def test_zips_move_behind_the_installed_pyspark_that_is_spark_home():
    path = ZIPS + ["/somewhere", SITE]
    assert prefer_installed_pyspark(path, str(INSTALLED)) == ["/somewhere", SITE] + ZIPS


def test_the_path_is_left_alone_otherwise(tmp_path):
    path = ZIPS + ["/somewhere", SITE]
    assert prefer_installed_pyspark(path, str(tmp_path)) == path  # another Spark: its zips match its JVM
    assert prefer_installed_pyspark(path, None) == path
    assert prefer_installed_pyspark(ZIPS + ["/somewhere"], str(INSTALLED)) == ZIPS + ["/somewhere"]  # none installed
    assert prefer_installed_pyspark(["/somewhere", SITE], str(INSTALLED)) == ["/somewhere", SITE]  # no zips


@pytest.mark.slow
def test_local_workers_run_the_compiled_installation(spark):  # noqa: F811
    from engine.exec.runners import SparkRunner

    runner = SparkRunner("local[2]")  # the shared context, started by SparkRunner
    assert runner.sc.getConf().get("spark.python.daemon.module") == "engine.exec.sparkdaemon"

    def where(_):
        import pyspark as p
        import pyspark.worker as w
        return p.__file__, w.__file__

    got = runner.sc.parallelize(range(2), 2).map(where).collect()
    for pkg, worker in got:  # without the daemon module: .../python/lib/pyspark.zip/pyspark/__init__.py
        assert "pyspark.zip" not in pkg and "pyspark.zip" not in worker
        assert Path(pkg).resolve().parent == INSTALLED and os.path.exists(pkg)
