/* bundle.c - a cooked bundle: manifest.json, its models, and their blobs (docs/bundle-format.md,
 * "manifest.json"), as onnx_cooker/runtime/bundle.py reads them. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>
#include <sodium.h>
#define ZSTD_STATIC_LINKING_ONLY /* ZSTD_createDCtx_advanced: the caller's allocator */
#include <zstd.h>

#include "internal.h"

#define MAX_MANIFEST (64u << 20)
#define DEFAULT_MAX_MODEL_SIZE (2ull << 30)
#define MAX_HEADER_SIZE (16ull << 20)
#define SMALL_BLOB (1u << 20)
/* A signed pair that does not verify while a cook replaces it is read again (read_signed_pair):
 * every POLL_MS, for at most SETTLE_NS (onnx_cooker/runtime/manifestfile.py's SETTLE_SECONDS). */
#define SETTLE_NS 2000000000ull
#define POLL_MS 5u

/* A signature's shape without JSON: rank -1 when it gives none (not a tensor); each dimension's
 * size, or -1 where it is free, with its symbolic name where the manifest gives one. */
typedef struct tensor_dims {
    int64_t rank;
    int64_t *sizes;
    const char **symbols;
} tensor_dims;

typedef struct model_entry {
    const char *name;
    const char *file;
    const char *format;
    const char *blob_sha256;
    uint64_t blob_size;
    const char *cook_key;     /* NULL when the entry has none */
    const char *model_sha256; /* NULL when the entry has none */
    oc_tensor_info *inputs, *outputs;
    struct tensor_dims *input_dims, *output_dims; /* each signature's shape, parsed (the same order) */
    size_t input_count, output_count;
    /* The blob file hashed at open (verify, a folder bundle): its identity then. A load of the
     * same file (same identity) needs no sha256 and no CRC pass again, as in the Python loader. */
    uint64_t identity[OC_IDENTITY_WORDS];
    int hashed;
} model_entry;

struct oc_bundle {
    oc_alloc alloc;
    oc_arena arena;
    char *dir; /* NULL for a reader bundle */
    oc_reader reader;
    int has_reader;
    const char *platform;
    model_entry *models; /* sorted by name */
    size_t model_count;
    uint64_t max_model_size;
    int verify, map_blobs;
    int is_signed; /* public keys were given: each load checks its blob's sha256 again */
    oc_progress_fn progress;
    void *progress_user;
    ZSTD_DCtx *dctx; /* kept for the blobs opened through this bundle: lent to one open at a time */
    int dctx_lent;   /* under oc_lock: an open is using dctx (a concurrent open decodes with its own) */
    int out_of_memory; /* a manifest string could not be copied: not a damaged manifest */
    /* A folder bundle: the sha256 of the manifest it was opened from, to tell a blob file a newer
     * cook removed from one the bundle lacks (missing_blob). */
    unsigned char manifest_sha256[32];
};

static void *bundle_zstd_alloc(void *opaque, size_t size) { return oc_malloc((const oc_alloc *)opaque, size); }
static void bundle_zstd_free(void *opaque, void *address) { oc_free((const oc_alloc *)opaque, address); }

static int count_of(const cJSON *item, uint64_t *out) {
    double v;
    if (!cJSON_IsNumber(item)) return 0;
    v = item->valuedouble;
    if (!(v >= 0.0) || v > 9007199254740992.0 || v != (double)(uint64_t)v) return 0;
    *out = (uint64_t)v;
    return 1;
}

/* The blob file at `path` resolves inside the bundle folder (no link out of it), as Bundle.session
 * requires; OC_ERR_MANIFEST otherwise. A missing file passes here and fails when it is opened. */
static oc_status inside_folder(const oc_bundle *b, const model_entry *m, const char *path, oc_error *err) {
    char *root = oc_real_path(b->dir), *real = oc_real_path(path);
    oc_status status = OC_OK;
    if (root != NULL && real != NULL) {
        size_t n = strlen(root);
        int inside = strncmp(real, root, n) == 0 && (real[n] == '/' || real[n] == '\\' || (n > 0 && root[n - 1] == '/'));
        if (!inside)
            status = oc_fail(err, OC_ERR_MANIFEST, "%s: blob of '%s' at %s is a link to %s, outside the bundle folder; "
                             "re-run `onnx-cooker cook` to rebuild the bundle", b->dir, m->name, path, real);
    }
    free(root);
    free(real);
    return status;
}

static const char *where_of(const oc_bundle *b) { return b->dir ? b->dir : b->has_reader ? "bundle (reader)" : "bundle"; }

static int compare_models(const void *a, const void *b) {
    return strcmp(((const model_entry *)a)->name, ((const model_entry *)b)->name);
}

/* A relative POSIX path inside the folder: not absolute, no "..", "\", ":" or NUL, not empty. */
static int safe_relative(const char *file) {
    const char *p = file, *segment = file;
    if (file[0] == '\0' || file[0] == '/') return 0;
    for (;; ++p) {
        if (*p == '\\' || *p == ':') return 0;
        if (*p == '/' || *p == '\0') {
            size_t n = (size_t)(p - segment);
            if (n == 0 || (n == 2 && segment[0] == '.' && segment[1] == '.')) return 0;
            if (*p == '\0') return 1;
            segment = p + 1;
        }
    }
}

/* The string `item` holds, copied into the arena; NULL when it is no string, or when the copy failed
 * (then b->out_of_memory is set, so that the caller reports memory, not a malformed manifest). */
static const char *dup_string(oc_bundle *b, const cJSON *item) {
    const char *copy;
    if (!cJSON_IsString(item)) return NULL;
    copy = oc_arena_strndup(&b->arena, item->valuestring, strlen(item->valuestring));
    if (copy == NULL) b->out_of_memory = 1;
    return copy;
}

/* `count` bytes of `path` through the reader, asking again after a short read (a reader over a
 * stream or a POSIX read() returns what it has); the bytes read, or -1 for a reader error or a
 * reply larger than asked. Stops early only at the end of the file (a read of 0). */
static int64_t read_whole(const oc_reader *reader, const char *path, void *buffer, size_t count) {
    size_t done = 0;
    while (done < count) {
        int64_t got = reader->read(reader->user, path, (uint64_t)done, (char *)buffer + done, count - done);
        if (got < 0 || (uint64_t)got > count - done) return -1;
        if (got == 0) break;
        done += (size_t)got;
    }
    return (int64_t)done;
}

static oc_status manifest_out_of_memory(oc_error *err) {
    return oc_fail(err, OC_ERR_OUT_OF_MEMORY, "out of memory reading the manifest (its allocator refused)");
}

/* A shape's dimensions: an array of sizes (integers >= 0), names (strings) and nulls. Anything else
 * in it (a negative or fractional number, a nested value: not what the cooker writes) is a free
 * dimension without a name; a shape that is no array has no rank. */
static int parse_dims(oc_bundle *b, const cJSON *shape, tensor_dims *out) {
    const cJSON *dim;
    size_t k = 0, n;
    out->rank = -1;
    if (!cJSON_IsArray(shape)) return 1;
    n = (size_t)cJSON_GetArraySize(shape);
    out->sizes = oc_arena_alloc(&b->arena, (n ? n : 1) * sizeof *out->sizes);
    out->symbols = oc_arena_alloc(&b->arena, (n ? n : 1) * sizeof *out->symbols);
    if (out->sizes == NULL || out->symbols == NULL) return 0;
    cJSON_ArrayForEach(dim, shape) {
        double value = cJSON_IsNumber(dim) ? dim->valuedouble : -1.0;
        out->sizes[k] = value >= 0 && value <= 9007199254740992.0 && value == (double)(int64_t)value ? (int64_t)value : -1;
        out->symbols[k] = dup_string(b, dim); /* NULL for a number or null */
        if (cJSON_IsString(dim) && out->symbols[k] == NULL) return 0;
        ++k;
    }
    out->rank = (int64_t)k;
    return 1;
}

