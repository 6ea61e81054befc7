/* test_threads.c - many threads loading from one bundle and one runtime at once, as an engine's
 * async loading does.
 *
 *   test_threads ORT_LIBRARY BUNDLE_DIR THREADS ROUNDS
 *
 * Opens BUNDLE_DIR once (oc_bundle_open_dir) and onnxruntime once (oc_runtime_load), then, for each
 * model, opens its blob on this thread and records a digest of its model and weights bytes (the
 * reference) and keeps that blob open. THREADS threads then each do ROUNDS rounds of: open a model's
 * blob through the shared bundle (oc_bundle_open_blob) and compare its digest with the reference,
 * create a session from it and one from the shared blob of another model (oc_session_create, the
 * shared runtime), release both, close the blob. Prints one JSON line (opens, sessions, failures and
 * the first failure's message); exit 0 when every open and session succeeded and every digest
 * matched. Under AddressSanitizer and ThreadSanitizer in the tests (tests/test_native_threads.py). */
#define _POSIX_C_SOURCE 200809L
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "onnx_cooker.h"

#define MAX_MODELS 256
#define MAX_THREADS 64

static oc_runtime *runtime;
static oc_bundle *bundle;
static size_t model_count;
static const char *names[MAX_MODELS];
static uint64_t digests[MAX_MODELS];
static oc_blob *shared_blobs[MAX_MODELS];
static int rounds;

static pthread_mutex_t tally_lock = PTHREAD_MUTEX_INITIALIZER;
static long opens, sessions, failures;
static char first_failure[OC_MESSAGE_SIZE + 256];

/* FNV-1a over the model's bytes, then its weights' */
static uint64_t fnv(uint64_t h, const void *data, size_t size) {
    const unsigned char *p = data;
    size_t i;
    for (i = 0; i < size; ++i) h = (h ^ p[i]) * 1099511628211ULL;
    return h;
}

static int digest_of(oc_blob *blob, uint64_t *out, oc_error *err) {
    const void *bytes;
    size_t size;
    uint64_t h = 14695981039346656037ULL;
    if (oc_blob_model(blob, &bytes, &size, err) != OC_OK) return 0;
    h = fnv(h, bytes, size);
    if (oc_blob_weights(blob, &bytes, &size, err) != OC_OK) return 0;
    *out = fnv(h, bytes, size);
    return 1;
}

static void fail(const char *model, const char *what, const char *message) {
    pthread_mutex_lock(&tally_lock);
    if (failures++ == 0) snprintf(first_failure, sizeof first_failure, "%s: %s: %s", model, what, message);
    pthread_mutex_unlock(&tally_lock);
}

static void count(long *counter) {
    pthread_mutex_lock(&tally_lock);
    ++*counter;
    pthread_mutex_unlock(&tally_lock);
}

static int make_session(oc_blob *blob, const char *model) {
    struct OrtSession *session = NULL;
    oc_error err;
    if (oc_session_create(runtime, blob, NULL, &session, NULL, &err) != OC_OK) {
        fail(model, "oc_session_create", err.message);
        return 0;
    }
    oc_session_release(runtime, session);
    count(&sessions);
    return 1;
}

static void *work(void *arg) {
    size_t thread = (size_t)(uintptr_t)arg;
    int round;
    for (round = 0; round < rounds; ++round) {
        size_t index = (thread + (size_t)round) % model_count;
        size_t other = (thread * 7 + (size_t)round * 3 + 1) % model_count;
        oc_blob *blob = NULL;
        oc_error err;
        uint64_t digest = 0;
        if (oc_bundle_open_blob(bundle, names[index], &blob, &err) != OC_OK) {
            fail(names[index], "oc_bundle_open_blob", err.message);
            continue;
        }
        count(&opens);
        if (!digest_of(blob, &digest, &err))
            fail(names[index], "oc_blob_model", err.message);
        else if (digest != digests[index])
            fail(names[index], "digest", "the blob's model or weights bytes differ from the ones opened alone");
        make_session(blob, names[index]);
        make_session(shared_blobs[other], names[other]); /* a blob other threads use at the same time */
        oc_blob_close(blob);
    }
    return NULL;
}

int main(int argc, char **argv) {
    pthread_t threads[MAX_THREADS];
    oc_error err;
    size_t i, created = 0;
    int thread_count, ok = 1;
    if (argc != 5) {
        fprintf(stderr, "usage: test_threads ORT_LIBRARY BUNDLE_DIR THREADS ROUNDS\n");
        return 2;
    }
    thread_count = atoi(argv[3]);
    rounds = atoi(argv[4]);
    if (thread_count < 1 || thread_count > MAX_THREADS || rounds < 1) {
        fprintf(stderr, "test_threads: THREADS must be 1-%d and ROUNDS at least 1\n", MAX_THREADS);
        return 2;
    }
    if (oc_runtime_load(argv[1], &runtime, &err) != OC_OK || oc_bundle_open_dir(argv[2], NULL, &bundle, &err) != OC_OK) {
        fprintf(stderr, "test_threads: %s\n", err.message);
        oc_runtime_release(runtime);
        return 1;
    }
    model_count = oc_bundle_model_count(bundle);
    if (model_count == 0 || model_count > MAX_MODELS) {
        fprintf(stderr, "test_threads: the bundle holds %zu models (1-%d wanted)\n", model_count, MAX_MODELS);
        ok = 0;
    }
    for (i = 0; ok && i < model_count; ++i) {
        names[i] = oc_bundle_model_name(bundle, i);
        if (oc_bundle_open_blob(bundle, names[i], &shared_blobs[i], &err) != OC_OK ||
            !digest_of(shared_blobs[i], &digests[i], &err)) {
            fprintf(stderr, "test_threads: %s: %s\n", names[i], err.message);
            ok = 0;
        }
    }
    for (i = 0; ok && i < (size_t)thread_count; ++i) {
        if (pthread_create(&threads[i], NULL, work, (void *)(uintptr_t)i) != 0) {
            fprintf(stderr, "test_threads: pthread_create failed\n");
            ok = 0;
            break;
        }
        ++created;
    }
    for (i = 0; i < created; ++i) pthread_join(threads[i], NULL);
    for (i = 0; i < model_count && i < MAX_MODELS; ++i) oc_blob_close(shared_blobs[i]);
    oc_bundle_close(bundle);
    oc_runtime_release(runtime);
    if (!ok) return 1;
    printf("{\"models\": %zu, \"opens\": %ld, \"sessions\": %ld, \"failures\": %ld, \"first_failure\": \"", model_count,
           opens, sessions, failures);
    for (i = 0; first_failure[i]; ++i) /* JSON-escaped */
        if (first_failure[i] == '"' || first_failure[i] == '\\') printf("\\%c", first_failure[i]);
        else if ((unsigned char)first_failure[i] < 0x20) printf(" ");
        else putchar(first_failure[i]);
    printf("\"}\n");
    return failures == 0 ? 0 : 1;
}
