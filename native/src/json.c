/* json.c - cJSON read as Python's json.loads reads the same text, so that the C and Python loaders
 * reach the same verdict on a crafted header or manifest: trailing bytes other than whitespace are
 * refused, and of duplicate keys the last one counts. */
#include <string.h>

#include <cjson/cJSON.h>

#include "internal.h"

cJSON *oc_json_parse(const char *text, size_t length) {
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts(text, length, &end, 0);
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
