/* test_in_place.c - does a session read the caller's memory in place?
 *
 *   test_in_place ORT_LIBRARY BLOB_FILE OFFSET LENGTH [misaligned]
 *
 * Reads BLOB_FILE into memory this program owns, opens it with oc_blob_open_memory, creates a
 * session (prepacking off, so that onnxruntime computes from the weights where they lie), runs it
 * on an all-ones float input, then zeroes LENGTH bytes at OFFSET of that memory (where the test put
 * a weight) and runs again. Prints one JSON line: the load path, the largest absolute output before
 * and after, and whether the weights the library hands out lie inside the caller's memory. Then it
 * releases the session, the blob and only then the memory (AddressSanitizer would report a session
 * or blob that read it later). With `misaligned`, the blob's bytes start one byte past an aligned
 * address (a pak buffer's): the library then works from its own aligned copy. Exit 0 unless
 * something failed. */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <onnxruntime_c_api.h>

#include "onnx_cooker.h"

static const OrtApi *api;

static int ort_ok(OrtStatus *status, const char *what) {
    if (status == NULL) return 1;
    fprintf(stderr, "test_in_place: %s: %s\n", what, api->GetErrorMessage(status));
    api->ReleaseStatus(status);
    return 0;
}

/* Run the one-input, one-output float model on ones; the largest |output|, or NAN on failure. */
static double run_ones(OrtSession *session) {
    OrtAllocator *allocator;
    OrtTypeInfo *type = NULL;
    const OrtTensorTypeAndShapeInfo *tensor;
    OrtMemoryInfo *memory = NULL;
    OrtValue *input = NULL, *output = NULL;
    char *in_name = NULL, *out_name = NULL;
    int64_t dims[8];
    size_t rank, count = 1, i, n;
    float *ones = NULL, *values;
    double largest = NAN;
    if (!ort_ok(api->GetAllocatorWithDefaultOptions(&allocator), "allocator")) return NAN;
    if (!ort_ok(api->SessionGetInputName(session, 0, allocator, &in_name), "input name") ||
        !ort_ok(api->SessionGetOutputName(session, 0, allocator, &out_name), "output name") ||
        !ort_ok(api->SessionGetInputTypeInfo(session, 0, &type), "input type") ||
        !ort_ok(api->CastTypeInfoToTensorInfo(type, &tensor), "tensor type") ||
        !ort_ok(api->GetDimensionsCount(tensor, &rank), "rank") || rank > 8 ||
        !ort_ok(api->GetDimensions(tensor, dims, rank), "dims"))
        goto done;
    for (i = 0; i < rank; ++i) {
        if (dims[i] < 1) dims[i] = 1;
        count *= (size_t)dims[i];
    }
    ones = malloc(count * sizeof *ones);
    if (ones == NULL) goto done;
    for (i = 0; i < count; ++i) ones[i] = 1.0f;
    if (!ort_ok(api->CreateCpuMemoryInfo(OrtArenaAllocator, OrtMemTypeDefault, &memory), "memory info") ||
        !ort_ok(api->CreateTensorWithDataAsOrtValue(memory, ones, count * sizeof *ones, dims, rank,
                                                    ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT, &input), "input") ||
        !ort_ok(api->Run(session, NULL, (const char *const *)&in_name, (const OrtValue *const *)&input, 1,
                         (const char *const *)&out_name, 1, &output), "run")) {
        goto done;
    }
    {
        OrtTensorTypeAndShapeInfo *shape;
        if (!ort_ok(api->GetTensorTypeAndShape(output, &shape), "output shape")) goto done;
        if (!ort_ok(api->GetTensorShapeElementCount(shape, &n), "output size")) {
            api->ReleaseTensorTypeAndShapeInfo(shape);
            goto done;
        }
        api->ReleaseTensorTypeAndShapeInfo(shape);
    }
    if (!ort_ok(api->GetTensorMutableData(output, (void **)&values), "output data")) goto done;
    largest = 0;
    for (i = 0; i < n; ++i)
        if (fabs(values[i]) > largest) largest = fabs(values[i]);
done:
    if (output) api->ReleaseValue(output);
    if (input) api->ReleaseValue(input);
    if (memory) api->ReleaseMemoryInfo(memory);
    if (type) api->ReleaseTypeInfo(type);
    if (in_name) ort_ok(api->AllocatorFree(allocator, in_name), "free");
    if (out_name) ort_ok(api->AllocatorFree(allocator, out_name), "free");
    free(ones);
    return largest;
}

int main(int argc, char **argv) {
    oc_runtime *runtime = NULL;
    oc_blob *blob = NULL;
    OrtSession *session = NULL;
    oc_session_options options;
    oc_load_path path;
    oc_error err;
    unsigned char *memory = NULL, *start;
    const void *handed;
    size_t size, handed_size, offset, length;
    long file_size;
    double before, after;
    int inside, code = 1;
    FILE *f;
    size_t shift = argc == 6 && strcmp(argv[5], "misaligned") == 0;
    if (argc != 5 && !shift) {
        fprintf(stderr, "usage: test_in_place ORT_LIBRARY BLOB_FILE OFFSET LENGTH [misaligned]\n");
        return 2;
    }
    offset = (size_t)strtoull(argv[3], NULL, 10);
    length = (size_t)strtoull(argv[4], NULL, 10);
    f = fopen(argv[2], "rb");
    if (f == NULL || fseek(f, 0, SEEK_END) != 0 || (file_size = ftell(f)) < 0 || fseek(f, 0, SEEK_SET) != 0) return 1;
    size = (size_t)file_size;
    memory = malloc(size + shift);
    start = memory + shift;
    if (memory == NULL || fread(start, 1, size, f) != size || offset + length > size) return 1;
    fclose(f);
    if (oc_runtime_load(argv[1], &runtime, &err) != OC_OK || oc_blob_open_memory(start, size, NULL, &blob, &err) != OC_OK) {
        fprintf(stderr, "test_in_place: %s\n", err.message);
        goto done;
    }
    api = oc_runtime_api(runtime);
    memset(&options, 0, sizeof options);
    options.low_memory = 1;
    if (oc_session_create(runtime, blob, &options, &session, &path, &err) != OC_OK) {
        fprintf(stderr, "test_in_place: %s\n", err.message);
        goto done;
    }
    if (oc_blob_weights(blob, &handed, &handed_size, &err) != OC_OK || handed == NULL)
        (void)oc_blob_model(blob, &handed, &handed_size, &err);
    inside = (const unsigned char *)handed >= start && (const unsigned char *)handed + handed_size <= start + size;
    before = run_ones(session);
    memset(start + offset, 0, length);
    after = run_ones(session);
    printf("{\"load_path\": \"%s\", \"before\": %g, \"after\": %g, \"handed_inside_caller_memory\": %s}\n",
           oc_load_path_name(path), before, after, inside ? "true" : "false");
    code = isnan(before) || isnan(after) ? 1 : 0;
done:
    if (session) api->ReleaseSession(session);
    oc_blob_close(blob);
    memset(memory, 0xFF, size + shift); /* only now: nothing may read it any more */
    free(memory);
    oc_runtime_release(runtime);
    return code;
}
