/* rewrite.c - point a checked ONNX graph's external-data references somewhere else (the C twin of
 * onnxrefs.rewrite_locations): every main-graph initializer's `location` becomes a given file
 * name, its `offset` moves by a shift and its `length` is set to the blob header's. Call only on a
 * graph oc_check_references accepted: only main-graph initializers can carry references then. */
#include <stdio.h>
#include <string.h>

#include "internal.h"

typedef struct builder {
    const oc_alloc *alloc;
    uint8_t *data;
    size_t size, capacity;
    int failed;
} builder;

static void put(builder *b, const void *bytes, size_t n) {
    if (b->failed || n == 0) return;
    if (b->size + n < b->size) {
        b->failed = 1;
        return;
    }
    if (b->size + n > b->capacity) {
        size_t capacity = b->capacity ? b->capacity : 256;
        uint8_t *bigger;
        while (capacity < b->size + n) {
            if (capacity > SIZE_MAX / 2) {
                b->failed = 1;
                return;
            }
            capacity *= 2;
        }
        bigger = oc_malloc(b->alloc, capacity);
        if (bigger == NULL) {
            b->failed = 1;
            return;
        }
        if (b->size) memcpy(bigger, b->data, b->size);
        oc_free(b->alloc, b->data);
        b->data = bigger;
        b->capacity = capacity;
    }
    memcpy(b->data + b->size, bytes, n);
    b->size += n;
}

static void put_varint(builder *b, uint64_t value) {
    uint8_t bytes[10];
    size_t n = 0;
    do {
        bytes[n] = (uint8_t)(value & 0x7F);
        value >>= 7;
        if (value) bytes[n] |= 0x80;
        ++n;
    } while (value);
    put(b, bytes, n);
}

static void put_field(builder *b, uint64_t number, const void *payload, size_t n) {
    put_varint(b, number << 3 | 2);
    put_varint(b, n);
    put(b, payload, n);
}

typedef struct field {
    uint64_t number;
    int wire;
    uint64_t value;           /* wire 0 */
    size_t start, end;        /* wire 2: the payload; wire 1/5: the fixed bytes; whole: [whole, end) */
    size_t whole;
} field;

static int read_varint(const uint8_t *data, size_t *pos, size_t end, uint64_t *value) {
    uint64_t result = 0;
    int shift = 0;
    while (*pos < end && shift < 64) {
        uint8_t byte = data[(*pos)++];
        result |= (uint64_t)(byte & 0x7F) << shift;
        if (byte < 0x80) {
            *value = result;
            return 1;
        }
        shift += 7;
    }
    return 0;
}

/* The next field of the message in data[*pos, end); 0 at the end or on malformed bytes (*bad). */
static int next(const uint8_t *data, size_t *pos, size_t end, field *f, int *bad) {
    uint64_t key, length;
    if (*pos >= end) return 0;
    f->whole = *pos;
    if (!read_varint(data, pos, end, &key)) goto malformed;
    key &= 0xFFFFFFFFu; /* a key's low 32 bits, as protobuf reads it (onnxrefs.c, next_field) */
    f->number = key >> 3;
    f->wire = (int)(key & 7);
    switch (f->wire) {
    case 0:
        if (!read_varint(data, pos, end, &f->value)) goto malformed;
        f->start = f->end = *pos;
        return 1;
    case 1:
    case 5: {
        size_t width = f->wire == 1 ? 8 : 4;
        if (end - *pos < width) goto malformed;
        f->start = *pos;
        *pos += width;
        f->end = *pos;
        return 1;
    }
    case 2:
        if (!read_varint(data, pos, end, &length) || length > end - *pos) goto malformed;
        f->start = *pos;
        *pos += (size_t)length;
        f->end = *pos;
        return 1;
    case 3: /* a group (an unknown field to protobuf): copied whole, as every field the rewrite keeps */
        f->start = *pos;
        if (oc_skip_group(data, pos, end, f->number) != NULL) goto malformed;
        f->end = *pos;
        return 1;
    default:
        goto malformed;
    }
malformed:
    *bad = 1;
    return 0;
}

typedef struct rewrite_ctx {
    const uint8_t *data;
    const char *location;
    uint64_t shift;
    const oc_ref_tensor *tensors;
    size_t count;
    int match_header;
    const oc_alloc *alloc;
    int bad;
    const oc_ref_tensor *mismatched; /* match_header: the first whose type or dims differ */
    unsigned char *matched;          /* match_header: initializers of each listed name (2: or more) */
} rewrite_ctx;

