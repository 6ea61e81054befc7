/* session.c - onnxruntime through its C API: load the library at run time, and create a session
 * from a checked blob with the blob's recipe, as pipeline/runtime/session.py does. */
#if !defined(_WIN32) && !defined(_POSIX_C_SOURCE)
#define _POSIX_C_SOURCE 200809L
#endif
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <onnxruntime_c_api.h>

#include "internal.h"

#ifdef _WIN32
#define WIN32_LEAN_AND_MEAN
#include <windows.h>
#define DEFAULT_LIBRARY "onnxruntime.dll"
#else
#include <dlfcn.h>
#ifdef __APPLE__
#define DEFAULT_LIBRARY "libonnxruntime.dylib"
#else
#define DEFAULT_LIBRARY "libonnxruntime.so"
#endif
#endif

/* The C API version this library is written against: every onnxruntime from 1.21 serves it. */
#define OC_ORT_API_VERSION 21
#define CPU_EP "CPUExecutionProvider"

struct oc_runtime {
    const OrtApi *api;
    OrtEnv *env;
    void *library; /* NULL when the engine linked onnxruntime itself */
    char version[32];
    int parsed[3];
};

static void close_library(void *library) {
    if (library == NULL) return;
#ifdef _WIN32
    FreeLibrary((HMODULE)library);
#else
    dlclose(library);
#endif
}

static oc_status finish_runtime(oc_runtime *rt, const char *version, oc_runtime **out, oc_error *err) {
    OrtStatus *status;
    snprintf(rt->version, sizeof rt->version, "%s", version ? version : "");
    if (oc_parse_version(rt->version, rt->parsed) != 0) {
        rt->parsed[0] = rt->parsed[1] = rt->parsed[2] = 0;
    }
    status = rt->api->CreateEnv(ORT_LOGGING_LEVEL_WARNING, "onnx-cooker", &rt->env);
    if (status != NULL) {
        oc_fail(err, OC_ERR_RUNTIME_LOAD, "onnxruntime %s could not create its environment: %s", rt->version,
                rt->api->GetErrorMessage(status));
        rt->api->ReleaseStatus(status);
        close_library(rt->library);
        free(rt);
        return OC_ERR_RUNTIME_LOAD;
    }
    *out = rt;
    return OC_OK;
}

oc_status oc_runtime_load(const char *library_path, oc_runtime **out, oc_error *err) {
    typedef const OrtApiBase *(*get_base_fn)(void);
    const char *path = library_path ? library_path : DEFAULT_LIBRARY;
    get_base_fn get_base;
    const OrtApiBase *base;
    oc_runtime *rt;
    void *library;
    if (out == NULL) return oc_fail(err, OC_ERR_INVALID_ARGUMENT, "oc_runtime_load: out is NULL");
    *out = NULL;
#ifdef _WIN32
    library = (void *)LoadLibraryA(path);
    if (library == NULL)
        return oc_fail(err, OC_ERR_RUNTIME_LOAD, "cannot load onnxruntime from %s (Windows error %lu): pass its path",
                       path, (unsigned long)GetLastError());
    get_base = (get_base_fn)(void (*)(void))GetProcAddress((HMODULE)library, "OrtGetApiBase");
#else
    /* RTLD_NODELETE: onnxruntime is not made to be unloaded (its thread pools and statics outlive
     * the last session); it stays mapped for the life of the process. */
    library = dlopen(path, RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE);
    if (library == NULL)
        return oc_fail(err, OC_ERR_RUNTIME_LOAD,
                       "cannot load onnxruntime (%s): pass the path of libonnxruntime.so.<version> (the onnxruntime "
                       "wheel has it in onnxruntime/capi/)", dlerror());
    *(void **)(&get_base) = dlsym(library, "OrtGetApiBase");
#endif
    if (get_base == NULL) {
        close_library(library);
        return oc_fail(err, OC_ERR_RUNTIME_LOAD, "%s has no OrtGetApiBase: not an onnxruntime library", path);
    }
    base = get_base();
    rt = calloc(1, sizeof *rt);
    if (rt == NULL) {
        close_library(library);
        return oc_fail(err, OC_ERR_OUT_OF_MEMORY, "out of memory loading onnxruntime");
    }
    rt->library = library;
    rt->api = base->GetApi(OC_ORT_API_VERSION);
    if (rt->api == NULL) {
        oc_fail(err, OC_ERR_RUNTIME_LOAD, "onnxruntime %s at %s does not offer C API version %d: use onnxruntime 1.21 or newer",
                base->GetVersionString(), path, OC_ORT_API_VERSION);
        close_library(library);
        free(rt);
        return OC_ERR_RUNTIME_LOAD;
    }
    return finish_runtime(rt, base->GetVersionString(), out, err);
}

