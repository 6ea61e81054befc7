"""The shared cook cache: a folder and a real S3-compatible server (moto's, on localhost, through the
real boto3 client). Hits, misses, uploads, poisoned entries, servers that are down or stop midway, a
read-only credential."""

from __future__ import annotations

import hashlib
import json
import re
import socket
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from onnx_cooker.build.run_job import cook
from onnx_cooker.cook.job import CookJob
from onnx_cooker.errors import CookError
from onnx_cooker.farm.cache import CookCache, _index_name, _object_name, entry_digest
from onnx_cooker.farm.folder_store import FolderStore
from onnx_cooker.farm.s3_store import S3_ATTEMPTS, S3Store
from onnx_cooker.farm.store import CacheConfig, CacheError, config_from_env
from onnx_cooker.layout import blob_path, cache_record_path, entry_path
from onnx_cooker.settings.assets import discover
from tests.models import RNG_SEED, conv_bn_relu_model, dense_model, mlp_model
from tests.s3server import S3Server, s3_server
from tests.test_cook import save, shipped_settings
from tests.test_reliability import TRACEBACK, assert_bundle_intact, doit, env, small_project

BUCKET = "cook-cache"


@pytest.fixture(scope="module")
def server() -> Iterator[S3Server]:
    with s3_server() as running:
        running.client().create_bucket(Bucket=BUCKET)
        yield running


def project(tmp_path: Path, build: str = "build") -> tuple[Path, Path]:
    assets = tmp_path / "assets"
    if not assets.exists():
        save(conv_bn_relu_model(), assets, "net")
    return assets, tmp_path / build


# ONNX blobs are byte-identical from cook to cook (ORT-format ones differ in a table's order), so
# that a re-cook can be compared with a cache hit byte for byte.
PLATFORM = "windows-dml"


def job(assets: Path, build: Path, platform: str = PLATFORM) -> CookJob:
    asset = next(a for a in discover(assets) if a.name == "net")
    settings = shipped_settings(platform)
    return CookJob(asset=asset, settings=settings, platform_dir=build / platform)


def outputs(build: Path) -> dict[str, bytes]:
    platform_dir = build / PLATFORM
    return {
        "blob": blob_path(platform_dir, "net", "onnx").read_bytes(),
        "entry": entry_path(platform_dir, "net").read_bytes(),
    }


def listed_object(root: Path, digest: str, role: str) -> Path:
    """The object a folder cache's index names for ``role`` (objects are named by their sha256)."""
    index = json.loads((root / _index_name(digest)).read_text())
    return root / _object_name(digest, role, index["files"][role]["sha256"])


def folder_cache(root: Path, **options: object) -> CookCache:
    return CookCache(CacheConfig(url=str(root), **options))


def s3_cache(server: S3Server, prefix: str, **options: object) -> CookCache:
    store = S3Store(bucket=BUCKET, prefix=prefix, client=server.client())
    return CookCache(CacheConfig(url=f"s3://{BUCKET}/{prefix}", **options), store=store)


def cache_maker(backend: str, tmp_path: Path, server: S3Server, prefix: str) -> Callable[[], CookCache]:
    """A fresh ``CookCache`` per call (one per cook, as each doit action makes), on one store."""
    if backend == "folder":
        return lambda: folder_cache(tmp_path / "cache")
    return lambda: s3_cache(server, prefix)


def test_settings_come_from_the_environment_and_bad_values_are_named() -> None:
    assert config_from_env({}) is None
    config = config_from_env(
        {"COOK_CACHE": "s3://b/p", "COOK_CACHE_MODE": "read", "COOK_CACHE_REQUIRED": "1"}
    )
    assert config == CacheConfig(url="s3://b/p", mode="read", required=True) and not config.writes
    with pytest.raises(CookError, match="COOK_CACHE_MODE='sometimes': use one of readwrite, read"):
        config_from_env({"COOK_CACHE": "/c", "COOK_CACHE_MODE": "sometimes"})
    with pytest.raises(CookError, match=r"COOK_CACHE='ftp://x': use a folder path, file:///path or s3://"):
        config_from_env({"COOK_CACHE": "ftp://x"})


