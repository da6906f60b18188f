"""payments: insert-if-absent that verifies every replay, on both engines."""

from __future__ import annotations

import datetime as dt
import json
import threading
from decimal import Decimal
from pathlib import Path

import dagster as dg
import pytest
from support import partition_range, table_contents

from assets.database import PaymentsSettings, payments
from assets.database.payments import (
    NO_CONFLICTS,
    PAYMENT_CONFLICTS,
    PAYMENTS,
    Conflict,
    IdempotencyConflictError,
)
from assets.source_files import SourceDataError
from resources import Lakehouse

DAY1, DAY2, DAY3 = dt.date(2024, 3, 1), dt.date(2024, 3, 2), dt.date(2024, 3, 3)


def payment(key: str, account: str = "acc-1", amount: str = "12.50", **fields) -> dict:
    return {
        "idempotency_key": key,
        "account_id": account,
        "amount": amount,
        "currency": fields.get("currency", "EUR"),
        "created_at": fields.get("created_at", "2024-03-01T10:00:00+01:00"),
    }


@pytest.fixture
def write_payments(landing):
    def write(day: dt.date, name: str, rows: list[dict] | str) -> Path:
        path = Path(landing.root) / "payments" / f"date={day.isoformat()}" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        body = rows if isinstance(rows, str) else "".join(json.dumps(r) + "\n" for r in rows)
        path.write_text(body, encoding="utf-8")
        return path

    return write


@pytest.fixture
def settings() -> PaymentsSettings:
    return PaymentsSettings()


def run(resources, settings, day: dt.date, **kwargs) -> dg.ExecuteInProcessResult:
    return dg.materialize(
        [payments],
        partition_key=day.isoformat(),
        resources={**resources, "payments_settings": settings},
        **kwargs,
    )


def run_range(resources, settings, instance, **kwargs) -> dg.ExecuteInProcessResult:
    """DAY1..DAY3 as one run, as a backfill of them launches it."""
    return dg.materialize(
        [payments],
        resources={**resources, "payments_settings": settings},
        instance=instance,
        tags=partition_range(DAY1, DAY3),
        **kwargs,
    )


def stored(lakehouse) -> dict[str, tuple]:
    return {
        r["idempotency_key"]: (r["account_id"], r["amount"], r["currency"], r["created_at"])
        for r in lakehouse.read_arrow(PAYMENTS).to_pylist()
    }


def failure(result: dg.ExecuteInProcessResult) -> str:
    """The step's error with its causes, as the run's log shows them."""
    (event,) = [e for e in result.all_events if e.event_type_value == "STEP_FAILURE"]
    error, messages = event.step_failure_data.error, []
    while error is not None:
        messages.append(error.message)
        error = error.cause
    return "\n".join(messages)


def check(result: dg.ExecuteInProcessResult) -> dg.AssetCheckEvaluation:
    (evaluation,) = result.get_asset_check_evaluations()
    assert evaluation.check_name == NO_CONFLICTS
    return evaluation


@pytest.mark.long_on_delta_spark
def test_a_key_replayed_with_another_payload_fails_naming_key_and_column(
    resources, settings, lakehouse, write_payments
):
    write_payments(DAY1, "a.jsonl", [payment("action1", account="foo")])
    run(resources, settings, DAY1)
    version = lakehouse.version(PAYMENTS)
    write_payments(DAY2, "a.jsonl", [payment("action1", account="bar")])
    failed = run(resources, settings, DAY2, raise_on_error=False)
    message = failure(failed)
    assert "IdempotencyConflictError" in message
    assert "1 idempotency key was already used" in message and "'action1'" in message
    assert "account_id: stored 'foo'" in message and "incoming 'bar'" in message
    assert "payments/date=2024-03-01/a.jsonl:1" in message  # where the stored one came from
    assert lakehouse.version(PAYMENTS) == version
    assert stored(lakehouse)["action1"][0] == "foo"
    assert not check(failed).passed


