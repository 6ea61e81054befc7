/* oc_probe.c - the test suite's window into the library: one JSON line per input.
 *
 *   oc-probe blob FILE...            open each file's bytes as a blob (from memory)
 *   oc-probe bundle DIR [NAME...]    open the bundle, then each named model's blob (default: all)
 *   oc-probe manifest FILE           open a bundle from manifest bytes alone
 *   oc-probe reader DIR [NAME...]    as bundle, through oc_reader callbacks (as an engine's pak
 *                                    reader would: the library sees no paths of this system)
 *   oc-probe reopen DIR STOPFILE     open the bundle (and close it) again and again until STOPFILE
 *                                    exists (a launcher's or hot reload's reopening during re-cooks):
 *                                    one line, the opens that passed and failed, the first failures'
 *                                    messages, the longest open in ms
 *   oc-probe time DIR NAME N         the library's own cost, no onnxruntime: medians of N rounds of
 *                                    opening the bundle with and without the sha256 pass, and of
 *                                    opening (parse, checks, decoding) and closing NAME's blob
 *
 * OC_PROBE_SHORT_READS=N makes the reader return at most N bytes a call (the library reads on).
 * OC_PROBE_KEYS (hex Ed25519 public keys, comma-separated) makes bundle, reader and manifest require
 * a signature by one of them; OC_PROBE_SKIP_VERIFY (set) opens bundles with skip_verify.
 * OC_PROBE_WAIT_FOR=FILE makes bundle wait, once the bundle is open (its line flushed), until FILE
 * exists before it opens the blobs. OC_PROBE_CHDIR=DIR makes bundle change its working folder to DIR
 * between opening the bundle and opening its blobs (a game's chdir).
 *
 * Each line: {"input": ..., "status": "OC_OK" | "OC_ERR_...", "message": ..., plus what was read}.
 * Exit status 0 whatever the inputs: the statuses are the result. */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "json_text.h"
#include "onnx_cooker.h"
#include "utf8_paths.h" /* UTF-8 file names, on Windows too */


static unsigned char *read_all(const char *path, size_t *size) {
    FILE *f = utf8_fopen(path, "rb");
    unsigned char *data = NULL;
    size_t capacity = 0, n = 0, got;
    if (f == NULL) return NULL;
    for (;;) {
        if (n == capacity) {
            unsigned char *bigger;
            capacity = capacity ? capacity * 2 : 65536;
            bigger = realloc(data, capacity);
            if (bigger == NULL) {
                free(data);
                fclose(f);
                return NULL;
            }
            data = bigger;
        }
        got = fread(data + n, 1, capacity - n, f);
        n += got;
        if (got == 0) break;
    }
    fclose(f);
    *size = n;
    return data;
}

/* FNV-1a, 64 bits: the test compares the decoded sections with Python's bytes through it. */
static unsigned long long fnv1a(const void *data, size_t size) {
    const unsigned char *p = data;
    unsigned long long h = 1469598103934665603ULL;
    size_t i;
    for (i = 0; i < size; ++i) h = (h ^ p[i]) * 1099511628211ULL;
    return h;
}

static void print_blob(oc_blob *blob) {
    oc_blob_info info;
    size_t i, k, size;
    const void *bytes;
    oc_blob_get_info(blob, &info, NULL);
    oc_blob_model(blob, &bytes, &size, NULL);
    printf(", \"model_fnv\": \"%016llx\"", fnv1a(bytes, size));
    oc_blob_weights(blob, &bytes, &size, NULL);
    printf(", \"weights_fnv\": \"%016llx\"", fnv1a(bytes, size));
    printf(", \"name\": ");
    json_text(info.name);
    printf(", \"platform\": ");
    json_text(info.platform);
    printf(", \"format\": \"%s\", \"graph_size\": %llu, \"weights_size\": %llu, \"min_runtime_version\": ",
           info.format == OC_FORMAT_ORT ? "ort" : "onnx", (unsigned long long)info.graph_size,
           (unsigned long long)info.weights_size);
    json_text(info.min_runtime_version);
    printf(", \"saved_runtime_optimizations\": %s, \"execution_providers\": [", info.saved_runtime_optimizations ? "true" : "false");
    for (i = 0; i < oc_blob_ep_count(blob); ++i) {
        if (i) printf(", ");
        json_text(oc_blob_ep_name(blob, i));
    }
    printf("], \"session_options\": {");
    for (i = 0; i < oc_blob_ep_count(blob); ++i) {
        const char *ep = oc_blob_ep_name(blob, i);
        if (i) printf(", ");
        json_text(ep);
        printf(": {");
        for (k = 0; k < oc_blob_session_option_count(blob, ep); ++k) {
            const char *key, *value;
            oc_blob_session_option(blob, ep, k, &key, &value);
            if (k) printf(", ");
            json_text(key);
            printf(": ");
            json_text(value);
        }
        printf("}");
    }
    printf("}");
}

