/* plugin_eps.c - plugin execution providers through onnxruntime's C API 22 (Windows ML's EP API):
 * libraries registered once per OrtEnv, the EP devices onnxruntime offers, the decision of
 * devices.c made for a blob and put on session options (onnx_cooker/runtime/devices.py's twin). */
#if !defined(_WIN32) && !defined(_POSIX_C_SOURCE)
#define _POSIX_C_SOURCE 200809L
#endif
#include <stdlib.h>
#include <string.h>

#include <onnxruntime_c_api.h>

#include "devices.h"
#include "runtime.h"

/* --- the libraries registered, per OrtEnv (onnxruntime keeps one per process while it is held) -- */

typedef struct registered {
    struct registered *next;
    char *name, *path;
} registered;

typedef struct env_state {
    struct env_state *next;
    const OrtEnv *env;
    size_t runtimes;        /* oc_runtimes holding it */
    registered *libraries;
    char **plugin_eps;      /* the EP names the registered libraries brought, and their names */
    size_t plugin_ep_count;
} env_state;

static env_state *g_envs; /* under oc_lock */

static env_state *find_env(const OrtEnv *env) {
    env_state *e;
    for (e = g_envs; e != NULL; e = e->next)
        if (e->env == env) return e;
    return NULL;
}

static void free_env(env_state *e) {
    size_t i;
    while (e->libraries != NULL) {
        registered *next = e->libraries->next;
        free(e->libraries->name);
        free(e->libraries->path);
        free(e->libraries);
        e->libraries = next;
    }
    for (i = 0; i < e->plugin_ep_count; ++i) free(e->plugin_eps[i]);
    free(e->plugin_eps);
    free(e);
}

void oc_plugin_runtime_started(oc_runtime *rt) {
    env_state *e;
    if (rt->plugin == NULL) return;
    oc_lock();
    e = find_env(rt->env);
    if (e == NULL && (e = calloc(1, sizeof *e)) != NULL) {
        e->env = rt->env;
        e->next = g_envs;
        g_envs = e;
    }
    if (e != NULL) e->runtimes++;
    rt->plugin_state = e; /* NULL: out of memory, registration then refused */
    oc_unlock();
}

/* Before the runtime releases its OrtEnv: the last runtime over it forgets its libraries (onnxruntime
 * unloads them with the OrtEnv). */
void oc_plugin_runtime_released(oc_runtime *rt) {
    env_state *e = rt->plugin_state, **p;
    if (e == NULL) return;
    oc_lock();
    if (--e->runtimes == 0) {
        for (p = &g_envs; *p != NULL; p = &(*p)->next)
            if (*p == e) {
                *p = e->next;
                break;
            }
        free_env(e);
    }
    oc_unlock();
}

int oc_runtime_has_plugin_eps(const oc_runtime *rt) { return rt != NULL && rt->plugin != NULL; }

static oc_status ort_devices(const oc_runtime *rt, const OrtEpDevice *const **devices, size_t *count, oc_error *err) {
    OrtStatus *s;
    *devices = NULL;
    *count = 0;
    if (rt->plugin == NULL) return OC_OK;
    s = rt->plugin->GetEpDevices(rt->env, devices, count);
    if (s == NULL) return OC_OK;
    oc_fail(err, OC_ERR_SESSION_CREATE, "onnxruntime %s could not list its EP devices: %s", rt->version,
            rt->api->GetErrorMessage(s));
    rt->api->ReleaseStatus(s);
    *devices = NULL;
    *count = 0;
    return OC_ERR_SESSION_CREATE;
}

static oc_device_type device_type(const OrtApi *plugin, const OrtEpDevice *device) {
    switch (plugin->HardwareDevice_Type(plugin->EpDevice_Device(device))) {
    case OrtHardwareDeviceType_CPU: return OC_DEVICE_CPU;
    case OrtHardwareDeviceType_GPU: return OC_DEVICE_GPU;
    case OrtHardwareDeviceType_NPU: return OC_DEVICE_NPU;
    }
    return OC_DEVICE_ANY; /* a type this library does not know: no pair asks for it */
}

