/*
 * onnx_cooker.h - read onnx-cooker bundles and blobs, and create onnxruntime sessions from them.
 *
 * The native counterpart of the Python loader (onnx_cooker/runtime/): a game opens a cooked bundle
 * (a folder holding manifest.json and one blob per model) or a single blob held in memory, checks
 * it, and either takes the model's bytes and session recipe to create sessions its own way
 * ("unpack" level), or lets this library create the OrtSession through the onnxruntime C API
 * ("session" level). The format is docs/bundle-format.md; the reference is docs/native.md.
 *
 * C99. No C++ types cross this interface: plain structs, plain function pointers plus a void*
 * user pointer for callbacks, so that C++ engines and C# (P/Invoke) call it as they are.
 *
 * Errors: every function that can fail returns an oc_status and, when `err` is not NULL, fills it
 * with the status and a message naming the file or model, what was wrong and how to fix it. No
 * function aborts, whatever the bytes it is given; every byte read from a file is treated as hostile.
 *
 * Ownership (also stated at each function):
 *   - Memory the caller passes in (blob bytes) is BORROWED: it must stay valid and unchanged until
 *     the oc_blob and every session created from it are gone (sessions use raw weights in place).
 *   - Objects this library returns (oc_bundle, oc_blob, oc_runtime) are OWNED by the caller and
 *     released with their *_close/_release function; strings they return live as long as they do.
 *   - An OrtSession created here is owned by the caller (release it with the OrtApi's
 *     ReleaseSession); it borrows the oc_blob, which borrows the caller's bytes or holds the
 *     mapped file: release the session first, then the blob, then the bundle, then the runtime.
 *
 * Thread safety: threads may share a bundle, a blob and a runtime, as an engine's async loading
 * does: they may open blobs of one bundle (oc_bundle_open_blob, oc_bundle_open_blob_memory), create
 * and release sessions with one runtime and from one blob (oc_session_create,
 * oc_session_create_on_devices, oc_session_release) and call the getters, all at once; the
 * caller's callbacks (reader, progress, allocator) are then called from those threads. Closing an
 * object (oc_bundle_close, oc_blob_close, oc_runtime_release) must not overlap any other use of it.
 *
 * Paths (files, folders, the onnxruntime library) are UTF-8 on every platform; on Windows they are
 * converted to UTF-16 for the file system and LoadLibraryExW (a path that is not UTF-8 is refused).
 */
#ifndef ONNX_COOKER_H
#define ONNX_COOKER_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(_WIN32) && defined(OC_BUILDING_DLL)
#define OC_API __declspec(dllexport)
#elif defined(_WIN32) && defined(OC_USING_DLL)
#define OC_API __declspec(dllimport)
#elif defined(__GNUC__)
#define OC_API __attribute__((visibility("default")))
#else
#define OC_API
#endif

#define OC_VERSION_MAJOR 0
#define OC_VERSION_MINOR 2
#define OC_VERSION_PATCH 1
/* The blob format version this library reads (others are OC_ERR_UNSUPPORTED_VERSION). */
#define OC_BLOB_FORMAT_VERSION 3
#define OC_MANIFEST_VERSION 1

/* The same causes as the Python loader's BundleError subclasses (onnx_cooker/runtime/errors.py). */
typedef enum oc_status {
    OC_OK = 0,
    OC_ERR_INVALID_ARGUMENT = 1,     /* a NULL pointer or a bad value from the caller */
    OC_ERR_OUT_OF_MEMORY = 2,        /* an allocation failed */
    OC_ERR_IO = 3,                   /* a file could not be opened, mapped or read */
    OC_ERR_NOT_A_BLOB = 4,           /* NotABlobError: not an onnx-cooker blob at all */
    OC_ERR_TRUNCATED = 5,            /* TruncatedBlobError: the blob is cut off */
    OC_ERR_CORRUPT = 6,              /* CorruptBlobError: the header or layout breaks the format */
    OC_ERR_CHECKSUM = 7,             /* ChecksumMismatchError: damaged or replaced bytes */
    OC_ERR_UNSUPPORTED_VERSION = 8,  /* UnsupportedBlobVersionError: another blob format version */
    OC_ERR_TOO_LARGE = 9,            /* BlobTooLargeError: declares more than max_model_size */
    OC_ERR_MANIFEST = 10,            /* ManifestError: manifest.json missing, damaged or invalid */
    OC_ERR_UNKNOWN_MODEL = 11,       /* UnknownModelError: no such model in the bundle */
    OC_ERR_SIGNATURE = 12,           /* SignatureError: the manifest's signature is missing or not trusted */
    OC_ERR_INCOMPATIBLE_RUNTIME = 13,/* IncompatibleRuntimeError: onnxruntime too old for the blob, or
                                        without a kernel for one of its operators */
    OC_ERR_RUNTIME_LOAD = 14,        /* libonnxruntime could not be loaded or lacks the API needed */
    OC_ERR_SESSION_CREATE = 15       /* SessionCreateError: onnxruntime refused the session */
} oc_status;

