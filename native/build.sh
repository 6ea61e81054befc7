#!/usr/bin/env bash
# Build onnx-cooker's native loader: bash native/build.sh [OUT_DIR]   (default: native/out)
#
# Idempotent. Installs the Debian packages it needs when run as root (libzstd, cJSON, libsodium,
# zlib, cmake), fetches onnxruntime's C API headers from Debian's package archive (pinned by
# sha256; nothing from other projects is kept in the repository), then builds two trees:
#   OUT_DIR/release  libonnx_cooker.so, oc-run             (optimized: the benchmarks use it)
#   OUT_DIR/asan     the same plus the tests, under AddressSanitizer and UBSan (the tests use it)
# The library loads libonnxruntime at run time: point oc-run at one with --ort or OC_ORT_LIBRARY.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
OUT="$(mkdir -p "${1:-$HERE/out}" && cd "${1:-$HERE/out}" && pwd)"

ORT_HEADERS_DEB="libonnxruntime-dev_1.21.0+dfsg-1_amd64.deb"
ORT_HEADERS_SHA256="14f7d959d5deacbcf1504830d4189f91fc67382b399ed9ae9d3aa9c4050ced08"
ORT_HEADERS_URLS=(
  "http://deb.debian.org/debian/pool/main/o/onnxruntime/$ORT_HEADERS_DEB"
  "https://snapshot.debian.org/archive/debian/20250601T000000Z/pool/main/o/onnxruntime/$ORT_HEADERS_DEB"
)
PACKAGES=(libzstd-dev libcjson-dev libsodium-dev zlib1g-dev cmake pkg-config gcc g++)

say() { echo "[native/build.sh] $*" >&2; }

need_packages() {
  command -v cmake >/dev/null && command -v pkg-config >/dev/null && command -v g++ >/dev/null \
    && pkg-config --exists libzstd libcjson libsodium zlib
}

if ! need_packages; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    say "installing ${PACKAGES[*]}"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${PACKAGES[@]}" >/dev/null \
      || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${PACKAGES[@]}" >/dev/null; }
  else
    say "missing build dependencies: install ${PACKAGES[*]} (Debian/Ubuntu names) and run again"
    exit 1
  fi
fi

ORT_INCLUDE="$OUT/_deps/onnxruntime/include"
if [ ! -f "$ORT_INCLUDE/onnxruntime_c_api.h" ]; then
  mkdir -p "$OUT/_deps"
  deb="$OUT/_deps/$ORT_HEADERS_DEB"
  for url in "${ORT_HEADERS_URLS[@]}"; do
    [ -f "$deb" ] && break
    say "fetching onnxruntime's C API headers: $url"
    if command -v curl >/dev/null; then
      curl -fsSL --retry 3 -o "$deb.part" "$url" && mv "$deb.part" "$deb" || rm -f "$deb.part"
    else # no curl: Python's standard library
      python3 -c 'import sys, urllib.request; urllib.request.urlretrieve(sys.argv[1], sys.argv[2])' "$url" "$deb.part" \
        && mv "$deb.part" "$deb" || rm -f "$deb.part"
    fi
  done
  [ -f "$deb" ] || { say "could not download $ORT_HEADERS_DEB"; exit 1; }
  echo "$ORT_HEADERS_SHA256  $deb" | sha256sum -c --quiet - \
    || { say "$deb does not have the pinned sha256; delete it and run again"; rm -f "$deb"; exit 1; }
  rm -rf "$OUT/_deps/deb" && mkdir -p "$OUT/_deps/deb"
  (cd "$OUT/_deps/deb" && ar x "$deb" && tar -xf data.tar.* ./usr/include/onnxruntime)
  mkdir -p "$(dirname "$ORT_INCLUDE")" && rm -rf "$ORT_INCLUDE"
  mv "$OUT/_deps/deb/usr/include/onnxruntime" "$ORT_INCLUDE" && rm -rf "$OUT/_deps/deb"
fi

build() { # build DIR TYPE SANITIZE
  cmake -S "$HERE" -B "$OUT/$1" -DCMAKE_BUILD_TYPE="$2" -DOC_SANITIZE="$3" -DORT_INCLUDE_DIR="$ORT_INCLUDE" \
    -DOC_BUILD_TESTS="$3" >/dev/null
  cmake --build "$OUT/$1" --parallel "$(nproc 2>/dev/null || echo 2)" >/dev/null
}
say "building $OUT/release"
build release Release OFF
say "building $OUT/asan (AddressSanitizer + UBSan, with the tests)"
build asan Debug ON
say "done: $OUT/release/oc-run, $OUT/release/libonnx_cooker.so; tests in $OUT/asan"
