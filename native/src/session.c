/* session.c - onnxruntime through its C API: load the library at run time, and create a session
 * from a checked blob with the blob's recipe, as onnx_cooker/runtime/session.py does. */
#if !defined(_WIN32) && !defined(_POSIX_C_SOURCE)
#define _POSIX_C_SOURCE 200809L
#endif
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <onnxruntime_c_api.h>

#include "internal.h"
#include "runtime.h"

#ifdef _WIN32
#define WIN32_LEAN_AND_MEAN
#include <wchar.h>
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

/* The C API version this library is written against: every onnxruntime from 1.21 serves it. The
 * plugin-EP functions (plugin_eps.c) are asked for as version 22, where onnxruntime serves it. */
#define OC_ORT_API_VERSION 21
#define OC_ORT_PLUGIN_API_VERSION 22

static const int PLUGIN_EPS_SINCE[3] = {1, 22, 0};
static int version_below(const int a[3], const int b[3]);

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
    /* an engine's OrtApi (oc_runtime_from_api): onnxruntime serves one table for every version it
     * knows, so from 1.22 it holds the plugin-EP functions (oc_runtime_load and _from_api_base ask
     * for version 22 themselves) */
    if (rt->library == NULL && rt->plugin == NULL && (rt->parsed[0] || rt->parsed[1]) &&
        !version_below(rt->parsed, PLUGIN_EPS_SINCE))
        rt->plugin = rt->api;
    status = rt->api->CreateEnv(ORT_LOGGING_LEVEL_WARNING, "onnx-cooker", &rt->env);
    if (status != NULL) {
        oc_fail(err, OC_ERR_RUNTIME_LOAD, "onnxruntime %s could not create its environment: %s", rt->version,
                rt->api->GetErrorMessage(status));
        rt->api->ReleaseStatus(status);
        close_library(rt->library);
        free(rt);
        return OC_ERR_RUNTIME_LOAD;
    }
    oc_plugin_runtime_started(rt);
    *out = rt;
    return OC_OK;
}

/* A runtime over onnxruntime's OrtApiBase: its C API (version 21, and 22 for plugin EPs where the
 * version has them). `library` (owned from here: closed on failure) and `path` are NULL for an
 * engine's own onnxruntime (oc_runtime_from_api_base). */
static oc_status runtime_from_base(const OrtApiBase *base, void *library, const char *path, oc_runtime **out,
                                   oc_error *err) {
    oc_runtime *rt = calloc(1, sizeof *rt);
    const char *version = base->GetVersionString();
    int parsed[3];
    if (rt == NULL) {
        close_library(library);
        return oc_fail(err, OC_ERR_OUT_OF_MEMORY, "out of memory loading onnxruntime");
    }
    rt->library = library;
    rt->api = base->GetApi(OC_ORT_API_VERSION);
    if (rt->api == NULL) {
        oc_fail(err, OC_ERR_RUNTIME_LOAD, "onnxruntime %s%s%s does not offer C API version %d: use onnxruntime 1.21 or newer",
                version, path ? " at " : "", path ? path : "", OC_ORT_API_VERSION);
        close_library(library);
        free(rt);
        return OC_ERR_RUNTIME_LOAD;
    }
    /* asked only where the version says it is there: onnxruntime prints a line for one it lacks */
    if (oc_parse_version(version, parsed) == 0 && !version_below(parsed, PLUGIN_EPS_SINCE))
        rt->plugin = base->GetApi(OC_ORT_PLUGIN_API_VERSION);
    return finish_runtime(rt, version, out, err);
}

oc_status oc_runtime_load(const char *library_path, oc_runtime **out, oc_error *err) {
    typedef const OrtApiBase *(*get_base_fn)(void);
    const char *path = library_path ? library_path : DEFAULT_LIBRARY;
    get_base_fn get_base;
    void *library;
    if (out == NULL) return oc_fail(err, OC_ERR_INVALID_ARGUMENT, "oc_runtime_load: out is NULL");
    *out = NULL;
    if (path[0] == '\0')
        return oc_fail(err, OC_ERR_INVALID_ARGUMENT, "oc_runtime_load: an empty library path; pass the path of "
                       "onnxruntime's library (the onnxruntime wheel has it in onnxruntime/capi/), or NULL for the "
                       "platform's default name, %s", DEFAULT_LIBRARY);
#ifdef _WIN32
    {
        /* A UTF-8 path; one with a folder is loaded with that folder first in the search for the
         * DLLs it needs (onnxruntime_providers_shared.dll beside onnxruntime.dll) */
        wchar_t *wide = oc_wide_path(path), *full = NULL;
        DWORD code;
        if (wide == NULL)
            return oc_fail(err, OC_ERR_RUNTIME_LOAD, "cannot load onnxruntime from %s: not a UTF-8 path", path);
        if (wcschr(wide, L'\\') != NULL || wcschr(wide, L'/') != NULL) full = _wfullpath(NULL, wide, 0);
        library = full != NULL ? (void *)LoadLibraryExW(full, NULL, LOAD_WITH_ALTERED_SEARCH_PATH)
                               : (void *)LoadLibraryW(wide);
        code = GetLastError();
        free(full);
        free(wide);
        if (library == NULL)
            return oc_fail(err, OC_ERR_RUNTIME_LOAD,
                           "cannot load onnxruntime from %s (Windows error %lu): pass the path of onnxruntime.dll (the "
                           "onnxruntime wheel for win_amd64 has it in onnxruntime/capi/)", path, (unsigned long)code);
    }
    get_base = (get_base_fn)(void (*)(void))GetProcAddress((HMODULE)library, "OrtGetApiBase");
    if (get_base != NULL) {
        /* As RTLD_NODELETE below: pinned, onnxruntime.dll stays loaded for the life of the process
         * (FreeLibrary in close_library only drops this load's reference) */
        HMODULE pinned = NULL;
        GetModuleHandleExW(GET_MODULE_HANDLE_EX_FLAG_FROM_ADDRESS | GET_MODULE_HANDLE_EX_FLAG_PIN,
                           (LPCWSTR)(void *)library, &pinned);
    }
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
    return runtime_from_base(get_base(), library, path, out, err);
}

oc_status oc_runtime_from_api(const struct OrtApi *api, const char *version, oc_runtime **out, oc_error *err) {
    static const int OLDEST[3] = {1, 21, 0};
    oc_runtime *rt;
    int parsed[3];
    if (api == NULL || version == NULL || out == NULL)
        return oc_fail(err, OC_ERR_INVALID_ARGUMENT, "oc_runtime_from_api: NULL argument");
    *out = NULL;
    /* the version picks the load paths and whether the plugin-EP functions are read from `api`: a
     * wrong one reads past an older table, so what cannot be a version of 1.21+ is refused */
    if (oc_parse_version(version, parsed) != 0 || version_below(parsed, OLDEST))
        return oc_fail(err, OC_ERR_INVALID_ARGUMENT,
                       "oc_runtime_from_api: '%s' is not the version of an onnxruntime this library runs with (1.21 or "
                       "newer); pass OrtGetApiBase()->GetVersionString(), or call oc_runtime_from_api_base, which "
                       "asks onnxruntime itself", version);
    rt = calloc(1, sizeof *rt);
    if (rt == NULL) return oc_fail(err, OC_ERR_OUT_OF_MEMORY, "out of memory");
    rt->api = api;
    return finish_runtime(rt, version, out, err);
}

