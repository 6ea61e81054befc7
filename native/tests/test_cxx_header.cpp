// Compiles onnx_cooker.hpp under -Wall -Wextra -Werror -pedantic (C++17) and uses it against a real
// bundle: test_cxx_header BUNDLE_DIR MODEL ORT_LIBRARY. Prints one line per step; exit 0 on success.
#include <cstdio>
#include <cstring>

#include "onnx_cooker.hpp"

int main(int argc, char **argv) {
    if (argc != 4) {
        std::fprintf(stderr, "usage: test_cxx_header BUNDLE_DIR MODEL ORT_LIBRARY\n");
        return 2;
    }
    try {
        oc::Runtime runtime = oc::Runtime::load(argv[3]);
        oc::Bundle bundle = oc::Bundle::open(argv[1]);
        oc::Blob blob = bundle.blob(argv[2]);
        std::printf("platform %s, model %s, %zu EPs\n", bundle.platform().c_str(), blob.info().name,
                    blob.execution_providers().size());
        {
            oc::Session session(runtime, blob);
            std::printf("session %s\n", oc_load_path_name(session.load_path()));
            std::printf("eps: %s\n", session.explanation().c_str());
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
