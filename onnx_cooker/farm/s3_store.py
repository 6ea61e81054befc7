"""An S3 cook cache store (any S3-compatible server), through boto3, imported only when used."""

from __future__ import annotations

import functools
import hashlib
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from onnx_cooker.farm.store import CacheError
from onnx_cooker.fsutil import CHUNK_BYTES

# S3: fail in seconds when the server is down, not after minutes of retries.
S3_CONNECT_TIMEOUT = 5.0
S3_READ_TIMEOUT = 60.0
S3_ATTEMPTS = 2
# Objects up to this size go in one PUT (S3 takes up to 5 GiB in one); bigger ones in parts.
S3_SINGLE_PUT_LIMIT = 4 << 30
S3_PART_BYTES = 256 << 20
S3_PART_THREADS = 2  # parts in flight: build agents have few cores, and the cook has work of its own


@dataclass
class S3Store:
    """Objects in an S3 bucket under a prefix, through boto3 (imported only when used)."""

    bucket: str
    prefix: str
    client: Any = None
    description: str = ""
    # The process's own client (``_s3_client``), not one the caller passed, and the process it is of:
    # a forked child (a cook, onnx_cooker/isolate.py) that inherits this store must not use the parent's
    # pooled connections (their TLS state goes stale in the other process, and a child that dies
    # mid-request leaves the parent's next request inside its body). It makes its own.
    _own: bool = field(default=False, repr=False)
    _pid: int = field(default=0, repr=False)

    def __post_init__(self) -> None:
        self.description = self.description or f"s3://{self.bucket}/{self.prefix}".rstrip("/")
        if self.client is None:
            self.client, self._own, self._pid = _s3_client(), True, os.getpid()

    def _client(self) -> Any:
        if self._own and self._pid != os.getpid():
            self.client, self._pid = _s3_client(), os.getpid()  # the at-fork hook cleared its memo
        return self.client

    def _key(self, name: str) -> str:
        return f"{self.prefix.strip('/')}/{name}" if self.prefix.strip("/") else name

    def get(self, name: str) -> bytes | None:
        try:
            answer = self._client().get_object(Bucket=self.bucket, Key=self._key(name))
            return answer["Body"].read()
        except Exception as exc:  # botocore raises many types; absence is one code among them
            if _s3_code(exc) in ("NoSuchKey", "404", "NotFound"):
                return None
            raise CacheError(f"cannot read {self.description}/{name}: {_s3_reason(exc)}") from None

    def put(self, name: str, data: bytes) -> None:
        try:
            self._client().put_object(Bucket=self.bucket, Key=self._key(name), Body=data)
        except Exception as exc:
            raise CacheError(f"cannot write {self.description}/{name}: {_s3_reason(exc)}") from None

    def get_file(self, name: str, dest: Path) -> str | None:
        """The object streamed into ``dest`` and hashed on the way (never whole in memory)."""
        digest = hashlib.sha256()
        try:
            answer = self._client().get_object(Bucket=self.bucket, Key=self._key(name))
            with open(dest, "xb") as out:
                for chunk in answer["Body"].iter_chunks(CHUNK_BYTES):
                    digest.update(chunk)
                    out.write(chunk)
                out.flush()
                os.fsync(out.fileno())
        except Exception as exc:  # botocore raises many types; absence is one code among them
            dest.unlink(missing_ok=True)
            if _s3_code(exc) in ("NoSuchKey", "404", "NotFound"):
                return None
            raise CacheError(f"cannot read {self.description}/{name}: {_s3_reason(exc)}") from None
        return digest.hexdigest()

    def touch(self, name: str) -> None:
        """Nothing: S3 has no cheap way to mark a use; expire entries with a lifecycle rule."""

    def put_file(self, name: str, path: Path) -> None:
        """One PUT streamed from the file; in parts (multipart upload) past ``S3_SINGLE_PUT_LIMIT``.
        S3 shows an object only once its PUT or its multipart upload completed."""
        try:
            if path.stat().st_size <= S3_SINGLE_PUT_LIMIT:
                with path.open("rb") as body:
                    self._client().put_object(Bucket=self.bucket, Key=self._key(name), Body=body)
            else:
                from boto3.s3.transfer import TransferConfig

                parts = TransferConfig(
                    multipart_threshold=S3_PART_BYTES,
                    multipart_chunksize=S3_PART_BYTES,
                    max_concurrency=S3_PART_THREADS,
                )
                self._client().upload_file(str(path), self.bucket, self._key(name), Config=parts)
        except Exception as exc:
            raise CacheError(f"cannot write {self.description}/{name}: {_s3_reason(exc)}") from None


@functools.cache  # one client per process: a doit worker runs many cooks, creating one costs ~20 ms
def _s3_client() -> Any:
    try:
        import boto3
        from botocore.config import Config
    except ImportError:
        raise CacheError(
            "an s3:// cache needs boto3: pip install 'onnx-cooker[s3]' (or pip install boto3)"
        ) from None
    settings: dict[str, Any] = {
        "connect_timeout": S3_CONNECT_TIMEOUT,
        "read_timeout": S3_READ_TIMEOUT,
        "retries": {"total_max_attempts": S3_ATTEMPTS, "mode": "standard"},  # the first included
        # Every object is checked against the sha256 of its index: botocore's own CRC pass over each
        # upload and download (its default since 1.36) would hash the same bytes a second time.
        "request_checksum_calculation": "when_required",
        "response_checksum_validation": "when_required",
    }
    try:
        config = Config(**settings)
    except TypeError:  # botocore before 1.36: no such options (and no such default)
        del settings["request_checksum_calculation"], settings["response_checksum_validation"]
        config = Config(**settings)
    return boto3.client("s3", config=config)


if hasattr(os, "register_at_fork"):  # a forked cook (onnx_cooker/isolate.py) opens its own connections
    os.register_at_fork(after_in_child=_s3_client.cache_clear)


def _s3_code(exc: Exception) -> str:
    response = getattr(exc, "response", None) or {}
    return str(response.get("Error", {}).get("Code", ""))


def _s3_reason(exc: Exception) -> str:
    code = _s3_code(exc)
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    return f"{code}: {text}" if code and code not in text else text
