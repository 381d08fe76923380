"""Example pipelines on the ``forq`` data source: ``python -m forqapp.spark.examples.dlq_report``,
``python -m forqapp.spark.examples.bulk_load`` and ``python -m forqapp.spark.examples.file_drop``."""
