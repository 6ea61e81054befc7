/*
 * oc_run.c - oc-run: create an onnxruntime session from a cooked bundle (through libonnx_cooker)
 * or from a plain model file (the baseline), run it on .npy inputs, write .npy outputs, or time
 * session creation.
 *
 *   oc-run --bundle DIR --model NAME [--ep NAME ... | --devices EP:TYPE,...|POLICY] [--ep-library NAME=PATH ...]
 *          [--in FILE.npy ...] [--out DIR] [--time N] [--low-memory] [--ort LIBPATH]
 *   oc-run --file MODEL.onnx [--in FILE.npy ...] [--out DIR] [--time N] [--low-memory] [--ort LIBPATH]
 *   oc-run --blob FILE.ocb [the options of --bundle but --model]
 *
 * --blob: one blob file read into memory once (as an engine reads it from its archive; untimed),
 *   each session made from that memory (oc_blob_open_memory: header, layout and CRC checks, no
 *   manifest) with the blob's recipe, as --bundle makes it.
 * --in: one .npy file per model input, in the model's input order; each is checked against the
 *   input's element type, rank and fixed dimensions. --out: the folder (created) that receives
 *   one "<output name>.npy" per output ('/', '\', ':', '*', '?', '"', '<', '>', '|' and control
 *   characters in the name become '_'); a sequence, a map or an empty optional as "<output name>.json"
 *   (values.h).
 *   Without --in and --out the session is only created.
 * --time N: create N fresh sessions (with --bundle or --blob, opening and closing the blob each time;
 *   the bundle is opened once, the blob file read once, untimed) and print one JSON line:
 *   {"ready_ms_median": x, "ready_ms": [..], "peak_rss_bytes": y, "baseline_rss_bytes": z, "load_path": "...",
 *    "refused": "..." or null}
 *   peak: VmHWM of /proc/self/status at the end; baseline: VmRSS right before the first creation;
 *   refused: the faster load path onnxruntime refused for the model, and why (the latest session's:
 *   oc_session_create_reported); without --time a line "refused first: ..." says it after "session ready".
 * --ort: libonnxruntime to load (default: $OC_ORT_LIBRARY, else the platform's default name).
 * --low-memory: session.disable_prepacking. --ep: EPs to use in order (--bundle only).
 * --ep-library NAME=PATH: register a plugin EP library with onnxruntime (1.22+) under NAME before
 *   the session is made (oc_runtime_register_ep_library); repeat for several.
 * --devices: the session's EP devices (oc_session_create_on_devices): EP:TYPE pairs in preference
 *   order (TYPE cpu, gpu, npu or any), e.g. ggml:cpu,OpenVINOExecutionProvider:npu; or a policy name
 *   (prefer_gpu, prefer_npu, prefer_cpu, max_performance, max_efficiency, min_power, default).
 *   Without --ep and --devices the blob decides (its EPs, plugin EPs on their devices, its header's
 *   device policy). With --bundle, the line after "session ready" says which EPs and why ("eps: ...").
 *
 * Exit status: 0 done; 1 an error ("oc-run: error: ..." on stderr); 2 a usage error.
 * C99 + POSIX, or Windows (file names are UTF-8 there too: utf8_paths.h).
 */
#define _POSIX_C_SOURCE 200809L

#include "onnx_cooker.h"
#include <onnxruntime_c_api.h>

#include "npy.h"
#include "values.h"

#include <errno.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "utf8_paths.h" /* UTF-8 file names (on Windows: the UTF-16 command line and W functions) */
#ifdef _WIN32
#include <psapi.h> /* K32GetProcessMemoryInfo (kernel32) */
#endif

#define MAX_TIME_RUNS 100000

static const char usage_text[] =
    "usage: oc-run --bundle DIR --model NAME [--ep NAME ... | --devices EP:TYPE,...|POLICY]\n"
    "              [--ep-library NAME=PATH ...] [--in FILE.npy ...] [--out DIR] [--time N] [--low-memory]\n"
    "              [--ort LIBPATH]\n"
    "       oc-run --file MODEL.onnx [--in FILE.npy ...] [--out DIR] [--time N] [--low-memory] [--ort LIBPATH]\n"
    "       oc-run --blob FILE.ocb [the options of --bundle but --model]\n";

typedef struct args {
    const char *bundle, *model, *file, *blob, *out, *ort, *devices;
    const char **eps;
    size_t ep_count;
    const char **libraries; /* NAME=PATH */
    size_t library_count;
    const char **ins;
    size_t in_count;
    long time_runs; /* 0: no --time */
    int low_memory;
} args;

/* Everything a run holds; released by ctx_release whatever happened. */
typedef struct ctx {
    const args *a;
    oc_runtime *runtime;
    const OrtApi *api;
    oc_bundle *bundle;
    unsigned char *blob_bytes; /* --blob: the file's bytes, read once */
    size_t blob_size;
    OrtEnv *env; /* --file only */
    oc_devices devices; /* --devices, parsed */
    oc_device_pair *pairs;
    char *devices_text;
    int has_devices;
    char explanation[1024]; /* the latest session's EPs, and why */
    char refused[OC_REFUSED_MAX]; /* the faster load path onnxruntime refused for it, and why ("": none) */
} ctx;

/* ---- errors ------------------------------------------------------------------------------- */

static char g_error[4096];

static int fail(const char *format, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 1, 2)))
#endif
    ;

static int fail(const char *format, ...) {
    va_list args;
    va_start(args, format);
    vsnprintf(g_error, sizeof g_error, format, args);
    va_end(args);
    return 1;
}

static int fail_oc(const oc_error *err, oc_status status) {
    if (err->message[0]) return fail("%s", err->message);
    return fail("%s", oc_status_name(status));
}

/* "context: onnxruntime's message"; releases the status. */
static int fail_ort(const OrtApi *api, OrtStatus *status, const char *context) {
    fail("%s: %s", context, api->GetErrorMessage(status));
    api->ReleaseStatus(status);
    return 1;
}

