"""S3 object store through boto3.

Endpoint, region and credentials come only from the standard AWS chain (AWS_ENDPOINT_URL,
AWS_PROFILE, environment variables, instance role): the pipeline never holds a secret, so it can
never print or persist one. Error messages name the bucket, the key and the S3 error code, and
nothing from the request (headers and signatures can carry session tokens).
"""

from __future__ import annotations

import contextlib
import functools
import io
import os
import re
from collections.abc import Iterator
from datetime import UTC
from pathlib import Path
from typing import Any, BinaryIO, NoReturn
from urllib.parse import urlparse

import boto3
from boto3.exceptions import S3UploadFailedError
from boto3.s3.transfer import TransferConfig
from botocore.config import Config
from botocore.exceptions import (
    BotoCoreError,
    ClientError,
    ConnectTimeoutError,
    EndpointConnectionError,
    IncompleteReadError,
    NoCredentialsError,
    PartialCredentialsError,
    ReadTimeoutError,
    ResponseStreamingError,
)
from botocore.exceptions import ConnectionError as BotoConnectionError

from kindex_etl.errors import NotFound, PreconditionFailed, StorageError
from kindex_etl.storage.base import ObjectInfo, check_key

# Bounded, so that an unreachable endpoint fails in seconds, not minutes: a connect attempt
# gives up after 5 s and standard mode retries (throttling, 5xx, connection errors) with
# backoff. 10 attempts still ride out the brief SlowDown bursts S3 returns when many workers
# hit one prefix; a stalled transfer is cut after 60 s of silence and resumed.
CONNECT_TIMEOUT_S = 5
READ_TIMEOUT_S = 60
_CLIENT_CONFIG = Config(
    retries={"mode": "standard", "max_attempts": 10},
    connect_timeout=CONNECT_TIMEOUT_S,
    read_timeout=READ_TIMEOUT_S,
    # Multipart uploads of large Parquet files keep connections idle between parts; keepalive
    # stops NAT gateways and load balancers from silently dropping them.
    tcp_keepalive=True,
    max_pool_connections=16,
)
# The check before a command starts: one quick question, one retry. A person waits on it.
_PROBE_CONFIG = Config(
    retries={"mode": "standard", "max_attempts": 2},
    connect_timeout=2,
    read_timeout=5,
)

_MIB = 1024 * 1024
# Parts of 16 MiB keep memory bounded (concurrency x chunk) while a 1 GB file still needs only
# ~64 requests; s3transfer raises the chunk size by itself where 10,000 parts would not do.
_TRANSFER_CONFIG = TransferConfig(
    multipart_threshold=64 * _MIB,
    multipart_chunksize=16 * _MIB,
    max_concurrency=8,
)

# A reader resumes with a ranged GET after a dropped connection; a bound keeps a persistently
# broken network from looping forever.
_MAX_READ_RESUMES = 5
_READ_BUFFER = 1 * _MIB

_NOT_FOUND_CODES = {"404", "NoSuchKey", "NotFound"}
_PRECONDITION_CODES = {"412", "PreconditionFailed", "409", "ConditionalRequestConflict"}
_BUCKET_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
_NO_CREDENTIALS = (
    "no AWS credentials found in the standard chain "
    "(AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY, AWS_PROFILE, instance or container role)"
)


def _strip_etag(etag: str) -> str:
    return etag.strip('"')


def _error_code(exc: ClientError) -> tuple[str, int | None]:
    error = exc.response.get("Error", {})
    status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
    return str(error.get("Code", "Unknown")), status


def _aws_environment() -> tuple[tuple[str, str], ...]:
    return tuple(sorted((k, v) for k, v in os.environ.items() if k.startswith("AWS_")))


@functools.lru_cache(maxsize=8)
def _client(environment: tuple[tuple[str, str], ...]) -> Any:
    """One client per AWS environment, shared by every store of the process.

    A new Session loads botocore's service models again (about 0.3 s each); an ingest opens
    a handful of stores. Clients are thread-safe; keying on the AWS_* variables means a store
    opened after the environment changed (another endpoint, other credentials) gets its own.
    A Session of our own keeps us off boto3's module-level default session, which other code
    may have configured differently.
    """
    del environment  # the cache key; boto3 reads the environment itself
    return boto3.session.Session().client("s3", config=_CLIENT_CONFIG)