static oc_status parse_signature(oc_bundle *b, const cJSON *list, oc_tensor_info **out, tensor_dims **dims,
                                 size_t *count, oc_error *err, const char *model) {
    const cJSON *item;
    size_t n, i = 0;
    *out = NULL;
    *dims = NULL;
    *count = 0;
    if (list == NULL) return OC_OK;
    if (!cJSON_IsArray(list))
        return oc_fail(err, OC_ERR_MANIFEST, "%s: manifest entry '%s' has a malformed I/O signature; re-run `onnx-cooker cook`", where_of(b), model);
    n = (size_t)cJSON_GetArraySize(list);
    *out = oc_arena_alloc(&b->arena, (n ? n : 1) * sizeof **out);
    *dims = oc_arena_alloc(&b->arena, (n ? n : 1) * sizeof **dims);
    if (*out == NULL || *dims == NULL) return manifest_out_of_memory(err);
    cJSON_ArrayForEach(item, list) {
        const cJSON *shape = oc_json_get(item, "shape");
        char *text;
        (*out)[i].name = dup_string(b, oc_json_get(item, "name"));
        (*out)[i].type = dup_string(b, oc_json_get(item, "type"));
        if (b->out_of_memory) return manifest_out_of_memory(err);
        if ((*out)[i].name == NULL || (*out)[i].type == NULL)
            return oc_fail(err, OC_ERR_MANIFEST, "%s: manifest entry '%s' has a malformed I/O signature; re-run `onnx-cooker cook`", where_of(b), model);
        text = shape ? cJSON_PrintUnformatted(shape) : NULL;
        (*out)[i].shape = oc_arena_strndup(&b->arena, text ? text : "null", text ? strlen(text) : 4);
        free(text);
        if ((*out)[i].shape == NULL || !parse_dims(b, shape, &(*dims)[i]))
            return manifest_out_of_memory(err);
        ++i;
    }
    *count = i;
    return OC_OK;
}

static oc_status parse_manifest(oc_bundle *b, const char *text, size_t size, oc_error *err) {
    cJSON *root = oc_json_parse(text, size);
    const cJSON *models, *entry, *version;
    size_t n, i = 0;
    oc_status status = OC_OK;
    if (root == NULL || !cJSON_IsObject(root)) { /* as Python: JSON it cannot read, or JSON of another kind */
        status = oc_fail(err, OC_ERR_MANIFEST, "%s: manifest.json is not %s; re-run `onnx-cooker cook`", where_of(b),
                         root == NULL ? "valid JSON (cut off, or not UTF-8 JSON)" : "a JSON object");
        goto done;
    }
    version = oc_json_get(root, "manifest_version");
    if (!cJSON_IsNumber(version) || version->valuedouble != OC_MANIFEST_VERSION) {
        status = oc_fail(err, OC_ERR_MANIFEST,
                         "%s: manifest.json has manifest_version other than %d; re-cook with the cooker that matches "
                         "this loader", where_of(b), OC_MANIFEST_VERSION);
        goto done;
    }
    b->platform = dup_string(b, oc_json_get(root, "platform"));
    models = oc_json_get(root, "models");
    if (b->out_of_memory) {
        status = manifest_out_of_memory(err);
        goto done;
    }
    if (b->platform == NULL || !cJSON_IsObject(models)) {
        status = oc_fail(err, OC_ERR_MANIFEST, "%s: manifest.json needs 'platform' (string) and 'models' (object); re-run `onnx-cooker cook`",
                         where_of(b));
        goto done;
    }
    n = (size_t)cJSON_GetArraySize(models);
    b->models = oc_arena_alloc(&b->arena, (n ? n : 1) * sizeof *b->models);
    if (b->models == NULL) {
        status = manifest_out_of_memory(err);
        goto done;
    }
    cJSON_ArrayForEach(entry, models) {
        model_entry *m = &b->models[i];
        m->name = oc_arena_strndup(&b->arena, entry->string, strlen(entry->string));
        m->file = dup_string(b, oc_json_get(entry, "file"));
        m->format = dup_string(b, oc_json_get(entry, "format"));
        m->blob_sha256 = dup_string(b, oc_json_get(entry, "blob_sha256"));
        m->cook_key = dup_string(b, oc_json_get(entry, "cook_key"));
        m->model_sha256 = dup_string(b, oc_json_get(entry, "model_sha256"));
        if (m->name == NULL || b->out_of_memory) {
            status = manifest_out_of_memory(err);
            goto done;
        }
        if (!cJSON_IsObject(entry) || m->name == NULL || m->file == NULL || m->format == NULL || m->blob_sha256 == NULL ||
            !count_of(oc_json_get(entry, "blob_size"), &m->blob_size)) {
            status = oc_fail(err, OC_ERR_MANIFEST,
                             "%s: manifest entry '%s' needs file, format, blob_sha256 (strings) and blob_size (int >= 0); "
                             "re-run `onnx-cooker cook`", where_of(b), entry->string ? entry->string : "?");
            goto done;
        }
        if (!safe_relative(m->file)) {
            status = oc_fail(err, OC_ERR_MANIFEST,
                             "%s: manifest entry '%s' names file '%s', which is not a relative path inside the bundle "
                             "folder; re-run `onnx-cooker cook`", where_of(b), m->name, m->file);
            goto done;
        }
        status = parse_signature(b, oc_json_get(entry, "inputs"), &m->inputs, &m->input_dims, &m->input_count, err,
                                 m->name);
        if (status == OC_OK)
            status = parse_signature(b, oc_json_get(entry, "outputs"), &m->outputs, &m->output_dims, &m->output_count,
                                     err, m->name);
        if (status != OC_OK) goto done;
        ++i;
    }
    b->model_count = i;
    qsort(b->models, i, sizeof *b->models, compare_models);
done:
    cJSON_Delete(root);
    return status;
}

static oc_status new_bundle(const oc_bundle_options *options, oc_bundle **out, oc_error *err) {
    oc_alloc alloc = oc_alloc_from(options ? options->allocator : NULL);
    oc_bundle *b;
    if (out == NULL) return oc_fail(err, OC_ERR_INVALID_ARGUMENT, "oc_bundle_open: out is NULL");
    *out = NULL;
    if (sodium_init() < 0) return oc_fail(err, OC_ERR_OUT_OF_MEMORY, "libsodium could not start");
    b = oc_calloc(&alloc, 1, sizeof *b);
    if (b == NULL) return oc_fail(err, OC_ERR_OUT_OF_MEMORY, "out of memory opening a bundle");
    b->alloc = alloc;
    oc_arena_init(&b->arena, &alloc);
    b->max_model_size = options && options->max_model_size ? options->max_model_size : DEFAULT_MAX_MODEL_SIZE;
    b->verify = options == NULL || !options->skip_verify;
    b->map_blobs = options == NULL || !options->read_blobs;
    b->progress = options ? options->progress : NULL;
    b->progress_user = options ? options->progress_user : NULL;
    *out = b;
    return OC_OK;
}