static void blob_line(const char *input, oc_status status, const oc_error *err, oc_blob *blob) {
    printf("{\"input\": ");
    json_text(input);
    printf(", \"status\": \"%s\", \"message\": ", oc_status_name(status));
    json_text(status == OC_OK ? "" : err->message);
    if (blob) print_blob(blob);
    printf("}\n");
}

/* oc_reader over the files of one folder: what an engine's archive reader does. */
static int64_t reader_size(void *user, const char *path) {
    char full[4096];
    FILE *f;
    long n;
    snprintf(full, sizeof full, "%s/%s", (const char *)user, path);
    if (utf8_kind(full) != 2) return -1; /* an archive holds files only */
    f = utf8_fopen(full, "rb");
    if (f == NULL) return -1;
    n = fseek(f, 0, SEEK_END) == 0 ? ftell(f) : -1;
    fclose(f);
    return n;
}

static int64_t reader_read(void *user, const char *path, uint64_t offset, void *buffer, size_t count) {
    char full[4096];
    FILE *f;
    size_t got;
    snprintf(full, sizeof full, "%s/%s", (const char *)user, path);
    if (utf8_kind(full) != 2) return -1;
    f = utf8_fopen(full, "rb");
    if (f == NULL) return -1;
    if (fseek(f, (long)offset, SEEK_SET) != 0) {
        fclose(f);
        return -1;
    }
    /* OC_PROBE_SHORT_READS=N: at most N bytes a call, as a stream or POSIX read() gives them */
    if (getenv("OC_PROBE_SHORT_READS") != NULL && (size_t)atol(getenv("OC_PROBE_SHORT_READS")) < count)
        count = (size_t)atol(getenv("OC_PROBE_SHORT_READS"));
    got = fread(buffer, 1, count, f);
    fclose(f);
    return (int64_t)got;
}

/* Trusted keys from OC_PROBE_KEYS: up to 8 hex keys, comma-separated; the count read. */
static size_t probe_keys(unsigned char keys[8][32]) {
    const char *text = getenv("OC_PROBE_KEYS");
    size_t count = 0, i;
    while (text != NULL && *text && count < 8) {
        for (i = 0; i < 32; ++i) {
            unsigned int byte;
            if (sscanf(text + 2 * i, "%2x", &byte) != 1) return count;
            keys[count][i] = (unsigned char)byte;
        }
        ++count;
        text += 64;
        if (*text == ',') ++text;
    }
    return count;
}

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

static int compare_doubles(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *values, int n) {
    qsort(values, (size_t)n, sizeof *values, compare_doubles);
    return n % 2 ? values[n / 2] : (values[n / 2 - 1] + values[n / 2]) / 2;
}

static int time_library(const char *dir, const char *name, int rounds) {
    double verify[64], plain[64], blob_ms[64];
    oc_bundle_options options;
    oc_error err;
    int i;
    if (rounds < 1 || rounds > 64) return 2;
    memset(&options, 0, sizeof options);
    for (i = 0; i < rounds; ++i) {
        oc_bundle *bundle = NULL;
        oc_blob *blob = NULL;
        double t = now_ms();
        options.skip_verify = 0;
        if (oc_bundle_open_dir(dir, &options, &bundle, &err) != OC_OK) goto failed;
        verify[i] = now_ms() - t;
        t = now_ms();
        if (oc_bundle_open_blob(bundle, name, &blob, &err) != OC_OK) goto failed;
        oc_blob_close(blob);
        blob_ms[i] = now_ms() - t;
        oc_bundle_close(bundle);
        options.skip_verify = 1;
        t = now_ms();
        if (oc_bundle_open_dir(dir, &options, &bundle, &err) != OC_OK) goto failed;
        plain[i] = now_ms() - t;
        oc_bundle_close(bundle);
    }
    printf("{\"open_bundle_verify_ms\": %.3f, \"open_bundle_ms\": %.3f, \"open_blob_ms\": %.3f}\n",
           median(verify, rounds), median(plain, rounds), median(blob_ms, rounds));
    return 0;
failed:
    fprintf(stderr, "oc-probe: %s: %s\n", oc_status_name(err.status), err.message);
    return 1;
}

