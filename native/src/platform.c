/* platform.c - whole files mapped or read, threads, paths: POSIX, and Windows (paths are UTF-8,
 * converted to UTF-16 for the W functions; built with MinGW-w64 and run under Wine by
 * tests/test_native_windows.py). */
#if !defined(_WIN32) && !defined(_DEFAULT_SOURCE)
#define _DEFAULT_SOURCE /* realpath, madvise */
#endif
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

/* One worker of oc_run_parallel: what it runs, on what, as which worker. */
typedef struct oc_thread_arg {
    void (*task)(void *, size_t);
    void *context;
    size_t worker;
} oc_thread_arg;

/* The edit distance between two names (insertions, deletions, substitutions), or SIZE_MAX when
 * either is longer than the names it compares (folder names: short). */
static size_t edit_distance(const char *a, const char *b) {
    size_t row[257], i, j, n = strlen(a), m = strlen(b);
    if (n > 256 || m > 256) return (size_t)-1;
    for (j = 0; j <= m; j++) row[j] = j;
    for (i = 1; i <= n; i++) {
        size_t diagonal = row[0];
        row[0] = i;
        for (j = 1; j <= m; j++) {
            size_t above = row[j], best = diagonal + (a[i - 1] != b[j - 1]);
            if (above + 1 < best) best = above + 1;
            if (row[j - 1] + 1 < best) best = row[j - 1] + 1;
            diagonal = above;
            row[j] = best;
        }
    }
    return row[m];
}

/* Whether the bundle folder `candidate` should replace the one chosen so far (`chosen`, if `any`):
 * without `nearby`, the first in byte order; with it, the nearest (a third of the longer name at most). */
static int better_bundle(const char *candidate, const char *nearby, const char *chosen, int any) {
    size_t distance, longer;
    if (nearby == NULL) return !any || strcmp(candidate, chosen) < 0;
    distance = edit_distance(candidate, nearby);
    longer = strlen(candidate) > strlen(nearby) ? strlen(candidate) : strlen(nearby);
    if (distance == (size_t)-1 || distance * 3 > longer) return 0;
    if (!any) return 1;
    return distance < edit_distance(chosen, nearby) ||
           (distance == edit_distance(chosen, nearby) && strcmp(candidate, chosen) < 0);
}

#ifdef _WIN32
#define WIN32_LEAN_AND_MEAN
#include <windows.h>

wchar_t *oc_wide_path(const char *path) {
    wchar_t *wide;
    int n = MultiByteToWideChar(CP_UTF8, MB_ERR_INVALID_CHARS, path, -1, NULL, 0);
    if (n <= 0) return NULL;
    wide = malloc((size_t)n * sizeof *wide);
    if (wide == NULL) return NULL;
    if (MultiByteToWideChar(CP_UTF8, MB_ERR_INVALID_CHARS, path, -1, wide, n) != n) {
        free(wide);
        return NULL;
    }
    return wide;
}

/* A UTF-16 string as UTF-8 (malloc'd), or NULL. */
static char *utf8_of(const wchar_t *wide) {
    char *text;
    int n = WideCharToMultiByte(CP_UTF8, 0, wide, -1, NULL, 0, NULL, NULL);
    if (n <= 0) return NULL;
    text = malloc((size_t)n);
    if (text == NULL) return NULL;
    if (WideCharToMultiByte(CP_UTF8, 0, wide, -1, text, n, NULL, NULL) != n) {
        free(text);
        return NULL;
    }
    return text;
}

/* Open a file (UTF-8 path) to read: a disk file only (not a console, pipe or device name such as
 * NUL or COM1), as the POSIX branch takes regular files only. */
