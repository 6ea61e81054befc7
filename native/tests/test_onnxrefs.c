/* test_onnxrefs.c - tests of oc_check_references (src/onnxrefs.c).
 *
 *   test_onnxrefs           built-in cases (protobuf written by hand here); exit status 0 when all pass
 *   test_onnxrefs --batch   read cases from stdin, print one result line per case (onnxrefs_cases.py
 *                           writes them from real ONNX models and compares with the Python loader)
 *
 * Batch input, little-endian, repeated until EOF:
 *   u32 name length, name; i32 weights-file length (-1: NULL), file; u32 tensor count, then per
 *   tensor: u32 name length, name, u64 offset, u64 nbytes (sorted by name, strcmp order);
 *   u64 model length, model bytes.
 * Output per case: "OK" or "ERR <status number> <message>", then " LEAK" if the seen array was not
 * freed. Each model is copied into an allocation of exactly its size, so that AddressSanitizer sees
 * any read past it.
 *
 * Build alone (native/build.sh builds it too):
 *   gcc -std=c99 -fsanitize=address,undefined -I include -I src tests/test_onnxrefs.c src/onnxrefs.c src/util.c
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"


/* ---- a counting allocator (through the hooks, so the real util.c uses it too) ---------------- */

typedef struct counter {
    long live;  /* allocations not freed */
    long calls; /* allocations asked for */
    int fail;   /* 1: every allocation fails */
} counter;

static void *count_alloc(void *user, size_t size, size_t alignment) {
    counter *c = user;
    (void)alignment;
    c->calls++;
    if (c->fail) return NULL;
    c->live++;
    return malloc(size ? size : 1);
}

static void count_free(void *user, void *ptr) {
    counter *c = user;
    if (ptr != NULL) c->live--;
    free(ptr);
}

static oc_alloc counting(counter *c) {
    oc_allocator hooks;
    memset(c, 0, sizeof *c);
    hooks.alloc = count_alloc;
    hooks.free = count_free;
    hooks.user = c;
    return oc_alloc_from(&hooks);
}

/* ---- protobuf written by hand ------------------------------------------------------------------ */

typedef struct buf {
    uint8_t b[16384];
    size_t n;
} buf;

static void put(buf *o, const void *p, size_t n) {
    if (o->n + n > sizeof o->b) {
        fprintf(stderr, "test buffer overflow\n");
        exit(2);
    }
    memcpy(o->b + o->n, p, n);
    o->n += n;
}

static void varint(buf *o, uint64_t v) {
    uint8_t byte;
    do {
        byte = (uint8_t)(v & 0x7F);
        v >>= 7;
        if (v) byte |= 0x80;
        put(o, &byte, 1);
    } while (v);
}

static void field_bytes(buf *o, uint64_t number, const void *p, size_t n) {
    varint(o, number << 3 | 2);
    varint(o, n);
    put(o, p, n);
}

static void field_buf(buf *o, uint64_t number, const buf *inner) { field_bytes(o, number, inner->b, inner->n); }

static void field_str(buf *o, uint64_t number, const char *s) { field_bytes(o, number, s, strlen(s)); }

static void field_varint(buf *o, uint64_t number, uint64_t v) {
    varint(o, number << 3);
    varint(o, v);
}

/* An external_data entry (StringStringEntryProto) with n-byte key and value. */
static void entry(buf *tensor, const char *key, size_t key_n, const char *value, size_t value_n) {
    buf e;
    e.n = 0;
    field_bytes(&e, 1, key, key_n);
    field_bytes(&e, 2, value, value_n);
    field_buf(tensor, 13, &e);
}

#define ENTRY(t, k, v) entry((t), (k), strlen(k), (v), strlen(v))

/* TensorProto name `name`, data_location EXTERNAL, location `loc`, offset "0", length "16". */
static void ext_tensor(buf *t, const char *name, const char *loc) {
    t->n = 0;
    field_varint(t, 1, 16);  /* dims */
    field_varint(t, 2, 1);   /* data_type FLOAT */
    field_str(t, 8, name);
    ENTRY(t, "location", loc);
    ENTRY(t, "offset", "0");
    ENTRY(t, "length", "16");
    field_varint(t, 14, 1);
}

