/*
 * test_npy.c - tests of native/tools/npy.c against files numpy writes, and of hostile files.
 *
 *   test_npy [PYTHON]
 *
 * PYTHON: a Python with numpy (default: $NPY_TEST_PYTHON, else "python3"). The test makes a temporary
 * folder, has numpy write .npy files of every supported dtype (0-d, empty, format 2.0 and 3.0
 * headers, and files that must be refused: Fortran order, big-endian, other dtypes, 17 dims) next
 * to their raw bytes, reads them with npy_read; writes files with npy_write and has numpy load and
 * compare them; and feeds npy_read hand-made malformed headers, every truncation of valid files and
 * byte flips (run it under AddressSanitizer). Returns 0 when all pass, 1 on any failure, 77 (skip)
 * when PYTHON cannot import numpy (after the tests that need no numpy have passed).
 *
 * Build: gcc -std=c99 -Wall -Wextra -Werror -pedantic -fsanitize=address,undefined \
 *            native/tests/test_npy.c native/tools/npy.c -o test_npy
 */
#define _POSIX_C_SOURCE 200809L

#include "../tools/npy.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int failures = 0;
static int checks = 0;
static char dir[256];

#define CHECK(cond, ...)                                                                                \
    do {                                                                                                \
        checks++;                                                                                       \
        if (!(cond)) {                                                                                  \
            failures++;                                                                                 \
            fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__);                                        \
            fprintf(stderr, __VA_ARGS__);                                                               \
            fputc('\n', stderr);                                                                        \
        }                                                                                               \
    } while (0)

static void path_in(char *out, size_t size, const char *name) { snprintf(out, size, "%s/%s", dir, name); }

static int write_file(const char *path, const void *bytes, size_t len) {
    FILE *f = fopen(path, "wb");
    int ok;
    if (!f) return 1;
    ok = len == 0 || fwrite(bytes, 1, len, f) == len;
    return (fclose(f) != 0 || !ok);
}

/* malloc'd contents of a file, or NULL. */
static unsigned char *read_all(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    unsigned char *buf = NULL;
    size_t cap = 0, n = 0;
    if (!f) return NULL;
    for (;;) {
        size_t r;
        if (n == cap) {
            unsigned char *b = (unsigned char *)realloc(buf, cap ? cap * 2 : 4096);
            if (!b) {
                free(buf);
                fclose(f);
                return NULL;
            }
            buf = b;
            cap = cap ? cap * 2 : 4096;
        }
        r = fread(buf + n, 1, cap - n, f);
        n += r;
        if (r == 0) break;
    }
    fclose(f);
    *len = n;
    return buf;
}

/* ---- hand-made files ---------------------------------------------------------------------- */

/* magic, version major.minor, a length field of `header`'s length (2 bytes for major 1, else 4),
 * header, data. */
static void make_npy(const char *path, int major, int minor, const char *header, const void *data, size_t dlen) {
    size_t hlen = strlen(header), prefix = major == 1 ? 10 : 12;
    unsigned char *buf = (unsigned char *)malloc(prefix + hlen + dlen + 1);
    memcpy(buf, "\x93NUMPY", 6);
    buf[6] = (unsigned char)major;
    buf[7] = (unsigned char)minor;
    buf[8] = (unsigned char)(hlen & 0xff);
    buf[9] = (unsigned char)(hlen >> 8 & 0xff);
    if (prefix == 12) {
        buf[10] = (unsigned char)(hlen >> 16 & 0xff);
        buf[11] = (unsigned char)(hlen >> 24 & 0xff);
    }
    memcpy(buf + prefix, header, hlen);
    if (dlen) memcpy(buf + prefix + hlen, data, dlen);
    if (write_file(path, buf, prefix + hlen + dlen)) {
        fprintf(stderr, "cannot write %s\n", path);
        exit(1);
    }
    free(buf);
}

static void expect_refused_file(const char *path, const char *needle, int line) {
    npy_array a;
    char msg[512];
    int rc = npy_read(path, &a, msg, sizeof msg);
    checks++;
    if (rc == 0) {
        failures++;
        fprintf(stderr, "FAIL line %d: %s was accepted (expected a refusal mentioning '%s')\n", line, path, needle);
        npy_free(&a);
        return;
    }
    if (strstr(msg, path) != msg || (needle && !strstr(msg, needle))) {
        failures++;
        fprintf(stderr, "FAIL line %d: message '%s' should start with the path and mention '%s'\n", line, msg,
                needle ? needle : "");
    }
    CHECK(a.data == NULL && a.nbytes == 0 && a.ndim == 0, "refused read left data in the array");
}

static void expect_refused(const char *header, const void *data, size_t dlen, const char *needle, int line) {
    char path[512];
    path_in(path, sizeof path, "bad.npy");
    make_npy(path, 1, 0, header, data, dlen);
    expect_refused_file(path, needle, line);
}

#define REFUSE(header, data, dlen, needle) expect_refused(header, data, dlen, needle, __LINE__)

