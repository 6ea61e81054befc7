// onnx_cooker.hpp - C++17 RAII over onnx_cooker.h (header only). Every failure throws
// oc::Error (status + message); objects release what they own when they go out of scope.
// Lifetimes are the C API's: a Session borrows its Blob, a Blob borrows memory passed to
// Blob::from_memory; destroy sessions before blobs, blobs before their memory.
#ifndef ONNX_COOKER_HPP
#define ONNX_COOKER_HPP

#include <cstdio>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "onnx_cooker.h"

#if defined(__has_include)
#if __has_include(<onnxruntime_c_api.h>)
#include <onnxruntime_c_api.h> // the session level (oc::Session) needs onnxruntime's C API header
#endif
#endif

namespace oc {

class Error : public std::runtime_error {
public:
    Error(oc_status status, const std::string &message) : std::runtime_error(message), status_(status) {}
    oc_status status() const noexcept { return status_; }

private:
    oc_status status_;
};

namespace detail {
inline void check(oc_status status, const oc_error &err) {
    if (status != OC_OK) throw Error(status, std::string(oc_status_name(status)) + ": " + err.message);
}

// A unique owner of a C handle with its release function.
template <typename T, void (*Release)(T *)> class Handle {
public:
    Handle() noexcept = default;
    explicit Handle(T *raw) noexcept : raw_(raw) {}
    Handle(Handle &&other) noexcept : raw_(std::exchange(other.raw_, nullptr)) {}
    Handle &operator=(Handle &&other) noexcept {
        if (this != &other) reset(std::exchange(other.raw_, nullptr));
        return *this;
    }
    Handle(const Handle &) = delete;
    Handle &operator=(const Handle &) = delete;
    ~Handle() { reset(); }
    T *get() const noexcept { return raw_; }
    void reset(T *raw = nullptr) noexcept {
        if (raw_ != nullptr) Release(raw_);
        raw_ = raw;
    }

private:
    T *raw_ = nullptr;
};
} // namespace detail

class Blob {
public:
    // Borrows data: it must outlive the Blob and every session made from it.
    static Blob from_memory(const void *data, size_t size, const oc_blob_options *options = nullptr) {
        oc_error err{};
        oc_blob *raw = nullptr;
        detail::check(oc_blob_open_memory(data, size, options, &raw, &err), err);
        return Blob(raw);
    }
    static Blob from_file(const std::string &path, const oc_blob_options *options = nullptr) {
        oc_error err{};
        oc_blob *raw = nullptr;
        detail::check(oc_blob_open_file(path.c_str(), options, &raw, &err), err);
        return Blob(raw);
    }
    explicit Blob(oc_blob *raw) noexcept : handle_(raw) {}