#define OC_MESSAGE_SIZE 1024

/* Filled by every failing call when not NULL; `message` is NUL-terminated UTF-8. */
typedef struct oc_error {
    oc_status status;
    char message[OC_MESSAGE_SIZE];
} oc_error;

/* A static, NUL-terminated name of a status: "OC_ERR_CHECKSUM", ... */
OC_API const char *oc_status_name(oc_status status);

/* Allocator hooks for everything this library allocates (NULL or zeroed: malloc/free).
 * alloc returns memory of `size` bytes aligned to `alignment` (a power of two <= 4096) or NULL. */
typedef struct oc_allocator {
    void *(*alloc)(void *user, size_t size, size_t alignment);
    void (*free)(void *user, void *ptr);
    void *user;
} oc_allocator;

/* Progress for loading screens: stage is "read", "check", "decompress" or "session"; fraction is
 * 0.0 when the stage starts and 1.0 when it ends. Called on the calling thread. */
typedef void (*oc_progress_fn)(void *user, const char *stage, double fraction);

/* ---------------------------------------------------------------------------------------------
 * Blobs (the "unpack" level)
 * ------------------------------------------------------------------------------------------- */

typedef struct oc_blob oc_blob;

typedef enum oc_model_format { OC_FORMAT_ONNX = 0, OC_FORMAT_ORT = 1 } oc_model_format;

typedef struct oc_blob_options {
    uint64_t max_model_size;        /* 0: 2 GiB, the Python loader's default */
    int skip_raw_check;             /* 0 (default): check the CRC-32s of raw extents; 1: skip (the
                                       caller checked the whole blob's sha256 already) */
    int threads;                    /* zstd frames are decoded, and raw extents' CRC-32s read, on
                                       this many threads; 0 (default): one per core. The allocator
                                       hooks are then called from them */
    const oc_allocator *allocator;  /* NULL: malloc/free. Copied; its `user` must outlive the blob,
                                       and its functions must be thread-safe when threads != 1 */
    oc_progress_fn progress;        /* NULL: none */
    void *progress_user;
} oc_blob_options;

/* Options structs: zero-initialize them ({0} / memset) for the defaults, then set what you need. */

/* Blob bytes at an address that is a multiple of this are used where they lie; elsewhere (a pak
 * buffer at an odd offset) they are copied once into memory the blob owns (docs/native.md). */
#define OC_BLOB_ALIGNMENT 8

/* Check `size` bytes at `data` as a blob (header CRC, layout, extents within the blob, raw CRC-32s,
 * zstd frames decoded with their checksums) and keep them for the getters below.
 * BORROWS data: it must outlive *out and every session created from it (at an address that is not
 * a multiple of OC_BLOB_ALIGNMENT it is copied and not read after the open). On failure *out is
 * NULL. options may be NULL (defaults). */
OC_API oc_status oc_blob_open_memory(const void *data, size_t size, const oc_blob_options *options,
                                     oc_blob **out, oc_error *err);

/* Map the blob file at `path` read-only and open it as oc_blob_open_memory does; the mapping is
 * owned by the blob and unmapped by oc_blob_close. A file truncated in place while mapped raises
 * SIGBUS (the cooker only ever replaces blobs by rename, which a mapping survives). */
OC_API oc_status oc_blob_open_file(const char *path, const oc_blob_options *options, oc_blob **out,
                                   oc_error *err);

