/* test_ep_appender.c - the engine's own EPs through oc_runtime_set_ep_appender (tests/test_native.py):
 *
 *   test_ep_appender ORT_LIBRARY BLOB_FILE EP
 *
 * BLOB_FILE prefers EP (no onnxruntime here offers it: a console's EP) and carries provider options
 * for it; its model's first input has a free dimension named "batch". Prints one JSON line per
 * step: a session made without an appender, with one (what it was called with, and whether the
 * session kept the free-dimension override it put on the options), with one that fails, with one
 * asked for by the caller's providers, and after it is removed; then the argument checks. Exit 0
 * unless the program itself failed (the test reads the lines). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <onnxruntime_c_api.h>

#include "onnx_cooker.h"

static const OrtApi *api;

typedef struct calls {
    int count;
    char ep[128];
    char options[512]; /* "key=value;" ... */
    int fail;
} calls;

static oc_status appender(void *user, OrtSessionOptions *options, const char *ep, const char *const *keys,
                          const char *const *values, size_t count, oc_error *err) {
    calls *c = user;
    size_t i, used = 0;
    OrtStatus *s;
    c->count++;
    snprintf(c->ep, sizeof c->ep, "%s", ep);
    c->options[0] = '\0';
    for (i = 0; i < count && used < sizeof c->options; ++i) {
        int n = snprintf(c->options + used, sizeof c->options - used, "%s=%s;", keys[i], values[i]);
        if (n > 0) used += (size_t)n;
    }
    if (c->fail) {
        snprintf(err->message, sizeof err->message, "no %s device in this devkit", ep);
        return OC_ERR_SESSION_CREATE;
    }
    /* what a console's append call would do to the options, made visible: "batch" fixed at 1 */
    s = api->AddFreeDimensionOverrideByName(options, "batch", 1);
    if (s != NULL) {
        snprintf(err->message, sizeof err->message, "%s", api->GetErrorMessage(s));
        api->ReleaseStatus(s);
        return OC_ERR_SESSION_CREATE;
    }
    return OC_OK;
}

/* The first input's first dimension (-1 when free), or -2 when it cannot be read. */
static long long first_dim(OrtSession *session) {
    OrtTypeInfo *type = NULL;
    const OrtTensorTypeAndShapeInfo *tensor;
    int64_t dims[8];
    size_t rank = 0;
    long long dim = -2;
    OrtStatus *s = api->SessionGetInputTypeInfo(session, 0, &type);
    if (s == NULL) s = api->CastTypeInfoToTensorInfo(type, &tensor);
    if (s == NULL) s = api->GetDimensionsCount(tensor, &rank);
    if (s == NULL && rank > 0 && rank <= 8) s = api->GetDimensions(tensor, dims, rank);
    if (s == NULL && rank > 0 && rank <= 8) dim = (long long)dims[0];
    if (s != NULL) api->ReleaseStatus(s);
    if (type != NULL) api->ReleaseTypeInfo(type);
    return dim;
}

static void json_text(const char *text) {
    putchar('"');
    for (; *text; ++text) {
        if (*text == '"' || *text == '\\') printf("\\%c", *text);
        else if ((unsigned char)*text < 0x20) printf("\\u%04x", (unsigned char)*text);
        else putchar(*text);
    }
    putchar('"');
}

/* One session, reported as a JSON line; released at once. */
static void step(const char *name, oc_runtime *runtime, oc_blob *blob, const oc_session_options *options,
                 const calls *c) {
    OrtSession *session = NULL;
    oc_error err;
    char explanation[512];
    oc_status status;
    memset(&err, 0, sizeof err);
    status = oc_session_create_on_devices(runtime, blob, options, NULL, &session, NULL, explanation,
                                          sizeof explanation, &err);
    printf("{\"step\": ");
    json_text(name);
    printf(", \"status\": ");
    json_text(oc_status_name(status));
    printf(", \"message\": ");
    json_text(status == OC_OK ? "" : err.message);
    printf(", \"explanation\": ");
    json_text(status == OC_OK ? explanation : "");
    printf(", \"calls\": %d, \"ep\": ", c->count);
    json_text(c->ep);
    printf(", \"options\": ");
    json_text(c->options);
    printf(", \"first_dim\": %lld}\n", session != NULL ? first_dim(session) : -3);
    oc_session_release(runtime, session);
}

static void check(const char *name, oc_status status) {
    printf("{\"check\": ");
    json_text(name);
    printf(", \"status\": ");
    json_text(oc_status_name(status));
    printf("}\n");
}

int main(int argc, char **argv) {
    oc_runtime *runtime = NULL;
    oc_blob *blob = NULL;
    oc_error err;
    calls c;
    oc_session_options options;
    const char *providers[2];
    char name[40];
    int i, status = 1;
    if (argc != 4) {
        fprintf(stderr, "usage: test_ep_appender ORT_LIBRARY BLOB_FILE EP\n");
        return 2;
    }
    memset(&err, 0, sizeof err);
    memset(&c, 0, sizeof c);
    memset(&options, 0, sizeof options);
    if (oc_runtime_load(argv[1], &runtime, &err) != OC_OK || oc_blob_open_file(argv[2], NULL, &blob, &err) != OC_OK) {
        fprintf(stderr, "test_ep_appender: %s\n", err.message);
        goto done;
    }
    api = oc_runtime_api(runtime);
    step("no appender", runtime, blob, NULL, &c);
    if (oc_runtime_set_ep_appender(runtime, argv[3], appender, &c, &err) != OC_OK) {
        fprintf(stderr, "test_ep_appender: %s\n", err.message);
        goto done;
    }
    step("appender", runtime, blob, NULL, &c);
    c.fail = 1;
    step("failing appender", runtime, blob, NULL, &c);
    c.fail = 0;
    providers[0] = argv[3];
    providers[1] = "CPUExecutionProvider";
    options.providers = providers;
    options.provider_count = 2;
    options.low_memory = 1;
    step("providers", runtime, blob, &options, &c);
    oc_runtime_set_ep_appender(runtime, argv[3], NULL, NULL, &err);
    step("removed, blob's preference", runtime, blob, NULL, &c);
    step("removed, providers", runtime, blob, &options, &c);

    check("cpu", oc_runtime_set_ep_appender(runtime, "CPUExecutionProvider", appender, &c, &err));
    check("empty", oc_runtime_set_ep_appender(runtime, "", appender, &c, &err));
    check("null runtime", oc_runtime_set_ep_appender(NULL, argv[3], appender, &c, &err));
    check("remove unknown", oc_runtime_set_ep_appender(runtime, "NeverSetExecutionProvider", NULL, NULL, &err));
    for (i = 0; i <= OC_MAX_EP_APPENDERS; ++i) { /* the removed one keeps its place: one more is past the table */
        snprintf(name, sizeof name, "Engine%dExecutionProvider", i);
        status = oc_runtime_set_ep_appender(runtime, name, appender, &c, &err);
        if (status != OC_OK) break;
    }
    printf("{\"check\": \"table\", \"taken\": %d, \"status\": ", i);
    json_text(oc_status_name((oc_status)status));
    printf("}\n");
    status = 0;
done:
    oc_blob_close(blob);
    oc_runtime_release(runtime);
    return status;
}