#define ORT_CHECK(api, call, context)                                                                   \
    do {                                                                                                \
        OrtStatus *st_ = (call);                                                                        \
        if (st_) {                                                                                      \
            fail_ort((api), st_, (context));                                                            \
            goto done;                                                                                  \
        }                                                                                               \
    } while (0)

static void usage_error(const char *format, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 1, 2)))
#endif
    ;

static void usage_error(const char *format, ...) {
    va_list args;
    fputs("oc-run: error: ", stderr);
    va_start(args, format);
    vfprintf(stderr, format, args);
    va_end(args);
    fputc('\n', stderr);
    fputs(usage_text, stderr);
}

/* ---- small helpers ------------------------------------------------------------------------ */

static const char *elem_type_name(int t) {
    static const char *const names[] = {"undefined", "float32",  "uint8",     "int8",         "uint16",
                                        "int16",     "int32",    "int64",     "string",       "bool",
                                        "float16",   "float64",  "uint32",    "uint64",       "complex64",
                                        "complex128", "bfloat16", "float8e4m3fn", "float8e4m3fnuz", "float8e5m2",
                                        "float8e5m2fnuz", "uint4", "int4", "float4e2m1"};
    if (t >= 0 && (size_t)t < sizeof names / sizeof names[0]) return names[t];
    return "unknown";
}

static const char *onnx_type_name(enum ONNXType t) {
    switch (t) {
    case ONNX_TYPE_TENSOR: return "a tensor";
    case ONNX_TYPE_SEQUENCE: return "a sequence";
    case ONNX_TYPE_MAP: return "a map";
    case ONNX_TYPE_OPAQUE: return "an opaque value";
    case ONNX_TYPE_SPARSETENSOR: return "a sparse tensor";
    case ONNX_TYPE_OPTIONAL: return "an optional";
    default: return "not a tensor";
    }
}

#ifdef _WIN32
static double now_ms(void) {
    LARGE_INTEGER now, frequency;
    QueryPerformanceCounter(&now);
    QueryPerformanceFrequency(&frequency);
    return (double)now.QuadPart * 1000.0 / (double)frequency.QuadPart;
}

/* "VmRSS" (the working set) or "VmHWM" (its peak) of this process in bytes, or -1. */
static long long proc_status_bytes(const char *field) {
    PROCESS_MEMORY_COUNTERS counters;
    memset(&counters, 0, sizeof counters);
    counters.cb = sizeof counters;
    if (!K32GetProcessMemoryInfo(GetCurrentProcess(), &counters, sizeof counters)) return -1;
    if (strcmp(field, "VmHWM") == 0) return (long long)counters.PeakWorkingSetSize;
    if (strcmp(field, "VmRSS") == 0) return (long long)counters.WorkingSetSize;
    return -1;
}
#else
static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1000.0 + (double)ts.tv_nsec / 1e6;
}

/* A "VmRSS:"-style field of /proc/self/status in bytes, or -1. */
static long long proc_status_bytes(const char *field) {
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    size_t len = strlen(field);
    long long value = -1;
    if (!f) return -1;
    while (fgets(line, sizeof line, f)) {
        if (strncmp(line, field, len) == 0 && line[len] == ':') {
            long long kb;
            if (sscanf(line + len + 1, "%lld", &kb) == 1 && kb >= 0) value = kb * 1024;
            break;
        }
    }
    fclose(f);
    return value;
}
#endif

static int cmp_double(const void *x, const void *y) {
    double a = *(const double *)x, b = *(const double *)y;
    return a < b ? -1 : a > b;
}

/* Append s to buf[0..size) at *n (truncating, always NUL-terminated). */
static void append(char *buf, size_t size, size_t *n, const char *format, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 4, 5)))
#endif
    ;

static void append(char *buf, size_t size, size_t *n, const char *format, ...) {
    va_list args;
    int w;
    if (*n >= size) return;
    va_start(args, format);
    w = vsnprintf(buf + *n, size - *n, format, args);
    va_end(args);
    if (w < 0) return;
    *n = (size_t)w >= size - *n ? size : *n + (size_t)w;
}

static void shape_text(char *buf, size_t size, const int64_t *shape, size_t ndim, const char *const *symbolic) {
    size_t n = 0, i;
    buf[0] = '\0';
    append(buf, size, &n, "(");
    for (i = 0; i < ndim; i++) {
        if (i) append(buf, size, &n, ", ");
        if (shape[i] < 0) append(buf, size, &n, "%s", symbolic && symbolic[i] && symbolic[i][0] ? symbolic[i] : "?");
        else append(buf, size, &n, "%lld", (long long)shape[i]);
    }
    append(buf, size, &n, ndim == 1 ? ",)" : ")");
}