/* The manifest is signed by one of the trusted keys (trust.py's verify_signature). */
static oc_status check_signature(const void *manifest, size_t size, const void *signature, size_t signature_size,
                                 const oc_bundle_options *options, const char *where, oc_error *err) {
    size_t i;
    if (signature == NULL)
        return oc_fail(err, OC_ERR_SIGNATURE, "%s is not signed (manifest.json.sig missing) but a signature is required",
                       where);
    if (signature_size != crypto_sign_BYTES)
        return oc_fail(err, OC_ERR_SIGNATURE, "%s: manifest.json.sig is %zu bytes, not a %d-byte signature", where,
                       signature_size, crypto_sign_BYTES);
    for (i = 0; i < options->public_key_count; ++i)
        if (crypto_sign_verify_detached(signature, manifest, size, options->public_keys + i * crypto_sign_PUBLICKEYBYTES) == 0)
            return OC_OK;
    return oc_fail(err, OC_ERR_SIGNATURE,
                   "%s: the signature matches none of the %zu trusted key(s): the bundle was modified after cooking, or "
                   "signed with a key this game does not trust", where, options->public_key_count);
}

/* `signature_checked`: open_dir has checked the signature already (read_signed_pair). */
static oc_status open_manifest(const void *manifest, size_t size, const oc_reader *blob_reader,
                               const oc_bundle_options *options, const char *dir, const void *signature,
                               size_t signature_size, int signature_checked, oc_bundle **out, oc_error *err) {
    oc_bundle *b;
    oc_status status;
    if (manifest == NULL && size != 0) return oc_fail(err, OC_ERR_INVALID_ARGUMENT, "oc_bundle_open_manifest: NULL manifest");
    if (size > MAX_MANIFEST)
        return oc_fail(err, OC_ERR_MANIFEST, "manifest.json is %zu bytes, over the limit of %u: not a manifest the cooker wrote; re-run `onnx-cooker cook`",
                       size, MAX_MANIFEST);
    if (options != NULL && options->public_key_count > 0 && !signature_checked) {
        if (options->public_keys == NULL) return oc_fail(err, OC_ERR_INVALID_ARGUMENT, "oc_bundle_open: public_keys is NULL");
        if (sodium_init() < 0) return oc_fail(err, OC_ERR_OUT_OF_MEMORY, "libsodium could not start");
        status = check_signature(manifest ? manifest : "", size, signature, signature_size, options,
                                 dir ? dir : "bundle", err);
        if (status != OC_OK) return status;
    }
    status = new_bundle(options, &b, err);
    if (status != OC_OK) return status;
    b->is_signed = options != NULL && options->public_key_count > 0;
    if (blob_reader != NULL) {
        if (blob_reader->size == NULL || blob_reader->read == NULL) {
            oc_bundle_close(b);
            return oc_fail(err, OC_ERR_INVALID_ARGUMENT, "oc_bundle_open: the reader needs size and read");
        }
        b->reader = *blob_reader;
        b->has_reader = 1;
    }
    if (dir != NULL && (b->dir = oc_strdup(&b->alloc, dir)) == NULL) {
        oc_bundle_close(b);
        return oc_fail(err, OC_ERR_OUT_OF_MEMORY, "out of memory");
    }
    status = parse_manifest(b, manifest ? manifest : "", size, err);
    if (status != OC_OK) {
        oc_bundle_close(b);
        return status;
    }
    *out = b;
    return OC_OK;
}

oc_status oc_bundle_open_manifest(const void *manifest, size_t size, const oc_reader *blob_reader,
                                  const oc_bundle_options *options, oc_bundle **out, oc_error *err) {
    return open_manifest(manifest, size, blob_reader, options, NULL, options ? options->signature : NULL,
                         options ? options->signature_size : 0, 0, out, err);
}

static oc_status compare_sha256(const model_entry *m, const char *path, const unsigned char digest[32], oc_error *err);

/* verify at open, as open_bundle(verify=True) does: every blob's size and sha256 against the
 * manifest, once; later loads of the same files skip both (and the CRCs). The files are hashed side
 * by side, on up to HASH_WORKERS threads (worker w takes models w, w + workers, ...); the first
 * failing model in name order is reported, as one thread reports it, and progress is reported on
 * the calling thread (worker 0) as models are done. */
#define HASH_WORKERS 8

typedef struct hash_job {
    oc_bundle *b;
    char **paths;                  /* one per model, allocated on the calling thread */
    size_t workers;
    size_t failed_at[HASH_WORKERS]; /* each worker's first failing model (model_count: none) */
    oc_status statuses[HASH_WORKERS]; /* and its status */
    oc_error errors[HASH_WORKERS];  /* and its error */
    size_t done;                    /* models hashed, under oc_lock (worker 0 reports it) */
    size_t lowest_failure;          /* under oc_lock: no worker starts a model past it */
} hash_job;

static oc_status hash_one(oc_bundle *b, model_entry *m, const char *path, oc_error *err) {
    void *data = NULL;
    size_t size = 0;
    oc_status status = inside_folder(b, m, path, err);
    if (status != OC_OK) return status;
    status = oc_map_file(path, &data, &size, m->identity, err);
    if (status == OC_ERR_IO) { /* as open_bundle: the manifest names a file the bundle lacks, or one it may not read */
        int denied = err != NULL && strstr(err->message, "ermission denied") != NULL;
        status = oc_fail(err, OC_ERR_MANIFEST, "%s: blob of '%s' (%s, named by manifest.json) is %s", b->dir, m->name,
                         m->file, denied ? "unreadable: let the game read it (its permissions)"
                                         : "missing or unreadable; re-run `onnx-cooker cook`");
    }
    if (status == OC_OK && (uint64_t)size != m->blob_size)
        status = oc_fail(err, OC_ERR_CHECKSUM,
                         "%s: blob does not match the sha256/size recorded in manifest.json (%zu bytes, the manifest "
                         "says %llu); the file was damaged or replaced: re-run `onnx-cooker cook`", path, size,
                         (unsigned long long)m->blob_size);
    if (status == OC_OK) { /* a piece at a time, let go once hashed: the bundle's largest blob does not
                              pass through the process's resident memory (its peak) at open */
        unsigned char digest[32];
        oc_sha256_pieces(data, size, digest, oc_prefault, oc_release_pages);
        status = compare_sha256(m, path, digest, err);
    }
    oc_unmap(data, size);
    return status;
}

static void hash_worker(void *context, size_t worker) {
    hash_job *job = context;
    oc_bundle *b = job->b;
    size_t i, done, stop;
    job->failed_at[worker] = b->model_count;
    for (i = worker; i < b->model_count; i += job->workers) {
        oc_lock();
        stop = job->lowest_failure;
        oc_unlock();
        if (i > stop) return; /* a model before this one failed: it is the one reported */
        job->statuses[worker] = hash_one(b, &b->models[i], job->paths[i], &job->errors[worker]);
        if (job->statuses[worker] != OC_OK) {
            job->failed_at[worker] = i;
            oc_lock();
            if (i < job->lowest_failure) job->lowest_failure = i;
            oc_unlock();
            return;
        }
        b->models[i].hashed = 1; /* model i is this worker's alone */
        oc_lock();
        done = ++job->done;
        oc_unlock();
        if (worker == 0 && b->progress && done < b->model_count) /* 1.0: the caller, once all are done */
            b->progress(b->progress_user, "check", (double)done / (double)b->model_count);
    }
}

