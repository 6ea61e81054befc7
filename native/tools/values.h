/*
 * values.h - oc-run's JSON form of an output that is not a tensor (C99).
 *
 * Classic ML models (scikit-learn through skl2onnx: ZipMap's sequence of maps) and sequence ops
 * (SplitToSequence) return values .npy cannot hold. oc-run writes each such output as
 * "<output name>.json":
 *   - a sequence is a JSON array of its elements;
 *   - a map is a JSON object, its keys as strings (an int64 key in decimal), in onnxruntime's order;
 *   - a tensor is nested arrays by its shape (a 0-d tensor: its one value); float16 and bfloat16
 *     are written as the float32 they widen to; floats with 9 significant digits, doubles with 17
 *     (each reads back to the same value); NaN and the infinities as NaN, Infinity and -Infinity,
 *     as Python's json module writes and reads them; bool as true/false; strings as JSON strings;
 *   - an empty optional (Python's None) is null (one that holds a value is that value).
 * Nesting deeper than VALUES_MAX_DEPTH, opaque values, sparse tensors and element types without a
 * JSON form (complex, float8, int4) are refused with a message naming the output.
 */
#ifndef OC_VALUES_H
#define OC_VALUES_H

#include <onnxruntime_c_api.h>
#include <stddef.h>

#define VALUES_MAX_DEPTH 16

/* Text that grows as it is written (malloc'd `data`, NUL-terminated, `len` bytes before the NUL).
 * Owned by the caller: release with values_text_free. */
typedef struct values_text {
    char *data;
    size_t len;
    size_t cap;
    int failed; /* out of memory once: everything after is dropped, and values_to_json fails */
} values_text;

/* Append `value` (a sequence or a map, or any value inside one) as JSON to *out. `alloc` is the
 * allocator onnxruntime's GetValue takes. Returns 0 on success; else non-zero with a NUL-terminated
 * message in msg (what was wrong, under `name`, the output's name). Borrows everything it is given. */
int values_to_json(const OrtApi *api, OrtAllocator *alloc, OrtValue *value, const char *name,
                   values_text *out, char *msg, size_t msg_size);

/* A one-line description of a value ("a sequence of 4 maps", "no value (an empty optional)"), for
 * oc-run's report. */
void values_describe(const OrtApi *api, OrtAllocator *alloc, OrtValue *value, char *buf, size_t size);

/* Write the text to `path` (created or replaced; removed again when writing fails). Returns 0 on
 * success. */
int values_write(const char *path, const values_text *text, char *msg, size_t msg_size);

void values_text_free(values_text *text);

#endif /* OC_VALUES_H */