class S3Store:
    """An `ObjectStore` over one bucket, optionally rooted at a key prefix."""

    def __init__(self, bucket: str, prefix: str = "") -> None:
        if not _BUCKET_RE.fullmatch(bucket):
            raise ValueError(f"invalid S3 bucket name: {bucket!r}")
        prefix = prefix.removesuffix("/")
        if prefix:
            check_key(prefix)
        self.bucket = bucket
        self.prefix = prefix
        self.url = f"s3://{bucket}/{prefix}" if prefix else f"s3://{bucket}"
        self._client: Any = _client(_aws_environment())

    @classmethod
    def from_url(cls, url: str) -> S3Store:
        """Open `s3://bucket[/prefix]`."""
        parsed = urlparse(url)
        if parsed.scheme != "s3":
            raise StorageError(f"not an s3:// URL: {url!r}")
        if "@" in parsed.netloc:
            # Never echo it: userinfo in a URL is where someone might have pasted a key.
            raise StorageError("S3 URLs must not carry credentials; use the standard AWS chain")
        if parsed.query or parsed.fragment or parsed.params:
            # Not echoed either: a query string is where presigned signatures live.
            raise StorageError("S3 URL must be s3://bucket[/prefix], without a query or fragment")
        try:
            return cls(parsed.netloc, parsed.path.removeprefix("/"))
        except ValueError as exc:
            raise StorageError(f"invalid S3 URL {url!r}: {exc}") from None

    def __repr__(self) -> str:
        return f"S3Store({self.url!r})"

    @property
    def endpoint_url(self) -> str:
        """The endpoint boto3 resolved (environment, profile, or AWS's own)."""
        return str(self._client.meta.endpoint_url)

    @property
    def region(self) -> str | None:
        region = self._client.meta.region_name
        return str(region) if region else None

    def probe(self) -> None:
        """Fail fast, with one clear StorageError, unless credentials exist and the bucket answers.

        HeadBucket is the cheapest authenticated request: it proves the endpoint is reachable,
        the credentials are accepted and the bucket exists, in one round trip.
        """
        session = boto3.session.Session()
        if session.get_credentials() is None:
            raise StorageError(f"{self.url}: {_NO_CREDENTIALS}")
        client = session.client("s3", config=_PROBE_CONFIG)
        try:
            client.head_bucket(Bucket=self.bucket)
        except ClientError as exc:
            code, status = _error_code(exc)
            if status == 404 or code in ("404", "NoSuchBucket"):
                raise StorageError(f"{self._where(None)}: no such bucket") from None
            if status == 403 or code in ("403", "AccessDenied"):
                raise StorageError(
                    f"{self._where(None)}: access denied (check the credentials' permissions)"
                ) from None
            self._fail(exc, "check", None)
        except BotoCoreError as exc:
            self._fail(exc, "check", None)

    # -- keys and errors ---------------------------------------------------------------------

    def _key(self, key: str) -> str:
        check_key(key)
        return f"{self.prefix}/{key}" if self.prefix else key

    def _rel(self, full_key: str) -> str:
        return full_key[len(self.prefix) + 1 :] if self.prefix else full_key

    def _where(self, full_key: str | None) -> str:
        return f"s3://{self.bucket}/{full_key}" if full_key else f"s3://{self.bucket}"

    def _fail(self, exc: Exception, op: str, full_key: str | None = None) -> NoReturn:
        """Re-raise a botocore error as ours, keeping only what is safe to show."""
        where = self._where(full_key)
        mapped: StorageError
        if isinstance(exc, NoCredentialsError | PartialCredentialsError):
            mapped = StorageError(f"{op} {where}: {_NO_CREDENTIALS}")
        elif isinstance(exc, ClientError):
            code, status = _error_code(exc)
            detail = f"{op} {where} failed: {code}" + (f" (HTTP {status})" if status else "")
            if code in _PRECONDITION_CODES or status in (409, 412):
                mapped = PreconditionFailed(detail)
            elif code in _NOT_FOUND_CODES or (status == 404 and code != "NoSuchBucket"):
                mapped = NotFound(detail)
            else:
                mapped = StorageError(detail)
        elif isinstance(exc, EndpointConnectionError | ConnectTimeoutError | BotoConnectionError):
            # The class name only: botocore's text quotes the endpoint URL, which we did not
            # choose to show and which could carry userinfo.
            mapped = StorageError(f"{op} {where}: cannot reach S3 ({type(exc).__name__})")
        else:
            mapped = StorageError(f"{op} {where} failed: {type(exc).__name__}")
        # `from None`: the botocore error's `.response` holds the parsed reply, which for
        # signature errors includes the canonical request (and so any session token).
        raise mapped from None

    # -- ObjectStore -------------------------------------------------------------------------

    def list(self, prefix: str = "", *, start_after: str = "") -> Iterator[ObjectInfo]:
        base = f"{self.prefix}/" if self.prefix else ""
        paginator = self._client.get_paginator("list_objects_v2")
        try:
            # ListObjectsV2 returns keys in UTF-8 byte order, which is code-point order: the
            # same order `sorted()` gives LocalStore.
            # StartAfter: the log's tail is one request, however long the log.
            extra = {"StartAfter": base + start_after} if start_after else {}
            for page in paginator.paginate(Bucket=self.bucket, Prefix=base + prefix, **extra):
                for obj in page.get("Contents", ()):
                    yield ObjectInfo(
                        key=self._rel(obj["Key"]),
                        size=int(obj["Size"]),
                        etag=_strip_etag(obj["ETag"]),
                        last_modified=obj["LastModified"].astimezone(UTC),
                    )
        except (ClientError, BotoCoreError) as exc:
            self._fail(exc, "list", base + prefix)

    def head(self, key: str) -> ObjectInfo | None:
        full = self._key(key)
        try:
            resp = self._client.head_object(Bucket=self.bucket, Key=full)
        except ClientError as exc:
            code, status = _error_code(exc)
            if status == 404 or code in _NOT_FOUND_CODES:
                return None
            self._fail(exc, "head", full)
        except BotoCoreError as exc:
            self._fail(exc, "head", full)
        return ObjectInfo(
            key=key,
            size=int(resp["ContentLength"]),
            etag=_strip_etag(resp["ETag"]),
            last_modified=resp["LastModified"].astimezone(UTC),
        )

    def open_read(self, key: str) -> BinaryIO:
        full = self._key(key)
        try:
            resp = self._client.get_object(Bucket=self.bucket, Key=full)
        except (ClientError, BotoCoreError) as exc:
            self._fail(exc, "read", full)
        raw = _S3RawReader(self, full, resp)
        return io.BufferedReader(raw, buffer_size=_READ_BUFFER)

    def get_bytes(self, key: str) -> bytes:
        with self.open_read(key) as fh:
            return fh.read()

    def read_tail(self, key: str, size: int) -> bytes:
        full = self._key(key)
        try:
            # A suffix range longer than the object gets the whole object.
            resp = self._client.get_object(Bucket=self.bucket, Key=full, Range=f"bytes=-{size}")
            return bytes(resp["Body"].read())
        except (ClientError, BotoCoreError) as exc:
            self._fail(exc, "read", full)

    def put_bytes(
        self,
        key: str,
        data: bytes,
        *,
        if_none_match: bool = False,
        if_match: str | None = None,
    ) -> str:
        full = self._key(key)
        if if_none_match and if_match is not None:
            raise ValueError("put_bytes: give if_none_match or if_match, not both")
        kwargs: dict[str, Any] = {"Bucket": self.bucket, "Key": full, "Body": data}
        if if_none_match:
            kwargs["IfNoneMatch"] = "*"
        elif if_match is not None:
            # S3 compares quoted ETags; ours are stored without quotes.
            kwargs["IfMatch"] = f'"{_strip_etag(if_match)}"'
        try:
            resp = self._client.put_object(**kwargs)
        except ClientError as exc:
            code, status = _error_code(exc)
            if if_match is not None and (status == 404 or code in _NOT_FOUND_CODES):
                # Replacing a version that no longer exists is a lost condition, as LocalStore
                # reports it, not a missing object.
                raise PreconditionFailed(
                    f"put {self._where(full)} failed: {code} (HTTP {status})"
                ) from None
            self._fail(exc, "put", full)
        except BotoCoreError as exc:
            self._fail(exc, "put", full)
        return _strip_etag(resp["ETag"])

    def put_file(self, key: str, path: Path) -> str:
        full = self._key(key)
        if path.stat().st_size < _TRANSFER_CONFIG.multipart_threshold:
            # One PUT streamed from the open file. Its reply carries the ETag: a HEAD after the
            # upload could find the key already moved on (a concurrent writer publishing the
            # same staged batch), and would fail an upload that succeeded.
            with path.open("rb") as body:
                try:
                    resp = self._client.put_object(Bucket=self.bucket, Key=full, Body=body)
                except (ClientError, BotoCoreError) as exc:
                    self._fail(exc, "upload", full)
            return _strip_etag(resp["ETag"])
        try:
            self._client.upload_file(str(path), self.bucket, full, Config=_TRANSFER_CONFIG)
        except (ClientError, BotoCoreError) as exc:
            self._fail(exc, "upload", full)
        except S3UploadFailedError as exc:
            # boto3 wraps a managed upload's ClientError in this, with botocore's text; report
            # the underlying error our way.
            cause = exc.__cause__ or exc.__context__
            if isinstance(cause, ClientError | BotoCoreError):
                self._fail(cause, "upload", full)
            raise StorageError(f"upload {self._where(full)} failed") from None
        # The managed upload does not hand back the final ETag; a HEAD is the only way to get it.
        info = self.head(key)
        if info is None:
            raise NotFound(f"upload {self._where(full)}: object missing right after upload")
        return info.etag

    def move_file(self, key: str, path: Path) -> str:
        etag = self.put_file(key, path)
        path.unlink(missing_ok=True)
        return etag

    def copy(self, src_key: str, dst_key: str) -> None:
        src, dst = self._key(src_key), self._key(dst_key)
        if src == dst:
            # S3 rejects a copy onto itself without a metadata change; it is a no-op anyway.
            return
        try:
            # The managed copy switches to UploadPartCopy above the threshold, so objects over
            # CopyObject's 5 GB limit copy too, and still without passing through this host.
            self._client.copy(
                {"Bucket": self.bucket, "Key": src},
                self.bucket,
                dst,
                Config=_TRANSFER_CONFIG,
            )
        except ClientError as exc:
            code, status = _error_code(exc)
            if status == 404 or code in _NOT_FOUND_CODES:
                raise NotFound(f"copy {self._where(src)} failed: {code} (HTTP {status})") from None
            self._fail(exc, "copy", dst)
        except BotoCoreError as exc:
            self._fail(exc, "copy", dst)

    def delete(self, key: str) -> None:
        full = self._key(key)
        try:
            # S3 answers 204 for a missing key, so "missing is fine" needs no special case.
            self._client.delete_object(Bucket=self.bucket, Key=full)
        except (ClientError, BotoCoreError) as exc:
            self._fail(exc, "delete", full)

    def local_path(self, key: str) -> Path | None:
        check_key(key)
        return None


