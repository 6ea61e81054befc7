/* internal.h - shared by the library's sources; not installed. */
#ifndef OC_INTERNAL_H
#define OC_INTERNAL_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include "onnx_cooker.h"

#define OC_IDENTITY_WORDS 6 /* see oc_map_file */
/* The end of a damaged or cut-off blob's message: what to do about it (errors.py, DAMAGED) */
#define OC_DAMAGED "; re-copy the blob file whole, or re-run `onnx-cooker cook`"

/* The allocator every object uses (copied from the caller's oc_allocator, or malloc/free). */
typedef struct oc_alloc {
    void *(*alloc)(void *user, size_t size, size_t alignment);
    void (*free)(void *user, void *ptr);
    void *user;
} oc_alloc;

/* The caller's hooks, or the C library's when `from` is NULL or incomplete. */
oc_alloc oc_alloc_from(const oc_allocator *from);
/* size bytes aligned to 16 (NULL on failure; size 0 -> a valid 1-byte allocation). */
void *oc_malloc(const oc_alloc *a, size_t size);
void *oc_calloc(const oc_alloc *a, size_t count, size_t size); /* NULL on overflow or failure */
void oc_free(const oc_alloc *a, void *ptr);
char *oc_strdup(const oc_alloc *a, const char *text);           /* NULL on failure */

/* printf-style checking of messages (MinGW builds use its C99 printf: __USE_MINGW_ANSI_STDIO). */
#if defined(__MINGW32__)
#define OC_PRINTF(f, a) __attribute__((format(gnu_printf, f, a)))
#elif defined(__GNUC__)
#define OC_PRINTF(f, a) __attribute__((format(printf, f, a)))
#else
#define OC_PRINTF(f, a)
#endif

/* Fill err (if not NULL) and return status. printf-style message. */
oc_status oc_fail(oc_error *err, oc_status status, const char *format, ...) OC_PRINTF(3, 4);
/* `status`, its message (a failure about the blob file `path`, NULL: none) made to begin with the
 * path, and a damaged blob's to end with the fix (OC_DAMAGED) where it names none: Python's
 * errors.in_file. */
oc_status oc_error_in_file(oc_error *err, oc_status status, const char *path);

oc_status oc_vfail(oc_error *err, oc_status status, const char *format, va_list args);

/* What to do about a session option or provider option the library refuses (the Python loader's
 * options.py says the same words: BAD_OPTION_FIX, UNLISTED_ENTRY, BAD_PROVIDER_OPTION_FIX). */
#define OC_BAD_OPTION_FIX                                                                                        \
    "; the platform's ep_session_options allow the keys and values of docs/settings.md: fix them and re-cook "   \
    "with this onnx-cooker"
#define OC_UNLISTED_ENTRY                                                                                        \
    " (it is not in the loader's list of entries that only change how a session computes, docs/settings.md; "   \
    "others may name files onnxruntime reads or writes); a game that needs it sets it on the session options "  \
    "it passes"
#define OC_BAD_PROVIDER_OPTION_FIX                                                                               \
    "; a blob may not choose where an EP reads, writes or loads from: remove it from the platform's "          \
    "provider_options and re-cook, and have the game pass it itself (docs/settings.md)"

/* Caller memory handed to the blob openers must start at OC_BLOB_ALIGNMENT (onnx_cooker.h: the
 * largest scalar a tensor or a flatbuffer table holds): bytes elsewhere are copied once into memory
 * the blob owns (oc_aligned_copy), so that onnxruntime never reads a weight misaligned in place. */
/* `data` copied into a new allocation of `a` when it is not OC_BLOB_ALIGNMENT-aligned (*copy then
 * owns it; *copy NULL when no copy was needed). OC_ERR_OUT_OF_MEMORY when the copy cannot be made. */
oc_status oc_aligned_copy(const oc_alloc *a, const void **data, size_t size, void **copy, oc_error *err);

/* recipe.c: what of a blob's recipe onnxruntime may see: OC_ERR_SESSION_CREATE for a provider
 * option whose name or value may point at a file, folder, library or address, a named session
 * option with a value onnxruntime has no name for, and a config entry the load paths own or one not
 * on the allow-list. */
oc_status oc_recipe_check_provider_options(const oc_blob *blob, oc_error *err);         /* every EP's */
oc_status oc_recipe_check_session_options(const oc_blob *blob, const char *ep, oc_error *err); /* `ep`'s */