/* Release a blob (NULL is fine). Sessions created from it must be released before. It also
 * releases the shared initializers its sessions were given (OC_LOAD_ONNX_SHARED: OrtValues over
 * its weights, which the blob owns), through the OrtApi that made them: with oc_runtime_from_api,
 * close the blob while that onnxruntime is still loaded (libraries oc_runtime_load loads stay). */
OC_API void oc_blob_close(oc_blob *blob);

/* What the header says. Strings live as long as the blob. */
typedef struct oc_blob_info {
    const char *name;                /* the model's name ("vision/detector") */
    const char *platform;            /* the platform it was cooked for */
    oc_model_format format;
    const char *min_runtime_version; /* oldest onnxruntime that loads it ("1.16") */
    const char *cook_key;
    const char *model_sha256;
    uint64_t model_size;             /* graph + weights bytes */
    uint64_t graph_size;             /* bytes of the model file */
    uint64_t weights_size;           /* bytes of the weights section (0: none) */
    const char *weights_file;        /* the name the graph's external-data references use, or NULL */
    int saved_runtime_optimizations; /* ORT "runtime" style: replay saved optimizations */
    uint32_t blob_format_version;
} oc_blob_info;

OC_API oc_status oc_blob_get_info(const oc_blob *blob, oc_blob_info *out, oc_error *err);

/* The model file (the .onnx protobuf or .ort flatbuffer): a view into the caller's bytes when it
 * is stored raw, else decoded once into memory the blob owns. Valid as long as the blob. */
OC_API oc_status oc_blob_model(oc_blob *blob, const void **bytes, size_t *size, oc_error *err);

/* The weights section (ONNX only; *size 0 and *bytes NULL when there is none), as the graph's
 * external-data references name it: file name `info.weights_file`, offsets within this buffer.
 * In place when stored raw (64-byte aligned tensors), else decoded into memory the blob owns. */
OC_API oc_status oc_blob_weights(oc_blob *blob, const void **bytes, size_t *size, oc_error *err);

/* The session recipe the cook wrote: EPs in order of preference, and by EP name (any EP, the
 * CPU EP included) its provider options and the session options to apply when it is used: named
 * ones ("enable_mem_pattern", "execution_mode", "graph_optimization_level") and onnxruntime config
 * entries, every value as the string the Python loader passes ("True"/"False" for booleans).
 * Indices run from 0 to the count - 1; strings live as long as the blob. */
OC_API size_t oc_blob_ep_count(const oc_blob *blob);
OC_API const char *oc_blob_ep_name(const oc_blob *blob, size_t index); /* NULL past the end */
OC_API size_t oc_blob_provider_option_count(const oc_blob *blob, const char *ep);
OC_API oc_status oc_blob_provider_option(const oc_blob *blob, const char *ep, size_t index, const char **key,
                                         const char **value);
OC_API size_t oc_blob_session_option_count(const oc_blob *blob, const char *ep);
OC_API oc_status oc_blob_session_option(const oc_blob *blob, const char *ep, size_t index, const char **key,
                                        const char **value);

/* Whether the recipe asks only for what a blob may (oc_session_create checks the same before it
 * applies any): OC_OK, or OC_ERR_SESSION_CREATE naming the first option refused. Refused are
 * session config entries not on the loader's allow-list (docs/settings.md; others may name files
 * onnxruntime reads or writes) or owned by the load paths, named options with values onnxruntime
 * has no name for, and provider options whose name or value may point at a file, folder, library
 * or memory address (QNN backend_path, OpenVINO cache_dir, ...). At the unpack level, call it
 * before applying the recipe to sessions of your own. */
OC_API oc_status oc_blob_check_recipe(const oc_blob *blob, oc_error *err);

/* ---------------------------------------------------------------------------------------------
 * Bundles
 * ------------------------------------------------------------------------------------------- */

typedef struct oc_bundle oc_bundle;

/* Caller-supplied file access (pak/IoStore archives). `path` is relative to the bundle ("manifest.json",
 * "vision/detector.0a1b2c3d4e5f6071.ort.ocb"). size: the file's size in bytes, or -1 when missing
 * (then fill `message`, at most OC_MESSAGE_SIZE bytes, if you can say why). read: up to `count`
 * bytes at `offset` into `buffer`; return the bytes read (fewer is fine: the library asks again
 * from where it stopped, as over POSIX read(); 0 at the end of the file) or -1 for an error. */
