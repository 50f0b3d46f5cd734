// gpuio from C++: one line from each of 1024 threads, through io_uring. On a GPU when there
// is one and a code object for it is given (PTX on NVIDIA, a .hsaco on AMD: the kernels/
// crate's, which has `hello`), else a C++ lambda as the kernel on the CPU backend. The runtime and the module are owned by
// std::unique_ptr, and a failed call throws with gpuio's message.
//
//   cargo build --release -p gpuio-capi
//   cargo build --release --examples       # on a GPU machine: the kernels' code objects too
//   export PKG_CONFIG_PATH=$PWD/target/release
//   c++ -std=c++17 host/capi/examples/hello.cpp $(pkg-config --cflags --libs gpuio) -o hello_cpp
//   ./hello_cpp [kernels.ptx]
#include <cstdio>
#include <memory>
#include <stdexcept>
#include <string>

#include "gpuio.h"

namespace {

// Throws unless `s` is GPUIO_OK: the call, the status and why (gpuio_last_error).
void check(gpuio_status s, const char *what) {
    if (s != GPUIO_OK) {
        throw std::runtime_error(std::string(what) + ": " + gpuio_status_name(s) + ": " + gpuio_last_error());
    }
}

// Destroying a runtime synchronizes first: every line is out, or it says what was lost.
struct DestroyRuntime {
    void operator()(gpuio_runtime *rt) const {
        if (gpuio_runtime_destroy(rt) != GPUIO_OK) {
            std::fprintf(stderr, "gpuio_runtime_destroy: %s\n", gpuio_last_error());
        }
    }
};
using Runtime = std::unique_ptr<gpuio_runtime, DestroyRuntime>;

struct DestroyModule {
    void operator()(gpuio_module *m) const { gpuio_module_destroy(m); }
};
using Module = std::unique_ptr<gpuio_module, DestroyModule>;

}  // namespace

int main(int argc, char **argv) try {
    const unsigned grid = 8, block = 128;
    gpuio_runtime_options options;
    check(gpuio_runtime_options_init(&options), "gpuio_runtime_options_init");
    // With a code object: a GPU if there is one (or GPUIO_BACKEND); without: the CPU.
    options.backend = argc > 1 ? GPUIO_BACKEND_AUTO : GPUIO_BACKEND_CPU;
    gpuio_runtime *raw = nullptr;
    check(gpuio_runtime_create(&options, &raw), "gpuio_runtime_create");
    Runtime rt(raw);
    gpuio_backend backend;
    check(gpuio_runtime_backend(rt.get(), &backend), "gpuio_runtime_backend");
    Module module;
    if (backend != GPUIO_BACKEND_CPU) {
        gpuio_module *m = nullptr;
        check(gpuio_module_load_file(rt.get(), argv[1], &m), "gpuio_module_load_file");
        module.reset(m);
        check(gpuio_module_launch(module.get(), "hello", grid, block, nullptr, 0), "gpuio_module_launch");
    } else {
        // A capture-less lambda converts to the C function pointer gpuio_cpu_launch takes.
        gpuio_cpu_kernel hello = [](const gpuio_thread *t, void *) {
            gpuio_printf("hello from thread %llu of %llu\n", static_cast<unsigned long long>(t->global_idx),
                         static_cast<unsigned long long>(t->grid_dim) * t->block_dim);
        };
        check(gpuio_cpu_launch(rt.get(), grid, block, hello, nullptr), "gpuio_cpu_launch");
    }
    // Every line is out, or the report says what was lost where.
    gpuio_sync_report report{};
    check(gpuio_synchronize(rt.get(), &report), "gpuio_synchronize");
    std::fprintf(stderr, "hello_cpp: %u threads on the %s backend\n", grid * block,
                 backend == GPUIO_BACKEND_CUDA ? "cuda" : backend == GPUIO_BACKEND_HSA ? "hsa" : "cpu");
    return 0;
} catch (const std::exception &e) {
    std::fprintf(stderr, "hello_cpp: %s\n", e.what());
    return 1;
}
