import datetime as dt

import pytest

from resources.lakehouse.predicates import PredicateError, between, eq, is_in, sql_literal


def test_quotes_are_escaped_per_dialect_so_a_value_cannot_close_its_literal():
    # Guards: a subject key with a quote ending the literal and widening a replaceWhere.
    assert sql_literal("o'brien", dialect="datafusion") == "'o''brien'"
    assert sql_literal("o'brien", dialect="spark") == "'o\\'brien'"
    assert sql_literal("a\\'b", dialect="spark") == "'a\\\\\\'b'"
    assert sql_literal("a\\b", dialect="datafusion") == "'a\\b'"


def test_typed_literals():
    assert sql_literal(dt.date(2024, 12, 30), dialect="spark") == "DATE '2024-12-30'"
    assert sql_literal(True, dialect="datafusion") == "TRUE"
    assert sql_literal(7, dialect="spark") == "7"
    aware = dt.datetime(2024, 1, 1, 1, 0, tzinfo=dt.timezone(dt.timedelta(hours=1)))
    assert (
        sql_literal(aware, dialect="datafusion")
        == "arrow_cast('2024-01-01T00:00:00Z', 'Timestamp(Microsecond, Some(\"UTC\"))')"
    )
    assert sql_literal(aware, dialect="spark") == "TIMESTAMP '2024-01-01T00:00:00Z'"


def test_naive_timestamps_and_odd_columns_are_refused():
    with pytest.raises(PredicateError, match="no time zone"):
        sql_literal(dt.datetime(2024, 1, 1), dialect="spark")
    with pytest.raises(PredicateError, match="not a plain identifier"):
        eq("x = 1 OR y", 1).render("spark")


def test_composition():
    predicate = eq("a", "x") & is_in("b", [1, 2]) & between("c", 1, 3)
    assert predicate.render("datafusion") == (
        "((a = 'x') AND (b IN (1, 2))) AND ((c >= 1) AND (c <= 3))"
    )
    assert is_in("b", []).render("spark") == "FALSE"
