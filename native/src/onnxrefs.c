/* onnxrefs.c - refuse external-data references in an ONNX graph that the loader does not supply.
 *
 * The C port of check_references in onnx_cooker/runtime/onnxrefs.py: the same walk of the protobuf
 * wire format (onnx.proto's field numbers below), the same rules in the same order, the same
 * messages (prefixed "model 'name': "). An ONNX tensor may say that its bytes live in another file
 * (data_location EXTERNAL and/or external_data entries: location, offset, length); onnxruntime
 * opens that file relative to the model's folder, so a blob's graph may name only its own weights
 * section, and only for main-graph initializers the blob header lists.
 *
 * Every byte is hostile: reads stay within model[0..size), varints are at most 10 bytes, lengths
 * are checked without overflow, nesting is bounded (64, as _MAX_DEPTH), strings are compared with
 * their lengths (a NUL inside one never makes it equal an allowed value). As in Python, a malformed
 * message anywhere the walk goes wins over a refused reference: the walk finishes before the first
 * refusal is reported (it is kept in err meanwhile). The walk, as Python's, reads only the messages
 * whose bytes hold "location" (none can hold a reference otherwise). The only allocations are the
 * "named once" flags and the sorted positions of "location".
 */
#include <string.h>

#include "internal.h"

#define REFS_MAX_DEPTH 64 /* nested subgraphs; real models nest a few levels */
#define REFS_REPR_MAX 128 /* bytes of a quoted name in a message */
#define REFS_KEYS_MAX 300 /* bytes of the key list in a message */

/* onnx.proto message kinds, and which fields of each can hold tensors. */
enum { K_MODEL, K_GRAPH, K_NODE, K_ATTRIBUTE, K_FUNCTION, K_TRAINING, K_SPARSE, K_TENSOR, K_NONE };

#define TENSOR_NAME 8
#define TENSOR_EXTERNAL_DATA 13
#define TENSOR_DATA_LOCATION 14
#define DATA_LOCATION_EXTERNAL 1

static int child_kind(int kind, uint64_t number) {
    switch (kind) {
    case K_MODEL: /* graph, training_info, functions */
        return number == 7 ? K_GRAPH : number == 20 ? K_TRAINING : number == 25 ? K_FUNCTION : K_NONE;
    case K_TRAINING: /* initialization, algorithm */
        return number == 1 || number == 2 ? K_GRAPH : K_NONE;
    case K_GRAPH: /* node, initializer, sparse_initializer */
        return number == 1 ? K_NODE : number == 5 ? K_TENSOR : number == 15 ? K_SPARSE : K_NONE;
    case K_NODE: /* attribute */
        return number == 5 ? K_ATTRIBUTE : K_NONE;
    case K_ATTRIBUTE: /* t, g, tensors, graphs, sparse_tensor, sparse_tensors */
        switch (number) {
        case 5: case 10: return K_TENSOR;
        case 6: case 11: return K_GRAPH;
        case 22: case 23: return K_SPARSE;
        default: return K_NONE;
        }
    case K_FUNCTION: /* node, attribute_proto (defaults) */
        return number == 7 ? K_NODE : number == 11 ? K_ATTRIBUTE : K_NONE;
    case K_SPARSE: /* values, indices */
        return number == 1 || number == 2 ? K_TENSOR : K_NONE;
    default:
        return K_NONE;
    }
}

typedef struct span {
    const uint8_t *p;
    size_t n;
} span;

typedef struct refs_ctx {
    const uint8_t *data;
    const char *file; /* the weights section's name; NULL: no weights, no reference allowed */
    const oc_ref_tensor *tensors;
    size_t count;
    unsigned char *seen; /* count flags: tensor already named by a reference */
    size_t *hits;        /* where "location" starts in the model, ascending (check only) */
    size_t hit_count;
    oc_error *err;
    int refused; /* a reference broke a rule: err holds the first such message */
    char model[REFS_REPR_MAX + 8]; /* the model's name, quoted */
} refs_ctx;

typedef struct wire_field {
    uint64_t number; /* the key's low 32 bits, shifted: protobuf's parser drops the bits above */
    unsigned wire;
    uint64_t value;  /* wire type 0: the low 64 bits (an int32 or enum field: the low 32) */
    size_t start;    /* wire type 2: the payload is data[start..end) */
    size_t end;
} wire_field;