static oc_status hash_every_blob(oc_bundle *b, oc_error *err) {
    hash_job job;
    oc_status status = OC_OK;
    size_t i, w, first;
    if (b->model_count == 0) return OC_OK;
    memset(&job, 0, sizeof job);
    job.b = b;
    job.lowest_failure = b->model_count;
    job.paths = oc_calloc(&b->alloc, b->model_count, sizeof *job.paths);
    if (job.paths == NULL) return oc_fail(err, OC_ERR_OUT_OF_MEMORY, "out of memory");
    for (i = 0; i < b->model_count && status == OC_OK; ++i) {
        const model_entry *m = &b->models[i];
        job.paths[i] = oc_malloc(&b->alloc, strlen(b->dir) + strlen(m->file) + 2);
        if (job.paths[i] == NULL)
            status = oc_fail(err, OC_ERR_OUT_OF_MEMORY, "out of memory");
        else
            sprintf(job.paths[i], "%s/%s", b->dir, m->file);
    }
    if (status == OC_OK) {
        if (b->progress) b->progress(b->progress_user, "check", 0.0);
        job.workers = b->model_count > 1 ? oc_cores() : 1; /* asked only when it matters: it reads /sys */
        if (job.workers > HASH_WORKERS) job.workers = HASH_WORKERS;
        if (job.workers > b->model_count) job.workers = b->model_count;
        if (job.workers <= 1) {
            job.workers = 1;
            hash_worker(&job, 0);
        } else {
            oc_run_parallel(hash_worker, &job, job.workers);
        }
        for (w = 0, first = HASH_WORKERS; w < job.workers; ++w)
            if (job.failed_at[w] < b->model_count && (first == HASH_WORKERS || job.failed_at[w] < job.failed_at[first]))
                first = w;
        if (first != HASH_WORKERS) {
            if (err != NULL) *err = job.errors[first];
            status = job.statuses[first];
        } else if (b->progress) {
            b->progress(b->progress_user, "check", 1.0);
        }
    }
    for (i = 0; i < b->model_count; ++i) oc_free(&b->alloc, job.paths[i]);
    oc_free(&b->alloc, job.paths);
    return status;
}

/* A bundle folder beside `dir` whose name is near `dir`'s (a mistyped platform folder: build/windows-dm),
 * as "<parent>/<name>" in `path` (`cap` bytes): 1, else 0. */
static int near_bundle(const char *dir, char *path, size_t cap) {
    char parent[512], name[256];
    size_t n = strlen(dir), cut;
    while (n > 1 && (dir[n - 1] == '/' || dir[n - 1] == '\\')) n--; /* build/windows-dm/ */
    cut = n;
    while (cut > 0 && dir[cut - 1] != '/' && dir[cut - 1] != '\\') cut--;
    if (cut >= sizeof parent || n - cut >= sizeof name || n == cut) return 0;
    memcpy(parent, dir, cut);
    parent[cut] = '\0';
    if (cut == 0) memcpy(parent, ".", 2);
    memcpy(name, dir + cut, n - cut);
    name[n - cut] = '\0';
    {
        char found[256];
        if (!oc_first_bundle_below(parent, name, found, sizeof found) || strcmp(found, name) == 0) return 0;
        if ((size_t)snprintf(path, cap, "%.*s%s", (int)cut, dir, found) >= cap) return 0;
    }
    return 1;
}

/* `dir`/`name` (allocated from `alloc`), or NULL. */
static char *path_in(const oc_alloc *alloc, const char *dir, const char *name) {
    size_t n = strlen(dir), k = strlen(name);
    char *path = oc_malloc(alloc, n + k + 2);
    if (path == NULL) return NULL;
    memcpy(path, dir, n);
    path[n] = '/';
    memcpy(path + n + 1, name, k + 1);
    return path;
}

/* Whether `path` names the file of `identity` now (zeros: no file then, and none now). */
static int still(const char *path, const uint64_t identity[OC_IDENTITY_WORDS]) {
    uint64_t now[OC_IDENTITY_WORDS];
    oc_path_identity(path, now);
    return memcmp(now, identity, sizeof now) == 0;
}

/* A signed folder bundle's manifest.json (`manifest_path`, read whole into *text, *size) and
 * manifest.json.sig, read as one pair: a cook replaces the manifest, then the signature, so a
 * reader can meet the new manifest with the old signature (or none). The cook says so:
 * manifest.json.signing is there from before it replaces the manifest until the signature is in
 * place. A pair that does not verify is read again, every POLL_MS for at most SETTLE_NS, while the
 * marker is there or either file is no longer the one read (device, inode, size, times); anything
 * else (an edited manifest, a foreign signature) fails at once, and a pair still failing at the
 * deadline fails as it is: a signature is never waived (onnx_cooker/runtime/manifestfile.py). */
static oc_status read_signed_pair(const char *dir, const char *manifest_path, const oc_bundle_options *options,
                                  const oc_alloc *alloc, void **text, size_t *size, oc_error *err) {
    char *sig_path = path_in(alloc, dir, "manifest.json.sig");
    char *marker_path = path_in(alloc, dir, "manifest.json.signing");
    uint64_t deadline = 0;
    int waiting = 0;
    oc_status status;
    *text = NULL;
    *size = 0;
    if (sig_path == NULL || marker_path == NULL) {
        status = oc_fail(err, OC_ERR_OUT_OF_MEMORY, "out of memory");
        goto done;
    }
    for (;;) {
        uint64_t manifest_id[OC_IDENTITY_WORDS], sig_id[OC_IDENTITY_WORDS], now;
        void *signature = NULL;
        size_t signature_size = 0;
        int marker;
        status = oc_read_file_identity(manifest_path, alloc, MAX_MANIFEST, text, size, manifest_id, err);
        if (status != OC_OK) { /* gone between the first read and this one: a cook does not do that */
            if ((status == OC_ERR_IO || status == OC_ERR_TOO_LARGE) && err != NULL) {
                char why[OC_MESSAGE_SIZE];
                memcpy(why, err->message, sizeof why);
                why[sizeof why - 1] = '\0';
                oc_fail(err, OC_ERR_MANIFEST, "no readable manifest.json (%.900s); re-run `onnx-cooker cook`", why);
            }
            if (status == OC_ERR_IO || status == OC_ERR_TOO_LARGE) status = OC_ERR_MANIFEST;
            goto done;
        }
        /* any size up to 1 MiB is read, so that a wrong one is refused by its size, not as missing */
        if (oc_read_file_identity(sig_path, alloc, 1u << 20, &signature, &signature_size, sig_id, NULL) != OC_OK) {
            signature = NULL;
            if (sig_id[0] == 0 && sig_id[1] == 0) oc_path_identity(sig_path, sig_id); /* not opened: what is there */
        }
        status = check_signature(*text, *size, signature, signature_size, options, dir, err);
        oc_free(alloc, signature);
        if (status != OC_ERR_SIGNATURE) goto done; /* OC_OK: the pair verifies */
        marker = oc_path_exists(marker_path);
        if (!marker && still(manifest_path, manifest_id) && still(sig_path, sig_id)) goto done; /* nothing in flux */
        now = oc_monotonic_ns();
        if (!waiting) {
            waiting = 1;
            deadline = now + SETTLE_NS;
        }
        if (now >= deadline || now == 0) { /* no clock: the bound cannot be kept, so no wait */
            if (marker && err != NULL) {
                char why[OC_MESSAGE_SIZE];
                memcpy(why, err->message, sizeof why);
                why[sizeof why - 1] = '\0';
                status = oc_fail(err, OC_ERR_SIGNATURE,
                                 "%.500s; %.300s says a cook was replacing the manifest and its signature, and it did "
                                 "not finish within 2 s: if no cook is running, one stopped half way; re-run "
                                 "`onnx-cooker cook`", why, marker_path);
            }
            goto done;
        }
        oc_free(alloc, *text);
        *text = NULL;
        *size = 0;
        oc_sleep_ms(POLL_MS);
    }
done:
    if (status != OC_OK) {
        oc_free(alloc, *text);
        *text = NULL;
        *size = 0;
    }
    oc_free(alloc, sig_path);
    oc_free(alloc, marker_path);
    return status;
}

static oc_status open_dir(const char *dir, const oc_bundle_options *options, oc_bundle **out, oc_error *err);

static oc_status open_dir_given(const char *dir, const oc_bundle_options *options, oc_bundle **out, oc_error *err);

/* The bundle keeps its folder absolute (as Bundle's root in Python): a later chdir of the game does not
 * point its blob files elsewhere. A working folder that is gone leaves the path as given. */
