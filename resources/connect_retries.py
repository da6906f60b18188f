"""How long a run's Spark Connect client waits for a managed long-lived Spark that stopped
answering. Imported only where a session is opened on one (it loads Connect's client).

Connect's client retries a call while its server is unavailable for at least 10 minutes
(its `DefaultPolicy`), which suits a server being restarted. A managed server whose
process is gone will not come back by waiting, so the call fails at once: the step's
retry policy (`assets.run_policy.TRANSIENT_RETRIES`) then runs it again on a session
opened on a server started again (`SparkResource.session`)."""

from __future__ import annotations

from pyspark.sql.connect.client.retries import DefaultPolicy

from resources.spark_server import alive


class WhileServerLives(DefaultPolicy):
    """Connect's default retries, as long as the server's process (`pid`) lives."""

    def __init__(self, pid: int) -> None:
        super().__init__()
        self.pid = pid

    def can_retry(self, e: BaseException) -> bool:
        return super().can_retry(e) and alive(self.pid)
