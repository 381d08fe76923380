"""forqapp's connector for PySpark: the ``forq`` data source.

    from forqapp.spark import register
    register(spark)
    df.write.format("forq").options(url=..., apiKey=..., queue="emails").mode("append").save()
    spark.read.format("forq").options(url=..., apiKey=..., queue="emails-dlq").load()
    spark.readStream.format("forq").options(url=..., apiKey=..., queue="emails").load()

Needs ``forqapp[spark]`` (``pyspark>=4.2,<5``, ``pyarrow``). Imports no Django: executors only
need this package and network access to the forqapp API.
"""

from __future__ import annotations

from .options import ForqOptionError, ForqOptions

__all__ = ["register", "ForqOptions", "ForqOptionError", "ForqDataSource"]


def register(spark) -> None:
    """Register the ``forq`` format on ``spark`` (a SparkSession)."""
    from .source import ForqDataSource

    spark.dataSource.register(ForqDataSource)


def __getattr__(name: str):
    if name == "ForqDataSource":
        from .source import ForqDataSource

        return ForqDataSource
    raise AttributeError(name)