static int span_equals(const uint8_t *data, const field *f, const char *text) {
    size_t n = strlen(text);
    return f->end - f->start == n && memcmp(data + f->start, text, n) == 0;
}

static uint64_t decimal(const uint8_t *data, const field *f) {
    uint64_t value = 0;
    size_t i;
    for (i = f->start; i < f->end; ++i) value = value * 10 + (uint64_t)(data[i] - '0'); /* checked before */
    return value;
}

static void put_entry(builder *b, const char *key, const char *value) {
    builder entry = {0};
    entry.alloc = b->alloc;
    put_field(&entry, 1, key, strlen(key));
    put_field(&entry, 2, value, strlen(value));
    if (entry.failed) b->failed = 1;
    put_field(b, TENSOR_EXTERNAL_DATA_FIELD, entry.data, entry.size);
    oc_free(b->alloc, entry.data);
}

static const oc_ref_tensor *listed(rewrite_ctx *c, const uint8_t *name, size_t n) {
    size_t lo = 0, hi = c->count;
    while (lo < hi) { /* sorted by strcmp */
        size_t mid = lo + (hi - lo) / 2;
        size_t k = strlen(c->tensors[mid].name);
        int order = memcmp(c->tensors[mid].name, name, k < n ? k : n);
        if (order == 0) order = k < n ? -1 : k > n ? 1 : 0;
        if (order == 0) return &c->tensors[mid];
        if (order < 0) lo = mid + 1;
        else hi = mid;
    }
    return NULL;
}

static const oc_ref_tensor UNLISTED = {"(not listed)", 0, 0, 0, 0, NULL};

/* Whether the TensorProto [start, end) has the data type and dims `ref` lists: data_type is field 2,
 * dims field 1 (repeated int64, packed or not). */
static int same_shape(rewrite_ctx *c, const oc_ref_tensor *ref, size_t start, size_t end) {
    const uint8_t *d = c->data;
    size_t pos = start, rank = 0;
    uint64_t type = 0;
    field f;
    int same = 1;
    while (next(d, &pos, end, &f, &c->bad)) {
        if (f.number == 2 && f.wire == 0) type = (uint32_t)f.value; /* an int32: its low 32 bits */
        if (f.number == 1 && f.wire == 0) {
            same = same && rank < ref->rank && ref->dims[rank] == f.value;
            ++rank;
        } else if (f.number == 1 && f.wire == 2) {
            size_t p = f.start;
            uint64_t dim;
            while (p < f.end) {
                if (!read_varint(d, &p, f.end, &dim)) {
                    c->bad = 1;
                    return 0;
                }
                same = same && rank < ref->rank && ref->dims[rank] == dim;
                ++rank;
            }
        }
    }
    return same && rank == ref->rank && type == (uint64_t)ref->elem_type;
}

/* One initializer: its external_data entries rewritten (and offset/length added where absent). */
static void tensor(rewrite_ctx *c, builder *out, size_t start, size_t end) {
    const uint8_t *d = c->data;
    const oc_ref_tensor *ref = NULL;
    size_t pos = start;
    field f;
    int has_offset = 0, has_length = 0, external = 0;
    char text[32];
    while (next(d, &pos, end, &f, &c->bad)) {
        if (f.number == 8 && f.wire == 2) ref = listed(c, d + f.start, f.end - f.start);
        if (f.number == TENSOR_EXTERNAL_DATA_FIELD && f.wire == 2) external = 1;
    }
    /* Every listed initializer (a shared one replaces it, inline data or not) must be the header's */
    if (c->match_header && c->mismatched == NULL && (ref != NULL || external) &&
        (ref == NULL || !same_shape(c, ref, start, end)))
        c->mismatched = ref != NULL ? ref : &UNLISTED; /* (the checker refuses unlisted references before) */
    if (c->matched != NULL && ref != NULL && c->matched[ref - c->tensors] < 2) ++c->matched[ref - c->tensors];
    external = 0;
    pos = start;
    while (next(d, &pos, end, &f, &c->bad)) {
        if (f.number == TENSOR_EXTERNAL_DATA_FIELD && f.wire == 2) {
            size_t p = f.start;
            field e, key = {0}, value = {0};
            int have_key = 0, have_value = 0;
            external = 1;
            while (next(d, &p, f.end, &e, &c->bad)) {
                if (e.number == 1 && e.wire == 2) key = e, have_key = 1;
                if (e.number == 2 && e.wire == 2) value = e, have_value = 1;
            }
            if (have_key && have_value && span_equals(d, &key, "location")) {
                put_entry(out, "location", c->location);
            } else if (have_key && have_value && span_equals(d, &key, "offset")) {
                has_offset = 1;
                snprintf(text, sizeof text, "%llu", (unsigned long long)(decimal(d, &value) + c->shift));
                put_entry(out, "offset", text);
            } else if (have_key && have_value && span_equals(d, &key, "length") && ref != NULL) {
                has_length = 1;
                snprintf(text, sizeof text, "%llu", (unsigned long long)ref->nbytes);
                put_entry(out, "length", text);
            } else {
                put(out, d + f.whole, f.end - f.whole);
            }
        } else {
            put(out, d + f.whole, f.end - f.whole);
        }
    }
    if (external && !has_offset) { /* no offset means 0: it becomes the shift */
        snprintf(text, sizeof text, "%llu", (unsigned long long)c->shift);
        put_entry(out, "offset", text);
    }
    if (external && !has_length && ref != NULL) {
        snprintf(text, sizeof text, "%llu", (unsigned long long)ref->nbytes);
        put_entry(out, "length", text);
    }
}