/* ---- strings ------------------------------------------------------------------------------- */

/* Length of the well-formed UTF-8 sequence at s[0..n) (as Python's strict decoder: no overlongs,
 * surrogates or code points over U+10FFFF), or 0. n > 0. */
static size_t utf8_sequence(const uint8_t *s, size_t n) {
    uint8_t b = s[0], lo = 0x80, hi = 0xBF;
    size_t len, i;
    if (b < 0x80) return 1;
    if (b >= 0xC2 && b <= 0xDF) {
        len = 2;
    } else if (b >= 0xE0 && b <= 0xEF) {
        len = 3;
        if (b == 0xE0) lo = 0xA0;
        if (b == 0xED) hi = 0x9F;
    } else if (b >= 0xF0 && b <= 0xF4) {
        len = 4;
        if (b == 0xF0) lo = 0x90;
        if (b == 0xF4) hi = 0x8F;
    } else {
        return 0;
    }
    if (n < len || s[1] < lo || s[1] > hi) return 0;
    for (i = 2; i < len; i++)
        if (s[i] < 0x80 || s[i] > 0xBF) return 0;
    return len;
}

static int utf8_valid(const uint8_t *s, size_t n) {
    size_t i = 0;
    while (i < n) {
        size_t len = utf8_sequence(s + i, n - i);
        if (len == 0) return 0;
        i += len;
    }
    return 1;
}

static int span_is(span s, const char *text) {
    size_t n = strlen(text);
    return s.n == n && memcmp(s.p, text, n) == 0;
}

/* The span against a NUL-terminated name, in strcmp order (a span holding a NUL equals no name). */
static int span_compare(span s, const char *name) {
    size_t i;
    for (i = 0; i < s.n; i++) {
        unsigned char c = (unsigned char)name[i];
        if (c == 0) return 1;
        if (s.p[i] != c) return s.p[i] < c ? -1 : 1;
    }
    return name[s.n] == 0 ? 0 : -1;
}

/* Whether the span is str(value) exactly (digits only, no sign, no leading zero, no overflow). */
static int span_is_decimal(span s, uint64_t value) {
    char digits[20];
    size_t n = 0, i;
    do {
        digits[n++] = (char)('0' + (int)(value % 10));
        value /= 10;
    } while (value != 0);
    if (s.n != n) return 0;
    for (i = 0; i < n; i++)
        if (s.p[i] != (uint8_t)digits[n - 1 - i]) return 0;
    return 1;
}

/* Python's repr() of a string, closely: quoted (double quotes when it holds a ' but no "), with
 * backslash escapes for quotes, backslashes and control characters; cut with "..." past `cap`
 * bytes. `out` holds cap + 8 bytes. Bytes that are not UTF-8 (names from the caller) are \xNN. */
static void repr(char *out, size_t cap, const uint8_t *s, size_t n) {
    static const char hex[] = "0123456789abcdef";
    char quote = '\'';
    size_t i = 0, o = 0;
    if (memchr(s, '\'', n) != NULL && memchr(s, '"', n) == NULL) quote = '"';
    out[o++] = quote;
    while (i < n) {
        char piece[8];
        size_t len = 0, used = 1, k;
        uint8_t b = s[i];
        if (b == '\\' || b == (uint8_t)quote) {
            piece[len++] = '\\';
            piece[len++] = (char)b;
        } else if (b == '\t' || b == '\n' || b == '\r') {
            piece[len++] = '\\';
            piece[len++] = b == '\t' ? 't' : b == '\n' ? 'n' : 'r';
        } else if (b >= 0x20 && b < 0x7F) {
            piece[len++] = (char)b;
        } else {
            size_t seq = b >= 0x80 ? utf8_sequence(s + i, n - i) : 0;
            if (seq == 2 && b == 0xC2 && s[i + 1] < 0xA0) { /* C1 controls, as \x80..\x9f */
                b = s[i + 1];
                used = 2;
                seq = 0;
            }
            if (seq != 0) {
                memcpy(piece, s + i, seq);
                len = used = seq;
            } else {
                piece[len++] = '\\';
                piece[len++] = 'x';
                piece[len++] = hex[b >> 4];
                piece[len++] = hex[b & 15];
            }
        }
        if (o + len > cap) {
            out[o++] = quote;
            memcpy(out + o, "...", 4);
            return;
        }
        for (k = 0; k < len; k++) out[o++] = piece[k];
        i += used;
    }
    out[o++] = quote;
    out[o] = '\0';
}