@pytest.mark.long_on_delta_spark
def test_the_same_payment_twice_is_stored_once_and_counted_as_replayed(
    resources, settings, lakehouse, write_payments
):
    # Twice in one batch, spelled differently: the same amount and the same instant.
    write_payments(
        DAY1,
        "a.jsonl",
        [
            payment("p1", amount="12.5", created_at="2024-03-01T10:00:00+01:00"),
            payment("p1", amount="12.50", created_at="2024-03-01T09:00:00Z"),
        ],
    )
    first = run(resources, settings, DAY1)
    assert stored(lakehouse) == {
        "p1": ("acc-1", Decimal("12.5"), "EUR", dt.datetime(2024, 3, 1, 9, tzinfo=dt.UTC))
    }
    metadata = first.asset_materializations_for_node("payments")[0].metadata
    assert (metadata["rows_inserted"].value, metadata["replayed"].value) == (1, 1)
    assert check(first).passed
    # Once more on another day, with a new payment beside it.
    write_payments(DAY2, "b.jsonl", [payment("p1", amount="12.500"), payment("p2")])
    second = run(resources, settings, DAY2)
    metadata = second.asset_materializations_for_node("payments")[0].metadata
    assert (metadata["rows_inserted"].value, metadata["replayed"].value) == (1, 1)
    assert sorted(stored(lakehouse)) == ["p1", "p2"]
    assert lakehouse.read_arrow(PAYMENTS).schema.field("amount").type.scale == 6


@pytest.mark.long_on_delta_spark
def test_a_batch_with_a_conflict_commits_none_of_its_new_payments(
    resources, settings, lakehouse, write_payments
):
    write_payments(DAY1, "a.jsonl", [payment("k1"), payment("k2", currency="USD")])
    run(resources, settings, DAY1)
    version = lakehouse.version(PAYMENTS)
    write_payments(
        DAY2,
        "b.jsonl",
        [
            payment("new1"),
            payment("k1", amount="13.00"),  # conflicts with the stored k1
            payment("k2", currency="USD"),  # a true replay
            payment("new2"),
            payment("new1", account="acc-2"),  # conflicts with its copy two lines up
        ],
    )
    failed = run(resources, settings, DAY2, raise_on_error=False)
    message = failure(failed)
    assert "2 idempotency keys" in message
    assert "amount: stored '12.5'" in message and "incoming '13'" in message
    assert "'new1'" in message and "payments/date=2024-03-02/b.jsonl:1" in message
    assert lakehouse.version(PAYMENTS) == version
    assert sorted(stored(lakehouse)) == ["k1", "k2"]
    recorded = sorted(
        (r["idempotency_key"], r["column"], r["stored_value"], r["incoming_value"])
        for r in lakehouse.read_arrow(PAYMENT_CONFLICTS).to_pylist()
    )
    assert recorded == [
        ("k1", "amount", "12.5", "13"),
        ("new1", "account_id", "acc-1", "acc-2"),
    ]
    evaluation = check(failed)
    assert evaluation.metadata["conflicting_keys"].value == 2
    assert evaluation.metadata["partition"].text == "2024-03-02"
    # The day corrected: it ingests, and its conflicts are gone from the control table.
    write_payments(DAY2, "b.jsonl", [payment("new1"), payment("k2", currency="USD")])
    fixed = run(resources, settings, DAY2)
    assert check(fixed).passed
    assert lakehouse.read_arrow(PAYMENT_CONFLICTS).num_rows == 0
    assert sorted(stored(lakehouse)) == ["k1", "k2", "new1"]


@pytest.mark.long_on_delta_spark
def test_rerunning_an_ingested_day_changes_nothing_and_commits_nothing(
    resources, settings, lakehouse, write_payments
):
    write_payments(DAY1, "a.jsonl", [payment("p1"), payment("p2")])
    run(resources, settings, DAY1)
    version = lakehouse.version(PAYMENTS)
    before = stored(lakehouse)
    again = run(resources, settings, DAY1)
    assert lakehouse.version(PAYMENTS) == version
    assert stored(lakehouse) == before
    metadata = again.asset_materializations_for_node("payments")[0].metadata
    assert metadata["replayed"].value == 2
    assert metadata["delta_operation"].value == "NONE"
    assert "already stored" in metadata["skipped"].value