oc_status oc_runtime_from_api(const struct OrtApi *api, const char *version, oc_runtime **out, oc_error *err) {
    oc_runtime *rt;
    if (api == NULL || version == NULL || out == NULL)
        return oc_fail(err, OC_ERR_INVALID_ARGUMENT, "oc_runtime_from_api: NULL argument");
    *out = NULL;
    rt = calloc(1, sizeof *rt);
    if (rt == NULL) return oc_fail(err, OC_ERR_OUT_OF_MEMORY, "out of memory");
    rt->api = api;
    return finish_runtime(rt, version, out, err);
}

void oc_runtime_release(oc_runtime *rt) {
    if (rt == NULL) return;
    if (rt->env != NULL) rt->api->ReleaseEnv(rt->env);
    close_library(rt->library);
    free(rt);
}

const struct OrtApi *oc_runtime_api(const oc_runtime *rt) { return rt ? rt->api : NULL; }
const char *oc_runtime_version(const oc_runtime *rt) { return rt ? rt->version : NULL; }

void oc_session_release(oc_runtime *rt, struct OrtSession *session) {
    if (rt != NULL && session != NULL) rt->api->ReleaseSession(session);
}

const char *oc_load_path_name(oc_load_path path) {
    switch (path) {
    case OC_LOAD_ONNX_INLINE: return "onnx-inline";
    case OC_LOAD_ONNX_FILE_BUFFERS: return "onnx-file-buffers";
    case OC_LOAD_ONNX_EXTERNAL: return "onnx-external-initializers";
    case OC_LOAD_ORT_IN_PLACE: return "ort-in-place";
    case OC_LOAD_ONNX_MAPPED: return "onnx-mapped";
    }
    return "unknown";
}

/* --- session creation ------------------------------------------------------------------------ */

typedef struct session_ctx {
    const oc_runtime *rt;
    const oc_blob *blob;
    oc_error *err;
    int low_memory;
} session_ctx;

/* Turn an OrtStatus into an oc_status (releasing it); OC_OK for NULL. */
static oc_status check_ort(session_ctx *c, OrtStatus *status, oc_status code, const char *what) {
    oc_status result;
    if (status == NULL) return OC_OK;
    result = oc_fail(c->err, code, "onnxruntime %s %s model '%s' (%s): %s", c->rt->version, what, c->blob->info.name,
                     c->blob->info.platform, c->rt->api->GetErrorMessage(status));
    c->rt->api->ReleaseStatus(status);
    return result;
}

static int version_below(const int a[3], const int b[3]) {
    int i;
    for (i = 0; i < 3; ++i)
        if (a[i] != b[i]) return a[i] < b[i];
    return 0;
}

static const char *const UNSAFE_ENTRIES[] = {
    "session.use_ort_model_bytes_for_initializers", "session.use_ort_model_bytes_directly",
    "session.use_memory_mapped_ort_model", "session.load_model_format",
    "session.use_external_initializer_file_buffers_directly", "session.model_external_initializers_file_folder_path"};

static int starts_with(const char *text, const char *prefix) { return strncmp(text, prefix, strlen(prefix)) == 0; }

