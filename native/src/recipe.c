/* recipe.c - what of a blob's session recipe the library lets onnxruntime see. A blob comes from a
 * file: it may ask only for what changes how a session computes, never for a file, folder,
 * library or memory address onnxruntime or an EP would read, create, write or load. The Python
 * loader holds the same lists and words (onnx_cooker/runtime/constants.py), and says the same
 * (onnx_cooker/runtime/options.py); tests/test_session_option_refusals.py compares them. */
#include <string.h>

#include "internal.h"

/* Config entries a blob may carry: an allow-list, so that an entry a newer onnxruntime adds stays
 * refused until it is read and listed (SAFE_CONFIG_ENTRIES); every "mlas." entry is a math-kernel
 * switch (SAFE_CONFIG_PREFIXES). */
static const char *const SAFE_ENTRIES[] = {
    "optimization.constant_folding_max_output_size_in_bytes",
    "optimization.disable_specified_optimizers",
    "optimization.enable_cast_chain_elimination",
    "optimization.enable_gelu_approximation",
    "session.allow_released_opsets_only",
    "session.disable_aot_function_inlining",
    "session.disable_cpu_ep_fallback",
    "session.disable_double_qdq_remover",
    "session.disable_prepacking",
    "session.disable_qdq_constant_folding",
    "session.disable_quant_qdq",
    "session.dynamic_block_base",
    "session.enable_dq_matmulnbits_fusion",
    "session.enable_quant_qdq",
    "session.enable_quant_qdq_cleanup",
    "session.force_spinning_stop",
    "session.function_expansion_byte_limit",
    "session.function_expansion_node_limit",
    "session.graph_optimizations_loop_level",
    "session.inter_op.allow_spinning",
    "session.inter_op.spin_backoff_max",
    "session.inter_op.spin_duration_us",
    "session.intra_op.allow_spinning",
    "session.intra_op.spin_backoff_max",
    "session.intra_op.spin_duration_us",
    "session.intra_op_thread_affinities",
    "session.prepack.enable_parallel",
    "session.qdq_matmulnbits_accuracy_level",
    "session.qdq_matmulnbits_block_size",
    "session.qdqisint8allowed",
    "session.set_denormal_as_zero",
    "session.strict_shape_type_inference",
    "session.use_deterministic_compute",
    "session.use_device_allocator_for_initializers",
    "session.use_env_allocators",
    "session.x64quantprecision",
};
static const char *const SAFE_PREFIXES[] = {"mlas."};

/* Entries the load paths set themselves, each only where it is proven (UNSAFE_CONFIG_ENTRIES). */
static const char *const OWNED_ENTRIES[] = {
    "session.use_ort_model_bytes_for_initializers",
    "session.use_ort_model_bytes_directly",
    "session.use_memory_mapped_ort_model",
    "session.load_model_format",
    "session.use_external_initializer_file_buffers_directly",
    "session.model_external_initializers_file_folder_path",
};

/* Words in a provider option's name (ASCII lower-cased) that mark one which may name a file,
 * folder, library or memory address (UNSAFE_PROVIDER_OPTION_WORDS). */
static const char *const UNSAFE_WORDS[] = {
    "path",    "file",        "dir",    "folder", "cache", "lib",    "dump", "save",
    "load",    "context",     "plugin", "package", "external", "compute_stream",
    "decrypt", "calibration", "handle", "root",   "cfg",   "config", "uri",  "url",
};

#define COUNT(array) (sizeof(array) / sizeof((array)[0]))

static int listed(const char *key, const char *const *list, size_t n) {
    size_t i;
    for (i = 0; i < n; ++i)
        if (strcmp(key, list[i]) == 0) return 1;
    return 0;
}

static int oc_recipe_entry_owned(const char *key) { return listed(key, OWNED_ENTRIES, COUNT(OWNED_ENTRIES)); }

static int oc_recipe_entry_safe(const char *key) {
    size_t i;
    if (listed(key, SAFE_ENTRIES, COUNT(SAFE_ENTRIES))) return 1;
    for (i = 0; i < COUNT(SAFE_PREFIXES); ++i)
        if (strncmp(key, SAFE_PREFIXES[i], strlen(SAFE_PREFIXES[i])) == 0) return 1;
    return 0;
}

/* Whether `word` occurs in `text` with text's ASCII letters lower-cased (as Python's bytes.lower). */
static int holds_word(const char *text, const char *word) {
    size_t n = strlen(word), i, k;
    for (i = 0; text[i] != '\0'; ++i) {
        for (k = 0; k < n; ++k) {
            char c = text[i + k];
            if (c >= 'A' && c <= 'Z') c = (char)(c - 'A' + 'a');
            if (c != word[k]) break; /* the NUL at the end of text differs from every word's letter */
        }
        if (k == n) return 1;
    }
    return 0;
}

