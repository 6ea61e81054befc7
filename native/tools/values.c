/*
 * values.c - oc-run's JSON form of an output that is not a tensor (values.h says the form).
 * Every value comes from onnxruntime; sizes are still checked before they are multiplied.
 */
#include "values.h"

#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "utf8_paths.h"

typedef struct walk {
    const OrtApi *api;
    OrtAllocator *alloc;
    const char *name;
    values_text *out;
    char *msg;
    size_t msg_size;
} walk;

static int fail(walk *w, const char *format, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;

static int fail(walk *w, const char *format, ...) {
    va_list args;
    int n;
    if (!w->msg || !w->msg_size) return 1;
    n = snprintf(w->msg, w->msg_size, "output '%s': ", w->name);
    if (n < 0 || (size_t)n >= w->msg_size) return 1;
    va_start(args, format);
    vsnprintf(w->msg + n, w->msg_size - (size_t)n, format, args);
    va_end(args);
    return 1;
}

static int fail_ort(walk *w, OrtStatus *status, const char *what) {
    const char *text = w->api->GetErrorMessage(status);
    fail(w, "onnxruntime could not %s: %s", what, text ? text : "(no message)");
    w->api->ReleaseStatus(status);
    return 1;
}

#define CHECK(w, call, what)                                                                       \
    do {                                                                                           \
        OrtStatus *status_ = (call);                                                               \
        if (status_) return fail_ort((w), status_, (what));                                        \
    } while (0)

static void put(values_text *t, const char *s, size_t n) {
    if (t->failed) return;
    if (t->cap - t->len <= n) {
        size_t cap = t->cap ? t->cap : 256;
        char *grown;
        while (cap - t->len <= n) {
            if (cap > ((size_t)-1) / 2) {
                t->failed = 1;
                return;
            }
            cap *= 2;
        }
        grown = (char *)realloc(t->data, cap);
        if (!grown) {
            t->failed = 1;
            return;
        }
        t->data = grown;
        t->cap = cap;
    }
    memcpy(t->data + t->len, s, n);
    t->len += n;
    t->data[t->len] = '\0';
}

static void puts_(values_text *t, const char *s) { put(t, s, strlen(s)); }

static void put_double(values_text *t, double v, int digits) {
    char buf[40];
    if (isnan(v)) {
        puts_(t, "NaN");
    } else if (isinf(v)) {
        puts_(t, v > 0 ? "Infinity" : "-Infinity");
    } else {
        snprintf(buf, sizeof buf, "%.*g", digits, v);
        puts_(t, buf);
    }
}

static float half_to_float(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16, exponent = (h >> 10) & 0x1f, mantissa = h & 0x3ffu, bits;
    float f;
    if (exponent == 0x1f) {
        bits = sign | 0x7f800000u | (mantissa << 13); /* inf, NaN */
    } else if (exponent != 0) {
        bits = sign | ((exponent + 112) << 23) | (mantissa << 13);
    } else { /* zero or subnormal: mantissa * 2^-24 */
        f = (float)mantissa * (1.0f / 16777216.0f);
        return sign ? -f : f;
    }
    memcpy(&f, &bits, sizeof f);
    return f;
}

static float bfloat_to_float(uint16_t b) {
    uint32_t bits = (uint32_t)b << 16;
    float f;
    memcpy(&f, &bits, sizeof f);
    return f;
}

/* Length of the UTF-8 sequence starting s[0] (n bytes left), or 0 where it is not well formed. */
static size_t utf8_length(const unsigned char *s, size_t n) {
    size_t len, i;
    uint32_t c;
    if (s[0] < 0x80) return 1;
    if (s[0] >= 0xc2 && s[0] <= 0xdf) len = 2, c = s[0] & 0x1fu;
    else if (s[0] >= 0xe0 && s[0] <= 0xef) len = 3, c = s[0] & 0x0fu;
    else if (s[0] >= 0xf0 && s[0] <= 0xf4) len = 4, c = s[0] & 0x07u;
    else return 0;
    if (len > n) return 0;
    for (i = 1; i < len; i++) {
        if ((s[i] & 0xc0) != 0x80) return 0;
        c = c << 6 | (s[i] & 0x3fu);
    }
    if ((len == 3 && (c < 0x800 || (c >= 0xd800 && c <= 0xdfff))) || (len == 4 && (c < 0x10000 || c > 0x10ffff)))
        return 0;
    return len;
}

static int put_string(walk *w, const char *s, size_t n) {
    const unsigned char *p = (const unsigned char *)s;
    size_t i = 0;
    put(w->out, "\"", 1);
    while (i < n) {
        size_t len = utf8_length(p + i, n - i);
        if (len == 0) return fail(w, "a string is not valid UTF-8 (at byte %lu), which JSON cannot hold", (unsigned long)i);
        if (p[i] == '"' || p[i] == '\\') {
            char esc[2] = {'\\', (char)p[i]};
            put(w->out, esc, 2);
        } else if (p[i] < 0x20) {
            char esc[8];
            snprintf(esc, sizeof esc, "\\u%04x", p[i]);
            puts_(w->out, esc);
        } else {
            put(w->out, s + i, len);
        }
        i += len;
    }
    put(w->out, "\"", 1);
    return 0;
}

/* Element `i` of tensor data of type `et` as JSON. */
static void put_element(values_text *t, int et, const void *data, size_t i) {
    char buf[32];
    switch (et) {
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT: put_double(t, ((const float *)data)[i], 9); return;
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_DOUBLE: put_double(t, ((const double *)data)[i], 17); return;
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT16: put_double(t, half_to_float(((const uint16_t *)data)[i]), 9); return;
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_BFLOAT16: put_double(t, bfloat_to_float(((const uint16_t *)data)[i]), 9); return;
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_BOOL: puts_(t, ((const uint8_t *)data)[i] ? "true" : "false"); return;
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_INT8: snprintf(buf, sizeof buf, "%d", ((const int8_t *)data)[i]); break;
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_UINT8: snprintf(buf, sizeof buf, "%u", ((const uint8_t *)data)[i]); break;
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_INT16: snprintf(buf, sizeof buf, "%d", ((const int16_t *)data)[i]); break;
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_UINT16: snprintf(buf, sizeof buf, "%u", ((const uint16_t *)data)[i]); break;
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_INT32: snprintf(buf, sizeof buf, "%ld", (long)((const int32_t *)data)[i]); break;
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_UINT32:
        snprintf(buf, sizeof buf, "%lu", (unsigned long)((const uint32_t *)data)[i]);
        break;
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_INT64:
        snprintf(buf, sizeof buf, "%lld", (long long)((const int64_t *)data)[i]);
        break;
    default: /* UINT64: the caller admits no other type */
        snprintf(buf, sizeof buf, "%llu", (unsigned long long)((const uint64_t *)data)[i]);
        break;
    }
    puts_(t, buf);
}

static int json_type(int et) {
    switch (et) {
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT:
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_DOUBLE:
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT16:
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_BFLOAT16:
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_BOOL:
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_INT8:
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_UINT8:
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_INT16:
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_UINT16:
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_INT32:
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_UINT32:
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_INT64:
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_UINT64:
    case ONNX_TENSOR_ELEMENT_DATA_TYPE_STRING: return 1;
    default: return 0;
    }
}

/* A tensor's content, read once: numbers in place, strings copied out with their offsets. */
typedef struct content {
    int et;
    size_t ndim, count;
    int64_t shape[VALUES_MAX_DEPTH];
    void *data;          /* numbers: onnxruntime's, borrowed */
    char *text;          /* strings: malloc'd */
    size_t *offsets;     /* strings: count + 1 of them, malloc'd */
} content;

static void content_free(content *c) {
    free(c->text);
    free(c->offsets);
    c->text = NULL;
    c->offsets = NULL;
}

static int read_content(walk *w, OrtValue *value, content *c) {
    OrtTensorTypeAndShapeInfo *info = NULL;
    ONNXTensorElementDataType et = ONNX_TENSOR_ELEMENT_DATA_TYPE_UNDEFINED;
    OrtStatus *status;
    size_t i, total = 0;
    memset(c, 0, sizeof *c);
    CHECK(w, w->api->GetTensorTypeAndShape(value, &info), "describe a tensor");
    status = w->api->GetTensorElementType(info, &et);
    if (!status) status = w->api->GetDimensionsCount(info, &c->ndim);
    if (!status && c->ndim <= VALUES_MAX_DEPTH) status = w->api->GetDimensions(info, c->shape, c->ndim);
    if (!status) status = w->api->GetTensorShapeElementCount(info, &c->count);
    w->api->ReleaseTensorTypeAndShapeInfo(info);
    if (status) return fail_ort(w, status, "describe a tensor");
    c->et = (int)et;
    if (!json_type(c->et)) return fail(w, "a tensor of element type %d has no JSON form here", c->et);
    if (c->ndim > VALUES_MAX_DEPTH) return fail(w, "a tensor of %lu dimensions (at most %d)", (unsigned long)c->ndim, VALUES_MAX_DEPTH);
    for (i = 0; i < c->ndim; i++)
        if (c->shape[i] < 0) return fail(w, "a tensor of negative dimension");
    if (c->count == 0) return 0;
    if (c->et != ONNX_TENSOR_ELEMENT_DATA_TYPE_STRING) {
        CHECK(w, w->api->GetTensorMutableData(value, &c->data), "read a tensor");
        return 0;
    }
    CHECK(w, w->api->GetStringTensorDataLength(value, &total), "read a string tensor");
    if (c->count > ((size_t)-1) / sizeof *c->offsets - 1) return fail(w, "a string tensor is too large");
    c->text = (char *)malloc(total ? total : 1);
    c->offsets = (size_t *)malloc((c->count + 1) * sizeof *c->offsets);
    if (!c->text || !c->offsets) return fail(w, "out of memory for a string tensor");
    CHECK(w, w->api->GetStringTensorContent(value, c->text, total, c->offsets, c->count), "read a string tensor");
    c->offsets[c->count] = total;
    for (i = 0; i < c->count; i++)
        if (c->offsets[i] > c->offsets[i + 1]) return fail(w, "onnxruntime gave string offsets out of order");
    return 0;
}

static int put_item(walk *w, const content *c, size_t i) {
    if (c->et != ONNX_TENSOR_ELEMENT_DATA_TYPE_STRING) {
        put_element(w->out, c->et, c->data, i);
        return 0;
    }
    return put_string(w, c->text + c->offsets[i], c->offsets[i + 1] - c->offsets[i]);
}

/* Dimension `dim` of the tensor from element *next on, as nested arrays. */
static int put_dims(walk *w, const content *c, size_t dim, size_t *next) {
    int64_t i;
    if (dim == c->ndim) return put_item(w, c, (*next)++);
    put(w->out, "[", 1);
    for (i = 0; i < c->shape[dim]; i++) {
        if (i) put(w->out, ", ", 2);
        if (put_dims(w, c, dim + 1, next)) return 1;
    }
    put(w->out, "]", 1);
    return 0;
}

static int put_value(walk *w, OrtValue *value, int depth);

static int put_tensor(walk *w, OrtValue *value) {
    content c;
    size_t next = 0;
    int rc = read_content(w, value, &c);
    if (!rc) rc = put_dims(w, &c, 0, &next);
    content_free(&c);
    return rc;
}

static int put_sequence(walk *w, OrtValue *value, int depth) {
    size_t n = 0, i;
    put(w->out, "[", 1);
    CHECK(w, w->api->GetValueCount(value, &n), "count a sequence");
    for (i = 0; i < n; i++) {
        OrtValue *item = NULL;
        int rc;
        if (i) put(w->out, ", ", 2);
        CHECK(w, w->api->GetValue(value, (int)i, w->alloc, &item), "read a sequence's element");
        rc = put_value(w, item, depth + 1);
        w->api->ReleaseValue(item);
        if (rc) return 1;
    }
    put(w->out, "]", 1);
    return 0;
}

static int put_map(walk *w, OrtValue *value) {
    OrtValue *keys = NULL, *values = NULL;
    content k, v;
    OrtStatus *status;
    size_t i;
    int rc = 1;
    memset(&k, 0, sizeof k);
    memset(&v, 0, sizeof v);
    status = w->api->GetValue(value, 0, w->alloc, &keys);
    if (!status) status = w->api->GetValue(value, 1, w->alloc, &values);
    if (status) {
        fail_ort(w, status, "read a map");
        goto done;
    }
    if (read_content(w, keys, &k) || read_content(w, values, &v)) goto done;
    if (k.count != v.count) {
        fail(w, "a map of %lu keys and %lu values", (unsigned long)k.count, (unsigned long)v.count);
        goto done;
    }
    if (k.et == ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT || k.et == ONNX_TENSOR_ELEMENT_DATA_TYPE_DOUBLE ||
        k.et == ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT16 || k.et == ONNX_TENSOR_ELEMENT_DATA_TYPE_BFLOAT16 ||
        k.et == ONNX_TENSOR_ELEMENT_DATA_TYPE_BOOL) {
        fail(w, "a map with keys of element type %d (ONNX maps have integer or string keys)", k.et);
        goto done;
    }
    put(w->out, "{", 1);
    for (i = 0; i < k.count; i++) {
        if (i) put(w->out, ", ", 2);
        if (k.et == ONNX_TENSOR_ELEMENT_DATA_TYPE_STRING) {
            if (put_item(w, &k, i)) goto done;
        } else { /* an integer key, as the string JSON needs */
            put(w->out, "\"", 1);
            put_element(w->out, k.et, k.data, i);
            put(w->out, "\"", 1);
        }
        put(w->out, ": ", 2);
        if (put_item(w, &v, i)) goto done;
    }
    put(w->out, "}", 1);
    rc = 0;
done:
    content_free(&k);
    content_free(&v);
    if (keys) w->api->ReleaseValue(keys);
    if (values) w->api->ReleaseValue(values);
    return rc;
}

static int put_value(walk *w, OrtValue *value, int depth) {
    enum ONNXType kind = ONNX_TYPE_UNKNOWN;
    int has = 1;
    if (depth > VALUES_MAX_DEPTH) return fail(w, "values nested over %d deep", VALUES_MAX_DEPTH);
    CHECK(w, w->api->HasValue(value, &has), "describe a value");
    if (!has) { /* an empty optional (Python's None) */
        put(w->out, "null", 4);
        return 0;
    }
    CHECK(w, w->api->GetValueType(value, &kind), "describe a value");
    switch (kind) {
    case ONNX_TYPE_TENSOR: return put_tensor(w, value);
    case ONNX_TYPE_SEQUENCE: return put_sequence(w, value, depth);
    case ONNX_TYPE_MAP: return put_map(w, value);
    case ONNX_TYPE_OPTIONAL: return fail(w, "an optional value, which oc-run does not write");
    case ONNX_TYPE_SPARSETENSOR: return fail(w, "a sparse tensor, which oc-run does not write");
    default: return fail(w, "a value of ONNX type %d, which oc-run does not write", (int)kind);
    }
}

int values_to_json(const OrtApi *api, OrtAllocator *alloc, OrtValue *value, const char *name, values_text *out,
                   char *msg, size_t msg_size) {
    walk w;
    w.api = api;
    w.alloc = alloc;
    w.name = name ? name : "";
    w.out = out;
    w.msg = msg;
    w.msg_size = msg_size;
    if (msg && msg_size) msg[0] = '\0';
    if (put_value(&w, value, 0)) return 1;
    put(out, "\n", 1);
    if (out->failed) return fail(&w, "out of memory for its JSON");
    return 0;
}

void values_describe(const OrtApi *api, OrtAllocator *alloc, OrtValue *value, char *buf, size_t size) {
    enum ONNXType kind = ONNX_TYPE_UNKNOWN, inner = ONNX_TYPE_UNKNOWN;
    size_t n = 0;
    int has = 1;
    OrtStatus *status = api->HasValue(value, &has);
    if (status) api->ReleaseStatus(status);
    if (!has) {
        snprintf(buf, size, "no value (an empty optional)");
        return;
    }
    status = api->GetValueType(value, &kind);
    if (status) api->ReleaseStatus(status);
    if (kind == ONNX_TYPE_MAP) {
        snprintf(buf, size, "a map");
        return;
    }
    status = api->GetValueCount(value, &n);
    if (status) api->ReleaseStatus(status);
    if (n > 0) {
        OrtValue *first = NULL;
        status = api->GetValue(value, 0, alloc, &first);
        if (status) api->ReleaseStatus(status);
        if (first) {
            status = api->GetValueType(first, &inner);
            if (status) api->ReleaseStatus(status);
            api->ReleaseValue(first);
        }
    }
    snprintf(buf, size, "a sequence of %lu %s", (unsigned long)n,
             inner == ONNX_TYPE_MAP ? (n == 1 ? "map" : "maps")
             : inner == ONNX_TYPE_SEQUENCE ? (n == 1 ? "sequence" : "sequences")
                                           : (n == 1 ? "tensor" : "tensors"));
}

int values_write(const char *path, const values_text *text, char *msg, size_t msg_size) {
    FILE *f = utf8_fopen(path, "wb");
    int ok;
    if (!f) {
        if (msg && msg_size) snprintf(msg, msg_size, "%s: cannot create the file", path);
        return 1;
    }
    ok = fwrite(text->data, 1, text->len, f) == text->len;
    ok = (fclose(f) == 0) && ok;
    if (!ok) {
        remove(path);
        if (msg && msg_size) snprintf(msg, msg_size, "%s: writing failed (disk full?)", path);
        return 1;
    }
    return 0;
}

void values_text_free(values_text *text) {
    free(text->data);
    text->data = NULL;
    text->len = text->cap = 0;
}
