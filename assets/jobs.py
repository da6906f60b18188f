"""A job per partitioned asset, named `<asset>_job`: what sensors target and what the
demo launches, so runs show under a readable job name (not `__ephemeral_asset_job__`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import dagster as dg

if TYPE_CHECKING:
    from dagster._core.definitions.unresolved_asset_job_definition import (
        UnresolvedAssetJobDefinition,
    )


def asset_job(asset: dg.AssetsDefinition, description: str) -> UnresolvedAssetJobDefinition:
    return dg.define_asset_job(
        f"{asset.key.to_user_string()}_job", selection=[asset], description=description
    )
