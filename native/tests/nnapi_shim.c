/* nnapi_shim.c - a stand-in for an Android build of onnxruntime, for tests/test_native.py (Linux):
 * it serves the C API of the real onnxruntime library that OC_SHIM_REAL_ORT names, with
 * NnapiExecutionProvider added to the EPs GetAvailableProviders lists, and exports
 * OrtSessionOptionsAppendExecutionProvider_Nnapi as Android builds do. That function appends
 * nothing (the session then runs on the CPU EP) and writes one line to stderr with the flags it was
 * given: the proof that the loader registered NNAPI the way onnxruntime's Android builds take it. */
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <onnxruntime_c_api.h>

#define NNAPI "NnapiExecutionProvider"

static const OrtApiBase *real_base;
static const OrtApi *real_api;
static OrtApi patched; /* the real table, GetAvailableProviders and its release replaced */
static OrtApiBase base;

/* The real onnxruntime's API base; aborts (a test fixture's error) without OC_SHIM_REAL_ORT. */
static const OrtApiBase *real(void) {
    if (real_base == NULL) {
        const char *path = getenv("OC_SHIM_REAL_ORT");
        void *library = path != NULL ? dlopen(path, RTLD_NOW | RTLD_LOCAL) : NULL;
        const OrtApiBase *(*get)(void) = NULL;
        if (library != NULL) *(void **)(&get) = dlsym(library, "OrtGetApiBase");
        if (get == NULL) {
            fprintf(stderr, "nnapi_shim: OC_SHIM_REAL_ORT must name an onnxruntime library\n");
            abort();
        }
        real_base = get();
    }
    return real_base;
}

/* The real list, NNAPI first; the strings are the shim's (released by shim_release). */
static OrtStatus *ORT_API_CALL shim_available(char ***out, int *count) {
    char **real_list = NULL, **list;
    int n = 0, i;
    OrtStatus *status = real_api->GetAvailableProviders(&real_list, &n);
    if (status != NULL) return status;
    list = calloc((size_t)n + 1, sizeof *list);
    if (list == NULL) abort();
    list[0] = malloc(sizeof NNAPI);
    if (list[0] == NULL) abort();
    memcpy(list[0], NNAPI, sizeof NNAPI);
    for (i = 0; i < n; ++i) {
        size_t size = strlen(real_list[i]) + 1;
        list[i + 1] = malloc(size);
        if (list[i + 1] == NULL) abort();
        memcpy(list[i + 1], real_list[i], size);
    }
    status = real_api->ReleaseAvailableProviders(real_list, n);
    if (status != NULL) real_api->ReleaseStatus(status);
    *out = list;
    *count = n + 1;
    return NULL;
}

static OrtStatus *ORT_API_CALL shim_release(char **list, int count) {
    int i;
    for (i = 0; i < count; ++i) free(list[i]);
    free(list);
    return NULL;
}

/* onnxruntime serves one table for every version up to its own: one patched copy serves them too. */
static const OrtApi *ORT_API_CALL shim_get_api(uint32_t version) {
    if (real_api == NULL) {
        real_api = real()->GetApi(ORT_API_VERSION);
        if (real_api == NULL) return NULL;
        memcpy(&patched, real_api, sizeof patched);
        patched.GetAvailableProviders = shim_available;
        patched.ReleaseAvailableProviders = shim_release;
    }
    return real()->GetApi(version) != NULL ? &patched : NULL;
}

static const char *ORT_API_CALL shim_version(void) { return real()->GetVersionString(); }

const OrtApiBase *ORT_API_CALL OrtGetApiBase(void) {
    base.GetApi = shim_get_api;
    base.GetVersionString = shim_version;
    return &base;
}

OrtStatus *ORT_API_CALL OrtSessionOptionsAppendExecutionProvider_Nnapi(OrtSessionOptions *options,
                                                                      uint32_t nnapi_flags) {
    fprintf(stderr, "nnapi_shim: NNAPI appended to %s session options (flags %u)\n",
            options != NULL ? "the" : "no", (unsigned)nnapi_flags);
    return NULL;
}