@pytest.mark.long_on_delta_spark
def test_a_mutable_column_may_change_without_a_conflict(resources, lakehouse, write_payments):
    lenient = PaymentsSettings(mutable_columns=["account_id"])
    write_payments(DAY1, "a.jsonl", [payment("p1", account="old")])
    run(resources, lenient, DAY1)
    write_payments(DAY2, "a.jsonl", [payment("p1", account="new")])
    result = run(resources, lenient, DAY2)
    assert result.asset_materializations_for_node("payments")[0].metadata["replayed"].value == 1
    assert stored(lakehouse)["p1"][0] == "old"  # insert-if-absent: the stored row stays
    # Any other column still conflicts.
    write_payments(DAY2, "a.jsonl", [payment("p1", account="new", amount="1")])
    assert not run(resources, lenient, DAY2, raise_on_error=False).success
    with pytest.raises(ValueError, match=r"\['iban'\] are not payment columns"):
        PaymentsSettings(mutable_columns=["iban"]).compared_columns()


@pytest.mark.long_on_delta_spark
def test_bad_lines_are_named_and_nothing_is_written(resources, settings, lakehouse, write_payments):
    write_payments(
        DAY1,
        "a.jsonl",
        "\n".join(
            [
                json.dumps(payment("ok")),
                json.dumps(payment("p", amount="1.2345678")),
                json.dumps(payment("p", created_at="2024-03-01T10:00:00")),
                json.dumps(payment("p", currency="euro")),
                '{"idempotency_key": "p", "account_id": "a"',
            ]
        ),
    )
    with pytest.raises(SourceDataError) as error:
        run(resources, settings, DAY1)
    message = str(error.value)
    for line, reason in [
        (2, "amount '1.2345678' is not a decimal with at most 6 decimal places"),
        (3, "created_at '2024-03-01T10:00:00' is not ISO-8601 with an offset"),
        (4, "currency 'euro' is not a 3-letter ISO code"),
        (5, "malformed JSON"),
    ]:
        assert f"payments/date=2024-03-01/a.jsonl:{line}: {reason}" in message
    assert not lakehouse.exists(PAYMENTS)