static void test_hand_made(void) {
    char path[512], big[70000];
    unsigned char data[64];
    npy_array a;
    char msg[512];
    int rc;
    memset(data, 0, sizeof data);

    /* accepted variants a strict parser must still take */
    path_in(path, sizeof path, "ok.npy");
    make_npy(path, 1, 0, "{\"shape\": (2,3), \"fortran_order\": False, \"descr\": \"<f4\"}\n", data, 24);
    rc = npy_read(path, &a, msg, sizeof msg);
    CHECK(rc == 0 && a.elem_type == NPY_ONNX_FLOAT && a.ndim == 2 && a.shape[0] == 2 && a.shape[1] == 3 &&
              a.nbytes == 24,
          "reordered keys, double quotes, no trailing comma: %s", msg);
    npy_free(&a);
    make_npy(path, 1, 0, "{'descr':'<i1','fortran_order':False,'shape':( 4 , ),}      \n", data, 4);
    rc = npy_read(path, &a, msg, sizeof msg);
    CHECK(rc == 0 && a.elem_type == NPY_ONNX_INT8 && a.ndim == 1 && a.shape[0] == 4, "'<i1', spacing: %s", msg);
    npy_free(&a);
    make_npy(path, 1, 0, "{'descr': '|u1', 'fortran_order': False, 'shape': (), }\n", data, 1);
    rc = npy_read(path, &a, msg, sizeof msg);
    CHECK(rc == 0 && a.elem_type == NPY_ONNX_UINT8 && a.ndim == 0 && a.nbytes == 1 && a.data, "0-d: %s", msg);
    npy_free(&a);
    make_npy(path, 1, 0, "{'descr': '<f8', 'fortran_order': False, 'shape': (0, 1099511627776, 3), }\n", NULL, 0);
    rc = npy_read(path, &a, msg, sizeof msg);
    CHECK(rc == 0 && a.nbytes == 0 && a.data != NULL && a.shape[1] == 1099511627776LL, "empty with a huge dim: %s", msg);
    npy_free(&a);
    make_npy(path, 2, 0, "{'descr': '<u2', 'fortran_order': False, 'shape': (3,), }\n", data, 6);
    rc = npy_read(path, &a, msg, sizeof msg);
    CHECK(rc == 0 && a.elem_type == NPY_ONNX_UINT16 && a.nbytes == 6, "hand-made v2: %s", msg);
    npy_free(&a);
    data[0] = 1;
    make_npy(path, 1, 0, "{'descr': '|b1', 'fortran_order': False, 'shape': (2,), }\n", data, 2);
    rc = npy_read(path, &a, msg, sizeof msg);
    CHECK(rc == 0 && a.elem_type == NPY_ONNX_BOOL && ((unsigned char *)a.data)[0] == 1, "bool: %s", msg);
    npy_free(&a);
    data[0] = 0;

    /* the file itself */
    path_in(path, sizeof path, "missing.npy");
    expect_refused_file(path, "cannot open", __LINE__);
    expect_refused_file(dir, "cannot", __LINE__); /* a folder */
    path_in(path, sizeof path, "bad.npy");
    write_file(path, "", 0);
    expect_refused_file(path, "not a .npy", __LINE__);
    write_file(path, "\x93NUMP", 5);
    expect_refused_file(path, "not a .npy", __LINE__);
    write_file(path, "\x93NUMPZ\x01\x00\x10\x00", 10);
    expect_refused_file(path, "not a .npy", __LINE__);
    write_file(path, "PK\x03\x04 this is a zip (an .npz)", 28);
    expect_refused_file(path, "not a .npy", __LINE__);
    write_file(path, "\x93NUMPY\x01\x00\x10", 9);
    expect_refused_file(path, "header length", __LINE__);
    write_file(path, "\x93NUMPY\x02\x00\x10\x00\x00", 11);
    expect_refused_file(path, "header length", __LINE__);
    write_file(path, "\x93NUMPY\x01\x00\x00\x00", 10);
    expect_refused_file(path, "header length", __LINE__);
    write_file(path, "\x93NUMPY\x01\x00\x40\x00{'descr'", 18);
    expect_refused_file(path, "truncated", __LINE__);
    write_file(path, "\x93NUMPY\x02\x00\xff\xff\xff\xff", 12);
    expect_refused_file(path, "header length", __LINE__);
    make_npy(path, 4, 0, "{'descr': '<f4', 'fortran_order': False, 'shape': (), }\n", data, 4);
    expect_refused_file(path, "version 4.0", __LINE__);
    make_npy(path, 1, 1, "{'descr': '<f4', 'fortran_order': False, 'shape': (), }\n", data, 4);
    expect_refused_file(path, "version 1.1", __LINE__);
    make_npy(path, 0, 0, "{'descr': '<f4', 'fortran_order': False, 'shape': (), }\n", data, 4);
    expect_refused_file(path, "version 0.0", __LINE__);
    /* a header over 64 KiB (format 2.0) */
    memset(big, ' ', sizeof big);
    memcpy(big, "{'descr': '<f4', 'fortran_order': False, 'shape': (), }", 55);
    big[sizeof big - 2] = '\n';
    big[sizeof big - 1] = '\0';
    make_npy(path, 2, 0, big, data, 4);
    expect_refused_file(path, "header length", __LINE__);
    big[65534] = '\n';
    big[65535] = '\0';
    make_npy(path, 2, 0, big, data, 4); /* 65535 bytes: fine */
    rc = npy_read(path, &a, msg, sizeof msg);
    CHECK(rc == 0 && a.nbytes == 4, "a 65535-byte v2 header: %s", msg);
    npy_free(&a);

    /* the header text */
    REFUSE("{'descr': '<f4', 'fortran_order': False, 'shape': (), }", data, 4, "newline");
    REFUSE("{'descr': '<f4', 'fortran_order': False, 'shape': (), }\n\n", data, 4, "bad header");
    REFUSE("{'descr': '<f4', 'fortran_order': False, 'shape': (), }\xc3\xa9 \n", data, 4, "printable");
    REFUSE("{'descr': '<f4', 'fortran_order': False, 'shape': ()\x01, }\n", data, 4, "printable");
    REFUSE("{'descr': '<f4', 'fortran_order': False, 'shape': (), }\r\n", data, 4, "printable");
    /* numpy refuses these too ("array is too big") */
    REFUSE("{'descr': '<f8', 'fortran_order': False, 'shape': (0, 9223372036854775807), }\n", NULL, 0, "overflow");
    REFUSE(" {'descr': '<f4', 'fortran_order': False, 'shape': (), }\n", data, 4, "dict");
    REFUSE("('descr', '<f4')\n", data, 4, "dict");
    REFUSE("{'descr': '<f4', 'fortran_order': False, 'shape': (), }x\n", data, 4, "after the dict");
    REFUSE("{'descr': '<f4', 'fortran_order': False, 'shape': (), }}\n", data, 4, "after the dict");
    REFUSE("{'descr': '<f4', 'fortran_order': False, 'shape': (), \n", data, 4, "bad header");
    REFUSE("{'descr': '<f4', 'fortran_order': False, 'shape': ()\n", data, 4, "bad header");
    REFUSE("{'descr': '<f4', 'fortran_order': False}\n", data, 4, "lacks 'shape'");
    REFUSE("{'descr': '<f4', 'shape': ()}\n", data, 4, "lacks 'fortran_order'");
    REFUSE("{'fortran_order': False, 'shape': ()}\n", data, 4, "lacks 'descr'");
    REFUSE("{}\n", data, 4, "lacks");
    REFUSE("{'descr': '<f4', 'fortran_order': False, 'shape': (), 'extra': 1}\n", data, 4, "unexpected key 'extra'");
    REFUSE("{'descr': '<f4', 'descr': '<f4', 'fortran_order': False, 'shape': ()}\n", data, 4, "twice");
    REFUSE("{'descr': '<f4', 'fortran_order': False, 'shape': (), 'shape': ()}\n", data, 4, "twice");
    REFUSE("{'descr': '<f4', 'fortran_order': False, 'fortran_order': False, 'shape': ()}\n", data, 4, "twice");
    REFUSE("{'descr': '<f4' 'fortran_order': False, 'shape': ()}\n", data, 4, "expected ',' or '}'");
    REFUSE("{'descr' '<f4', 'fortran_order': False, 'shape': ()}\n", data, 4, "expected ':'");
    REFUSE("{'descr': '<f4, 'fortran_order': False, 'shape': ()}\n", data, 4, "unsupported dtype");
    REFUSE("{'descr': '<f4\", 'fortran_order': False, 'shape': ()}\n", data, 4, "unsupported dtype");
    REFUSE("{'descr': '<f4\n", data, 4, "unterminated");
    REFUSE("{'descr\n", data, 4, "unterminated");
    REFUSE("{'descr': '<f4', 'fortran_order': Fal\n", data, 4, "True or False");
    REFUSE("{\n", data, 4, "bad header");
    REFUSE("\n", data, 4, "dict");
    REFUSE("{'des\\x63r': '<f4', 'fortran_order': False, 'shape': ()}\n", data, 4, "escapes");
    REFUSE("{descr: '<f4', 'fortran_order': False, 'shape': ()}\n", data, 4, "quoted string");
    REFUSE("{'descr': <f4, 'fortran_order': False, 'shape': ()}\n", data, 4, "quoted string");
    REFUSE("{'descr': 'float32', 'fortran_order': False, 'shape': ()}\n", data, 4, "unsupported dtype 'float32'");
    REFUSE("{'descr': '<f4x', 'fortran_order': False, 'shape': ()}\n", data, 4, "unsupported dtype");
    REFUSE("{'descr': '', 'fortran_order': False, 'shape': ()}\n", data, 4, "unsupported dtype");
    REFUSE("{'descr': '>f4', 'fortran_order': False, 'shape': ()}\n", data, 4, "big-endian");
    REFUSE("{'descr': '=f4', 'fortran_order': False, 'shape': ()}\n", data, 4, "unsupported dtype");
    REFUSE("{'descr': '|f4', 'fortran_order': False, 'shape': ()}\n", data, 4, "unsupported dtype");
    REFUSE("{'descr': '<c8', 'fortran_order': False, 'shape': ()}\n", data, 8, "unsupported dtype");
    REFUSE("{'descr': '|O', 'fortran_order': False, 'shape': ()}\n", data, 8, "unsupported dtype");
    REFUSE("{'descr': [('a', '<f4')], 'fortran_order': False, 'shape': ()}\n", data, 4, "structured");
    REFUSE("{'descr': '<f4', 'fortran_order': True, 'shape': ()}\n", data, 4, "Fortran");
    REFUSE("{'descr': '<f4', 'fortran_order': 0, 'shape': ()}\n", data, 4, "True or False");
    REFUSE("{'descr': '<f4', 'fortran_order': Falsey, 'shape': ()}\n", data, 4, "True or False");
    REFUSE("{'descr': '<f4', 'fortran_order': false, 'shape': ()}\n", data, 4, "True or False");
    REFUSE("{'descr': '<f4', 'fortran_order': False, 'shape': [2]}\n", data, 8, "tuple");
    REFUSE("{'descr': '<f4', 'fortran_order': False, 'shape': 2}\n", data, 8, "tuple");
    REFUSE("{'descr': '<f4', 'fortran_order': False, 'shape': (2)}\n", data, 8, "not a tuple");
    REFUSE("{'descr': '<f4', 'fortran_order': False, 'shape': (2,,)}\n", data, 8, "integer");
    REFUSE("{'descr': '<f4', 'fortran_order': False, 'shape': (,)}\n", data, 0, "integer");
    REFUSE("{'descr': '<f4', 'fortran_order': False, 'shape': (2 3)}\n", data, 24, "expected ',' or ')'");
    REFUSE("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3\n", data, 24, "bad header");
    REFUSE("{'descr': '<f4', 'fortran_order': False, 'shape': (-2,)}\n", data, 8, "negative");
    REFUSE("{'descr': '<f4', 'fortran_order': False, 'shape': (+2,)}\n", data, 8, "integer");
    REFUSE("{'descr': '<f4', 'fortran_order': False, 'shape': (02,)}\n", data, 8, "leading zero");
    REFUSE("{'descr': '<f4', 'fortran_order': False, 'shape': (2.0,)}\n", data, 8, "expected ',' or ')'");
    REFUSE("{'descr': '<f4', 'fortran_order': False, 'shape': (1_0,)}\n", data, 40, "expected ',' or ')'");
    REFUSE("{'descr': '<f4', 'fortran_order': False, 'shape': (2L,)}\n", data, 8, "expected ',' or ')'");
    REFUSE("{'descr': '<f4', 'fortran_order': False, 'shape': (9223372036854775808,)}\n", data, 8, "too large");
    REFUSE("{'descr': '<f4', 'fortran_order': False, 'shape': (99999999999999999999999,)}\n", data, 8, "too large");
    REFUSE("{'descr': '<f4', 'fortran_order': False, 'shape': (4294967296, 4294967296)}\n", data, 8, "overflow");
    REFUSE("{'descr': '<f4', 'fortran_order': False, 'shape': (4294967296, 0, 4294967296)}\n", data, 0, "overflow");
    REFUSE("{'descr': '<f4', 'fortran_order': False, 'shape': (4611686018427387904,)}\n", data, 8, "overflow");
    REFUSE("{'descr': '<f8', 'fortran_order': False, 'shape': (2305843009213693952,)}\n", data, 8, "overflow");
    REFUSE("{'descr': '<f4', 'fortran_order': False, 'shape': (1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1)}\n", data, 4,
           "more than 16");

    /* the data */
    REFUSE("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }\n", data, 23, "truncated");
    REFUSE("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }\n", data, 25, "more than the 24 bytes");
    REFUSE("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }\n", data, 0, "truncated");
    REFUSE("{'descr': '<f4', 'fortran_order': False, 'shape': (), }\n", data, 0, "truncated");
    REFUSE("{'descr': '<f4', 'fortran_order': False, 'shape': (0,), }\n", data, 1, "more than the 0 bytes");
    REFUSE("{'descr': '|u1', 'fortran_order': False, 'shape': (1099511627776,), }\n", data, 64, "truncated");
    REFUSE("{'descr': '<i8', 'fortran_order': False, 'shape': (1152921504606846975,), }\n", data, 64, "truncated");
    data[3] = 2;
    REFUSE("{'descr': '|b1', 'fortran_order': False, 'shape': (4,), }\n", data, 4, "bool element 3");
    data[3] = 0xff;
    REFUSE("{'descr': '<b1', 'fortran_order': False, 'shape': (2, 2), }\n", data, 4, "bool element 3");
    data[3] = 0;

    /* strings: the width, then each code point (UCS-4, little-endian) */
    REFUSE("{'descr': '<U0', 'fortran_order': False, 'shape': (), }\n", data, 0, "width must be 1 to");
    REFUSE("{'descr': '<U01', 'fortran_order': False, 'shape': (), }\n", data, 4, "width must be 1 to");
    REFUSE("{'descr': '<U1048577', 'fortran_order': False, 'shape': (0,), }\n", data, 0, "width must be 1 to");
    REFUSE("{'descr': '<U2x', 'fortran_order': False, 'shape': (), }\n", data, 8, "width must be 1 to");
    REFUSE("{'descr': '<U2', 'fortran_order': False, 'shape': (1099511627776,), }\n", data, 64, "truncated");
    {
        static const unsigned char surrogate[8] = {'a', 0, 0, 0, 0x00, 0xD8, 0, 0};
        static const unsigned char past[8] = {0x00, 0x00, 0x11, 0x00, 0, 0, 0, 0};
        static const unsigned char inner_nul[12] = {'a', 0, 0, 0, 0, 0, 0, 0, 'b', 0, 0, 0};
        static const unsigned char padded[16] = {'a', 0, 0, 0, 0, 0, 0, 0, 'b', 0, 0, 0, 'c', 0, 0, 0};
        REFUSE("{'descr': '<U2', 'fortran_order': False, 'shape': (), }\n", surrogate, 8, "0xd800 at code point 1");
        REFUSE("{'descr': '<U2', 'fortran_order': False, 'shape': (), }\n", past, 8, "0x110000 at code point 0");
        REFUSE("{'descr': '<U3', 'fortran_order': False, 'shape': (), }\n", inner_nul, 12, "NUL before code point 2");
        /* 'a' padded with a NUL, then 'bc': two elements of width 2 */
        path_in(path, sizeof path, "strings.npy");
        make_npy(path, 1, 0, "{'descr': '<U2', 'fortran_order': False, 'shape': (2,), }\n", padded, 16);
        CHECK(npy_read(path, &a, msg, sizeof msg) == 0 && a.elem_type == NPY_ONNX_STRING && a.item_size == 8,
              "strings: %s", msg);
        if (a.data) {
            char *buffer = NULL;
            const char **strings = NULL;
            size_t count = 0;
            CHECK(npy_strings_utf8(&a, &buffer, &strings, &count, msg, sizeof msg) == 0 && count == 2 &&
                      strcmp(strings[0], "a") == 0 && strcmp(strings[1], "bc") == 0,
                  "strings as UTF-8: %s", msg);
            free(buffer);
            free((void *)strings);
        }
        npy_free(&a);
    }

    /* bad arguments */
    CHECK(npy_read(NULL, &a, msg, sizeof msg) != 0, "NULL path accepted");
    CHECK(npy_read(path, NULL, msg, sizeof msg) != 0, "NULL output accepted");
    path_in(path, sizeof path, "bad.npy");
    rc = npy_read(path, &a, NULL, 0);
    CHECK(rc != 0, "NULL msg: refused anyway");
    rc = npy_read(path, &a, msg, 8); /* a short message buffer truncates, NUL-terminated */
    CHECK(rc != 0 && strlen(msg) == 7, "short msg buffer: '%s'", msg);
}