/* ModelProto { ir_version 9, graph { initializer t } } */
static void model_of_initializer(buf *m, const buf *t) {
    buf g;
    g.n = 0;
    field_str(&g, 2, "g");
    field_buf(&g, 5, t);
    m->n = 0;
    field_varint(m, 1, 9);
    field_buf(m, 7, &g);
}

/* ---- running cases --------------------------------------------------------------------------- */

static int failures = 0;

static oc_status run(const uint8_t *bytes, size_t size, const char *file, const oc_ref_tensor *tensors,
                     size_t count, oc_error *err, counter *c, int fail_alloc) {
    oc_alloc a = counting(c);
    uint8_t *copy = malloc(size ? size : 1); /* exactly sized: ASan catches a read past it */
    oc_status status;
    if (copy == NULL) exit(2);
    if (size) memcpy(copy, bytes, size);
    c->fail = fail_alloc;
    memset(err, 0, sizeof *err);
    status = oc_check_references(copy, size, "vision/detector", file, tensors, count, &a, err);
    free(copy);
    if (c->live != 0) {
        fprintf(stderr, "LEAK: %ld allocation(s) not freed\n", c->live);
        failures++;
    }
    if (status != OC_OK && err->status != status) {
        fprintf(stderr, "err->status %d but returned %d\n", (int)err->status, (int)status);
        failures++;
    }
    return status;
}

static void expect(const char *what, const buf *m, const char *file, const oc_ref_tensor *tensors, size_t count,
                   oc_status want, const char *fragment) {
    oc_error err;
    counter c;
    oc_status got = run(m->b, m->n, file, tensors, count, &err, &c, 0);
    if (got != want || (fragment != NULL && strstr(err.message, fragment) == NULL)) {
        fprintf(stderr, "FAIL %s: status %d (want %d): %s\n", what, (int)got, (int)want,
                got == OC_OK ? "" : err.message);
        failures++;
    }
    if (got == OC_OK && err.message[0] != '\0') {
        fprintf(stderr, "FAIL %s: OK but a message was written: %s\n", what, err.message);
        failures++;
    }
    /* also with a NULL err, and with the allocation refused */
    {
        oc_alloc a = counting(&c);
        if (oc_check_references(m->b, m->n, "x", file, tensors, count, &a, NULL) != got) {
            fprintf(stderr, "FAIL %s: another result with err NULL\n", what);
            failures++;
        }
    }
    got = run(m->b, m->n, file, tensors, count, &err, &c, 1);
    if (got != OC_ERR_OUT_OF_MEMORY && c.calls != 0) {
        fprintf(stderr, "FAIL %s: a refused allocation gave status %d\n", what, (int)got);
        failures++;
    }
}