static oc_status apply_session_options(session_ctx *c, OrtSessionOptions *options, const char *ep) {
    const OrtApi *api = c->rt->api;
    size_t i, n = oc_blob_session_option_count(c->blob, ep);
    for (i = 0; i < n; ++i) {
        const char *key, *value;
        size_t k;
        oc_blob_session_option(c->blob, ep, i, &key, &value);
        if (strcmp(key, "enable_mem_pattern") == 0) {
            int on = !(strcmp(value, "False") == 0 || strcmp(value, "0") == 0 || value[0] == '\0');
            if (check_ort(c, on ? api->EnableMemPattern(options) : api->DisableMemPattern(options),
                          OC_ERR_SESSION_CREATE, "refused a session option of") != OC_OK)
                return OC_ERR_SESSION_CREATE;
        } else if (strcmp(key, "execution_mode") == 0) {
            ExecutionMode mode;
            if (strcmp(value, "sequential") == 0) mode = ORT_SEQUENTIAL;
            else if (strcmp(value, "parallel") == 0) mode = ORT_PARALLEL;
            else
                return oc_fail(c->err, OC_ERR_SESSION_CREATE, "model '%s': bad session option for %s: execution_mode '%s'",
                               c->blob->info.name, ep, value);
            if (check_ort(c, api->SetSessionExecutionMode(options, mode), OC_ERR_SESSION_CREATE,
                          "refused a session option of") != OC_OK)
                return OC_ERR_SESSION_CREATE;
        } else if (strcmp(key, "graph_optimization_level") == 0) {
            GraphOptimizationLevel level;
            if (strcmp(value, "disable") == 0) level = ORT_DISABLE_ALL;
            else if (strcmp(value, "basic") == 0) level = ORT_ENABLE_BASIC;
            else if (strcmp(value, "extended") == 0) level = ORT_ENABLE_EXTENDED;
            else if (strcmp(value, "all") == 0) level = ORT_ENABLE_ALL;
            else
                return oc_fail(c->err, OC_ERR_SESSION_CREATE,
                               "model '%s': bad session option for %s: graph_optimization_level '%s'", c->blob->info.name,
                               ep, value);
            if (check_ort(c, api->SetSessionGraphOptimizationLevel(options, level), OC_ERR_SESSION_CREATE,
                          "refused a session option of") != OC_OK)
                return OC_ERR_SESSION_CREATE;
        } else {
            for (k = 0; k < sizeof UNSAFE_ENTRIES / sizeof UNSAFE_ENTRIES[0]; ++k)
                if (strcmp(key, UNSAFE_ENTRIES[k]) == 0)
                    return oc_fail(c->err, OC_ERR_SESSION_CREATE,
                                   "model '%s': bad session option for %s: %s is refused: the loader sets it itself, for "
                                   "the load path it proved (docs/design.md, loading from memory)",
                                   c->blob->info.name, ep, key);
            if (!starts_with(key, "session.") && !starts_with(key, "optimization.") && !starts_with(key, "mlas."))
                return oc_fail(c->err, OC_ERR_SESSION_CREATE,
                               "model '%s': bad session option for %s: config entry '%s' is not allowed in a blob "
                               "(session.*, optimization.*, mlas.*)", c->blob->info.name, ep, key);
            if (check_ort(c, api->AddSessionConfigEntry(options, key, value), OC_ERR_SESSION_CREATE,
                          "refused a session option of") != OC_OK)
                return OC_ERR_SESSION_CREATE;
        }
    }
    return OC_OK;
}

/* onnxruntime's short names for SessionOptionsAppendExecutionProvider, by EP name. */
static const char *short_name(const char *ep) {
    static const char *const names[][2] = {
        {"DmlExecutionProvider", "DML"},       {"CoreMLExecutionProvider", "CoreML"},
        {"QNNExecutionProvider", "QNN"},       {"XnnpackExecutionProvider", "XNNPACK"},
        {"OpenVINOExecutionProvider", "OpenVINO"}, {"WebGpuExecutionProvider", "WebGPU"},
        {"SNPEExecutionProvider", "SNPE"},     {"AzureExecutionProvider", "AZURE"},
        {"VitisAIExecutionProvider", "VitisAI"}, {"JsExecutionProvider", "JS"}};
    size_t i;
    for (i = 0; i < sizeof names / sizeof names[0]; ++i)
        if (strcmp(names[i][0], ep) == 0) return names[i][1];
    return NULL;
}