static void test_write_errors(void) {
    char path[512], msg[512];
    int64_t shape[17];
    float f[6] = {0};
    size_t i;
    for (i = 0; i < 17; i++) shape[i] = 1;
    path_in(path, sizeof path, "werr.npy");
    CHECK(npy_write(path, 8, shape, 1, f, 4, msg, sizeof msg) != 0 && strstr(msg, "element type 8"), "string type: %s", msg);
    CHECK(npy_write(path, 16, shape, 1, f, 2, msg, sizeof msg) != 0, "bfloat16 accepted");
    CHECK(npy_write(path, NPY_ONNX_FLOAT, shape, 17, f, 4, msg, sizeof msg) != 0 && strstr(msg, "17 dimensions"), "17 dims: %s", msg);
    CHECK(npy_write(path, NPY_ONNX_FLOAT, shape, 1, f, 8, msg, sizeof msg) != 0 && strstr(msg, "need 4"), "size: %s", msg);
    CHECK(npy_write(path, NPY_ONNX_FLOAT, shape, 1, NULL, 4, msg, sizeof msg) != 0, "NULL data accepted");
    CHECK(npy_write(path, NPY_ONNX_FLOAT, NULL, 1, f, 4, msg, sizeof msg) != 0, "NULL shape accepted");
    shape[0] = -1;
    CHECK(npy_write(path, NPY_ONNX_FLOAT, shape, 1, f, 4, msg, sizeof msg) != 0 && strstr(msg, "negative"), "negative: %s", msg);
    shape[0] = INT64_MAX;
    shape[1] = INT64_MAX;
    CHECK(npy_write(path, NPY_ONNX_FLOAT, shape, 2, f, 4, msg, sizeof msg) != 0 && strstr(msg, "overflow"), "overflow: %s", msg);
    shape[0] = 1;
    {
        static const char *const bad[] = {"\xC0\x80", "\xED\xA0\x80", "ok\xE2\x82", "\xF4\x90\x80\x80", "\x80",
                                          "\xF8\x88\x80\x80\x80"};
        const char *one[1];
        size_t length[1];
        for (i = 0; i < sizeof bad / sizeof bad[0]; i++) {
            one[0] = bad[i];
            length[0] = strlen(bad[i]);
            CHECK(npy_write_strings(path, shape, 1, one, length, 1, msg, sizeof msg) != 0 &&
                      strstr(msg, "element 0 is not valid UTF-8"),
                  "bad UTF-8 %lu: %s", (unsigned long)i, msg);
        }
        one[0] = "a\0b";
        length[0] = 3;
        CHECK(npy_write_strings(path, shape, 1, one, length, 1, msg, sizeof msg) != 0 &&
                  strstr(msg, "element 0 holds a NUL (at byte 1)"),
              "NUL inside: %s", msg);
        one[0] = "ab";
        length[0] = 2;
        shape[0] = 2;
        CHECK(npy_write_strings(path, shape, 1, one, length, 1, msg, sizeof msg) != 0 && strstr(msg, "need"),
              "count != shape: %s", msg);
        shape[0] = 1;
    }
    path_in(path, sizeof path, "no/such/dir/x.npy");
    CHECK(npy_write(path, NPY_ONNX_FLOAT, shape, 1, f, 4, msg, sizeof msg) != 0 && strstr(msg, "cannot create") &&
              strstr(msg, path) == msg,
          "missing dir: %s", msg);
}