typedef struct oc_reader {
    int64_t (*size)(void *user, const char *path);
    int64_t (*read)(void *user, const char *path, uint64_t offset, void *buffer, size_t count);
    void *user;
} oc_reader;

typedef struct oc_bundle_options {
    uint64_t max_model_size;        /* 0: 2 GiB */
    int skip_verify;                /* 0 (default): check each blob's size and sha256 against the
                                       manifest (a folder bundle with mapped blobs: every blob once,
                                       when the bundle is opened, on up to 8 threads (progress on the
                                       calling thread), and a blob file still the one hashed
                                       then is not hashed or CRC-checked again when it is loaded;
                                       otherwise each blob when it is loaded); 1: size only (the
                                       blob's own CRCs and zstd checksums still catch damage). A
                                       signed bundle checks every blob's sha256 on every load. */
    int read_blobs;                 /* 0 (default): map blob files read-only; 1: read them into memory
                                       (where a file may be rewritten in place while mapped) */
    /* Trusted Ed25519 public keys, 32 raw bytes each, `public_key_count` of them back to back
     * (several: key rotation). When given, manifest.json.sig (64 bytes) must be a signature of
     * manifest.json by one of them (OC_ERR_SIGNATURE otherwise), and each blob's sha256 is checked
     * on every load. Borrowed during the open call only. */
    const unsigned char *public_keys;
    size_t public_key_count;
    /* For oc_bundle_open_manifest with public keys: the manifest.json.sig bytes (NULL: missing). */
    const void *signature;
    size_t signature_size;
    const oc_allocator *allocator;  /* NULL: malloc/free */
    oc_progress_fn progress;
    void *progress_user;
} oc_bundle_options;

/* Open the bundle in folder `dir` (its manifest.json) on the local file system; a path to the bundle's
 * manifest.json opens its folder's bundle, as the Python loader's open_bundle takes one. A relative
 * `dir` is made absolute here, against the working folder of this call: a later chdir does not move
 * the bundle. */
OC_API oc_status oc_bundle_open_dir(const char *dir, const oc_bundle_options *options, oc_bundle **out,
                                    oc_error *err);

/* Open a bundle through caller callbacks; `reader` is copied, its `user` must outlive the bundle. */
OC_API oc_status oc_bundle_open_reader(const oc_reader *reader, const oc_bundle_options *options,
                                       oc_bundle **out, oc_error *err);

/* Open a bundle whose manifest.json bytes the caller holds (`blob_reader` then reads the blobs:
 * NULL when every blob is opened with oc_bundle_open_blob_memory). manifest is copied. */
OC_API oc_status oc_bundle_open_manifest(const void *manifest, size_t size, const oc_reader *blob_reader,
                                         const oc_bundle_options *options, oc_bundle **out,
                                         oc_error *err);

/* Release a bundle (NULL is fine). Blobs opened from it stay valid: each holds its own bytes. */
OC_API void oc_bundle_close(oc_bundle *bundle);

OC_API const char *oc_bundle_platform(const oc_bundle *bundle);
OC_API size_t oc_bundle_model_count(const oc_bundle *bundle);
/* Models in name order; NULL past the end. */
OC_API const char *oc_bundle_model_name(const oc_bundle *bundle, size_t index);

/* The blob file manifest.json names for model `name` (a relative POSIX path inside the bundle folder:
 * what a game packs and reads for oc_bundle_open_blob_memory or a reader), and its size in bytes
 * into `size` (may be NULL); NULL (size 0) for a model the bundle lacks. Lives as long as the
 * bundle. After a re-cook the folder also holds the previous blobs for a while: the manifest's
 * file is the one that matches. */
OC_API const char *oc_bundle_model_file(const oc_bundle *bundle, const char *name, uint64_t *size);

/* A model's I/O signature, from the manifest: input or output `index` of model `name`.
 * type: as onnx prints it ("tensor(float)"); shape: a JSON array of ints, symbolic names and nulls
 * ("[\"batch\",3,224,224]"), or "null" for a non-tensor. Strings live as long as the bundle. */
typedef struct oc_tensor_info {
    const char *name;
    const char *type;
    const char *shape;
} oc_tensor_info;