/* An external-data tensor the blob's header lists: main-graph initializer `name`, at `offset` in
 * the weights section, `nbytes` long. */
typedef struct oc_ref_tensor {
    const char *name;
    uint64_t offset;
    uint64_t nbytes;
    /* The header's ONNX data type and dims (blob.c fills them; the checker and rewriter's tests
     * leave them 0/NULL: only the shared-initializer path and its rewrite read them). */
    int elem_type;
    size_t rank;
    const uint64_t *dims;
} oc_ref_tensor;

/* Skip the group that field `number` opened (wire type 3) at data[*pos..end), up to and past its
 * closing key: NULL, or why the bytes are malformed (onnxrefs.c; rewrite.c copies a group whole). */
#define OC_MAX_GROUPS 100 /* groups nested in groups: protobuf's default recursion limit */
const char *oc_skip_group(const uint8_t *data, size_t *pos, size_t end, uint64_t number);

/* Check every external-data reference of the ONNX ModelProto in model[0..size) (onnxrefs.c): each
 * tensor with external data anywhere in the model (main graph, subgraphs, node attributes,
 * functions, sparse tensors) must be a main-graph initializer listed in `tensors` (sorted by name,
 * strcmp order, names unique), named once, with location == weights_file, offset and length equal
 * to the listed ones (absent: offset 0, length the whole tensor), and no keys but location,
 * offset, length and checksum. weights_file may be NULL (no weights section: any reference is
 * refused). Malformed protobuf is refused too. Returns OC_OK, or OC_ERR_CORRUPT with a message
 * ("model 'name': ...") in err. Never reads outside model[0..size); recursion depth is bounded. */
oc_status oc_check_references(const uint8_t *model, size_t size, const char *model_name,
                              const char *weights_file, const oc_ref_tensor *tensors, size_t count,
                              const oc_alloc *alloc, oc_error *err);

/* For a path that hands onnxruntime tensors made from the header (shared initializers, which
 * onnxruntime puts in place of every initializer of their names, subgraphs' too): refuse a model in
 * which a listed name (`tensors` sorted by strcmp) is also an initializer of another graph, a
 * sparse initializer or a Constant's output anywhere (OC_ERR_CORRUPT, message in err). Malformed
 * protobuf is refused; recursion depth is bounded. oc_rewrite_locations(match_header) checks the
 * main graph's own initializers. */
oc_status oc_check_shadowing(const uint8_t *model, size_t size, const char *model_name, const oc_ref_tensor *tensors,
                             size_t count, oc_error *err);

/* A bump arena for the strings and tables of one object (header fields, recipes, manifests). */
typedef struct oc_arena_block oc_arena_block;
typedef struct oc_arena {
    oc_alloc alloc;
    oc_arena_block *head;
} oc_arena;

void oc_arena_init(oc_arena *arena, const oc_alloc *alloc);
void *oc_arena_alloc(oc_arena *arena, size_t size); /* 16-byte aligned, zeroed; NULL on failure */
char *oc_arena_strndup(oc_arena *arena, const char *text, size_t n);
void oc_arena_free(oc_arena *arena);

typedef struct oc_kv {
    const char *key;
    const char *value;
} oc_kv;

/* One EP the header names (in execution_providers, provider_options or ep_session_options). */
typedef struct oc_ep_recipe {
    const char *name;
    oc_kv *provider;
    size_t provider_count;
    oc_kv *session;
    size_t session_count;
} oc_ep_recipe;

enum { OC_SECTION_GRAPH = 0, OC_SECTION_WEIGHTS = 1 };

typedef struct oc_frame {
    int section;
    int raw;
    uint64_t offset, size, content_offset, content_size, pad;
    const uint32_t *crcs;
    size_t crc_count;
} oc_frame;