static oc_status append_ep(session_ctx *c, OrtSessionOptions *options, const char *ep) {
    const OrtApi *api = c->rt->api;
    const char *keys[64], *values[64];
    size_t n = oc_blob_provider_option_count(c->blob, ep), i;
    const char *name = short_name(ep);
    if (strcmp(ep, CPU_EP) == 0) return OC_OK; /* always there, last */
    if (name == NULL)
        return oc_fail(c->err, OC_ERR_SESSION_CREATE,
                       "model '%s': this loader cannot register %s through onnxruntime's C API yet; pass providers "
                       "without it, or create the session from oc_blob_model/oc_blob_weights yourself",
                       c->blob->info.name, ep);
    if (n > 64) return oc_fail(c->err, OC_ERR_SESSION_CREATE, "model '%s': %s has too many provider options", c->blob->info.name, ep);
    for (i = 0; i < n; ++i) oc_blob_provider_option(c->blob, ep, i, &keys[i], &values[i]);
    if (check_ort(c, api->SessionOptionsAppendExecutionProvider(options, name, keys, values, n), OC_ERR_SESSION_CREATE,
                  "refused an execution provider for") != OC_OK)
        return OC_ERR_SESSION_CREATE;
    return OC_OK;
}

static int is_exclusive(const char *ep) { return strcmp(ep, "DmlExecutionProvider") == 0; }

/* The EPs to use: the blob's preferred ones this onnxruntime offers, then the CPU; DirectML only
 * with the CPU (choose_providers in session.py). `chosen` holds up to `capacity` names. */
static oc_status choose_providers(session_ctx *c, const char **chosen, size_t capacity, size_t *count) {
    const OrtApi *api = c->rt->api;
    char **available = NULL;
    int n_available = 0, k;
    size_t i, n = 0;
    if (check_ort(c, api->GetAvailableProviders(&available, &n_available), OC_ERR_SESSION_CREATE,
                  "could not list its execution providers for") != OC_OK)
        return OC_ERR_SESSION_CREATE;
    for (i = 0; i < c->blob->ep_count && n + 1 < capacity; ++i) {
        const char *ep = c->blob->eps[i];
        int offered = 0;
        if (strcmp(ep, CPU_EP) == 0) continue;
        for (k = 0; k < n_available; ++k)
            if (strcmp(available[k], ep) == 0) offered = 1;
        if (!offered) continue;
        if (n > 0 && (is_exclusive(ep) || is_exclusive(chosen[0]))) continue;
        chosen[n++] = ep;
    }
    chosen[n++] = CPU_EP;
    *count = n;
    return check_ort(c, api->ReleaseAvailableProviders(available, n_available), OC_ERR_SESSION_CREATE,
                     "could not release its provider list for");
}

static void report(const oc_session_options *o, const char *stage, double fraction) {
    if (o != NULL && o->progress != NULL) o->progress(o->progress_user, stage, fraction);
}

#define TRY(expr)                       \
    do {                                \
        status = (expr);                \
        if (status != OC_OK) goto done; \
    } while (0)
#define TRY_ORT(expr, what) TRY(check_ort(c, (expr), OC_ERR_SESSION_CREATE, what))

