"""The long-lived Spark's warm-up (`resources/spark_warmup.py`): at a server's start it only
reports a failure, so a broken warm-up would go unnoticed but for this test."""

from resources.spark_warmup import warm


def test_the_warm_up_runs_every_query_it_warms(spark):
    warm(spark.session())
