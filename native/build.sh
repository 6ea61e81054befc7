#!/usr/bin/env bash
# Build onnx-cooker's native loader: bash native/build.sh [OUT_DIR]   (default: native/out)
#
# Idempotent. Installs the Debian packages it needs when run as root (libzstd, cJSON, libsodium,
# zlib, cmake), fetches onnxruntime's C API headers from Debian's package archive (pinned by
# sha256; nothing from other projects is kept in the repository), then builds these trees:
#   OUT_DIR/release  libonnx_cooker.so, oc-run             (optimized: the benchmarks use it)
#   OUT_DIR/asan     the same plus the tests, under AddressSanitizer and UBSan (the tests use it)
#   OUT_DIR/tsan     the library and test_threads under ThreadSanitizer (tests/test_native_threads.py)
#   OUT_DIR/windows  libonnx_cooker.dll, oc-run.exe, oc-probe.exe and the test programs for Windows
#                    x86-64, when MinGW-w64 (x86_64-w64-mingw32-gcc) is installed: zstd, cJSON and
#                    libsodium cross-compiled as static libraries from Debian's source tarballs
#                    (pinned by sha256, built once into OUT_DIR/_deps/mingw), zlib from Debian's
#                    libz-mingw-w64-dev, the MinGW runtime linked statically (tests/test_native_windows.py
#                    runs them under Wine against the onnxruntime.dll of the win_amd64 wheels)
# The library loads libonnxruntime at run time: point oc-run at one with --ort or OC_ORT_LIBRARY.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
OUT="$(mkdir -p "${1:-$HERE/out}" && cd "${1:-$HERE/out}" && pwd)"

