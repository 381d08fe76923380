"""forqapp's connector for PySpark: the ``forq`` data source.

    from forqapp.spark import register
    register(spark)
    df.write.format("forq").options(url=..., apiKey=..., queue="emails").mode("append").save()
    spark.read.format("forq").options(url=..., apiKey=..., queue="emails-dlq").load()
    spark.readStream.format("forq").options(url=..., apiKey=..., queue="emails").load()
    stream.writeStream.format("forq").options(url=..., apiKey=..., queue="emails").option(
        "checkpointLocation", cp).start()
    stream.writeStream.outputMode("update").foreachBatch(foreach_batch(url=..., apiKey=...,
        queue="emails", checkpointLocation=cp)).option("checkpointLocation", cp).start()

Needs ``forqapp[spark]`` (``pyspark>=4.2,<5``, ``pyarrow``). Imports no Django: executors only
need this package and network access to the forqapp API.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .options import ForqOptionError, ForqOptions

__all__ = ["register", "foreach_batch", "ForqOptions", "ForqOptionError", "ForqDataSource"]


def register(spark) -> None:
    """Register the ``forq`` format on ``spark`` (a SparkSession)."""
    from .source import ForqDataSource

    spark.dataSource.register(ForqDataSource)


def foreach_batch(**options: Any) -> Callable[[Any, int], None]:
    """A function for ``writeStream.foreachBatch(...)`` that writes each micro-batch into a queue
    exactly once, in any output mode (``update`` too, which Spark refuses for a Python data
    source's ``writeStream.format(...)``). ``options`` are the format's (``url``, ``apiKey``,
    ``queue``, ``batchSize``, ``delivery``) and the streaming query's ``checkpointLocation`` (or a
    ``queryName`` of your choosing): it names the query, so that a batch Spark runs again after a
    restart from the checkpoint publishes nothing. Options are checked here, in the driver."""
    given = {name: str(value) for name, value in options.items()}
    checked = ForqOptions.parse(given)
    if checked.batch_id is not None:
        raise ForqOptionError("foreach_batch sets the option 'batchId' itself (Spark's id of each micro-batch)")
    if checked.exactly_once and checked.sink() is None:
        raise ForqOptionError("foreach_batch with delivery=exactlyOnce needs to know the query: pass its "
                              "checkpointLocation=... (the same as the query's), or a queryName=...")

    def write(df, batch_id: int) -> None:
        register(df.sparkSession)  # (in the driver, once per batch: cheap, and a new session is covered)
        df.write.format("forq").options(**given).option("batchId", str(batch_id)).mode("append").save()

    return write


def __getattr__(name: str):
    if name == "ForqDataSource":
        from .source import ForqDataSource

        return ForqDataSource
    raise AttributeError(name)
