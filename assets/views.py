"""The relations readers query by name that are no table of their own, each as its data
stands now: the telemetry running totals (over their two tables), the proxy's current
device snapshot, and the visits exposition (each week from the table holding it). The
runs that change one register it (`Lakehouse.expose`); `make sql` and the demo register
them all, for a lakehouse written without the catalog (`resources/catalog.py`)."""

from __future__ import annotations

import dagster as dg

from assets.catalog import RELATIONS
from assets.immutable.proxy import manifest_entries as snapshot_entries
from assets.immutable.proxy import snapshot_view
from assets.overwriting.exposition import manifest_entries as visits_entries
from assets.overwriting.exposition import visits_view
from assets.telemetry.control import RUNNING_TOTALS_VIEW
from resources import Lakehouse
from resources.catalog import Catalog, View, tables_under


def current_views(lakehouse: Lakehouse) -> list[View]:
    """Every view whose tables all exist under the lakehouse's root."""
    shaped = [
        RUNNING_TOTALS_VIEW,
        snapshot_view(snapshot_entries(lakehouse)),
        visits_view(visits_entries(lakehouse)),
    ]
    return [
        view
        for view in shaped
        if view is not None and all(lakehouse.exists(table) for table in view.reads)
    ]


def register_lakehouse(catalog: Catalog, lakehouse: Lakehouse) -> dict[str, float]:
    """Register every table under the lakehouse's root and every view (with the tables it
    reads, which an object-store root cannot list) that the catalog lacks as they stand;
    returns the seconds each registration took."""
    views = current_views(lakehouse)
    read = {table: lakehouse.uri(table) for view in views for table in view.reads}
    return catalog.ensure({**tables_under(lakehouse.root), **read}, views)


def asset_relations(definitions: dg.Definitions) -> list[str]:
    """`lakehouse.<name>` of every relation readers query an asset of `definitions` by
    (the tables or views it declares, `assets.catalog.RELATIONS`)."""
    graph = definitions.resolve_asset_graph()
    return sorted(
        name
        for key in graph.materializable_asset_keys
        for name in graph.get(key).metadata[RELATIONS]
    )
