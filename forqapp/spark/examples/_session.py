"""A local SparkSession with the ``forq`` format registered, for the example commands."""

from __future__ import annotations

import os
import sys


def session(app_name: str, master: str):
    """(spark, owned): ``owned`` is False when a session was already active (then the caller
    must not stop it)."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    from forqapp.spark import register

    owned = SparkSession.getActiveSession() is None
    spark = (SparkSession.builder.master(master).appName(app_name)
             .config("spark.ui.enabled", "false").config("spark.sql.session.timeZone", "UTC")
             .getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    register(spark)
    return spark, owned


def add_connection_arguments(parser) -> None:
    parser.add_argument("--url", required=True, help="forqapp API base URL, e.g. http://localhost:8080")
    parser.add_argument("--api-key", default=os.environ.get("FORQ_AUTH_SECRET"),
                        help="the API key (default: $FORQ_AUTH_SECRET)")
    parser.add_argument("--queue", required=True)
    parser.add_argument("--master", default=os.environ.get("SPARK_MASTER", "local[*]"),
                        help="Spark master (default: $SPARK_MASTER or local[*])")