/* Session options with the blob's recipe for `chosen` EPs (the caller's base, or new ones). */
static oc_status recipe_options(session_ctx *c, const oc_session_options *o, const char **chosen, size_t count,
                                OrtSessionOptions **out) {
    const OrtApi *api = c->rt->api;
    OrtSessionOptions *options = NULL;
    oc_status status = OC_OK;
    size_t i;
    if (o != NULL && o->base != NULL) {
        options = o->base;
    } else if (check_ort(c, api->CreateSessionOptions(&options), OC_ERR_SESSION_CREATE,
                         "could not create session options for") != OC_OK) {
        return OC_ERR_SESSION_CREATE;
    }
    for (i = 0; i < count; ++i) TRY(apply_session_options(c, options, chosen[i]));
    TRY_ORT(api->AddSessionConfigEntry(options, "session.enable_saved_runtime_optimizations",
                                       c->blob->info.saved_runtime_optimizations ? "1" : "0"),
            "refused a session option of");
    if (o != NULL && o->low_memory)
        TRY_ORT(api->AddSessionConfigEntry(options, "session.disable_prepacking", "1"), "refused low_memory for");
    if (o != NULL && o->intra_op_threads > 0)
        TRY_ORT(api->SetIntraOpNumThreads(options, o->intra_op_threads), "refused the thread count for");
    for (i = 0; i < count; ++i) TRY(append_ep(c, options, chosen[i]));
done:
    if (status != OC_OK && (o == NULL || o->base == NULL)) api->ReleaseSessionOptions(options);
    else *out = options;
    return status;
}

/* onnxruntime builds proven to resolve onnx-mapped's references in the folder the session entry
 * names (the Python loader's MAPPED_VERSIONS, each proven by its tests and the cook's runtime check). */
static int mapped_version(const int v[3]) {
    return (v[0] == 1 && v[1] == 24 && v[2] == 4) || (v[0] == 1 && v[1] == 28 && v[2] == 0) ||
           (v[0] == 1 && v[1] == 32 && v[2] == 0);
}

/* From this size of a mapped blob, the pages prepacking reads are let go while the session is built
 * (268 MB ORT model: peak 2.02x -> 1.07x the model, session ready 360 ms against the file's 381;
 * below it a thread and its madvise calls cost more than the pages weigh). */
#define PAGER_MIN (16u << 20)

/* The load path for this blob: the fastest and leanest proven one. From 1.32 the weights go in
 * place from the blob's bytes (file buffers; from the library's own mapping with its pages let go
 * while prepacking reads them). Before 1.32 that door copies, so a blob file's raw weights are
 * mapped by onnxruntime itself instead (onnx-mapped), prepacking or not; bytes in memory are copied. */
static oc_load_path choose_path(const oc_runtime *rt, const oc_blob *blob, const oc_session_options *o) {
    static const int FILE_BUFFERS_SINCE[3] = {1, 32, 0};
    int weights_raw = blob->weights != NULL && blob->weights_owned == NULL;
    if (blob->info.format == OC_FORMAT_ORT) return OC_LOAD_ORT_IN_PLACE;
    if (blob->weights_size == 0) return OC_LOAD_ONNX_INLINE;
    if (!version_below(rt->parsed, FILE_BUFFERS_SINCE)) return OC_LOAD_ONNX_FILE_BUFFERS;
    if (blob->file_path != NULL && blob->reopen_by_name && weights_raw && mapped_version(rt->parsed) &&
        (o == NULL || o->base == NULL))
        return OC_LOAD_ONNX_MAPPED;
    return OC_LOAD_ONNX_EXTERNAL;
}

