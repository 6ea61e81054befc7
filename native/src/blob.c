/* blob.c - check and decode a version-3 blob (docs/bundle-format.md), the C twin of
 * onnx_cooker/runtime/header.py, sections.py and blob.py: the same checks in the same order, the same
 * causes. */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>
#include <zlib.h>
#define ZSTD_STATIC_LINKING_ONLY /* ZSTD_getFrameHeader: a frame's declared size and checksum flag */
#include <zstd.h>

#include "internal.h"

#define SKIPPABLE_MAGIC 0x184D2A5Eu
#define HEADER_PREFIX 14u          /* "ONNXCOOK", u16 version, u32 CRC-32 */
#define MAX_HEADER_SIZE (16u << 20)
#define TRAILER_SIZE 16u
#define EXTENT_ALIGNMENT 65536u
#define RAW_CRC_PIECE (8u << 20)
#define MAX_FRAMES 65536u
#define MAX_TENSORS (1u << 20)
#define MAX_DIMS 64u
#define DEFAULT_MAX_MODEL_SIZE (2ull << 30)
#define MAX_COUNT 9007199254740992.0 /* 2^53: JSON numbers above it are not exact in a double */

static uint32_t le32(const uint8_t *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static uint64_t le64(const uint8_t *p) { return (uint64_t)le32(p) | (uint64_t)le32(p + 4) << 32; }

/* --- the arena ------------------------------------------------------------------------------ */

struct oc_arena_block {
    oc_arena_block *next;
    size_t size, used;
    /* data follows, 16-byte aligned */
};

#define BLOCK_HEAD ((sizeof(oc_arena_block) + 15u) & ~(size_t)15u)

void oc_arena_init(oc_arena *arena, const oc_alloc *alloc) {
    arena->alloc = *alloc;
    arena->head = NULL;
}

void *oc_arena_alloc(oc_arena *arena, size_t size) {
    oc_arena_block *block = arena->head;
    size_t need = (size + 15u) & ~(size_t)15u;
    uint8_t *p;
    if (need < size) return NULL;
    if (block == NULL || block->size - block->used < need) {
        size_t capacity = need > 16384u ? need : 16384u;
        if (capacity > SIZE_MAX - BLOCK_HEAD) return NULL;
        block = oc_malloc(&arena->alloc, BLOCK_HEAD + capacity);
        if (block == NULL) return NULL;
        block->next = arena->head;
        block->size = capacity;
        block->used = 0;
        arena->head = block;
    }
    p = (uint8_t *)block + BLOCK_HEAD + block->used;
    block->used += need;
    memset(p, 0, need ? need : 1);
    return p;
}

char *oc_arena_strndup(oc_arena *arena, const char *text, size_t n) {
    char *copy;
    if (n == SIZE_MAX) return NULL;
    copy = oc_arena_alloc(arena, n + 1);
    if (copy != NULL) {
        memcpy(copy, text, n);
        copy[n] = '\0';
    }
    return copy;
}

void oc_arena_free(oc_arena *arena) {
    oc_arena_block *block = arena->head;
    while (block != NULL) {
        oc_arena_block *next = block->next;
        oc_free(&arena->alloc, block);
        block = next;
    }
    arena->head = NULL;
}

/* --- small parsers ----------------------------------------------------------------------------- */

int oc_parse_version(const char *text, int version[3]) {
    int part = 0;
    const char *p = text;
    version[0] = version[1] = version[2] = 0;
    for (;;) {
        long value = 0;
        int digits = 0;
        while (*p >= '0' && *p <= '9') {
            value = value * 10 + (*p - '0');
            if (value > 100000) return -1;
            ++p;
            ++digits;
        }
        if (digits == 0) return -1;
        version[part++] = (int)value;
        if (*p == '\0') break;
        if (*p != '.' || part == 3) return -1;
        ++p;
    }
    return part >= 2 ? 0 : -1;
}

/* A JSON number that is a whole count in [0, 2^53]. */
static int count_of(const cJSON *item, uint64_t *out) {
    double v;
    if (!cJSON_IsNumber(item)) return 0;
    v = item->valuedouble;
    if (!(v >= 0.0) || v > MAX_COUNT || v != (double)(uint64_t)v) return 0;
    *out = (uint64_t)v;
    return 1;
}

/* The string the Python loader passes for a JSON option value: str(value). */
static const char *option_string(oc_arena *arena, const cJSON *item) {
    char text[64];
    if (cJSON_IsString(item)) return oc_arena_strndup(arena, item->valuestring, strlen(item->valuestring));
    if (cJSON_IsTrue(item)) return oc_arena_strndup(arena, "True", 4);
    if (cJSON_IsFalse(item)) return oc_arena_strndup(arena, "False", 5);
    if (cJSON_IsNull(item)) return oc_arena_strndup(arena, "None", 4);
    if (cJSON_IsNumber(item)) {
        double v = item->valuedouble;
        int precision;
        if (v >= -9007199254740992.0 && v <= 9007199254740992.0 && v == (double)(long long)v) {
            snprintf(text, sizeof text, "%lld", (long long)v);
        } else {
            for (precision = 15; precision <= 17; ++precision) { /* the shortest that reads back */
                snprintf(text, sizeof text, "%.*g", precision, v);
                if (strtod(text, NULL) == v) break;
            }
        }
        return oc_arena_strndup(arena, text, strlen(text));
    }
    {
        /* arrays and objects: their JSON text (the session level refuses what onnxruntime would) */
        char *json = cJSON_PrintUnformatted(item);
        const char *copy = json ? oc_arena_strndup(arena, json, strlen(json)) : NULL;
        free(json);
        return copy;
    }
}

/* --- the header ------------------------------------------------------------------------------ */

typedef struct parse_ctx {
    oc_blob *blob;
    const char *origin; /* file path or NULL */
    oc_error *err;
} parse_ctx;

static oc_status failv(parse_ctx *c, oc_status status, const char *format, va_list args) {
    char text[OC_MESSAGE_SIZE];
    vsnprintf(text, sizeof text, format, args);
    if (c->origin != NULL) return oc_fail(c->err, status, "%s: %s", c->origin, text);
    return oc_fail(c->err, status, "%s", text);
}

OC_PRINTF(3, 4) static oc_status fail(parse_ctx *c, oc_status status, const char *format, ...) {
    va_list args;
    oc_status s;
    va_start(args, format);
    s = failv(c, status, format, args);
    va_end(args);
    return s;
}

static oc_status out_of_memory(parse_ctx *c) {
    return fail(c, OC_ERR_OUT_OF_MEMORY, "out of memory while reading the blob header");
}

/* Where the first header frame (the skippable frame's magic, its size, "ONNXCOOK") in the last
 * MAX_HEADER_SIZE + 64 bytes starts, or `size`: where the header of an ORT blob without its trailer at
 * its end lies (header._header_frame_in_tail). */
static size_t header_frame_in_tail(const uint8_t *data, size_t size) {
    size_t from = size > (size_t)MAX_HEADER_SIZE + 64u ? size - MAX_HEADER_SIZE - 64u : 0, at;
    for (at = from + 8; at + 8 <= size; ++at)
        if (data[at] == 'O' && memcmp(data + at, "ONNXCOOK", 8) == 0 && le32(data + at - 8) == SKIPPABLE_MAGIC)
            return at - 8;
    return size;
}

/* Whether data[header, size) holds a whole trailer pointing at `header` ("OCB3TAIL", then `header`
 * as a little-endian u64), which ends the blob, so that what follows it was added. */
static int holds_trailer_of(const uint8_t *data, size_t size, size_t header) {
    size_t at;
    for (at = header; at + TRAILER_SIZE <= size; ++at)
        if (data[at] == 'O' && memcmp(data + at, "OCB3TAIL", 8) == 0 && le64(data + at + 8) == (uint64_t)header)
            return 1;
    return 0;
}

static size_t header_start(const uint8_t *data, size_t size, parse_ctx *c, oc_status *status) {
    uint64_t offset;
    *status = OC_OK;
    if (size >= 4 && le32(data) == SKIPPABLE_MAGIC) return 0;
    if (size < TRAILER_SIZE || memcmp(data + size - TRAILER_SIZE, "OCB3TAIL", 8) != 0) return 0;
    offset = le64(data + size - 8);
    if ((uint64_t)size < TRAILER_SIZE + 8u || offset > (uint64_t)size - TRAILER_SIZE - 8u) {
        *status = fail(c, OC_ERR_CORRUPT, "blob trailer puts the header at byte %llu, outside the blob" OC_DAMAGED,
                       (unsigned long long)offset);
        return 0;
    }
    return (size_t)offset;
}

static int compare_tensors(const void *a, const void *b) {
    return strcmp(((const oc_ref_tensor *)a)->name, ((const oc_ref_tensor *)b)->name);
}

static oc_ep_recipe *recipe_for(oc_blob *blob, const char *name, size_t capacity) {
    size_t i;
    for (i = 0; i < blob->recipe_count; ++i)
        if (strcmp(blob->recipes[i].name, name) == 0) return &blob->recipes[i];
    if (blob->recipe_count == capacity) return NULL;
    blob->recipes[blob->recipe_count].name = name;
    return &blob->recipes[blob->recipe_count++];
}

static oc_status options_of(parse_ctx *c, const cJSON *field, const char *key, int provider, size_t capacity) {
    oc_blob *blob = c->blob;
    const cJSON *ep;
    cJSON_ArrayForEach(ep, field) {
        const cJSON *option;
        size_t count = 0, i = 0;
        oc_ep_recipe *recipe;
        oc_kv *list;
        const char *name;
        if (!cJSON_IsObject(ep))
            return fail(c, OC_ERR_CORRUPT, "blob header field '%s' must map provider names to objects", key);
        name = oc_arena_strndup(&blob->arena, ep->string, strlen(ep->string));
        if (name == NULL) return out_of_memory(c);
        recipe = recipe_for(blob, name, capacity);
        if (recipe == NULL) return fail(c, OC_ERR_CORRUPT, "blob header names too many providers");
        cJSON_ArrayForEach(option, ep) ++count;
        list = oc_arena_alloc(&blob->arena, (count ? count : 1) * sizeof *list);
        if (list == NULL) return out_of_memory(c);
        cJSON_ArrayForEach(option, ep) {
            list[i].key = oc_arena_strndup(&blob->arena, option->string, strlen(option->string));
            list[i].value = option_string(&blob->arena, option);
            if (list[i].key == NULL || list[i].value == NULL) return out_of_memory(c);
            ++i;
        }
        if (provider) {
            recipe->provider = list;
            recipe->provider_count = count;
        } else {
            recipe->session = list;
            recipe->session_count = count;
        }
    }
    return OC_OK;
}

static const char *const FIELDS[] = {"model_format", "platform", "name", "model_size", "model_sha256",
                                     "compressed_size", "cook_key", "min_runtime_version", "ort_format_version",
                                     "saved_runtime_optimizations", "execution_providers", "provider_options",
                                     "ep_session_options", "graph_size", "frames", "weights"};

/* Optional (newer cookers write it only when the profile sets ep_device_policy): how onnxruntime >= 1.22
 * picks EP devices. Absent or null is none; otherwise one of these, as the Python loader checks. */
static const char *const DEVICE_POLICIES[] = {"prefer_gpu",     "prefer_npu", "prefer_cpu", "max_performance",
                                              "max_efficiency", "min_power",  "default"};

static oc_status check_device_policy(parse_ctx *c, const cJSON *policy) {
    size_t i;
    if (policy == NULL || cJSON_IsNull(policy)) return OC_OK;
    if (!cJSON_IsString(policy)) {
        return fail(c, OC_ERR_CORRUPT, "blob header field 'device_policy' has the wrong type");
    }
    for (i = 0; i < sizeof DEVICE_POLICIES / sizeof DEVICE_POLICIES[0]; ++i) {
        if (strcmp(policy->valuestring, DEVICE_POLICIES[i]) == 0) return OC_OK;
    }
    return fail(c, OC_ERR_CORRUPT, "blob header field 'device_policy' is '%s', not a device policy",
                policy->valuestring);
}

static oc_status check_field_types(parse_ctx *c, const cJSON *root) {
    size_t i;
    for (i = 0; i < sizeof FIELDS / sizeof FIELDS[0]; ++i) {
        const cJSON *v = oc_json_get(root, FIELDS[i]);
        int ok;
        if (v == NULL) return fail(c, OC_ERR_CORRUPT, "blob header lacks field(s) %s", FIELDS[i]);
        switch (i) {
        case 3: case 5: case 13: { uint64_t n; ok = count_of(v, &n) || (cJSON_IsNumber(v) && v->valuedouble < 0); break; }
        case 8: ok = cJSON_IsString(v) || cJSON_IsNull(v); break;
        case 9: ok = cJSON_IsBool(v); break;
        case 10: case 14: ok = cJSON_IsArray(v); break;
        case 11: case 12: ok = cJSON_IsObject(v); break;
        case 15: ok = cJSON_IsObject(v) || cJSON_IsNull(v); break;
        default: ok = cJSON_IsString(v); break;
        }
        if (!ok) return fail(c, OC_ERR_CORRUPT, "blob header field '%s' has the wrong type", FIELDS[i]);
    }
    return check_device_policy(c, oc_json_get(root, "device_policy"));
}

static const char *dup_field(parse_ctx *c, const cJSON *root, const char *key) {
    const cJSON *v = oc_json_get(root, key);
    if (!cJSON_IsString(v)) return NULL;
    return oc_arena_strndup(&c->blob->arena, v->valuestring, strlen(v->valuestring));
}

static oc_status parse_frames(parse_ctx *c, const cJSON *list, size_t start, size_t end, int ort) {
    oc_blob *blob = c->blob;
    size_t n = (size_t)cJSON_GetArraySize(list), index = 0;
    uint64_t position = start ? 0 : end, content[2] = {0, 0};
    const cJSON *entry;
    if (n > MAX_FRAMES)
        return fail(c, OC_ERR_CORRUPT, "blob header lists %zu frames; at most %u are allowed", n, MAX_FRAMES);
    blob->frames = oc_arena_alloc(&blob->arena, (n ? n : 1) * sizeof *blob->frames);
    if (blob->frames == NULL) return out_of_memory(c);
    cJSON_ArrayForEach(entry, list) {
        oc_frame *f = &blob->frames[index];
        const cJSON *section, *codec, *item;
        uint64_t v[4];
        int raw, i, shape_ok;
        section = cJSON_GetArrayItem(entry, 0);
        codec = cJSON_GetArrayItem(entry, 1);
        raw = cJSON_IsString(codec) && strcmp(codec->valuestring, "raw") == 0;
        shape_ok = cJSON_IsArray(entry) && cJSON_GetArraySize(entry) == (raw ? 7 : 6) && cJSON_IsString(section) &&
                   (strcmp(section->valuestring, "graph") == 0 || strcmp(section->valuestring, "weights") == 0) &&
                   (raw || (cJSON_IsString(codec) && strcmp(codec->valuestring, "zstd") == 0));
        for (i = 0; shape_ok && i < 4; ++i) shape_ok = count_of(cJSON_GetArrayItem(entry, 2 + i), &v[i]);
        if (!shape_ok)
            return fail(c, OC_ERR_CORRUPT,
                        "blob header frame %zu is not [section, codec, offset, size, content size, pad(, CRC-32 "
                        "list for raw frames)]", index + 1);
        f->section = strcmp(section->valuestring, "graph") == 0 ? OC_SECTION_GRAPH : OC_SECTION_WEIGHTS;
        f->raw = raw;
        f->offset = v[0];
        f->size = v[1];
        f->content_size = v[2];
        f->pad = v[3];
        if (f->offset != position)
            return fail(c, OC_ERR_CORRUPT, "blob header frame %zu starts at byte %llu, not %llu where it must",
                        index + 1, (unsigned long long)f->offset, (unsigned long long)position);
        if (f->section == OC_SECTION_GRAPH && content[OC_SECTION_WEIGHTS])
            return fail(c, OC_ERR_CORRUPT, "blob header frame %zu: graph frames come before weights frames", index + 1);
        if (raw) {
            const cJSON *crcs = cJSON_GetArrayItem(entry, 6);
            uint64_t pieces = f->content_size / RAW_CRC_PIECE + (f->content_size % RAW_CRC_PIECE != 0);
            uint32_t *table;
            size_t k = 0, j;
            if (!cJSON_IsArray(crcs) || (uint64_t)cJSON_GetArraySize(crcs) != pieces)
                return fail(c, OC_ERR_CORRUPT, "blob header frame %zu: a raw frame needs one CRC-32 per %u bytes of content",
                            index + 1, RAW_CRC_PIECE);
            table = oc_arena_alloc(&blob->arena, (size_t)(pieces ? pieces : 1) * sizeof *table);
            if (table == NULL) return out_of_memory(c);
            cJSON_ArrayForEach(item, crcs) {
                uint64_t crc;
                if (!count_of(item, &crc) || crc > 0xFFFFFFFFu)
                    return fail(c, OC_ERR_CORRUPT, "blob header frame %zu: a raw frame needs one CRC-32 per %u bytes of content",
                                index + 1, RAW_CRC_PIECE);
                table[k++] = (uint32_t)crc;
            }
            f->crcs = table;
            f->crc_count = k;
            for (j = 0; j < index; ++j)
                if (blob->frames[j].section == f->section) break;
            if (j < index || content[f->section])
                return fail(c, OC_ERR_CORRUPT, "blob header frame %zu: a raw %s extent must be the whole section",
                            index + 1, section->valuestring);
            if (f->size != f->pad + f->content_size || f->pad >= EXTENT_ALIGNMENT)
                return fail(c, OC_ERR_CORRUPT, "blob header frame %zu: raw extent sizes do not add up", index + 1);
            if (f->offset + f->pad != 0 && (f->offset + f->pad) % EXTENT_ALIGNMENT)
                return fail(c, OC_ERR_CORRUPT, "blob header frame %zu: raw content not at a %u-byte boundary",
                            index + 1, EXTENT_ALIGNMENT);
        } else {
            size_t j;
            if (f->pad != 0 || f->size == 0)
                return fail(c, OC_ERR_CORRUPT, "blob header frame %zu: a zstd frame has no padding and is not empty",
                            index + 1);
            for (j = 0; j < index; ++j)
                if (blob->frames[j].section == f->section && blob->frames[j].raw)
                    return fail(c, OC_ERR_CORRUPT, "blob header frame %zu: a raw %s extent must be the whole section",
                                index + 1, section->valuestring);
        }
        f->content_offset = content[f->section];
        content[f->section] += f->content_size;
        if (content[f->section] > (uint64_t)MAX_COUNT || f->offset + f->size > (uint64_t)MAX_COUNT)
            return fail(c, OC_ERR_CORRUPT, "blob header frame %zu declares sizes past 2^53", index + 1);
        position = f->offset + f->size;
        if (f->offset == 0) {
            if (!ort || f->section != OC_SECTION_GRAPH || !raw || position != start)
                return fail(c, OC_ERR_CORRUPT,
                            "blob header frame %zu: only a raw graph ending where the header starts may lead", index + 1);
            position = end;
        }
        ++index;
    }
    if (start && index == 0)
        return fail(c, OC_ERR_CORRUPT, "blob header is not at the start, but no graph extent comes before it");
    blob->frame_count = index;
    return OC_OK;
}

static const int DTYPE_SIZES[14] = {0, 4, 1, 1, 2, 2, 4, 8, 0, 1, 2, 8, 4, 8}; /* by ONNX data type */

/* Whether `name` names a file inside a folder on every OS, and nothing else: not empty, not "." or
 * "..", without a separator, a drive or stream colon, or a control character (sections.py,
 * plain_file_name). The graph's references name it, and an engine may write the weights under it. */
static int plain_file_name(const char *name) {
    const unsigned char *p = (const unsigned char *)name;
    if (*p == '\0' || strcmp(name, ".") == 0 || strcmp(name, "..") == 0) return 0;
    for (; *p; ++p)
        if (*p == '/' || *p == '\\' || *p == ':' || *p < 0x20 || *p == 0x7F) return 0;
    return 1;
}

/* Whether `text` holds a control character (a crafted name would put them into messages and logs). */
static int has_control(const char *text) {
    const unsigned char *p;
    for (p = (const unsigned char *)text; *p; ++p)
        if (*p < 0x20 || *p == 0x7F) return 1;
    return 0;
}

static oc_status parse_weights(parse_ctx *c, const cJSON *w) {
    oc_blob *blob = c->blob;
    const cJSON *file = oc_json_get(w, "file");
    const cJSON *sha = oc_json_get(w, "sha256");
    const cJSON *tensors = oc_json_get(w, "tensors");
    const cJSON *entry;
    uint64_t size;
    size_t n, index = 0, i;
    if (!cJSON_IsString(file) || !cJSON_IsString(sha))
        return fail(c, OC_ERR_CORRUPT, "blob header field 'weights': 'file' and 'sha256' must be strings");
    if (!plain_file_name(file->valuestring))
        return fail(c, OC_ERR_CORRUPT, "blob header field 'weights': 'file' is not a plain file name (re-cook the model)");
    if (!count_of(oc_json_get(w, "size"), &size) || !cJSON_IsArray(tensors))
        return fail(c, OC_ERR_CORRUPT, "blob header field 'weights': 'size' (count) and 'tensors' (list) are required");
    n = (size_t)cJSON_GetArraySize(tensors);
    if (n > MAX_TENSORS)
        return fail(c, OC_ERR_CORRUPT, "blob header field 'weights': %zu tensors listed; at most %u are allowed", n,
                    MAX_TENSORS);
    blob->info.weights_file = oc_arena_strndup(&blob->arena, file->valuestring, strlen(file->valuestring));
    blob->tensors = oc_arena_alloc(&blob->arena, (n ? n : 1) * sizeof *blob->tensors);
    if (blob->info.weights_file == NULL || blob->tensors == NULL) return out_of_memory(c);
    blob->info.weights_size = size;
    cJSON_ArrayForEach(entry, tensors) {
        const cJSON *name = cJSON_GetArrayItem(entry, 0), *dims = cJSON_GetArrayItem(entry, 2), *d;
        uint64_t type, offset, nbytes, elements = 1, dim, *shape;
        size_t rank = 0;
        int itemsize;
        if (!cJSON_IsArray(entry) || cJSON_GetArraySize(entry) != 5)
            return fail(c, OC_ERR_CORRUPT, "blob header field 'weights': tensor %zu is not [name, type, dims, offset, bytes]",
                        index + 1);
        if (!cJSON_IsString(name))
            return fail(c, OC_ERR_CORRUPT, "blob header field 'weights': tensor %zu has no name or a name used twice",
                        index + 1);
        if (!count_of(cJSON_GetArrayItem(entry, 1), &type) || type > 13 || DTYPE_SIZES[type] == 0)
            return fail(c, OC_ERR_CORRUPT, "blob header field 'weights': tensor '%s' has a data type the loader cannot map",
                        name->valuestring);
        itemsize = DTYPE_SIZES[type];
        if (!cJSON_IsArray(dims) || (size_t)cJSON_GetArraySize(dims) > MAX_DIMS)
            return fail(c, OC_ERR_CORRUPT, "blob header field 'weights': tensor '%s' has malformed dims", name->valuestring);
        shape = oc_arena_alloc(&blob->arena, (size_t)cJSON_GetArraySize(dims) * sizeof *shape + 1);
        if (shape == NULL) return out_of_memory(c);
        cJSON_ArrayForEach(d, dims) {
            if (!count_of(d, &dim))
                return fail(c, OC_ERR_CORRUPT, "blob header field 'weights': tensor '%s' has malformed dims",
                            name->valuestring);
            if (dim != 0 && elements > UINT64_MAX / dim) elements = UINT64_MAX; else elements *= dim;
            shape[rank++] = dim;
        }
        if (!count_of(cJSON_GetArrayItem(entry, 3), &offset) || !count_of(cJSON_GetArrayItem(entry, 4), &nbytes) ||
            elements > UINT64_MAX / (uint64_t)itemsize || nbytes != elements * (uint64_t)itemsize)
            return fail(c, OC_ERR_CORRUPT,
                        "blob header field 'weights': tensor '%s': its byte count does not match its type and dims",
                        name->valuestring);
        if (offset % (uint64_t)itemsize || nbytes > size || offset > size - nbytes)
            return fail(c, OC_ERR_CORRUPT, "blob header field 'weights': tensor '%s' lies outside the weights section or is misaligned",
                        name->valuestring);
        blob->tensors[index].name = oc_arena_strndup(&blob->arena, name->valuestring, strlen(name->valuestring));
        if (blob->tensors[index].name == NULL) return out_of_memory(c);
        blob->tensors[index].offset = offset;
        blob->tensors[index].nbytes = nbytes;
        blob->tensors[index].elem_type = (int)type;
        blob->tensors[index].rank = rank;
        blob->tensors[index].dims = shape;
        ++index;
    }
    blob->tensor_count = index;
    qsort(blob->tensors, index, sizeof *blob->tensors, compare_tensors);
    for (i = 1; i < index; ++i)
        if (strcmp(blob->tensors[i - 1].name, blob->tensors[i].name) == 0)
            return fail(c, OC_ERR_CORRUPT, "blob header field 'weights': tensor '%s' has no name or a name used twice",
                        blob->tensors[i].name);
    return OC_OK;
}

static oc_status parse_header(parse_ctx *c, const char *json, size_t length, size_t start, size_t end) {
    oc_blob *blob = c->blob;
    cJSON *root = oc_json_parse(json, length);
    const cJSON *eps, *ep, *weights;
    uint64_t model_size, compressed_size, graph_size, sums[2] = {0, 0}, compressed = 0;
    size_t n, i, capacity;
    oc_status status;
    if (root == NULL) return fail(c, OC_ERR_CORRUPT, "blob header is not valid JSON");
    if (!cJSON_IsObject(root)) {
        cJSON_Delete(root);
        return fail(c, OC_ERR_CORRUPT, "blob header is not a JSON object");
    }
    status = check_field_types(c, root);
    if (status != OC_OK) goto done;
    {
        const char *format = oc_json_get(root, "model_format")->valuestring;
        if (strcmp(format, "onnx") == 0) blob->info.format = OC_FORMAT_ONNX;
        else if (strcmp(format, "ort") == 0) blob->info.format = OC_FORMAT_ORT;
        else {
            status = fail(c, OC_ERR_CORRUPT, "blob header names an unknown model format '%s'", format);
            goto done;
        }
    }
    if (!count_of(oc_json_get(root, "model_size"), &model_size) ||
        !count_of(oc_json_get(root, "compressed_size"), &compressed_size)) {
        status = fail(c, OC_ERR_CORRUPT, "blob header declares a negative size");
        goto done;
    }
    blob->info.name = dup_field(c, root, "name");
    blob->info.platform = dup_field(c, root, "platform");
    blob->info.model_sha256 = dup_field(c, root, "model_sha256");
    blob->info.cook_key = dup_field(c, root, "cook_key");
    blob->info.min_runtime_version = dup_field(c, root, "min_runtime_version");
    if (!blob->info.name || !blob->info.platform || !blob->info.model_sha256 || !blob->info.cook_key ||
        !blob->info.min_runtime_version) {
        status = out_of_memory(c);
        goto done;
    }
    if (has_control(blob->info.name) || has_control(blob->info.platform)) { /* they go into every message */
        status = fail(c, OC_ERR_CORRUPT, "blob header field '%s' holds a control character: re-cook the model",
                      has_control(blob->info.name) ? "name" : "platform");
        goto done;
    }
    blob->info.saved_runtime_optimizations = cJSON_IsTrue(oc_json_get(root, "saved_runtime_optimizations"));
    blob->info.model_size = model_size;
    eps = oc_json_get(root, "execution_providers");
    n = (size_t)cJSON_GetArraySize(eps);
    capacity = n + (size_t)cJSON_GetArraySize(oc_json_get(root, "provider_options")) +
               (size_t)cJSON_GetArraySize(oc_json_get(root, "ep_session_options"));
    blob->eps = oc_arena_alloc(&blob->arena, (n ? n : 1) * sizeof *blob->eps);
    blob->recipes = oc_arena_alloc(&blob->arena, (capacity ? capacity : 1) * sizeof *blob->recipes);
    if (blob->eps == NULL || blob->recipes == NULL) {
        status = out_of_memory(c);
        goto done;
    }
    i = 0;
    cJSON_ArrayForEach(ep, eps) {
        if (!cJSON_IsString(ep)) {
            status = fail(c, OC_ERR_CORRUPT, "blob header field 'execution_providers' must list names");
            goto done;
        }
        blob->eps[i] = oc_arena_strndup(&blob->arena, ep->valuestring, strlen(ep->valuestring));
        if (blob->eps[i] == NULL || recipe_for(blob, blob->eps[i], capacity) == NULL) {
            status = out_of_memory(c);
            goto done;
        }
        ++i;
    }
    blob->ep_count = i;
    {
        const cJSON *policy = oc_json_get(root, "device_policy"); /* checked: absent, null or a known name */
        if (cJSON_IsString(policy)) {
            blob->device_policy = oc_arena_strndup(&blob->arena, policy->valuestring, strlen(policy->valuestring));
            if (blob->device_policy == NULL) {
                status = out_of_memory(c);
                goto done;
            }
        }
    }
    status = options_of(c, oc_json_get(root, "provider_options"), "provider_options", 1, capacity);
    if (status != OC_OK) goto done;
    status = options_of(c, oc_json_get(root, "ep_session_options"), "ep_session_options", 0, capacity);
    if (status != OC_OK) goto done;
    if (oc_parse_version(blob->info.min_runtime_version, blob->min_runtime) != 0) {
        status = fail(c, OC_ERR_CORRUPT, "blob header field 'min_runtime_version' is not a version: '%s'",
                      blob->info.min_runtime_version);
        goto done;
    }
    if (!count_of(oc_json_get(root, "graph_size"), &graph_size)) {
        status = fail(c, OC_ERR_CORRUPT, "blob header declares a negative graph size");
        goto done;
    }
    status = parse_frames(c, oc_json_get(root, "frames"), start, end,
                          blob->info.format == OC_FORMAT_ORT);
    if (status != OC_OK) goto done;
    weights = oc_json_get(root, "weights");
    if (cJSON_IsObject(weights)) {
        status = parse_weights(c, weights);
        if (status != OC_OK) goto done;
        if (blob->info.format == OC_FORMAT_ORT) {
            status = fail(c, OC_ERR_CORRUPT, "blob header gives an ORT-format model external weights, which it cannot use");
            goto done;
        }
    }
    blob->info.graph_size = graph_size;
    for (i = 0; i < blob->frame_count; ++i) {
        sums[blob->frames[i].section] += blob->frames[i].content_size;
        compressed += blob->frames[i].size;
    }
    if (sums[0] != graph_size || sums[1] != blob->info.weights_size) {
        int which = sums[0] != graph_size ? 0 : 1;
        status = fail(c, OC_ERR_CORRUPT, "blob frames hold %llu bytes of %s, but the header declares %llu",
                      (unsigned long long)sums[which], which ? "weights" : "graph",
                      (unsigned long long)(which ? blob->info.weights_size : graph_size));
        goto done;
    }
    if (model_size != graph_size + blob->info.weights_size) {
        status = fail(c, OC_ERR_CORRUPT, "blob header's model_size is not the graph size plus the weights size");
        goto done;
    }
    if (compressed_size != compressed) {
        status = fail(c, OC_ERR_CORRUPT, "blob header's compressed_size is not the sum of its frame sizes");
        goto done;
    }
done:
    cJSON_Delete(root);
    return status;
}

/* --- the layout and the content ---------------------------------------------------------------- */

static oc_status check_frames_present(parse_ctx *c) {
    oc_blob *blob = c->blob;
    size_t i, counts[2] = {0, 0}, seen[2] = {0, 0};
    for (i = 0; i < blob->frame_count; ++i) counts[blob->frames[i].section]++;
    for (i = 0; i < blob->frame_count; ++i) {
        const oc_frame *f = &blob->frames[i];
        const char *section = f->section ? "weights" : "graph";
        size_t k = ++seen[f->section];
        if (f->raw) {
            uint64_t j;
            for (j = 0; j < f->pad; ++j)
                if (blob->data[f->offset + j] != 0)
                    return fail(c, OC_ERR_CHECKSUM, "%s: %s frame %zu of %zu has damaged padding (non-zero bytes)" OC_DAMAGED,
                                blob->where, section, k, counts[f->section]);
        } else {
            ZSTD_frameHeader params;
            size_t r = ZSTD_getFrameHeader(&params, blob->data + f->offset, (size_t)f->size);
            if (r != 0 || params.frameType != ZSTD_frame)
                return fail(c, OC_ERR_CHECKSUM, "%s: %s frame %zu of %zu is damaged (not a zstd frame)" OC_DAMAGED, blob->where,
                            section, k, counts[f->section]);
            if (params.frameContentSize != f->content_size || !params.checksumFlag)
                return fail(c, OC_ERR_CHECKSUM, "%s: %s frame %zu of %zu does not match its header (damaged or modified)" OC_DAMAGED,
                            blob->where, section, k, counts[f->section]);
        }
    }
    return OC_OK;
}

/* The CRC-32s of raw content, piece by piece (RAW_CRC_PIECE bytes each), by `workers` threads: the
 * pieces of every raw frame in blob order, worker w taking pieces w, w + workers, ... Each worker
 * stops at its first mismatch and records it; the lowest one is reported, as a single thread would. */
typedef struct crc_job {
    const oc_blob *blob;
    const oc_frame *raw[2]; /* the raw frames: each is a whole section, so one per section at most */
    size_t raw_count, count, workers;
    size_t failed_at[64]; /* per worker, written by that worker only: its failing piece (count: none) */
} crc_job;

/* Piece `index` of the blob's raw content: its frame and its first byte within the frame's content. */
static const oc_frame *crc_piece(const crc_job *job, size_t index, uint64_t *start) {
    size_t i;
    for (i = 0; i < job->raw_count; ++i) {
        if (index < job->raw[i]->crc_count) {
            *start = (uint64_t)index * RAW_CRC_PIECE;
            return job->raw[i];
        }
        index -= job->raw[i]->crc_count;
    }
    return NULL; /* not reached: index < count */
}

static void crc_worker(void *raw, size_t worker) {
    crc_job *job = raw;
    size_t piece;
    job->failed_at[worker] = job->count;
    for (piece = worker; piece < job->count; piece += job->workers) {
        uint64_t start, n;
        const oc_frame *f = crc_piece(job, piece, &start);
        uLong crc = crc32(0L, Z_NULL, 0);
        n = f->content_size - start < RAW_CRC_PIECE ? f->content_size - start : RAW_CRC_PIECE;
        crc = crc32(crc, job->blob->data + f->offset + f->pad + start, (uInt)n);
        if ((uint32_t)crc != f->crcs[start / RAW_CRC_PIECE]) {
            job->failed_at[worker] = piece;
            return;
        }
    }
}

static oc_status check_raw_content(parse_ctx *c, size_t threads) {
    oc_blob *blob = c->blob;
    crc_job job;
    size_t i, w, first;
    memset(&job, 0, sizeof job);
    job.blob = blob;
    for (i = 0; i < blob->frame_count; ++i) {
        if (!blob->frames[i].raw) continue;
        if (job.raw_count == sizeof job.raw / sizeof job.raw[0]) /* the layout check refused this already */
            return fail(c, OC_ERR_CORRUPT, "%s: more raw extents than sections", blob->where);
        job.raw[job.raw_count++] = &blob->frames[i];
        job.count += blob->frames[i].crc_count;
    }
    if (job.count == 0) return OC_OK;
    if (threads == 0) threads = job.count > 1 ? oc_cores() : 1; /* asked only when it matters: it reads /sys */
    job.workers = threads < job.count ? threads : job.count;
    if (job.workers > sizeof job.failed_at / sizeof job.failed_at[0])
        job.workers = sizeof job.failed_at / sizeof job.failed_at[0];
    if (job.workers < 1) job.workers = 1;
    if (job.workers == 1)
        crc_worker(&job, 0);
    else
        oc_run_parallel(crc_worker, &job, job.workers);
    for (w = 0, first = job.count; w < job.workers; ++w)
        if (job.failed_at[w] < first) first = job.failed_at[w];
    if (first < job.count) {
        uint64_t start, n;
        const oc_frame *f = crc_piece(&job, first, &start);
        n = f->content_size - start < RAW_CRC_PIECE ? f->content_size - start : RAW_CRC_PIECE;
        return fail(c, OC_ERR_CHECKSUM,
                    "%s: %s frame 1 of 1 is damaged: CRC-32 of its content bytes %llu to %llu differs from the "
                    "header's" OC_DAMAGED, blob->where, f->section ? "weights" : "graph", (unsigned long long)start,
                    (unsigned long long)(start + n));
    }
    return OC_OK;
}

static void *zstd_alloc(void *opaque, size_t size) { return oc_malloc((const oc_alloc *)opaque, size); }
static void zstd_free(void *opaque, void *address) { oc_free((const oc_alloc *)opaque, address); }

/* One section's zstd frames decoded by `workers` threads: worker w takes frames w, w + workers, ...
 * Each records its first failure; the lowest failing frame is reported. */
#define MAX_DECODE_WORKERS 64

typedef struct decode_job {
    oc_blob *blob;
    ZSTD_DCtx *shared; /* for worker 0 when the caller keeps one (not freed here), or NULL */
    const oc_frame **frames;
    size_t count, workers;
    uint8_t *buffer;
    /* per worker, written by that worker only: its failing frame (count: none), why, no memory */
    size_t failed_at[MAX_DECODE_WORKERS];
    const char *why[MAX_DECODE_WORKERS];
    int no_memory[MAX_DECODE_WORKERS];
} decode_job;

static void decode_worker(void *raw, size_t worker) {
    decode_job *job = raw;
    ZSTD_customMem mem;
    ZSTD_DCtx *dctx;
    size_t i;
    mem.customAlloc = zstd_alloc;
    mem.customFree = zstd_free;
    mem.opaque = &job->blob->alloc;
    job->failed_at[worker] = job->count;
    dctx = worker == 0 && job->shared != NULL ? job->shared : ZSTD_createDCtx_advanced(mem);
    if (dctx == NULL) {
        job->no_memory[worker] = 1;
        return;
    }
    for (i = worker; i < job->count; i += job->workers) {
        const oc_frame *f = job->frames[i];
        size_t r = ZSTD_decompressDCtx(dctx, job->buffer + f->content_offset, (size_t)f->content_size,
                                       job->blob->data + f->offset, (size_t)f->size);
        if (ZSTD_isError(r) || r != f->content_size) { /* this worker's first failure */
            job->why[worker] = ZSTD_isError(r) ? ZSTD_getErrorName(r) : "short content";
            job->failed_at[worker] = i;
            break;
        }
    }
    if (dctx != job->shared) ZSTD_freeDCtx(dctx);
}

/* The section as one view: in place when it is one raw extent, else zstd frames decoded (in
 * parallel) into a buffer the blob owns. */
static oc_status decode_section(parse_ctx *c, int section, uint64_t size, size_t threads, ZSTD_DCtx *shared,
                                const uint8_t **view, uint8_t **owned) {
    oc_blob *blob = c->blob;
    size_t i, total = 0;
    decode_job job;
    *view = NULL;
    *owned = NULL;
    for (i = 0; i < blob->frame_count; ++i)
        if (blob->frames[i].section == section) {
            ++total;
            if (blob->frames[i].raw) {
                *view = blob->data + blob->frames[i].offset + blob->frames[i].pad;
                return OC_OK;
            }
        }
    if (total == 0 || size == 0) return OC_OK;
    if (size > SIZE_MAX) return fail(c, OC_ERR_TOO_LARGE, "%s: too large for this address space", blob->where);
    memset(&job, 0, sizeof job);
    job.blob = blob;
    job.shared = shared;
    job.count = total;
    job.frames = oc_malloc(&blob->alloc, total * sizeof *job.frames);
    job.buffer = oc_malloc(&blob->alloc, (size_t)size);
    if (job.frames == NULL || job.buffer == NULL) {
        oc_free(&blob->alloc, job.frames);
        oc_free(&blob->alloc, job.buffer);
        return fail(c, OC_ERR_OUT_OF_MEMORY, "%s: out of memory for %llu bytes of %s", blob->where,
                    (unsigned long long)size, section ? "weights" : "graph");
    }
    for (i = 0, total = 0; i < blob->frame_count; ++i)
        if (blob->frames[i].section == section) job.frames[total++] = &blob->frames[i];
    if (threads == 0) threads = total > 1 ? oc_cores() : 1; /* asked only when it matters: it reads /sys */
    job.workers = threads < total ? threads : total;
    if (job.workers > MAX_DECODE_WORKERS) job.workers = MAX_DECODE_WORKERS;
    if (job.workers < 1) job.workers = 1;
    if (job.workers == 1)
        decode_worker(&job, 0);
    else
        oc_run_parallel(decode_worker, &job, job.workers);
    oc_free(&blob->alloc, job.frames);
    {
        size_t w, first = total, no_memory = 0;
        const char *why = NULL;
        for (w = 0; w < job.workers; ++w) { /* the lowest failing frame is the one reported */
            no_memory |= (size_t)job.no_memory[w];
            if (job.failed_at[w] < first) {
                first = job.failed_at[w];
                why = job.why[w];
            }
        }
        if (no_memory || first < total) {
            oc_free(&blob->alloc, job.buffer);
            if (first < total)
                return fail(c, OC_ERR_CHECKSUM, "%s: %s frame %zu of %zu is damaged (%s)" OC_DAMAGED, blob->where,
                            section ? "weights" : "graph", first + 1, total, why);
            return fail(c, OC_ERR_OUT_OF_MEMORY, "%s: out of memory for a zstd decoder", blob->where);
        }
    }
    *view = job.buffer;
    *owned = job.buffer;
    return OC_OK;
}

static void report(const oc_blob_options *options, const char *stage, double fraction) {
    if (options != NULL && options->progress != NULL) options->progress(options->progress_user, stage, fraction);
}

oc_status oc_blob_parse(const uint8_t *data, size_t size, const oc_blob_options *options, const char *origin,
                        void *map, size_t map_size, void *buffer, oc_blob **out, oc_error *err) {
    return oc_blob_parse_with(data, size, options, origin, map, map_size, buffer, NULL, out, err);
}

oc_status oc_blob_parse_with(const uint8_t *data, size_t size, const oc_blob_options *options, const char *origin,
                             void *map, size_t map_size, void *buffer, void *dctx, oc_blob **out, oc_error *err) {
    oc_alloc alloc = oc_alloc_from(options ? options->allocator : NULL);
    uint64_t max_model_size = options && options->max_model_size ? options->max_model_size : DEFAULT_MAX_MODEL_SIZE;
    int check_raw = options == NULL || !options->skip_raw_check;
    size_t threads = options && options->threads ? (size_t)options->threads : 0; /* 0: one per core */
    parse_ctx ctx;
    oc_blob *blob;
    oc_status status;
    size_t start, end, i;
    uint32_t payload, version;
    uint64_t expected;
    char where[512];
    if (out == NULL) return oc_fail(err, OC_ERR_INVALID_ARGUMENT, "oc_blob_open: out is NULL");
    *out = NULL;
    if (data == NULL && size != 0) return oc_fail(err, OC_ERR_INVALID_ARGUMENT, "oc_blob_open: data is NULL");
    if (options != NULL && options->threads < 0)
        return oc_fail(err, OC_ERR_INVALID_ARGUMENT,
                       "oc_blob_open: threads is %d; pass 0 for one per core, or a count", options->threads);
    blob = oc_calloc(&alloc, 1, sizeof *blob);
    if (blob == NULL) return oc_fail(err, OC_ERR_OUT_OF_MEMORY, "out of memory opening a blob");
    blob->alloc = alloc;
    oc_arena_init(&blob->arena, &alloc);
    blob->data = data;
    blob->size = size;
    blob->map = map;
    blob->map_size = map_size;
    blob->buffer = buffer;
    blob->info.blob_format_version = 0;
    ctx.blob = blob;
    ctx.origin = origin;
    ctx.err = err;
    report(options, "check", 0.0);

    start = header_start(data, size, &ctx, &status);
    if (status != OC_OK) goto fail;
    if (size - start < 8) {
        static const uint8_t magic[4] = {0x5E, 0x2A, 0x4D, 0x18};
        size_t have = size - start;
        if (have <= 4 && memcmp(data + start, magic, have) == 0) /* a prefix of the magic, or nothing */
            status = fail(&ctx, OC_ERR_TRUNCATED, "blob is only %zu bytes long: the header is cut off" OC_DAMAGED, size);
        else
            status = fail(&ctx, OC_ERR_NOT_A_BLOB, "not an onnx-cooker blob: too short to hold a header");
        goto fail;
    }
    if (le32(data + start) != SKIPPABLE_MAGIC) {
        size_t header = start == 0 && memcmp(data + 4, "ORTM", 4) == 0 ? header_frame_in_tail(data, size) : size;
        if (header < size && holds_trailer_of(data, size, header)) /* an ORT blob's graph and header, then? */
            status = fail(&ctx, OC_ERR_CORRUPT, "blob has bytes added after its trailer" OC_DAMAGED);
        else if (header < size)
            status = fail(&ctx, OC_ERR_TRUNCATED, "blob is cut off at its end: its trailer is missing" OC_DAMAGED);
        else if (start == 0 && memcmp(data + 4, "ORTM", 4) == 0)
            status = fail(&ctx, OC_ERR_NOT_A_BLOB,
                          "not an onnx-cooker blob: an ORT-format model without the cooker's trailer at its end (a "
                          "plain .ort file, or a blob cut off or with bytes added at its end); pass an .ocb file "
                          "written by `onnx-cooker cook`");
        else
            status = fail(&ctx, OC_ERR_NOT_A_BLOB,
                          "not an onnx-cooker blob: it does not start with the header frame (pass an .ocb file written by "
                          "`onnx-cooker cook`, not a plain .onnx/.ort file)");
        goto fail;
    }
    payload = le32(data + start + 4);
    if (payload > MAX_HEADER_SIZE || payload < HEADER_PREFIX) {
        status = fail(&ctx, OC_ERR_CORRUPT, "blob header declares %u bytes; a valid header is 14 B to 16 MiB", payload);
        goto fail;
    }
    end = start + 8u + payload;
    if (size < end) {
        status = fail(&ctx, OC_ERR_TRUNCATED, "blob is %zu bytes, but its header alone needs %zu: file cut off" OC_DAMAGED, size, end);
        goto fail;
    }
    if (memcmp(data + start + 8, "ONNXCOOK", 8) != 0) {
        status = fail(&ctx, OC_ERR_NOT_A_BLOB, "not an onnx-cooker blob: the first zstd frame is not an onnx-cooker header");
        goto fail;
    }
    version = (uint32_t)data[start + 16] | (uint32_t)data[start + 17] << 8;
    if (version != OC_BLOB_FORMAT_VERSION) {
        status = fail(&ctx, OC_ERR_UNSUPPORTED_VERSION,
                      "blob format version %u is not supported: this loader reads version %d%s; re-cook the model with "
                      "the cooker that matches this loader", version, OC_BLOB_FORMAT_VERSION,
                      version == 1 || version == 2 ? " (the Python loader still reads versions 1 and 2)" : "");
        goto fail;
    }
    {
        uLong crc = crc32(crc32(0L, Z_NULL, 0), data + start + 8 + HEADER_PREFIX, (uInt)(payload - HEADER_PREFIX));
        if ((uint32_t)crc != le32(data + start + 18)) {
            status = fail(&ctx, OC_ERR_CHECKSUM, "blob header checksum mismatch: the file is damaged or was modified" OC_DAMAGED);
            goto fail;
        }
    }
    blob->info.blob_format_version = version;
    status = parse_header(&ctx, (const char *)data + start + 8 + HEADER_PREFIX, payload - HEADER_PREFIX, start, end);
    if (status != OC_OK) goto fail;
    snprintf(where, sizeof where, "%s%sblob of model '%s' (%s)", origin ? origin : "", origin ? ": " : "",
             blob->info.name, blob->info.platform);
    blob->where = oc_arena_strndup(&blob->arena, where, strlen(where));
    if (blob->where == NULL) {
        status = out_of_memory(&ctx);
        goto fail;
    }
    ctx.origin = NULL; /* `where` names it from here on */
    if (blob->info.model_size > max_model_size) {
        status = fail(&ctx, OC_ERR_TOO_LARGE,
                      "%s declares a %llu-byte model, over the limit of %llu bytes; raise max_model_size if the model "
                      "is genuinely that large", blob->where, (unsigned long long)blob->info.model_size,
                      (unsigned long long)max_model_size);
        goto fail;
    }
    expected = end;
    for (i = 0; i < blob->frame_count; ++i)
        if (blob->frames[i].offset + blob->frames[i].size > expected)
            expected = blob->frames[i].offset + blob->frames[i].size;
    expected += TRAILER_SIZE;
    if ((uint64_t)size < expected) {
        status = fail(&ctx, OC_ERR_TRUNCATED, "%s is cut off: %zu of %llu bytes present" OC_DAMAGED, blob->where, size,
                      (unsigned long long)expected);
        goto fail;
    }
    if ((uint64_t)size > expected) {
        status = fail(&ctx, OC_ERR_CORRUPT, "%s has %llu unexpected trailing bytes" OC_DAMAGED, blob->where,
                      (unsigned long long)((uint64_t)size - expected));
        goto fail;
    }
    if (memcmp(data + size - TRAILER_SIZE, "OCB3TAIL", 8) != 0) {
        status = fail(&ctx, OC_ERR_TRUNCATED, "%s is cut off or damaged at its end: its trailer is missing" OC_DAMAGED, blob->where);
        goto fail;
    }
    if (le64(data + size - 8) != start) {
        status = fail(&ctx, OC_ERR_CORRUPT, "%s: its trailer does not point at its header" OC_DAMAGED, blob->where);
        goto fail;
    }
    status = check_frames_present(&ctx);
    if (status != OC_OK) goto fail;
    if (check_raw) {
        status = check_raw_content(&ctx, threads);
        if (status != OC_OK) goto fail;
    }
    report(options, "check", 1.0);
    report(options, "decompress", 0.0);
    status = decode_section(&ctx, OC_SECTION_GRAPH, blob->info.graph_size, threads, dctx, &blob->graph,
                            &blob->graph_owned);
    if (status != OC_OK) goto fail;
    blob->graph_size = (size_t)blob->info.graph_size;
    {
        /* the header's format is the one onnxruntime reads the graph as: "ORTM" at bytes 4-7 makes
         * any model an ORT one to it (Python: header.check_graph_kind). Raw content was CRC-checked
         * above, or its bytes vouched for (the manifest's sha256, a trusting caller): no damage. */
        int ort = blob->graph_size >= 8 && memcmp(blob->graph + 4, "ORTM", 4) == 0;
        if (ort != (blob->info.format == OC_FORMAT_ORT)) {
            status = fail(&ctx, OC_ERR_CORRUPT,
                          "%s: its header says %s format, but its graph is %s; the blob was not written as "
                          "onnx-cooker writes blobs: re-run `onnx-cooker cook`",
                          blob->where, ort ? "ONNX" : "ORT", ort ? "an ORT-format model" : "not an ORT model");
            goto fail;
        }
    }
    status = decode_section(&ctx, OC_SECTION_WEIGHTS, blob->info.weights_size, threads, dctx, &blob->weights,
                            &blob->weights_owned);
    if (status != OC_OK) goto fail;
    blob->weights_size = (size_t)blob->info.weights_size;
    report(options, "decompress", 1.0);
    *out = blob;
    return OC_OK;
fail:
    blob->map = NULL; /* the caller still owns what it passed when the open fails */
    blob->buffer = NULL;
    oc_blob_close(blob);
    return status;
}

oc_status oc_blob_open_memory(const void *data, size_t size, const oc_blob_options *options, oc_blob **out,
                              oc_error *err) {
    oc_alloc alloc = oc_alloc_from(options ? options->allocator : NULL);
    void *copy = NULL;
    oc_status status;
    if (out == NULL) return oc_fail(err, OC_ERR_INVALID_ARGUMENT, "oc_blob_open: out is NULL");
    *out = NULL;
    if (data != NULL && (status = oc_aligned_copy(&alloc, &data, size, &copy, err)) != OC_OK) return status;
    status = oc_blob_parse(data, size, options, NULL, NULL, 0, copy, out, err); /* the blob owns a copy */
    if (status != OC_OK) oc_free(&alloc, copy);
    return status;
}

oc_status oc_blob_name_file(oc_blob *blob, const char *path) {
    blob->named_file = oc_arena_strndup(&blob->arena, path, strlen(path));
    return blob->named_file == NULL ? OC_ERR_OUT_OF_MEMORY : OC_OK;
}

oc_status oc_blob_set_file(oc_blob *blob, const char *path, const uint64_t identity[OC_IDENTITY_WORDS], int reopen_by_name) {
    blob->file_path = oc_arena_strndup(&blob->arena, path, strlen(path));
    if (blob->file_path == NULL) return OC_ERR_OUT_OF_MEMORY;
    blob->named_file = blob->file_path;
    memcpy(blob->file_identity, identity, sizeof blob->file_identity);
    blob->reopen_by_name = reopen_by_name;
    return OC_OK;
}

oc_status oc_blob_open_file(const char *path, const oc_blob_options *options, oc_blob **out, oc_error *err) {
    void *map = NULL;
    size_t size = 0;
    uint64_t identity[OC_IDENTITY_WORDS];
    oc_status status;
    if (path == NULL || out == NULL) return oc_fail(err, OC_ERR_INVALID_ARGUMENT, "oc_blob_open_file: NULL argument");
    *out = NULL;
    status = oc_map_file(path, &map, &size, identity, err);
    if (status != OC_OK) return status;
    status = oc_blob_parse(map, size, options, path, map, size, NULL, out, err);
    if (status != OC_OK) {
        oc_unmap(map, size);
        return status;
    }
    if ((identity[5] != 0 ? oc_blob_set_file(*out, path, identity, 1) : oc_blob_name_file(*out, path)) != OC_OK) {
        oc_blob_close(*out);
        *out = NULL;
        return oc_fail(err, OC_ERR_OUT_OF_MEMORY, "out of memory");
    }
    return OC_OK;
}

void oc_blob_close(oc_blob *blob) {
    oc_alloc alloc;
    if (blob == NULL) return;
    alloc = blob->alloc;
    if (blob->release_sessions_state != NULL) blob->release_sessions_state(blob);
    oc_free(&alloc, blob->graph_owned);
    oc_free(&alloc, blob->weights_owned);
    if (blob->map != NULL) oc_unmap(blob->map, blob->map_size);
    oc_free(&alloc, blob->buffer);
    oc_arena_free(&blob->arena);
    oc_free(&alloc, blob);
}

oc_status oc_blob_get_info(const oc_blob *blob, oc_blob_info *out, oc_error *err) {
    if (blob == NULL || out == NULL) return oc_fail(err, OC_ERR_INVALID_ARGUMENT, "oc_blob_get_info: NULL argument");
    *out = blob->info;
    return OC_OK;
}

oc_status oc_blob_model(oc_blob *blob, const void **bytes, size_t *size, oc_error *err) {
    if (blob == NULL || bytes == NULL || size == NULL)
        return oc_fail(err, OC_ERR_INVALID_ARGUMENT, "oc_blob_model: NULL argument");
    *bytes = blob->graph;
    *size = blob->graph_size;
    return OC_OK;
}

oc_status oc_blob_weights(oc_blob *blob, const void **bytes, size_t *size, oc_error *err) {
    if (blob == NULL || bytes == NULL || size == NULL)
        return oc_fail(err, OC_ERR_INVALID_ARGUMENT, "oc_blob_weights: NULL argument");
    *bytes = blob->weights_size ? blob->weights : NULL;
    *size = blob->weights_size;
    return OC_OK;
}

size_t oc_blob_ep_count(const oc_blob *blob) { return blob ? blob->ep_count : 0; }
const char *oc_blob_device_policy(const oc_blob *blob) { return blob ? blob->device_policy : NULL; }

const char *oc_blob_ep_name(const oc_blob *blob, size_t index) {
    return blob && index < blob->ep_count ? blob->eps[index] : NULL;
}

static const oc_ep_recipe *find_recipe(const oc_blob *blob, const char *ep) {
    size_t i;
    if (blob == NULL || ep == NULL) return NULL;
    for (i = 0; i < blob->recipe_count; ++i)
        if (strcmp(blob->recipes[i].name, ep) == 0) return &blob->recipes[i];
    return NULL;
}

size_t oc_blob_provider_option_count(const oc_blob *blob, const char *ep) {
    const oc_ep_recipe *r = find_recipe(blob, ep);
    return r ? r->provider_count : 0;
}

size_t oc_blob_session_option_count(const oc_blob *blob, const char *ep) {
    const oc_ep_recipe *r = find_recipe(blob, ep);
    return r ? r->session_count : 0;
}

static oc_status kv_at(const oc_kv *list, size_t count, size_t index, const char **key, const char **value) {
    if (list == NULL || index >= count || key == NULL || value == NULL) return OC_ERR_INVALID_ARGUMENT;
    *key = list[index].key;
    *value = list[index].value;
    return OC_OK;
}

oc_status oc_blob_provider_option(const oc_blob *blob, const char *ep, size_t index, const char **key,
                                  const char **value) {
    const oc_ep_recipe *r = find_recipe(blob, ep);
    return r ? kv_at(r->provider, r->provider_count, index, key, value) : OC_ERR_INVALID_ARGUMENT;
}

oc_status oc_blob_session_option(const oc_blob *blob, const char *ep, size_t index, const char **key,
                                 const char **value) {
    const oc_ep_recipe *r = find_recipe(blob, ep);
    return r ? kv_at(r->session, r->session_count, index, key, value) : OC_ERR_INVALID_ARGUMENT;
}