OC_API oc_status oc_bundle_signature(const oc_bundle *bundle, const char *name, int outputs, size_t index,
                                     oc_tensor_info *out, oc_error *err);
OC_API size_t oc_bundle_signature_count(const oc_bundle *bundle, const char *name, int outputs);

/* The same shape without JSON: its rank (-1: no shape, as for a non-tensor, an unknown model or an
 * index past the count), and dimension `dim` (< rank) as *size >= 0, or -1 where the dimension is
 * free, with *symbol (may be NULL to skip) its name ("batch") or NULL where it has none. A dimension
 * past the rank is OC_ERR_INVALID_ARGUMENT. Names live as long as the bundle. */
OC_API int64_t oc_bundle_signature_rank(const oc_bundle *bundle, const char *name, int outputs, size_t index);
OC_API oc_status oc_bundle_signature_dim(const oc_bundle *bundle, const char *name, int outputs, size_t index,
                                         size_t dim, int64_t *size, const char **symbol, oc_error *err);

/* Open model `name`'s blob: mapped (or read) through the bundle, its size and (verify) sha256
 * checked against the manifest, its cook key and model sha256 against the header, then checked as
 * oc_blob_open_memory does. The blob owns what it mapped or read; release it with oc_blob_close. */
OC_API oc_status oc_bundle_open_blob(oc_bundle *bundle, const char *name, oc_blob **out, oc_error *err);

/* As oc_bundle_open_blob, for blob bytes the caller already holds (BORROWED, as in
 * oc_blob_open_memory): checked against model `name`'s manifest entry. Bytes that are not its blob
 * are OC_ERR_CHECKSUM, and the message says what they are: another platform's blob of a model (a
 * pak of another target), another model's, another cook's, or damaged. */
OC_API oc_status oc_bundle_open_blob_memory(oc_bundle *bundle, const char *name, const void *data,
                                            size_t size, oc_blob **out, oc_error *err);

/* ---------------------------------------------------------------------------------------------
 * Sessions (the "session" level): onnxruntime through its C API
 * ------------------------------------------------------------------------------------------- */

typedef struct oc_runtime oc_runtime;
struct OrtApi;
struct OrtApiBase;
struct OrtSession;
struct OrtSessionOptions;

/* Load libonnxruntime at run time (dlopen/LoadLibrary of `library_path`, or the platform's default
 * name when NULL) and take its C API (OrtGetApiBase()->GetApi(OC_ORT_API_VERSION)); one build runs
 * against every onnxruntime from 1.21 on. OWNED by the caller: oc_runtime_release. */
OC_API oc_status oc_runtime_load(const char *library_path, oc_runtime **out, oc_error *err);

/* For an engine that links onnxruntime itself: its OrtGetApiBase() (borrowed; that onnxruntime
 * must stay loaded while the runtime lives). The library asks it for its version and its C API
 * (version 21, and 22 for plugin EPs from 1.22), as oc_runtime_load does: the way to prefer. */
OC_API oc_status oc_runtime_from_api_base(const struct OrtApiBase *base, oc_runtime **out, oc_error *err);

/* The same from an OrtApi the engine already holds (`api` is borrowed, from GetApi(21) or newer;
 * `version` that onnxruntime's GetVersionString(), e.g. "1.24.4"). The version picks the load
 * paths and whether `api` holds the plugin-EP functions, so it must be that onnxruntime's:
 * OC_ERR_INVALID_ARGUMENT for text that is no version of 1.21 or newer. */
OC_API oc_status oc_runtime_from_api(const struct OrtApi *api, const char *version, oc_runtime **out,
                                     oc_error *err);

OC_API void oc_runtime_release(oc_runtime *runtime);
/* The OrtApi, to run and release sessions; and onnxruntime's version string. */
OC_API const struct OrtApi *oc_runtime_api(const oc_runtime *runtime);
OC_API const char *oc_runtime_version(const oc_runtime *runtime);