static oc_status oc_recipe_check_provider_option(const char *model, const char *ep, const char *key, const char *value,
                                          oc_error *err) {
    size_t i;
    for (i = 0; i < COUNT(UNSAFE_WORDS); ++i)
        if (holds_word(key, UNSAFE_WORDS[i]))
            return oc_fail(err, OC_ERR_SESSION_CREATE,
                           "model '%s': provider option '%s' for %s is refused: its name holds '%s': it may name a "
                           "file, folder, library or memory address" OC_BAD_PROVIDER_OPTION_FIX,
                           model, key, ep, UNSAFE_WORDS[i]);
    if (strchr(value, '/') != NULL || strchr(value, '\\') != NULL)
        return oc_fail(err, OC_ERR_SESSION_CREATE,
                       "model '%s': provider option '%s' for %s is refused: its value holds a path separator"
                       OC_BAD_PROVIDER_OPTION_FIX, model, key, ep);
    return OC_OK;
}

static oc_status oc_recipe_check_entry(const char *model, const char *ep, const char *key, oc_error *err) {
    if (oc_recipe_entry_owned(key))
        return oc_fail(err, OC_ERR_SESSION_CREATE,
                       "model '%s': bad session option for %s: %s is refused: the loader sets it itself, for the load "
                       "path it proved (docs/design.md, loading from memory)" OC_BAD_OPTION_FIX, model, ep, key);
    if (!oc_recipe_entry_safe(key))
        return oc_fail(err, OC_ERR_SESSION_CREATE,
                       "model '%s': bad session option for %s: config entry '%s' is not one a blob may carry"
                       OC_UNLISTED_ENTRY OC_BAD_OPTION_FIX, model, ep, key);
    return OC_OK;
}

/* Named session options (not config entries) and their values, as apply_session_options takes them. */
static int named_option_ok(const char *key, const char *value, int *named) {
    static const char *const modes[] = {"sequential", "parallel"};
    static const char *const levels[] = {"disable", "basic", "extended", "all"};
    *named = 1;
    if (strcmp(key, "enable_mem_pattern") == 0) return 1;
    if (strcmp(key, "execution_mode") == 0) return listed(value, modes, COUNT(modes));
    if (strcmp(key, "graph_optimization_level") == 0) return listed(value, levels, COUNT(levels));
    *named = 0;
    return 1;
}

oc_status oc_recipe_check_provider_options(const oc_blob *blob, oc_error *err) {
    size_t e, i;
    oc_status status;
    for (e = 0; e < blob->recipe_count; ++e) {
        const oc_ep_recipe *r = &blob->recipes[e];
        for (i = 0; i < r->provider_count; ++i) {
            status = oc_recipe_check_provider_option(blob->info.name, r->name, r->provider[i].key,
                                                     r->provider[i].value, err);
            if (status != OC_OK) return status;
        }
    }
    return OC_OK;
}

oc_status oc_recipe_check_session_options(const oc_blob *blob, const char *ep, oc_error *err) {
    size_t e, i;
    oc_status status;
    for (e = 0; e < blob->recipe_count; ++e) {
        const oc_ep_recipe *r = &blob->recipes[e];
        if (strcmp(r->name, ep) != 0) continue;
        for (i = 0; i < r->session_count; ++i) {
            const char *key = r->session[i].key, *value = r->session[i].value;
            int named;
            if (!named_option_ok(key, value, &named))
                return oc_fail(err, OC_ERR_SESSION_CREATE,
                               "model '%s': bad session option for %s: %s '%s'" OC_BAD_OPTION_FIX, blob->info.name,
                               r->name, key, value);
            if (!named && (status = oc_recipe_check_entry(blob->info.name, r->name, key, err)) != OC_OK)
                return status;
        }
    }
    return OC_OK;
}

oc_status oc_blob_check_recipe(const oc_blob *blob, oc_error *err) {
    size_t e;
    oc_status status;
    if (blob == NULL) return oc_fail(err, OC_ERR_INVALID_ARGUMENT, "oc_blob_check_recipe: blob is NULL");
    if ((status = oc_recipe_check_provider_options(blob, err)) != OC_OK) return status;
    for (e = 0; e < blob->recipe_count; ++e)
        if ((status = oc_recipe_check_session_options(blob, blob->recipes[e].name, err)) != OC_OK) return status;
    return OC_OK;
}