/* Hand the blob to onnxruntime along `path` with `options` (which it completes). */
static oc_status create_along(session_ctx *c, oc_load_path path, OrtSessionOptions *options, OrtSession **session) {
    const OrtApi *api = c->rt->api;
    const oc_blob *blob = c->blob;
    const void *model = blob->graph;
    size_t model_size = blob->graph_size;
    uint8_t *rewritten = NULL;
    char *real = NULL;
    oc_status status = OC_OK;
    OrtStatus *s;
    if (path == OC_LOAD_ORT_IN_PLACE) {
        TRY_ORT(api->AddSessionConfigEntry(options, "session.load_model_format", "ORT"), "refused the ORT format for");
        TRY_ORT(api->AddSessionConfigEntry(options, "session.use_ort_model_bytes_directly", "1"), "refused in-place bytes for");
        TRY_ORT(api->AddSessionConfigEntry(options, "session.use_ort_model_bytes_for_initializers", "1"),
                "refused in-place initializers for");
    } else if (path == OC_LOAD_ONNX_MAPPED) {
        /* References name the blob file at each tensor's offset in its raw extent; onnxruntime
         * opens it by name from the folder the entry gives: check the name is still the file the
         * blob mapped, before and after (a re-cook renames files over it). */
        char *slash;
        real = oc_real_path(blob->file_path);
        if (real == NULL || !oc_same_file(real, blob->file_identity)) {
            status = oc_fail(c->err, OC_ERR_SESSION_CREATE, "model '%s': %s was replaced after it was opened; open the "
                             "bundle and the blob again", blob->info.name, blob->file_path);
            goto done;
        }
        slash = strrchr(real, '/');
#ifdef _WIN32
        if (strrchr(real, '\\') > slash) slash = strrchr(real, '\\');
#endif
        if (slash == NULL) {
            status = oc_fail(c->err, OC_ERR_SESSION_CREATE, "model '%s': no folder in %s", blob->info.name, real);
            goto done;
        }
        *slash = '\0';
        TRY(oc_rewrite_locations(blob->graph, blob->graph_size, slash + 1, (uint64_t)(blob->weights - blob->data),
                                 blob->tensors, blob->tensor_count, &blob->alloc, &rewritten, &model_size, c->err));
        model = rewritten;
        TRY_ORT(api->AddSessionConfigEntry(options, "session.model_external_initializers_file_folder_path",
                                           real[0] ? real : "/"),
                "refused the blob's folder for");
        *slash = '/';
    } else if (path == OC_LOAD_ONNX_FILE_BUFFERS || path == OC_LOAD_ONNX_EXTERNAL) {
        const ORTCHAR_T *names[1];
        char *buffers[1];
        size_t lengths[1];
#ifdef _WIN32
        wchar_t wide[512];
        if (MultiByteToWideChar(CP_UTF8, 0, blob->info.weights_file, -1, wide, 512) == 0) {
            status = oc_fail(c->err, OC_ERR_CORRUPT, "model '%s': weights file name too long", blob->info.name);
            goto done;
        }
        names[0] = wide;
#else
        names[0] = blob->info.weights_file;
#endif
        if (path == OC_LOAD_ONNX_FILE_BUFFERS)
            TRY_ORT(api->AddSessionConfigEntry(options, "session.use_external_initializer_file_buffers_directly", "1"),
                    "refused in-place weights for");
        buffers[0] = (char *)(uintptr_t)blob->weights; /* onnxruntime reads it, never writes */
        lengths[0] = blob->weights_size;
        TRY_ORT(api->AddExternalInitializersFromFilesInMemory(options, names, buffers, lengths, 1), "refused the weights of");
    }
    {
        /* From the blob's own file mapping, with prepacking on, drop the pages onnxruntime has read
         * while it builds the session: they would stay beside the packed copies (peak 2x the model). */
        oc_pager *pager = NULL;
        if (blob->map != NULL && blob->map_size >= PAGER_MIN && !c->low_memory &&
            (path == OC_LOAD_ORT_IN_PLACE || path == OC_LOAD_ONNX_FILE_BUFFERS || path == OC_LOAD_ONNX_EXTERNAL))
            pager = oc_pager_start(blob->map, blob->map_size);
        s = api->CreateSessionFromArray(c->rt->env, model, model_size, options, session);
        oc_pager_stop(pager);
    }
    if (s != NULL) {
        status = oc_fail(c->err, OC_ERR_SESSION_CREATE,
                         "onnxruntime %s could not create a session for model '%s' (%s, %s, load path %s): %s",
                         c->rt->version, blob->info.name, blob->info.platform,
                         blob->info.format == OC_FORMAT_ORT ? "ort" : "onnx", oc_load_path_name(path),
                         api->GetErrorMessage(s));
        api->ReleaseStatus(s);
        *session = NULL;
        goto done;
    }
    if (path == OC_LOAD_ONNX_MAPPED && !oc_same_file(real, blob->file_identity)) {
        api->ReleaseSession(*session);
        *session = NULL;
        status = oc_fail(c->err, OC_ERR_SESSION_CREATE, "model '%s' (load path onnx-mapped): %s was replaced while it was "
                         "loaded; open the bundle and the blob again", blob->info.name, blob->file_path);
    }
done:
    free(real);
    oc_free(&blob->alloc, rewritten);
    return status;
}
#undef TRY
#undef TRY_ORT

