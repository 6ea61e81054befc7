/*
 * npy.c - read and write NumPy .npy files (C99); see npy.h.
 *
 * The .npy format: the magic "\x93NUMPY", a major and a minor version byte, the header length
 * (2 bytes little-endian in 1.0, 4 bytes in 2.0 and 3.0), the header - a Python dict literal
 * such as {'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), } padded with spaces and
 * ended by '\n' - and then the raw data.
 */
#include "npy.h"
#include "utf8_paths.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NPY_MAGIC "\x93NUMPY"
#define NPY_MAGIC_LEN 6
#define NPY_READ_CHUNK ((size_t)16 << 20) /* the data buffer grows by what the file really holds */

typedef struct npy_type {
    int elem_type;
    size_t size;
    const char *name;  /* numpy's dtype name */
    const char *descr; /* what numpy writes */
} npy_type;

static const npy_type npy_types[] = {
    {NPY_ONNX_FLOAT, 4, "float32", "<f4"},  {NPY_ONNX_DOUBLE, 8, "float64", "<f8"},
    {NPY_ONNX_FLOAT16, 2, "float16", "<f2"}, {NPY_ONNX_INT8, 1, "int8", "|i1"},
    {NPY_ONNX_INT16, 2, "int16", "<i2"},     {NPY_ONNX_INT32, 4, "int32", "<i4"},
    {NPY_ONNX_INT64, 8, "int64", "<i8"},     {NPY_ONNX_UINT8, 1, "uint8", "|u1"},
    {NPY_ONNX_UINT16, 2, "uint16", "<u2"},   {NPY_ONNX_UINT32, 4, "uint32", "<u4"},
    {NPY_ONNX_UINT64, 8, "uint64", "<u8"},   {NPY_ONNX_BOOL, 1, "bool", "|b1"},
};
#define NPY_TYPE_COUNT (sizeof(npy_types) / sizeof(npy_types[0]))

static const npy_type *type_of(int elem_type) {
    size_t i;
    for (i = 0; i < NPY_TYPE_COUNT; i++)
        if (npy_types[i].elem_type == elem_type) return &npy_types[i];
    return NULL;
}

size_t npy_elem_size(int elem_type) {
    const npy_type *t = type_of(elem_type);
    return t ? t->size : 0;
}

const char *npy_elem_name(int elem_type) {
    const npy_type *t = type_of(elem_type);
    return t ? t->name : elem_type == NPY_ONNX_STRING ? "str" : NULL;
}

static int fail(char *msg, size_t msg_size, const char *path, const char *format, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 4, 5)))
#endif
    ;

static int fail(char *msg, size_t msg_size, const char *path, const char *format, ...) {
    if (msg && msg_size > 0) {
        int n = snprintf(msg, msg_size, "%s: ", path ? path : "(null)");
        if (n >= 0 && (size_t)n < msg_size) {
            va_list args;
            va_start(args, format);
            vsnprintf(msg + n, msg_size - (size_t)n, format, args);
            va_end(args);
        }
    }
    return 1;
}

/* ---- the header dict --------------------------------------------------------------------- */

typedef struct parser {
    const char *p, *end;
    const char *path;
    char *msg;
    size_t msg_size;
} parser;

static void skip_ws(parser *ps) {
    while (ps->p < ps->end && (*ps->p == ' ' || *ps->p == '\t')) ps->p++;
}

static int at(parser *ps, char c) { return ps->p < ps->end && *ps->p == c; }

static int expect(parser *ps, char c, const char *where) {
    skip_ws(ps);
    if (!at(ps, c))
        return fail(ps->msg, ps->msg_size, ps->path, "bad header: expected '%c' %s", c, where);
    ps->p++;
    return 0;
}