static HANDLE open_to_read(const char *path, oc_error *err, oc_status *status) {
    HANDLE file;
    wchar_t *wide = oc_wide_path(path);
    *status = OC_OK;
    if (wide == NULL) {
        *status = oc_fail(err, OC_ERR_IO, "%s: cannot open (not a UTF-8 path, or out of memory)", path);
        return INVALID_HANDLE_VALUE;
    }
    file = CreateFileW(wide, GENERIC_READ, FILE_SHARE_READ | FILE_SHARE_DELETE, NULL, OPEN_EXISTING,
                       FILE_ATTRIBUTE_NORMAL, NULL);
    free(wide);
    if (file == INVALID_HANDLE_VALUE) {
        *status = oc_fail(err, OC_ERR_IO, "%s: cannot open (Windows error %lu)", path, (unsigned long)GetLastError());
        return INVALID_HANDLE_VALUE;
    }
    if (GetFileType(file) != FILE_TYPE_DISK) {
        CloseHandle(file);
        *status = oc_fail(err, OC_ERR_IO, "%s: not a regular file", path);
        return INVALID_HANDLE_VALUE;
    }
    return file;
}

/* What oc_map_file's `identity` holds, from a handle's information. */
static void identity_of(const BY_HANDLE_FILE_INFORMATION *about, uint64_t identity[OC_IDENTITY_WORDS]) {
    identity[0] = about->dwVolumeSerialNumber;
    identity[1] = (uint64_t)about->nFileIndexHigh << 32 | about->nFileIndexLow;
    identity[2] = (uint64_t)about->nFileSizeHigh << 32 | about->nFileSizeLow;
    identity[3] = (uint64_t)about->ftLastWriteTime.dwHighDateTime << 32 | about->ftLastWriteTime.dwLowDateTime;
    identity[4] = (uint64_t)about->ftCreationTime.dwHighDateTime << 32 | about->ftCreationTime.dwLowDateTime;
    identity[5] = 0; /* no change time: not trusted to skip checks, nor reopened by name */
}

int oc_path_identity(const char *path, uint64_t identity[OC_IDENTITY_WORDS]) {
    BY_HANDLE_FILE_INFORMATION about;
    HANDLE file;
    wchar_t *wide = oc_wide_path(path);
    memset(identity, 0, OC_IDENTITY_WORDS * sizeof *identity);
    if (wide == NULL) return 0;
    /* attributes only: shares everything, so that a writer replacing the file is never in its way */
    file = CreateFileW(wide, FILE_READ_ATTRIBUTES, FILE_SHARE_READ | FILE_SHARE_WRITE | FILE_SHARE_DELETE, NULL,
                       OPEN_EXISTING, FILE_FLAG_BACKUP_SEMANTICS, NULL);
    free(wide);
    if (file == INVALID_HANDLE_VALUE) return 0;
    if (!GetFileInformationByHandle(file, &about)) {
        CloseHandle(file);
        return 0;
    }
    CloseHandle(file);
    identity_of(&about, identity);
    return 1;
}

int oc_path_exists(const char *path) {
    wchar_t *wide = oc_wide_path(path);
    DWORD attributes;
    if (wide == NULL) return 0;
    attributes = GetFileAttributesW(wide); /* a link's own attributes: not followed */
    free(wide);
    return attributes != INVALID_FILE_ATTRIBUTES;
}

int oc_is_folder(const char *path) {
    wchar_t *wide = oc_wide_path(path);
    DWORD attributes;
    if (wide == NULL) return 0;
    attributes = GetFileAttributesW(wide);
    free(wide);
    return attributes != INVALID_FILE_ATTRIBUTES && (attributes & FILE_ATTRIBUTE_DIRECTORY);
}

uint64_t oc_monotonic_ns(void) {
    LARGE_INTEGER now, frequency;
    if (!QueryPerformanceFrequency(&frequency) || !QueryPerformanceCounter(&now) || frequency.QuadPart <= 0) return 0;
    return (uint64_t)(now.QuadPart / frequency.QuadPart) * 1000000000u +
           (uint64_t)(now.QuadPart % frequency.QuadPart) * 1000000000u / (uint64_t)frequency.QuadPart;
}

void oc_sleep_ms(unsigned ms) { Sleep(ms); }

