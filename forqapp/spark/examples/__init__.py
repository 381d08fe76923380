"""Example pipelines on the ``forq`` data source: ``python -m forqapp.spark.examples.dlq_report``
and ``python -m forqapp.spark.examples.bulk_load``."""