struct oc_blob {
    oc_alloc alloc;
    oc_arena arena;
    const uint8_t *data;
    size_t size;
    /* What the blob owns besides the arena: a mapping (bundle/file) or a read buffer. */
    void *map;
    size_t map_size;
    void *buffer;
    oc_blob_info info;
    const char *where; /* "blob of model 'x' (platform)" or with the file's path */
    const char **eps;  /* execution_providers, in order */
    size_t ep_count;
    const char *device_policy; /* the header's device_policy (one of the policy names), or NULL */
    oc_ep_recipe *recipes; /* every EP the header names */
    size_t recipe_count;
    oc_frame *frames;
    size_t frame_count;
    oc_ref_tensor *tensors; /* sorted by name */
    size_t tensor_count;
    const uint8_t *graph;
    size_t graph_size;
    uint8_t *graph_owned;
    const uint8_t *weights;
    size_t weights_size;
    uint8_t *weights_owned;
    int min_runtime[3];
    /* The blob file this blob was mapped from (oc_blob_open_file, a folder bundle), or NULL; its
     * identity then; whether onnxruntime may open it again by name (not for a signed bundle, whose
     * sha256 was checked on these very bytes). */
    const char *file_path;
    uint64_t file_identity[OC_IDENTITY_WORDS];
    int reopen_by_name;
    /* The file the blob was mapped or read from (or a reader's name for it), for messages; NULL
     * for caller memory (oc_blob_name_file). */
    const char *named_file;
    /* What session.c keeps for the blob's sessions (the shared initializers: OrtValues over the
     * weights, one set per onnxruntime API), released by oc_blob_close through the hook. Created
     * and read under oc_lock. */
    void *sessions_state;
    void (*release_sessions_state)(oc_blob *blob);
};

/* Check and decode `size` bytes at `data` into a new blob (blob.c). `origin` (a file path, or NULL)
 * starts every message. The blob borrows data; map/buffer (if not NULL) become the blob's. */
oc_status oc_blob_parse(const uint8_t *data, size_t size, const oc_blob_options *options, const char *origin,
                        void *map, size_t map_size, void *buffer, oc_blob **out, oc_error *err);
/* The same, decoding single-threaded work with `dctx` (a ZSTD_DCtx the caller keeps: a bundle
 * keeps one, so that opening small blobs does not make and unmap a decoder each time). */
oc_status oc_blob_parse_with(const uint8_t *data, size_t size, const oc_blob_options *options, const char *origin,
                             void *map, size_t map_size, void *buffer, void *dctx, oc_blob **out, oc_error *err);

/* Record that `blob` was mapped from the file at `path` with `identity` (blob.c). */
oc_status oc_blob_set_file(oc_blob *blob, const char *path, const uint64_t identity[OC_IDENTITY_WORDS], int reopen_by_name);
oc_status oc_blob_name_file(oc_blob *blob, const char *path);

/* Whether `path` still names the file of `identity` (same device and inode); platform.c. */
int oc_same_file(const char *path, const uint64_t identity[OC_IDENTITY_WORDS]);
/* The absolute, resolved form of `path` (malloc'd; free()), or NULL. */
char *oc_real_path(const char *path);
/* `path` made absolute against the working folder, links not resolved (Python's os.path.abspath
 * without the normalization; malloc'd: free()), or NULL (no working folder, or out of memory). */
char *oc_absolute_path(const char *path);
/* Whether a folder below `dir` (not a hidden one) holds a manifest.json file: a build folder given for
 * one of its bundles. Then 1, with such a folder's name in `name` (`cap` bytes): with `nearby` NULL the
 * first in byte order; else the one nearest to `nearby` (a mistyped platform folder: at most a third
 * of its characters differ; ties in byte order), 0 when none is that nearby. */
int oc_first_bundle_below(const char *dir, const char *nearby, char *name, size_t cap);
#ifdef _WIN32
#include <stddef.h>
/* A UTF-8 path as UTF-16 for Windows' W functions (malloc'd; free()), or NULL when it is not
 * UTF-8 (or out of memory). Every path the library takes is UTF-8. */
wchar_t *oc_wide_path(const char *path);
#endif

#define TENSOR_EXTERNAL_DATA_FIELD 13
/* The graph with every main-graph initializer's external data at `location`, offsets moved by
 * `shift`, lengths the listed ones (rewrite.c); *out from alloc. Only after oc_check_references.
 * match_header: each rewritten initializer's data_type and dims must also be the listed ones
 * (OC_ERR_CORRUPT otherwise), for a path that hands onnxruntime tensors made from the header. */
oc_status oc_rewrite_locations(const uint8_t *model, size_t size, const char *model_name, const char *location,
                               uint64_t shift, const oc_ref_tensor *tensors, size_t count, int match_header,
                               const oc_alloc *alloc, uint8_t **out, size_t *out_size, oc_error *err);

/* SHA-256 of data[0..size) (sha256.c): the CPU's SHA instructions where it has them, else
 * libsodium. oc_sha256_accelerated says which. */
