"""An S3-compatible object store under the lakehouse, configured once for every engine.

The settings are dagster-deltalake's own storage classes (`S3Config`, `ClientConfig`),
so endpoint and credentials come through `dg.EnvVar` like any Dagster resource setting.
From them each client gets its own form: delta-rs storage options, Spark's Hadoop S3A
configuration, a pyarrow filesystem for file-level maintenance. The resources of a
lakehouse on an object store are `S3Lakehouse` and `S3Spark`, which carry the settings.

This module is imported only where an `s3://` root is configured: importing
dagster-deltalake loads pyarrow.dataset and with it pandas, which added 0.4 to 0.8 s to
loading the definitions (3.2 to 4.1 s) in a run process of the local profile, which
otherwise never loads pandas.

Concurrent commits: S3 has no atomic rename, so each engine needs the coordination Delta
documents for it, never an unsafe-rename switch.
- delta-rs commits with S3 conditional writes (`conditional_put: etag`: a commit file is
  created only if absent), which AWS S3 and compatible servers enforce.
- delta-spark's LogStore for `s3://` (S3SingleDriverLogStore) makes commits exclusive
  within one Spark driver. Writers in several processes must therefore share a driver:
  attach them to one long-lived Spark (SPARK_REMOTE). Delta's multi-driver coordinator
  (delta-storage-s3-dynamodb) is not published where our machines fetch packages.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any
from urllib.parse import urlparse

import dagster as dg
from dagster_deltalake.config import ClientConfig, S3Config
from pyarrow import fs as pafs
from pydantic import Field

from resources.lakehouse import Lakehouse
from resources.object_uri import S3_ENVIRONMENT
from resources.spark import SparkResource
from resources.spark_packages import resolved_jars, s3_packages


class S3Storage(dg.Config):
    """Where and how to reach the S3 API (AWS, or a compatible server)."""

    s3: S3Config = S3Config()
    client: ClientConfig = ClientConfig()

    def delta_rs_options(self) -> dict[str, str]:
        # As dagster-deltalake's `str_dict()` gives them (which calls pydantic's deprecated
        # `dict()`, a warning in every run), without `provider`, which names the class.
        options = {
            key: str(value)
            for config in (self.s3, self.client)
            for key, value in config.model_dump(exclude={"provider"}, exclude_none=True).items()
        }
        if options.pop("allow_unsafe_rename", "False") == "True":
            raise ValueError(
                "allow_unsafe_rename would let concurrent commits overwrite each other"
            )
        options["conditional_put"] = "etag"
        return options

    def spark_config(self) -> dict[str, str]:
        """Hadoop S3A settings for Spark; `s3://` paths go to S3A as well."""
        prefix = "spark.hadoop.fs.s3a."
        config = {
            "spark.hadoop.fs.s3.impl": "org.apache.hadoop.fs.s3a.S3AFileSystem",
            prefix + "path.style.access": str(
                self.s3.virtual_hosted_style_request != "true"
            ).lower(),
        }
        if self.s3.endpoint:
            config[prefix + "endpoint"] = self.s3.endpoint
        if self.s3.region:
            config[prefix + "endpoint.region"] = self.s3.region
        if self.s3.access_key_id and self.s3.secret_access_key:
            config[prefix + "access.key"] = self.s3.access_key_id
            config[prefix + "secret.key"] = self.s3.secret_access_key
            if self.s3.token:
                config[prefix + "session.token"] = self.s3.token
                config[prefix + "aws.credentials.provider"] = (
                    "org.apache.hadoop.fs.s3a.TemporaryAWSCredentialsProvider"
                )
            else:
                config[prefix + "aws.credentials.provider"] = (
                    "org.apache.hadoop.fs.s3a.SimpleAWSCredentialsProvider"
                )
        if self.client.allow_http:
            config[prefix + "connection.ssl.enabled"] = "false"
        return config

    def filesystem(self) -> pafs.FileSystem:
        endpoint = urlparse(self.s3.endpoint) if self.s3.endpoint else None
        return pafs.S3FileSystem(
            access_key=self.s3.access_key_id,
            secret_key=self.s3.secret_access_key,
            session_token=self.s3.token,
            region=self.s3.region or "us-east-1",
            endpoint_override=endpoint.netloc if endpoint else None,
            scheme=endpoint.scheme if endpoint else "https",
            force_virtual_addressing=self.s3.virtual_hosted_style_request == "true",
        )


def storage_from_environment(env: Mapping[str, str], *, deferred: bool = True) -> S3Storage:
    """Object-store settings from the AWS_* variables that are set in `env`. Deferred: as
    `dg.EnvVar`s, resolved when a run starts (so secrets never land in run config);
    otherwise their values now (for a Spark server started outside Dagster)."""
    settings: dict[str, Any] = {
        field: dg.EnvVar(var) if deferred else env[var]
        for field, var in S3_ENVIRONMENT.items()
        if env.get(var)
    }
    allow_http = env.get("AWS_ALLOW_HTTP", "").lower() in ("1", "true", "yes")
    return S3Storage(s3=S3Config(**settings), client=ClientConfig(allow_http=allow_http or None))


class S3Spark(SparkResource):
    """A Spark whose sessions reach the object store: hadoop-aws loaded and S3A
    configured (endpoint, credentials) from the settings the lakehouse uses."""

    s3: S3Storage = S3Storage()

    def object_store(self) -> tuple[list[str], dict[str, str]]:
        return resolved_jars(s3_packages()), self.s3.spark_config()


class S3Lakehouse(Lakehouse):
    """A lakehouse under an `s3://` root, reached with `s3` by every engine."""

    spark: SparkResource = Field(default_factory=S3Spark)
    """Give it an `S3Spark` with the same `s3`: by default, one reaching the store the
    AWS_* environment names."""
    s3: S3Storage = S3Storage()
    """Endpoint and credentials (unset fields: the AWS_* environment)."""

    def _storage(self) -> S3Storage:
        return self.s3