/* A quoted string without escapes into out[0..out_size). */
static int parse_string(parser *ps, char *out, size_t out_size, const char *what) {
    char quote;
    size_t n = 0;
    skip_ws(ps);
    if (!at(ps, '\'') && !at(ps, '"'))
        return fail(ps->msg, ps->msg_size, ps->path, "bad header: expected a quoted string for %s", what);
    quote = *ps->p++;
    while (ps->p < ps->end && *ps->p != quote) {
        if (*ps->p == '\\')
            return fail(ps->msg, ps->msg_size, ps->path, "bad header: escapes in %s are not supported", what);
        if (n + 1 >= out_size)
            return fail(ps->msg, ps->msg_size, ps->path, "bad header: %s is too long", what);
        out[n++] = *ps->p++;
    }
    if (!at(ps, quote))
        return fail(ps->msg, ps->msg_size, ps->path, "bad header: unterminated string in %s", what);
    ps->p++;
    out[n] = '\0';
    return 0;
}

/* '<U<n>' (numpy's str_ of n code points), n in 1..NPY_MAX_STRING_CHARS without a leading zero:
 * the item size in bytes, or 0 when d is not such a dtype. */
static size_t string_item_size(const char *d) {
    size_t n = 0;
    const char *p = d + 2;
    if ((d[0] != '<' && d[0] != '|') || d[1] != 'U' || *p < '1' || *p > '9') return 0;
    for (; *p >= '0' && *p <= '9'; p++) {
        n = n * 10 + (size_t)(*p - '0');
        if (n > NPY_MAX_STRING_CHARS) return 0;
    }
    return *p == '\0' ? 4 * n : 0;
}

static int parse_descr(parser *ps, npy_array *a) {
    char d[32];
    size_t i;
    skip_ws(ps);
    if (at(ps, '['))
        return fail(ps->msg, ps->msg_size, ps->path,
                    "structured dtypes (a 'descr' list) are not supported; save a plain array");
    if (parse_string(ps, d, sizeof d, "'descr'")) return 1;
    for (i = 0; i < NPY_TYPE_COUNT; i++) {
        const npy_type *t = &npy_types[i];
        if (strcmp(d, t->descr) == 0) break;
        /* byte-sized types: numpy writes '|', but '<' means the same */
        if (t->size == 1 && d[0] == '<' && strcmp(d + 1, t->descr + 1) == 0) break;
    }
    if (i < NPY_TYPE_COUNT) {
        a->elem_type = npy_types[i].elem_type;
        a->item_size = npy_types[i].size;
        return 0;
    }
    if ((a->item_size = string_item_size(d)) != 0) {
        a->elem_type = NPY_ONNX_STRING;
        return 0;
    }
    if (d[0] == '>' && d[1] != '\0')
        return fail(ps->msg, ps->msg_size, ps->path,
                    "dtype '%s' is big-endian; only little-endian data is supported "
                    "(save arr.astype(arr.dtype.newbyteorder('<')))",
                    d);
    if ((d[0] == '<' || d[0] == '|') && d[1] == 'U')
        return fail(ps->msg, ps->msg_size, ps->path, "string dtype '%s': the width must be 1 to %d code points", d,
                    NPY_MAX_STRING_CHARS);
    return fail(ps->msg, ps->msg_size, ps->path,
                "unsupported dtype '%s' (supported: <f4 <f8 <f2 |i1 <i2 <i4 <i8 |u1 <u2 <u4 <u8 |b1 <U<n>)", d);
}

static int parse_bool_word(parser *ps, int *value) {
    skip_ws(ps);
    if ((size_t)(ps->end - ps->p) >= 4 && memcmp(ps->p, "True", 4) == 0) {
        ps->p += 4;
        *value = 1;
    } else if ((size_t)(ps->end - ps->p) >= 5 && memcmp(ps->p, "False", 5) == 0) {
        ps->p += 5;
        *value = 0;
    } else {
        return fail(ps->msg, ps->msg_size, ps->path, "bad header: 'fortran_order' must be True or False");
    }
    /* the word must end there */
    if (ps->p < ps->end && (*ps->p == '_' || (*ps->p >= '0' && *ps->p <= '9') ||
                            (*ps->p >= 'a' && *ps->p <= 'z') || (*ps->p >= 'A' && *ps->p <= 'Z')))
        return fail(ps->msg, ps->msg_size, ps->path, "bad header: 'fortran_order' must be True or False");
    return 0;
}

