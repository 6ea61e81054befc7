/* util.c - allocation through the caller's hooks, error reporting, status names. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

static void *default_alloc(void *user, size_t size, size_t alignment) {
    (void)user;
    (void)alignment; /* malloc's alignment (16 on the 64-bit targets we build for) serves every use */
    return malloc(size ? size : 1);
}

static void default_free(void *user, void *ptr) {
    (void)user;
    free(ptr);
}

oc_alloc oc_alloc_from(const oc_allocator *from) {
    oc_alloc a;
    if (from != NULL && from->alloc != NULL && from->free != NULL) {
        a.alloc = from->alloc;
        a.free = from->free;
        a.user = from->user;
    } else {
        a.alloc = default_alloc;
        a.free = default_free;
        a.user = NULL;
    }
    return a;
}

void *oc_malloc(const oc_alloc *a, size_t size) { return a->alloc(a->user, size ? size : 1, 16); }

void *oc_calloc(const oc_alloc *a, size_t count, size_t size) {
    void *p;
    if (size != 0 && count > SIZE_MAX / size) return NULL;
    p = oc_malloc(a, count * size);
    if (p != NULL) memset(p, 0, (count * size) != 0 ? count * size : 1);
    return p;
}

void oc_free(const oc_alloc *a, void *ptr) {
    if (ptr != NULL) a->free(a->user, ptr);
}

char *oc_strdup(const oc_alloc *a, const char *text) {
    size_t n = strlen(text) + 1;
    char *copy = oc_malloc(a, n);
    if (copy != NULL) memcpy(copy, text, n);
    return copy;
}

oc_status oc_vfail(oc_error *err, oc_status status, const char *format, va_list args) {
    if (err != NULL) {
        err->status = status;
        vsnprintf(err->message, sizeof err->message, format, args);
    }
    return status;
}

oc_status oc_error_in_file(oc_error *err, oc_status status, const char *path) {
    char message[OC_MESSAGE_SIZE];
    size_t n;
    if (err == NULL || status == OC_OK) return status;
    memcpy(message, err->message, sizeof message);
    message[sizeof message - 1] = '\0';
    if (path != NULL && strncmp(message, path, strlen(path)) != 0)
        snprintf(err->message, sizeof err->message, "%.256s: %.760s", path, message);
    if ((status == OC_ERR_NOT_A_BLOB || status == OC_ERR_TRUNCATED || status == OC_ERR_CORRUPT ||
         status == OC_ERR_CHECKSUM) &&
        strstr(err->message, "onnx-cooker cook") == NULL && strstr(err->message, "re-cook") == NULL) {
        n = strlen(err->message);
        if (n + sizeof OC_DAMAGED <= sizeof err->message) memcpy(err->message + n, OC_DAMAGED, sizeof OC_DAMAGED);
    }
    return status;
}

oc_status oc_fail(oc_error *err, oc_status status, const char *format, ...) {
    va_list args;
    va_start(args, format);
    oc_vfail(err, status, format, args);
    va_end(args);
    return status;
}

const char *oc_status_name(oc_status status) {
    switch (status) {
    case OC_OK: return "OC_OK";
    case OC_ERR_INVALID_ARGUMENT: return "OC_ERR_INVALID_ARGUMENT";
    case OC_ERR_OUT_OF_MEMORY: return "OC_ERR_OUT_OF_MEMORY";
    case OC_ERR_IO: return "OC_ERR_IO";
    case OC_ERR_NOT_A_BLOB: return "OC_ERR_NOT_A_BLOB";
    case OC_ERR_TRUNCATED: return "OC_ERR_TRUNCATED";
    case OC_ERR_CORRUPT: return "OC_ERR_CORRUPT";
    case OC_ERR_CHECKSUM: return "OC_ERR_CHECKSUM";
    case OC_ERR_UNSUPPORTED_VERSION: return "OC_ERR_UNSUPPORTED_VERSION";
    case OC_ERR_TOO_LARGE: return "OC_ERR_TOO_LARGE";
    case OC_ERR_MANIFEST: return "OC_ERR_MANIFEST";
    case OC_ERR_UNKNOWN_MODEL: return "OC_ERR_UNKNOWN_MODEL";
    case OC_ERR_SIGNATURE: return "OC_ERR_SIGNATURE";
    case OC_ERR_INCOMPATIBLE_RUNTIME: return "OC_ERR_INCOMPATIBLE_RUNTIME";
    case OC_ERR_RUNTIME_LOAD: return "OC_ERR_RUNTIME_LOAD";
    case OC_ERR_SESSION_CREATE: return "OC_ERR_SESSION_CREATE";
    }
    return "OC_ERR_UNKNOWN";
}

oc_status oc_aligned_copy(const oc_alloc *a, const void **data, size_t size, void **copy, oc_error *err) {
    *copy = NULL;
    if (*data == NULL || (uintptr_t)*data % OC_BLOB_ALIGNMENT == 0) return OC_OK;
    *copy = oc_malloc(a, size); /* 16-aligned */
    if (*copy == NULL)
        return oc_fail(err, OC_ERR_OUT_OF_MEMORY, "out of memory copying %zu blob bytes given at an address not %d-byte "
                       "aligned (pass bytes at an aligned address to load in place)", size, OC_BLOB_ALIGNMENT);
    memcpy(*copy, *data, size);
    *data = *copy;
    return OC_OK;
}