oc_status oc_map_file(const char *path, void **map, size_t *size, uint64_t identity[OC_IDENTITY_WORDS], oc_error *err) {
    HANDLE file, mapping;
    BY_HANDLE_FILE_INFORMATION about;
    LARGE_INTEGER length;
    oc_status status;
    void *view;
    *map = NULL;
    *size = 0;
    file = open_to_read(path, err, &status);
    if (file == INVALID_HANDLE_VALUE) return status;
    if (!GetFileSizeEx(file, &length) || !GetFileInformationByHandle(file, &about)) {
        CloseHandle(file);
        return oc_fail(err, OC_ERR_IO, "%s: cannot read its size", path);
    }
    if (identity != NULL) identity_of(&about, identity);
    if (length.QuadPart == 0) {
        CloseHandle(file);
        return OC_OK;
    }
    if ((unsigned long long)length.QuadPart > (unsigned long long)SIZE_MAX) {
        CloseHandle(file);
        return oc_fail(err, OC_ERR_TOO_LARGE, "%s: too large to map in this process", path);
    }
    mapping = CreateFileMappingW(file, NULL, PAGE_READONLY, 0, 0, NULL);
    CloseHandle(file); /* the mapping keeps the file */
    if (mapping == NULL)
        return oc_fail(err, OC_ERR_IO, "%s: cannot map (Windows error %lu)", path, (unsigned long)GetLastError());
    view = MapViewOfFile(mapping, FILE_MAP_READ, 0, 0, 0);
    CloseHandle(mapping); /* the view keeps the mapping */
    if (view == NULL)
        return oc_fail(err, OC_ERR_IO, "%s: cannot map (Windows error %lu)", path, (unsigned long)GetLastError());
    *map = view;
    *size = (size_t)length.QuadPart;
    return OC_OK;
}

void oc_prefault(const void *map, size_t size) { /* no-op: the pass faults pages in as it reads */
    (void)map;
    (void)size;
}

void oc_release_pages(const void *map, size_t size) {
    /* documented: VirtualUnlock of pages that are not locked removes them from the working set (it
     * then fails with ERROR_NOT_LOCKED, which is the expected answer here) */
    if (map != NULL && size) (void)VirtualUnlock((LPVOID)(uintptr_t)map, size);
}

void oc_unmap(void *map, size_t size) {
    (void)size;
    if (map != NULL) UnmapViewOfFile(map);
}

int oc_same_file(const char *path, const uint64_t identity[OC_IDENTITY_WORDS]) {
    uint64_t now[OC_IDENTITY_WORDS] = {0};
    void *map = NULL;
    size_t size = 0;
    if (oc_map_file(path, &map, &size, now, NULL) != OC_OK) return 0;
    oc_unmap(map, size);
    return now[0] == identity[0] && now[1] == identity[1];
}

char *oc_absolute_path(const char *path) { return oc_real_path(path); }

/* The absolute form of a UTF-8 path, UTF-8 (links are not resolved: GetFullPathNameW). */
char *oc_real_path(const char *path) {
    wchar_t *wide = oc_wide_path(path), *full;
    char *text;
    if (wide == NULL) return NULL;
    full = _wfullpath(NULL, wide, 0);
    free(wide);
    if (full == NULL) return NULL;
    text = utf8_of(full);
    free(full);
    return text;
}

static DWORD WINAPI thread_main(LPVOID raw) {
    oc_thread_arg *arg = raw;
    arg->task(arg->context, arg->worker);
    return 0;
}

void oc_run_parallel(void (*task)(void *context, size_t worker), void *context, size_t workers) {
    HANDLE threads[64];
    oc_thread_arg args[64];
    size_t w, started = 0;
    if (workers > 64) workers = 64;
    for (w = 1; w < workers; ++w) {
        args[w].task = task;
        args[w].context = context;
        args[w].worker = w;
        threads[w] = CreateThread(NULL, 0, thread_main, &args[w], 0, NULL);
        if (threads[w] == NULL) break;
        started = w;
    }
    task(context, 0);
    for (w = started + 1; w < workers; ++w) task(context, w); /* those that could not start */
    for (w = 1; w <= started; ++w) {
        WaitForSingleObject(threads[w], INFINITE);
        CloseHandle(threads[w]);
    }
}

oc_pager *oc_pager_start(void *map, size_t size) {
    (void)map;
    (void)size;
    return NULL;
}

void oc_pager_stop(oc_pager *pager) { (void)pager; }

size_t oc_cores(void) {
    SYSTEM_INFO info;
    GetSystemInfo(&info);
    return info.dwNumberOfProcessors ? info.dwNumberOfProcessors : 1;
}