/* `oc-probe reopen`: oc_bundle_open_dir of `dir` (with OC_PROBE_KEYS) until `stop` exists; at least once. */
static int reopen_until(const char *dir, const char *stop) {
    unsigned char keys[8][32];
    oc_bundle_options options;
    char first[3][OC_MESSAGE_SIZE + 64];
    long opened = 0, failed = 0;
    double longest = 0;
    int done = 0, i;
    memset(&options, 0, sizeof options);
    options.public_key_count = probe_keys(keys);
    options.public_keys = &keys[0][0];
    options.skip_verify = 1; /* the manifest and its signature: what a re-cook changes under a reader */
    while (!done) {
        oc_bundle *bundle = NULL;
        oc_error err;
        double t;
        done = utf8_kind(stop) != 0; /* the writer had finished before this last open began */
        memset(&err, 0, sizeof err);
        t = now_ms();
        if (oc_bundle_open_dir(dir, &options, &bundle, &err) == OC_OK) {
            ++opened;
        } else {
            if (failed < 3) snprintf(first[failed], sizeof first[failed], "%s: %.1000s", oc_status_name(err.status), err.message);
            ++failed;
        }
        t = now_ms() - t;
        if (t > longest) longest = t;
        oc_bundle_close(bundle);
    }
    printf("{\"opened\": %ld, \"failed\": %ld, \"longest_ms\": %.3f, \"messages\": [", opened, failed, longest);
    for (i = 0; i < failed && i < 3; ++i) {
        if (i) printf(", ");
        json_text(first[i]);
    }
    printf("]}\n");
    return 0;
}