void oc_sha256(const uint8_t *data, size_t size, uint8_t digest[32]);
int oc_sha256_accelerated(void);
/* The same, read in pieces of OC_HASH_PIECE bytes (the last may be shorter): `before` (may be NULL)
 * is called with each piece before it is read and `after` (may be NULL) once it has been, for a
 * caller that keeps a mapping's resident pages bounded (oc_prefault, oc_release_pages). */
#define OC_HASH_PIECE ((size_t)8 << 20)
void oc_sha256_pieces(const uint8_t *data, size_t size, uint8_t digest[32], void (*before)(const void *, size_t),
                      void (*after)(const void *, size_t));

/* JSON as Python's json.loads reads it (json.c): the whole text one value, nothing but whitespace
 * after it (NULL otherwise); and an object's member by key with the last of duplicates winning. */
struct cJSON;
struct cJSON *oc_json_parse(const char *text, size_t length);
struct cJSON *oc_json_get(const struct cJSON *object, const char *key);

/* "major.minor[.patch]" -> version[3]; 0 on success. */
int oc_parse_version(const char *text, int version[3]);

/* Map a whole file read-only (platform.c); *map NULL and *size 0 for an empty file. `identity`
 * (may be NULL) receives what tells this file apart from any that later takes its name: device,
 * inode, size, modification and change times (zeros where the system has no such notion). */
oc_status oc_map_file(const char *path, void **map, size_t *size, uint64_t identity[OC_IDENTITY_WORDS], oc_error *err);
void oc_unmap(void *map, size_t size);
/* Ask the system to fill a mapping's page tables before a pass reads all of it (the sha256 pass:
 * 5-8% of it on a 268 MB blob, measured); nothing where the system has no such call. */
void oc_prefault(const void *map, size_t size);
/* Let go of the resident pages of [map, map + size) of a read-only file mapping (`map` page-aligned):
 * they leave this process's resident set and come back from the file, unchanged, if read again
 * (POSIX: MADV_DONTNEED; Windows: VirtualUnlock, which takes unlocked pages out of the working set). */
void oc_release_pages(const void *map, size_t size);
/* Run task(context, w) for w in 0..workers-1, each on a thread of its own (the caller's thread
 * runs w = 0), and wait for all; falls back to running them in turn where a thread cannot start. */
void oc_run_parallel(void (*task)(void *context, size_t worker), void *context, size_t workers);
/* While onnxruntime builds a session from a read-only file mapping, keep the mapping's resident
 * pages released (Linux: MADV_DONTNEED every millisecond; the pages come back from the
 * page cache when read again, unchanged), so that the pages prepacking has read do not stay beside
 * the packed copies. NULL where not supported; oc_pager_stop(NULL) is fine. */
typedef struct oc_pager oc_pager;
oc_pager *oc_pager_start(void *map, size_t size);
void oc_pager_stop(oc_pager *pager);

/* One process-wide lock (platform.c), for the little state shared across objects and threads:
 * a blob's shared initializers, the shared-initializer refusals. Never held across a callback. */
void oc_lock(void);
void oc_unlock(void);
/* Whether /dev/null exists as a character device (the shared-initializer path's reference target). */
int oc_has_null_file(void);
/* Whether `path` (UTF-8) names an existing file that is not a folder. */
int oc_is_regular_file(const char *path);

/* The cores this process may use (at least 1). */
size_t oc_cores(void);

/* Read a whole file into memory from `alloc` (at most `limit` bytes, else OC_ERR_TOO_LARGE). */
oc_status oc_read_file(const char *path, const oc_alloc *alloc, uint64_t limit, void **data, size_t *size,
                       oc_error *err);
/* The same, and `identity` (as oc_map_file's) of the file opened: filled once it is open (also when
 * it is then refused for its size), zeros when it could not be opened. */
oc_status oc_read_file_identity(const char *path, const oc_alloc *alloc, uint64_t limit, void **data, size_t *size,
                                uint64_t identity[OC_IDENTITY_WORDS], oc_error *err);
/* The identity (as oc_map_file's) of the file `path` names now, links followed: 1, else 0 and zeros. */
int oc_path_identity(const char *path, uint64_t identity[OC_IDENTITY_WORDS]);
/* Whether anything has the name `path` (a link's own name: not followed). */
int oc_path_exists(const char *path);
/* Whether `path` names a folder (links followed). */
int oc_is_folder(const char *path);
/* A monotonic clock in nanoseconds (0 where none can be read), and a sleep of `ms` milliseconds. */
uint64_t oc_monotonic_ns(void);
void oc_sleep_ms(unsigned ms);

#endif
