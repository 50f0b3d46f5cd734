// A C++ host of gpuio (tests/capi.rs builds it with -std=c++17 -Wall -Wextra -Werror
// -pedantic, linked against libgpuio.so through gpuio.pc). Runs the CPU backend: a
// capture-less lambda as the kernel, a C++ object as its user data; then a few error
// paths. stdout: "c++ t=<thread> i=<n>" lines; stderr: what happened.
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <stdexcept>
#include <string>

#include "gpuio.h"

namespace {

// Throws on an unexpected status, with gpuio's message.
void check(gpuio_status got, gpuio_status want, const std::string &what) {
    std::string msg = gpuio_last_error();
    if (got != want) {
        throw std::runtime_error(what + ": got " + gpuio_status_name(got) + " (" + msg + "), want " +
                                 gpuio_status_name(want));
    }
    std::fprintf(stderr, "ok: %s: %s%s%s\n", what.c_str(), gpuio_status_name(got), msg.empty() ? "" : ": ",
                 msg.c_str());
}

// A runtime, destroyed (after a final synchronize) when it goes out of scope.
struct RuntimeDeleter {
    void operator()(gpuio_runtime *rt) const { check(gpuio_runtime_destroy(rt), GPUIO_OK, "destroy"); }
};
using Runtime = std::unique_ptr<gpuio_runtime, RuntimeDeleter>;

Runtime make_cpu_runtime() {
    gpuio_runtime_options o;
    check(gpuio_runtime_options_init(&o), GPUIO_OK, "options_init");
    o.backend = GPUIO_BACKEND_CPU;
    o.log_bytes = 4096;
    gpuio_runtime *rt = nullptr;
    check(gpuio_runtime_create(&o, &rt), GPUIO_OK, "create");
    return Runtime(rt);
}

struct Job {
    unsigned lines;
    std::atomic<unsigned> threads{0};
    std::atomic<unsigned> failed_prints{0};
};

}  // namespace

int main(int argc, char **argv) {
    if (argc != 3) {
        std::fprintf(stderr, "usage: %s THREADS LINES\n", argv[0]);
        return 2;
    }
    unsigned threads = static_cast<unsigned>(std::atoi(argv[1]));
    Job job;
    job.lines = static_cast<unsigned>(std::atoi(argv[2]));
    try {
        Runtime rt = make_cpu_runtime();
        gpuio_cpu_kernel kernel = [](const gpuio_thread *t, void *user) {
            auto *job = static_cast<Job *>(user);
            job->threads.fetch_add(1, std::memory_order_relaxed);
            for (unsigned i = 0; i < job->lines; i++) {
                std::string line = "c++ t=" + std::to_string(t->global_idx) + " i=" + std::to_string(i) + "\n";
                if (gpuio_print(line.data(), line.size()) != GPUIO_OK) {
                    job->failed_prints.fetch_add(1, std::memory_order_relaxed);
                }
            }
        };
        check(gpuio_cpu_launch(rt.get(), threads / 4, 4, kernel, &job), GPUIO_OK, "cpu_launch");
        gpuio_sync_report report{};
        check(gpuio_synchronize(rt.get(), &report), GPUIO_OK, "synchronize");
        if (job.threads != threads || job.failed_prints != 0 || report.num_outputs != 0) {
            throw std::runtime_error("kernel threads " + std::to_string(job.threads.load()) + " of " +
                                     std::to_string(threads) + ", failed prints " +
                                     std::to_string(job.failed_prints.load()));
        }
        check(gpuio_print("x", 1), GPUIO_ERROR_WRONG_CONTEXT, "print outside a kernel");
        check(gpuio_module_load_file(rt.get(), nullptr, nullptr), GPUIO_ERROR_INVALID_ARGUMENT, "load_file(NULL)");
        gpuio_runtime *raw = rt.release();
        check(gpuio_runtime_destroy(raw), GPUIO_OK, "destroy");
        check(gpuio_runtime_destroy(raw), GPUIO_ERROR_INVALID_HANDLE, "double destroy");
    } catch (const std::exception &e) {
        std::fprintf(stderr, "FAIL: %s\n", e.what());
        return 1;
    }
    std::fprintf(stderr, "c++ host: all checks passed\n");
    return 0;
}
