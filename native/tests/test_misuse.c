/* test_misuse.c - what an engine programmer gets wrong, and running out of memory.
 *
 *   test_misuse ORT_LIBRARY BUNDLE_DIR MODEL
 *
 * One JSON line per case, {"case": ..., "status": ..., "message": ...} plus what the case measured:
 *   - oc_runtime_from_api_base over the OrtApiBase of the library loaded here (as an engine linking
 *     onnxruntime has it): its version, and a session along the load path oc_runtime_load takes;
 *   - oc_runtime_from_api with version text that is no version of 1.21+ ("garbage", "", "1.20.0")
 *     and with the real one;
 *   - session options that contradict themselves (providers NULL with a count, a negative thread
 *     count) and a blob open with a negative thread count;
 *   - the manifest and MODEL's blob opened from memory with an allocator that fails at its Nth call,
 *     for every N until one succeeds: "statuses" lists each status met (only OC_OK and
 *     OC_ERR_OUT_OF_MEMORY are right; a damaged-manifest verdict for a refused allocation is wrong),
 *     "leaked" the allocations not freed.
 * Exit 0 whatever the statuses (they are the result), 2 when the inputs cannot be read. */
#define _POSIX_C_SOURCE 200809L
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <onnxruntime_c_api.h>

#include "json_text.h"
#include "onnx_cooker.h"


static void report(const char *name, oc_status status, const oc_error *err, const char *extra) {
    printf("{\"case\": ");
    json_text(name);
    printf(", \"status\": \"%s\", \"message\": ", oc_status_name(status));
    json_text(status == OC_OK ? "" : err->message);
    printf("%s}\n", extra ? extra : "");
}

static unsigned char *read_file(const char *path, size_t *size) {
    FILE *f = fopen(path, "rb");
    unsigned char *data;
    long n;
    if (f == NULL || fseek(f, 0, SEEK_END) != 0 || (n = ftell(f)) < 0 || fseek(f, 0, SEEK_SET) != 0) {
        if (f) fclose(f);
        return NULL;
    }
    data = malloc((size_t)n + 1);
    if (data == NULL || fread(data, 1, (size_t)n, f) != (size_t)n) {
        free(data);
        fclose(f);
        return NULL;
    }
    fclose(f);
    *size = (size_t)n;
    return data;
}

/* An allocator that refuses its `fail_at`th call (1-based; 0: never), counting what is live. */
typedef struct failing {
    long calls, fail_at, live;
} failing;

static void *failing_alloc(void *user, size_t size, size_t alignment) {
    failing *f = user;
    void *p = NULL;
    if (++f->calls == f->fail_at) return NULL;
    if (posix_memalign(&p, alignment < sizeof(void *) ? sizeof(void *) : alignment, size ? size : 1) != 0) return NULL;
    ++f->live;
    return p;
}

static void failing_free(void *user, void *ptr) {
    failing *f = user;
    if (ptr == NULL) return;
    --f->live;
    free(ptr);
}

static void out_of_memory_sweep(const unsigned char *manifest, size_t manifest_size, const unsigned char *blob_bytes,
                                size_t blob_size, const char *model) {
    char seen[512] = "", extra[1024];
    long n, leaked = 0, runs = 0;
    for (n = 1; n < 100000; ++n) {
        failing f = {0, 0, 0};
        oc_allocator hooks;
        oc_bundle_options options;
        oc_bundle *bundle = NULL;
        oc_blob *blob = NULL;
        oc_error err;
        oc_status status;
        const char *name;
        f.fail_at = n;
        hooks.alloc = failing_alloc;
        hooks.free = failing_free;
        hooks.user = &f;
        memset(&options, 0, sizeof options);
        options.allocator = &hooks;
        status = oc_bundle_open_manifest(manifest, manifest_size, NULL, &options, &bundle, &err);
        if (status == OC_OK) status = oc_bundle_open_blob_memory(bundle, model, blob_bytes, blob_size, &blob, &err);
        oc_blob_close(blob);
        oc_bundle_close(bundle);
        leaked += f.live;
        ++runs;
        name = oc_status_name(status);
        if (strstr(seen, name) == NULL && strlen(seen) + strlen(name) + 4 < sizeof seen)
            snprintf(seen + strlen(seen), sizeof seen - strlen(seen), "%s\"%s\"", seen[0] ? ", " : "", name);
        if (status != OC_OK && status != OC_ERR_OUT_OF_MEMORY) {
            snprintf(extra, sizeof extra, ", \"at\": %ld", n);
            report("out of memory: a wrong verdict", status, &err, extra);
        }
        if (f.calls < f.fail_at) break; /* every allocation of this open was served: the sweep is done */
    }
    snprintf(extra, sizeof extra, ", \"runs\": %ld, \"statuses\": [%s], \"leaked\": %ld", runs, seen, leaked);
    report("out of memory sweep", OC_OK, NULL, extra);
}

