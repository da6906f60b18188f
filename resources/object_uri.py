"""Object-store URIs (`s3://bucket/key`), told apart from local paths without loading
the object store's settings and clients (`resources/object_store.py`)."""

from urllib.parse import urlparse

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


def object_path(uri: str) -> str:
    """`s3://bucket/key` -> `bucket/key`, the form pyarrow's S3 filesystem takes."""
    parsed = urlparse(uri)
    return f"{parsed.netloc}{parsed.path}".rstrip("/")