oc_status oc_bundle_open_dir(const char *dir, const oc_bundle_options *options, oc_bundle **out, oc_error *err) {
    char *absolute = dir != NULL ? oc_absolute_path(dir) : NULL;
    oc_status status = open_dir_given(absolute != NULL ? absolute : dir, options, out, err);
    free(absolute);
    return status;
}

static oc_status open_dir_given(const char *dir, const oc_bundle_options *options, oc_bundle **out, oc_error *err) {
    size_t n = dir ? strlen(dir) : 0, cut;
    oc_alloc alloc;
    char *folder;
    oc_status status;
    /* its manifest.json given for the folder, as the Python loader takes it: that file's folder */
    if (n < sizeof "manifest.json" - 1 || strcmp(dir + n - (sizeof "manifest.json" - 1), "manifest.json") != 0 ||
        !oc_is_regular_file(dir))
        return open_dir(dir, options, out, err);
    cut = n - (sizeof "manifest.json" - 1);
    if (cut > 0 && dir[cut - 1] != '/' && dir[cut - 1] != '\\') return open_dir(dir, options, out, err); /* x-manifest.json */
    while (cut > 1 && (dir[cut - 1] == '/' || dir[cut - 1] == '\\')) cut--; /* the folder without its separator */
    alloc = oc_alloc_from(options ? options->allocator : NULL);
    folder = oc_malloc(&alloc, cut + 2);
    if (folder == NULL) return oc_fail(err, OC_ERR_OUT_OF_MEMORY, "out of memory");
    if (cut == 0) {
        memcpy(folder, ".", 2);
    } else {
        memcpy(folder, dir, cut);
        folder[cut] = '\0';
    }
    status = open_dir(folder, options, out, err);
    oc_free(&alloc, folder);
    return status;
}

static oc_status open_dir(const char *dir, const oc_bundle_options *options, oc_bundle **out, oc_error *err) {
    oc_alloc alloc = oc_alloc_from(options ? options->allocator : NULL);
    size_t n;
    char *path;
    void *text;
    size_t size;
    oc_status status;
    int signed_bundle = options != NULL && options->public_key_count > 0;
    if (dir == NULL || out == NULL) return oc_fail(err, OC_ERR_INVALID_ARGUMENT, "oc_bundle_open_dir: NULL argument");
    *out = NULL;
    n = strlen(dir);
    path = oc_malloc(&alloc, n + sizeof "/manifest.json");
    if (path == NULL) return oc_fail(err, OC_ERR_OUT_OF_MEMORY, "out of memory");
    memcpy(path, dir, n);
    memcpy(path + n, "/manifest.json", sizeof "/manifest.json");
    status = oc_read_file(path, &alloc, MAX_MANIFEST, &text, &size, err);
    if (status != OC_OK) {
        if (status == OC_ERR_IO && err != NULL) {
            char why[OC_MESSAGE_SIZE], first[256], nearby[1024];
            memcpy(why, err->message, sizeof why);
            if (n >= 4 && strcmp(dir + n - 4, ".ocb") == 0) /* a blob file given for its folder */
                oc_fail(err, OC_ERR_MANIFEST, "%.600s is a blob, not a bundle folder: open the folder that holds it "
                        "(its manifest.json), or pass the blob's bytes to oc_blob_open_memory", dir);
            else if (oc_first_bundle_below(dir, NULL, first, sizeof first))
                oc_fail(err, OC_ERR_MANIFEST, "%.600s holds the bundles of its platforms, not one bundle: open one, e.g. "
                        "%.600s/%s", dir, dir, first);
            else if (near_bundle(dir, nearby, sizeof nearby))
                oc_fail(err, OC_ERR_MANIFEST, "no readable manifest.json (%.600s); did you mean %.600s?", why, nearby);
            else
                oc_fail(err, OC_ERR_MANIFEST, "no readable manifest.json (%.900s); cook the platform with `onnx-cooker cook` first",
                        why);
        }
        oc_free(&alloc, path);
        return status == OC_ERR_IO ? OC_ERR_MANIFEST : status;
    }
    if (signed_bundle) { /* read again, with its signature, as one pair */
        oc_free(&alloc, text);
        text = NULL;
        if (options->public_keys == NULL)
            status = oc_fail(err, OC_ERR_INVALID_ARGUMENT, "oc_bundle_open: public_keys is NULL");
        else if (sodium_init() < 0)
            status = oc_fail(err, OC_ERR_OUT_OF_MEMORY, "libsodium could not start");
        else
            status = read_signed_pair(dir, path, options, &alloc, &text, &size, err);
    }
    oc_free(&alloc, path);
    if (status == OC_OK) status = open_manifest(text, size, NULL, options, dir, NULL, 0, 1, out, err);
    if (status == OC_OK) oc_sha256(text, size, (*out)->manifest_sha256);
    oc_free(&alloc, text);
    if (status != OC_OK) return status;
    if ((*out)->verify && (*out)->map_blobs) {
        status = hash_every_blob(*out, err);
        if (status != OC_OK) {
            oc_bundle_close(*out);
            *out = NULL;
        }
    }
    return status;
}

oc_status oc_bundle_open_reader(const oc_reader *reader, const oc_bundle_options *options, oc_bundle **out,
                                oc_error *err) {
    oc_alloc alloc = oc_alloc_from(options ? options->allocator : NULL);
    int64_t size;
    void *text;
    oc_status status;
    if (reader == NULL || reader->size == NULL || reader->read == NULL || out == NULL)
        return oc_fail(err, OC_ERR_INVALID_ARGUMENT, "oc_bundle_open_reader: the reader needs size and read");
    *out = NULL;
    size = reader->size(reader->user, "manifest.json");
    if (size < 0) return oc_fail(err, OC_ERR_MANIFEST, "bundle: the reader has no manifest.json; cook the platform first");
    if ((uint64_t)size > MAX_MANIFEST)
        return oc_fail(err, OC_ERR_MANIFEST, "manifest.json is %lld bytes, over the limit of %u: not a manifest the cooker wrote; re-run `onnx-cooker cook`",
                       (long long)size, MAX_MANIFEST);
    text = oc_malloc(&alloc, (size_t)size + 1);
    if (text == NULL) return oc_fail(err, OC_ERR_OUT_OF_MEMORY, "out of memory");
    if (read_whole(reader, "manifest.json", text, (size_t)size) != size) {
        oc_free(&alloc, text);
        return oc_fail(err, OC_ERR_MANIFEST, "bundle (reader): could not read manifest.json whole; check the archive the reader serves");
    }
    {
        unsigned char signature[crypto_sign_BYTES];
        int64_t sig_size = options != NULL && options->public_key_count > 0 ? reader->size(reader->user, "manifest.json.sig") : -1;
        int present = sig_size == crypto_sign_BYTES &&
                      read_whole(reader, "manifest.json.sig", signature, sizeof signature) == crypto_sign_BYTES;
        /* a signature of the wrong size is refused by its size, before its bytes are read */
        const void *given = present || (sig_size >= 0 && sig_size != crypto_sign_BYTES) ? signature : NULL;
        status = open_manifest(text, (size_t)size, reader, options, NULL, given, given ? (size_t)sig_size : 0, 0, out,
                               err);
    }
    oc_free(&alloc, text);
    return status;
}

void oc_bundle_close(oc_bundle *b) {
    oc_alloc alloc;
    if (b == NULL) return;
    alloc = b->alloc;
    ZSTD_freeDCtx(b->dctx);
    oc_free(&alloc, b->dir);
    oc_arena_free(&b->arena);
    oc_free(&alloc, b);
}

const char *oc_bundle_platform(const oc_bundle *b) { return b ? b->platform : NULL; }
size_t oc_bundle_model_count(const oc_bundle *b) { return b ? b->model_count : 0; }

