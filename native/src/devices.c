/* devices.c - which EPs and devices a session gets: the classic provider list, or (onnxruntime
 * 1.22+, Windows ML's API) plugin EPs chosen by device or policy. A pure decision from plain data,
 * line for line plan_session of onnx_cooker/runtime/devices.py, explanation and messages included
 * (tests/test_native_plugin_eps.py runs both on the same cases). */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "devices.h"

const char *const OC_DEVICE_POLICIES[7] = {"prefer_gpu",     "prefer_npu", "prefer_cpu", "max_performance",
                                           "max_efficiency", "min_power",  "default"};

int oc_policy_value(const char *name) {
    /* onnxruntime's OrtExecutionProviderDevicePolicy: DEFAULT, PREFER_CPU, PREFER_NPU, PREFER_GPU,
     * MAX_PERFORMANCE, MAX_EFFICIENCY, MIN_OVERALL_POWER (0..6) */
    static const int values[7] = {3, 2, 1, 4, 5, 6, 0};
    size_t i;
    for (i = 0; name != NULL && i < 7; ++i)
        if (strcmp(name, OC_DEVICE_POLICIES[i]) == 0) return values[i];
    return -1;
}

const char *oc_device_type_text(oc_device_type type) {
    switch (type) {
    case OC_DEVICE_CPU: return "cpu";
    case OC_DEVICE_GPU: return "gpu";
    case OC_DEVICE_NPU: return "npu";
    case OC_DEVICE_ANY: break;
    }
    return NULL;
}

static const char *upper(oc_device_type type) {
    switch (type) {
    case OC_DEVICE_CPU: return "CPU";
    case OC_DEVICE_GPU: return "GPU";
    case OC_DEVICE_NPU: return "NPU";
    case OC_DEVICE_ANY: break;
    }
    return "UNKNOWN";
}

/* Text appended into a fixed buffer, cut at its end. */
typedef struct text {
    char *buf;
    size_t size, len;
} text;