static void repr_span(char *out, span s) { repr(out, REFS_REPR_MAX, s.p, s.n); }

static void repr_text(char *out, const char *text) {
    repr(out, REFS_REPR_MAX, (const uint8_t *)text, strlen(text));
}

/* ---- the wire format ----------------------------------------------------------------------- */

static oc_status malformed(refs_ctx *c, const char *why) {
    return oc_fail(c->err, OC_ERR_CORRUPT, "model %s: blob graph is not a valid ONNX model (%s)", c->model,
                   why);
}

/* A varint of at most 10 bytes at data[*pos..end); *overflow when its value needs over 64 bits. */
static int read_varint(const uint8_t *data, size_t *pos, size_t end, uint64_t *value, int *overflow) {
    uint64_t result = 0;
    unsigned shift = 0;
    size_t p = *pos;
    *overflow = 0;
    for (;;) {
        uint8_t byte;
        if (p >= end || shift > 63) return 0;
        byte = data[p++];
        if (shift == 63) {
            if ((byte & 0x7F) > 1) *overflow = 1;
            result |= (uint64_t)(byte & 1) << 63;
        } else {
            result |= (uint64_t)(byte & 0x7F) << shift;
        }
        if (byte < 0x80) break;
        shift += 7;
    }
    *pos = p;
    *value = result;
    return 1;
}

/* Past the group that field `number` opened (wire type 3) at data[*pos..end), its closing key (wire
 * type 4, the same number) included: NULL, or why the bytes are malformed. No ONNX field is a group;
 * protobuf's parser keeps one as an unknown field and skips it, nested groups with it, and refuses a
 * group left open, closed by another number or nested over its recursion limit; so does this. */
const char *oc_skip_group(const uint8_t *data, size_t *pos, size_t end, uint64_t number) {
    static const char *const bad_wire[8] = {NULL, NULL, NULL, NULL, NULL, NULL, "wire type 6", "wire type 7"};
    uint64_t opened[OC_MAX_GROUPS];
    size_t depth = 0;
    opened[depth++] = number;
    while (depth > 0) {
        uint64_t key, value;
        int overflow;
        unsigned wire;
        if (!read_varint(data, pos, end, &key, &overflow)) return "a varint runs past its message";
        key &= 0xFFFFFFFFu;
        wire = (unsigned)(key & 7);
        switch (wire) {
        case 0:
        case 2:
            if (!read_varint(data, pos, end, &value, &overflow)) return "a varint runs past its message";
            if (wire == 2 && (overflow || value > (uint64_t)(end - *pos))) return "a field runs past its message";
            if (wire == 2) *pos += (size_t)value;
            break;
        case 1:
        case 5:
            if ((wire == 1 ? 8u : 4u) > end - *pos) return "a field runs past its message";
            *pos += wire == 1 ? 8 : 4;
            break;
        case 3:
            if (depth == OC_MAX_GROUPS) return "groups nest over 100 deep";
            opened[depth++] = key >> 3;
            break;
        case 4:
            if (opened[--depth] != key >> 3) return "a group closed by another field";
            break;
        default:
            return bad_wire[wire];
        }
    }
    return NULL;
}

/* The next field of the message data[*pos..end), groups skipped: 1 and *f, 0 at its end, -1 when
 * malformed (err filled). */