/* How the model reached onnxruntime (as the Python loader's load paths). */
typedef enum oc_load_path {
    OC_LOAD_ONNX_INLINE = 0,         /* graph bytes, no weights section */
    OC_LOAD_ONNX_FILE_BUFFERS = 1,   /* weights as an in-memory external-data file, in place (1.32+) */
    OC_LOAD_ONNX_EXTERNAL = 2,       /* weights as external initializers: onnxruntime copies them */
    OC_LOAD_ORT_IN_PLACE = 3,        /* ORT bytes used in place (use_ort_model_bytes_directly) */
    OC_LOAD_ONNX_MAPPED = 4,         /* before 1.32, raw weights of a blob file: onnxruntime maps them
                                        from the blob file itself, as from a loose .onnx.data */
    OC_LOAD_ONNX_SHARED = 5,         /* onnxruntime 1.24.4 and 1.28.0 (POSIX): each weight handed over in
                                        place as a shared initializer (AddInitializer over the blob's
                                        bytes), the graph's references pointed at /dev/null */
    OC_LOAD_ORT_BYTES = 6            /* ORT bytes used directly, their tensors copied by onnxruntime: an
                                        ORT model whose tensor attributes it refuses in place
                                        (TreeEnsemble 5, LabelEncoder 4) */
} oc_load_path; /* values are ABI: new ones go at the end */

typedef struct oc_session_options {
    /* EPs to use, in order, overriding the blob's preference (NULL: the blob's preferred EPs this
     * onnxruntime offers, then the CPU EP; an EP that must run alone with the CPU ends the list). */
    const char *const *providers;
    size_t provider_count;
    int low_memory;                  /* 1: session.disable_prepacking (faster, leaner load) */
    int intra_op_threads;            /* 0: onnxruntime's default */
    /* Options to start from (borrowed; the blob's recipe and the load path's entries are added to
     * it, or to copies of it (CloneSessionOptions) where a load path may be refused and another
     * tried: use it for one session). NULL: fresh options. Put no EPs, devices or policy on it: the
     * C API cannot tell whether it carries some, so the blob's EPs are added to it as to fresh
     * options (the Python loader leaves options that carry EPs alone); pass `providers` or
     * oc_session_create_on_devices' `devices` instead. */
    struct OrtSessionOptions *base;
    oc_progress_fn progress;
    void *progress_user;
} oc_session_options;

/* Create a session for `blob` with the blob's recipe (EPs or plugin-EP devices and the header's
 * device policy, as oc_session_create_on_devices with NULL devices; provider options, per-EP session
 * options, DirectML rules, the saved-runtime-optimizations flag), weights in place where
 * onnxruntime allows it. The session BORROWS the blob (release the session first). `path_used`
 * (may be NULL) receives the load path actually used: where onnxruntime refuses the first choice
 * for a model (OC_LOAD_ONNX_SHARED for conv nets in 1.24.4 and 1.28.0; OC_LOAD_ORT_IN_PLACE for an
 * ORT model with tensor attributes), the session is made again along the next
 * (OC_LOAD_ONNX_MAPPED for a blob file, then OC_LOAD_ONNX_EXTERNAL; OC_LOAD_ORT_BYTES), and later
 * loads of that model in the process go straight there; an attempt that may be refused runs with
 * onnxruntime's session log at FATAL unless `base` options are given (the session made by it keeps
 * that level, as the Python loader's do). On OC_LOAD_ONNX_SHARED the blob keeps the
 * OrtValues it added (AddInitializer) for every session made from it until oc_blob_close.
 * An EP with an appender (oc_runtime_set_ep_appender) goes on through it; CUDAExecutionProvider and
 * TensorrtExecutionProvider take the blob's provider options through onnxruntime's V2 option APIs;
 * the other EPs through SessionOptionsAppendExecutionProvider.
 * options may be NULL. */
OC_API oc_status oc_session_create(oc_runtime *runtime, oc_blob *blob, const oc_session_options *options,
                                   struct OrtSession **out, oc_load_path *path_used, oc_error *err);

/* Release a session created by oc_session_create (NULL is fine): the OrtApi's ReleaseSession, for
 * callers that do not include onnxruntime's header (C#). */
OC_API void oc_session_release(oc_runtime *runtime, struct OrtSession *session);

/* A static name of a load path: "onnx-inline", "onnx-file-buffers", ... (lower case, '-'). */
OC_API const char *oc_load_path_name(oc_load_path path);