oc_status oc_runtime_from_api_base(const struct OrtApiBase *base, oc_runtime **out, oc_error *err) {
    if (base == NULL || out == NULL) return oc_fail(err, OC_ERR_INVALID_ARGUMENT, "oc_runtime_from_api_base: NULL argument");
    *out = NULL;
    return runtime_from_base(base, NULL, NULL, out, err);
}

void oc_runtime_release(oc_runtime *rt) {
    if (rt == NULL) return;
    if (rt->env != NULL) {
        oc_plugin_runtime_released(rt);
        rt->api->ReleaseEnv(rt->env);
    }
    close_library(rt->library);
    free(rt);
}

oc_ep_append_fn oc_runtime_appender(const oc_runtime *rt, const char *ep, void **user) {
    size_t i;
    for (i = 0; i < rt->appender_count; ++i)
        if (strcmp(rt->appenders[i].ep, ep) == 0) {
            if (user != NULL) *user = rt->appenders[i].user;
            return rt->appenders[i].append;
        }
    return NULL;
}

oc_status oc_runtime_set_ep_appender(oc_runtime *rt, const char *ep, oc_ep_append_fn append, void *user,
                                     oc_error *err) {
    size_t i;
    if (rt == NULL || ep == NULL || ep[0] == '\0')
        return oc_fail(err, OC_ERR_INVALID_ARGUMENT, "oc_runtime_set_ep_appender: NULL runtime or empty EP name");
    if (strcmp(ep, OC_CPU_EP) == 0)
        return oc_fail(err, OC_ERR_INVALID_ARGUMENT, "oc_runtime_set_ep_appender: the CPU EP is onnxruntime's own, "
                       "always last: it takes no appender");
    if (strlen(ep) >= sizeof rt->appenders[0].ep)
        return oc_fail(err, OC_ERR_INVALID_ARGUMENT, "oc_runtime_set_ep_appender: an EP name of %zu bytes (under %zu "
                       "taken)", strlen(ep), sizeof rt->appenders[0].ep);
    oc_lock();
    for (i = 0; i < rt->appender_count && strcmp(rt->appenders[i].ep, ep) != 0; ++i) continue;
    if (i == rt->appender_count) {
        if (append == NULL || i == OC_MAX_EP_APPENDERS) { /* nothing to remove, or no room */
            oc_unlock();
            return append == NULL ? OC_OK
                                  : oc_fail(err, OC_ERR_INVALID_ARGUMENT, "oc_runtime_set_ep_appender: %s would be "
                                            "appender %d, past OC_MAX_EP_APPENDERS", ep, OC_MAX_EP_APPENDERS + 1);
        }
        memcpy(rt->appenders[i].ep, ep, strlen(ep) + 1);
        ++rt->appender_count;
    }
    rt->appenders[i].append = append; /* NULL: removed (the name stays: a plan may point at it) */
    rt->appenders[i].user = user;
    oc_unlock();
    return OC_OK;
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
    case OC_LOAD_ONNX_SHARED: return "onnx-shared-initializers";
    case OC_LOAD_ORT_BYTES: return "ort-bytes";
    }
    return "unknown";
}

/* --- session creation ------------------------------------------------------------------------ */