static int next_field(refs_ctx *c, size_t *pos, size_t end, wire_field *f) {
    uint64_t key, value;
    int overflow;
next:
    if (*pos >= end) return 0;
    if (!read_varint(c->data, pos, end, &key, &overflow)) {
        malformed(c, "a varint runs past its message");
        return -1;
    }
    /* A key is read as protobuf's ReadTag reads it (up to five bytes added in 32-bit arithmetic; the
     * older ReadVarint32, up to ten): its low 32 bits. A key padded with a high bit set (ea 80 80 80
     * 10 for external_data) is that field to onnxruntime, so it must be here (onnx_cooker/runtime/
     * protowire.py). */
    key &= 0xFFFFFFFFu;
    f->wire = (unsigned)(key & 7);
    f->number = key >> 3;
    f->value = 0;
    switch (f->wire) {
    case 0:
        if (!read_varint(c->data, pos, end, &value, &overflow)) {
            malformed(c, "a varint runs past its message");
            return -1;
        }
        f->value = value; /* the low 64 bits, as protobuf reads a varint */
        f->start = f->end = *pos;
        return 1;
    case 2:
        if (!read_varint(c->data, pos, end, &value, &overflow)) {
            malformed(c, "a varint runs past its message");
            return -1;
        }
        if (overflow || value > (uint64_t)(end - *pos)) {
            malformed(c, "a field runs past its message");
            return -1;
        }
        f->start = *pos;
        f->end = *pos + (size_t)value;
        *pos = f->end;
        return 1;
    case 1:
    case 5: {
        size_t width = f->wire == 1 ? 8 : 4;
        if (width > end - *pos) {
            malformed(c, "a field runs past its message");
            return -1;
        }
        *pos += width;
        f->start = f->end = *pos;
        return 1;
    }
    case 3: {
        const char *why = oc_skip_group(c->data, pos, end, f->number);
        if (why != NULL) {
            malformed(c, why);
            return -1;
        }
        goto next;
    }
    default:
        oc_fail(c->err, OC_ERR_CORRUPT, "model %s: blob graph is not a valid ONNX model (wire type %u)", c->model,
                f->wire);
        return -1;
    }
}

/* The StringStringEntryProto at data[start..end): its key and value (the last of each; "" when
 * absent). 0, or -1 when malformed (err filled). Names are checked as UTF-8, as Python decodes them. */
static int parse_entry(refs_ctx *c, size_t start, size_t end, span *key, span *value) {
    wire_field e;
    size_t pos = start;
    int r;
    key->p = value->p = c->data + start;
    key->n = value->n = 0;
    while ((r = next_field(c, &pos, end, &e)) > 0) {
        span s;
        if ((e.number != 1 && e.number != 2) || e.wire != 2) continue;
        s.p = c->data + e.start;
        s.n = e.end - e.start;
        if (!utf8_valid(s.p, s.n)) {
            malformed(c, "a name is not UTF-8");
            return -1;
        }
        if (e.number == 1) *key = s;
        else *value = s;
    }
    return r;
}

/* The next external_data entry of the tensor data[*pos..end): 1, 0 at the tensor's end, -1 when
 * malformed (err filled). */
static int next_entry(refs_ctx *c, size_t *pos, size_t end, span *key, span *value) {
    wire_field f;
    int r;
    while ((r = next_field(c, pos, end, &f)) > 0)
        if (f.number == TENSOR_EXTERNAL_DATA && f.wire == 2)
            return parse_entry(c, f.start, f.end, key, value) < 0 ? -1 : 1;
    return r;
}

/* ---- the rules ----------------------------------------------------------------------------- */

static const char *const allowed_keys[4] = {"location", "offset", "length", "checksum"};

/* The keys of the tensor's entries as Python's list repr ("['location', 'what']"), into keys. */
static void key_list(refs_ctx *c, size_t start, size_t end, char keys[REFS_KEYS_MAX + 8]) {
    char one[REFS_REPR_MAX + 8];
    span key, value;
    size_t n = 0, pos = start;
    keys[n++] = '[';
    while (next_entry(c, &pos, end, &key, &value) > 0) {
        size_t len;
        repr_span(one, key);
        len = strlen(one);
        if (n + len + 3 > REFS_KEYS_MAX) {
            memcpy(keys + n, ", ...", 5);
            n += 5;
            break;
        }
        if (n > 1) {
            keys[n++] = ',';
            keys[n++] = ' ';
        }
        memcpy(keys + n, one, len);
        n += len;
    }
    keys[n++] = ']';
    keys[n] = '\0';
}

/* check_references' rules for one tensor with external data, data[start..end) (already parsed
 * whole, so well-formed), in Python's order. The first refusal is recorded in err and c->refused;
 * the walk goes on (a malformed field later wins, as in Python). Returns OC_OK unless malformed. */