@pytest.mark.parametrize("backend", ["folder", "s3"])
def test_a_second_build_folder_gets_the_same_outputs_from_the_cache_without_cooking(
    tmp_path: Path, server: S3Server, backend: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    assets, first = project(tmp_path, "first")
    make = cache_maker(backend, tmp_path, server, "p1")
    cooking = make()
    entry = cook(job(assets, first), cooking)
    assert not cooking.hit and cooking.notes == []

    import onnx_cooker.cook.run as cook_run
    import onnx_cooker.cook.variant as cook_variant

    def no_cooking(*args: object, **kwargs: object) -> None:
        raise AssertionError("a cache hit must not optimize anything")

    monkeypatch.setattr(cook_variant, "optimize", no_cooking)
    monkeypatch.setattr(cook_run, "optimize", no_cooking)
    _, second = project(tmp_path, "second")
    assembling = make()
    assert cook(job(assets, second), assembling) == entry
    assert assembling.hit and assembling.notes == []
    assert outputs(second) == outputs(first)  # byte for byte, blob and manifest entry


def test_a_changed_source_misses(tmp_path: Path) -> None:
    assets, build = project(tmp_path)
    cook(job(assets, build), folder_cache(tmp_path / "cache"))
    model = conv_bn_relu_model()
    model.graph.initializer[0].raw_data = bytes(len(model.graph.initializer[0].raw_data))
    save(model, assets, "net")
    again = folder_cache(tmp_path / "cache")
    cook(job(assets, build), again)
    assert not again.hit


def test_two_models_of_the_same_bytes_and_file_name_keep_an_entry_each(tmp_path: Path) -> None:
    """assets/a/net.onnx and assets/b/net.onnx, the same bytes (or a model moved into a folder on one
    branch): one cook key made each refuse the other's entry ("for another name") and overwrite it
    at every cook. Each has its own key now, and a fresh build takes both from the cache."""
    assets = tmp_path / "assets"
    for folder in ("a", "b"):
        save(conv_bn_relu_model(), assets / folder, "net")

    def job_of(name: str, build: Path) -> CookJob:
        asset = next(a for a in discover(assets) if a.name == name)
        return CookJob(asset=asset, settings=shipped_settings(PLATFORM), platform_dir=build / PLATFORM)

    keys = {name: job_of(name, tmp_path / "one").task_key for name in ("a/net", "b/net")}
    assert keys["a/net"] != keys["b/net"]
    for build in ("one", "two"):
        for name in ("a/net", "b/net"):
            cache = folder_cache(tmp_path / "cache")
            cook(job_of(name, tmp_path / build), cache)
            assert cache.notes == [], cache.notes  # no entry refused as another model's
            assert cache.hit == (build == "two"), (build, name)


def _poison_blob(store: FolderStore | S3Store, cook_key: str, blob: bytes) -> None:
    """Replace an entry's blob with other bytes and make its index agree (as a broken or hostile
    writer could): only the checks against the key and the entry can catch it."""
    digest, sha256 = entry_digest(cook_key), hashlib.sha256(blob).hexdigest()
    store.put(_object_name(digest, "blob", sha256), blob)
    index = json.loads(store.get(_index_name(digest)))
    index["files"]["blob"] = {"size": len(blob), "sha256": sha256}
    store.put(_index_name(digest), json.dumps(index).encode())


@pytest.mark.parametrize("backend", ["folder", "s3"])
def test_a_poisoned_entry_is_refused_in_one_line_cooked_again_and_overwritten(
    tmp_path: Path, server: S3Server, backend: str
) -> None:
    assets, first = project(tmp_path, "first")
    make = cache_maker(backend, tmp_path, server, "p2")
    entry = cook(job(assets, first), make())
    # The blob of another platform's cook of the same model: a valid blob, with the wrong cook key.
    other = cook(job(assets, tmp_path / "other", "console"), None)
    store = make()._store()
    _poison_blob(
        store, entry["cook_key"], blob_path(tmp_path / "other" / "console", "net", "ort").read_bytes()
    )
    assert other["cook_key"] != entry["cook_key"]

    _, second = project(tmp_path, "second")
    refusing = make()
    assert cook(job(assets, second), refusing) == entry  # cooked again, locally
    assert not refusing.hit
    (note,) = refusing.notes
    assert note.startswith("warning: cook cache entry") and "refused, cooked again" in note
    assert " (net for windows-dml) refused" in note  # which cook, among -n N interleaved lines
    assert "\n" not in note
    assert outputs(second) == outputs(first)
    # The re-cook overwrote the entry: the next agent hits again.
    _, third = project(tmp_path, "third")
    hitting = make()
    cook(job(assets, third), hitting)
    assert hitting.hit and outputs(third) == outputs(first)


def test_a_reupload_of_a_key_killed_midway_leaves_its_entry_whole(tmp_path: Path) -> None:
    """Two agents cook one key (ORT blobs differ from cook to cook); the second is killed after its
    blob object. With one object name per role its blob replaced the first's under the first's
    index, and every reader refused the entry after; objects are named by content now."""
    assets, first = project(tmp_path, "first")
    entry = cook(job(assets, first), folder_cache(tmp_path / "cache"))
    digest = entry_digest(entry["cook_key"])
    listed = listed_object(tmp_path / "cache", digest, "blob")
    other = b"another agent's blob of the same cook key"
    FolderStore(tmp_path / "cache").put(
        _object_name(digest, "blob", hashlib.sha256(other).hexdigest()), other
    )
    assert listed.exists() and len(list(listed.parent.glob("blob.*"))) == 2
    hitting = folder_cache(tmp_path / "cache")
    cook(job(assets, tmp_path / "second"), hitting)
    assert hitting.hit and hitting.notes == [] and outputs(tmp_path / "second") == outputs(first)


def test_damaged_bytes_under_a_valid_index_are_refused(tmp_path: Path) -> None:
    assets, first = project(tmp_path, "first")
    entry = cook(job(assets, first), folder_cache(tmp_path / "cache"))
    digest = entry_digest(entry["cook_key"])
    blob_object = listed_object(tmp_path / "cache", digest, "blob")
    damaged = bytearray(blob_object.read_bytes())
    damaged[-10] ^= 0xFF
    blob_object.write_bytes(bytes(damaged))
    refusing = folder_cache(tmp_path / "cache")
    cook(job(assets, tmp_path / "second"), refusing)
    assert not refusing.hit and "does not match the size and sha256 of its index" in refusing.notes[0]


def test_a_server_that_is_down_costs_one_warning_unless_the_cache_is_required(tmp_path: Path) -> None:
    from tests.s3server import free_port

    assets, build = project(tmp_path)
    down = S3Store(
        bucket=BUCKET, prefix="x", client=S3Server(f"http://127.0.0.1:{free_port()}", None).client()
    )
    cache = CookCache(CacheConfig(url=f"s3://{BUCKET}/x"), store=down)
    entry = cook(job(assets, build), cache)
    assert entry["verification"]["outputs"][0]["ok"] is True
    (note,) = cache.notes  # the failed lookup; the upload is not tried again
    assert note.startswith(
        "warning: cook cache unusable, cooking locally: cannot read s3://cook-cache/x/index/"
    )
    required = CookCache(CacheConfig(url=f"s3://{BUCKET}/x", required=True), store=down)
    with pytest.raises(CacheError, match=r"required \(COOK_CACHE_REQUIRED=1\) but unusable"):
        cook(job(assets, tmp_path / "again"), required)


class _ClosingServer:
    """A broken S3 endpoint: it accepts each connection and closes it at once, counting them."""

    def __init__(self) -> None:
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port, self.connections = self.sock.getsockname()[1], 0
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.connections += 1
            conn.close()


def test_in_one_doit_run_the_first_cook_that_finds_the_cache_down_spares_the_others_the_wait(
    tmp_path: Path,
) -> None:
    # Every cook of a run used to wait for a cache that is down in turn (an unreachable endpoint:
    # 5 s a connection attempt; a hung server: 60 s a read), and warned once each. Two cooks and a
    # runtime check here: one warning, and one cook's attempts at the server.
    down = _ClosingServer()
    endpoint = {"AWS_ENDPOINT_URL": f"http://127.0.0.1:{down.port}"}
    credentials = {"AWS_ACCESS_KEY_ID": "x", "AWS_SECRET_ACCESS_KEY": "y", "AWS_DEFAULT_REGION": "us-east-1"}
    project = small_project(tmp_path / "agent")
    run = doit(project, "cook", COOK_CACHE=f"s3://{BUCKET}/down", **endpoint, **credentials)
    output = run.stdout + run.stderr
    assert run.returncode == 0, output
    assert output.count("warning: cook cache unusable, cooking locally") == 1, output
    assert 1 <= down.connections <= S3_ATTEMPTS, down.connections
    assert re.search(r"^cook cache: 0 hits, 0 misses, 2 cooked without it \(unusable\)", run.stdout, re.M)
    assert_bundle_intact(project / "build" / "android", {"net", "mlp"})
    # The next run tries the cache again (it may be back), once.
    before = down.connections
    changed = dense_model(8, 4, batch=1, seed=RNG_SEED + 9, activation="Sigmoid", name="mlp")
    (project / "assets" / "mlp.onnx").write_bytes(changed.SerializeToString())
    again = doit(project, "cook", COOK_CACHE=f"s3://{BUCKET}/down", **endpoint, **credentials)
    assert again.returncode == 0, again.stdout + again.stderr
    assert (again.stdout + again.stderr).count("warning: cook cache unusable") == 1
    assert 1 <= down.connections - before <= S3_ATTEMPTS


def test_a_server_that_stops_mid_upload_leaves_no_readable_half_entry(tmp_path: Path) -> None:
    assets, build = project(tmp_path)
    with s3_server() as short_lived:
        short_lived.client().create_bucket(Bucket=BUCKET)
        store = S3Store(bucket=BUCKET, prefix="p", client=short_lived.client())
        real_put = store.put_file

        def put_then_die(name: str, path: Path) -> None:
            real_put(name, path)
            short_lived.stop()  # the first object arrived; the server is gone for the rest

        store.put_file = put_then_die  # type: ignore[method-assign]
        cache = CookCache(CacheConfig(url=f"s3://{BUCKET}/p"), store=store)
        cook(job(assets, build), cache)
        assert "cook cache unusable" in cache.notes[0]
    # The same thing against a folder: the index is written last, so a reader sees no entry at all.
    folder = FolderStore(tmp_path / "cache")
    written: list[str] = []

    def stop_before_index(name: str, data: bytes) -> None:
        raise CacheError("the agent was stopped")

    def put_file(name: str, path: Path) -> None:
        written.append(name)
        FolderStore.put_file(folder, name, path)

    folder.put = stop_before_index  # type: ignore[method-assign]  # objects go by put_file, the index by put
    folder.put_file = put_file  # type: ignore[method-assign]
    cook(job(assets, tmp_path / "b2"), CookCache(CacheConfig(url=str(tmp_path / "cache")), store=folder))
    assert written and all(name.startswith("objects/") for name in written)
    reader = folder_cache(tmp_path / "cache")
    cook(job(assets, tmp_path / "b3"), reader)
    assert not reader.hit and reader.notes == []  # a clean miss, no complaint


def test_a_server_that_stops_mid_download_means_a_local_cook(tmp_path: Path) -> None:
    assets, build = project(tmp_path)
    with s3_server() as short_lived:
        short_lived.client().create_bucket(Bucket=BUCKET)
        cook(job(assets, build), s3_cache(short_lived, "p"))
        store = S3Store(bucket=BUCKET, prefix="p", client=short_lived.client())
        real_get = store.get

        def get_then_die(name: str) -> bytes | None:
            data = real_get(name)
            short_lived.stop()  # the index arrived; the objects will not
            return data

        store.get = get_then_die  # type: ignore[method-assign]
        cache = CookCache(CacheConfig(url=f"s3://{BUCKET}/p"), store=store)
        entry = cook(job(assets, tmp_path / "second"), cache)
    assert not cache.hit and "cook cache unusable" in cache.notes[0]
    assert outputs(tmp_path / "second")["entry"] == outputs(build)["entry"]
    assert entry["verification"]["outputs"][0]["ok"] is True


def test_a_read_only_credential_reads_hits_and_never_fails_a_cook(tmp_path: Path) -> None:
    assets, build = project(tmp_path)
    # Requests after the first 7 (the setup below) are checked against IAM users and policies.
    with s3_server(unauthenticated_requests=7) as server:
        admin = server.client()
        admin.create_bucket(Bucket=BUCKET)
        iam = __import__("boto3").client("iam", **_iam_args(server))
        keys = {}
        for user, actions in (("agent", ["s3:*"]), ("developer", ["s3:GetObject", "s3:ListBucket"])):
            iam.create_user(UserName=user)
            document = {
                "Version": "2012-10-17",
                "Statement": [{"Effect": "Allow", "Action": actions, "Resource": "*"}],
            }
            iam.put_user_policy(UserName=user, PolicyName=f"{user}-s3", PolicyDocument=json.dumps(document))
            made = iam.create_access_key(UserName=user)["AccessKey"]
            keys[user] = (made["AccessKeyId"], made["SecretAccessKey"])

        marker = tmp_path / "cache-unusable.json"

        def cache_for(user: str, mode: str, run: str = "") -> CookCache:
            store = S3Store(bucket=BUCKET, prefix="ro", client=server.client(*keys[user]))
            config = CacheConfig(url=f"s3://{BUCKET}/ro", mode=mode, run_marker=str(marker), run=run)
            return CookCache(config, store=store)

        # A developer machine with a read-only key, configured readwrite by mistake: its upload is
        # refused by the server, one warning, and the cook itself succeeds.
        mistaken = cache_for("developer", "readwrite", run="run-1")
        cook(job(assets, build), mistaken)
        assert len(mistaken.notes) == 1 and "AccessDenied" in mistaken.notes[0]
        # The run's next cook reads the cache but does not try to upload again (nor warn); another
        # run tries again.
        same_run = cache_for("developer", "readwrite", run="run-1")
        assert same_run.config.mode == "read"
        cook(job(assets, tmp_path / "same-run"), same_run)
        assert same_run.notes == [] and same_run.bytes_up == 0
        assert cache_for("developer", "readwrite", run="run-2").config.mode == "readwrite"
        cook(job(assets, tmp_path / "agent"), cache_for("agent", "readwrite"))  # CI fills the cache
        reading = cache_for("developer", "read")
        cook(job(assets, tmp_path / "dev"), reading)
        assert reading.hit and reading.notes == []


def _iam_args(server: S3Server) -> dict[str, str]:
    return {
        "endpoint_url": server.endpoint,
        "aws_access_key_id": "testing",
        "aws_secret_access_key": "testing",
        "region_name": "us-east-1",
    }


# --- whole `doit cook` runs in a subprocess: agents sharing one cache --------------------------------


def agent(tmp_path: Path, name: str) -> Path:
    """A fresh checkout on another agent: the project's code and assets, no build folder, no doit state."""
    return small_project(tmp_path / name)


def cooked_tasks(output: str) -> list[str]:
    """The cook sub-tasks doit ran (it prints ".  cook:<platform>:<model>" before each)."""
    return [
        line.split()[1]
        for line in output.splitlines()
        if line.startswith(".  cook:") and line.count(":") == 2
    ]


def models_of(project: Path) -> dict:
    return json.loads((project / "build" / "android" / "manifest.json").read_text())["models"]


@pytest.mark.slow
def test_one_agent_cooks_another_assembles_the_same_bundle_from_s3_with_zero_cooks(
    tmp_path: Path, server: S3Server
) -> None:
    cache = {"COOK_CACHE": f"s3://{BUCKET}/agents", **server.env()}
    first = agent(tmp_path, "ci-agent")
    cooking = doit(first, "cook", **cache)
    assert cooking.returncode == 0, cooking.stdout + cooking.stderr
    assert "from the cook cache" not in cooking.stdout

    second = agent(tmp_path, "other-agent")
    assembling = doit(second, "cook", **cache)
    assert assembling.returncode == 0, assembling.stdout + assembling.stderr
    ran = cooked_tasks(assembling.stdout)
    assert sorted(ran) == ["cook:android:mlp", "cook:android:net"]
    # Both cooks and the runtime check's report came from the cache: nothing cooked, nothing checked.
    assert assembling.stdout.count("(from the cook cache)") == 3 and "warning" not in assembling.stdout
    assert "load and match in onnxruntime" in assembling.stdout
    assert models_of(second) == models_of(first)  # the same blobs, byte for byte (ORT ones included)
    assert_bundle_intact(second / "build" / "android", {"net", "mlp"})
    # The end-of-run summary: hits, misses, bytes in and up, the cook time the hits saved.
    assert re.search(
        r"^cook cache: 0 hits, 2 misses; 0 B in, [\d.]+ [kMG]B up; about 0:\d\d", cooking.stdout, re.M
    )
    assert re.search(r"^cook cache: 2 hits, 0 misses; [\d.]+ [kMG]B in, 0 B up; ", assembling.stdout, re.M)
    records = [
        json.loads(cache_record_path(second / "build" / "android", name).read_text())
        for name in ("net", "mlp")
    ]
    sizes = [
        path.stat().st_size
        for path in (second / "build" / "android" / ".entries").glob("*.*")
        if path.is_file()
    ]
    assert sum(r["bytes_in"] for r in records) == sum(sizes)  # blob, entry and verification data of each
    assert all(r["result"] == "hit" and r["saved_s"] >= 0 and r["bytes_up"] == 0 for r in records), records


@pytest.mark.slow
def test_two_shards_cook_concurrently_into_a_folder_cache_then_one_run_assembles_everything(
    tmp_path: Path,
) -> None:
    cache = {"COOK_CACHE": str(tmp_path / "shared-cache")}
    shards = [agent(tmp_path, f"shard-{i}") for i in range(2)]
    running = [
        subprocess.Popen(
            [sys.executable, "-m", "doit", "cook"],
            cwd=project,
            env=env(COOK_SHARD=f"{i}/2", **cache),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for i, project in enumerate(shards)
    ]
    outputs = [process.communicate(timeout=600)[0] for process in running]
    assert all(process.returncode == 0 for process in running), outputs
    shares = [cooked_tasks(output) for output in outputs]
    # Each model cooked exactly once, by one shard; no shard writes a manifest.
    assert sorted(shares[0] + shares[1]) == ["cook:android:mlp", "cook:android:net"] and all(shares)
    assert not any((project / "build" / "android" / "manifest.json").exists() for project in shards)

    # Each shard ran the runtime check of its own share, and stored one report per model.
    assert all("android: 1 model(s) load and match in onnxruntime" in output for output in outputs)

    assembler = agent(tmp_path, "assemble")
    assembled = doit(assembler, "cook", **cache)
    assert assembled.returncode == 0, assembled.stdout + assembled.stderr
    assert assembled.stdout.count("(from the cook cache)") == 3  # two cooks and the runtime check
    (check_line,) = [line for line in assembled.stdout.splitlines() if "load and match" in line]
    assert check_line.startswith("android: 2 model(s)") and check_line.endswith("(from the cook cache)")
    assert_bundle_intact(assembler / "build" / "android", {"net", "mlp"})


@pytest.mark.slow
def test_a_shard_without_a_cache_is_refused_with_the_fix(tmp_path: Path) -> None:
    project = agent(tmp_path, "p")
    run = doit(project, "cook", COOK_SHARD="0/2")
    assert run.returncode != 0
    assert (
        "COOK_SHARD=0/2 cooks a share of the models into the shared cook cache, so it needs COOK_CACHE"
        in (run.stdout + run.stderr)
    )
    assert TRACEBACK not in run.stdout + run.stderr
    bad = doit(project, "cook", COOK_SHARD="2/2", COOK_CACHE=str(tmp_path / "c"))
    assert "COOK_SHARD='2/2': use i/N with 0 <= i < N" in bad.stdout + bad.stderr


def test_a_runtime_check_report_is_reused_only_for_the_same_blobs_version_and_a_pass(tmp_path: Path) -> None:
    report = {"onnxruntime": "1.24.4", "models": {"net": {"ok": True}, "mlp": {"ok": True}}}
    writer = folder_cache(tmp_path / "cache")
    writer.upload_check("key-1", report)
    reader = folder_cache(tmp_path / "cache")
    assert reader.fetch_check("key-1", "1.24.4", ["net", "mlp"]) == report and reader.hit
    assert folder_cache(tmp_path / "cache").fetch_check("key-2", "1.24.4", ["net"]) is None  # other blobs
    wrong_version = folder_cache(tmp_path / "cache")
    assert wrong_version.fetch_check("key-1", "1.28.0", ["net"]) is None
    assert "refused, checking again" in wrong_version.notes[0]
    failed = {"onnxruntime": "1.24.4", "models": {"net": {"ok": False, "error": "boom"}}}
    writer.upload_check("key-3", failed)
    assert folder_cache(tmp_path / "cache").fetch_check("key-3", "1.24.4", ["net"]) is None
    read_only = folder_cache(tmp_path / "ro", mode="read")
    read_only.upload_check("key-4", report)
    assert not (tmp_path / "ro").exists()  # read mode never writes


def _rewrite(store: FolderStore, cook_key: str, role: str, data: bytes | None) -> None:
    """Replace (or drop) one part of an entry and make its index agree, as a broken writer could."""
    digest = entry_digest(cook_key)
    index = json.loads(store.get(_index_name(digest)))
    if data is None:
        del index["files"][role]
    else:
        sha256 = hashlib.sha256(data).hexdigest()
        store.put(_object_name(digest, role, sha256), data)
        index["files"][role] = {"size": len(data), "sha256": sha256}
    store.put(_index_name(digest), json.dumps(index).encode())


@pytest.mark.parametrize(
    "damage",
    ["entry lacks its verification", "entry is a list", "verify part missing", "index lists a string"],
)
def test_malformed_entries_with_agreeing_indexes_are_refused_never_written(
    tmp_path: Path, damage: str
) -> None:
    assets, first = project(tmp_path, "first")
    entry = cook(job(assets, first), folder_cache(tmp_path / "cache"))
    store = FolderStore(tmp_path / "cache")
    if damage == "entry lacks its verification":
        broken = {k: v for k, v in entry.items() if k != "verification"}
        _rewrite(store, entry["cook_key"], "entry", json.dumps(broken).encode())
    elif damage == "entry is a list":
        _rewrite(store, entry["cook_key"], "entry", b"[1, 2]")
    elif damage == "verify part missing":
        _rewrite(store, entry["cook_key"], "verify", None)
    else:
        digest = entry_digest(entry["cook_key"])
        index = json.loads(store.get(_index_name(digest)))
        index["files"]["blob"] = "not a mapping"
        store.put(_index_name(digest), json.dumps(index).encode())
    refusing = folder_cache(tmp_path / "cache")
    assert cook(job(assets, tmp_path / "second"), refusing) == entry  # cooked again, locally
    assert not refusing.hit and "refused, cooked again" in refusing.notes[0]
    assert outputs(tmp_path / "second") == outputs(first)


def imported_modules(stderr: str) -> set[str]:
    """The modules a process tree imported, from ``PYTHONPROFILEIMPORTTIME=1``'s lines on stderr."""
    return {line.rsplit("|", 1)[1].strip() for line in stderr.splitlines() if line.startswith("import time:")}


@pytest.mark.slow
def test_cache_hits_need_neither_the_cooks_modules_nor_a_child_and_a_miss_still_cooks_isolated(
    tmp_path: Path,
) -> None:
    """A warm cache's `doit cook` imports no onnx, onnxruntime or torch (seconds a process): each hit
    is looked up and put in place in doit's own process. A miss is cooked in a forked child as
    before, and keeps what the lookup measured."""
    from onnx_cooker.layout import step_times_path

    cache = {"COOK_CACHE": str(tmp_path / "cache")}
    first = agent(tmp_path, "first")
    assert doit(first, "-n", "2", "cook", **cache).returncode == 0
    second = agent(tmp_path, "second")
    hits = doit(second, "-n", "2", "cook", PYTHONPROFILEIMPORTTIME="1", **cache)
    assert hits.returncode == 0, hits.stdout + hits.stderr
    assert hits.stdout.count("(from the cook cache)") == 3, hits.stdout
    imported = imported_modules(hits.stderr)
    assert "onnx_cooker.build.outputs" in imported  # the import log covers the workers that ran the hits
    heavy = {"onnx", "onnxruntime", "torch"}
    assert not heavy & imported, sorted(heavy & imported)
    assert models_of(second) == models_of(first)

    (second / "assets" / "mlp.cook.yaml").write_text("compression_level: 5\n")  # another cook key: a miss
    miss = doit(second, "cook", PYTHONPROFILEIMPORTTIME="1", **cache)
    assert miss.returncode == 0, miss.stdout + miss.stderr
    assert cooked_tasks(miss.stdout) == ["cook:android:mlp"] and "(from the cook cache)" not in miss.stdout
    assert {"onnx", "onnxruntime"} <= imported_modules(miss.stderr)
    record = json.loads(cache_record_path(second / "build" / "android", "mlp").read_text())
    assert record["result"] == "miss" and record["bytes_up"] > 0, record
    steps = json.loads(step_times_path(second / "build" / "android", "mlp").read_text())
    assert "cook cache lookup" in steps and "write the outputs" in steps and len(steps) > 4, steps  # both
    assert_bundle_intact(second / "build" / "android", {"net", "mlp"})


def test_a_fresh_agent_hashes_each_source_once_not_once_per_platform(tmp_path: Path) -> None:
    """On a fresh agent, the first platform's hit hashes the model's sources; the other platforms'
    hits take those digests (the files are unchanged since) and never read the sources."""
    from onnx_cooker.layout import step_times_path

    assets, first = project(tmp_path, "first")
    platforms = ("windows-dml", "console")
    firsts = [cook(job(assets, first, p), folder_cache(tmp_path / "cache")) for p in platforms]
    _, second = project(tmp_path, "second")
    hits = [folder_cache(tmp_path / "cache") for _ in platforms]
    entries = [cook(job(assets, second, p), cache) for p, cache in zip(platforms, hits, strict=True)]
    assert all(cache.hit for cache in hits) and entries == firsts and outputs(second) == outputs(first)
    steps = [json.loads(step_times_path(second / p, "net").read_text()) for p in platforms]
    assert "read and hash the sources" in steps[0] and "read and hash the sources" not in steps[1]
    assert entries[1]["source_sha256"] == hashlib.sha256((assets / "net.onnx").read_bytes()).hexdigest()

    (assets / "net.onnx").write_bytes((assets / "net.onnx").read_bytes())  # rewritten: new ctime
    again = folder_cache(tmp_path / "cache")
    cook(job(assets, second, "console"), again)  # second's memo no longer matches the file
    assert again.hit
    assert "read and hash the sources" in json.loads(step_times_path(second / "console", "net").read_text())


def test_a_hit_counts_the_cook_time_its_entry_recorded_as_saved(tmp_path: Path) -> None:
    """The index records how long the entry's cook took; a hit saves that less its own time."""
    import time

    assets, build = project(tmp_path)
    slow = folder_cache(tmp_path / "cache")
    slow.started = time.monotonic() - 100.0  # as if this cook had taken 100 s
    cook(job(assets, build), slow)
    assert slow.record() == {
        "result": "miss",
        "bytes_in": 0,
        "bytes_up": sum(p.stat().st_size for p in (tmp_path / "cache" / "objects").rglob("*") if p.is_file()),
        "saved_s": 0.0,
    }
    (index,) = (tmp_path / "cache" / "index").rglob("*.json")
    took = json.loads(index.read_text())["cook_seconds"]
    assert took >= 100.0
    hit = folder_cache(tmp_path / "cache")
    cook(job(assets, tmp_path / "second"), hit)
    record = hit.record()
    assert record["result"] == "hit" and took - 1.0 <= record["saved_s"] < took and record["bytes_up"] == 0
    assert record["bytes_in"] == slow.record()["bytes_up"]


def test_a_forked_cook_makes_its_own_s3_client_and_leaves_the_parents_connections_alone(
    server: S3Server, monkeypatch: pytest.MonkeyPatch
) -> None:
    """doit's process looks a cook up (opening the store and its pooled connections), then forks the
    cook's child, which inherits that store: the child must talk to S3 through a client of its own
    (a parent's TLS connection used by the child goes stale in the parent, and a child that dies
    mid-request leaves the parent's next request inside its body). A client the caller passed in is
    the caller's business and stays."""
    import os

    from onnx_cooker.farm import s3_store

    for key, value in server.env().items():
        monkeypatch.setenv(key, value)
    s3_store._s3_client.cache_clear()
    store = S3Store(bucket=BUCKET, prefix="forked")
    parents = store.client
    assert store.get("index/none.json") is None  # the parent's lookup: its pool holds a connection
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the cook's child
        try:
            store.put("objects/from-child", b"cooked")
            os.write(write, b"own" if store.client is not parents else b"parent's")
        finally:
            os._exit(0)
    os.close(write)
    with os.fdopen(read, "rb") as pipe:
        said = pipe.read()
    os.waitpid(pid, 0)
    assert said == b"own"
    assert store.get("objects/from-child") == b"cooked" and store.client is parents
    given = server.client()
    assert S3Store(bucket=BUCKET, prefix="forked", client=given)._client() is given
    s3_store._s3_client.cache_clear()


def test_s3_objects_stream_both_ways_and_big_ones_go_up_in_parts(
    tmp_path: Path, server: S3Server, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Past S3_SINGLE_PUT_LIMIT an object is uploaded in parts (here lowered from 4 GiB to 6 MiB,
    parts of S3's 5 MiB minimum); either way it comes back whole, with the sha256 of its bytes."""
    import hashlib

    import onnx_cooker.farm.s3_store as s3_store_module

    monkeypatch.setattr(s3_store_module, "S3_SINGLE_PUT_LIMIT", 6 << 20)
    monkeypatch.setattr(s3_store_module, "S3_PART_BYTES", 5 << 20)
    store = S3Store(bucket=BUCKET, prefix="parts", client=server.client())
    rng = __import__("numpy").random.default_rng(7)
    for name, size in (("small", 1 << 20), ("big", (12 << 20) + 123)):
        source = tmp_path / name
        source.write_bytes(rng.integers(0, 256, size, dtype="uint8").tobytes())
        store.put_file(name, source)
        fetched = tmp_path / f"{name}.back"
        assert store.get_file(name, fetched) == hashlib.sha256(source.read_bytes()).hexdigest()
        assert fetched.read_bytes() == source.read_bytes()
    parts = server.client().head_object(Bucket=BUCKET, Key="parts/big")["ETag"]
    assert parts.strip('"').endswith("-3")  # a multipart upload's ETag counts its parts
    assert store.get_file("absent", tmp_path / "absent") is None and not (tmp_path / "absent").exists()


def test_a_folder_cache_on_the_builds_file_system_shares_files_by_hard_link_and_stays_checked(
    tmp_path: Path,
) -> None:
    """Upload and hit are hard links (no bytes written); a build file edited in place changes the
    cache's object too, which the next reader refuses by its sha256 and cooks again."""
    assets, first = project(tmp_path, "first")
    cook(job(assets, first), folder_cache(tmp_path / "cache"))
    digest = entry_digest(json.loads(outputs(first)["entry"])["cook_key"])
    cached_blob = listed_object(tmp_path / "cache", digest, "blob")
    first_blob = blob_path(first / PLATFORM, "net", "onnx")
    assert cached_blob.samefile(first_blob)  # the upload linked the build's file
    _, second = project(tmp_path, "second")
    hit = folder_cache(tmp_path / "cache")
    cook(job(assets, second), hit)
    second_blob = blob_path(second / PLATFORM, "net", "onnx")
    original = outputs(first)
    assert hit.hit and second_blob.samefile(cached_blob) and outputs(second) == original

    with second_blob.open("r+b") as stream:  # what no cooker step does: a rewrite in place
        stream.seek(-20, 2)  # the last bytes of the weights, before the 16-byte trailer
        last = stream.read(4)
        stream.seek(-20, 2)
        stream.write(bytes(byte ^ 0xFF for byte in last))
    _, third = project(tmp_path, "third")
    reader = folder_cache(tmp_path / "cache")
    entry = cook(job(assets, third), reader)
    assert not reader.hit and "does not match the size and sha256 of its index" in reader.notes[0]
    assert entry["verification"]["outputs"][0]["ok"] is True
    assert outputs(third) == original  # cooked again, and the entry overwritten with good bytes
    assert cached_blob.samefile(blob_path(third / PLATFORM, "net", "onnx"))


def test_folder_urls_name_the_folder_on_every_system() -> None:
    from onnx_cooker.farm.store import folder_path

    assert folder_path("file:///mnt/share/cook%20cache") == Path("/mnt/share/cook cache")
    assert folder_path("file:///C:/cook-cache") == Path("C:/cook-cache")
    assert folder_path("/mnt/share/cache") == Path("/mnt/share/cache")
    assert folder_path("~/cache") == Path.home() / "cache"


@pytest.mark.parametrize("backend", ["folder", "s3"])
def test_a_miss_caused_only_by_other_tool_versions_says_so(
    tmp_path: Path, server: S3Server, backend: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from onnx_cooker.build.outputs import from_cache
    from onnx_cooker.cook import key

    assets, first = project(tmp_path, "first")
    make = cache_maker(backend, tmp_path, server, "v1")
    cook(job(assets, first), make())  # cooked and stored with this machine's onnx and onnxruntime
    ours = dict(key.tool_versions())

    same = make()  # the same versions: a hit, no note
    assert from_cache(job(assets, tmp_path / "same"), same)[0] is not None and same.notes == []

    monkeypatch.setattr(key, "tool_versions", lambda: {"onnx": "1.0.0", "onnxruntime": "1.0.1"})
    other = make()  # another machine, other releases: a miss, and why
    assert from_cache(job(assets, tmp_path / "other"), other)[0] is None
    (note,) = other.notes
    assert note.startswith("note: cook cache miss for net (windows-dml) only because of tool versions")
    assert f"cooked with onnx {ours['onnx']}, onnxruntime {ours['onnxruntime']}" in note
    assert "this machine has onnx 1.0.0, onnxruntime 1.0.1" in note and "constraints.txt" in note

    save(mlp_model(), tmp_path / "assets", "net")  # another model under the same name: no such note
    changed = make()
    assert from_cache(job(assets, tmp_path / "changed"), changed)[0] is None and changed.notes == []
