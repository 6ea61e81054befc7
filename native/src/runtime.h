/* runtime.h - the oc_runtime behind the opaque handle, for session.c and plugin_eps.c (internal). */
#ifndef OC_RUNTIME_H
#define OC_RUNTIME_H

#include <onnxruntime_c_api.h>

#include "devices.h"

struct oc_runtime {
    const OrtApi *api;    /* C API 21: what every onnxruntime from 1.21 serves */
    const OrtApi *plugin; /* C API 22 (the plugin-EP functions), or NULL where onnxruntime lacks it */
    OrtEnv *env;
    void *library; /* NULL when the engine linked onnxruntime itself */
    char version[32];
    int parsed[3];
    void *plugin_state; /* plugin_eps.c's record of this OrtEnv's libraries (NULL without plugin API) */
    /* oc_runtime_set_ep_appender's table, changed and read under oc_lock. An entry's name stays
     * where it is for the runtime's life (a removed one keeps it with `append` NULL), so a session
     * plan may point at it. */
    struct {
        char ep[128];
        oc_ep_append_fn append;
        void *user;
    } appenders[OC_MAX_EP_APPENDERS];
    size_t appender_count;
};

/* session.c: the appender registered for `ep` (and its user pointer), or NULL; under oc_lock. */
oc_ep_append_fn oc_runtime_appender(const oc_runtime *rt, const char *ep, void **user);

/* plugin_eps.c: a runtime with its OrtEnv created, and one about to release it. */
void oc_plugin_runtime_started(oc_runtime *rt);
void oc_plugin_runtime_released(oc_runtime *rt);

/* The decision of devices.c for `blob` with this onnxruntime's classic providers and EP devices
 * (`devices` receives them: the plan's device bits index it; their handles are OrtEpDevice). */
oc_status oc_plan_for_blob(const oc_runtime *rt, const oc_blob *blob, const oc_devices *selection,
                           oc_plan_device devices[OC_PLAN_MAX_DEVICES], oc_plan *plan, oc_error *err);

#endif /* OC_RUNTIME_H */