int main(int argc, char **argv) {
    typedef const OrtApiBase *(*get_base_fn)(void);
    void *library;
    get_base_fn get_base;
    const OrtApiBase *base;
    oc_runtime *loaded = NULL, *wrapped = NULL;
    oc_bundle *bundle = NULL;
    oc_blob *blob = NULL;
    struct OrtSession *session = NULL;
    oc_session_options so;
    oc_blob_options bo;
    oc_load_path path_loaded = OC_LOAD_ONNX_INLINE, path_wrapped = OC_LOAD_ONNX_INLINE;
    oc_error err;
    oc_status status;
    char extra[512], manifest_path[4096];
    unsigned char *manifest, *blob_bytes;
    size_t manifest_size = 0, blob_size = 0, i;
    uint64_t listed = 0;
    const char *file;
    static const char *const bad_versions[] = {"garbage", "", "1.20.0"};
    if (argc != 4) {
        fprintf(stderr, "usage: test_misuse ORT_LIBRARY BUNDLE_DIR MODEL\n");
        return 2;
    }
    if (oc_runtime_load(argv[1], &loaded, &err) != OC_OK || oc_bundle_open_dir(argv[2], NULL, &bundle, &err) != OC_OK ||
        oc_bundle_open_blob(bundle, argv[3], &blob, &err) != OC_OK) {
        fprintf(stderr, "test_misuse: %s\n", err.message);
        return 2;
    }
    /* an engine that links onnxruntime: its OrtGetApiBase */
    library = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
    *(void **)(&get_base) = library ? dlsym(library, "OrtGetApiBase") : NULL;
    if (get_base == NULL) {
        fprintf(stderr, "test_misuse: no OrtGetApiBase in %s\n", argv[1]);
        return 2;
    }
    base = get_base();
    status = oc_runtime_from_api_base(base, &wrapped, &err);
    if (status == OC_OK) {
        oc_status made = oc_session_create(loaded, blob, NULL, &session, &path_loaded, &err);
        oc_session_release(loaded, session);
        session = NULL;
        if (made == OC_OK) made = oc_session_create(wrapped, blob, NULL, &session, &path_wrapped, &err);
        oc_session_release(wrapped, session);
        session = NULL;
        snprintf(extra, sizeof extra, ", \"version\": \"%s\", \"onnxruntime\": \"%s\", \"session\": \"%s\", \"path\": \"%s\", "
                 "\"path_loaded\": \"%s\"", oc_runtime_version(wrapped), base->GetVersionString(), oc_status_name(made),
                 oc_load_path_name(path_wrapped), oc_load_path_name(path_loaded));
        report("from_api_base", status, &err, extra);
    } else {
        report("from_api_base", status, &err, NULL);
    }
    oc_runtime_release(wrapped);
    for (i = 0; i < sizeof bad_versions / sizeof bad_versions[0]; ++i) {
        wrapped = NULL;
        status = oc_runtime_from_api(oc_runtime_api(loaded), bad_versions[i], &wrapped, &err);
        snprintf(extra, sizeof extra, ", \"version\": \"%s\", \"runtime\": %s", bad_versions[i], wrapped ? "true" : "false");
        report("from_api with a version that is none", status, &err, extra);
        oc_runtime_release(wrapped);
    }
    wrapped = NULL;
    status = oc_runtime_from_api(oc_runtime_api(loaded), base->GetVersionString(), &wrapped, &err);
    report("from_api with the real version", status, &err, NULL);
    oc_runtime_release(wrapped);

    memset(&so, 0, sizeof so);
    so.provider_count = 2; /* and providers NULL */
    status = oc_session_create(loaded, blob, &so, &session, NULL, &err);
    report("providers NULL with a count", status, &err, session ? ", \"session\": true" : NULL);
    oc_session_release(loaded, session);
    session = NULL;
    memset(&so, 0, sizeof so);
    so.intra_op_threads = -3;
    status = oc_session_create(loaded, blob, &so, &session, NULL, &err);
    report("a negative thread count", status, &err, session ? ", \"session\": true" : NULL);
    oc_session_release(loaded, session);
    session = NULL;

    snprintf(manifest_path, sizeof manifest_path, "%s/manifest.json", argv[2]);
    manifest = read_file(manifest_path, &manifest_size);
    file = oc_bundle_model_file(bundle, argv[3], &listed);
    snprintf(manifest_path, sizeof manifest_path, "%s/%s", argv[2], file ? file : "");
    blob_bytes = read_file(manifest_path, &blob_size);
    if (manifest == NULL || blob_bytes == NULL) {
        fprintf(stderr, "test_misuse: cannot read the manifest or %s\n", manifest_path);
        return 2;
    }
    memset(&bo, 0, sizeof bo);
    bo.threads = -5;
    {
        oc_blob *other = NULL;
        status = oc_blob_open_memory(blob_bytes, blob_size, &bo, &other, &err);
        report("a blob opened on a negative thread count", status, &err, NULL);
        oc_blob_close(other);
    }
    out_of_memory_sweep(manifest, manifest_size, blob_bytes, blob_size, argv[3]);
    free(manifest);
    free(blob_bytes);
    oc_blob_close(blob);
    oc_bundle_close(bundle);
    oc_runtime_release(loaded);
    return 0;
}