/* ---------------------------------------------------------------------------------------------
 * Plugin execution providers (onnxruntime >= 1.22, Windows ML's EP API), as the Python loader's
 * ep_libraries and devices (onnx_cooker/runtime/devices.py, docs/loader.md). The library asks
 * onnxruntime for C API 22 besides 21: where it is not served (onnxruntime 1.21), a policy or
 * device pairs fall back to the classic EP list (pairs by EP name) and the explanation says so.
 * ------------------------------------------------------------------------------------------- */

/* 1 when this onnxruntime serves the plugin-EP API (C API 22, onnxruntime 1.22+), else 0. With
 * oc_runtime_from_api: when the version string it was given is 1.22 or newer. */
OC_API int oc_runtime_has_plugin_eps(const oc_runtime *runtime);

/* Register the plugin EP library at `path` (UTF-8) under `name` with the runtime's OrtEnv
 * (RegisterExecutionProviderLibrary), once per process and OrtEnv (onnxruntime keeps one OrtEnv per
 * process while any runtime holds it): the same name and path again does nothing; the same name with
 * another path is OC_ERR_SESSION_CREATE; a name onnxruntime already holds from a registration made
 * outside this library (the engine's own, on the shared OrtEnv) is taken as registered, with the
 * library onnxruntime was given then. Registration holds the library's lock while onnxruntime loads
 * the library: other calls of this library wait. Its EPs then offer devices (oc_runtime_ep_device) that
 * oc_session_create_on_devices and the blob's EP list pick. A library onnxruntime cannot load is
 * OC_ERR_SESSION_CREATE (the path, the name, onnxruntime's words); onnxruntime without the plugin-EP
 * API is OC_ERR_INCOMPATIBLE_RUNTIME. `name` and `path` are copied. The library stays registered
 * until the last oc_runtime over that OrtEnv is released (onnxruntime unloads it with the OrtEnv):
 * release every session using it first. */
OC_API oc_status oc_runtime_register_ep_library(oc_runtime *runtime, const char *name, const char *path,
                                                oc_error *err);

/* Device types, as the Python loader's "cpu" | "gpu" | "npu" | None. Values are ABI. */
typedef enum oc_device_type {
    OC_DEVICE_ANY = 0, /* any device of the EP (in pairs; never a device's own type) */
    OC_DEVICE_CPU = 1,
    OC_DEVICE_GPU = 2,
    OC_DEVICE_NPU = 3
} oc_device_type;

/* One EP device onnxruntime offers (GetEpDevices): strings are onnxruntime's, valid while the
 * runtime and the libraries registered with it are. */
typedef struct oc_ep_device {
    const char *ep_name;
    oc_device_type type;
    uint32_t vendor_id;
    const char *vendor;
} oc_ep_device;

/* The EP devices onnxruntime offers now (0 without the plugin-EP API), and device `index` of them. */
OC_API size_t oc_runtime_ep_device_count(const oc_runtime *runtime);
OC_API oc_status oc_runtime_ep_device(const oc_runtime *runtime, size_t index, oc_ep_device *out, oc_error *err);

/* (EP name, device type) in preference order: each EP goes on the devices of its first pair it
 * offers, with the blob's provider options for that EP (SessionOptionsAppendExecutionProvider_V2). */
typedef struct oc_device_pair {
    const char *ep;
    oc_device_type type;
} oc_device_pair;

/* The caller's device choice: either a policy name ("prefer_gpu", "prefer_npu", "prefer_cpu",
 * "max_performance", "max_efficiency", "min_power", "default": SessionOptionsSetEpSelectionPolicy)
 * or `pair_count` pairs, not both. Borrowed during the call only. */
typedef struct oc_devices {
    const char *policy;
    const oc_device_pair *pairs;
    size_t pair_count;
} oc_devices;

/* oc_session_create with the caller's devices (NULL: the blob decides, as oc_session_create does).
 * In order: a policy (the caller's, else the blob header's device_policy, unless the blob prefers an
 * EP that is a classic provider here: a blob policy never passes over it); pairs (an EP named there
 * that offers none of the devices asked for is OC_ERR_SESSION_CREATE, listing what is offered); no
 * selection and the blob prefers an EP that is no classic provider but offers devices (a plugin EP
 * registered with oc_runtime_register_ep_library): the preferred EPs on their devices, skipping those
 * that offer none; else the classic list. The CPU EP takes the nodes the others leave. options'
 * `providers` with devices is OC_ERR_INVALID_ARGUMENT. `explanation` (may be NULL) receives, as
 * NUL-terminated UTF-8 cut to `explanation_size` bytes, the line the Python loader logs: which EPs
 * and devices and why, e.g. "ggml on CPU (vendor 0x1022 AMD), then CPUExecutionProvider for the
 * nodes they do not take (the blob prefers a plugin EP); skipped WebGpuExecutionProvider (no device
 * offered)". The session is the caller's, as with oc_session_create. */
