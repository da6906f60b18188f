"""Resources: the Spark session, the lakehouse (Delta port), the landing zone."""

from resources.lakehouse import Lakehouse
from resources.landing import LandingZone
from resources.spark import SparkResource

__all__ = ["LandingZone", "Lakehouse", "SparkResource"]