oc_status oc_session_create(oc_runtime *rt, oc_blob *blob, const oc_session_options *o, struct OrtSession **out,
                            oc_load_path *path_used, oc_error *err) {
    session_ctx c;
    const OrtApi *api;
    OrtSessionOptions *options = NULL;
    const char *chosen[34];
    size_t count = 0, i;
    oc_load_path path;
    oc_status status = OC_OK;
    if (rt == NULL || blob == NULL || out == NULL)
        return oc_fail(err, OC_ERR_INVALID_ARGUMENT, "oc_session_create: NULL argument");
    *out = NULL;
    api = rt->api;
    c.rt = rt;
    c.blob = blob;
    c.err = err;
    c.low_memory = o != NULL && o->low_memory;
    if (rt->parsed[0] == 0 && rt->parsed[1] == 0)
        return oc_fail(err, OC_ERR_RUNTIME_LOAD, "onnxruntime reports an unreadable version '%s'", rt->version);
    if (version_below(rt->parsed, blob->min_runtime)) {
        const char *kind = blob->info.format == OC_FORMAT_ORT ? "ORT format" : "ONNX";
        return oc_fail(err, OC_ERR_INCOMPATIBLE_RUNTIME,
                       "model '%s' (%s, %s) needs onnxruntime %s or newer, but %s is loaded; use onnxruntime >= %s or "
                       "re-cook for this version (set runtime_version in the platform profile)",
                       blob->info.name, blob->info.platform, kind, blob->info.min_runtime_version, rt->version,
                       blob->info.min_runtime_version);
    }
    if (blob->info.format == OC_FORMAT_ONNX) { /* every reference checked before onnxruntime sees the graph */
        status = oc_check_references(blob->graph, blob->graph_size, blob->info.name,
                                     blob->weights_size ? blob->info.weights_file : NULL, blob->tensors,
                                     blob->weights_size ? blob->tensor_count : 0, &blob->alloc, err);
        if (status != OC_OK) return status;
    }
    if (o != NULL && o->providers != NULL) {
        if (o->provider_count >= sizeof chosen / sizeof chosen[0])
            return oc_fail(err, OC_ERR_INVALID_ARGUMENT, "oc_session_create: too many providers");
        for (i = 0; i < o->provider_count; ++i) {
            if (o->providers[i] == NULL) return oc_fail(err, OC_ERR_INVALID_ARGUMENT, "oc_session_create: NULL provider name");
            chosen[count++] = o->providers[i];
        }
    } else {
        status = choose_providers(&c, chosen, sizeof chosen / sizeof chosen[0], &count);
        if (status != OC_OK) return status;
    }
    path = choose_path(rt, blob, o);
    status = recipe_options(&c, o, chosen, count, &options);
    if (status != OC_OK) return status;
    report(o, "session", 0.0);
    status = create_along(&c, path, options, out);
    if (status == OC_ERR_SESSION_CREATE && path == OC_LOAD_ONNX_MAPPED) {
        /* onnxruntime refused to map the file (a file system it cannot map, a renamed file): the
         * weights from the blob's own mapping instead, on fresh options (as loadpaths.py does) */
        api->ReleaseSessionOptions(options);
        options = NULL;
        static const int FILE_BUFFERS_SINCE[3] = {1, 32, 0};
        path = version_below(rt->parsed, FILE_BUFFERS_SINCE) ? OC_LOAD_ONNX_EXTERNAL : OC_LOAD_ONNX_FILE_BUFFERS;
        status = recipe_options(&c, o, chosen, count, &options);
        if (status == OC_OK) status = create_along(&c, path, options, out);
    }
    if (status == OC_OK) {
        if (path_used != NULL) *path_used = path;
        report(o, "session", 1.0);
    }
    if (options != NULL && (o == NULL || o->base == NULL)) api->ReleaseSessionOptions(options);
    return status;
}