static void add(text *t, const char *format, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;

static void add(text *t, const char *format, ...) {
    va_list args;
    int n;
    if (t->len + 1 >= t->size) return;
    va_start(args, format);
    n = vsnprintf(t->buf + t->len, t->size - t->len, format, args);
    va_end(args);
    if (n > 0) t->len = (size_t)n >= t->size - t->len ? t->size - 1 : t->len + (size_t)n;
}

void oc_explain_given(const char *const *names, size_t count, char *out, size_t size) {
    text t;
    size_t i;
    t.buf = out, t.size = size, t.len = 0;
    out[0] = '\0';
    for (i = 0; i < count; ++i) add(&t, "%s%s", i ? ", " : "", names[i]);
    add(&t, " (given by the caller)");
}

static int contains(const char *const *list, size_t count, const char *name) {
    size_t i;
    for (i = 0; i < count; ++i)
        if (strcmp(list[i], name) == 0) return 1;
    return 0;
}

static int is_exclusive(const char *ep) { return strcmp(ep, "DmlExecutionProvider") == 0; }

static int offers(const oc_plan_input *in, const char *ep) {
    size_t i;
    for (i = 0; i < in->device_count; ++i)
        if (strcmp(in->devices[i].ep, ep) == 0) return 1;
    return 0;
}

/* "ggml on CPU (vendor 0x1022 AMD), GPU (...)" for the devices in `mask` */
static void describe(text *t, const oc_plan_input *in, const char *ep, uint64_t mask) {
    size_t i;
    int first = 1;
    add(t, "%s on ", ep);
    for (i = 0; i < in->device_count; ++i) {
        if (!(mask >> i & 1u)) continue;
        add(t, "%s%s (vendor 0x%04x %s)", first ? "" : ", ", upper(in->devices[i].type),
            (unsigned)in->devices[i].vendor_id, in->devices[i].vendor ? in->devices[i].vendor : "");
        first = 0;
    }
}

/* Every offered device, each as describe does, or `none`. */
static void offered(text *t, const oc_plan_input *in, const char *none) {
    size_t i;
    for (i = 0; i < in->device_count; ++i) {
        if (i) add(t, ", ");
        describe(t, in, in->devices[i].ep, (uint64_t)1 << i);
    }
    if (in->device_count == 0) add(t, "%s", none);
}

#define MAX_SKIPPED (2 * OC_PLAN_MAX_EPS)
typedef struct skipped {
    const char *ep;
    char label[160];
    char reason[192];
} skipped;

typedef struct skips {
    skipped items[MAX_SKIPPED];
    size_t count;
} skips;

static void skip(skips *s, const char *ep, oc_device_type type, const char *format, const char *arg) {
    skipped *k;
    if (s->count == MAX_SKIPPED) return;
    k = &s->items[s->count++];
    k->ep = ep;
    if (type == OC_DEVICE_ANY) snprintf(k->label, sizeof k->label, "%s", ep);
    else snprintf(k->label, sizeof k->label, "%s on %s", ep, upper(type));
    snprintf(k->reason, sizeof k->reason, format, arg);
}

static void joined(text *t, const skips *s) {
    size_t i;
    for (i = 0; i < s->count; ++i) add(t, "; skipped %s (%s)", s->items[i].label, s->items[i].reason);
}

static void add_name(oc_plan *plan, const char *ep) {
    if (plan->name_count <= OC_PLAN_MAX_EPS && !contains(plan->names, plan->name_count, ep))
        plan->names[plan->name_count++] = ep;
}

/* choose_providers: the preferred EPs this build offers, then the CPU; DirectML only with the CPU. */
static void classic(const oc_plan_input *in, const char *const *preference, size_t count, oc_plan *plan) {
    text t = {plan->explanation, sizeof plan->explanation, 0};
    skips s;
    size_t i;
    s.count = 0;
    plan->kind = OC_PLAN_CLASSIC;
    plan->name_count = 0;
    for (i = 0; i < count; ++i) {
        const char *ep = preference[i];
        if (strcmp(ep, OC_CPU_EP) == 0) continue;
        if (!contains(in->available, in->available_count, ep))
            skip(&s, ep, OC_DEVICE_ANY, "%s", "not offered by this onnxruntime build");
        else if (plan->name_count > 0 && (is_exclusive(ep) || is_exclusive(plan->names[0])))
            skip(&s, ep, OC_DEVICE_ANY, "cannot be combined with %s", plan->names[0]);
        else if (plan->name_count < OC_PLAN_MAX_EPS)
            plan->names[plan->name_count++] = ep; /* as the Python list: a repeated name stays repeated */
    }
    plan->names[plan->name_count++] = OC_CPU_EP;
    plan->explanation[0] = '\0';
    for (i = 0; i < plan->name_count; ++i) add(&t, "%s%s", i ? ", " : "", plan->names[i]);
    joined(&t, &s);
}

/* _pick: the devices of each wanted (EP, type), in order, and what was skipped, why. */
static void pick(const oc_plan_input *in, const char *const *eps, const oc_device_type *types, size_t count,
                 oc_plan *plan, skips *s) {
    size_t i, d;
    plan->chosen_count = 0;
    for (i = 0; i < count; ++i) {
        const char *ep = eps[i];
        uint64_t mask = 0, kinds = 0;
        size_t k;
        int already = 0;
        for (d = 0; d < in->device_count; ++d) {
            if (strcmp(in->devices[d].ep, ep) != 0) continue;
            kinds |= (uint64_t)1 << in->devices[d].type;
            if (types[i] == OC_DEVICE_ANY || in->devices[d].type == types[i]) mask |= (uint64_t)1 << d;
        }
        for (k = 0; k < plan->chosen_count; ++k) already |= strcmp(plan->chosen[k].ep, ep) == 0;
        if (already) {
            skip(s, ep, types[i], "%s already chosen", ep);
        } else if (mask == 0) {
            char list[32] = "";
            text t = {list, sizeof list, 0};
            oc_device_type type;
            for (type = OC_DEVICE_CPU; type <= OC_DEVICE_NPU; ++type)
                if (kinds >> type & 1u) add(&t, "%s%s", t.len ? ", " : "", upper(type));
            if (t.len) skip(s, ep, types[i], "it offers only %s", list);
            else skip(s, ep, types[i], "%s", "no device offered");
        } else if (plan->chosen_count > 0 && (is_exclusive(ep) || is_exclusive(plan->chosen[0].ep))) {
            skip(s, ep, types[i], "cannot be combined with %s", plan->chosen[0].ep);
        } else if (plan->chosen_count < OC_PLAN_MAX_EPS) {
            plan->chosen[plan->chosen_count].ep = ep;
            plan->chosen[plan->chosen_count++].devices = mask;
        }
    }
}

static void devices_plan(const oc_plan_input *in, oc_plan *plan, const skips *s, const char *why) {
    text t = {plan->explanation, sizeof plan->explanation, 0};
    size_t i;
    int cpu = 0;
    plan->kind = OC_PLAN_DEVICES;
    plan->name_count = 0;
    plan->explanation[0] = '\0';
    for (i = 0; i < plan->chosen_count; ++i) {
        add_name(plan, plan->chosen[i].ep);
        cpu |= strcmp(plan->chosen[i].ep, OC_CPU_EP) == 0;
        if (i) add(&t, "; ");
        describe(&t, in, plan->chosen[i].ep, plan->chosen[i].devices);
    }
    add_name(plan, OC_CPU_EP);
    if (!cpu) add(&t, ", then %s for the nodes they do not take", OC_CPU_EP);
    add(&t, " (%s)", why);
    joined(&t, s);
}

/* _check_pairs: a policy or pairs, not both; at least one pair; each an EP name and a known type. */
static oc_status check_selection(const oc_plan_input *in, oc_error *err) {
    const oc_devices *d = in->selection;
    size_t i;
    if (d->policy != NULL && d->pair_count > 0)
        return oc_fail(err, OC_ERR_INVALID_ARGUMENT, "model '%s': devices gives both a policy (%s) and %zu pairs; give one",
                       in->model, d->policy, d->pair_count);
    if (d->policy != NULL) {
        if (oc_policy_value(d->policy) >= 0) return OC_OK;
        return oc_fail(err, OC_ERR_SESSION_CREATE,
                       "model '%s': unknown device policy '%s'; one of prefer_gpu, prefer_npu, prefer_cpu, "
                       "max_performance, max_efficiency, min_power, default, or (EP name, 'cpu'|'gpu'|'npu'|None) pairs",
                       in->model, d->policy);
    }
    if (d->pair_count == 0)
        return oc_fail(err, OC_ERR_SESSION_CREATE, "model '%s': devices is an empty list; name at least one (EP, device type)",
                       in->model);
    if (d->pairs == NULL || d->pair_count > OC_PLAN_MAX_EPS)
        return oc_fail(err, OC_ERR_INVALID_ARGUMENT, "model '%s': devices has %zu pairs %s", in->model, d->pair_count,
                       d->pairs == NULL ? "but no array" : "(too many)");
    for (i = 0; i < d->pair_count; ++i)
        if (d->pairs[i].ep == NULL || (unsigned)d->pairs[i].type > (unsigned)OC_DEVICE_NPU)
            return oc_fail(err, OC_ERR_SESSION_CREATE,
                           "model '%s': devices must be a policy (prefer_gpu, prefer_npu, prefer_cpu, max_performance, "
                           "max_efficiency, min_power, default) or (EP name, 'cpu'|'gpu'|'npu'|None) pairs, not pair %zu "
                           "(%s, type %d)", in->model, i, d->pairs[i].ep ? d->pairs[i].ep : "NULL", (int)d->pairs[i].type);
    return OC_OK;
}

/* _classic_fallback: no plugin-EP API, the classic list with a note (pairs by EP name). */
static oc_status fallback(const oc_plan_input *in, const char *policy, oc_plan *plan, oc_error *err) {
    const oc_devices *d = in->selection;
    text t = {plan->explanation, sizeof plan->explanation, 0};
    if (policy != NULL) {
        classic(in, in->preference, in->preference_count, plan);
        t.len = strlen(plan->explanation);
        add(&t, "; device policy %s ignored: onnxruntime %s has no plugin-EP API (>= 1.22)", policy, in->runtime);
    } else if (d != NULL) {
        const char *eps[OC_PLAN_MAX_EPS];
        char missing[512] = "", have[512] = "";
        text m = {missing, sizeof missing, 0}, h = {have, sizeof have, 0};
        size_t i;
        for (i = 0; i < d->pair_count; ++i) {
            eps[i] = d->pairs[i].ep;
            if (strcmp(eps[i], OC_CPU_EP) != 0 && !contains(in->available, in->available_count, eps[i]) &&
                !contains(eps, i, eps[i]))
                add(&m, "%s%s", m.len ? ", " : "", eps[i]);
        }
        if (m.len) {
            for (i = 0; i < in->available_count; ++i) add(&h, "%s%s", i ? ", " : "", in->available[i]);
            return oc_fail(err, OC_ERR_SESSION_CREATE,
                           "model '%s': devices asks for %s, which onnxruntime %s does not offer (it offers %s); "
                           "plugin EPs need onnxruntime >= 1.22", in->model, missing, in->runtime, have);
        }
        classic(in, eps, d->pair_count, plan);
        t.len = strlen(plan->explanation);
        add(&t, "; devices given by the caller, by name: onnxruntime %s cannot pick devices (< 1.22)", in->runtime);
    } else {
        classic(in, in->preference, in->preference_count, plan);
    }
    return OC_OK;
}

static oc_status pairs_plan(const oc_plan_input *in, oc_plan *plan, oc_error *err) {
    const oc_devices *d = in->selection;
    const char *eps[OC_PLAN_MAX_EPS];
    oc_device_type types[OC_PLAN_MAX_EPS];
    skips s;
    size_t i, k;
    s.count = 0;
    for (i = 0; i < d->pair_count; ++i) {
        eps[i] = d->pairs[i].ep;
        types[i] = d->pairs[i].type;
    }
    pick(in, eps, types, d->pair_count, plan, &s);
    for (i = 0; i < d->pair_count; ++i) {
        int chosen = 0;
        char why[768] = "", list[1024] = "";
        text w = {why, sizeof why, 0}, l = {list, sizeof list, 0};
        if (contains(eps, i, eps[i])) continue; /* each EP once, in order */
        for (k = 0; k < plan->chosen_count; ++k) chosen |= strcmp(plan->chosen[k].ep, eps[i]) == 0;
        if (chosen) continue;
        for (k = 0; k < s.count; ++k)
            if (strcmp(s.items[k].ep, eps[i]) == 0)
                add(&w, "%s%s: %s", w.len ? "; " : "", s.items[k].label, s.items[k].reason);
        offered(&l, in, "nothing");
        return oc_fail(err, OC_ERR_SESSION_CREATE,
                       "model '%s': devices asks for %s, but none of its devices can be used (%s); GetEpDevices offers "
                       "%s: register its library with oc_runtime_register_ep_library, or ask for a device it offers",
                       in->model, eps[i], why, list);
    }
    devices_plan(in, plan, &s, "devices given by the caller");
    return OC_OK;
}

oc_status oc_plan_session(const oc_plan_input *in, oc_plan *plan, oc_error *err) {
    const char *policy = NULL, *source = "";
    const char *first_classic = NULL;
    size_t i;
    oc_status status;
    memset(plan, 0, sizeof *plan);
    if (in->preference_count > OC_PLAN_MAX_EPS)
        return oc_fail(err, OC_ERR_SESSION_CREATE, "model '%s': more than %d preferred EPs", in->model, OC_PLAN_MAX_EPS);
    if (in->selection != NULL) {
        status = check_selection(in, err);
        if (status != OC_OK) return status;
        if (in->selection->policy != NULL) policy = in->selection->policy, source = "given by the caller";
    } else if (in->blob_policy != NULL) {
        policy = in->blob_policy, source = "from the blob header";
    }
    if (!in->plugin_api) return fallback(in, policy, plan, err);
    for (i = 0; i < in->preference_count && first_classic == NULL; ++i) {
        const char *ep = in->preference[i];
        if (strcmp(ep, OC_CPU_EP) != 0 && contains(in->available, in->available_count, ep) && !offers(in, ep))
            first_classic = ep;
    }
    if (in->selection == NULL && policy != NULL && first_classic != NULL) {
        /* onnxruntime's policies choose among EP devices only: a preferred classic EP (OpenVINO from
         * onnxruntime-openvino) would be passed over for the CPU. The blob's EP list wins. */
        text t = {plan->explanation, sizeof plan->explanation, 0};
        classic(in, in->preference, in->preference_count, plan);
        t.len = strlen(plan->explanation);
        add(&t, "; the blob's device policy %s not used: %s is a classic EP here", policy, first_classic);
        return OC_OK;
    }
    if (policy != NULL) {
        text t = {plan->explanation, sizeof plan->explanation, 0};
        plan->kind = OC_PLAN_POLICY;
        plan->policy = policy;
        for (i = 0; i < in->preference_count; ++i)
            if (offers(in, in->preference[i])) add_name(plan, in->preference[i]);
        add_name(plan, OC_CPU_EP);
        add(&t, "device policy %s (%s); onnxruntime picks among: ", policy, source);
        offered(&t, in, "none");
        return OC_OK;
    }
    if (in->selection != NULL) return pairs_plan(in, plan, err);
    for (i = 0; i < in->preference_count; ++i) {
        const char *ep = in->preference[i];
        if (strcmp(ep, OC_CPU_EP) != 0 && !contains(in->available, in->available_count, ep) && offers(in, ep)) break;
    }
    if (i < in->preference_count) { /* the blob prefers a plugin EP */
        const char *eps[OC_PLAN_MAX_EPS];
        oc_device_type types[OC_PLAN_MAX_EPS];
        size_t n = 0;
        skips s;
        s.count = 0;
        for (i = 0; i < in->preference_count; ++i) {
            if (strcmp(in->preference[i], OC_CPU_EP) == 0) continue;
            eps[n] = in->preference[i];
            types[n++] = OC_DEVICE_ANY;
        }
        pick(in, eps, types, n, plan, &s);
        devices_plan(in, plan, &s, "the blob prefers a plugin EP");
        return OC_OK;
    }
    classic(in, in->preference, in->preference_count, plan);
    return OC_OK;
}