    oc_blob_info info() const {
        oc_error err{};
        oc_blob_info info{};
        detail::check(oc_blob_get_info(handle_.get(), &info, &err), err);
        return info;
    }
    std::vector<std::string> execution_providers() const {
        std::vector<std::string> names;
        for (size_t i = 0; i < oc_blob_ep_count(handle_.get()); ++i) names.emplace_back(oc_blob_ep_name(handle_.get(), i));
        return names;
    }
    // The recipe's session options and provider options of one EP, as (key, value) pairs.
    using Options = std::vector<std::pair<std::string, std::string>>;
    Options session_options(const std::string &ep) const {
        return pairs(ep, oc_blob_session_option_count, oc_blob_session_option);
    }
    Options provider_options(const std::string &ep) const {
        return pairs(ep, oc_blob_provider_option_count, oc_blob_provider_option);
    }
    // Throws unless the recipe asks only for what a blob may (oc_blob_check_recipe): call it before
    // applying the recipe to sessions of your own.
    void check_recipe() const {
        oc_error err{};
        detail::check(oc_blob_check_recipe(handle_.get(), &err), err);
    }
    // The unpack level: the model file's bytes and the weights section's (empty when none), valid
    // as long as the Blob (views into the caller's memory where stored raw).
    struct Bytes {
        const void *data = nullptr;
        size_t size = 0;
    };
    Bytes model() {
        oc_error err{};
        Bytes bytes;
        detail::check(oc_blob_model(handle_.get(), &bytes.data, &bytes.size, &err), err);
        return bytes;
    }
    Bytes weights() {
        oc_error err{};
        Bytes bytes;
        detail::check(oc_blob_weights(handle_.get(), &bytes.data, &bytes.size, &err), err);
        return bytes;
    }
    // The header's device_policy ("prefer_gpu", ...), or "" when it has none.
    std::string device_policy() const {
        const char *policy = oc_blob_device_policy(handle_.get());
        return policy != nullptr ? policy : "";
    }
    oc_blob *get() const noexcept { return handle_.get(); }

private:
    using Count = size_t (*)(const oc_blob *, const char *);
    using Pair = oc_status (*)(const oc_blob *, const char *, size_t, const char **, const char **);
    Options pairs(const std::string &ep, Count count, Pair pair) const {
        Options options;
        for (size_t i = 0; i < count(handle_.get(), ep.c_str()); ++i) {
            const char *key = nullptr, *value = nullptr;
            oc_error err{};  // these getters take no oc_error: the message is said here
            const oc_status status = pair(handle_.get(), ep.c_str(), i, &key, &value);
            if (status != OC_OK)
                std::snprintf(err.message, sizeof err.message, "cannot read option %zu of EP '%s' in the blob's recipe", i,
                              ep.c_str());
            detail::check(status, err);
            options.emplace_back(key, value);
        }
        return options;
    }
    detail::Handle<oc_blob, oc_blob_close> handle_;
};

class Bundle {
public:
    static Bundle open(const std::string &dir, const oc_bundle_options *options = nullptr) {
        oc_error err{};
        oc_bundle *raw = nullptr;
        detail::check(oc_bundle_open_dir(dir.c_str(), options, &raw, &err), err);
        return Bundle(raw);
    }
    // A pak's files through the reader's callbacks (copied; its `user` must outlive the Bundle).
    static Bundle open(const oc_reader &reader, const oc_bundle_options *options = nullptr) {
        oc_error err{};
        oc_bundle *raw = nullptr;
        detail::check(oc_bundle_open_reader(&reader, options, &raw, &err), err);
        return Bundle(raw);
    }
    // manifest.json's bytes (copied); the blobs then come from blob(name, data, size), or `reader`.
    static Bundle from_manifest(const void *manifest, size_t size, const oc_reader *reader = nullptr,
                                const oc_bundle_options *options = nullptr) {
        oc_error err{};
        oc_bundle *raw = nullptr;
        detail::check(oc_bundle_open_manifest(manifest, size, reader, options, &raw, &err), err);
        return Bundle(raw);
    }
    explicit Bundle(oc_bundle *raw) noexcept : handle_(raw) {}