static SRWLOCK global_lock = SRWLOCK_INIT;

void oc_lock(void) { AcquireSRWLockExclusive(&global_lock); }
void oc_unlock(void) { ReleaseSRWLockExclusive(&global_lock); }
int oc_has_null_file(void) { return 0; } /* no /dev/null: the shared-initializer path is POSIX's */

int oc_is_regular_file(const char *path) {
    wchar_t *wide = oc_wide_path(path);
    DWORD attributes;
    if (wide == NULL) return 0;
    attributes = GetFileAttributesW(wide);
    free(wide);
    return attributes != INVALID_FILE_ATTRIBUTES && !(attributes & FILE_ATTRIBUTE_DIRECTORY);
}

/* Whether dir/name/manifest.json is a file (not a folder), by its attributes. */
static int holds_manifest(const char *dir, const char *name) {
    size_t n = strlen(dir) + strlen(name) + sizeof "/" "/manifest.json";
    char *path = malloc(n);
    wchar_t *wide;
    DWORD attributes;
    if (path == NULL) return 0;
    snprintf(path, n, "%s/%s/manifest.json", dir, name);
    wide = oc_wide_path(path);
    free(path);
    if (wide == NULL) return 0;
    attributes = GetFileAttributesW(wide);
    free(wide);
    return attributes != INVALID_FILE_ATTRIBUTES && !(attributes & FILE_ATTRIBUTE_DIRECTORY);
}

int oc_first_bundle_below(const char *dir, const char *nearby, char *name, size_t cap) {
    size_t n = strlen(dir) + sizeof "/*";
    char *pattern = malloc(n);
    wchar_t *wide;
    WIN32_FIND_DATAW found;
    HANDLE search;
    int any = 0;
    if (pattern == NULL || cap == 0) {
        free(pattern);
        return 0;
    }
    snprintf(pattern, n, "%s/*", dir);
    wide = oc_wide_path(pattern);
    free(pattern);
    if (wide == NULL) return 0;
    search = FindFirstFileW(wide, &found);
    free(wide);
    if (search == INVALID_HANDLE_VALUE) return 0;
    do {
        char *entry;
        if (!(found.dwFileAttributes & FILE_ATTRIBUTE_DIRECTORY) || found.cFileName[0] == L'.') continue;
        entry = utf8_of(found.cFileName);
        if (entry != NULL && strlen(entry) < cap && better_bundle(entry, nearby, name, any) && holds_manifest(dir, entry)) {
            memcpy(name, entry, strlen(entry) + 1);
            any = 1;
        }
        free(entry);
    } while (FindNextFileW(search, &found));
    FindClose(search);
    return any;
}

#else
#include <dirent.h>
#include <fcntl.h>
#include <pthread.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <time.h>

/* What oc_map_file's `identity` holds, from a file's status. */
static void identity_of(const struct stat *st, uint64_t identity[OC_IDENTITY_WORDS]) {
    identity[0] = (uint64_t)st->st_dev;
    identity[1] = (uint64_t)st->st_ino;
    identity[2] = (uint64_t)st->st_size;
    identity[3] = (uint64_t)st->st_mtim.tv_sec * 1000000000u + (uint64_t)st->st_mtim.tv_nsec;
    identity[4] = (uint64_t)st->st_ctim.tv_sec * 1000000000u + (uint64_t)st->st_ctim.tv_nsec;
    identity[5] = 1;
}

int oc_path_identity(const char *path, uint64_t identity[OC_IDENTITY_WORDS]) {
    struct stat st;
    memset(identity, 0, OC_IDENTITY_WORDS * sizeof *identity);
    if (stat(path, &st) != 0) return 0;
    identity_of(&st, identity);
    return 1;
}

int oc_path_exists(const char *path) {
    struct stat st;
    return lstat(path, &st) == 0; /* a link's own: a dangling one exists */
}

