/* devices.h - which EPs and devices a session gets (devices.c: a pure decision from plain data, as
 * plan_session in onnx_cooker/runtime/devices.py), and the onnxruntime side of plugin EPs (plugin_eps.c:
 * libraries registered per OrtEnv, the EP devices offered, the plan put on session options).
 * Internal: the library's sources and its tests only. */
#ifndef OC_DEVICES_H
#define OC_DEVICES_H

#include <stdint.h>

#include "internal.h"

#define OC_CPU_EP "CPUExecutionProvider"
#define OC_PLAN_MAX_EPS 33     /* EPs in a plan (a preference list or pairs longer than this is refused) */
#define OC_PLAN_MAX_DEVICES 64 /* EP devices considered (onnxruntime's list past this is cut) */

/* One EP device as the decision reads it: `handle` is onnxruntime's OrtEpDevice (or NULL in tests). */
typedef struct oc_plan_device {
    const char *ep;
    oc_device_type type; /* CPU, GPU or NPU */
    uint32_t vendor_id;
    const char *vendor;
    const void *handle;
} oc_plan_device;

typedef struct oc_plan_input {
    const char *const *preference; /* the blob's execution_providers */
    size_t preference_count;
    const char *const *available; /* the classic providers of this build (plugin EPs left out) */
    size_t available_count;
    int plugin_api;               /* 0: onnxruntime has no plugin-EP API (< 1.22): devices unused */
    const oc_plan_device *devices; /* what GetEpDevices offers */
    size_t device_count;
    const oc_devices *selection;  /* the caller's (NULL: the blob decides) */
    const char *blob_policy;      /* the header's device_policy, or NULL */
    const char *model;            /* for messages */
    const char *runtime;          /* onnxruntime's version, for messages */
} oc_plan_input;

typedef enum oc_plan_kind { OC_PLAN_CLASSIC = 0, OC_PLAN_DEVICES = 1, OC_PLAN_POLICY = 2 } oc_plan_kind;

typedef struct oc_plan_ep {
    const char *ep;
    uint64_t devices; /* bit i: input device i */
} oc_plan_ep;

/* Exactly one way, as the Python SessionPlan: CLASSIC, `names` is the provider list (appended in
 * order, the CPU EP last); DEVICES, `chosen` EPs on their devices in preference order (onnxruntime
 * adds the CPU EP after them); POLICY, `policy` for SessionOptionsSetEpSelectionPolicy. `names` are
 * the EPs whose per-EP session options apply. */
typedef struct oc_plan {
    oc_plan_kind kind;
    const char *names[OC_PLAN_MAX_EPS + 1];
    size_t name_count;
    oc_plan_ep chosen[OC_PLAN_MAX_EPS];
    size_t chosen_count;
    const char *policy;
    char explanation[OC_MESSAGE_SIZE];
} oc_plan;

/* The decision (devices.c): OC_OK and *plan, or OC_ERR_SESSION_CREATE / OC_ERR_INVALID_ARGUMENT with
 * the Python loader's message. Pointers in *plan borrow the input's strings. */
oc_status oc_plan_session(const oc_plan_input *in, oc_plan *plan, oc_error *err);

/* The explanation of EPs the caller named (plan_for's "a, b (given by the caller)"), into out[size]
 * (size > 0), cut at its end. */
void oc_explain_given(const char *const *names, size_t count, char *out, size_t size);

/* The policy names, in DEVICE_POLICIES order, and onnxruntime's OrtExecutionProviderDevicePolicy
 * value of one (-1 for an unknown name). */
extern const char *const OC_DEVICE_POLICIES[7];
int oc_policy_value(const char *name);
/* "cpu", "gpu", "npu" (NULL for OC_DEVICE_ANY or another value). */
const char *oc_device_type_text(oc_device_type type);

#endif /* OC_DEVICES_H */