# onnxruntime 1.23.2's C API headers (API 23: the plugin-EP functions of API 22 included), from Debian
# sid/forky. The library still asks onnxruntime for API 21 only, plus 22 where it is served (plugin EPs).
ORT_HEADERS_VERSION="1.23.2"
ORT_HEADERS_DEB="libonnxruntime-dev_1.23.2+dfsg-6.1_amd64.deb"
ORT_HEADERS_SHA256="4630a94adb36dc056feb124e51c6e952e2cab5188bc093a25bee8a7e1ac5196d"
ORT_HEADERS_URLS=(
  "http://deb.debian.org/debian/pool/main/o/onnxruntime/$ORT_HEADERS_DEB"
  "https://snapshot.debian.org/archive/debian/20251201T000000Z/pool/main/o/onnxruntime/$ORT_HEADERS_DEB"
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

# Keyed by version: a tree built with other headers (an older _deps/onnxruntime) is not reused
ORT_INCLUDE="$OUT/_deps/onnxruntime-$ORT_HEADERS_VERSION/include"
if [ ! -f "$ORT_INCLUDE/onnxruntime_c_api.h" ]; then
  mkdir -p "$OUT/_deps"
  deb="$OUT/_deps/$ORT_HEADERS_DEB"
  for old in "$OUT/_deps/onnxruntime" "$OUT"/_deps/onnxruntime-*/ "$OUT"/_deps/libonnxruntime-dev_*.deb; do
    if [ -e "$old" ] && [ "$old" != "$deb" ]; then rm -rf "$old"; fi # an older version's headers or package
  done
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
# ThreadSanitizer's runtime (libtsan, gcc's) may be missing where the compiler is not Debian's full
# gcc: then the tree is left out, and tests/test_native_threads.py says what to install.
if echo 'int main(void) { return 0; }' | cc -x c -fsanitize=thread -o "$OUT/.tsan-probe" - 2>/dev/null; then
  say "building $OUT/tsan (ThreadSanitizer: the library and its threading test)"
  cmake -S "$HERE" -B "$OUT/tsan" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DOC_TSAN=ON -DORT_INCLUDE_DIR="$ORT_INCLUDE" \
    -DOC_BUILD_TESTS=ON -DOC_BUILD_TOOLS=OFF >/dev/null
  cmake --build "$OUT/tsan" --target test_threads --parallel "$(nproc 2>/dev/null || echo 2)" >/dev/null
else
  say "no ThreadSanitizer runtime for cc (Debian: libtsan2): $OUT/tsan left out"
fi
rm -f "$OUT/.tsan-probe"

# ---- Windows (MinGW-w64) -----------------------------------------------------------------------
MINGW=x86_64-w64-mingw32
MINGW_ROOT="/usr/$MINGW"
DEBIAN_POOL="http://deb.debian.org/debian/pool/main"
# name  sha256  path in Debian's pool (the orig tarballs of the Debian bookworm packages)
MINGW_SOURCES=(
  "libzstd_1.5.4+dfsg2.orig.tar.xz 8cf4bbb65e77ec348d052c8d6230eba66d435bddf64c8b5be2fcb16880c19953 libz/libzstd"
  "cjson_1.7.15.orig.tar.gz 5308fd4bd90cef7aa060558514de6a1a4a0819974a26e6ed13973c5f624c24b2 c/cjson"
  "libsodium_1.0.18.orig.tar.gz d59323c6b712a1519a5daf710b68f5e7fde57040845ffec53850911f10a5d4f4 libs/libsodium"
)
MINGW_DEPS_VERSION=1 # bump when the recipe below changes: the prefix is rebuilt

fetch_pinned() { # fetch_pinned NAME SHA256 URL -> $OUT/_deps/NAME
  local file="$OUT/_deps/$1"
  if [ ! -f "$file" ]; then
    say "fetching $3"
    if command -v curl >/dev/null; then
      curl -fsSL --retry 3 -o "$file.part" "$3" && mv "$file.part" "$file" || rm -f "$file.part"
    else
      python3 -c 'import sys, urllib.request; urllib.request.urlretrieve(sys.argv[1], sys.argv[2])' "$3" "$file.part" \
        && mv "$file.part" "$file" || rm -f "$file.part"
    fi
    [ -f "$file" ] || { say "could not download $3"; exit 1; }
  fi
  echo "$2  $file" | sha256sum -c --quiet - \
    || { say "$file does not have the pinned sha256; delete it and run again"; rm -f "$file"; exit 1; }
}

compile_all() { # compile_all OBJDIR FLAGS... -- FILES...: an object of each file, one job per core
  local objdir="$1" flags=()
  shift
  while [ "$1" != "--" ]; do flags+=("$1"); shift; done
  shift
  mkdir -p "$objdir"
  # shellcheck disable=SC2016
  printf '%s\n' "$@" | xargs -P "$(nproc 2>/dev/null || echo 2)" -I{} sh -c \
    'o="$0/$(echo "$1" | tr / _).o"; f="$1"; shift; '"$MINGW"'-gcc -w "$@" -c "$f" -o "$o"' "$objdir" {} "${flags[@]}"
}

build_mingw_deps() { # static zstd (decompression), cJSON, libsodium into $PREFIX
  local src="$OUT/_deps/mingw-src" entry name sum path
  rm -rf "$PREFIX" "$src" && mkdir -p "$PREFIX/include/cjson" "$PREFIX/include/sodium" "$PREFIX/lib/pkgconfig" "$src"
  for entry in "${MINGW_SOURCES[@]}"; do
    read -r name sum path <<<"$entry"
    fetch_pinned "$name" "$sum" "$DEBIAN_POOL/$path/$name"
    tar -xf "$OUT/_deps/$name" -C "$src"
  done
  # zstd: the library reads frames only (common + decompress; the C decoder, no assembly)
  local z="$src/zstd-1.5.4/lib"
  compile_all "$src/obj/zstd" -O2 -DZSTD_DISABLE_ASM -DZSTD_LEGACY_SUPPORT=0 -I"$z" -I"$z/common" -- \
    "$z"/common/*.c "$z"/decompress/*.c
  "$MINGW-ar" rcs "$PREFIX/lib/libzstd.a" "$src"/obj/zstd/*.o
  cp "$z/zstd.h" "$z/zstd_errors.h" "$PREFIX/include/"
  # cJSON: one file, its symbols kept inside the DLL (CJSON_HIDE_SYMBOLS on both sides)
  compile_all "$src/obj/cjson" -O2 -DCJSON_HIDE_SYMBOLS -- "$src/cJSON-1.7.15/cJSON.c"
  "$MINGW-ar" rcs "$PREFIX/lib/libcjson.a" "$src"/obj/cjson/*.o
  cp "$src/cJSON-1.7.15/cJSON.h" "$PREFIX/include/cjson/"
  # libsodium: the orig tarball is the git tree (no configure): every source, as its MSVC project
  # builds them (SODIUM_STATIC, the version header of builds/msvc); the portable implementations
  local s="$src/libsodium-1.0.18"
  cp "$s/builds/msvc/version.h" "$s/src/libsodium/include/sodium/version.h"
  # shellcheck disable=SC2046
  compile_all "$src/obj/sodium" -O2 -DSODIUM_STATIC -DSODIUM_EXPORT= -DCONFIGURED=1 \
    -I"$s/src/libsodium/include/sodium" -I"$s/src/libsodium/include" -- $(find "$s/src/libsodium" -name '*.c' | sort)
  "$MINGW-ar" rcs "$PREFIX/lib/libsodium.a" "$src"/obj/sodium/*.o
  cp -r "$s/src/libsodium/include/sodium.h" "$s/src/libsodium/include/sodium" "$PREFIX/include/"
  local pc="$PREFIX/lib/pkgconfig"
  printf 'Name: libzstd\nDescription: zstd\nVersion: 1.5.4\nLibs: -L%s -lzstd\nCflags: -I%s\n' \
    "$PREFIX/lib" "$PREFIX/include" >"$pc/libzstd.pc"
  printf 'Name: libcjson\nDescription: cJSON\nVersion: 1.7.15\nLibs: -L%s -lcjson\nCflags: -I%s -DCJSON_HIDE_SYMBOLS\n' \
    "$PREFIX/lib" "$PREFIX/include" >"$pc/libcjson.pc"
  printf 'Name: libsodium\nDescription: libsodium\nVersion: 1.0.18\nLibs: -L%s -lsodium -ladvapi32\nCflags: -I%s -DSODIUM_STATIC\n' \
    "$PREFIX/lib" "$PREFIX/include" >"$pc/libsodium.pc"
  rm -rf "$src"
  echo "$MINGW_DEPS_VERSION" >"$PREFIX/done"
}

if command -v "$MINGW-gcc" >/dev/null && command -v "$MINGW-g++" >/dev/null; then
  if [ ! -f "$MINGW_ROOT/lib/libz.a" ]; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
      say "installing libz-mingw-w64-dev"
      DEBIAN_FRONTEND=noninteractive apt-get install -y -qq libz-mingw-w64-dev >/dev/null \
        || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq libz-mingw-w64-dev >/dev/null; }
    else
      say "missing zlib for MinGW: install libz-mingw-w64-dev and run again"; exit 1
    fi
  fi
  PREFIX="$OUT/_deps/mingw"
  if [ "$(cat "$PREFIX/done" 2>/dev/null)" != "$MINGW_DEPS_VERSION" ]; then
    say "cross-compiling zstd, cJSON and libsodium for Windows into $PREFIX"
    build_mingw_deps
  fi
  say "building $OUT/windows (MinGW-w64)"
  PKG_CONFIG_LIBDIR="$PREFIX/lib/pkgconfig" PKG_CONFIG_PATH="" \
    cmake -S "$HERE" -B "$OUT/windows" -DCMAKE_TOOLCHAIN_FILE="$HERE/cmake/mingw-w64-x86_64.cmake" \
    -DOC_MINGW_DEPS="$PREFIX" -DCMAKE_BUILD_TYPE=Release -DOC_SANITIZE=OFF -DOC_BUILD_TESTS=ON \
    -DORT_INCLUDE_DIR="$ORT_INCLUDE" -DZLIB_LIBRARY="$MINGW_ROOT/lib/libz.a" \
    -DZLIB_INCLUDE_DIR="$MINGW_ROOT/include" >/dev/null
  PKG_CONFIG_LIBDIR="$PREFIX/lib/pkgconfig" PKG_CONFIG_PATH="" \
    cmake --build "$OUT/windows" --parallel "$(nproc 2>/dev/null || echo 2)" >/dev/null
else
  say "no MinGW-w64 (x86_64-w64-mingw32-gcc): the Windows build is left out"
fi
say "done: $OUT/release/oc-run, $OUT/release/libonnx_cooker.so; tests in $OUT/asan"