size_t oc_runtime_ep_device_count(const oc_runtime *rt) {
    const OrtEpDevice *const *devices;
    size_t count;
    if (rt == NULL) return 0;
    oc_lock(); /* onnxruntime's device list moves while a library registers (under this lock) */
    if (ort_devices(rt, &devices, &count, NULL) != OC_OK) count = 0;
    oc_unlock();
    return count;
}

oc_status oc_runtime_ep_device(const oc_runtime *rt, size_t index, oc_ep_device *out, oc_error *err) {
    const OrtEpDevice *const *devices;
    const OrtHardwareDevice *hardware;
    size_t count;
    oc_status status;
    if (rt == NULL || out == NULL) return oc_fail(err, OC_ERR_INVALID_ARGUMENT, "oc_runtime_ep_device: NULL argument");
    memset(out, 0, sizeof *out);
    oc_lock(); /* the list's array moves while a library registers; the devices themselves stay */
    status = ort_devices(rt, &devices, &count, err);
    if (status == OC_OK && index >= count)
        status = oc_fail(err, OC_ERR_INVALID_ARGUMENT, "oc_runtime_ep_device: index %zu, but onnxruntime %s offers %zu",
                         index, rt->version, count);
    if (status == OC_OK) {
        hardware = rt->plugin->EpDevice_Device(devices[index]);
        out->ep_name = rt->plugin->EpDevice_EpName(devices[index]);
        out->type = device_type(rt->plugin, devices[index]);
        out->vendor_id = rt->plugin->HardwareDevice_VendorId(hardware);
        out->vendor = rt->plugin->HardwareDevice_Vendor(hardware);
    }
    oc_unlock();
    return status;
}

static int listed(char *const *list, size_t count, const char *name) {
    size_t i;
    for (i = 0; i < count; ++i)
        if (strcmp(list[i], name) == 0) return 1;
    return 0;
}

static int add_plugin_ep(env_state *e, const char *name) {
    char **grown, *copy;
    if (listed(e->plugin_eps, e->plugin_ep_count, name)) return 1;
    grown = realloc(e->plugin_eps, (e->plugin_ep_count + 1) * sizeof *grown);
    if (grown == NULL) return 0;
    e->plugin_eps = grown;
    copy = malloc(strlen(name) + 1);
    if (copy == NULL) return 0;
    strcpy(copy, name);
    e->plugin_eps[e->plugin_ep_count++] = copy;
    return 1;
}