/* The message [start, end) with the fields numbered `number` rewritten by `inner`. */
static void message(rewrite_ctx *c, builder *out, size_t start, size_t end, uint64_t number,
                    void (*inner)(rewrite_ctx *, builder *, size_t, size_t)) {
    size_t pos = start;
    field f;
    while (next(c->data, &pos, end, &f, &c->bad)) {
        if (f.number == number && f.wire == 2) {
            builder part = {0};
            part.alloc = c->alloc;
            inner(c, &part, f.start, f.end);
            if (part.failed) out->failed = 1;
            put_field(out, number, part.data, part.size);
            oc_free(c->alloc, part.data);
        } else {
            put(out, c->data + f.whole, f.end - f.whole);
        }
    }
}

static void graph(rewrite_ctx *c, builder *out, size_t start, size_t end) { message(c, out, start, end, 5, tensor); }

oc_status oc_rewrite_locations(const uint8_t *model, size_t size, const char *model_name, const char *location,
                               uint64_t shift, const oc_ref_tensor *tensors, size_t count, int match_header,
                               const oc_alloc *alloc, uint8_t **out, size_t *out_size, oc_error *err) {
    rewrite_ctx c;
    builder b = {0};
    c.data = model;
    c.location = location;
    c.shift = shift;
    c.tensors = tensors;
    c.count = count;
    c.match_header = match_header;
    c.alloc = alloc;
    c.bad = 0;
    c.mismatched = NULL;
    c.matched = NULL;
    b.alloc = alloc;
    if (match_header && count != 0) {
        c.matched = oc_calloc(alloc, count, 1);
        if (c.matched == NULL)
            return oc_fail(err, OC_ERR_OUT_OF_MEMORY, "model '%s': out of memory rewriting the graph's references",
                           model_name);
    }
    message(&c, &b, 0, size, 7, graph);
    if (c.matched != NULL) {
        size_t i;
        /* every listed tensor must be exactly one initializer of the main graph: onnxruntime takes
         * its type and shape from the header (a shared initializer) wherever that name is used */
        for (i = 0; i < count && c.mismatched == NULL; ++i)
            if (c.matched[i] != 1) c.mismatched = &tensors[i];
        oc_free(alloc, c.matched);
    }
    if (b.failed || c.bad || c.mismatched != NULL) {
        oc_free(alloc, b.data);
        if (c.mismatched != NULL && !b.failed && !c.bad)
            return oc_fail(err, OC_ERR_CORRUPT,
                           "model '%s': blob graph's initializer '%s' is not one initializer of the main graph with "
                           "the data type and dims its blob header lists (a damaged or crafted blob): re-cook the model",
                           model_name, c.mismatched->name);
        return oc_fail(err, b.failed ? OC_ERR_OUT_OF_MEMORY : OC_ERR_CORRUPT, "model '%s': %s", model_name,
                       b.failed ? "out of memory rewriting the graph's references"
                                : "blob graph is not a valid ONNX model (while rewriting its references)");
    }
    *out = b.data;
    *out_size = b.size;
    return OC_OK;
}
