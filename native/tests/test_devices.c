/* test_devices.c - the EP/device decision (src/devices.c) on cases given as JSON lines on stdin,
 * one JSON line out per case: tests/test_native_plugin_eps.py runs the Python loader's plan_session
 * on the same cases and compares. A case:
 *   {"preference": [..], "available": [..], "ep_devices": null | [{"ep", "type": "cpu"|"gpu"|"npu",
 *    "vendor_id", "vendor"}], "selection": null | "policy" | [[ep, type or null], ..],
 *    "blob_policy": null | "name", "model": "m", "runtime": "1.30.0"}
 * out: {"status", "message", "kind": "classic"|"devices"|"policy", "names", "devices": [[ep, [indices]]],
 *       "policy", "explanation"} */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "devices.h"

#define MAX 64

static const char *text_of(const cJSON *item) { return cJSON_IsString(item) ? item->valuestring : NULL; }

static oc_device_type type_of(const cJSON *item) {
    const char *t = text_of(item);
    if (t == NULL) return OC_DEVICE_ANY;
    if (strcmp(t, "cpu") == 0) return OC_DEVICE_CPU;
    if (strcmp(t, "gpu") == 0) return OC_DEVICE_GPU;
    if (strcmp(t, "npu") == 0) return OC_DEVICE_NPU;
    return (oc_device_type)99; /* a bad type: the decision must refuse it */
}

static size_t names(const cJSON *array, const char **out) {
    const cJSON *item;
    size_t n = 0;
    cJSON_ArrayForEach(item, array) if (n < MAX && text_of(item)) out[n++] = item->valuestring;
    return n;
}

static void run_case(const cJSON *c) {
    const char *preference[MAX], *available[MAX];
    oc_plan_device devices[MAX];
    oc_device_pair pairs[MAX];
    oc_devices selection;
    oc_plan_input in;
    oc_plan *plan = calloc(1, sizeof *plan);
    oc_error err;
    const cJSON *item, *eps = cJSON_GetObjectItemCaseSensitive(c, "ep_devices");
    const cJSON *sel = cJSON_GetObjectItemCaseSensitive(c, "selection");
    cJSON *out = cJSON_CreateObject(), *list;
    char *printed;
    size_t i, d;
    oc_status status;
    if (plan == NULL || out == NULL) exit(3);
    memset(&in, 0, sizeof in);
    memset(&selection, 0, sizeof selection);
    err.message[0] = '\0';
    in.preference = preference;
    in.preference_count = names(cJSON_GetObjectItemCaseSensitive(c, "preference"), preference);
    in.available = available;
    in.available_count = names(cJSON_GetObjectItemCaseSensitive(c, "available"), available);
    in.plugin_api = cJSON_IsArray(eps);
    cJSON_ArrayForEach(item, eps) {
        if (in.device_count == MAX) break;
        devices[in.device_count].ep = text_of(cJSON_GetObjectItemCaseSensitive(item, "ep"));
        devices[in.device_count].type = type_of(cJSON_GetObjectItemCaseSensitive(item, "type"));
        devices[in.device_count].vendor_id =
            (uint32_t)cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(item, "vendor_id"));
        devices[in.device_count].vendor = text_of(cJSON_GetObjectItemCaseSensitive(item, "vendor"));
        devices[in.device_count++].handle = NULL;
    }
    in.devices = devices;
    if (cJSON_IsString(sel)) {
        selection.policy = sel->valuestring;
        in.selection = &selection;
    } else if (cJSON_IsArray(sel)) {
        cJSON_ArrayForEach(item, sel) {
            if (selection.pair_count == MAX) break;
            pairs[selection.pair_count].ep = text_of(cJSON_GetArrayItem(item, 0));
            pairs[selection.pair_count++].type = type_of(cJSON_GetArrayItem(item, 1));
        }
        selection.pairs = pairs;
        in.selection = &selection;
    }
    in.blob_policy = text_of(cJSON_GetObjectItemCaseSensitive(c, "blob_policy"));
    in.model = text_of(cJSON_GetObjectItemCaseSensitive(c, "model"));
    in.runtime = text_of(cJSON_GetObjectItemCaseSensitive(c, "runtime"));
    status = oc_plan_session(&in, plan, &err);
    cJSON_AddStringToObject(out, "status", oc_status_name(status));
    cJSON_AddStringToObject(out, "message", status == OC_OK ? "" : err.message);
    if (status == OC_OK) {
        static const char *const kinds[] = {"classic", "devices", "policy"};
        cJSON_AddStringToObject(out, "kind", kinds[plan->kind]);
        list = cJSON_AddArrayToObject(out, "names");
        for (i = 0; i < plan->name_count; ++i) cJSON_AddItemToArray(list, cJSON_CreateString(plan->names[i]));
        list = cJSON_AddArrayToObject(out, "devices");
        for (i = 0; i < plan->chosen_count; ++i) {
            cJSON *pair = cJSON_CreateArray(), *indices = cJSON_CreateArray();
            cJSON_AddItemToArray(pair, cJSON_CreateString(plan->chosen[i].ep));
            for (d = 0; d < OC_PLAN_MAX_DEVICES; ++d)
                if (plan->chosen[i].devices >> d & 1u) cJSON_AddItemToArray(indices, cJSON_CreateNumber((double)d));
            cJSON_AddItemToArray(pair, indices);
            cJSON_AddItemToArray(list, pair);
        }
        if (plan->policy) cJSON_AddStringToObject(out, "policy", plan->policy);
        else cJSON_AddNullToObject(out, "policy");
        cJSON_AddStringToObject(out, "explanation", plan->explanation);
    }
    printed = cJSON_PrintUnformatted(out);
    if (printed == NULL) exit(3);
    puts(printed);
    free(printed);
    cJSON_Delete(out);
    free(plan);
}

int main(void) {
    static char line[1 << 16];
    while (fgets(line, sizeof line, stdin) != NULL) {
        cJSON *c = cJSON_Parse(line);
        if (c == NULL) {
            fputs("test_devices: a line that is not JSON\n", stderr);
            return 2;
        }
        run_case(c);
        cJSON_Delete(c);
    }
    return 0;
}