const char *oc_bundle_model_name(const oc_bundle *b, size_t index) {
    return b && index < b->model_count ? b->models[index].name : NULL;
}

static const model_entry *find_model(const oc_bundle *b, const char *name) {
    model_entry key;
    if (b == NULL || name == NULL) return NULL;
    key.name = name;
    return bsearch(&key, b->models, b->model_count, sizeof key, compare_models);
}

const char *oc_bundle_model_file(const oc_bundle *b, const char *name, uint64_t *size) {
    const model_entry *m = find_model(b, name);
    if (size != NULL) *size = m != NULL ? m->blob_size : 0;
    return m != NULL ? m->file : NULL;
}

static int same_ignoring_case(const char *a, const char *b) {
    for (; *a && *b; ++a, ++b) {
        char x = *a >= 'A' && *a <= 'Z' ? (char)(*a + 32) : *a, y = *b >= 'A' && *b <= 'Z' ? (char)(*b + 32) : *b;
        if (x != y) return 0;
    }
    return *a == *b;
}

static oc_status unknown_model(const oc_bundle *b, const char *name, oc_error *err) {
    size_t i, best = (size_t)-1, best_score = 0, used = 0;
    char names[600];
    /* "did you mean": the listed name that differs only in case, or whose last part is the name
     * (`detector` for `vision/detector`), else the one sharing the longest prefix, where that is
     * at least 3 bytes and half the name (one shared letter suggested an unrelated model) */
    for (i = 0; i < b->model_count; ++i) {
        const char *listed = b->models[i].name, *slash = strrchr(listed, '/');
        size_t k = 0;
        if (same_ignoring_case(listed, name) || (slash != NULL && strcmp(slash + 1, name) == 0)) {
            best = i, best_score = (size_t)-1;
            break;
        }
        while (name[k] && name[k] == listed[k]) ++k;
        if (k > best_score && k >= 3 && 2 * k >= strlen(name)) {
            best_score = k;
            best = i;
        }
    }
    names[0] = '\0'; /* the bundle's names, as many as the message holds (Python lists them all) */
    for (i = 0; i < b->model_count; ++i) {
        int n = snprintf(names + used, sizeof names - used, "%s'%s'", i ? ", " : "", b->models[i].name);
        if (n < 0 || (size_t)n >= sizeof names - used) {
            snprintf(names + used, sizeof names - used, ", ...");
            break;
        }
        used += (size_t)n;
    }
    if (best != (size_t)-1)
        return oc_fail(err, OC_ERR_UNKNOWN_MODEL, "%s: no model '%s' in this %s bundle; did you mean '%s'? it holds %s",
                       where_of(b), name, b->platform, b->models[best].name, names);
    return oc_fail(err, OC_ERR_UNKNOWN_MODEL, "%s: no model '%s' in this %s bundle, which holds %s", where_of(b), name,
                   b->platform, b->model_count ? names : "none");
}

size_t oc_bundle_signature_count(const oc_bundle *b, const char *name, int outputs) {
    const model_entry *m = find_model(b, name);
    return m == NULL ? 0 : outputs ? m->output_count : m->input_count;
}

oc_status oc_bundle_signature(const oc_bundle *b, const char *name, int outputs, size_t index, oc_tensor_info *out,
                              oc_error *err) {
    const model_entry *m = find_model(b, name);
    if (b == NULL || name == NULL || out == NULL) return oc_fail(err, OC_ERR_INVALID_ARGUMENT, "oc_bundle_signature: NULL argument");
    if (m == NULL) return unknown_model(b, name, err);
    if (index >= (outputs ? m->output_count : m->input_count))
        return oc_fail(err, OC_ERR_INVALID_ARGUMENT, "model '%s' has %zu %s", name, outputs ? m->output_count : m->input_count,
                       outputs ? "outputs" : "inputs");
    *out = outputs ? m->outputs[index] : m->inputs[index];
    return OC_OK;
}

static const tensor_dims *signature_dims(const oc_bundle *b, const char *name, int outputs, size_t index) {
    const model_entry *m = find_model(b, name);
    if (m == NULL || index >= (outputs ? m->output_count : m->input_count)) return NULL;
    return outputs ? &m->output_dims[index] : &m->input_dims[index];
}

int64_t oc_bundle_signature_rank(const oc_bundle *b, const char *name, int outputs, size_t index) {
    const tensor_dims *dims = signature_dims(b, name, outputs, index);
    return dims != NULL ? dims->rank : -1;
}

oc_status oc_bundle_signature_dim(const oc_bundle *b, const char *name, int outputs, size_t index, size_t dim,
                                  int64_t *size, const char **symbol, oc_error *err) {
    const tensor_dims *dims;
    if (b == NULL || name == NULL || size == NULL)
        return oc_fail(err, OC_ERR_INVALID_ARGUMENT, "oc_bundle_signature_dim: NULL argument");
    if (find_model(b, name) == NULL) return unknown_model(b, name, err);
    dims = signature_dims(b, name, outputs, index);
    if (dims == NULL || dims->rank < 0 || dim >= (size_t)dims->rank)
        return oc_fail(err, OC_ERR_INVALID_ARGUMENT, "model '%s': %s %zu has no dimension %zu (its rank: %lld)", name,
                       outputs ? "output" : "input", index, dim, (long long)(dims != NULL ? dims->rank : -1));
    *size = dims->sizes[dim];
    if (symbol != NULL) *symbol = dims->symbols[dim];
    return OC_OK;
}

static void hex(const unsigned char *digest, char *text) {
    static const char digits[] = "0123456789abcdef";
    size_t i;
    for (i = 0; i < 32; ++i) {
        text[2 * i] = digits[digest[i] >> 4];
        text[2 * i + 1] = digits[digest[i] & 15];
    }
    text[64] = '\0';
}

/* A blob's sha256 against its manifest entry. */
static oc_status compare_sha256(const model_entry *m, const char *path, const unsigned char digest[32], oc_error *err) {
    char text[65];
    hex(digest, text);
    if (strcmp(text, m->blob_sha256) != 0)
        return oc_fail(err, OC_ERR_CHECKSUM,
                       "%s: blob does not match the sha256/size recorded in manifest.json; the file was damaged or "
                       "replaced: re-run `onnx-cooker cook`", path);
    return OC_OK;
}

/* The blob bytes against the manifest entry. */
static oc_status check_sha256(const model_entry *m, const char *path, const uint8_t *data, size_t size, oc_error *err) {
    unsigned char digest[32];
    oc_sha256(data, size, digest);
    return compare_sha256(m, path, digest, err);
}

/* The bundle's decompression context, lent to this open; NULL (the decode makes its own) while
 * another thread's open has it, or where it cannot be made. Give it back with dctx_lent = 0 under
 * oc_lock. Engines open blobs of one bundle on several threads at once: a ZSTD_DCtx decodes one
 * frame at a time (two opens sharing it reported intact frames as damaged). */
static ZSTD_DCtx *borrow_dctx(oc_bundle *b) {
    ZSTD_DCtx *dctx = NULL;
    int make;
    oc_lock();
    make = !b->dctx_lent && b->dctx == NULL;
    if (!b->dctx_lent) {
        dctx = b->dctx;
        b->dctx_lent = 1; /* this open's, or reserved while it makes the context */
    }
    oc_unlock();
    if (make) { /* made outside the lock: the allocator hooks are the caller's code */
        ZSTD_customMem mem;
        mem.customAlloc = bundle_zstd_alloc;
        mem.customFree = bundle_zstd_free;
        mem.opaque = &b->alloc;
        dctx = ZSTD_createDCtx_advanced(mem);
        oc_lock();
        b->dctx = dctx;
        b->dctx_lent = dctx != NULL;
        oc_unlock();
    }
    return dctx;
}