oc_status oc_runtime_register_ep_library(oc_runtime *rt, const char *name, const char *path, oc_error *err) {
    env_state *e;
    registered *r;
    char *full;
    const char *key;
    const OrtEpDevice *const *devices;
    size_t before_count = 0, count, i;
    char **before = NULL;
    OrtStatus *s;
    oc_status status = OC_OK;
    if (rt == NULL || name == NULL || path == NULL || name[0] == '\0')
        return oc_fail(err, OC_ERR_INVALID_ARGUMENT, "oc_runtime_register_ep_library: NULL or empty argument");
    if (rt->plugin == NULL)
        return oc_fail(err, OC_ERR_INCOMPATIBLE_RUNTIME,
                       "plugin EP libraries (%s) need onnxruntime 1.22 or newer, but %s is loaded; use onnxruntime (or "
                       "onnxruntime-windowsml) >= 1.22, or load without plugin EP libraries", name, rt->version);
    if (rt->plugin_state == NULL)
        return oc_fail(err, OC_ERR_OUT_OF_MEMORY, "out of memory registering the EP library %s", path);
    full = oc_real_path(path); /* the same file by another spelling is the same library */
    key = full != NULL ? full : path;
    oc_lock(); /* held across onnxruntime's registration: one registration of a name at a time */
    e = rt->plugin_state;
    for (r = e->libraries; r != NULL; r = r->next)
        if (strcmp(r->name, name) == 0) break;
    if (r != NULL) {
        if (strcmp(r->path, key) != 0)
            status = oc_fail(err, OC_ERR_SESSION_CREATE,
                             "EP library name '%s' is already registered with %s, not %s; register each library under "
                             "its own name", name, r->path, key);
        goto done;
    }
    status = ort_devices(rt, &devices, &count, err);
    if (status != OC_OK) goto done;
    before = calloc(count ? count : 1, sizeof *before);
    if (before == NULL) {
        status = oc_fail(err, OC_ERR_OUT_OF_MEMORY, "out of memory registering the EP library %s", key);
        goto done;
    }
    for (i = 0; i < count; ++i) before[before_count++] = (char *)(uintptr_t)rt->plugin->EpDevice_EpName(devices[i]);
#ifdef _WIN32
    {
        wchar_t *wide = oc_wide_path(key);
        if (wide == NULL) {
            status = oc_fail(err, OC_ERR_SESSION_CREATE, "cannot register the EP library %s (as '%s'): not a UTF-8 path",
                             key, name);
            goto done;
        }
        s = rt->plugin->RegisterExecutionProviderLibrary(rt->env, name, wide);
        free(wide);
    }
#else
    s = rt->plugin->RegisterExecutionProviderLibrary(rt->env, name, key);
#endif
    if (s != NULL && strstr(rt->api->GetErrorMessage(s), "already registered under") != NULL) {
        /* onnxruntime holds this name from a registration this record does not know: the engine's own
         * on the shared OrtEnv, or one before the last oc_runtime over it was released while the
         * engine kept the OrtEnv. Taken as registered (onnxruntime keeps the library it was given). */
        rt->api->ReleaseStatus(s);
        s = NULL;
    }
    if (s != NULL) {
        const char *message = rt->api->GetErrorMessage(s);
        size_t length = strlen(message);
        while (length > 0 && (message[length - 1] == '.' || message[length - 1] == ' ' || message[length - 1] == '\n'))
            --length;
        status = oc_fail(err, OC_ERR_SESSION_CREATE,
                         "onnxruntime %s could not load the EP library %s (as '%s'): %.*s; check the path and that the "
                         "library was built for this onnxruntime", rt->version, key, name, (int)length, message);
        rt->api->ReleaseStatus(s);
        goto done;
    }
    r = calloc(1, sizeof *r);
    if (r != NULL) {
        r->name = malloc(strlen(name) + 1);
        r->path = malloc(strlen(key) + 1);
    }
    if (r == NULL || r->name == NULL || r->path == NULL) {
        if (r != NULL) free(r->name), free(r->path), free(r);
        /* registered in onnxruntime but not remembered: take it back */
        s = rt->plugin->UnregisterExecutionProviderLibrary(rt->env, name);
        if (s != NULL) rt->api->ReleaseStatus(s);
        status = oc_fail(err, OC_ERR_OUT_OF_MEMORY, "out of memory registering the EP library %s", key);
        goto done;
    }
    strcpy(r->name, name);
    strcpy(r->path, key);
    r->next = e->libraries;
    e->libraries = r;
    /* the EPs it brought: offered now, not before (the EP device names are onnxruntime's, valid while
     * the libraries are; `before` points at them only during this call) */
    if (ort_devices(rt, &devices, &count, NULL) == OC_OK)
        for (i = 0; i < count; ++i) {
            const char *ep = rt->plugin->EpDevice_EpName(devices[i]);
            if (!listed(before, before_count, ep) && !add_plugin_ep(e, ep)) status = OC_ERR_OUT_OF_MEMORY;
        }
    if (!add_plugin_ep(e, name)) status = OC_ERR_OUT_OF_MEMORY;
    if (status != OC_OK) oc_fail(err, status, "out of memory registering the EP library %s", key);
done:
    oc_unlock();
    free(before);
    free(full);
    return status;
}

/* --- the decision for a blob, and the session options it configures ----------------------------- */

/* EPs onnxruntime builds in (onnxruntime.get_all_providers() of 1.30 and 1.32): an EP offered as a
 * device under another name is a plugin EP. */
static const char *const BUILT_IN[] = {
    "NvTensorRTRTXExecutionProvider", "TensorrtExecutionProvider", "CUDAExecutionProvider", "MIGraphXExecutionProvider",
    "OpenVINOExecutionProvider", "DnnlExecutionProvider", "VitisAIExecutionProvider", "QNNExecutionProvider",
    "NnapiExecutionProvider", "VSINPUExecutionProvider", "JsExecutionProvider", "CoreMLExecutionProvider",
    "ACLExecutionProvider", "DmlExecutionProvider", "RknpuExecutionProvider", "WebNNExecutionProvider",
    "WebGpuExecutionProvider", "XnnpackExecutionProvider", "CANNExecutionProvider", "AzureExecutionProvider",
    "ROCMExecutionProvider", "SNPEExecutionProvider", "CPUExecutionProvider"};

