"""A local SparkSession with the ``forq`` format registered, for the example commands."""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Callable

from forqapp.spark import register


def session(app_name: str, master: str):
    """(spark, owned): ``owned`` is False when a session was already active (then the caller
    must not stop it)."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

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


# The forq errors' own lines inside what Spark raises (a Python traceback wrapped in JVM ones).
_REASON = re.compile(r"\b(?:ForqOptionError|ForqClientError|ValueError|TypeError): ([^\n]+)")


def run(main: Callable[[], int]) -> int:
    """An example's ``main()``, with an error — a wrong key, a refused message, a bad option — said in
    one line on stderr (exit code 1) instead of Spark's pages of JVM and Python traceback;
    ``FORQ_SPARK_TRACEBACK=1`` shows them."""
    try:
        return main()
    except Exception as exc:  # noqa: BLE001 - any failure of the job, said in one line
        if os.environ.get("FORQ_SPARK_TRACEBACK"):
            raise
        print(f"error: {reason(exc)} (FORQ_SPARK_TRACEBACK=1 for the whole traceback)", file=sys.stderr)
        return 1


def reason(exc: BaseException) -> str:
    """The innermost forq (or value) error named in ``exc``'s text, else its first line."""
    text = str(exc)
    found = _REASON.findall(text)
    if found:
        return found[-1].strip()
    lines = [line for line in text.splitlines() if line.strip()]
    return lines[0].strip() if lines else type(exc).__name__
