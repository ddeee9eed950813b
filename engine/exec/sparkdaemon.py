"""The Python daemon of a local Spark job's workers (spark.python.daemon.module): pyspark.daemon, with pyspark
imported from the interpreter's own installation instead of SPARK_HOME/python/lib/pyspark.zip.

Spark puts pyspark.zip and py4j's source zip first on the workers' PYTHONPATH. That zip holds sources only, so
every daemon and every worker compiles pyspark's modules again as it starts: about 1 s of CPU here before the
first task of a job (PythonRunner's "boot" time), against 0.3 s for the same imports from an installation
with compiled files. For a local master, SPARK_HOME is the pyspark package the driver imported (pip's
pyspark), so this process imports that same package, compiled, when it is there: the zips move to the end of
sys.path, where they still serve anything the installation lacks. Anything else (another SPARK_HOME, no
installed pyspark) leaves sys.path as Spark made it. The workers fork from this process and inherit it.
"""
from __future__ import annotations

import os
import sys


def _spark_zips(path: list[str]) -> list[str]:
    return [p for p in path if os.path.basename(p) == "pyspark.zip"
            or (os.path.basename(p).startswith("py4j-") and p.endswith("-src.zip"))]


def prefer_installed_pyspark(path: list[str], spark_home: str | None) -> list[str]:
    """sys.path with Spark's zips moved last when the installed pyspark is SPARK_HOME's own; else unchanged."""
    import importlib.machinery

    zips = _spark_zips(path)
    if not zips or not spark_home:
        return path
    rest = [p for p in path if p not in zips]
    spec = importlib.machinery.PathFinder.find_spec("pyspark", rest)
    py4j = importlib.machinery.PathFinder.find_spec("py4j", rest)
    if spec is None or py4j is None or not spec.submodule_search_locations:
        return path
    installed = os.path.realpath(list(spec.submodule_search_locations)[0])
    if installed != os.path.realpath(spark_home):
        return path  # another Spark's pyspark: the zips match the JVM, the installation may not
    return rest + zips


def main() -> None:
    sys.path[:] = prefer_installed_pyspark(sys.path, os.environ.get("SPARK_HOME"))
    from pyspark import daemon

    daemon.manager()


if __name__ == "__main__":
    main()