static int built_in(const char *ep) {
    size_t i;
    for (i = 0; i < sizeof BUILT_IN / sizeof BUILT_IN[0]; ++i)
        if (strcmp(BUILT_IN[i], ep) == 0) return 1;
    return 0;
}

oc_status oc_plan_for_blob(const oc_runtime *rt, const oc_blob *blob, const oc_devices *selection,
                           oc_plan_device devices[OC_PLAN_MAX_DEVICES], oc_plan *plan, oc_error *err) {
    const OrtApi *api = rt->api;
    const OrtEpDevice *const *ort = NULL;
    char **providers = NULL;
    const char *available[64];
    int n_providers = 0, k;
    size_t count = 0, n_available = 0, i;
    oc_plan_input in;
    oc_status status;
    OrtStatus *s;
    s = api->GetAvailableProviders(&providers, &n_providers);
    if (s != NULL) {
        oc_fail(err, OC_ERR_SESSION_CREATE, "onnxruntime %s could not list its execution providers for model '%s': %s",
                rt->version, blob->info.name, api->GetErrorMessage(s));
        api->ReleaseStatus(s);
        return OC_ERR_SESSION_CREATE;
    }
    /* GetEpDevices hands out onnxruntime's own array, which a registration (under this lock) may move:
     * the device pointers are copied under it (the devices and their strings stay put). */
    oc_lock();
    status = ort_devices(rt, &ort, &count, err);
    if (count > OC_PLAN_MAX_DEVICES) count = OC_PLAN_MAX_DEVICES; /* no machine offers that many */
    for (i = 0; i < count; ++i) {
        const OrtHardwareDevice *hardware = rt->plugin->EpDevice_Device(ort[i]);
        devices[i].ep = rt->plugin->EpDevice_EpName(ort[i]);
        devices[i].type = device_type(rt->plugin, ort[i]);
        devices[i].vendor_id = rt->plugin->HardwareDevice_VendorId(hardware);
        devices[i].vendor = rt->plugin->HardwareDevice_Vendor(hardware);
        devices[i].handle = ort[i];
    }
    for (k = 0; k < n_providers && n_available < sizeof available / sizeof available[0]; ++k) {
        const env_state *e = rt->plugin_state;
        int plugin = e != NULL && listed(e->plugin_eps, e->plugin_ep_count, providers[k]);
        for (i = 0; i < count && !plugin; ++i)
            plugin = !built_in(devices[i].ep) && strcmp(devices[i].ep, providers[k]) == 0;
        if (!plugin) available[n_available++] = providers[k]; /* the plan never points into them */
    }
    /* the engine's own EPs (oc_runtime_set_ep_appender): offered, whether onnxruntime lists them or
     * not (their names stay put for the runtime's life) */
    for (i = 0; i < rt->appender_count && n_available < sizeof available / sizeof available[0]; ++i) {
        size_t j = 0;
        while (j < n_available && strcmp(available[j], rt->appenders[i].ep) != 0) ++j;
        if (rt->appenders[i].append != NULL && j == n_available) available[n_available++] = rt->appenders[i].ep;
    }
    oc_unlock();
    if (status != OC_OK) {
        s = api->ReleaseAvailableProviders(providers, n_providers);
        if (s != NULL) api->ReleaseStatus(s);
        return status;
    }
    memset(&in, 0, sizeof in);
    in.preference = (const char *const *)blob->eps;
    in.preference_count = blob->ep_count;
    in.available = available;
    in.available_count = n_available;
    in.plugin_api = rt->plugin != NULL;
    in.devices = devices;
    in.device_count = count;
    in.selection = selection;
    in.blob_policy = blob->device_policy;
    in.model = blob->info.name;
    in.runtime = rt->version;
    status = oc_plan_session(&in, plan, err);
    s = api->ReleaseAvailableProviders(providers, n_providers);
    if (s != NULL) api->ReleaseStatus(s);
    return status;
}