/* ---- files numpy writes ------------------------------------------------------------------- */

static const char *gen_py =
    "import os, sys\n"
    "import numpy as np\n"
    "d = sys.argv[1]\n"
    "types = [('float32', 1), ('uint8', 2), ('int8', 3), ('uint16', 4), ('int16', 5), ('int32', 6),\n"
    "         ('int64', 7), ('bool', 9), ('float16', 10), ('float64', 11), ('uint32', 12), ('uint64', 13)]\n"
    "man = open(os.path.join(d, 'manifest.txt'), 'w')\n"
    "ref = open(os.path.join(d, 'refused.txt'), 'w')\n"
    "def put(name, a, et, version=None):\n"
    "    p = os.path.join(d, name + '.npy')\n"
    "    if version is None:\n"
    "        np.save(p, a)\n"
    "    else:\n"
    "        with open(p, 'wb') as f:\n"
    "            np.lib.format.write_array(f, a, version=version)\n"
    "    with open(os.path.join(d, name + '.bin'), 'wb') as f:\n"
    "        f.write(np.ascontiguousarray(a).tobytes())\n"
    "    man.write('%s %d %d %s\\n' % (name, et, a.ndim, ' '.join(str(x) for x in a.shape)))\n"
    "def refuse(name, a, needle):\n"
    "    np.save(os.path.join(d, name + '.npy'), a, allow_pickle=True)\n"
    "    ref.write('%s %s\\n' % (name, needle))\n"
    "rng = np.random.default_rng(7)\n"
    "for dt, et in types:\n"
    "    shape = (2, 3, 4)\n"
    "    if dt == 'bool':\n"
    "        a = rng.integers(0, 2, size=shape).astype(bool)\n"
    "    elif np.dtype(dt).kind == 'f':\n"
    "        a = (rng.standard_normal(shape) * 100).astype(dt)\n"
    "        a.flat[0] = np.inf; a.flat[1] = np.nan; a.flat[2] = -0.0\n"
    "    else:\n"
    "        i = np.iinfo(dt)\n"
    "        a = rng.integers(i.min, i.max, size=shape, dtype=dt, endpoint=True)\n"
    "        a.flat[0] = i.min; a.flat[1] = i.max\n"
    "    put(dt, a, et)\n"
    "    put(dt + '_0d', a.reshape(-1)[5].reshape(()).copy(), et)\n"
    "    put(dt + '_scalar', a.reshape(-1)[7], et)\n"
    "    put(dt + '_empty', np.zeros((3, 0, 2), dt), et)\n"
    "    put(dt + '_v2', a, et, (2, 0))\n"
    "    put(dt + '_v3', a, et, (3, 0))\n"
    "put('empty1d', np.zeros((0,), np.float32), 1)\n"
    "put('len1', np.array([3.5], np.float64), 11)\n"
    "put('dims16', np.arange(2, dtype=np.int32).reshape((1,) * 15 + (2,)), 6)\n"
    "put('strided', np.arange(24, dtype=np.float32).reshape(4, 6)[:, ::2], 1)\n"
    "put('large', np.arange(300000, dtype=np.int64).reshape(1000, 300), 7)\n"
    "put('nativeint', np.arange(5), 7)\n"
    "refuse('fortran', np.asfortranarray(np.ones((2, 3), np.float32)), 'Fortran')\n"
    "refuse('transposed', np.arange(6, dtype=np.float64).reshape(2, 3).T, 'Fortran')\n"
    "refuse('bigendian', np.ones(3, '>f4'), 'big-endian')\n"
    "refuse('bigendian_i8', np.ones((2, 2), '>i8'), 'big-endian')\n"
    "refuse('complex', np.ones(3, np.complex64), 'unsupported dtype')\n"
    "put('unicode', np.array([['ab', 'c', ''], ['h\\u00e9llo', '\\U0001f600x', 'z']]), 8)\n"
    "put('unicode_0d', np.array('\\u4e2d\\u6587'), 8)\n"
    "put('unicode_empty', np.zeros((2, 0), 'U3'), 8)\n"
    "put('unicode_v2', np.array(['abc', 'de']), 8, (2, 0))\n"
    "refuse('unicode_bigendian', np.array(['ab'], '>U2'), 'big-endian')\n"
    "refuse('bytes', np.array([b'ab', b'c']), 'unsupported dtype')\n"
    "refuse('object', np.array([1, 'a'], dtype=object), 'unsupported dtype')\n"
    "refuse('datetime', np.array(['2020-01-01'], 'datetime64[s]'), 'unsupported dtype')\n"
    "refuse('longdouble', np.ones(2, np.longdouble), 'unsupported dtype')\n"
    "refuse('structured', np.zeros(2, dtype=[('a', '<f4'), ('b', '<i4')]), 'structured')\n"
    "refuse('dims17', np.zeros((1,) * 17, np.float32), 'more than 16')\n"
    "man.close(); ref.close()\n";