class _S3RawReader(io.RawIOBase):
    """The body of a GET as a raw stream that resumes with a ranged GET if the connection drops.

    Large CSVs are read for minutes; one reset socket should not fail a whole extract. The
    resume asks for the same ETag, so a reader never splices two versions of an object.
    """

    def __init__(self, store: S3Store, full_key: str, resp: dict[str, Any]) -> None:
        super().__init__()
        self._store = store
        self._key = full_key
        self._body = resp["Body"]
        self._etag = _strip_etag(resp["ETag"])
        self._size = int(resp["ContentLength"])
        self._pos = 0
        self._resumes = 0

    def readable(self) -> bool:
        return True

    def tell(self) -> int:
        # RawIOBase.tell would seek, which a network stream cannot; readers such as pyarrow
        # ask for the position only to report it.
        if self.closed:
            raise ValueError("I/O operation on closed file")
        return self._pos

    def readinto(self, buffer: Any) -> int:
        view = memoryview(buffer).cast("B")
        while True:
            try:
                n = int(self._body.readinto(view))
            except (
                ReadTimeoutError,
                ResponseStreamingError,
                IncompleteReadError,
                BotoConnectionError,
                ConnectionError,
            ) as exc:
                if self._pos >= self._size:
                    # Everything arrived; a ranged GET past the end would only answer 416.
                    return 0
                self._resume(exc)
                continue
            self._pos += n
            return n

    def readall(self) -> bytes:
        # RawIOBase.readall reads 8 KiB at a time; get_bytes of a large object would spend its
        # time in Python calls. The size is known, so fill one buffer.
        out = bytearray(max(self._size - self._pos, 0))
        filled = 0
        with memoryview(out) as view:
            while filled < len(out):
                n = self.readinto(view[filled:])
                if n == 0:
                    break
                filled += n
        del out[filled:]
        return bytes(out)

    def _resume(self, exc: Exception) -> None:
        if self._resumes >= _MAX_READ_RESUMES:
            self._store._fail(exc, "read", self._key)
        self._resumes += 1
        self._close_body()
        try:
            resp = self._store._client.get_object(
                Bucket=self._store.bucket,
                Key=self._key,
                Range=f"bytes={self._pos}-",
                IfMatch=f'"{self._etag}"',
            )
        except ClientError as err:
            code, status = _error_code(err)
            if status == 412 or code == "PreconditionFailed":
                raise StorageError(
                    f"read {self._store._where(self._key)}: object changed while reading"
                ) from None
            self._store._fail(err, "read", self._key)
        except BotoCoreError as err:
            self._store._fail(err, "read", self._key)
        self._body = resp["Body"]

    def _close_body(self) -> None:
        # A reset socket may fail to close; it is being dropped either way.
        with contextlib.suppress(Exception):
            self._body.close()

    def close(self) -> None:
        if not self.closed:
            self._close_body()
        super().close()