/* mkdir -p ('\\' separates folders too on Windows) */
static int make_dirs(const char *path) {
    char *p = (char *)malloc(strlen(path) + 1), *s;
    int rc = 0;
    if (!p) return fail("out of memory");
    strcpy(p, path);
    for (s = p + 1;; s++) {
#ifdef _WIN32
        if ((*s == '/' || *s == '\\' || *s == '\0') && s[-1] != ':') { /* not "C:" alone */
#else
        if (*s == '/' || *s == '\0') {
#endif
            char keep = *s;
            *s = '\0';
            if (utf8_mkdir(p) != 0 && errno != EEXIST && !(keep != '\0' && utf8_kind(p) == 1)) {
                rc = fail("--out %s: cannot create folder %s: %s", path, p, strerror(errno));
                break;
            }
            *s = keep;
            if (keep == '\0') break;
        }
    }
    if (rc == 0 && utf8_kind(path) != 1)
        rc = fail("--out %s: not a folder", path);
    free(p);
    return rc;
}

/* "<out>/<name with / \ : * ? " < > | and control characters replaced by _>.npy" (malloc'd), or NULL:
 * names stay inside <out> and are valid file names on Windows too. */
/* Output file names are cut to this many bytes (file systems allow 255), at a UTF-8 boundary, and end
 * with '~' and 8 hex digits of the full name's FNV-1a hash, so that long names stay apart. */
#define OUTPUT_NAME_MAX 200

static char *output_path(const char *out, const char *name, const char *extension) {
    size_t lo = strlen(out), ln = strlen(name), kept = ln, i;
    char *p;
    while (lo > 1 && out[lo - 1] == '/') lo--;
    if (ln > OUTPUT_NAME_MAX) {
        kept = OUTPUT_NAME_MAX;
        while (kept > 0 && ((unsigned char)name[kept] & 0xC0) == 0x80) kept--; /* not inside a character */
    }
    p = (char *)malloc(lo + 1 + kept + 9 + strlen(extension) + 1);
    if (!p) return NULL;
    memcpy(p, out, lo);
    if (lo == 1 && out[0] == '/') lo = 0; /* --out / */
    p[lo] = '/';
    for (i = 0; i < kept; i++) {
        unsigned char c = (unsigned char)name[i];
        p[lo + 1 + i] = (c < 0x20 || c == 0x7f || strchr("/\\:*?\"<>|", c)) ? '_' : (char)c;
    }
    if (kept < ln) {
        uint32_t hash = 2166136261u;
        for (i = 0; i < ln; i++) hash = (hash ^ (unsigned char)name[i]) * 16777619u;
        snprintf(p + lo + 1 + kept, 10, "~%08x", (unsigned)hash);
        kept += 9;
    }
    memcpy(p + lo + 1 + kept, extension, strlen(extension) + 1);
    return p;
}

/* ---- sessions ----------------------------------------------------------------------------- */

/* One fresh session; *blob is set for --bundle (close it after releasing the session). */
static int create_session(ctx *c, OrtSession **session, oc_blob **blob, const char **load_path) {
    const args *a = c->a;
    *session = NULL;
    *blob = NULL;
    if (a->bundle || a->blob) {
        oc_error err;
        oc_status s;
        oc_session_options opts;
        oc_load_path path = OC_LOAD_ONNX_INLINE;
        memset(&err, 0, sizeof err);
        s = a->bundle ? oc_bundle_open_blob(c->bundle, a->model, blob, &err)
                      : oc_blob_open_memory(c->blob_bytes, c->blob_size, NULL, blob, &err);
        if (s != OC_OK && a->blob) return fail("--blob %s: %s", a->blob, err.message[0] ? err.message : oc_status_name(s));
        if (s != OC_OK) return fail_oc(&err, s);
        memset(&opts, 0, sizeof opts);
        opts.providers = a->ep_count ? a->eps : NULL;
        opts.provider_count = a->ep_count;
        opts.low_memory = a->low_memory;
        s = oc_session_create_reported(c->runtime, *blob, &opts, c->has_devices ? &c->devices : NULL, session, &path,
                                       c->explanation, sizeof c->explanation, c->refused, sizeof c->refused, &err);
        if (s != OC_OK) {
            oc_blob_close(*blob);
            *blob = NULL;
            *session = NULL;
            return fail_oc(&err, s);
        }
        *load_path = oc_load_path_name(path);
        return 0;
    } else {
        const OrtApi *api = c->api;
        OrtSessionOptions *so = NULL;
        char context[1200];
        int rc = 1;
        snprintf(context, sizeof context, "--file %s: onnxruntime could not create the session", a->file);
        ORT_CHECK(api, api->CreateSessionOptions(&so), context);
        if (a->low_memory) ORT_CHECK(api, api->AddSessionConfigEntry(so, "session.disable_prepacking", "1"), context);
#ifdef _WIN32
        {
            wchar_t wide[4096]; /* onnxruntime takes paths as UTF-16 on Windows */
            if (MultiByteToWideChar(CP_UTF8, 0, a->file, -1, wide, 4096) == 0) {
                rc = fail("--file %s: path too long", a->file);
                goto done;
            }
            ORT_CHECK(api, api->CreateSession(c->env, wide, so, session), context);
        }
#else
        ORT_CHECK(api, api->CreateSession(c->env, a->file, so, session), context);
#endif
        *load_path = "file";
        rc = 0;
    done:
        if (so) api->ReleaseSessionOptions(so);
        return rc;
    }
}

static void release_session(ctx *c, OrtSession *session, oc_blob *blob) {
    if (session) c->api->ReleaseSession(session);
    oc_blob_close(blob);
}

/* ---- --time ------------------------------------------------------------------------------- */

static void json_string(FILE *f, const char *s) {
    fputc('"', f);
    for (; s && *s; s++) {
        unsigned char ch = (unsigned char)*s;
        if (ch == '"' || ch == '\\') fprintf(f, "\\%c", ch);
        else if (ch < 0x20) fprintf(f, "\\u%04x", ch);
        else fputc(ch, f);
    }
    fputc('"', f);
}

static void json_bytes(FILE *f, long long v) {
    if (v < 0) fputs("null", f);
    else fprintf(f, "%lld", v);
}

static int do_time(ctx *c) {
    long n = c->a->time_runs, i;
    double *ms = (double *)calloc((size_t)n, sizeof *ms);
    double *sorted = (double *)calloc((size_t)n, sizeof *sorted);
    const char *load_path = "";
    long long baseline, peak;
    double median;
    int rc = 1;
    if (!ms || !sorted) {
        fail("out of memory");
        goto done;
    }
    baseline = proc_status_bytes("VmRSS");
    for (i = 0; i < n; i++) {
        OrtSession *session = NULL;
        oc_blob *blob = NULL;
        double t0 = now_ms(), t1;
        if (create_session(c, &session, &blob, &load_path)) goto done;
        t1 = now_ms();
        ms[i] = t1 - t0;
        release_session(c, session, blob);
    }
    peak = proc_status_bytes("VmHWM");
    memcpy(sorted, ms, (size_t)n * sizeof *ms);
    qsort(sorted, (size_t)n, sizeof *sorted, cmp_double);
    median = n % 2 ? sorted[n / 2] : (sorted[n / 2 - 1] + sorted[n / 2]) / 2.0;
    printf("{\"ready_ms_median\": %.3f, \"ready_ms\": [", median);
    for (i = 0; i < n; i++) printf("%s%.3f", i ? ", " : "", ms[i]);
    printf("], \"peak_rss_bytes\": ");
    json_bytes(stdout, peak);
    printf(", \"baseline_rss_bytes\": ");
    json_bytes(stdout, baseline);
    printf(", \"load_path\": ");
    json_string(stdout, load_path);
    printf(", \"refused\": ");
    if (c->refused[0])
        json_string(stdout, c->refused);
    else
        printf("null");
    printf("}\n");
    fflush(stdout);
    rc = 0;
done:
    free(ms);
    free(sorted);
    return rc;
}

/* ---- running ------------------------------------------------------------------------------ */

/* Check input `index` (named `name`) of the session against the array read from `file`. */
static int check_input(const OrtApi *api, OrtSession *session, size_t index, const char *name, const char *file,
                       const npy_array *arr) {
    OrtTypeInfo *ti = NULL, *contained = NULL; /* both released here */
    const OrtOptionalTypeInfo *oti = NULL;      /* owned by ti */
    const OrtTensorTypeAndShapeInfo *tsi = NULL;
    enum ONNXType kind = ONNX_TYPE_UNKNOWN;
    ONNXTensorElementDataType et = ONNX_TENSOR_ELEMENT_DATA_TYPE_UNDEFINED;
    size_t rank = 0, i;
    int64_t *dims = NULL;
    const char **sym = NULL;
    char context[1400], want[1024], have[512];
    int rc = 1;

    snprintf(context, sizeof context, "input '%s' (file %s): onnxruntime could not describe the input", name, file);
    ORT_CHECK(api, api->SessionGetInputTypeInfo(session, index, &ti), context);
    ORT_CHECK(api, api->GetOnnxTypeFromTypeInfo(ti, &kind), context);
    if (kind == ONNX_TYPE_OPTIONAL) {
        /* An optional tensor is fed as its tensor (present), as onnxruntime's Python API does. */
        ORT_CHECK(api, api->CastTypeInfoToOptionalTypeInfo(ti, &oti), context);
        if (oti) ORT_CHECK(api, api->GetOptionalContainedTypeInfo(oti, &contained), context);
        if (contained) ORT_CHECK(api, api->GetOnnxTypeFromTypeInfo(contained, &kind), context);
        if (kind != ONNX_TYPE_TENSOR) {
            fail("input '%s' (file %s): the model wants an optional of %s; oc-run feeds tensors only", name, file,
                 contained ? onnx_type_name(kind) : "an unknown type");
            goto done;
        }
    }
    if (kind != ONNX_TYPE_TENSOR) {
        fail("input '%s' (file %s): the model wants %s; oc-run feeds tensors only", name, file, onnx_type_name(kind));
        goto done;
    }
    ORT_CHECK(api, api->CastTypeInfoToTensorInfo(contained ? contained : ti, &tsi), context);
    if (!tsi) {
        fail("input '%s' (file %s): onnxruntime gives no tensor type", name, file);
        goto done;
    }
    ORT_CHECK(api, api->GetTensorElementType(tsi, &et), context);
    ORT_CHECK(api, api->GetDimensionsCount(tsi, &rank), context);
    dims = (int64_t *)calloc(rank ? rank : 1, sizeof *dims);
    sym = (const char **)calloc(rank ? rank : 1, sizeof *sym);
    if (!dims || !sym) {
        fail("out of memory");
        goto done;
    }
    ORT_CHECK(api, api->GetDimensions(tsi, dims, rank), context);
    ORT_CHECK(api, api->GetSymbolicDimensions(tsi, sym, rank), context);
    shape_text(want, sizeof want, dims, rank, sym);
    shape_text(have, sizeof have, arr->shape, arr->ndim, NULL);
    if ((int)et != arr->elem_type) {
        fail("input '%s' (file %s): the file holds %s, the model wants %s", name, file, elem_type_name(arr->elem_type),
             elem_type_name((int)et));
        goto done;
    }
    if (rank != arr->ndim) {
        fail("input '%s' (file %s): the file's shape %s has rank %lu, the model wants rank %lu: %s", name, file, have,
             (unsigned long)arr->ndim, (unsigned long)rank, want);
        goto done;
    }
    for (i = 0; i < rank; i++) {
        if (dims[i] >= 0 && dims[i] != arr->shape[i]) {
            fail("input '%s' (file %s): dimension %lu of the file's shape %s is %lld, the model wants %lld: %s", name,
                 file, (unsigned long)i, have, (long long)arr->shape[i], (long long)dims[i], want);
            goto done;
        }
    }
    rc = 0;
done:
    free(dims);
    free(sym);
    if (contained) api->ReleaseTypeInfo(contained);
    if (ti) api->ReleaseTypeInfo(ti);
    return rc;
}

/* An output's element type, shape and byte size, after checking .npy can hold it. */
typedef struct out_desc {
    int elem_type;
    size_t ndim;
    int64_t shape[NPY_MAX_DIMS];
    size_t nbytes;
    void *data;
    /* strings: `count` of them, text[offsets[i]..offsets[i] + lengths[i]) (malloc'd here) */
    size_t count;
    char *text;
    const char **strings;
    size_t *lengths;
    /* a sequence or a map: its JSON (values.h), what it is in words */
    int json;
    values_text json_text;
    char what[64];
} out_desc;

static void free_desc(out_desc *d) {
    free(d->text);
    free((void *)d->strings);
    free(d->lengths);
    values_text_free(&d->json_text);
    d->text = NULL;
    d->strings = NULL;
    d->lengths = NULL;
}

/* A string output's content: onnxruntime's bytes one after another, offsets[i] where string i
 * starts (GetStringTensorContent). */
static int read_strings(const OrtApi *api, OrtValue *value, const char *context, out_desc *d) {
    size_t total = 0, i, *offsets = NULL;
    int rc = 1;
    ORT_CHECK(api, api->GetStringTensorDataLength(value, &total), context);
    d->text = (char *)malloc(total ? total : 1);
    offsets = (size_t *)malloc((d->count ? d->count : 1) * sizeof *offsets);
    d->strings = (const char **)malloc((d->count ? d->count : 1) * sizeof *d->strings);
    d->lengths = (size_t *)malloc((d->count ? d->count : 1) * sizeof *d->lengths);
    if (!d->text || !offsets || !d->strings || !d->lengths) {
        fail("out of memory for a string output");
        goto done;
    }
    if (d->count) ORT_CHECK(api, api->GetStringTensorContent(value, d->text, total, offsets, d->count), context);
    for (i = 0; i < d->count; i++) {
        size_t end = i + 1 < d->count ? offsets[i + 1] : total;
        if (offsets[i] > end || end > total) {
            fail("onnxruntime gave string offsets outside its content");
            goto done;
        }
        d->strings[i] = d->text + offsets[i];
        d->lengths[i] = end - offsets[i];
    }
    rc = 0;
done:
    free(offsets);
    return rc;
}

static int describe_output(const OrtApi *api, OrtAllocator *alloc, OrtValue *value, const char *name, out_desc *d) {
    OrtTensorTypeAndShapeInfo *info = NULL;
    enum ONNXType kind = ONNX_TYPE_UNKNOWN;
    ONNXTensorElementDataType et = ONNX_TENSOR_ELEMENT_DATA_TYPE_UNDEFINED;
    size_t count = 0, item, ndim = 0;
    char context[1200], msg[1024];
    int rc = 1, has = 1;

    memset(d, 0, sizeof *d);
    snprintf(context, sizeof context, "output '%s': onnxruntime could not describe the value", name);
    if (!value) return fail("output '%s': onnxruntime returned no value", name);
    ORT_CHECK(api, api->HasValue(value, &has), context);
    if (has) ORT_CHECK(api, api->GetValueType(value, &kind), context); /* an empty optional has no type */
    if (!has || kind == ONNX_TYPE_SEQUENCE || kind == ONNX_TYPE_MAP) { /* ZipMap's sequence of maps, None */
        d->json = 1;
        if (values_to_json(api, alloc, value, name, &d->json_text, msg, sizeof msg)) {
            fail("%s", msg);
            goto done;
        }
        values_describe(api, alloc, value, d->what, sizeof d->what);
        rc = 0;
        goto done;
    }
    if (kind != ONNX_TYPE_TENSOR) {
        fail("output '%s' is %s; oc-run writes tensors (.npy), sequences and maps (.json) only", name,
             onnx_type_name(kind));
        goto done;
    }
    ORT_CHECK(api, api->GetTensorTypeAndShape(value, &info), context);
    ORT_CHECK(api, api->GetTensorElementType(info, &et), context);
    item = et == ONNX_TENSOR_ELEMENT_DATA_TYPE_STRING ? 1 : npy_elem_size((int)et);
    if (item == 0) {
        fail("output '%s' has element type %s, which oc-run cannot write to .npy", name, elem_type_name((int)et));
        goto done;
    }
    ORT_CHECK(api, api->GetDimensionsCount(info, &ndim), context);
    if (ndim > NPY_MAX_DIMS) {
        fail("output '%s' has %lu dimensions; oc-run writes at most %d", name, (unsigned long)ndim, NPY_MAX_DIMS);
        goto done;
    }
    ORT_CHECK(api, api->GetDimensions(info, d->shape, ndim), context);
    ORT_CHECK(api, api->GetTensorShapeElementCount(info, &count), context);
    if (count > ((size_t)-1) / item) {
        fail("output '%s' is too large", name);
        goto done;
    }
    d->elem_type = (int)et;
    d->ndim = ndim;
    if (et == ONNX_TENSOR_ELEMENT_DATA_TYPE_STRING) {
        d->count = count;
        if (read_strings(api, value, context, d)) goto done;
    } else {
        d->nbytes = count * item;
        if (d->nbytes) ORT_CHECK(api, api->GetTensorMutableData(value, &d->data), context);
    }
    rc = 0;
done:
    if (info) api->ReleaseTensorTypeAndShapeInfo(info);
    return rc;
}

/* A string tensor for onnxruntime from a '<U<n>' array: onnxruntime owns its copy of the UTF-8. */
static int string_input(const OrtApi *api, OrtAllocator *alloc, const npy_array *arr, const char *name,
                        const char *file, const char *context, OrtValue **value) {
    char *buffer = NULL, msg[1024];
    const char **strings = NULL;
    size_t count = 0;
    int rc = 1;
    if (npy_strings_utf8(arr, &buffer, &strings, &count, msg, sizeof msg)) {
        fail("input '%s' (file %s): %s", name, file, msg);
        return 1;
    }
    ORT_CHECK(api,
              api->CreateTensorAsOrtValue(alloc, arr->shape, arr->ndim, ONNX_TENSOR_ELEMENT_DATA_TYPE_STRING, value),
              context);
    if (count) ORT_CHECK(api, api->FillStringTensor(*value, strings, count), context);
    rc = 0;
done:
    free(buffer);
    free((void *)strings);
    return rc;
}

static int run_model(ctx *c, OrtSession *session) {
    const OrtApi *api = c->api;
    const args *a = c->a;
    OrtAllocator *alloc = NULL;
    OrtMemoryInfo *mem = NULL;
    size_t n_in = 0, n_out = 0, i, j;
    char **in_names = NULL, **out_names = NULL, **paths = NULL;
    npy_array *arrays = NULL;
    OrtValue **in_values = NULL, **out_values = NULL;
    out_desc *descs = NULL;
    char msg[1024];
    int rc = 1;

    ORT_CHECK(api, api->GetAllocatorWithDefaultOptions(&alloc), "onnxruntime has no default allocator");
    ORT_CHECK(api, api->SessionGetInputCount(session, &n_in), "onnxruntime could not count the model's inputs");
    ORT_CHECK(api, api->SessionGetOutputCount(session, &n_out), "onnxruntime could not count the model's outputs");
    in_names = (char **)calloc(n_in + 1, sizeof *in_names);
    out_names = (char **)calloc(n_out + 1, sizeof *out_names);
    arrays = (npy_array *)calloc(n_in + 1, sizeof *arrays);
    in_values = (OrtValue **)calloc(n_in + 1, sizeof *in_values);
    out_values = (OrtValue **)calloc(n_out + 1, sizeof *out_values);
    descs = (out_desc *)calloc(n_out + 1, sizeof *descs);
    paths = (char **)calloc(n_out + 1, sizeof *paths);
    if (!in_names || !out_names || !arrays || !in_values || !out_values || !descs || !paths) {
        fail("out of memory");
        goto done;
    }
    for (i = 0; i < n_in; i++)
        ORT_CHECK(api, api->SessionGetInputName(session, i, alloc, &in_names[i]), "onnxruntime could not name an input");
    for (i = 0; i < n_out; i++)
        ORT_CHECK(api, api->SessionGetOutputName(session, i, alloc, &out_names[i]), "onnxruntime could not name an output");

    if (a->in_count != n_in) {
        char names[2048];
        size_t n = 0;
        names[0] = '\0';
        for (i = 0; i < n_in; i++) append(names, sizeof names, &n, "%s'%s'", i ? ", " : "", in_names[i]);
        if (n_in == 0)
            fail("the model takes no inputs; %lu --in file%s given", (unsigned long)a->in_count,
                 a->in_count == 1 ? "" : "s");
        else
            fail("the model takes %lu input%s, in this order: %s; %lu --in file%s given", (unsigned long)n_in,
                 n_in == 1 ? "" : "s", names, (unsigned long)a->in_count, a->in_count == 1 ? "" : "s");
        goto done;
    }

    ORT_CHECK(api, api->CreateCpuMemoryInfo(OrtArenaAllocator, OrtMemTypeDefault, &mem),
              "onnxruntime could not describe CPU memory");
    for (i = 0; i < n_in; i++) {
        char context[1200];
        if (npy_read(a->ins[i], &arrays[i], msg, sizeof msg)) {
            fail("input '%s': %s", in_names[i], msg);
            goto done;
        }
        if (check_input(api, session, i, in_names[i], a->ins[i], &arrays[i])) goto done;
        snprintf(context, sizeof context, "input '%s' (file %s): onnxruntime refused the tensor", in_names[i], a->ins[i]);
        if (arrays[i].elem_type == NPY_ONNX_STRING) {
            if (string_input(api, alloc, &arrays[i], in_names[i], a->ins[i], context, &in_values[i])) goto done;
            continue;
        }
        ORT_CHECK(api,
                  api->CreateTensorWithDataAsOrtValue(mem, arrays[i].data, arrays[i].nbytes, arrays[i].shape,
                                                      arrays[i].ndim,
                                                      (ONNXTensorElementDataType)arrays[i].elem_type, &in_values[i]),
                  context);
    }

    ORT_CHECK(api,
              api->Run(session, NULL, (const char *const *)in_names, (const OrtValue *const *)in_values, n_in,
                       (const char *const *)out_names, n_out, out_values),
              "onnxruntime could not run the model");

    /* check every output before writing any */
    for (i = 0; i < n_out; i++)
        if (describe_output(api, alloc, out_values[i], out_names[i], &descs[i])) goto done;
    if (a->out) {
        for (i = 0; i < n_out; i++) {
            paths[i] = output_path(a->out, out_names[i], descs[i].json ? ".json" : ".npy");
            if (!paths[i]) {
                fail("out of memory");
                goto done;
            }
            for (j = 0; j < i; j++) {
                if (strcmp(paths[i], paths[j]) == 0) {
                    fail("outputs '%s' and '%s' would both be written to %s", out_names[j], out_names[i], paths[i]);
                    goto done;
                }
            }
        }
        if (make_dirs(a->out)) goto done;
    }
    for (i = 0; i < n_out; i++) {
        char shape[512];
        if (descs[i].json) {
            if (a->out && values_write(paths[i], &descs[i].json_text, msg, sizeof msg)) {
                fail("output '%s': %s", out_names[i], msg);
                goto done;
            }
            printf("output '%s': %s%s%s\n", out_names[i], descs[i].what, a->out ? " -> " : "", a->out ? paths[i] : "");
            continue;
        }
        shape_text(shape, sizeof shape, descs[i].shape, descs[i].ndim, NULL);
        if (a->out) {
            int bad = descs[i].elem_type == NPY_ONNX_STRING
                          ? npy_write_strings(paths[i], descs[i].shape, descs[i].ndim, descs[i].strings,
                                              descs[i].lengths, descs[i].count, msg, sizeof msg)
                          : npy_write(paths[i], descs[i].elem_type, descs[i].shape, descs[i].ndim, descs[i].data,
                                      descs[i].nbytes, msg, sizeof msg);
            if (bad) {
                fail("output '%s': %s", out_names[i], msg);
                goto done;
            }
            printf("output '%s': %s %s -> %s\n", out_names[i], elem_type_name(descs[i].elem_type), shape, paths[i]);
        } else {
            printf("output '%s': %s %s\n", out_names[i], elem_type_name(descs[i].elem_type), shape);
        }
    }
    rc = 0;
done:
    if (out_values)
        for (i = 0; i < n_out; i++)
            if (out_values[i]) api->ReleaseValue(out_values[i]);
    if (in_values)
        for (i = 0; i < n_in; i++)
            if (in_values[i]) api->ReleaseValue(in_values[i]);
    if (arrays)
        for (i = 0; i < n_in; i++) npy_free(&arrays[i]);
    if (mem) api->ReleaseMemoryInfo(mem);
    /* names from the default allocator: AllocatorFree never fails for it; its status is released */
    if (in_names)
        for (i = 0; i < n_in; i++)
            if (in_names[i]) {
                OrtStatus *st = api->AllocatorFree(alloc, in_names[i]);
                if (st) api->ReleaseStatus(st);
            }
    if (out_names)
        for (i = 0; i < n_out; i++)
            if (out_names[i]) {
                OrtStatus *st = api->AllocatorFree(alloc, out_names[i]);
                if (st) api->ReleaseStatus(st);
            }
    if (paths)
        for (i = 0; i < n_out; i++) free(paths[i]);
    if (descs)
        for (i = 0; i < n_out; i++) free_desc(&descs[i]);
    free(paths);
    free(descs);
    free(out_values);
    free(in_values);
    free(arrays);
    free(out_names);
    free(in_names);
    return rc;
}

static int do_once(ctx *c) {
    OrtSession *session = NULL;
    oc_blob *blob = NULL;
    const char *load_path = "";
    int rc;
    if (create_session(c, &session, &blob, &load_path)) return 1;
    printf("session ready: load path %s, onnxruntime %s\n", load_path, oc_runtime_version(c->runtime));
    if (c->refused[0]) printf("refused first: %s\n", c->refused);
    if (c->a->bundle || c->a->blob) printf("eps: %s\n", c->explanation);
    rc = 0;
    if (c->a->in_count > 0 || c->a->out) rc = run_model(c, session);
    fflush(stdout);
    release_session(c, session, blob);
    return rc;
}

/* --devices: a policy name (no ':' and no ','), or EP:TYPE pairs separated by ','. */
static int parse_devices(ctx *c, const char *value) {
    size_t n = 1, i;
    const char *q;
    char *p, *next;
    c->has_devices = 1;
    if (!strchr(value, ':') && !strchr(value, ',')) {
        c->devices.policy = value;
        return 0;
    }
    for (q = value; *q; q++) n += *q == ',';
    c->devices_text = malloc(strlen(value) + 1);
    c->pairs = calloc(n, sizeof *c->pairs);
    if (!c->devices_text || !c->pairs) return fail("out of memory");
    strcpy(c->devices_text, value);
    for (i = 0, p = c->devices_text; p; p = next, i++) {
        char *colon;
        next = strchr(p, ',');
        if (next) *next++ = '\0';
        colon = strchr(p, ':');
        if (!colon || colon == p) return fail("--devices %s: '%s' is not EP:TYPE (TYPE cpu, gpu, npu or any)", value, p);
        *colon++ = '\0';
        c->pairs[i].ep = p;
        if (strcmp(colon, "cpu") == 0) c->pairs[i].type = OC_DEVICE_CPU;
        else if (strcmp(colon, "gpu") == 0) c->pairs[i].type = OC_DEVICE_GPU;
        else if (strcmp(colon, "npu") == 0) c->pairs[i].type = OC_DEVICE_NPU;
        else if (strcmp(colon, "any") == 0) c->pairs[i].type = OC_DEVICE_ANY;
        else return fail("--devices %s: device type '%s' of %s: cpu, gpu, npu or any", value, colon, p);
    }
    c->devices.pairs = c->pairs;
    c->devices.pair_count = n;
    return 0;
}

/* --blob: the whole file into memory (malloc'd; the caller frees it). Read to its end in chunks
 * rather than sized by ftell, which is a 32-bit long on Windows; a regular file only. */
static int read_whole(const char *path, unsigned char **bytes, size_t *size) {
    FILE *f;
    size_t have = 0, room = 1 << 20;
    unsigned char *buffer;
    *bytes = NULL;
    *size = 0;
    if (utf8_kind(path) != 2) return fail("--blob %s: not a blob file (missing, a folder or not a regular file)", path);
    f = utf8_fopen(path, "rb");
    if (!f) return fail("--blob %s: cannot open it (%s)", path, strerror(errno));
    buffer = malloc(room);
    while (buffer) {
        size_t got = fread(buffer + have, 1, room - have, f);
        have += got;
        if (got == 0 || have < room) {
            if (ferror(f)) {
                free(buffer);
                fclose(f);
                return fail("--blob %s: cannot read it", path);
            }
            if (feof(f)) break;
            continue;
        }
        if (room > SIZE_MAX / 2) { /* not reached on a 64-bit system */
            free(buffer);
            buffer = NULL;
            break;
        }
        {
            unsigned char *bigger = realloc(buffer, room * 2);
            if (!bigger) free(buffer);
            buffer = bigger;
            room *= 2;
        }
    }
    fclose(f);
    if (!buffer) return fail("--blob %s: out of memory after %llu bytes", path, (unsigned long long)have);
    *bytes = buffer;
    *size = have;
    return 0;
}

static int run(const args *a) {
    ctx c;
    oc_error err;
    oc_status s;
    size_t i;
    int rc = 1;
    memset(&c, 0, sizeof c);
    memset(&err, 0, sizeof err);
    c.a = a;

    s = oc_runtime_load(a->ort, &c.runtime, &err);
    if (s != OC_OK) {
        fail_oc(&err, s);
        goto done;
    }
    c.api = oc_runtime_api(c.runtime);
    if (!c.api) {
        fail("the loaded onnxruntime gives no API");
        goto done;
    }
    for (i = 0; i < a->library_count; i++) {
        const char *eq = strchr(a->libraries[i], '=');
        char name[256];
        if (!eq || eq == a->libraries[i] || !eq[1] || (size_t)(eq - a->libraries[i]) >= sizeof name) {
            fail("--ep-library %s: give NAME=PATH", a->libraries[i]);
            goto done;
        }
        memcpy(name, a->libraries[i], (size_t)(eq - a->libraries[i]));
        name[eq - a->libraries[i]] = '\0';
        s = oc_runtime_register_ep_library(c.runtime, name, eq + 1, &err);
        if (s != OC_OK) {
            fail_oc(&err, s);
            goto done;
        }
    }
    if (a->devices && parse_devices(&c, a->devices)) goto done;
    if (a->bundle) {
        s = oc_bundle_open_dir(a->bundle, NULL, &c.bundle, &err);
        if (s != OC_OK) {
            fail_oc(&err, s);
            goto done;
        }
    } else if (a->blob) {
        if (read_whole(a->blob, &c.blob_bytes, &c.blob_size)) goto done;
    } else {
        ORT_CHECK(c.api, c.api->CreateEnv(ORT_LOGGING_LEVEL_WARNING, "oc-run", &c.env),
                  "onnxruntime could not create its environment");
    }
    rc = a->time_runs > 0 ? do_time(&c) : do_once(&c);
done:
    if (c.env) c.api->ReleaseEnv(c.env);
    oc_bundle_close(c.bundle);
    free(c.blob_bytes);
    oc_runtime_release(c.runtime);
    free(c.pairs);
    free(c.devices_text);
    return rc;
}

/* ---- arguments ---------------------------------------------------------------------------- */

/* 0 parsed, 2 usage error, 3 --help. */
static int parse_args(int argc, char **argv, args *a) {
    int i, ort_given = 0;
    memset(a, 0, sizeof *a);
    a->ort = getenv("OC_ORT_LIBRARY");
    if (a->ort && !*a->ort) a->ort = NULL;
    a->eps = (const char **)calloc((size_t)argc + 1, sizeof *a->eps);
    a->ins = (const char **)calloc((size_t)argc + 1, sizeof *a->ins);
    a->libraries = (const char **)calloc((size_t)argc + 1, sizeof *a->libraries);
    if (!a->eps || !a->ins || !a->libraries) {
        usage_error("out of memory");
        return 2;
    }
    for (i = 1; i < argc; i++) {
        const char *opt = argv[i], *value = NULL, *eq;
        char name[32];
        size_t len;
        if (strcmp(opt, "-h") == 0 || strcmp(opt, "--help") == 0) return 3;
        if (strcmp(opt, "--low-memory") == 0) {
            a->low_memory = 1;
            continue;
        }
        if (strncmp(opt, "--", 2) != 0) {
            usage_error("unexpected argument '%s'", opt);
            return 2;
        }
        eq = strchr(opt, '=');
        len = eq ? (size_t)(eq - opt) : strlen(opt);
        if (len >= sizeof name) {
            usage_error("unknown option '%s'", opt);
            return 2;
        }
        memcpy(name, opt, len);
        name[len] = '\0';
        if (strcmp(name, "--bundle") != 0 && strcmp(name, "--model") != 0 && strcmp(name, "--file") != 0 &&
            strcmp(name, "--blob") != 0 &&
            strcmp(name, "--ep") != 0 && strcmp(name, "--in") != 0 && strcmp(name, "--out") != 0 &&
            strcmp(name, "--time") != 0 && strcmp(name, "--ort") != 0 && strcmp(name, "--devices") != 0 &&
            strcmp(name, "--ep-library") != 0) {
            usage_error("unknown option '%s'", opt);
            return 2;
        }
        if (eq) value = eq + 1;
        else if (i + 1 < argc && strncmp(argv[i + 1], "--", 2) != 0) value = argv[++i]; /* --in=--odd for those */
        if (!value || !*value) {
            usage_error("%s needs a value", name);
            return 2;
        }
#define SINGLE(field)                                                                                   \
    do {                                                                                                \
        if (a->field) {                                                                                 \
            usage_error("%s given twice", name);                                                        \
            return 2;                                                                                   \
        }                                                                                               \
        a->field = value;                                                                               \
    } while (0)
        if (strcmp(name, "--bundle") == 0) SINGLE(bundle);
        else if (strcmp(name, "--model") == 0) SINGLE(model);
        else if (strcmp(name, "--file") == 0) SINGLE(file);
        else if (strcmp(name, "--blob") == 0) SINGLE(blob);
        else if (strcmp(name, "--out") == 0) SINGLE(out);
        else if (strcmp(name, "--devices") == 0) SINGLE(devices);
        else if (strcmp(name, "--ep-library") == 0) a->libraries[a->library_count++] = value;
        else if (strcmp(name, "--ort") == 0) { /* overrides $OC_ORT_LIBRARY */
            if (ort_given++) {
                usage_error("--ort given twice");
                return 2;
            }
            a->ort = value;
        }
        else if (strcmp(name, "--ep") == 0) a->eps[a->ep_count++] = value;
        else if (strcmp(name, "--in") == 0) a->ins[a->in_count++] = value;
        else { /* --time */
            char *end = NULL;
            long n;
            errno = 0;
            n = strtol(value, &end, 10);
            if (a->time_runs) {
                usage_error("--time given twice");
                return 2;
            }
            if (errno || !end || *end || n < 1 || n > MAX_TIME_RUNS) {
                usage_error("--time wants a count from 1 to %d, not '%s'", MAX_TIME_RUNS, value);
                return 2;
            }
            a->time_runs = n;
        }
#undef SINGLE
    }
    if ((a->bundle != NULL) + (a->file != NULL) + (a->blob != NULL) != 1) {
        usage_error(a->bundle || a->file || a->blob ? "--bundle, --file and --blob exclude each other"
                                                    : "give --bundle DIR --model NAME, --blob FILE.ocb or --file MODEL");
        return 2;
    }
    if (a->blob && a->model) {
        usage_error("--model goes with --bundle: a --blob file holds one model");
        return 2;
    }
    if (a->bundle && !a->model) {
        usage_error("--bundle needs --model NAME");
        return 2;
    }
    if (a->file && a->model) {
        usage_error("--model goes with --bundle, not --file");
        return 2;
    }
    if (a->file && (a->devices || a->library_count)) {
        usage_error("--devices and --ep-library go with --bundle (the --file baseline uses onnxruntime's CPU EP)");
        return 2;
    }
    if (a->file && a->ep_count) {
        usage_error("--ep goes with --bundle (the --file baseline uses onnxruntime's CPU EP)");
        return 2;
    }
    if (a->time_runs && (a->in_count || a->out)) {
        usage_error("--time only creates sessions: leave out --in and --out");
        return 2;
    }
    return 0;
}

int main(int argc, char **argv) {
    args a;
    int rc;
    if (utf8_main_args(&argc, &argv) != 0) {
        fputs("oc-run: error: cannot read the command line as UTF-8\n", stderr);
        return 2;
    }
    rc = parse_args(argc, argv, &a);
    if (rc == 3) {
        fputs(usage_text, stdout);
        rc = 0;
    } else if (rc == 0) {
        rc = run(&a);
        if (rc) {
            fflush(stdout);
            fprintf(stderr, "oc-run: error: %s\n", g_error);
            rc = 1;
        }
    }
    free((void *)a.eps);
    free((void *)a.ins);
    free((void *)a.libraries);
    return rc;
}
