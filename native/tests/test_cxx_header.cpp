// Compiles onnx_cooker.hpp under -Wall -Wextra -Werror -pedantic (C++17) and uses it against a real
// bundle: test_cxx_header BUNDLE_DIR MODEL ORT_LIBRARY. Prints one line per step; exit 0 on success.
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>
#include <string>

#include "onnx_cooker.hpp"

int main(int argc, char **argv) {
    if (argc != 4 && argc != 6) {
        std::fprintf(stderr, "usage: test_cxx_header BUNDLE_DIR MODEL ORT_LIBRARY [EP_NAME EP_LIBRARY]\n");
        return 2;
    }
    try {
        oc::Runtime runtime = oc::Runtime::load(argv[3]);
        if (argc == 6) {
#ifdef _WIN32 // ORTCHAR_T paths there; the test runs on Linux (tests/test_native_plugin_eps.py)
            std::fprintf(stderr, "test_cxx_header: the EP-library case runs on POSIX only\n");
            return 2;
#else
            // An engine that registered the plugin EP itself on the shared OrtEnv (CreateEnv hands out
            // onnxruntime's one environment): the library takes the name as registered.
            const OrtApi *api = runtime.api();
            OrtEnv *env = nullptr;
            if (api->CreateEnv(ORT_LOGGING_LEVEL_WARNING, "engine", &env) != nullptr) return 1;
            OrtStatus *status = api->RegisterExecutionProviderLibrary(env, argv[4], argv[5]);
            std::printf("engine registered %s: %s\n", argv[4], status == nullptr ? "ok" : api->GetErrorMessage(status));
            if (status != nullptr) api->ReleaseStatus(status);
            runtime.register_ep_library(argv[4], argv[5]);
            std::printf("registered again through the library\n");
            oc::Blob blob = oc::Bundle::open(argv[1]).blob(argv[2]);
            {
                oc::Session session(runtime, blob);
                std::printf("eps: %s\n", session.explanation().c_str());
            }
            api->ReleaseEnv(env);
            return 0;
#endif
        }
        oc::Bundle bundle = oc::Bundle::open(argv[1]);
        oc::Blob blob = bundle.blob(argv[2]);
        std::printf("platform %s, model %s, %zu EPs\n", bundle.platform().c_str(), blob.info().name,
                    blob.execution_providers().size());
        { // the manifest's bytes and the blob's in memory (a pak's), the unpack level and the signature
            std::ifstream manifest_file(std::string(argv[1]) + "/manifest.json", std::ios::binary);
            const std::string manifest((std::istreambuf_iterator<char>(manifest_file)), std::istreambuf_iterator<char>());
            oc::Bundle held = oc::Bundle::from_manifest(manifest.data(), manifest.size());
            std::ifstream blob_file(std::string(argv[1]) + "/" + held.model_file(argv[2]), std::ios::binary);
            const std::string bytes((std::istreambuf_iterator<char>(blob_file)), std::istreambuf_iterator<char>());
            oc::Blob from_bytes = held.blob(argv[2], bytes.data(), bytes.size());
            const oc::Blob::Bytes model = from_bytes.model(), weights = from_bytes.weights();
            const bool inside = static_cast<const char *>(weights.data) >= bytes.data() &&
                                static_cast<const char *>(weights.data) + weights.size <= bytes.data() + bytes.size();
            std::printf("unpacked: model %zu bytes, weights %zu bytes%s\n", model.size, weights.size,
                        inside ? " in place" : "");
            for (const oc_tensor_info &input : held.signature(argv[2]))
                std::printf("input %s %s %s\n", input.name, input.type, input.shape);
            for (const auto &dim : held.dims(argv[2], false, 0))
                std::printf("first input dim %lld '%s'\n", static_cast<long long>(dim.first), dim.second.c_str());
            for (const std::string &ep : from_bytes.execution_providers())
                for (const auto &option : from_bytes.provider_options(ep))
                    std::printf("provider option %s %s=%s\n", ep.c_str(), option.first.c_str(), option.second.c_str());
        }
        uint64_t listed = 0;
        const std::string file = bundle.model_file(argv[2], &listed); // before `listed` is read
        std::printf("model file %s, %llu bytes; unknown: '%s'\n", file.c_str(), static_cast<unsigned long long>(listed),
                    bundle.model_file("no-such-model").c_str());
        {
            oc::Session session(runtime, blob);
            std::printf("session %s\n", oc_load_path_name(session.load_path()));
            std::printf("eps: %s\n", session.explanation().c_str());
        }
        { // a component's member: empty first, then a session, then reloaded (the first released)
            oc::Session member;
            const bool empty = !member;
            member = oc::Session(runtime, blob);
            const bool held = static_cast<bool>(member);
            member = oc::Session(runtime, blob);
            std::printf("member: empty %d, held %d, reloaded %d\n", empty, held, member.get() != nullptr);
        }
        for (const bool outputs : {false, true}) { // a mistyped name is no empty signature
            try {
                if (outputs) (void)bundle.dims("no-such-model", false, 0);
                else (void)bundle.signature("no-such-model");
                std::printf("FAIL: an unknown model's signature read as empty\n");
                return 1;
            } catch (const oc::Error &e) {
                std::printf("unknown model's %s: %s\n", outputs ? "dims" : "signature", oc_status_name(e.status()));
            }
        }
        {
            // The blob's preferred DirectML, which this onnxruntime lacks, put on through the engine's
            // own call (here: nothing but a count, as a stand-in for a console's append function).
            int appended = 0;
            runtime.set_ep_appender(
                "DmlExecutionProvider",
                [](void *user, OrtSessionOptions *, const char *, const char *const *, const char *const *,
                   size_t, oc_error *) -> oc_status {
                    ++*static_cast<int *>(user);
                    return OC_OK;
                },
                &appended);
            {
                oc::Session session(runtime, blob);
                std::printf("appender eps: %s; called %d\n", session.explanation().c_str(), appended);
            }
            runtime.set_ep_appender("DmlExecutionProvider", nullptr);
        }
        if (runtime.has_plugin_eps()) { // every target onnxruntime (1.24.4+): the CPU EP offers a device
            for (const oc_ep_device &device : runtime.ep_devices())
                std::printf("ep device %s type %d vendor 0x%04x\n", device.ep_name, static_cast<int>(device.type),
                            static_cast<unsigned>(device.vendor_id));
            oc_devices policy{};
            policy.policy = "prefer_cpu";
            oc::Session session(runtime, blob, nullptr, &policy);
            std::printf("policy eps: %s\n", session.explanation().c_str());
        }
        try {
            bundle.blob("no-such-model");
            std::printf("FAIL: an unknown model opened\n");
            return 1;
        } catch (const oc::Error &e) {
            if (e.status() != OC_ERR_UNKNOWN_MODEL) {
                std::printf("FAIL: wrong status %s\n", e.what());
                return 1;
            }
            std::printf("unknown model: %s\n", e.what());
        }
    } catch (const oc::Error &e) {
        std::printf("FAIL: %s\n", e.what());
        return 1;
    }
    return 0;
}
