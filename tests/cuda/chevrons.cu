// A CUDA runtime program that launches a kernel printing through gpuio with <<<...>>>:
// tests/cuda/printf_kernel.cu, built into this program by nvcc with relocatable device
// code and linked with gpuio's device library (`.ci/device-run chevrons` builds and runs
// it). The CUDA runtime loads the module; the program finds it (cudaGetFuncBySymbol, then
// the driver's cuFuncGetModule) and attaches gpuio to it. Every thread's line must be the
// one snprintf makes of the same values, each exactly once. Exit 0: every check passed;
// 77: no CUDA GPU.
#include <cuda.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include <unistd.h>

#include "gpuio.h"
#include "printf_kernel.cu"

namespace {

int fail(const char *what, const char *why) {
    std::fprintf(stderr, "FAIL: %s: %s\n", what, why);
    return 1;
}

int fail_gpuio(const char *what, gpuio_status s) {
    return fail(what, (std::string(gpuio_status_name(s)) + " (" + gpuio_last_error() + ")").c_str());
}

// What fd holds from its start.
std::string read_all(int fd) {
    std::string text;
    char buf[1 << 16];
    ssize_t got;
    while ((got = pread(fd, buf, sizeof buf, static_cast<off_t>(text.size()))) > 0) {
        text.append(buf, static_cast<size_t>(got));
    }
    return text;
}

}  // namespace

int main() {
    const unsigned n = 1000;
    char out_path[] = "/tmp/gpuio-chevrons-XXXXXX";
    int out = mkstemp(out_path);
    if (out < 0) {
        return fail("mkstemp", "no temporary file");
    }
    unlink(out_path);

    // The CUDA runtime's context first: the primary context, which gpuio's CUDA backend
    // uses too.
    if (cudaFree(nullptr) != cudaSuccess) {
        std::fprintf(stderr, "skip: no CUDA GPU for the runtime API\n");
        return 77;
    }
    gpuio_runtime_options o;
    gpuio_runtime_options_init(&o);
    o.backend = GPUIO_BACKEND_CUDA;
    o.stdout_fd = out;
    gpuio_runtime *rt = nullptr;
    gpuio_status s = gpuio_runtime_create(&o, &rt);
    if (s == GPUIO_ERROR_BACKEND_UNAVAILABLE) {
        std::fprintf(stderr, "skip: %s\n", gpuio_last_error());
        return 77;
    }
    if (s != GPUIO_OK) {
        return fail_gpuio("gpuio_runtime_create", s);
    }

    // The module the CUDA runtime loaded for printf_kernel, attached to gpuio.
    cudaFunction_t function;
    CUmodule module;
    if (cudaGetFuncBySymbol(&function, reinterpret_cast<const void *>(printf_kernel)) != cudaSuccess) {
        return fail("cudaGetFuncBySymbol", cudaGetErrorString(cudaGetLastError()));
    }
    if (cuFuncGetModule(&module, reinterpret_cast<CUfunction>(function)) != CUDA_SUCCESS) {
        return fail("cuFuncGetModule", "the driver found no module for the kernel");
    }
    if ((s = gpuio_attach_cuda_module(rt, module, nullptr)) != GPUIO_OK) {
        return fail_gpuio("gpuio_attach_cuda_module", s);
    }

    int *counts = nullptr;
    if (cudaMallocManaged(&counts, sizeof(int) * (n + 1)) != cudaSuccess) {
        return fail("cudaMallocManaged", cudaGetErrorString(cudaGetLastError()));
    }
    if ((s = gpuio_prepare_launch(rt)) != GPUIO_OK) {
        return fail_gpuio("gpuio_prepare_launch", s);
    }
    printf_kernel<<<(n + 127) / 128, 128>>>(n, counts);
    cudaError_t launched = cudaGetLastError();
    if (launched != cudaSuccess) {
        return fail("printf_kernel<<<...>>>", cudaGetErrorString(launched));
    }
    gpuio_sync_report report;
    if ((s = gpuio_synchronize(rt, &report)) != GPUIO_OK) {
        return fail_gpuio("gpuio_synchronize", s);
    }
    if (cudaDeviceSynchronize() != cudaSuccess) {
        return fail("cudaDeviceSynchronize", cudaGetErrorString(cudaGetLastError()));
    }

    // Every thread's line exactly once, as snprintf makes it, and its count.
    std::vector<std::string> want;
    int failures = 0;
    for (unsigned i = 0; i < n; i++) {
        char *line = printf_want_line(i);
        if (line == nullptr) {
            return fail("printf_want_line", "out of memory");
        }
        want.emplace_back(line);
        if (counts[i] != static_cast<int>(want.back().size()) + 1) {
            std::fprintf(stderr, "FAIL: thread %u's count %d, want %zu\n", i, counts[i], want.back().size() + 1);
            failures++;
        }
        std::free(line);
    }
    want.emplace_back("a line from gpuio_puts");
    if (counts[n] != -1) {
        std::fprintf(stderr, "FAIL: the refused %%n returned %d, want -1\n", counts[n]);
        failures++;
    }
    std::vector<std::string> got;
    std::string text = read_all(out);
    for (size_t at = 0, end; at < text.size(); at = end + 1) {
        end = text.find('\n', at);
        if (end == std::string::npos) {
            return fail("output", ("a line without its newline: " + text.substr(at)).c_str());
        }
        got.push_back(text.substr(at, end - at));
    }
    std::sort(got.begin(), got.end());
    std::sort(want.begin(), want.end());
    if (got != want) {
        std::fprintf(stderr, "FAIL: %zu lines out, want %zu; first difference:\n", got.size(), want.size());
        for (size_t i = 0; i < std::min(got.size(), want.size()); i++) {
            if (got[i] != want[i]) {
                std::fprintf(stderr, "  got  %s\n  want %s\n", got[i].c_str(), want[i].c_str());
                break;
            }
        }
        failures++;
    }
    cudaFree(counts);
    if ((s = gpuio_runtime_destroy(rt)) != GPUIO_OK) {
        return fail_gpuio("gpuio_runtime_destroy", s);
    }
    std::fprintf(stderr, "chevrons: %zu lines from printf_kernel<<<%u, 128>>>, each as snprintf makes it; %d failure(s)\n",
                 got.size(), (n + 127) / 128, failures);
    return failures ? 1 : 0;
}