OC_API oc_status oc_session_create_on_devices(oc_runtime *runtime, oc_blob *blob, const oc_session_options *options,
                                              const oc_devices *devices, struct OrtSession **out,
                                              oc_load_path *path_used, char *explanation, size_t explanation_size,
                                              oc_error *err);

/* oc_session_create_on_devices, and `refused` (may be NULL) receives, as NUL-terminated UTF-8 cut to
 * `refused_size` bytes (OC_REFUSED_MAX holds any), the faster load path onnxruntime refused for this
 * model and why, as the Python loader's LoadInfo.refused: "onnx-shared-initializers refused
 * (onnxruntime's first line, up to 200 bytes)". That is this call's refusal, whose session then went
 * along the next path, or one an earlier call in this process met and remembered, which later loads
 * of the model skip (the path_used is then the fallback from the start); "" when there was none. A
 * path skipped by rule without a try (OC_LOAD_ONNX_SHARED for float 4-D or 16-bit float weights,
 * docs/native.md "The fallback") is no refusal. */
#define OC_REFUSED_MAX 256
OC_API oc_status oc_session_create_reported(oc_runtime *runtime, oc_blob *blob, const oc_session_options *options,
                                            const oc_devices *devices, struct OrtSession **out,
                                            oc_load_path *path_used, char *explanation, size_t explanation_size,
                                            char *refused, size_t refused_size, oc_error *err);

/* The blob header's device_policy (one of the policy names above), or NULL when it has none.
 * Lives as long as the blob. */
OC_API const char *oc_blob_device_policy(const oc_blob *blob);

/* ---------------------------------------------------------------------------------------------
 * The engine's own EPs: an EP this library has no call for (a console's EP, which the console's
 * onnxruntime build appends through its own OrtSessionOptionsAppendExecutionProvider_* function; an
 * EP the engine puts on session options its own way) goes through the engine's appender.
 * ------------------------------------------------------------------------------------------- */

/* Put EP `ep` on `options`, with the blob's provider options for it: `count` pairs `keys[i]` =
 * `values[i]` (UTF-8, borrowed during the call; count 0 when the blob has none). Return OC_OK once
 * it is appended; any other status fails the session creation with that status (a value that is no
 * oc_status: OC_ERR_SESSION_CREATE), and what the appender wrote into err->message (may be left
 * empty) after the model's and the EP's names. Called on the thread that creates the session, once
 * per session, in the EP list's order (the CPU EP last), with the same options every load path then
 * starts from. */
typedef oc_status (*oc_ep_append_fn)(void *user, struct OrtSessionOptions *options, const char *ep,
                                     const char *const *keys, const char *const *values, size_t count,
                                     oc_error *err);

#define OC_MAX_EP_APPENDERS 16

/* Register `append` as the appender of EP `ep` (UTF-8, copied) on this runtime, replacing an
 * earlier one; `append` NULL removes it. From then on a blob's preferred EP of that name, or the
 * caller's `providers` naming it, goes on the session options through the appender instead of the
 * library's own call, and a blob's preference takes it as offered even where onnxruntime's
 * GetAvailableProviders does not list it. OC_ERR_INVALID_ARGUMENT for a NULL or empty name, the CPU
 * EP (always onnxruntime's own), a name of 128 bytes or more, or past OC_MAX_EP_APPENDERS EPs.
 * `user` is BORROWED: it must stay valid until the appender is removed or the runtime released,
 * and until every session creation that may be calling it has returned. Safe to call while other
 * threads create sessions (each session uses the appender set when its EPs are appended). */
OC_API oc_status oc_runtime_set_ep_appender(oc_runtime *runtime, const char *ep, oc_ep_append_fn append, void *user,
                                            oc_error *err);

#ifdef __cplusplus
}
#endif

#endif /* ONNX_COOKER_H */
