/* test_progress.c - what a loading screen sees: the progress callbacks of opening a bundle, opening
 * a model's blob and creating its session.
 *
 *   test_progress ORT_LIBRARY BUNDLE_DIR MODEL
 *
 * Opens BUNDLE_DIR with a progress callback (it checks every blob's sha256, on several threads),
 * opens MODEL's blob and creates its session, each with the same callback. Prints one JSON line:
 * {"events": [[step, stage, fraction, on_calling_thread], ...]} with step 0 for the bundle's open,
 * 1 for the blob's and 2 for the session's. Exit 0 unless a call failed. */
#define _POSIX_C_SOURCE 200809L
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "onnx_cooker.h"

#define MAX_EVENTS 4096

typedef struct event {
    int step;
    char stage[16];
    double fraction;
    int on_caller;
} event;

static event events[MAX_EVENTS];
static size_t event_count;
static pthread_t caller;
static int step;

static void on_progress(void *user, const char *stage, double fraction) {
    (void)user;
    if (event_count == MAX_EVENTS) return;
    events[event_count].step = step;
    snprintf(events[event_count].stage, sizeof events[event_count].stage, "%s", stage);
    events[event_count].fraction = fraction;
    events[event_count].on_caller = pthread_equal(pthread_self(), caller) != 0;
    ++event_count;
}

int main(int argc, char **argv) {
    oc_runtime *runtime = NULL;
    oc_bundle *bundle = NULL;
    oc_blob *blob = NULL;
    struct OrtSession *session = NULL;
    oc_bundle_options bundle_options;
    oc_session_options session_options;
    oc_error err;
    size_t i;
    int ok = 0;
    if (argc != 4) {
        fprintf(stderr, "usage: test_progress ORT_LIBRARY BUNDLE_DIR MODEL\n");
        return 2;
    }
    caller = pthread_self();
    memset(&bundle_options, 0, sizeof bundle_options);
    bundle_options.progress = on_progress;
    memset(&session_options, 0, sizeof session_options);
    session_options.progress = on_progress;
    if (oc_runtime_load(argv[1], &runtime, &err) != OC_OK) goto done;
    step = 0;
    if (oc_bundle_open_dir(argv[2], &bundle_options, &bundle, &err) != OC_OK) goto done;
    step = 1;
    if (oc_bundle_open_blob(bundle, argv[3], &blob, &err) != OC_OK) goto done;
    step = 2;
    if (oc_session_create(runtime, blob, &session_options, &session, NULL, &err) != OC_OK) goto done;
    ok = 1;
done:
    if (!ok) fprintf(stderr, "test_progress: %s\n", err.message);
    oc_session_release(runtime, session);
    oc_blob_close(blob);
    oc_bundle_close(bundle);
    oc_runtime_release(runtime);
    if (!ok) return 1;
    printf("{\"events\": [");
    for (i = 0; i < event_count; ++i)
        printf("%s[%d, \"%s\", %.6f, %s]", i ? ", " : "", events[i].step, events[i].stage, events[i].fraction,
               events[i].on_caller ? "true" : "false");
    printf("]}\n");
    return 0;
}