/* The bundle's progress callback for a blob it checks: the bundle reports "check" 0.0 before the
 * sha256 pass, so the blob's own "check" 0.0 after it is not passed on (each stage starts once). */
typedef struct progress_relay {
    oc_progress_fn progress;
    void *user;
} progress_relay;

static void relay_after_check_started(void *user, const char *stage, double fraction) {
    const progress_relay *relay = (const progress_relay *)user;
    if (fraction == 0.0 && strcmp(stage, "check") == 0) return;
    relay->progress(relay->user, stage, fraction);
}

/* `trusted`: these are the very bytes hashed when the bundle was opened (same file identity). */
static oc_status open_checked(oc_bundle *b, const model_entry *m, const char *path, const uint8_t *data, size_t size,
                              void *map, size_t map_size, void *buffer, int trusted, oc_blob **out, oc_error *err) {
    oc_blob_options options;
    oc_blob_info info;
    oc_status status;
    ZSTD_DCtx *dctx;
    progress_relay relay;
    if ((uint64_t)size != m->blob_size)
        return oc_fail(err, OC_ERR_CHECKSUM,
                       "%s: blob does not match the sha256/size recorded in manifest.json (%zu bytes, the manifest says "
                       "%llu); the file was damaged or replaced: re-run `onnx-cooker cook`", path, size,
                       (unsigned long long)m->blob_size);
    if (b->progress) b->progress(b->progress_user, "check", 0.0);
    if ((b->verify || b->is_signed) && !trusted) { /* a signed bundle: on every load (skip_verify or not) */
        status = check_sha256(m, path, data, size, err);
        if (status != OC_OK) return status;
    }
    memset(&options, 0, sizeof options);
    options.max_model_size = b->max_model_size;
    options.skip_raw_check = b->verify || b->is_signed || trusted; /* a checked sha256 covers every byte */
    options.allocator = NULL;
    relay.progress = b->progress;
    relay.user = b->progress_user;
    options.progress = b->progress ? relay_after_check_started : NULL;
    options.progress_user = &relay;
    {
        oc_allocator hooks;
        hooks.alloc = b->alloc.alloc;
        hooks.free = b->alloc.free;
        hooks.user = b->alloc.user;
        options.allocator = &hooks;
        dctx = borrow_dctx(b);
        status = oc_blob_parse_with(data, size, &options, path, map, map_size, buffer, dctx, out, err);
        if (dctx != NULL) {
            oc_lock();
            b->dctx_lent = 0;
            oc_unlock();
        }
    }
    if (status != OC_OK) return status;
    oc_blob_get_info(*out, &info, NULL);
    if ((m->cook_key && strcmp(m->cook_key, info.cook_key) != 0) ||
        (m->model_sha256 && strcmp(m->model_sha256, info.model_sha256) != 0)) {
        const char *which = m->cook_key && strcmp(m->cook_key, info.cook_key) != 0 ? "cook_key" : "model_sha256";
        (*out)->map = NULL; /* the caller frees what it passed when this fails */
        (*out)->buffer = NULL;
        oc_blob_close(*out); /* `info` points into it: nothing of it is read from here on */
        *out = NULL;
        return oc_fail(err, OC_ERR_CHECKSUM,
                       "%s: blob is not the one manifest.json lists for '%s' (its %s differs); the file was replaced: "
                       "re-run `onnx-cooker cook`", path, m->name, which);
    }
    return OC_OK;
}

/* What the `size` bytes at `data` are, for the message of bytes refused as model `m`'s blob: another
 * platform's blob (the pak of another target), another model's, another cook's, or damaged bytes.
 * Reads only (the blob's own checks, on one thread) and keeps nothing: a failure path. */
static void identify_blob(oc_bundle *b, const model_entry *m, const void *data, size_t size, char *out, size_t cap) {
    oc_blob_options options;
    oc_allocator hooks;
    oc_blob_info info;
    oc_blob *other = NULL;
    memset(&options, 0, sizeof options);
    options.max_model_size = b->max_model_size;
    options.threads = 1;
    hooks.alloc = b->alloc.alloc;
    hooks.free = b->alloc.free;
    hooks.user = b->alloc.user;
    options.allocator = &hooks;
    if (oc_blob_parse(data, size, &options, "bytes", NULL, 0, NULL, &other, NULL) != OC_OK) {
        snprintf(out, cap, "they are a damaged blob, or no blob at all");
        return;
    }
    oc_blob_get_info(other, &info, NULL);
    if (strcmp(info.platform, b->platform) != 0)
        snprintf(out, cap, "they are the %.64s blob of '%.96s', and this bundle is %.64s's", info.platform, info.name,
                 b->platform);
    else if (strcmp(info.name, m->name) != 0)
        snprintf(out, cap, "they are the blob of model '%.96s'", info.name);
    else if (m->cook_key == NULL || strcmp(info.cook_key, m->cook_key) != 0)
        snprintf(out, cap, "they are a blob of '%.96s' from another cook of %.64s", info.name, info.platform);
    else
        snprintf(out, cap, "they hold this cook of '%.96s', in bytes that differ from the file's", info.name);
    oc_blob_close(other);
}

oc_status oc_bundle_open_blob_memory(oc_bundle *b, const char *name, const void *data, size_t size, oc_blob **out,
                                     oc_error *err) {
    const model_entry *m;
    oc_status status;
    if (b == NULL || name == NULL || out == NULL || (data == NULL && size))
        return oc_fail(err, OC_ERR_INVALID_ARGUMENT, "oc_bundle_open_blob_memory: NULL argument");
    *out = NULL;
    m = find_model(b, name);
    if (m == NULL) return unknown_model(b, name, err);
    {
        void *copy = NULL; /* bytes at a misaligned address: a copy the blob owns */
        if ((status = oc_aligned_copy(&b->alloc, &data, size, &copy, err)) != OC_OK) return status;
        status = open_checked(b, m, m->file, data, size, NULL, 0, copy, 0, out, err);
        if (status == OC_ERR_CHECKSUM && err != NULL &&
            (strstr(err->message, "does not match the sha256/size") != NULL ||
             strstr(err->message, "is not the one manifest.json lists") != NULL)) {
            /* bytes the caller chose: most often another platform's or another cook's blob, not damage */
            char what[320];
            identify_blob(b, m, data, size, what, sizeof what);
            status = oc_fail(err, OC_ERR_CHECKSUM,
                             "the %zu bytes given for model '%s' are not its blob in this bundle: %s; manifest.json "
                             "names %s (%llu bytes, sha256 %.16s...); pass that file's bytes (oc_bundle_model_file "
                             "names it; a blob of an earlier cook does not match a newer manifest), or re-run "
                             "`onnx-cooker cook` if the file itself was damaged",
                             size, name, what, m->file, (unsigned long long)m->blob_size, m->blob_sha256);
        }
        if (status != OC_OK) oc_free(&b->alloc, copy);
    }
    return status;
}

/* Why a folder bundle's blob file of `m` is not there (Bundle._gone): a newer manifest replaced the
 * one the bundle was opened from (open it again), the folder or its manifest is gone (moved,
 * deleted, unmounted: no cook did that), or the bundle itself lacks the file (re-cook). */