int oc_is_folder(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

uint64_t oc_monotonic_ns(void) {
    struct timespec now;
    if (clock_gettime(CLOCK_MONOTONIC, &now) != 0) return 0;
    return (uint64_t)now.tv_sec * 1000000000u + (uint64_t)now.tv_nsec;
}

void oc_sleep_ms(unsigned ms) {
    struct timespec left;
    left.tv_sec = (time_t)(ms / 1000);
    left.tv_nsec = (long)(ms % 1000) * 1000000L;
    while (nanosleep(&left, &left) != 0 && errno == EINTR) {
    }
}

oc_status oc_map_file(const char *path, void **map, size_t *size, uint64_t identity[OC_IDENTITY_WORDS], oc_error *err) {
    struct stat st;
    void *view;
    int fd;
    *map = NULL;
    *size = 0;
    fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK); /* a FIFO must not block the open */
    if (fd < 0) return oc_fail(err, OC_ERR_IO, "%s: cannot open (%s)", path, strerror(errno));
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        close(fd);
        return oc_fail(err, OC_ERR_IO, "%s: not a regular file", path);
    }
    if (identity != NULL) identity_of(&st, identity);
    if (st.st_size == 0) {
        close(fd);
        return OC_OK;
    }
    if ((unsigned long long)st.st_size > (unsigned long long)SIZE_MAX) {
        close(fd);
        return oc_fail(err, OC_ERR_TOO_LARGE, "%s: too large to map in this process", path);
    }
    view = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
    close(fd); /* the mapping keeps the file */
    if (view == MAP_FAILED) return oc_fail(err, OC_ERR_IO, "%s: cannot map (%s)", path, strerror(errno));
    *map = view;
    *size = (size_t)st.st_size;
    return OC_OK;
}

void oc_prefault(const void *map, size_t size) {
#ifdef MADV_POPULATE_READ /* Linux 5.14: page tables filled in one call, not fault by fault */
    if (map != NULL) (void)madvise((void *)map, size, MADV_POPULATE_READ); /* a hint: older kernels say EINVAL */
#else
    (void)map;
    (void)size;
#endif
}

void oc_release_pages(const void *map, size_t size) {
    if (map != NULL && size) (void)madvise((void *)(uintptr_t)map, size, MADV_DONTNEED); /* advice: pages refault */
}

void oc_unmap(void *map, size_t size) {
    if (map != NULL) munmap(map, size);
}

int oc_same_file(const char *path, const uint64_t identity[OC_IDENTITY_WORDS]) {
    struct stat st;
    if (stat(path, &st) != 0) return 0;
    return (uint64_t)st.st_dev == identity[0] && (uint64_t)st.st_ino == identity[1];
}

char *oc_real_path(const char *path) { return realpath(path, NULL); }

char *oc_absolute_path(const char *path) {
    size_t cwd_size, path_size = strlen(path) + 1;
    char *cwd, *out;
    if (path[0] == '/') {
        out = malloc(path_size);
        if (out != NULL) memcpy(out, path, path_size);
        return out;
    }
    cwd = getcwd(NULL, 0); /* a working folder removed since: NULL (ENOENT) */
    if (cwd == NULL) return NULL;
    cwd_size = strlen(cwd);
    out = malloc(cwd_size + 1 + path_size);
    if (out != NULL) {
        memcpy(out, cwd, cwd_size);
        out[cwd_size] = '/';
        memcpy(out + cwd_size + 1, path, path_size);
    }
    free(cwd);
    return out;
}

static void *thread_main(void *raw) {
    oc_thread_arg *arg = raw;
    arg->task(arg->context, arg->worker);
    return NULL;
}

void oc_run_parallel(void (*task)(void *context, size_t worker), void *context, size_t workers) {
    pthread_t threads[64];
    oc_thread_arg args[64];
    size_t w, started = 0;
    if (workers > 64) workers = 64;
    for (w = 1; w < workers; ++w) {
        args[w].task = task;
        args[w].context = context;
        args[w].worker = w;
        if (pthread_create(&threads[w], NULL, thread_main, &args[w]) != 0) break;
        started = w;
    }
    task(context, 0);
    for (w = started + 1; w < workers; ++w) task(context, w); /* those that could not start */
    for (w = 1; w <= started; ++w) pthread_join(threads[w], NULL);
}

#ifdef __linux__
struct oc_pager {
    pthread_t thread;
    pthread_mutex_t lock;
    pthread_cond_t wake;
    int stop;
    void *map;
    size_t size;
};