int main(int argc, char **argv) {
    int i;
    oc_error err;
    if (utf8_main_args(&argc, &argv) != 0) return 2;
    if (argc < 3) {
        fprintf(stderr, "usage: oc-probe blob FILE... | bundle DIR [NAME...] | manifest FILE\n"
                        "(OC_PROBE_BYTES=FILE: bundle opens each NAME from FILE's bytes)\n");
        return 2;
    }
    if (strcmp(argv[1], "reopen") == 0) return argc == 4 ? reopen_until(argv[2], argv[3]) : 2;
    if (strcmp(argv[1], "time") == 0) return argc == 5 ? time_library(argv[2], argv[3], atoi(argv[4])) : 2;
    if (strcmp(argv[1], "blob") == 0) {
        for (i = 2; i < argc; ++i) {
            size_t size = 0;
            unsigned char *data = read_all(argv[i], &size);
            oc_blob *blob = NULL;
            oc_status status;
            memset(&err, 0, sizeof err);
            if (data == NULL && size == 0) data = malloc(1);
            status = oc_blob_open_memory(data, size, NULL, &blob, &err);
            blob_line(argv[i], status, &err, blob);
            oc_blob_close(blob);
            free(data);
        }
        return 0;
    }
    if (strcmp(argv[1], "bundle") == 0 || strcmp(argv[1], "manifest") == 0 || strcmp(argv[1], "reader") == 0) {
        int opens_blobs = strcmp(argv[1], "manifest") != 0;
        unsigned char keys[8][32];
        oc_bundle_options options;
        memset(&options, 0, sizeof options);
        options.public_key_count = probe_keys(keys);
        options.skip_verify = getenv("OC_PROBE_SKIP_VERIFY") != NULL;
        options.public_keys = &keys[0][0];
        oc_bundle *bundle = NULL;
        oc_status status;
        memset(&err, 0, sizeof err);
        if (strcmp(argv[1], "bundle") == 0) {
            status = oc_bundle_open_dir(argv[2], &options, &bundle, &err);
        } else if (strcmp(argv[1], "reader") == 0) {
            oc_reader reader;
            reader.size = reader_size;
            reader.read = reader_read;
            reader.user = argv[2];
            status = oc_bundle_open_reader(&reader, &options, &bundle, &err);
        } else {
            size_t size = 0;
            unsigned char *data = read_all(argv[2], &size);
            status = data ? oc_bundle_open_manifest(data, size, NULL, &options, &bundle, &err) : OC_ERR_IO;
            free(data);
        }
        printf("{\"input\": ");
        json_text(argv[2]);
        printf(", \"status\": \"%s\", \"message\": ", oc_status_name(status));
        json_text(status == OC_OK ? "" : err.message);
        if (status == OC_OK) {
            size_t m, k;
            int64_t d;
            printf(", \"platform\": ");
            json_text(oc_bundle_platform(bundle));
            printf(", \"models\": {");
            for (m = 0; m < oc_bundle_model_count(bundle); ++m) {
                const char *name = oc_bundle_model_name(bundle, m);
                int side;
                if (m) printf(", ");
                json_text(name);
                printf(": {");
                for (side = 0; side < 2; ++side) {
                    printf("%s\"%s\": [", side ? ", " : "", side ? "outputs" : "inputs");
                    for (k = 0; k < oc_bundle_signature_count(bundle, name, side); ++k) {
                        oc_tensor_info t;
                        oc_bundle_signature(bundle, name, side, k, &t, NULL);
                        printf("%s{\"name\": ", k ? ", " : "");
                        json_text(t.name);
                        printf(", \"type\": ");
                        json_text(t.type);
                        printf(", \"shape\": %s, \"dims\": ", t.shape);
                        printf(oc_bundle_signature_rank(bundle, name, side, k) < 0 ? "null" : "[");
                        for (d = 0; d < oc_bundle_signature_rank(bundle, name, side, k); ++d) {
                            int64_t size = 0;
                            const char *symbol = NULL;
                            oc_bundle_signature_dim(bundle, name, side, k, (size_t)d, &size, &symbol, NULL);
                            printf("%s[%lld, ", d ? ", " : "", (long long)size);
                            if (symbol) json_text(symbol);
                            else printf("null");
                            printf("]");
                        }
                        if (oc_bundle_signature_rank(bundle, name, side, k) >= 0) printf("]");
                        /* past the rank: refused */
                        printf(", \"past\": \"%s\"}", oc_status_name(oc_bundle_signature_dim(
                            bundle, name, side, k, 99, &(int64_t){0}, NULL, NULL)));
                    }
                    printf("]");
                }
                printf("}");
            }
            printf("}");
        }
        printf("}\n");
        if (status == OC_OK && opens_blobs && getenv("OC_PROBE_WAIT_FOR") != NULL) {
            /* the test changes the bundle on disk between the open and the blobs' */
            double until = now_ms() + 120e3;
            fflush(stdout);
            while (utf8_kind(getenv("OC_PROBE_WAIT_FOR")) == 0 && now_ms() < until) {
                struct timespec pause = {0, 5000000L};
                nanosleep(&pause, NULL);
            }
        }
        if (status == OC_OK && opens_blobs && getenv("OC_PROBE_CHDIR") != NULL && chdir(getenv("OC_PROBE_CHDIR")) != 0) {
            fprintf(stderr, "oc-probe: cannot change the working folder to %s\n", getenv("OC_PROBE_CHDIR"));
            oc_bundle_close(bundle);
            return 1;
        }
        if (status == OC_OK && opens_blobs) {
            size_t m;
            int named = argc > 3;
            size_t count = named ? (size_t)(argc - 3) : oc_bundle_model_count(bundle);
            for (m = 0; m < count; ++m) {
                const char *name = named ? argv[3 + m] : oc_bundle_model_name(bundle, m);
                oc_blob *blob = NULL;
                memset(&err, 0, sizeof err);
                if (getenv("OC_PROBE_BYTES") != NULL) { /* that file's bytes as the model's (a pak's buffer) */
                    size_t size = 0;
                    unsigned char *data = read_all(getenv("OC_PROBE_BYTES"), &size);
                    status = data ? oc_bundle_open_blob_memory(bundle, name, data, size, &blob, &err) : OC_ERR_IO;
                    blob_line(name, status, &err, blob);
                    oc_blob_close(blob);
                    free(data);
                    continue;
                }
                status = oc_bundle_open_blob(bundle, name, &blob, &err);
                blob_line(name, status, &err, blob);
                oc_blob_close(blob);
            }
        }
        oc_bundle_close(bundle);
        return 0;
    }
    fprintf(stderr, "oc-probe: unknown command %s\n", argv[1]);
    return 2;
}