/* A non-negative decimal Python int (no sign, no leading zeros, no underscores) <= INT64_MAX. */
static int parse_dim(parser *ps, int64_t *out) {
    int64_t v = 0;
    const char *start;
    skip_ws(ps);
    start = ps->p;
    if (at(ps, '-')) return fail(ps->msg, ps->msg_size, ps->path, "bad header: negative dimension in 'shape'");
    while (ps->p < ps->end && *ps->p >= '0' && *ps->p <= '9') {
        int digit = *ps->p - '0';
        if (v > (INT64_MAX - digit) / 10)
            return fail(ps->msg, ps->msg_size, ps->path, "bad header: a dimension in 'shape' is too large");
        v = v * 10 + digit;
        ps->p++;
    }
    if (ps->p == start)
        return fail(ps->msg, ps->msg_size, ps->path, "bad header: expected an integer in 'shape'");
    if (ps->p - start > 1 && *start == '0')
        return fail(ps->msg, ps->msg_size, ps->path, "bad header: a dimension in 'shape' has a leading zero");
    *out = v;
    return 0;
}

static int parse_shape(parser *ps, int64_t *shape, size_t *ndim) {
    size_t n = 0;
    int comma_after_last = 0;
    if (expect(ps, '(', "to open 'shape' (a tuple)")) return 1;
    for (;;) {
        skip_ws(ps);
        if (at(ps, ')')) break;
        if (n == NPY_MAX_DIMS)
            return fail(ps->msg, ps->msg_size, ps->path, "'shape' has more than %d dimensions", NPY_MAX_DIMS);
        if (parse_dim(ps, &shape[n])) return 1;
        n++;
        comma_after_last = 0;
        skip_ws(ps);
        if (at(ps, ',')) {
            ps->p++;
            comma_after_last = 1;
        } else if (!at(ps, ')')) {
            return fail(ps->msg, ps->msg_size, ps->path, "bad header: expected ',' or ')' in 'shape'");
        }
    }
    ps->p++; /* ')' */
    if (n == 1 && !comma_after_last) /* (5) is an int, not a tuple */
        return fail(ps->msg, ps->msg_size, ps->path, "bad header: 'shape' is not a tuple (a one-element tuple needs a comma)");
    *ndim = n;
    return 0;
}

/* Parse the dict in text[0..len) (without the final '\n'). */
static int parse_header(const char *text, size_t len, const char *path, npy_array *out, char *msg,
                        size_t msg_size) {
    parser ps;
    int have_descr = 0, have_order = 0, have_shape = 0, fortran = 0;
    ps.p = text;
    ps.end = text + len;
    ps.path = path;
    ps.msg = msg;
    ps.msg_size = msg_size;
    if (!at(&ps, '{')) return fail(msg, msg_size, path, "bad header: it does not start with a dict ('{')");
    ps.p++;
    for (;;) {
        char key[32];
        skip_ws(&ps);
        if (at(&ps, '}')) break;
        if (parse_string(&ps, key, sizeof key, "a key")) return 1;
        if (expect(&ps, ':', "after a key")) return 1;
        if (strcmp(key, "descr") == 0) {
            if (have_descr++) return fail(msg, msg_size, path, "bad header: 'descr' appears twice");
            if (parse_descr(&ps, out)) return 1;
        } else if (strcmp(key, "fortran_order") == 0) {
            if (have_order++) return fail(msg, msg_size, path, "bad header: 'fortran_order' appears twice");
            if (parse_bool_word(&ps, &fortran)) return 1;
        } else if (strcmp(key, "shape") == 0) {
            if (have_shape++) return fail(msg, msg_size, path, "bad header: 'shape' appears twice");
            if (parse_shape(&ps, out->shape, &out->ndim)) return 1;
        } else {
            return fail(msg, msg_size, path,
                        "bad header: unexpected key '%s' (only 'descr', 'fortran_order' and 'shape')", key);
        }
        skip_ws(&ps);
        if (at(&ps, ',')) {
            ps.p++;
        } else if (!at(&ps, '}')) {
            return fail(msg, msg_size, path, "bad header: expected ',' or '}' after the value of '%s'", key);
        }
    }
    ps.p++; /* '}' */
    while (ps.p < ps.end && *ps.p == ' ') ps.p++;
    if (ps.p != ps.end) return fail(msg, msg_size, path, "bad header: unexpected text after the dict");
    if (!have_descr || !have_order || !have_shape)
        return fail(msg, msg_size, path, "bad header: the dict lacks '%s'",
                    !have_descr ? "descr" : !have_order ? "fortran_order" : "shape");
    if (fortran)
        return fail(msg, msg_size, path,
                    "Fortran-ordered data (fortran_order True) is not supported; save np.ascontiguousarray(arr)");
    return 0;
}