static void *pager_main(void *raw) {
    oc_pager *p = raw;
    pthread_mutex_lock(&p->lock);
    while (!p->stop) {
        struct timespec until;
        pthread_mutex_unlock(&p->lock);
        madvise(p->map, p->size, MADV_DONTNEED); /* a read-only private file mapping: refaults from the file */
        clock_gettime(CLOCK_REALTIME, &until);
        /* 1 ms: the 268 MB model's peak 1.08-1.09x the model (2 ms: 1.10x), session-ready times the
         * same within noise (10 fresh oc-run processes each, 1.24.4 and 1.32; docs/native.md) */
        until.tv_nsec += 1000000;
        if (until.tv_nsec >= 1000000000) {
            until.tv_sec += 1;
            until.tv_nsec -= 1000000000;
        }
        pthread_mutex_lock(&p->lock);
        if (!p->stop) pthread_cond_timedwait(&p->wake, &p->lock, &until);
    }
    pthread_mutex_unlock(&p->lock);
    return NULL;
}

oc_pager *oc_pager_start(void *map, size_t size) {
    oc_pager *p;
    if (map == NULL || size == 0) return NULL;
    p = calloc(1, sizeof *p);
    if (p == NULL) return NULL;
    p->map = map;
    p->size = size;
    pthread_mutex_init(&p->lock, NULL);
    pthread_cond_init(&p->wake, NULL);
    if (pthread_create(&p->thread, NULL, pager_main, p) != 0) {
        pthread_cond_destroy(&p->wake);
        pthread_mutex_destroy(&p->lock);
        free(p);
        return NULL;
    }
    return p;
}

void oc_pager_stop(oc_pager *p) {
    if (p == NULL) return;
    pthread_mutex_lock(&p->lock);
    p->stop = 1;
    pthread_cond_signal(&p->wake);
    pthread_mutex_unlock(&p->lock);
    pthread_join(p->thread, NULL);
    madvise(p->map, p->size, MADV_DONTNEED); /* what the session reads later comes back on demand */
    pthread_cond_destroy(&p->wake);
    pthread_mutex_destroy(&p->lock);
    free(p);
}
#else
oc_pager *oc_pager_start(void *map, size_t size) {
    (void)map;
    (void)size;
    return NULL;
}

void oc_pager_stop(oc_pager *pager) { (void)pager; }
#endif

size_t oc_cores(void) {
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (size_t)n : 1;
}

static pthread_mutex_t global_lock = PTHREAD_MUTEX_INITIALIZER;

void oc_lock(void) { pthread_mutex_lock(&global_lock); }
void oc_unlock(void) { pthread_mutex_unlock(&global_lock); }

int oc_has_null_file(void) {
    struct stat st;
    return stat("/dev/null", &st) == 0 && S_ISCHR(st.st_mode);
}