static oc_status check_reference(refs_ctx *c, size_t start, size_t end, span name, int initializer) {
    char what[REFS_REPR_MAX + 8], one[REFS_REPR_MAX + 8], two[REFS_REPR_MAX + 8];
    span key, value, location, offset, length;
    int has[4] = {0, 0, 0, 0}, bad = 0, r;
    size_t pos = start, lo = 0, hi = c->count;
    const oc_ref_tensor *tensor = NULL;

    location = offset = length = name;
    repr_span(what, name);
    if (c->file == NULL) {
        c->refused = 1;
        oc_fail(c->err, OC_ERR_CORRUPT,
                "model %s: blob graph tensor %s refers to external data, but the blob has no weights section",
                c->model, what);
        return OC_OK;
    }
    if (!initializer) {
        c->refused = 1;
        oc_fail(c->err, OC_ERR_CORRUPT,
                "model %s: blob graph tensor %s refers to external data outside the main graph's "
                "initializers; the loader supplies only those",
                c->model, what);
        return OC_OK;
    }
    while ((r = next_entry(c, &pos, end, &key, &value)) > 0) {
        int k, found = -1;
        for (k = 0; k < 4; k++)
            if (span_is(key, allowed_keys[k])) found = k;
        if (found < 0 || has[found]) bad = 1; /* a key not allowed, or one given twice */
        if (found < 0) continue;
        has[found] = 1;
        if (found == 0) location = value;
        if (found == 1) offset = value;
        if (found == 2) length = value;
    }
    if (r < 0) return OC_ERR_CORRUPT;
    if (bad) {
        char keys[REFS_KEYS_MAX + 8];
        key_list(c, start, end, keys);
        c->refused = 1;
        oc_fail(c->err, OC_ERR_CORRUPT,
                "model %s: blob graph tensor %s has external-data entries the loader does not allow (%s)",
                c->model, what, keys);
        return OC_OK;
    }
    if (!has[0] || !span_is(location, c->file)) {
        if (has[0]) repr_span(one, location);
        else memcpy(one, "None", 5);
        repr_text(two, c->file);
        c->refused = 1;
        oc_fail(c->err, OC_ERR_CORRUPT,
                "model %s: blob graph tensor %s refers to %s, not the blob's own weights (%s): refused "
                "before onnxruntime could open it",
                c->model, what, one, two);
        return OC_OK;
    }
    while (lo < hi) { /* tensors are sorted by name, strcmp order */
        size_t mid = lo + (hi - lo) / 2;
        int order = span_compare(name, c->tensors[mid].name);
        if (order == 0) {
            tensor = &c->tensors[mid];
            break;
        }
        if (order < 0) hi = mid;
        else lo = mid + 1;
    }
    if (tensor == NULL || c->seen[tensor - c->tensors]) {
        c->refused = 1;
        oc_fail(c->err, OC_ERR_CORRUPT,
                "model %s: blob graph tensor %s is not one of the blob's weights, or is named twice", c->model,
                what);
        return OC_OK;
    }
    /* "offset"/"length" must read str(value) exactly; absent: offset 0, length the whole tensor */
    if (!(has[1] ? span_is_decimal(offset, tensor->offset) : tensor->offset == 0) ||
        (has[2] && !span_is_decimal(length, tensor->nbytes))) {
        c->refused = 1;
        oc_fail(c->err, OC_ERR_CORRUPT,
                "model %s: blob graph tensor %s: its offset or length differs from the blob header's", c->model,
                what);
        return OC_OK;
    }
    c->seen[tensor - c->tensors] = 1;
    return OC_OK;
}

/* A TensorProto at data[start..end): parsed whole (malformed fields and non-UTF-8 names refused, as
 * Python's _tensor does); checked when it has external data and nothing was refused yet. */
static oc_status walk_tensor(refs_ctx *c, size_t start, size_t end, int initializer) {
    size_t pos = start, entries = 0;
    uint64_t location = 0;
    span name, key, value;
    wire_field f;
    int r;
    name.p = c->data + start;
    name.n = 0;
    while ((r = next_field(c, &pos, end, &f)) > 0) {
        if (f.number == TENSOR_NAME && f.wire == 2) {
            name.p = c->data + f.start;
            name.n = f.end - f.start;
            if (!utf8_valid(name.p, name.n)) return malformed(c, "a name is not UTF-8");
        } else if (f.number == TENSOR_DATA_LOCATION && f.wire == 0) {
            location = (uint32_t)f.value; /* an enum: its low 32 bits */
        } else if (f.number == TENSOR_EXTERNAL_DATA && f.wire == 2) {
            if (parse_entry(c, f.start, f.end, &key, &value) < 0) return OC_ERR_CORRUPT;
            entries++;
        }
    }
    if (r < 0) return OC_ERR_CORRUPT;
    if (location != DATA_LOCATION_EXTERNAL && entries == 0) return OC_OK;
    if (c->refused) return OC_OK; /* the first refusal is the one reported */
    return check_reference(c, start, end, name, initializer);
}