static int run_python(const char *python, const char *script_name, const char *script) {
    char path[512], cmd[2048];
    int rc;
    path_in(path, sizeof path, script_name);
    if (write_file(path, script, strlen(script))) return 1;
    snprintf(cmd, sizeof cmd, "'%s' '%s' '%s'", python, path, dir);
    rc = system(cmd);
    return rc != 0;
}

static int check_against_bin(const char *name, const npy_array *a) {
    char path[512];
    size_t len = 0;
    unsigned char *raw;
    int ok;
    snprintf(path, sizeof path, "%s/%s.bin", dir, name);
    raw = read_all(path, &len);
    if (!raw) return 0;
    ok = len == a->nbytes && (len == 0 || memcmp(raw, a->data, len) == 0);
    free(raw);
    return ok;
}

static void truncation_sweep(const char *name) {
    char path[512], tpath[512];
    size_t len = 0, cut;
    unsigned char *bytes;
    snprintf(path, sizeof path, "%s/%s.npy", dir, name);
    path_in(tpath, sizeof tpath, "cut.npy");
    bytes = read_all(path, &len);
    CHECK(bytes != NULL, "cannot read %s", path);
    if (!bytes) return;
    for (cut = 0; cut < len; cut++) {
        write_file(tpath, bytes, cut);
        expect_refused_file(tpath, NULL, __LINE__);
    }
    {
        unsigned char *longer = (unsigned char *)malloc(len + 1);
        memcpy(longer, bytes, len);
        longer[len] = 0;
        write_file(tpath, longer, len + 1);
        expect_refused_file(tpath, "more than", __LINE__);
        free(longer);
    }
    free(bytes);
}