/* Element count * item size, refusing any overflow (also of the product of the non-zero dims, so
 * that whoever multiplies the shape later cannot overflow either). */
static int data_size(const npy_array *a, const char *path, size_t *nbytes, char *msg, size_t msg_size) {
    size_t item = a->elem_type == NPY_ONNX_STRING ? a->item_size : npy_elem_size(a->elem_type), i;
    uint64_t limit = (uint64_t)INT64_MAX < (uint64_t)SIZE_MAX ? (uint64_t)INT64_MAX : (uint64_t)SIZE_MAX;
    uint64_t product = 1;
    int zero = 0;
    for (i = 0; i < a->ndim; i++) {
        uint64_t d = (uint64_t)a->shape[i];
        if (a->shape[i] < 0) return fail(msg, msg_size, path, "negative dimension %lld", (long long)a->shape[i]);
        if (d == 0) {
            zero = 1;
            continue;
        }
        if (product > limit / d) return fail(msg, msg_size, path, "the shape's element count overflows");
        product *= d;
    }
    if (product > limit / item) return fail(msg, msg_size, path, "the data size (elements * item size) overflows");
    *nbytes = zero ? 0 : (size_t)(product * item);
    return 0;
}

static void describe_shape(const npy_array *a, char *buf, size_t size) {
    size_t i, n;
    n = (size_t)snprintf(buf, size, "(");
    for (i = 0; i < a->ndim && n < size; i++)
        n += (size_t)snprintf(buf + n, size - n, "%s%lld", i ? ", " : "", (long long)a->shape[i]);
    if (n < size) snprintf(buf + n, size - n, a->ndim == 1 ? ",)" : ")");
}

/* ---- strings --------------------------------------------------------------------------- */