    std::string platform() const { return oc_bundle_platform(handle_.get()); }
    std::vector<std::string> models() const {
        std::vector<std::string> names;
        for (size_t i = 0; i < oc_bundle_model_count(handle_.get()); ++i) names.emplace_back(oc_bundle_model_name(handle_.get(), i));
        return names;
    }
    // One signature's dimensions without JSON: (size, name) each, size -1 where it is free and name ""
    // where it has none; empty for no shape (a non-tensor).
    std::vector<std::pair<int64_t, std::string>> dims(const std::string &name, bool outputs, size_t index) const {
        std::vector<std::pair<int64_t, std::string>> found;
        const int side = outputs ? 1 : 0;
        oc_tensor_info info{};
        oc_error checked{};  // an unknown model or index throws (the rank alone reads as "no shape")
        detail::check(oc_bundle_signature(handle_.get(), name.c_str(), side, index, &info, &checked), checked);
        for (int64_t d = 0; d < oc_bundle_signature_rank(handle_.get(), name.c_str(), side, index); ++d) {
            oc_error err{};
            int64_t size = 0;
            const char *symbol = nullptr;
            detail::check(oc_bundle_signature_dim(handle_.get(), name.c_str(), side, index, static_cast<size_t>(d), &size,
                                                  &symbol, &err),
                          err);
            found.emplace_back(size, symbol != nullptr ? symbol : "");
        }
        return found;
    }
    // A model's inputs (outputs: true, its outputs) from the manifest; strings live as long as the Bundle.
    std::vector<oc_tensor_info> signature(const std::string &name, bool outputs = false) const {
        if (oc_bundle_model_file(handle_.get(), name.c_str(), nullptr) == nullptr) {  // its count reads 0
            oc_tensor_info info{};
            oc_error err{};
            detail::check(oc_bundle_signature(handle_.get(), name.c_str(), 0, 0, &info, &err), err);
        }
        std::vector<oc_tensor_info> found(oc_bundle_signature_count(handle_.get(), name.c_str(), outputs ? 1 : 0));
        for (size_t i = 0; i < found.size(); ++i) {
            oc_error err{};
            detail::check(oc_bundle_signature(handle_.get(), name.c_str(), outputs ? 1 : 0, i, &found[i], &err), err);
        }
        return found;
    }
    Blob blob(const std::string &name) {
        oc_error err{};
        oc_blob *raw = nullptr;
        detail::check(oc_bundle_open_blob(handle_.get(), name.c_str(), &raw, &err), err);
        return Blob(raw);
    }
    // The blob file the manifest names for `name` (relative to the bundle folder), "" for a model
    // the bundle lacks; `size` receives its size in bytes.
    std::string model_file(const std::string &name, uint64_t *size = nullptr) const {
        const char *file = oc_bundle_model_file(handle_.get(), name.c_str(), size);
        return file != nullptr ? file : "";
    }
    // Blob bytes the caller holds (a pak's), checked against the model's manifest entry: BORROWED
    // (they must outlive the Blob and its sessions).
    Blob blob(const std::string &name, const void *data, size_t size) {
        oc_error err{};
        oc_blob *raw = nullptr;
        detail::check(oc_bundle_open_blob_memory(handle_.get(), name.c_str(), data, size, &raw, &err), err);
        return Blob(raw);
    }
    oc_bundle *get() const noexcept { return handle_.get(); }

private:
    detail::Handle<oc_bundle, oc_bundle_close> handle_;
};

class Runtime {
public:
    // nullptr: the platform's default library name.
    static Runtime load(const char *library_path = nullptr) {
        oc_error err{};
        oc_runtime *raw = nullptr;
        detail::check(oc_runtime_load(library_path, &raw, &err), err);
        return Runtime(raw);
    }
    // An engine that links onnxruntime itself: Runtime::from_api_base(OrtGetApiBase()).
    static Runtime from_api_base(const OrtApiBase *base) {
        oc_error err{};
        oc_runtime *raw = nullptr;
        detail::check(oc_runtime_from_api_base(base, &raw, &err), err);
        return Runtime(raw);
    }
    explicit Runtime(oc_runtime *raw) noexcept : handle_(raw) {}
    std::string version() const { return oc_runtime_version(handle_.get()); }
    const OrtApi *api() const noexcept { return oc_runtime_api(handle_.get()); }
    // Plugin EPs (onnxruntime 1.22+): whether the API is there, a library registered under `name`
    // (kept until the last runtime over this OrtEnv is gone), and the EP devices offered now (their
    // strings are onnxruntime's: valid while this runtime and its libraries are).
    bool has_plugin_eps() const noexcept { return oc_runtime_has_plugin_eps(handle_.get()) != 0; }
    void register_ep_library(const std::string &name, const std::string &path) {
        oc_error err{};
        detail::check(oc_runtime_register_ep_library(handle_.get(), name.c_str(), path.c_str(), &err), err);
    }
    std::vector<oc_ep_device> ep_devices() const {
        std::vector<oc_ep_device> devices(oc_runtime_ep_device_count(handle_.get()));
        for (size_t i = 0; i < devices.size(); ++i) {
            oc_error err{};
            detail::check(oc_runtime_ep_device(handle_.get(), i, &devices[i], &err), err);
        }
        return devices;
    }
    // The engine's own EP (oc_runtime_set_ep_appender): `append` puts `ep` on the session options
    // (a console's EP, through the call its onnxruntime build offers); nullptr removes it. `user` is
    // borrowed until then, or until the runtime is released.
    void set_ep_appender(const std::string &ep, oc_ep_append_fn append, void *user = nullptr) {
        oc_error err{};
        detail::check(oc_runtime_set_ep_appender(handle_.get(), ep.c_str(), append, user, &err), err);
    }
    oc_runtime *get() const noexcept { return handle_.get(); }

private:
    detail::Handle<oc_runtime, oc_runtime_release> handle_;
};

#ifdef ORT_API_VERSION
// An OrtSession released through the runtime's API. Borrows the Blob and the Runtime.
class Session {
public:
    // devices: nullptr (the blob decides), or a policy or (EP, device type) pairs, borrowed during the
    // call (oc_session_create_reported); explanation() then says which EPs and why, refused() which
    // faster load path onnxruntime refused for the model and why ("" if none).
    Session(Runtime &runtime, Blob &blob, const oc_session_options *options = nullptr,
            const oc_devices *devices = nullptr)
        : api_(runtime.api()) {
        oc_error err{};
        char explanation[1024] = "";
        char refused[OC_REFUSED_MAX] = "";
        detail::check(oc_session_create_reported(runtime.get(), blob.get(), options, devices, &raw_, &path_, explanation,
                                                 sizeof explanation, refused, sizeof refused, &err),
                      err);
        explanation_ = explanation;
        refused_ = refused;
    }
    // An empty session (no OrtSession), for a member that is made later or reloaded: assign one.
    Session() noexcept = default;
    Session(Session &&other) noexcept
        : api_(other.api_), raw_(std::exchange(other.raw_, nullptr)), path_(other.path_),
          explanation_(std::move(other.explanation_)), refused_(std::move(other.refused_)) {}
    // Releases the session held, then takes other's (a component reloading its model).
    Session &operator=(Session &&other) noexcept {
        if (this != &other) {
            release();
            api_ = other.api_;
            raw_ = std::exchange(other.raw_, nullptr);
            path_ = other.path_;
            explanation_ = std::move(other.explanation_);
            refused_ = std::move(other.refused_);
        }
        return *this;
    }
    Session(const Session &) = delete;
    Session &operator=(const Session &) = delete;
    ~Session() { release(); }
    explicit operator bool() const noexcept { return raw_ != nullptr; }
    OrtSession *get() const noexcept { return raw_; }
    oc_load_path load_path() const noexcept { return path_; }
    const std::string &explanation() const noexcept { return explanation_; }
    const std::string &refused() const noexcept { return refused_; }

private:
    void release() noexcept {
        if (raw_ != nullptr) api_->ReleaseSession(std::exchange(raw_, nullptr));
    }
    const OrtApi *api_ = nullptr;
    OrtSession *raw_ = nullptr;
    oc_load_path path_ = OC_LOAD_ONNX_INLINE;
    std::string explanation_;
    std::string refused_;
};
#else
// Without onnxruntime's C API header, using oc::Session fails to compile with this message.
class Session {
public:
    template <typename... Args> explicit Session(Args &&...) {
        static_assert(sizeof...(Args) == 0 && sizeof...(Args) != 0,
                      "oc::Session needs onnxruntime's C API header: put the folder holding "
                      "onnxruntime_c_api.h (the engine's onnxruntime) on the include path");
    }
};
#endif // ORT_API_VERSION

} // namespace oc

#endif // ONNX_COOKER_HPP