static oc_status missing_blob(oc_bundle *b, const model_entry *m, const char *path, oc_error *err) {
    char *manifest = path_in(&b->alloc, b->dir, "manifest.json");
    void *text = NULL;
    size_t size = 0;
    oc_error why;
    oc_status status;
    unsigned char digest[32];
    if (manifest == NULL) return oc_fail(err, OC_ERR_OUT_OF_MEMORY, "out of memory");
    memset(&why, 0, sizeof why);
    status = oc_read_file(manifest, &b->alloc, MAX_MANIFEST, &text, &size, &why);
    oc_free(&b->alloc, manifest);
    if (status == OC_OK) {
        oc_sha256(text, size, digest);
        oc_free(&b->alloc, text);
    }
    if (status == OC_ERR_OUT_OF_MEMORY) return oc_fail(err, status, "out of memory");
    if (status != OC_OK && !oc_is_folder(b->dir))
        return oc_fail(err, OC_ERR_MANIFEST, "%.300s: blob of '%.100s' is missing and the bundle folder %.300s is gone "
                       "(moved, deleted or unmounted) since oc_bundle_open_dir opened it; open the bundle where it is "
                       "now (or restore it)", path, m->name, b->dir);
    if (status != OC_OK)
        return oc_fail(err, OC_ERR_MANIFEST, "%.300s: blob of '%.100s' is missing and its bundle's manifest.json cannot "
                       "be read (%.300s) since oc_bundle_open_dir opened it; open the bundle where it is now (or "
                       "restore it)", path, m->name, why.message);
    if (memcmp(digest, b->manifest_sha256, sizeof digest) != 0)
        return oc_fail(err, OC_ERR_MANIFEST, "%.300s: blob of '%.100s' is gone: a newer cook replaced the bundle since "
                       "it was opened; close it and call oc_bundle_open_dir(\"%.300s\") again", path, m->name, b->dir);
    return oc_fail(err, OC_ERR_MANIFEST, "%.300s: cannot open (No such file or directory): blob of '%.100s' (named by "
                   "manifest.json) is missing; re-run `onnx-cooker cook` to rebuild the bundle", path, m->name);
}

oc_status oc_bundle_open_blob(oc_bundle *b, const char *name, oc_blob **out, oc_error *err) {
    const model_entry *m;
    oc_status status;
    char *path;
    void *data = NULL;
    size_t size = 0;
    uint64_t limit;
    if (b == NULL || name == NULL || out == NULL) return oc_fail(err, OC_ERR_INVALID_ARGUMENT, "oc_bundle_open_blob: NULL argument");
    *out = NULL;
    m = find_model(b, name);
    if (m == NULL) return unknown_model(b, name, err);
    limit = b->max_model_size + (b->max_model_size >> 8) + MAX_HEADER_SIZE;
    if (m->blob_size > limit)
        return oc_fail(err, OC_ERR_MANIFEST, "%s: manifest entry '%s' declares an oversized blob; raise max_model_size if the model is that large, else re-run `onnx-cooker cook`",
                       where_of(b), name);
    if (b->progress) b->progress(b->progress_user, "read", 0.0);
    if (b->has_reader) {
        int64_t got, have = b->reader.size(b->reader.user, m->file);
        if (have < 0)
            return oc_fail(err, OC_ERR_MANIFEST, "%s: blob of '%s' (%s, named by manifest.json) is missing: the reader has no "
                           "such file; re-run `onnx-cooker cook`", where_of(b), name, m->file);
        if ((uint64_t)have != m->blob_size)
            return oc_fail(err, OC_ERR_CHECKSUM, "%s: blob does not match the sha256/size recorded in manifest.json; the file "
                           "was damaged or replaced: re-run `onnx-cooker cook`", m->file);
        data = oc_malloc(&b->alloc, (size_t)have);
        if (data == NULL) return oc_fail(err, OC_ERR_OUT_OF_MEMORY, "out of memory for blob %s (%lld bytes)", m->file, (long long)have);
        got = read_whole(&b->reader, m->file, data, (size_t)have);
        if (got != have) {
            oc_free(&b->alloc, data);
            return oc_fail(err, OC_ERR_IO, "%s: the reader returned %lld of %lld bytes", m->file, (long long)got, (long long)have);
        }
        if (b->progress) b->progress(b->progress_user, "read", 1.0);
        status = open_checked(b, m, m->file, data, (size_t)have, NULL, 0, data, 0, out, err);
        if (status == OC_OK && oc_blob_name_file(*out, m->file) != OC_OK) {
            oc_blob_close(*out); /* it owns data now */
            *out = NULL;
            return oc_fail(err, OC_ERR_OUT_OF_MEMORY, "out of memory");
        }
        if (status != OC_OK) oc_free(&b->alloc, data);
        return oc_error_in_file(err, status, m->file);
    }
    if (b->dir == NULL)
        return oc_fail(err, OC_ERR_INVALID_ARGUMENT, "bundle opened from a manifest without a reader: use oc_bundle_open_blob_memory");
    path = oc_malloc(&b->alloc, strlen(b->dir) + strlen(m->file) + 2);
    if (path == NULL) return oc_fail(err, OC_ERR_OUT_OF_MEMORY, "out of memory");
    sprintf(path, "%s/%s", b->dir, m->file);
    status = inside_folder(b, m, path, err);
    if (status != OC_OK) {
        oc_free(&b->alloc, path);
        return status;
    }
    /* Below SMALL_BLOB a read costs less than a mapping and its page faults (as Bundle.session) */
    if (b->map_blobs && m->blob_size >= SMALL_BLOB) {
        uint64_t identity[OC_IDENTITY_WORDS];
        status = oc_map_file(path, &data, &size, identity, err);
        if (status == OC_OK) {
            int trusted = !b->is_signed && m->hashed && identity[5] != 0 &&
                          memcmp(identity, m->identity, sizeof identity) == 0;
            if (b->progress) b->progress(b->progress_user, "read", 1.0);
            status = open_checked(b, m, path, data, size, data, size, NULL, trusted, out, err);
            if (status != OC_OK) oc_unmap(data, size);
            if (status == OC_OK && identity[5] != 0 && oc_blob_set_file(*out, path, identity, !b->is_signed) != OC_OK) {
                oc_blob_close(*out);
                *out = NULL;
                status = oc_fail(err, OC_ERR_OUT_OF_MEMORY, "out of memory");
            }
        }
    } else {
        status = oc_read_file(path, &b->alloc, m->blob_size, &data, &size, err); /* no more than listed */
        if (status == OC_ERR_TOO_LARGE)
            status = oc_fail(err, OC_ERR_CHECKSUM, "%s: blob does not match the sha256/size recorded in manifest.json; "
                             "the file was damaged or replaced: re-run `onnx-cooker cook`", path);
        if (status == OC_OK) {
            if (b->progress) b->progress(b->progress_user, "read", 1.0);
            status = open_checked(b, m, path, data, size, NULL, 0, data, 0, out, err);
            if (status != OC_OK) oc_free(&b->alloc, data);
            if (status == OC_OK && oc_blob_name_file(*out, path) != OC_OK) {
                oc_blob_close(*out);
                *out = NULL;
                status = oc_fail(err, OC_ERR_OUT_OF_MEMORY, "out of memory");
            }
        }
    }
    if (status == OC_ERR_IO && !oc_path_exists(path)) { /* as Bundle._gone: a newer cook, a folder gone, or a lack */
        status = missing_blob(b, m, path, err);
    } else if (status == OC_ERR_IO) { /* as Bundle.session: the manifest names a file the game may not read */
        char why[OC_MESSAGE_SIZE] = "";
        if (err != NULL) memcpy(why, err->message, sizeof why);
        why[sizeof why - 1] = '\0';
        status = oc_fail(err, OC_ERR_MANIFEST, "%.900s: blob of '%s' (named by manifest.json) is missing or unreadable; %s",
                         why, name, strstr(why, "ermission denied") != NULL ? "let the game read it (its permissions)"
                                                                            : "re-run `onnx-cooker cook`");
    }
    oc_error_in_file(err, status, path); /* a damaged blob's message ends with the fix, as in Python */
    oc_free(&b->alloc, path);
    return status;
}