static uint32_t load_u32le(const unsigned char *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static int scalar_value(uint32_t c) { return c <= 0x10FFFF && (c < 0xD800 || c > 0xDFFF); }

/* Every element of `width` UCS-4 code units: Unicode scalar values, NUL only as trailing padding. */
static int check_strings(const unsigned char *data, size_t nbytes, size_t width, const char *path, char *msg,
                         size_t msg_size) {
    size_t count = nbytes / (4 * width), e, k;
    for (e = 0; e < count; e++) {
        const unsigned char *p = data + e * 4 * width;
        int ended = 0;
        for (k = 0; k < width; k++) {
            uint32_t c = load_u32le(p + 4 * k);
            if (!scalar_value(c))
                return fail(msg, msg_size, path, "string element %lu holds 0x%lx at code point %lu, not a Unicode "
                            "character", (unsigned long)e, (unsigned long)c, (unsigned long)k);
            if (c == 0) ended = 1;
            else if (ended)
                return fail(msg, msg_size, path, "string element %lu holds a NUL before code point %lu (onnxruntime "
                            "takes strings up to their first NUL)", (unsigned long)e, (unsigned long)k);
        }
    }
    return 0;
}

static size_t utf8_put(uint32_t c, char *out) {
    if (c < 0x80) {
        out[0] = (char)c;
        return 1;
    }
    if (c < 0x800) {
        out[0] = (char)(0xC0 | c >> 6);
        out[1] = (char)(0x80 | (c & 0x3F));
        return 2;
    }
    if (c < 0x10000) {
        out[0] = (char)(0xE0 | c >> 12);
        out[1] = (char)(0x80 | (c >> 6 & 0x3F));
        out[2] = (char)(0x80 | (c & 0x3F));
        return 3;
    }
    out[0] = (char)(0xF0 | c >> 18);
    out[1] = (char)(0x80 | (c >> 12 & 0x3F));
    out[2] = (char)(0x80 | (c >> 6 & 0x3F));
    out[3] = (char)(0x80 | (c & 0x3F));
    return 4;
}

int npy_strings_utf8(const npy_array *a, char **buffer, const char ***strings, size_t *count, char *msg,
                     size_t msg_size) {
    size_t width, n, e, k, used = 0, cap;
    const unsigned char *data;
    char *buf;
    const char **ptrs;
    if (msg && msg_size) msg[0] = '\0';
    if (!buffer || !strings || !count) return fail(msg, msg_size, "(strings)", "no output given");
    *buffer = NULL;
    *strings = NULL;
    *count = 0;
    if (!a || a->elem_type != NPY_ONNX_STRING || a->item_size < 4 || a->item_size % 4 || a->nbytes % a->item_size)
        return fail(msg, msg_size, "(strings)", "not a string array");
    width = a->item_size / 4;
    n = a->nbytes / a->item_size;
    data = (const unsigned char *)a->data;
    if (n && !data) return fail(msg, msg_size, "(strings)", "no data");
    /* at most 4 UTF-8 bytes per code point, plus a NUL per element: a->nbytes + n (no overflow:
     * nbytes is allocated memory, n <= nbytes / 4) */
    cap = a->nbytes + n + 1;
    buf = (char *)malloc(cap);
    ptrs = (const char **)malloc((n ? n : 1) * sizeof *ptrs);
    if (!buf || !ptrs) {
        free(buf);
        free((void *)ptrs);
        return fail(msg, msg_size, "(strings)", "out of memory for %lu strings", (unsigned long)n);
    }
    for (e = 0; e < n; e++) {
        const unsigned char *p = data + e * a->item_size;
        ptrs[e] = buf + used;
        for (k = 0; k < width; k++) {
            uint32_t c = load_u32le(p + 4 * k);
            if (c == 0) break;
            if (!scalar_value(c)) {
                free(buf);
                free((void *)ptrs);
                return fail(msg, msg_size, "(strings)", "string element %lu is not Unicode", (unsigned long)e);
            }
            used += utf8_put(c, buf + used);
        }
        buf[used++] = '\0';
    }
    *buffer = buf;
    *strings = ptrs;
    *count = n;
    return 0;
}

/* The next code point of the UTF-8 text s[*i..len), strictly (no overlong forms, surrogates or
 * values past U+10FFFF); -1 on malformed text. */
static long utf8_next(const unsigned char *s, size_t len, size_t *i) {
    uint32_t c = s[*i], min;
    size_t extra, k;
    if (c < 0x80) {
        (*i)++;
        return (long)c;
    }
    if ((c & 0xE0) == 0xC0) extra = 1, c &= 0x1F, min = 0x80;
    else if ((c & 0xF0) == 0xE0) extra = 2, c &= 0x0F, min = 0x800;
    else if ((c & 0xF8) == 0xF0) extra = 3, c &= 0x07, min = 0x10000;
    else return -1;
    if (len - *i <= extra) return -1;
    for (k = 1; k <= extra; k++) {
        if ((s[*i + k] & 0xC0) != 0x80) return -1;
        c = c << 6 | (s[*i + k] & 0x3F);
    }
    if (c < min || !scalar_value(c)) return -1;
    *i += extra + 1;
    return (long)c;
}

int npy_read(const char *path, npy_array *out, char *msg, size_t msg_size) {
    FILE *f = NULL;
    unsigned char pre[12];
    char *header = NULL;
    unsigned char *data = NULL;
    size_t prefix, header_len, nbytes, got, cap, i;
    int major, minor, rc = 1;
    npy_array a;

    if (msg && msg_size) msg[0] = '\0';
    if (!out) return fail(msg, msg_size, path, "no output array given");
    memset(out, 0, sizeof *out);
    if (!path) return fail(msg, msg_size, path, "no path given");
    memset(&a, 0, sizeof a);

    f = utf8_fopen(path, "rb");
    if (!f) return fail(msg, msg_size, path, "cannot open: %s", strerror(errno));

    if (fread(pre, 1, 8, f) != 8 || memcmp(pre, NPY_MAGIC, NPY_MAGIC_LEN) != 0) {
        if (ferror(f)) fail(msg, msg_size, path, "cannot read: %s", strerror(errno));
        else fail(msg, msg_size, path, "not a .npy file (it does not start with \\x93NUMPY and a version)");
        goto done;
    }
    major = pre[6];
    minor = pre[7];
    if (major < 1 || major > 3 || minor != 0) {
        fail(msg, msg_size, path, "unsupported .npy format version %d.%d (1.0, 2.0 and 3.0 are read)", major, minor);
        goto done;
    }
    prefix = major == 1 ? 10 : 12;
    if (fread(pre + 8, 1, prefix - 8, f) != prefix - 8) {
        fail(msg, msg_size, path, "truncated: the header length is cut off");
        goto done;
    }
    header_len = (size_t)pre[8] | (size_t)pre[9] << 8;
    if (major > 1) header_len |= (size_t)pre[10] << 16 | (size_t)pre[11] << 24;
    if (header_len == 0 || header_len > NPY_MAX_HEADER) {
        fail(msg, msg_size, path, "header length %lu is out of range (1 to %d bytes)", (unsigned long)header_len,
             NPY_MAX_HEADER);
        goto done;
    }
    header = (char *)malloc(header_len);
    if (!header) {
        fail(msg, msg_size, path, "out of memory");
        goto done;
    }
    if (fread(header, 1, header_len, f) != header_len) {
        fail(msg, msg_size, path, "truncated: the header declares %lu bytes but the file ends before",
             (unsigned long)header_len);
        goto done;
    }
    if (header[header_len - 1] != '\n') {
        fail(msg, msg_size, path, "bad header: it does not end with a newline");
        goto done;
    }
    for (i = 0; i + 1 < header_len; i++) {
        unsigned char c = (unsigned char)header[i];
        if ((c < 0x20 && c != '\t') || c > 0x7e) {
            fail(msg, msg_size, path, "bad header: byte 0x%02x at offset %lu is not printable ASCII", c,
                 (unsigned long)(prefix + i));
            goto done;
        }
    }
    if (parse_header(header, header_len - 1, path, &a, msg, msg_size)) goto done;
    if (data_size(&a, path, &nbytes, msg, msg_size)) goto done;

    /* Read the data, growing the buffer only as far as the file really holds bytes, so that a
     * header declaring terabytes over a short file allocates no more than the file's size. */
    cap = nbytes < NPY_READ_CHUNK ? nbytes : NPY_READ_CHUNK;
    data = (unsigned char *)malloc(cap ? cap : 1);
    if (!data) {
        fail(msg, msg_size, path, "out of memory for %lu bytes of data", (unsigned long)cap);
        goto done;
    }
    got = 0;
    while (got < nbytes) {
        size_t want, r;
        if (got == cap) {
            size_t grown = cap > nbytes / 2 ? nbytes : cap * 2;
            unsigned char *bigger = (unsigned char *)realloc(data, grown);
            if (!bigger) {
                fail(msg, msg_size, path, "out of memory for %lu bytes of data", (unsigned long)grown);
                goto done;
            }
            data = bigger;
            cap = grown;
        }
        want = cap - got;
        r = fread(data + got, 1, want, f);
        got += r;
        if (r < want) break;
    }
    if (ferror(f)) {
        fail(msg, msg_size, path, "cannot read: %s", strerror(errno));
        goto done;
    }
    if (got < nbytes) {
        char shape[NPY_MAX_DIMS * 22 + 8];
        describe_shape(&a, shape, sizeof shape);
        fail(msg, msg_size, path, "truncated: shape %s of %s needs %lu bytes of data, the file holds %lu", shape,
             npy_elem_name(a.elem_type), (unsigned long)nbytes, (unsigned long)got);
        goto done;
    }
    if (fgetc(f) != EOF) {
        char shape[NPY_MAX_DIMS * 22 + 8];
        describe_shape(&a, shape, sizeof shape);
        fail(msg, msg_size, path, "the file holds more than the %lu bytes of data that shape %s of %s needs",
             (unsigned long)nbytes, shape, npy_elem_name(a.elem_type));
        goto done;
    }
    if (a.elem_type == NPY_ONNX_BOOL) {
        for (i = 0; i < nbytes; i++) {
            if (data[i] > 1) {
                fail(msg, msg_size, path, "bool element %lu holds the byte 0x%02x (only 0 and 1 are booleans)",
                     (unsigned long)i, data[i]);
                goto done;
            }
        }
    }
    if (a.elem_type == NPY_ONNX_STRING && check_strings(data, nbytes, a.item_size / 4, path, msg, msg_size))
        goto done;
    a.data = data;
    a.nbytes = nbytes;
    data = NULL;
    *out = a;
    rc = 0;
done:
    free(data);
    free(header);
    fclose(f);
    return rc;
}

/* Check the shape against nbytes of data of items of item_size bytes (elem_type's, or a string's). */
static int check_write(const char *path, int elem_type, size_t item_size, const int64_t *shape, size_t ndim,
                       const void *data, size_t nbytes, char *msg, size_t msg_size) {
    size_t i, expected;
    npy_array a;
    if (ndim > NPY_MAX_DIMS) return fail(msg, msg_size, path, "%lu dimensions (at most %d)", (unsigned long)ndim, NPY_MAX_DIMS);
    if (ndim > 0 && !shape) return fail(msg, msg_size, path, "no shape given");
    memset(&a, 0, sizeof a);
    a.elem_type = elem_type;
    a.item_size = item_size;
    a.ndim = ndim;
    for (i = 0; i < ndim; i++) a.shape[i] = shape[i];
    if (data_size(&a, path, &expected, msg, msg_size)) return 1;
    if (nbytes != expected)
        return fail(msg, msg_size, path, "%lu bytes of data given, the shape and type need %lu", (unsigned long)nbytes,
                    (unsigned long)expected);
    if (nbytes > 0 && !data) return fail(msg, msg_size, path, "no data given");
    return 0;
}

static int write_npy(const char *path, const char *descr, const int64_t *shape, size_t ndim, const void *data,
                     size_t nbytes, char *msg, size_t msg_size);

int npy_write(const char *path, int elem_type, const int64_t *shape, size_t ndim, const void *data,
              size_t nbytes, char *msg, size_t msg_size) {
    const npy_type *t = type_of(elem_type);
    if (msg && msg_size) msg[0] = '\0';
    if (!path) return fail(msg, msg_size, path, "no path given");
    if (!t) return fail(msg, msg_size, path, "ONNX element type %d cannot be written to .npy", elem_type);
    if (check_write(path, elem_type, t->size, shape, ndim, data, nbytes, msg, msg_size)) return 1;
    return write_npy(path, t->descr, shape, ndim, data, nbytes, msg, msg_size);
}

int npy_write_strings(const char *path, const int64_t *shape, size_t ndim, const char *const *strings,
                      const size_t *lengths, size_t count, char *msg, size_t msg_size) {
    size_t width = 1, e, i, n, k;
    unsigned char *data;
    char descr[32];
    int rc;
    if (msg && msg_size) msg[0] = '\0';
    if (!path) return fail(msg, msg_size, path, "no path given");
    if (count && (!strings || !lengths)) return fail(msg, msg_size, path, "no strings given");
    for (e = 0; e < count; e++) { /* the width: the most code points of any string */
        if (lengths[e] && !strings[e]) return fail(msg, msg_size, path, "string %lu has no text", (unsigned long)e);
        for (i = 0, n = 0; i < lengths[e]; n++) {
            size_t at_byte = i;
            long c = utf8_next((const unsigned char *)strings[e], lengths[e], &i);
            if (c < 0)
                return fail(msg, msg_size, path, "string element %lu is not valid UTF-8 (at byte %lu)",
                            (unsigned long)e, (unsigned long)at_byte);
            if (c == 0) /* numpy drops trailing NULs, and npy_read refuses inner ones */
                return fail(msg, msg_size, path, "string element %lu holds a NUL (at byte %lu), which .npy "
                            "strings cannot keep", (unsigned long)e, (unsigned long)at_byte);
        }
        if (n > width) width = n;
    }
    if (width > NPY_MAX_STRING_CHARS)
        return fail(msg, msg_size, path, "a string of %lu code points is over the %d .npy strings may hold here",
                    (unsigned long)width, NPY_MAX_STRING_CHARS);
    if (count > ((size_t)-1) / (4 * width)) return fail(msg, msg_size, path, "the strings are too large");
    if (check_write(path, NPY_ONNX_STRING, 4 * width, shape, ndim, count ? "" : NULL, count * 4 * width, msg,
                    msg_size))
        return 1;
    data = (unsigned char *)calloc(count ? count * 4 * width : 1, 1);
    if (!data) return fail(msg, msg_size, path, "out of memory for %lu strings", (unsigned long)count);
    for (e = 0; e < count; e++) {
        unsigned char *p = data + e * 4 * width;
        for (i = 0, k = 0; i < lengths[e]; k++) {
            uint32_t c = (uint32_t)utf8_next((const unsigned char *)strings[e], lengths[e], &i);
            p[4 * k] = (unsigned char)(c & 0xff);
            p[4 * k + 1] = (unsigned char)(c >> 8 & 0xff);
            p[4 * k + 2] = (unsigned char)(c >> 16 & 0xff);
            p[4 * k + 3] = (unsigned char)(c >> 24);
        }
    }
    snprintf(descr, sizeof descr, "<U%lu", (unsigned long)width);
    rc = write_npy(path, descr, shape, ndim, data, count * 4 * width, msg, msg_size);
    free(data);
    return rc;
}

static int write_npy(const char *path, const char *descr, const int64_t *shape, size_t ndim, const void *data,
                     size_t nbytes, char *msg, size_t msg_size) {
    char dict[160 + NPY_MAX_DIMS * 24];
    unsigned char prefix[12];
    size_t dict_len, prefix_len, total, pad, i;
    FILE *f;
    int ok;

    dict_len = (size_t)snprintf(dict, sizeof dict, "{'descr': '%s', 'fortran_order': False, 'shape': (", descr);
    for (i = 0; i < ndim; i++)
        dict_len += (size_t)snprintf(dict + dict_len, sizeof dict - dict_len, "%s%lld", i ? ", " : "",
                                     (long long)shape[i]);
    dict_len += (size_t)snprintf(dict + dict_len, sizeof dict - dict_len, "%s), }", ndim == 1 ? "," : "");

    /* numpy pads with spaces so that magic + length + header is a multiple of 64, then '\n' */
    prefix_len = 10;
    total = prefix_len + dict_len + 1;
    pad = (64 - total % 64) % 64;
    if (dict_len + pad + 1 > 65535) {
        prefix_len = 12;
        total = prefix_len + dict_len + 1;
        pad = (64 - total % 64) % 64;
    }
    memcpy(prefix, NPY_MAGIC, NPY_MAGIC_LEN);
    prefix[6] = prefix_len == 10 ? 1 : 2;
    prefix[7] = 0;
    {
        size_t hl = dict_len + pad + 1;
        prefix[8] = (unsigned char)(hl & 0xff);
        prefix[9] = (unsigned char)(hl >> 8 & 0xff);
        prefix[10] = (unsigned char)(hl >> 16 & 0xff);
        prefix[11] = (unsigned char)(hl >> 24 & 0xff);
    }

    f = utf8_fopen(path, "wb");
    if (!f) return fail(msg, msg_size, path, "cannot create: %s", strerror(errno));
    ok = fwrite(prefix, 1, prefix_len, f) == prefix_len && fwrite(dict, 1, dict_len, f) == dict_len;
    for (i = 0; ok && i < pad; i++) ok = fputc(' ', f) != EOF;
    ok = ok && fputc('\n', f) != EOF;
    ok = ok && (nbytes == 0 || fwrite(data, 1, nbytes, f) == nbytes);
    if (!ok) {
        int e = errno;
        fclose(f);
        remove(path);
        return fail(msg, msg_size, path, "cannot write: %s", strerror(e));
    }
    if (fclose(f) != 0) {
        int e = errno;
        remove(path);
        return fail(msg, msg_size, path, "cannot write: %s", strerror(e));
    }
    return 0;
}

void npy_free(npy_array *a) {
    if (!a) return;
    free(a->data);
    memset(a, 0, sizeof *a);
}