int oc_is_regular_file(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

int oc_first_bundle_below(const char *dir, const char *nearby, char *name, size_t cap) {
    DIR *folder = opendir(dir);
    struct dirent *entry;
    int any = 0;
    if (folder == NULL || cap == 0) {
        if (folder != NULL) closedir(folder);
        return 0;
    }
    while ((entry = readdir(folder)) != NULL) {
        struct stat st;
        size_t n = strlen(dir) + strlen(entry->d_name) + sizeof "/" "/manifest.json";
        char *path;
        int holds;
        if (entry->d_name[0] == '.' || strlen(entry->d_name) >= cap || !better_bundle(entry->d_name, nearby, name, any))
            continue;
        path = malloc(n);
        if (path == NULL) break;
        snprintf(path, n, "%s/%s/manifest.json", dir, entry->d_name);
        holds = stat(path, &st) == 0 && S_ISREG(st.st_mode);
        free(path);
        if (holds) {
            memcpy(name, entry->d_name, strlen(entry->d_name) + 1);
            any = 1;
        }
    }
    closedir(folder);
    return any;
}
#endif

oc_status oc_read_file(const char *path, const oc_alloc *alloc, uint64_t limit, void **data, size_t *size,
                       oc_error *err) {
    return oc_read_file_identity(path, alloc, limit, data, size, NULL, err);
}

#ifdef _WIN32
oc_status oc_read_file_identity(const char *path, const oc_alloc *alloc, uint64_t limit, void **data, size_t *size,
                                uint64_t identity[OC_IDENTITY_WORDS], oc_error *err) {
    HANDLE file;
    LARGE_INTEGER length;
    BY_HANDLE_FILE_INFORMATION about;
    unsigned char *buffer;
    size_t got = 0;
    oc_status status;
    *data = NULL;
    *size = 0;
    if (identity != NULL) memset(identity, 0, OC_IDENTITY_WORDS * sizeof *identity);
    file = open_to_read(path, err, &status);
    if (file == INVALID_HANDLE_VALUE) return status;
    if (!GetFileSizeEx(file, &length) || length.QuadPart < 0) {
        CloseHandle(file);
        return oc_fail(err, OC_ERR_IO, "%s: cannot read its size", path);
    }
    if (identity != NULL && GetFileInformationByHandle(file, &about)) identity_of(&about, identity);
    if ((uint64_t)length.QuadPart > limit || (unsigned long long)length.QuadPart >= (unsigned long long)SIZE_MAX) {
        CloseHandle(file);
        return oc_fail(err, OC_ERR_TOO_LARGE, "%s: %lld bytes, over the limit of %llu", path, (long long)length.QuadPart,
                       (unsigned long long)limit);
    }
    buffer = oc_malloc(alloc, (size_t)length.QuadPart + 1);
    if (buffer == NULL) {
        CloseHandle(file);
        return oc_fail(err, OC_ERR_OUT_OF_MEMORY, "%s: out of memory for %lld bytes", path, (long long)length.QuadPart);
    }
    while (got < (size_t)length.QuadPart) {
        DWORD n = 0, want = (DWORD)((size_t)length.QuadPart - got > 0x40000000u ? 0x40000000u : (size_t)length.QuadPart - got);
        if (!ReadFile(file, buffer + got, want, &n, NULL) || n == 0) break;
        got += n;
    }
    CloseHandle(file);
    if (got != (size_t)length.QuadPart) {
        oc_free(alloc, buffer);
        return oc_fail(err, OC_ERR_IO, "%s: read %zu of %lld bytes", path, got, (long long)length.QuadPart);
    }
    buffer[got] = 0;
    *data = buffer;
    *size = got;
    return OC_OK;
}
#else
oc_status oc_read_file_identity(const char *path, const oc_alloc *alloc, uint64_t limit, void **data, size_t *size,
                                uint64_t identity[OC_IDENTITY_WORDS], oc_error *err) {
    struct stat st;
    unsigned char *buffer;
    size_t got = 0;
    int fd;
    *data = NULL;
    *size = 0;
    if (identity != NULL) memset(identity, 0, OC_IDENTITY_WORDS * sizeof *identity);
    fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK); /* a FIFO must not block the open */
    if (fd < 0) return oc_fail(err, OC_ERR_IO, "%s: cannot open (%s)", path, strerror(errno));
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        close(fd);
        return oc_fail(err, OC_ERR_IO, "%s: not a regular file", path);
    }
    if (identity != NULL) identity_of(&st, identity);
    if ((uint64_t)st.st_size > limit || (unsigned long long)st.st_size >= (unsigned long long)SIZE_MAX) {
        close(fd);
        return oc_fail(err, OC_ERR_TOO_LARGE, "%s: %lld bytes, over the limit of %llu", path, (long long)st.st_size,
                       (unsigned long long)limit);
    }
    buffer = oc_malloc(alloc, (size_t)st.st_size + 1);
    if (buffer == NULL) {
        close(fd);
        return oc_fail(err, OC_ERR_OUT_OF_MEMORY, "%s: out of memory for %lld bytes", path, (long long)st.st_size);
    }
    while (got < (size_t)st.st_size) {
        ssize_t n = read(fd, buffer + got, (size_t)st.st_size - got);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) break;
        got += (size_t)n;
    }
    close(fd);
    if (got != (size_t)st.st_size) {
        oc_free(alloc, buffer);
        return oc_fail(err, OC_ERR_IO, "%s: read %zu of %lld bytes", path, got, (long long)st.st_size);
    }
    buffer[got] = 0;
    *data = buffer;
    *size = got;
    return OC_OK;
}
#endif