/* Flip header bytes to many values: whatever is accepted must be self-consistent (and ASan-clean). */
static void flip_sweep(const char *name) {
    static const unsigned char values[] = {0x00, 0x01, 0x09, 0x0a, 0x20, '\'', '"', '(', ')', ',', ':', '{', '}',
                                           '0',  '1',  '9',  '-',  '<',  '>',  '|', 'T', 'F', 'f', 'i', 'u',
                                           'b',  '\\', 0x7f, 0x80, 0xff};
    char path[512], tpath[512], msg[512];
    size_t len = 0, pos, v, accepted = 0;
    unsigned char *bytes;
    snprintf(path, sizeof path, "%s/%s.npy", dir, name);
    path_in(tpath, sizeof tpath, "flip.npy");
    bytes = read_all(path, &len);
    CHECK(bytes != NULL, "cannot read %s", path);
    if (!bytes) return;
    for (pos = 0; pos < len && pos < 128; pos++) {
        unsigned char keep = bytes[pos];
        for (v = 0; v < sizeof values; v++) {
            npy_array a;
            if (values[v] == keep) continue;
            bytes[pos] = values[v];
            write_file(tpath, bytes, len);
            if (npy_read(tpath, &a, msg, sizeof msg) == 0) {
                size_t n = a.item_size, i;
                accepted++;
                CHECK(a.elem_type == NPY_ONNX_STRING ? n % 4 == 0 && n > 0 : n == npy_elem_size(a.elem_type),
                      "flip %lu=%02x: item size %lu of type %d", (unsigned long)pos, values[v], (unsigned long)n,
                      a.elem_type);
                for (i = 0; i < a.ndim; i++) n *= (size_t)a.shape[i];
                CHECK(n == a.nbytes && a.data != NULL, "flip %lu=%02x: inconsistent array", (unsigned long)pos, values[v]);
                npy_free(&a);
            } else {
                CHECK(strstr(msg, tpath) == msg, "flip message lacks the path: %s", msg);
            }
        }
        bytes[pos] = keep;
    }
    printf("flip sweep of %s: %lu variants accepted (the rest refused)\n", name, (unsigned long)accepted);
    free(bytes);
}