static void builtin(void) {
    static const oc_ref_tensor one[1] = {{"w", 0, 16, 0, 0, NULL}};
    static const oc_ref_tensor three[3] = {{"a", 0, 16, 0, 0, NULL}, {"m", 64, 16, 0, 0, NULL}, {"w", 0, 16, 0, 0, NULL}};
    buf t, m, g, inner;
    size_t i;
    int level;

    ext_tensor(&t, "w", "weights.bin");
    model_of_initializer(&m, &t);
    expect("valid", &m, "weights.bin", one, 1, OC_OK, NULL);
    expect("valid, three listed", &m, "weights.bin", three, 3, OC_OK, NULL);
    expect("no weights section", &m, NULL, one, 1, OC_ERR_CORRUPT,
           "model 'vision/detector': blob graph tensor 'w' refers to external data, but the blob has no "
           "weights section");
    expect("not listed", &m, "weights.bin", three + 1, 1, OC_ERR_CORRUPT,
           "is not one of the blob's weights, or is named twice");
    expect("listed last of two", &m, "weights.bin", three + 1, 2, OC_OK, NULL);
    {
        static const oc_ref_tensor shifted[1] = {{"w", 64, 16, 0, 0, NULL}};
        static const oc_ref_tensor longer[1] = {{"w", 0, 17, 0, 0, NULL}};
        expect("offset differs", &m, "weights.bin", shifted, 1, OC_ERR_CORRUPT,
               "blob graph tensor 'w': its offset or length differs from the blob header's");
        expect("length differs", &m, "weights.bin", longer, 1, OC_ERR_CORRUPT, "offset or length differs");
    }
    expect("another file", &m, "weights.onnx.data", one, 1, OC_ERR_CORRUPT,
           "refers to 'weights.bin', not the blob's own weights ('weights.onnx.data'): refused before "
           "onnxruntime could open it");

    ext_tensor(&t, "w", "/dev/zero");
    model_of_initializer(&m, &t);
    expect("/dev/zero", &m, "weights.bin", one, 1, OC_ERR_CORRUPT, "refers to '/dev/zero'");

    /* a NUL inside the location, the key or the name never equals the allowed value */
    t.n = 0;
    field_str(&t, 8, "w");
    entry(&t, "location", 8, "weights.bin\0", 12);
    model_of_initializer(&m, &t);
    expect("NUL in location", &m, "weights.bin", one, 1, OC_ERR_CORRUPT, "refers to 'weights.bin\\x00'");
    t.n = 0;
    field_str(&t, 8, "w");
    ENTRY(&t, "location", "weights.bin");
    entry(&t, "offset\0", 7, "0", 1);
    model_of_initializer(&m, &t);
    expect("NUL in key", &m, "weights.bin", one, 1, OC_ERR_CORRUPT,
           "does not allow (['location', 'offset\\x00'])");
    t.n = 0;
    field_bytes(&t, 8, "w\0", 2);
    ENTRY(&t, "location", "weights.bin");
    model_of_initializer(&m, &t);
    expect("NUL in name", &m, "weights.bin", one, 1, OC_ERR_CORRUPT, "tensor 'w\\x00' is not one of");

    /* offsets: str(offset) exactly */
    {
        static const char *const wrong[] = {"00", "+0", "-0", " 0", "0 ", "0x0", "", "18446744073709551616"};
        static const oc_ref_tensor big[1] = {{"w", UINT64_MAX, 16, 0, 0, NULL}};
        for (i = 0; i < sizeof wrong / sizeof wrong[0]; i++) {
            t.n = 0;
            field_str(&t, 8, "w");
            ENTRY(&t, "location", "weights.bin");
            ENTRY(&t, "offset", wrong[i]);
            model_of_initializer(&m, &t);
            expect(wrong[i], &m, "weights.bin", one, 1, OC_ERR_CORRUPT, "offset or length differs");
        }
        t.n = 0;
        field_str(&t, 8, "w");
        ENTRY(&t, "location", "weights.bin");
        ENTRY(&t, "offset", "18446744073709551615");
        ENTRY(&t, "checksum", "whatever");
        model_of_initializer(&m, &t);
        expect("offset 2^64-1", &m, "weights.bin", big, 1, OC_OK, NULL);
        /* absent offset: 0 only; absent length: any */
        t.n = 0;
        field_str(&t, 8, "w");
        ENTRY(&t, "location", "weights.bin");
        model_of_initializer(&m, &t);
        expect("no offset, no length", &m, "weights.bin", one, 1, OC_OK, NULL);
        expect("no offset, listed at 2^64-1", &m, "weights.bin", big, 1, OC_ERR_CORRUPT, "offset or length");
    }

    /* named twice */
    ext_tensor(&t, "w", "weights.bin");
    g.n = 0;
    field_buf(&g, 5, &t);
    field_buf(&g, 5, &t);
    m.n = 0;
    field_buf(&m, 7, &g);
    expect("named twice", &m, "weights.bin", one, 1, OC_ERR_CORRUPT, "or is named twice");

    /* a tensor in a subgraph (If's then_branch: node.attribute.g.initializer), and in a Constant */
    {
        buf attr, node;
        g.n = 0;
        field_buf(&g, 5, &t);
        attr.n = 0;
        field_str(&attr, 1, "then_branch");
        field_buf(&attr, 6, &g);
        node.n = 0;
        field_str(&node, 4, "If");
        field_buf(&node, 5, &attr);
        g.n = 0;
        field_buf(&g, 1, &node);
        m.n = 0;
        field_buf(&m, 7, &g);
        expect("subgraph", &m, "weights.bin", one, 1, OC_ERR_CORRUPT,
               "outside the main graph's initializers; the loader supplies only those");
    }

    /* nesting: 63 levels of graph.node.attribute.g are fine, 64 are refused (depth 0 is the model) */
    for (level = 62; level <= 66; level++) {
        g.n = 0;
        ext_tensor(&t, "w", "weights.bin");
        field_buf(&g, 5, &t);
        for (i = 0; i < (size_t)level / 3; i++) {
            inner = g;
            g.n = 0;
            {
                buf attr, node;
                attr.n = 0;
                field_buf(&attr, 6, &inner);
                node.n = 0;
                field_buf(&node, 5, &attr);
                field_buf(&g, 1, &node);
            }
        }
        m.n = 0;
        field_buf(&m, 7, &g);
        /* walk depths: model 0, then graph 1 + 3k: the deepest graph is at 1 + 3 * (level / 3) */
        if (1 + 3 * (level / 3) > 64)
            expect("too deep", &m, "weights.bin", one, 1, OC_ERR_CORRUPT, "nests subgraphs over 64 deep");
        else
            expect("deep", &m, "weights.bin", one, 1, OC_ERR_CORRUPT, "outside the main graph's");
    }

    /* a key over 64 bits whose low 32 bits read "field 7, length-delimited" is field 7 to protobuf's
     * parser (it adds a key's bytes in 32-bit arithmetic), so the reference inside is checked */
    ext_tensor(&t, "w", "/dev/zero");
    g.n = 0;
    field_buf(&g, 5, &t);
    m.n = 0;
    {
        static const uint8_t key[10] = {0xBA, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x02};
        put(&m, key, 10);
        varint(&m, g.n);
        put(&m, g.b, g.n);
    }
    expect("key over 64 bits", &m, "weights.bin", one, 1, OC_ERR_CORRUPT, "refers to '/dev/zero'");
    /* a data_location over 64 bits whose low 32 bits are 1 is EXTERNAL to protobuf (an enum: int32) */
    t.n = 0;
    field_str(&t, 8, "w");
    {
        static const uint8_t loc[12] = {0x70, 0x81, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x02};
        put(&t, loc, 11);
    }
    field_str(&t, 9, "location"); /* defeat the fast path: a string field that is no entry */
    model_of_initializer(&m, &t);
    expect("data_location over 64 bits", &m, "weights.bin", one, 1, OC_ERR_CORRUPT, "refers to None");
    /* an 11-byte varint */
    m.n = 0;
    field_str(&m, 9, "location");
    {
        static const uint8_t eleven[12] = {0x08, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x00};
        put(&m, eleven, 12);
    }
    expect("11-byte varint", &m, "weights.bin", one, 1, OC_ERR_CORRUPT, "a varint runs past its message");
    /* wire types 4 (a group closed that was never opened), 6, 7; and 3, a group opened and left
     * open (the zeros after it read as fields of number 0 until the bytes end) */
    for (level = 3; level <= 7; level++) {
        uint8_t k = (uint8_t)(1 << 3 | level);
        if (level == 5) continue;
        m.n = 0;
        field_str(&m, 9, "location");
        put(&m, &k, 1);
        put(&m, "\0\0\0\0\0\0\0\0", 8);
        expect("wire type", &m, "weights.bin", one, 1, OC_ERR_CORRUPT,
               level == 3 ? "a varint runs past its message" : "(wire type");
    }
    /* a length past the end, and one that would overflow size_t */
    m.n = 0;
    field_str(&m, 9, "location");
    varint(&m, 7 << 3 | 2);
    varint(&m, UINT64_MAX);
    expect("huge length", &m, "weights.bin", one, 1, OC_ERR_CORRUPT, "a field runs past its message");
    /* not UTF-8 */
    t.n = 0;
    field_bytes(&t, 8, "\xed\xa0\x80", 3); /* a surrogate */
    ENTRY(&t, "location", "weights.bin");
    model_of_initializer(&m, &t);
    expect("surrogate name", &m, "weights.bin", one, 1, OC_ERR_CORRUPT, "(a name is not UTF-8)");
    /* malformed after a refused reference: the malformation is reported (as Python) */
    ext_tensor(&t, "w", "/dev/zero");
    model_of_initializer(&m, &t);
    put(&m, "\x0f", 1);
    expect("malformed wins", &m, "weights.bin", one, 1, OC_ERR_CORRUPT, "(wire type 7)");
    /* no "location" and no data_location EXTERNAL bytes: not parsed (as Python) */
    m.n = 0;
    put(&m, "\xff\xff\xff", 3);
    expect("fast path", &m, "weights.bin", one, 1, OC_OK, NULL);
    expect("fast path, no tensors", &m, NULL, NULL, 0, OC_OK, NULL);

    /* every prefix and every single-bit flip of a valid model: no crash, no leak */
    ext_tensor(&t, "w", "weights.bin");
    model_of_initializer(&m, &t);
    for (i = 0; i <= m.n; i++) {
        oc_error err;
        counter c;
        (void)run(m.b, i, "weights.bin", three, 3, &err, &c, 0);
    }
    for (i = 0; i < m.n * 8; i++) {
        oc_error err;
        counter c;
        m.b[i / 8] ^= (uint8_t)(1u << (i % 8));
        (void)run(m.b, m.n, "weights.bin", three, 3, &err, &c, 0);
        m.b[i / 8] ^= (uint8_t)(1u << (i % 8));
    }
    {
        oc_error err;
        counter c;
        if (run(m.b, m.n, "weights.bin", three, 3, &err, &c, 0) != OC_OK) {
            fprintf(stderr, "FAIL: flips were not undone\n");
            failures++;
        }
    }
}