/* Whether "location" starts in data[start..end): a message without one holds no reference (below). */
static int holds_location(const refs_ctx *c, size_t start, size_t end) {
    size_t lo = 0, hi = c->hit_count;
    while (lo < hi) { /* the first hit at or after start */
        size_t mid = lo + (hi - lo) / 2;
        if (c->hits[mid] < start) lo = mid + 1;
        else hi = mid;
    }
    return lo < c->hit_count && c->hits[lo] < end;
}

static oc_status walk(refs_ctx *c, int kind, size_t start, size_t end, int depth, int main_graph) {
    size_t pos = start;
    wire_field f;
    int r;
    if (depth > REFS_MAX_DEPTH)
        return oc_fail(c->err, OC_ERR_CORRUPT, "model %s: blob graph nests subgraphs over %d deep", c->model,
                       REFS_MAX_DEPTH);
    while ((r = next_field(c, &pos, end, &f)) > 0) {
        int child = child_kind(kind, f.number);
        oc_status status;
        if (child == K_NONE || f.wire != 2) continue;
        if (!holds_location(c, f.start, f.end)) continue; /* as Python's walk: not read at all */
        if (child == K_TENSOR)
            status = walk_tensor(c, f.start, f.end, main_graph && kind == K_GRAPH && f.number == 5);
        else
            status = walk(c, child, f.start, f.end, depth + 1, kind == K_MODEL && f.number == 7);
        if (status != OC_OK) return status;
    }
    return r < 0 ? OC_ERR_CORRUPT : OC_OK;
}

/* Where "location" starts in data[0..size), ascending, into hits (NULL: only counted). */
static size_t locations(const uint8_t *data, size_t size, size_t *hits) {
    size_t i, n = 0;
    const uint8_t *p;
    for (i = 0; i + 8 <= size; i = (size_t)(p - data) + 1) {
        p = memchr(data + i, 'l', size - 7 - i);
        if (p == NULL) break;
        if (memcmp(p, "location", 8) == 0) {
            if (hits != NULL) hits[n] = (size_t)(p - data);
            n++;
        }
    }
    return n;
}

oc_status oc_check_references(const uint8_t *model, size_t size, const char *model_name,
                              const char *weights_file, const oc_ref_tensor *tensors, size_t count,
                              const oc_alloc *alloc, oc_error *err) {
    refs_ctx c;
    oc_status status;

    memset(&c, 0, sizeof c);
    repr_text(c.model, model_name != NULL ? model_name : "");
    if ((model == NULL && size != 0) || (tensors == NULL && count != 0) || alloc == NULL)
        return oc_fail(err, OC_ERR_INVALID_ARGUMENT, "model %s: oc_check_references was given a NULL pointer",
                       c.model);
    /* As Python: a "location" key is stored verbatim, and onnxruntime refuses a tensor marked
     * EXTERNAL without one ("Missing 'location'"), so a model whose bytes hold no "location" has no
     * reference (the common graph-only blob), and the walk reads only the messages that hold one. */
    c.hit_count = locations(model, size, NULL);
    if (c.hit_count == 0) return OC_OK;
    c.hits = oc_calloc(alloc, c.hit_count, sizeof *c.hits);
    if (c.hits == NULL)
        return oc_fail(err, OC_ERR_OUT_OF_MEMORY, "model %s: out of memory checking the graph's external-data references",
                       c.model);
    locations(model, size, c.hits);

    c.data = model;
    c.file = weights_file;
    c.tensors = tensors;
    c.count = count;
    c.err = err;
    if (count != 0) {
        c.seen = oc_calloc(alloc, count, 1);
        if (c.seen == NULL) {
            oc_free(alloc, c.hits);
            return oc_fail(err, OC_ERR_OUT_OF_MEMORY,
                           "model %s: out of memory checking the graph's external-data references", c.model);
        }
    }
    status = walk(&c, K_MODEL, 0, size, 0, 0);
    if (status == OC_OK && c.refused) status = OC_ERR_CORRUPT;
    if (c.seen != NULL) oc_free(alloc, c.seen);
    oc_free(alloc, c.hits);
    return status;
}