def test_concurrent_days_carrying_one_key_never_both_commit_it(
    resources, settings, lakehouse, write_payments
):
    """The validation and the insert are one optimistic transaction: whichever day
    commits first, the other is checked against it and fails on the conflict."""
    write_payments(DAY1, "a.jsonl", [payment("shared", account="one"), payment("only1")])
    write_payments(DAY2, "a.jsonl", [payment("shared", account="two"), payment("only2")])
    results = {}

    def materialize(day: dt.date) -> None:
        results[day] = run(resources, settings, day, raise_on_error=False)

    threads = [threading.Thread(target=materialize, args=(day,)) for day in (DAY1, DAY2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(r.success for r in results.values()) == [False, True]
    (winner,) = [day for day, r in results.items() if r.success]
    account = "one" if winner == DAY1 else "two"
    assert stored(lakehouse) == {
        "shared": (account, Decimal("12.5"), "EUR", dt.datetime(2024, 3, 1, 9, tzinfo=dt.UTC)),
        f"only{1 if winner == DAY1 else 2}": (
            "acc-1",
            Decimal("12.5"),
            "EUR",
            dt.datetime(2024, 3, 1, 9, tzinfo=dt.UTC),
        ),
    }
    (loser,) = [r for r in results.values() if not r.success]
    assert "'shared'" in failure(loser)


def test_the_conflict_error_names_every_key_up_to_a_limit():
    conflicts = [Conflict(f"k{i}", "amount", "1", "2", "a:1", "b:1") for i in range(3)]
    message = str(IdempotencyConflictError("2024-03-01", conflicts, keys=30))
    assert all(f"'k{i}'" in message for i in range(3))
    assert "and 27 more keys (all in payments_conflicts)" in message


RUN_COLUMNS = {"dagster_run_id", "ingested_at", "detected_at"}
"""What differs between two runs of the same input."""


def three_days_of_payments(write_payments) -> None:
    write_payments(DAY1, "a.jsonl", [payment("p1"), payment("p2"), payment("p1", amount="12.5")])
    write_payments(DAY2, "a.jsonl", [payment("p3", account="acc-3")])
    write_payments(DAY2, "b.jsonl", [payment("p1", amount="12.500"), payment("p4")])
    write_payments(DAY3, "a.jsonl", [payment("p2")])  # a replay only: nothing new


def day_facts(result: dg.ExecuteInProcessResult) -> dict[str | None, tuple]:
    return {
        event.partition: tuple(
            event.metadata[name].value if name in event.metadata else None
            for name in ("rows_inserted", "replayed", "lines_read", "delta_version", "skipped")
        )
        for event in result.asset_materializations_for_node("payments")
    }


@pytest.mark.long_on_delta_spark
def test_a_backfilled_range_is_one_pass_then_a_commit_per_day_as_days_run_alone_make(
    resources, settings, lakehouse, write_payments, instance, tmp_path, engine
):
    three_days_of_payments(write_payments)
    ranged = run_range(resources, settings, instance)
    assert check(ranged).passed
    facts = day_facts(ranged)
    assert {day: fact[:3] for day, fact in facts.items()} == {
        "2024-03-01": (2, 1, 3),
        "2024-03-02": (2, 1, 3),
        "2024-03-03": (0, 1, 1),
    }
    assert facts["2024-03-03"][3] is None  # nothing new: no commit
    assert "already stored" in facts["2024-03-03"][4]
    # A commit per day with new payments, each reported on its own partition and
    # tagged with it in the Delta history (what a partition's restore goes back from).
    history = {e.version: e.metadata.get("partition_key") for e in lakehouse.history(PAYMENTS)}
    assert {facts[day][3]: day for day in ("2024-03-01", "2024-03-02")}.items() <= history.items()
    ranged_tables = table_contents(lakehouse, without_columns=RUN_COLUMNS)
    version = lakehouse.version(PAYMENTS)
    again = run_range(resources, settings, instance)
    assert lakehouse.version(PAYMENTS) == version
    assert all(fact[4] for fact in day_facts(again).values())

    # The same files, one run per day, into another lakehouse: the same tables.
    apart = Lakehouse(root=str(tmp_path / "apart"), engine=engine, spark=resources["spark"])
    for day in (DAY1, DAY2, DAY3):
        run({**resources, "lakehouse": apart}, settings, day)
    assert table_contents(apart, without_columns=RUN_COLUMNS) == ranged_tables


@pytest.mark.parametrize("engine", ["delta-rs"])  # the range's logic, not the engine's
def test_a_day_with_bad_lines_fails_its_range_by_name_and_the_others_land_in_one_pass(
    resources, settings, lakehouse, write_payments, instance, tmp_path
):
    three_days_of_payments(write_payments)
    write_payments(DAY2, "c.jsonl", '{"idempotency_key": "p9", "account_id": "a"\n')
    failed = run_range(resources, settings, instance, raise_on_error=False)
    assert "1 of 3 partitions failed (2024-03-02); 2 committed" in failure(failed)
    assert "payments/date=2024-03-02/c.jsonl:1: malformed JSON" in failure(failed)
    logged = [entry.user_message for entry in instance.all_logs(failed.run_id)]
    assert any(
        "bad lines in 1 day(s) of the range (2024-03-02): they fail, the other days are read "
        "in one pass" in line
        for line in logged
    )
    assert instance.get_materialized_partitions(dg.AssetKey(PAYMENTS)) == {
        "2024-03-01",
        "2024-03-03",
    }
    # The same files, one run per day, into another lakehouse: the same tables.
    apart = Lakehouse(root=str(tmp_path / "apart"), engine="delta-rs", spark=resources["spark"])
    for day in (DAY1, DAY2, DAY3):
        run({**resources, "lakehouse": apart}, settings, day, raise_on_error=False)
    assert table_contents(apart, without_columns=RUN_COLUMNS) == table_contents(
        lakehouse, without_columns=RUN_COLUMNS
    )


@pytest.mark.parametrize("engine", ["delta-rs"])  # the range's logic, not the engine's
def test_a_range_with_conflicts_on_two_days_ends_as_runs_of_each_day_do(
    resources, settings, lakehouse, write_payments, instance, tmp_path
):
    """Each conflicting day fails on its own and the days after it are judged again: p3
    first comes in a day that fails, so its copy two days later is new, not a replay."""
    days = [DAY1 + dt.timedelta(days=i) for i in range(5)]
    write_payments(days[0], "a.jsonl", [payment("p1"), payment("p2")])
    write_payments(days[1], "a.jsonl", [payment("p1", account="other"), payment("p3")])
    write_payments(days[2], "a.jsonl", [payment("p3"), payment("p4")])
    write_payments(days[3], "a.jsonl", [payment("p4", amount="99.00"), payment("p5")])
    write_payments(days[4], "a.jsonl", [payment("p5"), payment("p6")])
    failed = dg.materialize(
        [payments],
        resources={**resources, "payments_settings": settings},
        instance=instance,
        tags=partition_range(days[0], days[-1]),
        raise_on_error=False,
    )
    assert "2 of 5 partitions failed (2024-03-02, 2024-03-04); 3 committed" in failure(failed)
    assert sorted(stored(lakehouse)) == ["p1", "p2", "p3", "p4", "p5", "p6"]
    logged = [entry.user_message for entry in instance.all_logs(failed.run_id)]
    assert [line for line in logged if "a conflict in" in line] == [
        f"a conflict in {day}: the days before it commit from this pass, that day is judged "
        "on its own, and the days after it in one pass more"
        for day in (days[1], days[3])
    ]
    apart = Lakehouse(root=str(tmp_path / "apart"), engine="delta-rs", spark=resources["spark"])
    for day in days:
        run({**resources, "lakehouse": apart}, settings, day, raise_on_error=False)
    assert table_contents(apart, without_columns=RUN_COLUMNS) == table_contents(
        lakehouse, without_columns=RUN_COLUMNS
    )


@pytest.mark.long_on_delta_spark
def test_a_conflicting_day_fails_its_range_by_name_and_the_other_days_land(
    resources, settings, lakehouse, write_payments, instance
):
    three_days_of_payments(write_payments)
    conflicting = write_payments(DAY2, "c.jsonl", [payment("p2", account="other")])
    failed = run_range(resources, settings, instance, raise_on_error=False)
    assert not failed.success
    assert "1 of 3 partitions failed (2024-03-02); 2 committed" in failure(failed)
    assert "account_id: stored 'acc-1'" in failure(failed)
    evaluation = check(failed)
    assert not evaluation.passed
    assert evaluation.metadata["conflicting_days"].value == ["2024-03-02"]
    assert evaluation.metadata["conflicting_keys"].value == 1
    assert sorted(stored(lakehouse)) == ["p1", "p2"]
    assert instance.get_materialized_partitions(dg.AssetKey(PAYMENTS)) == {
        "2024-03-01",
        "2024-03-03",
    }
    # The day corrected, the range again: the conflict is gone and every payment in.
    conflicting.unlink()
    fixed = run_range(resources, settings, instance)
    assert check(fixed).passed
    assert sorted(stored(lakehouse)) == ["p1", "p2", "p3", "p4"]
    assert lakehouse.read_arrow(PAYMENT_CONFLICTS).num_rows == 0