static void test_numpy_files(void) {
    char path[512], line[512], msg[512];
    FILE *f;
    int count = 0;
    path_in(path, sizeof path, "manifest.txt");
    f = fopen(path, "r");
    CHECK(f != NULL, "no manifest from numpy");
    if (!f) return;
    while (fgets(line, sizeof line, f)) {
        char name[128], *p = line;
        int et, nd, off, i, ok;
        npy_array a;
        if (sscanf(p, "%127s %d %d%n", name, &et, &nd, &off) != 3) continue;
        p += off;
        snprintf(path, sizeof path, "%s/%s.npy", dir, name);
        if (npy_read(path, &a, msg, sizeof msg) != 0) {
            CHECK(0, "numpy file %s refused: %s", name, msg);
            continue;
        }
        ok = a.elem_type == et && (int)a.ndim == nd;
        for (i = 0; ok && i < nd; i++) {
            long long d;
            ok = sscanf(p, "%lld%n", &d, &off) == 1 && d == a.shape[i];
            p += off;
        }
        CHECK(ok, "%s: type %d ndim %lu differ from numpy's (%d, %d)", name, a.elem_type, (unsigned long)a.ndim, et, nd);
        CHECK(check_against_bin(name, &a), "%s: data differs from numpy's bytes", name);
        npy_free(&a);
        count++;
    }
    fclose(f);
    CHECK(count >= 12 * 6 + 6 + 4, "only %d numpy files", count);
    printf("numpy-written files read: %d\n", count);

    path_in(path, sizeof path, "refused.txt");
    f = fopen(path, "r");
    CHECK(f != NULL, "no refused.txt from numpy");
    if (!f) return;
    count = 0;
    while (fgets(line, sizeof line, f)) {
        char *needle;
        size_t n = strlen(line);
        while (n && (line[n - 1] == '\n' || line[n - 1] == '\r')) line[--n] = '\0';
        needle = strchr(line, ' ');
        if (!needle) continue;
        *needle++ = '\0';
        snprintf(path, sizeof path, "%s/%.200s.npy", dir, line);
        expect_refused_file(path, needle, __LINE__);
        count++;
    }
    fclose(f);
    printf("numpy-written files refused: %d\n", count);

    truncation_sweep("float32");
    truncation_sweep("bool_v2");
    truncation_sweep("int16_v3");
    truncation_sweep("uint8_0d");
    truncation_sweep("unicode");
    flip_sweep("float32");
    flip_sweep("int64_v2");
    flip_sweep("unicode");
}

/* ---- files npy_write writes --------------------------------------------------------------- */

static const char *check_py =
    "import os, sys\n"
    "import numpy as np\n"
    "d = sys.argv[1]\n"
    "bad = 0\n"
    "n = 0\n"
    "for line in open(os.path.join(d, 'wmanifest.txt')):\n"
    "    parts = line.split()\n"
    "    name, dt, nd = parts[0], parts[1], int(parts[2])\n"
    "    shape = tuple(int(x) for x in parts[3:3 + nd])\n"
    "    p = os.path.join(d, name + '.npy')\n"
    "    with open(p, 'rb') as f:\n"
    "        version = np.lib.format.read_magic(f)\n"
    "        hdr = np.lib.format.read_array_header_1_0(f)\n"
    "        aligned = f.tell() % 64 == 0\n"
    "    a = np.load(p, allow_pickle=False)\n"
    "    raw = open(os.path.join(d, name + '.bin'), 'rb').read()\n"
    "    ok = (version == (1, 0) and aligned and a.dtype == np.dtype(dt) and a.shape == shape\n"
    "          and a.tobytes() == raw and a.flags.c_contiguous and not hdr[1])\n"
    "    if name == 'w_values':\n"
    "        ok = ok and a.tolist() == [[1.5, -2.0, 3.0], [0.25, -0.5, 1024.0]]\n"
    "    if name == 'w_i64_0d':\n"
    "        ok = ok and a.ndim == 0 and int(a) == -9223372036854775807 - 1\n"
    "    if not ok:\n"
    "        bad += 1\n"
    "        print('numpy disagrees with', name, version, aligned, a.dtype, dt, a.shape, shape, file=sys.stderr)\n"
    "    n += 1\n"
    "print('numpy loaded %d files npy_write wrote, %d differ' % (n, bad))\n"
    "sys.exit(1 if bad or n == 0 else 0)\n";

static FILE *wman;

static void write_case(const char *name, int et, const int64_t *shape, size_t ndim, const void *data, size_t nbytes) {
    char path[512], msg[512];
    npy_array a;
    int rc;
    snprintf(path, sizeof path, "%s/%s.npy", dir, name);
    rc = npy_write(path, et, shape, ndim, data, nbytes, msg, sizeof msg);
    CHECK(rc == 0, "npy_write %s: %s", name, msg);
    if (rc) return;
    snprintf(path, sizeof path, "%s/%s.bin", dir, name);
    write_file(path, data, nbytes);
    {
        size_t i;
        fprintf(wman, "%s %s %lu", name, npy_elem_name(et), (unsigned long)ndim);
        for (i = 0; i < ndim; i++) fprintf(wman, " %lld", (long long)shape[i]);
        fputc('\n', wman);
    }
    /* and back through npy_read */
    snprintf(path, sizeof path, "%s/%s.npy", dir, name);
    rc = npy_read(path, &a, msg, sizeof msg);
    CHECK(rc == 0, "npy_read of written %s: %s", name, msg);
    if (rc) return;
    {
        size_t i;
        int same = a.elem_type == et && a.ndim == ndim && a.nbytes == nbytes &&
                   (nbytes == 0 || memcmp(a.data, data, nbytes) == 0);
        for (i = 0; same && i < ndim; i++) same = a.shape[i] == shape[i];
        CHECK(same, "%s does not read back equal", name);
    }
    npy_free(&a);
}

/* Strings npy_write_strings writes, as numpy loads them (strings_py) and as npy_read reads them. */
static const char *strings_py =
    "import os, sys\n"
    "import numpy as np\n"
    "d = sys.argv[1]\n"
    "want = open(os.path.join(d, 'ws.txt'), encoding='utf-8').read().split('\\n')[:-1]\n"
    "a = np.load(os.path.join(d, 'ws.npy'), allow_pickle=False)\n"
    "ok = a.shape == (2, 3) and a.dtype == np.dtype('<U5') and a.ravel().tolist() == want\n"
    "e = np.load(os.path.join(d, 'ws_empty.npy'), allow_pickle=False)\n"
    "ok = ok and e.shape == (0, 4) and e.dtype == np.dtype('<U1')\n"
    "print('numpy loaded the strings npy_write_strings wrote:', 'same' if ok else (a, want))\n"
    "sys.exit(0 if ok else 1)\n";