/* ---- names a shared initializer would replace ------------------------------------------------ */

static int listed_name(const refs_ctx *c, span name) {
    size_t lo = 0, hi = c->count;
    while (lo < hi) { /* sorted by strcmp */
        size_t mid = lo + (hi - lo) / 2;
        int order = span_compare(name, c->tensors[mid].name);
        if (order == 0) return 1;
        if (order > 0) lo = mid + 1;
        else hi = mid;
    }
    return 0;
}

static oc_status shadowed(refs_ctx *c, span name) {
    char quoted[REFS_REPR_MAX + 8];
    repr_span(quoted, name);
    return oc_fail(c->err, OC_ERR_CORRUPT,
                   "model %s: blob graph tensor %s is defined again outside the main graph's initializers (a "
                   "subgraph, a sparse or Constant tensor) while the blob header lists it as a weight (a damaged "
                   "or crafted blob): re-cook the model", c->model, quoted);
}

/* The name (field 8) of the TensorProto at data[start..end). */
static int tensor_name(refs_ctx *c, size_t start, size_t end, span *name) {
    size_t pos = start;
    wire_field f;
    int r;
    name->p = c->data + start;
    name->n = 0;
    while ((r = next_field(c, &pos, end, &f)) > 0)
        if (f.number == TENSOR_NAME && f.wire == 2) name->p = c->data + f.start, name->n = f.end - f.start;
    return r;
}

#define NODE_OUTPUT 2
#define NODE_OP_TYPE 4

static oc_status shadow_walk(refs_ctx *c, int kind, size_t start, size_t end, int depth, int main_graph) {
    size_t pos = start;
    wire_field f;
    span name;
    int r;
    if (depth > REFS_MAX_DEPTH)
        return oc_fail(c->err, OC_ERR_CORRUPT, "model %s: blob graph nests subgraphs over %d deep", c->model,
                       REFS_MAX_DEPTH);
    if (kind == K_NODE) { /* onnxruntime turns a Constant's output into an initializer */
        int constant = 0;
        while ((r = next_field(c, &pos, end, &f)) > 0)
            if (f.number == NODE_OP_TYPE && f.wire == 2) {
                name.p = c->data + f.start;
                name.n = f.end - f.start;
                constant = span_is(name, "Constant");
            }
        if (r < 0) return OC_ERR_CORRUPT;
        pos = start;
        while (constant && (r = next_field(c, &pos, end, &f)) > 0) {
            name.p = c->data + f.start;
            name.n = f.end - f.start;
            if (f.number == NODE_OUTPUT && f.wire == 2 && listed_name(c, name)) return shadowed(c, name);
        }
        pos = start;
    }
    while ((r = next_field(c, &pos, end, &f)) > 0) {
        int child = child_kind(kind, f.number);
        oc_status status;
        if (child == K_NONE || f.wire != 2) continue;
        if (child == K_TENSOR) {
            /* main-graph initializers are the listed ones (oc_rewrite_locations counts them); an
             * attribute's tensor is a value, not a definition */
            if (kind == K_ATTRIBUTE || (main_graph && kind == K_GRAPH && f.number == 5)) continue;
            if (tensor_name(c, f.start, f.end, &name) < 0) return OC_ERR_CORRUPT;
            if (listed_name(c, name)) return shadowed(c, name);
            continue;
        }
        status = shadow_walk(c, child, f.start, f.end, depth + 1, kind == K_MODEL && f.number == 7);
        if (status != OC_OK) return status;
    }
    return r < 0 ? OC_ERR_CORRUPT : OC_OK;
}

oc_status oc_check_shadowing(const uint8_t *model, size_t size, const char *model_name, const oc_ref_tensor *tensors,
                             size_t count, oc_error *err) {
    refs_ctx c;
    memset(&c, 0, sizeof c);
    repr_text(c.model, model_name != NULL ? model_name : "");
    if (count == 0) return OC_OK;
    c.data = model;
    c.tensors = tensors;
    c.count = count;
    c.err = err;
    return shadow_walk(&c, K_MODEL, 0, size, 0, 0);
}
