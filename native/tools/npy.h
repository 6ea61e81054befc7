/*
 * npy.h - read and write NumPy .npy files (C99), for oc-run's inputs and outputs.
 *
 * Read: format versions 1.0, 2.0 and 3.0; little-endian (or byte-sized) dtypes of the ONNX tensor
 * element types below, and numpy's fixed-width unicode strings ('<U<n>': n UCS-4 code points per
 * element, NUL-padded) for ONNX string tensors; C order only; up to NPY_MAX_DIMS dimensions. Every file is treated as
 * hostile: the header is bounded (NPY_MAX_HEADER bytes), its dict is parsed strictly (exactly the
 * keys 'descr', 'fortran_order' and 'shape', as numpy writes them), the element count times the
 * item size is overflow-checked, the data must fill the rest of the file exactly, and bool data
 * must hold only 0 and 1, and strings only Unicode scalar values (no surrogates, nothing past
 * U+10FFFF, NUL only as the padding after the text).
 * Write: format 1.0 (2.0 when the header would not fit), the header padded to 64 bytes as numpy does.
 *
 * Errors: functions return non-zero and write a NUL-terminated message naming the file and what
 * is wrong into msg (msg may be NULL, msg_size 0).
 */
#ifndef OC_NPY_H
#define OC_NPY_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define NPY_MAX_DIMS 16
#define NPY_MAX_HEADER 65536 /* bytes of header text (after the magic and the length field) */
#define NPY_MAX_STRING_CHARS (1 << 20) /* code points per string element ('<U1048576') */

/* ONNX TensorProto element types (the values of ONNXTensorElementDataType) .npy can carry. */
enum {
    NPY_ONNX_FLOAT = 1,
    NPY_ONNX_UINT8 = 2,
    NPY_ONNX_INT8 = 3,
    NPY_ONNX_UINT16 = 4,
    NPY_ONNX_INT16 = 5,
    NPY_ONNX_INT32 = 6,
    NPY_ONNX_INT64 = 7,
    NPY_ONNX_STRING = 8, /* '<U<n>' in .npy; UTF-8 in onnxruntime */
    NPY_ONNX_BOOL = 9,
    NPY_ONNX_FLOAT16 = 10,
    NPY_ONNX_DOUBLE = 11,
    NPY_ONNX_UINT32 = 12,
    NPY_ONNX_UINT64 = 13
};

typedef struct npy_array {
    int elem_type;                /* an NPY_ONNX_* value */
    size_t ndim;                  /* 0 for a scalar (0-d array) */
    int64_t shape[NPY_MAX_DIMS];  /* each >= 0 */
    void *data;                   /* nbytes of C-order data; never NULL after a successful read */
    size_t nbytes;                /* element count * item size */
    size_t item_size;             /* bytes per element (strings: 4 per code point of the width) */
} npy_array;

/* Bytes per element of an ONNX element type, 0 when .npy support here lacks it or its size varies
 * (strings). */
size_t npy_elem_size(int elem_type);
/* numpy's name for it ("float32", "bool", ...), or NULL when unsupported. */
const char *npy_elem_name(int elem_type);

/* Read the file at `path` into *out (data malloc'd: release with npy_free). On failure *out is
 * zeroed (npy_free on it is harmless). Returns 0 on success. */
int npy_read(const char *path, npy_array *out, char *msg, size_t msg_size);

/* Write `nbytes` of C-order data of the given type and shape (ndim <= NPY_MAX_DIMS, dims >= 0,
 * nbytes == element count * item size; data may be NULL only when nbytes is 0) to `path`
 * (created or replaced; removed again when writing fails). Returns 0 on success. */
int npy_write(const char *path, int elem_type, const int64_t *shape, size_t ndim, const void *data,
              size_t nbytes, char *msg, size_t msg_size);

/* The elements of a string array read by npy_read, as NUL-terminated UTF-8 (what onnxruntime's
 * FillStringTensor takes): *buffer holds them all one after another, (*strings)[i] points at
 * element i, *count is the element count. Both are malloc'd: the caller frees them (also when
 * count is 0). Returns 0 on success; on failure both are NULL. */
int npy_strings_utf8(const npy_array *a, char **buffer, const char ***strings, size_t *count, char *msg,
                     size_t msg_size);

/* Write `count` UTF-8 strings (strings[i] of lengths[i] bytes, no NUL needed) of the given shape
 * (its element count must be `count`) as numpy's '<U<n>', n the most code points of any (at
 * least 1). Malformed UTF-8 (overlong forms, surrogates, past U+10FFFF, cut sequences) and NUL
 * (which numpy would drop at the end, and npy_read refuses inside) are refused naming the element.
 * Returns 0 on success. */
int npy_write_strings(const char *path, const int64_t *shape, size_t ndim, const char *const *strings,
                      const size_t *lengths, size_t count, char *msg, size_t msg_size);

/* Free the data of an array read by npy_read and zero it (NULL is fine). */
void npy_free(npy_array *a);

#ifdef __cplusplus
}
#endif

#endif /* OC_NPY_H */
