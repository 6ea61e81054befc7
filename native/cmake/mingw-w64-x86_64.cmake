# Cross-compile the native loader for Windows x86-64 with MinGW-w64 (Debian: gcc-mingw-w64-x86-64-win32,
# g++-mingw-w64-x86-64-win32). bash native/build.sh uses it for OUT_DIR/windows:
#   cmake -S native -B out/windows -DCMAKE_TOOLCHAIN_FILE=native/cmake/mingw-w64-x86_64.cmake \
#         -DOC_MINGW_DEPS=<prefix of the static zstd, cJSON, libsodium> -DORT_INCLUDE_DIR=...
# (with PKG_CONFIG_LIBDIR=<prefix>/lib/pkgconfig). An MSVC build needs no toolchain file.
set(CMAKE_SYSTEM_NAME Windows)
set(CMAKE_SYSTEM_PROCESSOR x86_64)
set(OC_MINGW_TRIPLET x86_64-w64-mingw32)
set(CMAKE_C_COMPILER ${OC_MINGW_TRIPLET}-gcc)
set(CMAKE_CXX_COMPILER ${OC_MINGW_TRIPLET}-g++)
set(CMAKE_RC_COMPILER ${OC_MINGW_TRIPLET}-windres)
set(CMAKE_FIND_ROOT_PATH /usr/${OC_MINGW_TRIPLET} ${OC_MINGW_DEPS})
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)
set(CMAKE_FIND_ROOT_PATH_MODE_LIBRARY ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_INCLUDE ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_PACKAGE ONLY)
list(APPEND CMAKE_TRY_COMPILE_PLATFORM_VARIABLES OC_MINGW_DEPS)
# Static archives first (the dependencies are built as .a; zlib's .dll.a is not wanted)
set(CMAKE_FIND_LIBRARY_SUFFIXES .a)
# The MinGW runtime inside the binaries: they need only Windows' own DLLs and onnxruntime.dll
set(CMAKE_EXE_LINKER_FLAGS_INIT "-static -static-libgcc -static-libstdc++")
set(CMAKE_SHARED_LINKER_FLAGS_INIT "-static -static-libgcc")
