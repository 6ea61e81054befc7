// The README's C++ use of libonnx_cooker, built by an engine's CMake (CMakeLists.txt here):
// consumer_cxx BUNDLE_DIR ORT_LIBRARY opens each model's blob and creates its session through
// onnx_cooker.hpp, one line per model: "<name> <load path>".
#include <cstdio>

#include "onnx_cooker.hpp" // every failure throws oc::Error (status and message)

int main(int argc, char **argv) {
    if (argc != 3) {
        std::fprintf(stderr, "usage: consumer_cxx BUNDLE_DIR ORT_LIBRARY\n");
        return 2;
    }
    try {
        oc::Runtime runtime = oc::Runtime::load(argv[2]);
        oc::Bundle bundle = oc::Bundle::open(argv[1]);
        for (const std::string &name : bundle.models()) {
            oc::Blob blob = bundle.blob(name);
            oc::Session session(runtime, blob); // session.get() is the OrtSession
            std::printf("%s %s\n", name.c_str(), oc_load_path_name(session.load_path()));
        }
    } catch (const oc::Error &error) {
        std::fprintf(stderr, "%s\n", error.what());
        return 1;
    }
    return 0;
}
