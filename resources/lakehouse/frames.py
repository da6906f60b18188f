"""Data between Spark and Arrow: a frame written as several partitions' commits (split
once, in the engine's form), and Arrow rows made a Spark DataFrame."""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeGuard

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import DataFrame, SparkSession

    from resources.lakehouse.port import Data


def is_arrow(data: Data) -> TypeGuard[pa.Table | pa.RecordBatchReader]:
    """Whether `data` is Arrow (a table or a stream) rather than a Spark DataFrame."""
    return hasattr(data, "__arrow_c_stream__")


@dataclass(frozen=True)
class StagedParts:
    """`data` (a range's rows) split by the values of `column`: each value's part and its
    row count, without a Spark job per part.

    - Arrow (delta-rs, which collects whatever it writes into this process): the range
      was collected once; a part is a slice of it.
    - A DataFrame (delta-spark, whose writes run on the cluster): a part is a filter of
      the checkpointed frame; the counts came from one aggregate.
    """

    data: pa.Table | DataFrame
    column: str
    counts: dict[Hashable, int] = field(default_factory=dict)

    @property
    def total(self) -> int:
        """How many rows all the parts hold."""
        return self.data.num_rows if is_arrow(self.data) else sum(self.counts.values())

    def part(self, value: Any) -> tuple[Data, int]:
        """The rows whose `column` equals `value` (none: an empty part of the same
        schema), and how many there are."""
        if is_arrow(self.data):
            import pyarrow as pa
            import pyarrow.compute as pc

            column = self.data[self.column]
            rows = self.data.filter(pc.equal(column, pa.scalar(value, column.type)))
            return rows, rows.num_rows
        from pyspark.sql import functions as F

        return self.data.where(F.col(self.column) == F.lit(value)), self.counts.get(value, 0)


def staged_parts(
    frame: DataFrame, column: str, *, collect: bool, order: Sequence[str] = ()
) -> StagedParts:
    """`frame` evaluated once, ready to be written part by part, its rows sorted by
    `order` (ascending, nulls first, as Spark sorts): collected as Arrow for an engine
    that writes from this process (`collect`; one Spark job, sorted here: a global sort on
    Spark would add a sampling job), else sorted and checkpointed on the cluster and
    counted by part (two)."""
    if collect:
        table = frame.toArrow()
        return StagedParts(
            table.sort_by([(name, "ascending", "at_start") for name in order]) if order else table,
            column,
        )
    checkpointed = (frame.orderBy(*order) if order else frame).localCheckpoint()
    counts = {row[0]: row[1] for row in checkpointed.groupBy(column).count().collect()}
    return StagedParts(checkpointed, column, counts)


def with_constants(data: Data, values: Mapping[str, tuple[Any, pa.DataType]]) -> Data:
    """`data` (Arrow or a DataFrame) with a column per entry of `values`, `name: (value,
    type)`, holding `value` on every row."""
    if is_arrow(data):
        import pyarrow as pa

        table = data if isinstance(data, pa.Table) else data.read_all()
        for name, (value, type_) in values.items():
            table = table.append_column(name, pa.array([value] * table.num_rows, type_))
        return table
    from pyspark.sql import functions as F
    from pyspark.sql.pandas.types import from_arrow_type

    return data.withColumns(
        {name: F.lit(value).cast(from_arrow_type(type_)) for name, (value, type_) in values.items()}
    )


def arrow_schema(data: Data) -> pa.Schema:
    """`data`'s schema in Arrow's types (e.g. to create a table before its first write)."""
    if is_arrow(data):
        return data.schema
    from pyspark.sql.pandas.types import to_arrow_schema

    return to_arrow_schema(data.schema)


def frame_from_arrow(spark: SparkSession, table: pa.Table) -> DataFrame:
    """Arrow rows as a DataFrame, an empty table included: Spark Connect infers no schema
    from an empty table, so Arrow's is given (nullable, as every column the engines
    write)."""
    if table.num_rows:
        return spark.createDataFrame(table)
    from pyspark.sql import types as T
    from pyspark.sql.pandas.types import from_arrow_schema

    fields = from_arrow_schema(table.schema).fields
    return spark.createDataFrame(
        [], T.StructType([T.StructField(f.name, f.dataType) for f in fields])
    )
