"""devices: the Merger with soft deletes, and the daily change-file formats' bad inputs."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import dagster as dg
import pytest

from assets.source_files import SourceDataError
from assets.updates import devices
from assets.updates.change_files import parse_device_changes
from assets.updates.merger import DEVICES

DAY1, DAY2 = dt.date(2024, 5, 1), dt.date(2024, 5, 2)


@pytest.fixture
def write_cdc(landing):
    def write(day: dt.date, body: str | bytes) -> Path:
        path = Path(landing.root) / "devices_cdc" / f"{day.isoformat()}.csv"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(body.encode() if isinstance(body, str) else body)
        return path

    return write


def materialize(resources, day: dt.date, **kwargs) -> dg.ExecuteInProcessResult:
    return dg.materialize([devices], partition_key=day.isoformat(), resources=resources, **kwargs)


def table(lakehouse) -> list[tuple]:
    return sorted(
        (r["type"], r["version"], r["full_name"]) for r in lakehouse.read_arrow(DEVICES).to_pylist()
    )


@pytest.mark.long_on_delta_spark
def test_a_replayed_delete_keeps_the_device_deleted(resources, lakehouse, write_cdc):
    write_cdc(DAY1, "type;full_name;version\nphone;Galaxy S;1\nphone;Pixel;2\ntablet;Tab;1\n")
    materialize(resources, DAY1)
    write_cdc(
        DAY2,
        "type;full_name;version;is_deleted\nphone;Pixel;2;true\ntablet;Tab Pro;1;false\n",
    )
    first = materialize(resources, DAY2)
    expected = [("phone", "1", "Galaxy S"), ("tablet", "1", "Tab Pro")]
    assert table(lakehouse) == expected
    metadata = first.asset_materializations_for_node("devices")[0].metadata
    assert (metadata["rows_deleted"].value, metadata["rows_updated"].value) == (1, 1)

    # The book's scenario: the deleting batch replayed, twice. The device stays deleted.
    for _ in range(2):
        materialize(resources, DAY2)
        assert table(lakehouse) == expected
    # Replaying the whole history in order gives the same table too.
    materialize(resources, DAY1)
    materialize(resources, DAY2)
    assert table(lakehouse) == expected


def test_duplicate_keys_in_one_file_take_the_last_line(resources, lakehouse, write_cdc):
    write_cdc(
        DAY1,
        "type;full_name;version;is_deleted\n"
        "phone;Old name;1;false\nphone;Newest name;1;\nwatch;Gone;1;false\nwatch;Gone;1;true\n",
    )
    result = materialize(resources, DAY1)
    assert table(lakehouse) == [("phone", "1", "Newest name")]
    metadata = result.asset_materializations_for_node("devices")[0].metadata
    assert metadata["duplicate_keys_folded"].value == 2
    assert metadata["rows_inserted"].value == 1


@pytest.mark.long_on_delta_spark
@pytest.mark.parametrize(
    ("body", "message"),
    [
        (
            "type,full_name,version\nphone,Pixel,1\n",
            "devices_cdc/2024-05-02.csv:1: header 'type,full_name,version' is not "
            "type;full_name;version or type;full_name;version;is_deleted (is the file "
            "';'-delimited?)",
        ),
        (
            "type;full_name;version\nphone;Pixel;3\nphone;;4\n",
            "devices_cdc/2024-05-02.csv:3: missing required field 'full_name'",
        ),
        (
            "type;full_name;version\nphone;Pixel\n",
            "devices_cdc/2024-05-02.csv:2: expected 3 ';'-separated fields, found 2",
        ),
        (
            "type;full_name;version;is_deleted\nphone;Pixel;3;maybe\n",
            "devices_cdc/2024-05-02.csv:2: is_deleted must be true or false, not 'maybe'",
        ),
        (
            b"type;full_name;version\nphone;Pixel;3\nphone;Caf\xe9;4\n",
            "devices_cdc/2024-05-02.csv:3: not valid UTF-8",
        ),
        (
            # Two files concatenated by hand: the second header is no device.
            "type;full_name;version\nphone;Pixel;3\ntype;full_name;version\nphone;Pixel;4\n",
            "devices_cdc/2024-05-02.csv:3: the header line again: a header belongs on line 1 only",
        ),
    ],
)
def test_bad_change_files_name_file_and_line_and_leave_the_table(
    resources, lakehouse, write_cdc, body, message
):
    write_cdc(DAY1, "type;full_name;version\nphone;Pixel;2\n")
    materialize(resources, DAY1)
    version = lakehouse.version(DEVICES)
    write_cdc(DAY2, body)
    result = materialize(resources, DAY2, raise_on_error=False)
    assert not result.success
    assert message in result.get_step_failure_events()[0].event_specific_data.error.to_string()
    assert lakehouse.version(DEVICES) == version
    assert table(lakehouse) == [("phone", "2", "Pixel")]


def test_an_empty_change_file_is_no_change_and_a_missing_one_an_error(spark, landing, write_cdc):
    write_cdc(DAY1, "")
    assert parse_device_changes(spark.session(), landing, DAY1).keys == 0
    write_cdc(DAY1, "\ufefftype;full_name;version\n")  # a header alone, after a BOM
    header_only = parse_device_changes(spark.session(), landing, DAY1)
    assert (header_only.keys, header_only.rows_read) == (0, 0)
    assert header_only.source.path == "devices_cdc/2024-05-01.csv"
    with pytest.raises(SourceDataError, match="devices_cdc/2024-05-02.csv: change file has not"):
        parse_device_changes(spark.session(), landing, DAY2)