/* ---- batch mode ------------------------------------------------------------------------------ */

static int read_exact(void *p, size_t n) { return n == 0 || fread(p, 1, n, stdin) == n; }

static int read_u32(uint32_t *v) {
    uint8_t b[4];
    if (!read_exact(b, 4)) return 0;
    *v = (uint32_t)b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16 | (uint32_t)b[3] << 24;
    return 1;
}

static int read_u64(uint64_t *v) {
    uint32_t lo, hi;
    if (!read_u32(&lo) || !read_u32(&hi)) return 0;
    *v = (uint64_t)hi << 32 | lo;
    return 1;
}

static char *read_string(uint32_t n) {
    char *s = malloc((size_t)n + 1);
    if (s == NULL || !read_exact(s, n)) {
        free(s);
        return NULL;
    }
    s[n] = '\0';
    return s;
}

static int batch(void) {
    uint32_t name_n;
    while (read_u32(&name_n)) {
        uint32_t file_n, count, i;
        uint64_t size;
        char *name = read_string(name_n), *file = NULL;
        oc_ref_tensor *tensors;
        uint8_t *model;
        oc_error err;
        counter c;
        oc_alloc a;
        oc_status status;
        if (name == NULL || !read_u32(&file_n)) return 2;
        if (file_n != UINT32_MAX && (file = read_string(file_n)) == NULL) return 2;
        if (!read_u32(&count)) return 2;
        tensors = calloc(count ? count : 1, sizeof *tensors);
        if (tensors == NULL) return 2;
        for (i = 0; i < count; i++) {
            uint32_t n;
            if (!read_u32(&n) || (tensors[i].name = read_string(n)) == NULL) return 2;
            if (!read_u64(&tensors[i].offset) || !read_u64(&tensors[i].nbytes)) return 2;
        }
        if (!read_u64(&size) || size > ((uint64_t)1 << 32)) return 2;
        model = malloc(size ? (size_t)size : 1);
        if (model == NULL || !read_exact(model, (size_t)size)) return 2;
        a = counting(&c);
        memset(&err, 0, sizeof err);
        status = oc_check_references(model, (size_t)size, name, file, tensors, count, &a, &err);
        if (status == OC_OK) printf("OK");
        else printf("ERR %d %s", (int)status, err.message);
        printf("%s\n", c.live != 0 ? " LEAK" : "");
        free(model);
        for (i = 0; i < count; i++) free((void *)tensors[i].name);
        free(tensors);
        free(file);
        free(name);
    }
    fflush(stdout);
    return 0;
}

int main(int argc, char **argv) {
    if (argc > 1 && strcmp(argv[1], "--batch") == 0) return batch();
    builtin();
    if (failures) {
        fprintf(stderr, "test_onnxrefs: %d failure(s)\n", failures);
        return 1;
    }
    printf("test_onnxrefs: all passed\n");
    return 0;
}
