/* json.c - cJSON read as Python's json.loads reads the same text, so that the C and Python loaders
 * reach the same verdict on a crafted header or manifest: UTF-8 only (a leading BOM allowed, as
 * cJSON skips it and Python decodes with utf-8-sig), trailing bytes other than whitespace are
 * refused, of duplicate keys the last one counts, and a \u0000 escape is refused. */
#include <string.h>

#include <cjson/cJSON.h>

#include "internal.h"

/* Whether text[0..length) is UTF-8 as Python's bytes.decode("utf-8") takes it: no overlong forms,
 * no surrogates, nothing past U+10FFFF (cJSON itself checks none of it, and the Python loader
 * decodes a header or manifest before it parses it). */
static int valid_utf8(const unsigned char *s, size_t length) {
    size_t i = 0, k, more;
    while (i < length) {
        unsigned char c = s[i];
        unsigned long code;
        if (c < 0x80) {
            ++i;
            continue;
        }
        if (c >= 0xC2 && c <= 0xDF) more = 1, code = c & 0x1F;
        else if (c >= 0xE0 && c <= 0xEF) more = 2, code = c & 0x0F;
        else if (c >= 0xF0 && c <= 0xF4) more = 3, code = c & 0x07;
        else return 0;
        if (length - i <= more) return 0;
        for (k = 1; k <= more; ++k) {
            if ((s[i + k] & 0xC0) != 0x80) return 0;
            code = (code << 6) | (s[i + k] & 0x3F);
        }
        if ((more == 2 && (code < 0x800 || (code >= 0xD800 && code <= 0xDFFF))) ||
            (more == 3 && (code < 0x10000 || code > 0x10FFFF)))
            return 0;
        i += more + 1;
    }
    return 1;
}

/* Whether text[0..length) holds the escape \u0000: cJSON would write the NUL it stands for into a
 * string and every reader of it would stop there, while Python reads the whole string; both loaders
 * refuse such a text (onnx_cooker/runtime/header.py, load_json). */
static int holds_nul_escape(const char *text, size_t length) {
    static const char escape[] = "\\u0000";
    size_t i;
    for (i = 0; i + sizeof escape - 1 <= length; ++i)
        if (text[i] == '\\' && memcmp(text + i, escape, sizeof escape - 1) == 0) return 1;
    return 0;
}

cJSON *oc_json_parse(const char *text, size_t length) {
    const char *end = NULL;
    cJSON *root;
    if (!valid_utf8((const unsigned char *)text, length) || holds_nul_escape(text, length)) return NULL;
    /* cJSON writes its process-wide error record on every parse: one parse at a time (threads may
     * open blobs of one bundle at once; its hooks are malloc's, never the caller's code) */
    oc_lock();
    root = cJSON_ParseWithLengthOpts(text, length, &end, 0);
    oc_unlock();
    if (root == NULL) return NULL;
    for (; end != NULL && end < text + length; ++end) {
        if (*end != ' ' && *end != '\t' && *end != '\n' && *end != '\r') {
            cJSON_Delete(root);
            return NULL;
        }
    }
    return root;
}

cJSON *oc_json_get(const cJSON *object, const char *key) {
    cJSON *item, *found = NULL;
    if (!cJSON_IsObject(object)) return NULL;
    for (item = object->child; item != NULL; item = item->next)
        if (item->string != NULL && strcmp(item->string, key) == 0) found = item;
    return found;
}
