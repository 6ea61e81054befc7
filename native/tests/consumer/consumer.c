/* A game's use of libonnx_cooker, built by an engine's CMake (CMakeLists.txt here) or with
 * pkg-config: consumer BUNDLE_DIR ORT_LIBRARY lists the bundle's models, opens each blob and creates
 * a session from it, one line per model: "<name> <inputs> <outputs> <load path>". */
#include <stdio.h>

#include "onnx_cooker.h"

int main(int argc, char **argv) {
    oc_bundle *bundle = NULL;
    oc_runtime *runtime = NULL;
    oc_error err;
    int failed = 0;
    size_t i;
    if (argc != 3) {
        fprintf(stderr, "usage: consumer BUNDLE_DIR ORT_LIBRARY\n");
        return 2;
    }
    if (oc_bundle_open_dir(argv[1], NULL, &bundle, &err) != OC_OK ||
        oc_runtime_load(argv[2], &runtime, &err) != OC_OK) {
        fprintf(stderr, "%s: %s\n", oc_status_name(err.status), err.message);
        oc_bundle_close(bundle);
        return 1;
    }
    for (i = 0; i < oc_bundle_model_count(bundle) && !failed; i++) {
        const char *name = oc_bundle_model_name(bundle, i);
        oc_blob *blob = NULL;
        struct OrtSession *session = NULL;
        oc_load_path path = OC_LOAD_ONNX_INLINE;
        if (oc_bundle_open_blob(bundle, name, &blob, &err) != OC_OK ||
            oc_session_create(runtime, blob, NULL, &session, &path, &err) != OC_OK) {
            fprintf(stderr, "%s: %s: %s\n", name, oc_status_name(err.status), err.message);
            failed = 1;
        } else {
            printf("%s %zu %zu %s\n", name, oc_bundle_signature_count(bundle, name, 0),
                   oc_bundle_signature_count(bundle, name, 1), oc_load_path_name(path));
        }
        oc_session_release(runtime, session);
        oc_blob_close(blob);
    }
    oc_bundle_close(bundle);
    oc_runtime_release(runtime);
    return failed;
}
