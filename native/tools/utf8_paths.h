/* utf8_paths.h - the tools' file names are UTF-8 everywhere (as the library's): on Windows the
 * command line is taken as UTF-16 (GetCommandLineW) and files are opened with the W functions;
 * elsewhere these are the plain C/POSIX calls. Header-only: oc-run, oc-probe and npy.c use it. */
#ifndef OC_UTF8_PATHS_H
#define OC_UTF8_PATHS_H

#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/types.h>

#ifdef _WIN32
#include <direct.h>
#include <wchar.h>
#include <windows.h>
#include <shellapi.h> /* CommandLineToArgvW (shell32) */

static inline wchar_t *utf8_to_wide(const char *text) {
    wchar_t *wide;
    int n = MultiByteToWideChar(CP_UTF8, MB_ERR_INVALID_CHARS, text, -1, NULL, 0);
    if (n <= 0) return NULL;
    wide = (wchar_t *)malloc((size_t)n * sizeof *wide);
    if (wide != NULL && MultiByteToWideChar(CP_UTF8, MB_ERR_INVALID_CHARS, text, -1, wide, n) != n) {
        free(wide);
        wide = NULL;
    }
    return wide;
}

/* Replace argv by the command line in UTF-8 (kept for the process's life). 0, or -1. */
static inline int utf8_main_args(int *argc, char ***argv) {
    int n = 0, i;
    wchar_t **wide = CommandLineToArgvW(GetCommandLineW(), &n);
    char **utf8;
    if (wide == NULL) return -1;
    utf8 = (char **)calloc((size_t)n + 1, sizeof *utf8);
    if (utf8 == NULL) return -1;
    for (i = 0; i < n; i++) {
        int size = WideCharToMultiByte(CP_UTF8, 0, wide[i], -1, NULL, 0, NULL, NULL);
        utf8[i] = size > 0 ? (char *)malloc((size_t)size) : NULL;
        if (utf8[i] == NULL || WideCharToMultiByte(CP_UTF8, 0, wide[i], -1, utf8[i], size, NULL, NULL) != size)
            return -1;
    }
    LocalFree(wide);
    *argc = n;
    *argv = utf8;
    return 0;
}

static inline FILE *utf8_fopen(const char *path, const char *mode) {
    wchar_t *wide_path = utf8_to_wide(path), *wide_mode = utf8_to_wide(mode);
    FILE *f = wide_path && wide_mode ? _wfopen(wide_path, wide_mode) : NULL;
    free(wide_path);
    free(wide_mode);
    return f;
}

static inline int utf8_mkdir(const char *path) {
    wchar_t *wide = utf8_to_wide(path);
    int rc = wide ? _wmkdir(wide) : -1;
    free(wide);
    return rc;
}

/* 1 a folder, 2 a regular file, 0 neither (or missing). */
static inline int utf8_kind(const char *path) {
    DWORD attributes;
    wchar_t *wide = utf8_to_wide(path);
    if (wide == NULL) return 0;
    attributes = GetFileAttributesW(wide);
    free(wide);
    if (attributes == INVALID_FILE_ATTRIBUTES) return 0;
    return attributes & FILE_ATTRIBUTE_DIRECTORY ? 1 : (attributes & FILE_ATTRIBUTE_DEVICE) ? 0 : 2;
}
#else
static inline int utf8_main_args(int *argc, char ***argv) {
    (void)argc;
    (void)argv;
    return 0;
}
#define utf8_fopen fopen
#define utf8_mkdir(path) mkdir((path), 0777)
static inline int utf8_kind(const char *path) {
    struct stat st;
    if (stat(path, &st) != 0) return 0;
    return S_ISDIR(st.st_mode) ? 1 : S_ISREG(st.st_mode) ? 2 : 0;
}
#endif

#endif