static void test_write_strings(void) {
    /* "héllo" is 5 code points (6 bytes); the emoji one code point (4 bytes) */
    static const char *const text[] = {"h\xC3\xA9llo", "", "\xF0\x9F\x98\x80x", "a", "bc", "\xE4\xB8\xAD"};
    size_t lengths[6], i, count = 0;
    int64_t shape[2] = {2, 3}, empty[2] = {0, 4};
    char path[512], msg[512], *buffer = NULL;
    const char **strings = NULL;
    npy_array a;
    FILE *f;
    for (i = 0; i < 6; i++) lengths[i] = strlen(text[i]);
    path_in(path, sizeof path, "ws.npy");
    CHECK(npy_write_strings(path, shape, 2, text, lengths, 6, msg, sizeof msg) == 0, "write strings: %s", msg);
    CHECK(npy_read(path, &a, msg, sizeof msg) == 0 && a.item_size == 20 && a.ndim == 2, "read back: %s", msg);
    CHECK(npy_strings_utf8(&a, &buffer, &strings, &count, msg, sizeof msg) == 0 && count == 6, "as UTF-8: %s", msg);
    for (i = 0; strings && i < count; i++) CHECK(strcmp(strings[i], text[i]) == 0, "string %lu differs", (unsigned long)i);
    free(buffer);
    free((void *)strings);
    npy_free(&a);
    path_in(path, sizeof path, "ws_empty.npy");
    CHECK(npy_write_strings(path, empty, 2, NULL, NULL, 0, msg, sizeof msg) == 0, "write no strings: %s", msg);
    path_in(path, sizeof path, "ws.txt");
    f = fopen(path, "w");
    if (f) {
        for (i = 0; i < 6; i++) fprintf(f, "%s\n", text[i]);
        fclose(f);
    }
}

static void test_write(void) {
    static const int types[] = {1, 2, 3, 4, 5, 6, 7, 9, 10, 11, 12, 13};
    unsigned char buf[512];
    char path[512], name[64];
    size_t t, i;
    int64_t shape[NPY_MAX_DIMS];
    float values[6] = {1.5f, -2.0f, 3.0f, 0.25f, -0.5f, 1024.0f};
    int64_t i64min = INT64_MIN;

    path_in(path, sizeof path, "wmanifest.txt");
    wman = fopen(path, "w");
    if (!wman) {
        CHECK(0, "cannot write %s", path);
        return;
    }
    for (t = 0; t < sizeof types / sizeof types[0]; t++) {
        int et = types[t];
        size_t item = npy_elem_size(et);
        for (i = 0; i < sizeof buf; i++) buf[i] = et == NPY_ONNX_BOOL ? (unsigned char)(i % 3 == 1) : (unsigned char)(i * 37 + 11 + t);
        shape[0] = 2;
        shape[1] = 3;
        snprintf(name, sizeof name, "w_%s", npy_elem_name(et));
        write_case(name, et, shape, 2, buf, 6 * item);
        snprintf(name, sizeof name, "w_%s_0d", npy_elem_name(et));
        write_case(name, et, shape, 0, buf, item);
        snprintf(name, sizeof name, "w_%s_1d", npy_elem_name(et));
        shape[0] = 5;
        write_case(name, et, shape, 1, buf, 5 * item);
        snprintf(name, sizeof name, "w_%s_empty", npy_elem_name(et));
        shape[0] = 2;
        shape[1] = 0;
        shape[2] = 3;
        write_case(name, et, shape, 3, NULL, 0);
    }
    shape[0] = 2;
    shape[1] = 3;
    write_case("w_values", NPY_ONNX_FLOAT, shape, 2, values, sizeof values);
    write_case("w_i64_0d", NPY_ONNX_INT64, shape, 0, &i64min, 8);
    for (i = 0; i < NPY_MAX_DIMS; i++) shape[i] = i < 4 ? 2 : 1;
    write_case("w_dims16", NPY_ONNX_UINT8, shape, NPY_MAX_DIMS, buf, 16);
    shape[0] = 0;
    shape[1] = 1099511627776LL;
    write_case("w_empty_hugedim", NPY_ONNX_DOUBLE, shape, 2, NULL, 0);
    shape[0] = 10;
    shape[1] = 1;
    write_case("w_odd-name.x", NPY_ONNX_INT32, shape, 2, buf, 40);
    fclose(wman);
    wman = NULL;
    test_write_strings();
}

static void remove_dir(void) {
    DIR *d = opendir(dir);
    struct dirent *e;
    char path[1024];
    if (!d) return;
    while ((e = readdir(d)) != NULL) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        unlink(path);
    }
    closedir(d);
    rmdir(dir);
}

int main(int argc, char **argv) {
    const char *python = argc > 1 ? argv[1] : getenv("NPY_TEST_PYTHON");
    int have_numpy;
    char check[1024];
    if (!python || !*python) python = "python3";
    snprintf(dir, sizeof dir, "%s", "/tmp/test_npy.XXXXXX");
    if (!mkdtemp(dir)) {
        perror("mkdtemp");
        return 1;
    }

    CHECK(npy_elem_size(NPY_ONNX_FLOAT16) == 2 && npy_elem_size(NPY_ONNX_UINT64) == 8 && npy_elem_size(8) == 0 &&
              npy_elem_size(16) == 0,
          "npy_elem_size");
    test_hand_made();
    test_write_errors();

    snprintf(check, sizeof check, "'%s' -c 'import numpy' >/dev/null 2>&1", python);
    have_numpy = system(check) == 0;
    if (have_numpy) {
        CHECK(run_python(python, "gen.py", gen_py) == 0, "numpy could not write the test files");
        test_numpy_files();
        test_write();
        CHECK(run_python(python, "check.py", check_py) == 0, "numpy refused or disagreed with npy_write's files");
        CHECK(run_python(python, "strings.py", strings_py) == 0, "numpy disagreed with npy_write_strings");
    }
    if (!getenv("NPY_TEST_KEEP")) remove_dir();
    else printf("files kept in %s\n", dir);

    printf("%d checks, %d failures%s\n", checks, failures, have_numpy ? "" : " (numpy missing: numpy tests skipped)");
    if (failures) return 1;
    return have_numpy ? 0 : 77;
}