typedef struct session_ctx {
    const oc_runtime *rt;
    oc_blob *blob; /* changed only under oc_lock: its shared initializers */
    oc_error *err;
    int low_memory;
    char why[OC_REFUSED_MAX]; /* create_along's failure: onnxruntime's first line, cut as LoadInfo.refused */
    int memory_tensor;        /* ... and it refused a tensor attribute in place (MEMORY_TENSOR_REFUSAL) */
    int ort_entries_set;      /* the options already hold the ORT-format entries (a refused ort-in-place) */
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

/* `ep`'s session options from the recipe onto `options`, checked first (recipe.c: the values of the
 * named ones, the config entries against the allow-list). */
static oc_status apply_session_options(session_ctx *c, OrtSessionOptions *options, const char *ep) {
    const OrtApi *api = c->rt->api;
    size_t i, n = oc_blob_session_option_count(c->blob, ep);
    oc_status status = oc_recipe_check_session_options(c->blob, ep, c->err);
    for (i = 0; i < n && status == OC_OK; ++i) {
        const char *key, *value;
        OrtStatus *made;
        oc_blob_session_option(c->blob, ep, i, &key, &value);
        if (strcmp(key, "enable_mem_pattern") == 0) {
            int on = !(strcmp(value, "False") == 0 || strcmp(value, "0") == 0 || value[0] == '\0');
            made = on ? api->EnableMemPattern(options) : api->DisableMemPattern(options);
        } else if (strcmp(key, "execution_mode") == 0) {
            made = api->SetSessionExecutionMode(options, strcmp(value, "parallel") == 0 ? ORT_PARALLEL : ORT_SEQUENTIAL);
        } else if (strcmp(key, "graph_optimization_level") == 0) {
            GraphOptimizationLevel level = strcmp(value, "disable") == 0    ? ORT_DISABLE_ALL
                                           : strcmp(value, "basic") == 0    ? ORT_ENABLE_BASIC
                                           : strcmp(value, "extended") == 0 ? ORT_ENABLE_EXTENDED
                                                                            : ORT_ENABLE_ALL;
            made = api->SetSessionGraphOptimizationLevel(options, level);
        } else {
            made = api->AddSessionConfigEntry(options, key, value);
        }
        status = check_ort(c, made, OC_ERR_SESSION_CREATE, "refused a session option of");
    }
    return status;
}

/* onnxruntime's short names for SessionOptionsAppendExecutionProvider, by EP name: the names that
 * call accepts in 1.24.4, 1.28.0 and 1.32.0 (each answers an unknown one with the list it knows;
 * tests/test_native.py calls it with NvTensorRtRtx and MIGraphX in each). NvTensorRtRtx is a plugin
 * EP from 1.32 (onnxruntime then says so). CUDA and TensorRT take their V2 option APIs (below). */
static const char *short_name(const char *ep) {
    static const char *const names[][2] = {
        {"DmlExecutionProvider", "DML"},       {"CoreMLExecutionProvider", "CoreML"},
        {"QNNExecutionProvider", "QNN"},       {"XnnpackExecutionProvider", "XNNPACK"},
        {"OpenVINOExecutionProvider", "OpenVINO"}, {"WebGpuExecutionProvider", "WebGPU"},
        {"SNPEExecutionProvider", "SNPE"},     {"AzureExecutionProvider", "AZURE"},
        {"VitisAIExecutionProvider", "VitisAI"}, {"JsExecutionProvider", "JS"},
        {"NvTensorRTRTXExecutionProvider", "NvTensorRtRtx"}, {"MIGraphXExecutionProvider", "MIGraphX"}};
    size_t i;
    for (i = 0; i < sizeof names / sizeof names[0]; ++i)
        if (strcmp(names[i][0], ep) == 0) return names[i][1];
    return NULL;
}

#define CUDA_EP "CUDAExecutionProvider"
#define TENSORRT_EP "TensorrtExecutionProvider"

/* A refused CUDA or TensorRT EP: the model, the EP, onnxruntime's message and the fix for the step
 * that failed (releases the status). */
static oc_status ep_refused(session_ctx *c, const char *ep, const char *step, OrtStatus *status) {
    int cuda = strcmp(ep, CUDA_EP) == 0;
    const char *fix;
    oc_status result;
    const char *message = c->rt->api->GetErrorMessage(status);
    size_t length = strlen(message);
    /* onnxruntime-gpu loads the EP's library (and through it CUDA's) to take options, or to append */
    if (strcmp(step, "options") == 0 && strstr(message, "Failed to load") != NULL) step = "append";
    if (strcmp(step, "create") == 0)
        fix = cuda ? "this onnxruntime build has no CUDA EP: use the onnxruntime-gpu library (its libonnxruntime, "
                     "with the CUDA and cuDNN it was built for), or pass providers without CUDAExecutionProvider"
                   : "this onnxruntime build has no TensorRT EP: use the onnxruntime-gpu library (its libonnxruntime, "
                     "with the CUDA, cuDNN and TensorRT it was built for), or pass providers without "
                     "TensorrtExecutionProvider";
    else if (strcmp(step, "options") == 0)
        fix = "this onnxruntime does not take the blob's provider options for this EP: re-cook with options it "
              "knows (provider_options in the platform profile), or pass providers without it";
    else
        fix = cuda ? "onnxruntime could not start its CUDA EP: install the CUDA and cuDNN versions this "
                     "onnxruntime-gpu build needs (and an NVIDIA driver), or pass providers without it"
                   : "onnxruntime could not start its TensorRT EP: install the TensorRT, CUDA and cuDNN versions this "
                     "onnxruntime-gpu build needs (and an NVIDIA driver), or pass providers without it";
    while (length > 0 && (message[length - 1] == '.' || message[length - 1] == ' ' || message[length - 1] == '\n'))
        --length; /* its sentence goes on with the fix */
    result = oc_fail(c->err, OC_ERR_SESSION_CREATE, "onnxruntime %s refused %s for model '%s' (%s): %.*s; %s",
                     c->rt->version, ep, c->blob->info.name, c->blob->info.platform, (int)length, message, fix);
    c->rt->api->ReleaseStatus(status);
    return result;
}

/* CUDA through CreateCUDAProviderOptions / UpdateCUDAProviderOptions (the blob's string options, as
 * the Python loader passes them) / SessionOptionsAppendExecutionProvider_CUDA_V2, TensorRT through
 * their TensorRT twins. The V2 options are onnxruntime's: released here once appended (the session
 * options keep their own copy). */
static oc_status append_v2(session_ctx *c, OrtSessionOptions *options, const char *ep, const char *const *keys,
                           const char *const *values, size_t n) {
    const OrtApi *api = c->rt->api;
    OrtStatus *s;
    if (strcmp(ep, CUDA_EP) == 0) {
        OrtCUDAProviderOptionsV2 *cuda = NULL;
        s = api->CreateCUDAProviderOptions(&cuda);
        if (s != NULL) return ep_refused(c, ep, "create", s);
        s = n ? api->UpdateCUDAProviderOptions(cuda, keys, values, n) : NULL;
        if (s != NULL) {
            api->ReleaseCUDAProviderOptions(cuda);
            return ep_refused(c, ep, "options", s);
        }
        s = api->SessionOptionsAppendExecutionProvider_CUDA_V2(options, cuda);
        api->ReleaseCUDAProviderOptions(cuda);
    } else {
        OrtTensorRTProviderOptionsV2 *trt = NULL;
        s = api->CreateTensorRTProviderOptions(&trt);
        if (s != NULL) return ep_refused(c, ep, "create", s);
        s = n ? api->UpdateTensorRTProviderOptions(trt, keys, values, n) : NULL;
        if (s != NULL) {
            api->ReleaseTensorRTProviderOptions(trt);
            return ep_refused(c, ep, "options", s);
        }
        s = api->SessionOptionsAppendExecutionProvider_TensorRT_V2(options, trt);
        api->ReleaseTensorRTProviderOptions(trt);
    }
    return s != NULL ? ep_refused(c, ep, "append", s) : OC_OK;
}

#define NNAPI_EP "NnapiExecutionProvider"

/* NNAPI has no name SessionOptionsAppendExecutionProvider takes (1.24.4 to 1.32.0 refuse "NNAPI"):
 * onnxruntime's Android builds export OrtSessionOptionsAppendExecutionProvider_Nnapi
 * (nnapi_provider_factory.h) instead. Found in the library oc_runtime_load opened, or, for an engine's
 * OrtApi (oc_runtime_from_api), among the process's global symbols; NULL where the build has none
 * (it then offers no NNAPI either). Flags 0, as onnxruntime's Python binding appends it. */
typedef OrtStatus *(ORT_API_CALL *nnapi_append_fn)(OrtSessionOptions *options, uint32_t nnapi_flags);
static nnapi_append_fn nnapi_append(const oc_runtime *rt) {
    nnapi_append_fn append = NULL;
#ifdef _WIN32
    (void)rt;
#else
    void *library = rt->library != NULL ? rt->library : dlopen(NULL, RTLD_NOW);
    if (library != NULL) *(void **)(&append) = dlsym(library, "OrtSessionOptionsAppendExecutionProvider_Nnapi");
    if (rt->library == NULL && library != NULL) dlclose(library);
#endif
    return append;
}

/* The EPs this onnxruntime offers, ", "-separated into out (as many as fit); whether `ep` is one. */
static int offered_eps(session_ctx *c, const char *ep, char *out, size_t size) {
    char **names = NULL;
    int n = 0, k, found = 0;
    size_t used = 0;
    OrtStatus *s = c->rt->api->GetAvailableProviders(&names, &n);
    out[0] = '\0';
    if (s != NULL) {
        c->rt->api->ReleaseStatus(s);
        return 0;
    }
    for (k = 0; k < n; ++k) {
        int written = snprintf(out + used, size - used, "%s%s", k ? ", " : "", names[k]);
        if (written > 0 && (size_t)written < size - used) used += (size_t)written;
        if (strcmp(names[k], ep) == 0) found = 1;
    }
    s = c->rt->api->ReleaseAvailableProviders(names, n);
    if (s != NULL) c->rt->api->ReleaseStatus(s);
    return found;
}

/* The engine's appender for `ep` (oc_runtime_set_ep_appender): its failure is the session's, with
 * the model and the EP named before what the appender wrote. */
static oc_status call_appender(session_ctx *c, oc_ep_append_fn append, void *user, OrtSessionOptions *options,
                               const char *ep, const char *const *keys, const char *const *values, size_t n) {
    oc_error own;
    oc_status status;
    memset(&own, 0, sizeof own);
    status = append(user, options, ep, keys, values, n, &own);
    if (status == OC_OK) return OC_OK;
    own.message[sizeof own.message - 1] = '\0'; /* the engine's bytes: not trusted to end */
    if (status < OC_ERR_INVALID_ARGUMENT || status > OC_ERR_SESSION_CREATE) status = OC_ERR_SESSION_CREATE;
    return oc_fail(c->err, status, "model '%s': the engine's appender of %s failed%s%s", c->blob->info.name, ep,
                   own.message[0] ? ": " : " (it gave no message)", own.message);
}

static oc_status append_ep(session_ctx *c, OrtSessionOptions *options, const char *ep) {
    const OrtApi *api = c->rt->api;
    const char *keys[64], *values[64];
    size_t n = oc_blob_provider_option_count(c->blob, ep), i;
    const char *name = short_name(ep);
    int v2 = strcmp(ep, CUDA_EP) == 0 || strcmp(ep, TENSORRT_EP) == 0;
    nnapi_append_fn nnapi = NULL;
    oc_ep_append_fn appender;
    void *user = NULL;
    if (strcmp(ep, OC_CPU_EP) == 0) return OC_OK; /* always there, last */
    if (n > 64) return oc_fail(c->err, OC_ERR_SESSION_CREATE, "model '%s': %s has too many provider options", c->blob->info.name, ep);
    for (i = 0; i < n; ++i) oc_blob_provider_option(c->blob, ep, i, &keys[i], &values[i]);
    oc_lock();
    appender = oc_runtime_appender(c->rt, ep, &user);
    oc_unlock();
    if (appender != NULL) return call_appender(c, appender, user, options, ep, keys, values, n);
    if (strcmp(ep, NNAPI_EP) == 0 && (nnapi = nnapi_append(c->rt)) != NULL)
        return check_ort(c, nnapi(options, 0), OC_ERR_SESSION_CREATE, "refused an execution provider for");
    if (name == NULL && !v2) {
        char offered[512];
        if (!offered_eps(c, ep, offered, sizeof offered)) /* a typo, or an EP of another build */
            return oc_fail(c->err, OC_ERR_SESSION_CREATE,
                           "model '%s': %s is no execution provider this onnxruntime (%s) offers; it offers %s: pass "
                           "those, or load an onnxruntime built with it", c->blob->info.name, ep, c->rt->version, offered);
        return oc_fail(c->err, OC_ERR_SESSION_CREATE,
                       "model '%s': onnxruntime's C API has no call this loader knows for %s: register the call your "
                       "onnxruntime build offers for it with oc_runtime_set_ep_appender, or pass providers without it",
                       c->blob->info.name, ep);
    }
    if (v2) return append_v2(c, options, ep, keys, values, n);
    if (check_ort(c, api->SessionOptionsAppendExecutionProvider(options, name, keys, values, n), OC_ERR_SESSION_CREATE,
                  "refused an execution provider for") != OC_OK) {
        char offered[512];
        size_t used = c->err != NULL ? strlen(c->err->message) : 0;
        offered_eps(c, ep, offered, sizeof offered); /* what to pass instead */
        while (used > 0 && (c->err->message[used - 1] == ' ' || c->err->message[used - 1] == '.')) --used;
        if (c->err != NULL)
            snprintf(c->err->message + used, sizeof c->err->message - used, "; this onnxruntime offers %s", offered);
        return OC_ERR_SESSION_CREATE;
    }
    return OC_OK;
}

/* A plan's devices (SessionOptionsAppendExecutionProvider_V2, each EP with the blob's provider
 * options for it) or policy (SessionOptionsSetEpSelectionPolicy) on the session options. */
static oc_status configure_devices(session_ctx *c, OrtSessionOptions *options, const oc_plan *plan,
                                   const oc_plan_device *devices) {
    const OrtApi *plugin = c->rt->plugin;
    size_t i, d;
    OrtStatus *s = NULL;
    const char *ep = NULL;
    if (plan->kind == OC_PLAN_POLICY) {
        s = plugin->SessionOptionsSetEpSelectionPolicy(options, (OrtExecutionProviderDevicePolicy)oc_policy_value(plan->policy));
        ep = plan->policy;
    }
    for (i = 0; s == NULL && plan->kind == OC_PLAN_DEVICES && i < plan->chosen_count; ++i) {
        const OrtEpDevice *chosen[OC_PLAN_MAX_DEVICES];
        const char *keys[64], *values[64];
        size_t n = 0, k, count;
        ep = plan->chosen[i].ep;
        for (d = 0; d < OC_PLAN_MAX_DEVICES; ++d)
            if (plan->chosen[i].devices >> d & 1u) chosen[n++] = devices[d].handle;
        count = oc_blob_provider_option_count(c->blob, ep);
        if (count > 64)
            return oc_fail(c->err, OC_ERR_SESSION_CREATE, "model '%s': %s has too many provider options", c->blob->info.name, ep);
        for (k = 0; k < count; ++k) oc_blob_provider_option(c->blob, ep, k, &keys[k], &values[k]);
        s = plugin->SessionOptionsAppendExecutionProvider_V2(options, c->rt->env, chosen, n, keys, values, count);
    }
    if (s != NULL) {
        oc_status result = oc_fail(c->err, OC_ERR_SESSION_CREATE,
                                   "onnxruntime %s refused the devices for model '%s' (%s, %s): %s; check the blob's "
                                   "provider options for it, or ask for other devices",
                                   c->rt->version, c->blob->info.name, c->blob->info.platform, ep,
                                   c->rt->api->GetErrorMessage(s));
        c->rt->api->ReleaseStatus(s);
        return result;
    }
    return OC_OK;
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

/* Session options with the blob's recipe for `chosen` EPs (the caller's base, or new ones): the
 * classic list appended, or the plan's devices or policy (`plan` not NULL and not classic). */
static oc_status recipe_options(session_ctx *c, const oc_session_options *o, const char **chosen, size_t count,
                                const oc_plan *plan, const oc_plan_device *devices, OrtSessionOptions **out) {
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
    TRY(oc_recipe_check_provider_options(c->blob, c->err)); /* before any goes on: the Python loader's order */
    for (i = 0; i < count; ++i) TRY(apply_session_options(c, options, chosen[i]));
    TRY_ORT(api->AddSessionConfigEntry(options, "session.enable_saved_runtime_optimizations",
                                       c->blob->info.saved_runtime_optimizations ? "1" : "0"),
            "refused a session option of");
    if (o != NULL && o->low_memory)
        TRY_ORT(api->AddSessionConfigEntry(options, "session.disable_prepacking", "1"), "refused low_memory for");
    if (o != NULL && o->intra_op_threads > 0)
        TRY_ORT(api->SetIntraOpNumThreads(options, o->intra_op_threads), "refused the thread count for");
    if (plan != NULL && plan->kind != OC_PLAN_CLASSIC) TRY(configure_devices(c, options, plan, devices));
    else
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

/* onnxruntime builds proven to use a shared initializer (AddInitializer) in place while its graph's
 * external-data reference only has to name an existing file (the Python loader's
 * SHARED_INITIALIZER_VERSIONS before 1.32; from 1.32 file buffers serve): onnxruntime does not
 * promise this, so only these exact versions (tests/test_native.py proves each). */
static int shared_version(const int v[3]) {
    return (v[0] == 1 && v[1] == 24 && v[2] == 4) || (v[0] == 1 && v[1] == 28 && v[2] == 0);
}

/* From this size of a mapped blob, the pages prepacking reads are let go while the session is built
 * (268 MB ORT model: peak 2.02x -> 1.07x the model, session ready 360 ms against the file's 381;
 * below it a thread and its madvise calls cost more than the pages weigh). */
#define PAGER_MIN (16u << 20)

/* With session.use_ort_model_bytes_for_initializers onnxruntime takes tensor attributes of 128 bytes
 * or more from the flatbuffer too, and its graph check then refuses them: "Data of TensorProto ...
 * should be stored in * /_ORT_MEM_ADDR_/ *, but it is not regular file" (1.24.4, 1.28.0, 1.32.0:
 * TreeEnsemble 5's splits, LabelEncoder 4's keys). Such a model loads along OC_LOAD_ORT_BYTES, its
 * tensors copied (the Python loader's ortload.py). */
#define MEMORY_TENSOR_REFUSAL "_ORT_MEM_ADDR_"

/* Models whose shared-initializer session onnxruntime refused in this process (conv nets in 1.24.4
 * and 1.28.0: "cannot get file size [/dev/null]"): their next loads go straight to the fallback, as
 * the Python loader's _REFUSED does. FNV-1a of cook key, model sha256 and onnxruntime version; a
 * ring of the latest; 0 is an empty slot. Read and written under oc_lock. */
#define REFUSED_SLOTS 256
static uint64_t refused_models[REFUSED_SLOTS];
static char refused_why[REFUSED_SLOTS][OC_REFUSED_MAX]; /* each slot's report, as LoadInfo.refused */
static size_t refused_next;

static uint64_t refusal_key(const oc_runtime *rt, const oc_blob *blob) {
    const char *parts[3];
    uint64_t hash = 1469598103934665603u;
    size_t i;
    parts[0] = blob->info.cook_key ? blob->info.cook_key : "";
    parts[1] = blob->info.model_sha256 ? blob->info.model_sha256 : "";
    parts[2] = rt->version;
    for (i = 0; i < 3; ++i) {
        const unsigned char *p = (const unsigned char *)parts[i];
        do hash = (hash ^ *p) * 1099511628211u; /* the terminating NUL separates the parts */
        while (*p++);
    }
    return hash ? hash : 1;
}

/* Whether the model's refusal is remembered; its report copied into `why` (may be NULL). */
static int was_refused(uint64_t key, char *why, size_t why_size) {
    size_t i;
    int found = 0;
    oc_lock();
    for (i = 0; i < REFUSED_SLOTS && !found; ++i) {
        found = refused_models[i] == key;
        if (found && why != NULL && why_size > 0) snprintf(why, why_size, "%s", refused_why[i]);
    }
    oc_unlock();
    return found;
}

static void remember_refusal(uint64_t key, const char *why) {
    oc_lock();
    refused_models[refused_next] = key;
    snprintf(refused_why[refused_next], sizeof refused_why[refused_next], "%s", why);
    refused_next = (refused_next + 1) % REFUSED_SLOTS;
    oc_unlock();
}

/* Whether onnxruntime's optimizers will read the blob's weights from the referenced file while they
 * build a CPU session, refusing the shared-initializer door after a try a first load pays in full:
 * float32 4-D weights (Conv kernels: Conv+BatchNormalization fusion, the NCHWc layout) and float16
 * or bfloat16 weights of any rank (Casts the CPU EP puts around its few 16-bit kernels, folded at
 * load). Such blobs skip the door (onnx_cooker/runtime/loadpaths.py, optimizers_read_weights, has the
 * measurements). */
static int optimizers_read_weights(const oc_blob *blob) {
    size_t i;
    for (i = 0; i < blob->tensor_count; ++i) {
        int type = blob->tensors[i].elem_type;
        if ((type == 1 /* FLOAT */ && blob->tensors[i].rank == 4) || type == 10 /* FLOAT16 */ ||
            type == 16 /* BFLOAT16 */)
            return 1;
    }
    return 0;
}

/* Whether a blob file's raw weights go as shared initializers over the library's own mapping (with
 * its read pages let go while prepacking reads them) before onnx-mapped: see docs/native.md, "Which
 * path for a blob file" (the same session-ready time on the 268 MB model in 1.24.4 and 1.28.0, a
 * peak of 1.12x the model against 1.29x). -DOC_SHARED_FOR_FILES=0 builds the other choice, for
 * python -m bench.native to measure both. */
#ifndef OC_SHARED_FOR_FILES
#define OC_SHARED_FOR_FILES 1
#endif

/* The load paths for this blob, in order (the first that onnxruntime accepts is used; returns how
 * many, at most 3): the fastest and leanest proven one first. From 1.32 the weights go in place from
 * the blob's bytes (file buffers; from the library's own mapping with its pages let go while
 * prepacking reads them). Before 1.32 that door copies: in 1.24.4 and 1.28.0 the weights go in place
 * as shared initializers, with onnx-mapped (a blob file's raw weights mapped by onnxruntime itself)
 * and then the copying door behind them, for the models onnxruntime refuses that way. */
static size_t plan_paths(const oc_runtime *rt, const oc_blob *blob, oc_load_path plan[3]) {
    static const int FILE_BUFFERS_SINCE[3] = {1, 32, 0};
    int weights_raw = blob->weights != NULL && blob->weights_owned == NULL;
    int mapped, shared;
    size_t n = 0;
    if (blob->info.format == OC_FORMAT_ORT) { /* ORT bytes, in place; copied where refused (below) */
        if (!was_refused(refusal_key(rt, blob), NULL, 0)) plan[n++] = OC_LOAD_ORT_IN_PLACE;
        plan[n++] = OC_LOAD_ORT_BYTES;
        return n;
    }
    if (blob->weights_size == 0) {
        plan[n++] = OC_LOAD_ONNX_INLINE;
        return n;
    }
    if (!version_below(rt->parsed, FILE_BUFFERS_SINCE)) {
        plan[n++] = OC_LOAD_ONNX_FILE_BUFFERS;
        return n;
    }
    mapped = blob->file_path != NULL && blob->reopen_by_name && weights_raw && mapped_version(rt->parsed);
    shared = shared_version(rt->parsed) && oc_has_null_file() && blob->tensor_count > 0 &&
             !optimizers_read_weights(blob) && !was_refused(refusal_key(rt, blob), NULL, 0);
    if (shared && (!mapped || OC_SHARED_FOR_FILES)) plan[n++] = OC_LOAD_ONNX_SHARED;
    if (mapped) plan[n++] = OC_LOAD_ONNX_MAPPED;
    plan[n++] = OC_LOAD_ONNX_EXTERNAL;
    return n;
}

/* --- shared initializers: OrtValues over the blob's weights, kept by the blob ------------------- */

/* One set of OrtValues for one onnxruntime API: tensor i of the blob's sorted list is values[i]. */
typedef struct shared_set {
    struct shared_set *next;
    const OrtApi *api;
    size_t count;
    OrtValue *values[1]; /* count of them (allocated past the struct) */
} shared_set;

/* oc_blob_close's hook: every set's OrtValues released (the sessions that used them are gone, as
 * the blob's contract requires), then the sets. */
static void release_shared_sets(oc_blob *blob) {
    shared_set *set = blob->sessions_state, *next;
    size_t i;
    for (; set != NULL; set = next) {
        next = set->next;
        for (i = 0; i < set->count; ++i)
            if (set->values[i] != NULL) set->api->ReleaseValue(set->values[i]);
        oc_free(&blob->alloc, set);
    }
    blob->sessions_state = NULL;
}

/* A new set of tensors over the blob's weights, never copied (onnxruntime only reads them). */
static oc_status make_shared_set(session_ctx *c, shared_set **out) {
    const OrtApi *api = c->rt->api;
    oc_blob *blob = c->blob;
    OrtMemoryInfo *memory = NULL;
    shared_set *set;
    oc_status status = OC_OK;
    size_t i, k, count = blob->tensor_count;
    *out = NULL;
    if (count > (SIZE_MAX - sizeof *set) / sizeof set->values[0])
        return oc_fail(c->err, OC_ERR_OUT_OF_MEMORY, "model '%s': too many tensors", blob->info.name);
    set = oc_calloc(&blob->alloc, 1, sizeof *set + count * sizeof set->values[0]);
    if (set == NULL) return oc_fail(c->err, OC_ERR_OUT_OF_MEMORY, "out of memory for model '%s''s initializers", blob->info.name);
    set->api = api;
    set->count = count;
    status = check_ort(c, api->CreateCpuMemoryInfo(OrtDeviceAllocator, OrtMemTypeDefault, &memory),
                       OC_ERR_SESSION_CREATE, "could not describe CPU memory for");
    for (i = 0; i < count && status == OC_OK; ++i) {
        const oc_ref_tensor *t = &blob->tensors[i];
        int64_t dims[64];
        if (t->rank > sizeof dims / sizeof dims[0] || t->offset > blob->weights_size ||
            t->nbytes > blob->weights_size - t->offset) {
            status = oc_fail(c->err, OC_ERR_CORRUPT, "model '%s': tensor '%s' lies outside the weights", blob->info.name,
                             t->name);
            break;
        }
        for (k = 0; k < t->rank; ++k) {
            if (t->dims[k] > (uint64_t)INT64_MAX) {
                status = oc_fail(c->err, OC_ERR_CORRUPT, "model '%s': tensor '%s' has a dimension past int64",
                                 blob->info.name, t->name);
                break;
            }
            dims[k] = (int64_t)t->dims[k];
        }
        if (status != OC_OK) break;
        /* onnxruntime reads the bytes, never writes them: the const is cast away for its signature */
        status = check_ort(c, api->CreateTensorWithDataAsOrtValue(memory, (void *)(uintptr_t)(blob->weights + t->offset),
                                                                  (size_t)t->nbytes, dims, t->rank,
                                                                  (ONNXTensorElementDataType)t->elem_type,
                                                                  &set->values[i]),
                           OC_ERR_SESSION_CREATE, "refused a weight tensor of");
    }
    if (memory != NULL) api->ReleaseMemoryInfo(memory);
    if (status != OC_OK) {
        for (i = 0; i < count; ++i)
            if (set->values[i] != NULL) api->ReleaseValue(set->values[i]);
        oc_free(&blob->alloc, set);
        return status;
    }
    *out = set;
    return OC_OK;
}

/* The blob's set for this onnxruntime (made once, kept until oc_blob_close: every session of the
 * blob shares it, and onnxruntime requires an initializer to outlive the sessions it was added to). */
static oc_status shared_values(session_ctx *c, const shared_set **out) {
    oc_blob *blob = c->blob;
    shared_set *set, *made = NULL;
    oc_status status;
    oc_lock();
    for (set = blob->sessions_state; set != NULL; set = set->next)
        if (set->api == c->rt->api) break;
    oc_unlock();
    if (set == NULL) { /* made outside the lock: the allocator hooks are the caller's code */
        status = make_shared_set(c, &made);
        if (status != OC_OK) return status;
        oc_lock();
        for (set = blob->sessions_state; set != NULL; set = set->next)
            if (set->api == c->rt->api) break;
        if (set == NULL) {
            made->next = blob->sessions_state;
            blob->sessions_state = made;
            blob->release_sessions_state = release_shared_sets;
            set = made;
            made = NULL;
        }
        oc_unlock();
        if (made != NULL) { /* another thread's set came first */
            size_t i;
            for (i = 0; i < made->count; ++i)
                if (made->values[i] != NULL) made->api->ReleaseValue(made->values[i]);
            oc_free(&blob->alloc, made);
        }
    }
    *out = set;
    return OC_OK;
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
    if (path == OC_LOAD_ORT_IN_PLACE || path == OC_LOAD_ORT_BYTES) {
        /* an entry set again is overwritten, with a warning from onnxruntime: only the one that differs */
        if (!c->ort_entries_set) {
            TRY_ORT(api->AddSessionConfigEntry(options, "session.load_model_format", "ORT"), "refused the ORT format for");
            TRY_ORT(api->AddSessionConfigEntry(options, "session.use_ort_model_bytes_directly", "1"),
                    "refused in-place bytes for");
        }
        TRY_ORT(api->AddSessionConfigEntry(options, "session.use_ort_model_bytes_for_initializers",
                                           path == OC_LOAD_ORT_IN_PLACE ? "1" : "0"),
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
        TRY(oc_rewrite_locations(blob->graph, blob->graph_size, blob->info.name, slash + 1,
                                 (uint64_t)(blob->weights - blob->data), blob->tensors, blob->tensor_count, 0,
                                 &blob->alloc, &rewritten, &model_size, c->err));
        model = rewritten;
        TRY_ORT(api->AddSessionConfigEntry(options, "session.model_external_initializers_file_folder_path",
                                           real[0] ? real : "/"),
                "refused the blob's folder for");
        *slash = '/';
    } else if (path == OC_LOAD_ONNX_SHARED) {
        /* Each weight a tensor over the blob's bytes (caller memory or the library's read-only
         * mapping; never written), added as a shared initializer: onnxruntime uses it in place. The
         * graph's references name /dev/null, which onnxruntime only checks exists: a read of it
         * (the optimizers of some models try one) finds no bytes and fails, never wrong data. The
         * tensors are made from the header, so its types and dims must be the graph's. */
        const shared_set *set;
        size_t i;
        TRY(oc_check_shadowing(blob->graph, blob->graph_size, blob->info.name, blob->tensors, blob->tensor_count,
                               c->err));
        TRY(oc_rewrite_locations(blob->graph, blob->graph_size, blob->info.name, "null", 0, blob->tensors,
                                 blob->tensor_count, 1, &blob->alloc, &rewritten, &model_size, c->err));
        model = rewritten;
        TRY(shared_values(c, &set));
        for (i = 0; i < set->count; ++i)
            TRY_ORT(api->AddInitializer(options, blob->tensors[i].name, set->values[i]), "refused a shared weight of");
        TRY_ORT(api->AddSessionConfigEntry(options, "session.model_external_initializers_file_folder_path", "/dev"),
                "refused the /dev folder for");
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
            (path == OC_LOAD_ORT_IN_PLACE || path == OC_LOAD_ONNX_FILE_BUFFERS || path == OC_LOAD_ONNX_EXTERNAL ||
             path == OC_LOAD_ONNX_SHARED))
            pager = oc_pager_start(blob->map, blob->map_size);
        s = api->CreateSessionFromArray(c->rt->env, model, model_size, options, session);
        oc_pager_stop(pager);
    }
    if (s != NULL) {
        /* onnxruntime's NOT_IMPLEMENTED for an operator its kernels lack: the cook's runtime check ran
         * the blob in the platform's own onnxruntime, so this one is older, or a reduced build without
         * that operator (the Python loader's compat.no_kernel_message, word for word). */
        const char *message = api->GetErrorMessage(s);
        const char *kernel = strstr(message, "Could not find an implementation for ");
        const char *end = kernel ? strstr(kernel, " node") : NULL;
        /* onnxruntime's refusal of a saved runtime optimization whose action it lacks (a newer one
         * recorded it): "Missing action <action> for transformer <transformer>" (compat.incompatibility) */
        const char *action = strstr(message, "Missing action ");
        const char *transformer = action ? strstr(action, " for transformer ") : NULL;
        /* an attribute a newer onnxruntime gave one of its own operators (compat.incompatibility) */
        const char *attribute = strstr(message, "Unrecognized attribute: ");
        const char *op = attribute ? strstr(attribute, " for operator ") : NULL;
        if (attribute != NULL && op != NULL) {
            attribute += strlen("Unrecognized attribute: ");
            op += strlen(" for operator ");
            status = oc_fail(c->err, OC_ERR_INCOMPATIBLE_RUNTIME,
                             "onnxruntime %s does not know attribute %.*s of operator %.*s, which model '%s' (%s) "
                             "uses: it is older than the onnxruntime the platform ships; load it with the platform's "
                             "onnxruntime (its runtime_version), or cook a platform for onnxruntime %s",
                             c->rt->version, (int)strcspn(attribute, " \t\r\n"), attribute,
                             (int)strcspn(op, " \t\r\n"), op, blob->info.name, blob->info.platform, c->rt->version);
        } else if (action != NULL && transformer != NULL) {
            int action_len = (int)(transformer - action - (int)strlen("Missing action "));
            transformer += strlen(" for transformer ");
            status = oc_fail(c->err, OC_ERR_INCOMPATIBLE_RUNTIME,
                             "onnxruntime %s cannot replay the saved runtime optimizations of model '%s' (%s): it has "
                             "no action %.*s for %.*s, which the onnxruntime that cooked the model recorded; it is "
                             "older than the onnxruntime the platform ships: load it with the platform's onnxruntime "
                             "(its runtime_version), or cook a platform for onnxruntime %s (optimization_style: fixed "
                             "needs no replay)",
                             c->rt->version, blob->info.name, blob->info.platform, action_len,
                             action + strlen("Missing action "), (int)strcspn(transformer, " \t\r\n"), transformer,
                             c->rt->version);
        } else if (kernel != NULL && end != NULL && end[-1] == ')') {
            kernel += strlen("Could not find an implementation for ");
            status = oc_fail(c->err, OC_ERR_INCOMPATIBLE_RUNTIME,
                             "onnxruntime %s has no kernel for %.*s (model '%s', %s): it is older than the onnxruntime "
                             "the platform ships, or a reduced build without that operator; load it with the "
                             "platform's onnxruntime (its runtime_version), rebuild the reduced onnxruntime with the "
                             "platform's required_operators.config (docs/reduced-builds.md), or cook a platform for "
                             "onnxruntime %s",
                             c->rt->version, (int)(end - kernel), kernel, blob->info.name, blob->info.platform,
                             c->rt->version);
        } else {
            /* what a refused path reports (LoadInfo.refused): the path, onnxruntime's first line */
            int line = (int)strcspn(message, "\r\n");
            c->memory_tensor = strstr(message, MEMORY_TENSOR_REFUSAL) != NULL;
            snprintf(c->why, sizeof c->why, "%s refused (%.*s)", oc_load_path_name(path), line < 200 ? line : 200,
                     message);
            status = oc_fail(c->err, OC_ERR_SESSION_CREATE,
                             "onnxruntime %s could not create a session for model '%s' (%s, %s, load path %s): %s",
                             c->rt->version, blob->info.name, blob->info.platform,
                             blob->info.format == OC_FORMAT_ORT ? "ort" : "onnx", oc_load_path_name(path), message);
        }
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
    return oc_session_create_on_devices(rt, blob, o, NULL, out, path_used, NULL, 0, err);
}

oc_status oc_session_create_on_devices(oc_runtime *rt, oc_blob *blob, const oc_session_options *o,
                                       const oc_devices *devices, struct OrtSession **out, oc_load_path *path_used,
                                       char *explanation, size_t explanation_size, oc_error *err) {
    return oc_session_create_reported(rt, blob, o, devices, out, path_used, explanation, explanation_size, NULL, 0, err);
}

static oc_status session_create(oc_runtime *rt, oc_blob *blob, const oc_session_options *o, const oc_devices *devices,
                                struct OrtSession **out, oc_load_path *path_used, char *explanation,
                                size_t explanation_size, char *refused, size_t refused_size, oc_error *err);

/* A failure names the blob file the blob was opened from (oc_blob_open_file, a bundle), first, as
 * Python's Bundle.session does; a damaged blob's ends with the fix. */
oc_status oc_session_create_reported(oc_runtime *rt, oc_blob *blob, const oc_session_options *o,
                                     const oc_devices *devices, struct OrtSession **out, oc_load_path *path_used,
                                     char *explanation, size_t explanation_size, char *refused, size_t refused_size,
                                     oc_error *err) {
    oc_status status = session_create(rt, blob, o, devices, out, path_used, explanation, explanation_size, refused,
                                      refused_size, err);
    return status == OC_OK || blob == NULL ? status : oc_error_in_file(err, status, blob->named_file);
}

static oc_status session_create(oc_runtime *rt, oc_blob *blob, const oc_session_options *o, const oc_devices *devices,
                                struct OrtSession **out, oc_load_path *path_used, char *explanation,
                                size_t explanation_size, char *refused, size_t refused_size, oc_error *err) {
    session_ctx c;
    const OrtApi *api;
    OrtSessionOptions *options = NULL;
    const char *chosen[OC_PLAN_MAX_EPS + 1];
    size_t count = 0, i, steps, step;
    oc_load_path plan[3], path = OC_LOAD_ONNX_INLINE;
    oc_plan *decided = NULL;
    oc_plan_device offered[OC_PLAN_MAX_DEVICES];
    oc_status status = OC_OK;
    if (rt == NULL || blob == NULL || out == NULL)
        return oc_fail(err, OC_ERR_INVALID_ARGUMENT, "oc_session_create: NULL argument");
    *out = NULL;
    if (o != NULL && o->providers == NULL && o->provider_count != 0)
        return oc_fail(err, OC_ERR_INVALID_ARGUMENT,
                       "oc_session_create: provider_count is %zu but providers is NULL; pass the EP names, or "
                       "leave both 0 for the blob's EPs", o->provider_count);
    if (o != NULL && o->intra_op_threads < 0)
        return oc_fail(err, OC_ERR_INVALID_ARGUMENT,
                       "oc_session_create: intra_op_threads is %d; pass 0 for onnxruntime's default, or a count",
                       o->intra_op_threads);
    if (explanation != NULL && explanation_size > 0) explanation[0] = '\0';
    if (refused != NULL && refused_size > 0) refused[0] = '\0';
    api = rt->api;
    c.rt = rt;
    c.blob = blob;
    c.err = err;
    c.low_memory = o != NULL && o->low_memory;
    c.ort_entries_set = 0;
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
        if (devices != NULL)
            return oc_fail(err, OC_ERR_INVALID_ARGUMENT, "model '%s': pass providers (classic EP names) or devices (plugin "
                           "EP devices or a policy), not both", blob->info.name);
        if (o->provider_count >= sizeof chosen / sizeof chosen[0])
            return oc_fail(err, OC_ERR_INVALID_ARGUMENT, "oc_session_create: too many providers");
        for (i = 0; i < o->provider_count; ++i) {
            if (o->providers[i] == NULL) return oc_fail(err, OC_ERR_INVALID_ARGUMENT, "oc_session_create: NULL provider name");
            chosen[count++] = o->providers[i];
        }
        if (explanation != NULL && explanation_size > 0) oc_explain_given(chosen, count, explanation, explanation_size);
    } else {
        decided = malloc(sizeof *decided);
        if (decided == NULL) return oc_fail(err, OC_ERR_OUT_OF_MEMORY, "out of memory for model '%s''s plan", blob->info.name);
        status = oc_plan_for_blob(rt, blob, devices, offered, decided, err);
        if (status != OC_OK) {
            free(decided);
            return status;
        }
        for (i = 0; i < decided->name_count; ++i) chosen[count++] = decided->names[i];
        if (explanation != NULL && explanation_size > 0)
            snprintf(explanation, explanation_size, "%s", decided->explanation);
    }
    steps = plan_paths(rt, blob, plan);
    /* a refusal an earlier load met, which this one skips (as LoadInfo.refused reports it) */
    if (refused != NULL && refused_size > 0 && (blob->info.format == OC_FORMAT_ORT || blob->weights_size > 0))
        was_refused(refusal_key(rt, blob), refused, refused_size);
    status = recipe_options(&c, o, chosen, count, decided, offered, &options);
    free(decided);
    if (status != OC_OK) return status;
    report(o, "session", 0.0);
    for (step = 0; step < steps; ++step) {
        /* A path with another behind it is tried on a copy of the options (a refusal leaves its
         * entries and initializers there): the next starts from the recipe again. */
        OrtSessionOptions *attempt = options;
        int last = step + 1 == steps;
        int own = o == NULL || o->base == NULL;
        path = plan[step];
        status = OC_OK;
        /* ORT in place, then ORT bytes: the copying path sets the one entry that differs over the
         * same options (its initializers from the flatbuffer: "0"), so our own options need no copy */
        if (!last && !(own && path == OC_LOAD_ORT_IN_PLACE && plan[step + 1] == OC_LOAD_ORT_BYTES)) {
            status = check_ort(&c, api->CloneSessionOptions(options, &attempt), OC_ERR_SESSION_CREATE,
                               "could not copy the session options for");
            if (status != OC_OK) break;
            /* a refusal here is expected and answered: keep onnxruntime's log quiet (as the Python
             * loader does), unless the caller chose the options; not for an ORT model, whose refusal
             * is rare (tensor attributes) and whose warnings a game wants */
            if (own && path != OC_LOAD_ORT_IN_PLACE)
                status = check_ort(&c, api->SetSessionLogSeverityLevel(attempt, ORT_LOGGING_LEVEL_FATAL),
                                   OC_ERR_SESSION_CREATE, "refused a log level for");
        }
        c.why[0] = '\0';
        c.memory_tensor = 0;
        if (status == OC_OK) status = create_along(&c, path, attempt, out);
        c.ort_entries_set = path == OC_LOAD_ORT_IN_PLACE && attempt == options;
        if (attempt != options) api->ReleaseSessionOptions(attempt);
        if (status != OC_ERR_SESSION_CREATE || last) break;
        if (path == OC_LOAD_ORT_IN_PLACE && !c.memory_tensor) break; /* the copying path would meet it too */
        /* onnxruntime refused this path (shared initializers: a model whose optimizers read the
         * referenced file; onnx-mapped: a file system it cannot map, a renamed file; ORT in place:
         * tensor attributes): the next one.
         * Remembered only when it refused the null file itself: another failure (an EP, memory) may
         * not recur and says nothing of the model (as the Python loader's _REFUSED). */
        if (c.why[0] == '\0' && err != NULL) /* refused before onnxruntime built anything: our message */
            snprintf(c.why, sizeof c.why, "%s refused (%.200s)", oc_load_path_name(path), err->message);
        if (refused != NULL && refused_size > 0) snprintf(refused, refused_size, "%s", c.why);
        if (path == OC_LOAD_ONNX_SHARED && err != NULL && strstr(err->message, "/dev/null") != NULL)
            remember_refusal(refusal_key(rt, blob), c.why);
        if (path == OC_LOAD_ORT_IN_PLACE) remember_refusal(refusal_key(rt, blob), c.why);
    }
    if (status == OC_OK) {
        if (path_used != NULL) *path_used = path;
        report(o, "session", 1.0);
    }
    if (options != NULL && (o == NULL || o->base == NULL)) api->ReleaseSessionOptions(options);
    return status;
}

