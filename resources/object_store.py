"""An S3-compatible object store under the lakehouse, configured once for every engine.

The settings have the shape and names of dagster-deltalake's storage classes (`S3Config`,
`ClientConfig`), so endpoint and credentials come through `dg.EnvVar` like any Dagster
resource setting. They are declared here rather than imported: importing
dagster-deltalake loads pyarrow.dataset and pandas, 0.4 s of every run process's start,
for two settings classes. From them each client gets its own form: delta-rs storage
options, Spark's Hadoop S3A configuration, a pyarrow filesystem for file-level
maintenance.

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
from pyarrow import fs as pafs

S3_SCHEMES = ("s3://", "s3a://")
# S3Config field <- environment variable (the names AWS's own clients read).
S3_ENVIRONMENT = {
    "endpoint": "AWS_ENDPOINT_URL",
    "access_key_id": "AWS_ACCESS_KEY_ID",
    "secret_access_key": "AWS_SECRET_ACCESS_KEY",
    "token": "AWS_SESSION_TOKEN",
    "region": "AWS_REGION",
}


def is_object_store(uri: str) -> bool:
    return uri.startswith(S3_SCHEMES)


class S3Config(dg.Config):
    """The S3 API's address and credentials (delta-rs's storage option names)."""

    endpoint: str | None = None
    access_key_id: str | None = None
    secret_access_key: str | None = None
    token: str | None = None
    region: str | None = None
    virtual_hosted_style_request: str | None = None
    """"true": buckets addressed as `bucket.host`; otherwise as `host/bucket`."""
    allow_unsafe_rename: bool | None = None
    """Refused when true: it would let concurrent commits overwrite each other."""


class ClientConfig(dg.Config):
    allow_http: bool | None = None
    """Plain HTTP to the endpoint (a local S3-compatible server)."""


def _options(config: dg.Config) -> dict[str, str]:
    return {key: str(value) for key, value in config.model_dump().items() if value is not None}


class S3Storage(dg.Config):
    """Where and how to reach the S3 API (AWS, or a compatible server)."""

    s3: S3Config = S3Config()
    client: ClientConfig = ClientConfig()

    def delta_rs_options(self) -> dict[str, str]:
        options = {**_options(self.s3), **_options(self.client)}
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


def object_path(uri: str) -> str:
    """`s3://bucket/key` -> `bucket/key`, the form pyarrow's S3 filesystem takes."""
    parsed = urlparse(uri)
    return f"{parsed.netloc}{parsed.path}".rstrip("/")


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
