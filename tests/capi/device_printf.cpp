// C++ kernels printing through gpuio's device header (device/include/gpuio/device.h) on
// the CPU backend (tests/capi.rs builds it as host.cpp, with -I device/include). Each of
// 64 threads formats one line with gpuio_printf and the same line with the C library's
// snprintf (the line of tests/cuda/printf_kernel.cu, from tests/cuda/printf_line.h); stdout: the gpuio lines (and one each of gpuio_puts and gpuio_write); stderr:
// "want: " and each line snprintf made, then what happened.
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include "gpuio.h"
#include "gpuio/device.h"
#include "../cuda/printf_line.h"

namespace {

struct Job {
    std::vector<std::string> want;
    std::atomic<unsigned> mismatched_counts{0};
    std::atomic<int> bad_format{0};
};

void check(gpuio_status got, const char *what) {
    if (got != GPUIO_OK) {
        throw std::runtime_error(std::string(what) + ": " + gpuio_status_name(got) + " (" + gpuio_last_error() + ")");
    }
}

}  // namespace

int main() {
    const unsigned threads = 64;
    Job job;
    job.want.resize(threads);
    try {
        gpuio_runtime_options o;
        check(gpuio_runtime_options_init(&o), "options_init");
        o.backend = GPUIO_BACKEND_CPU;
        gpuio_runtime *rt = nullptr;
        check(gpuio_runtime_create(&o, &rt), "create");
        gpuio_cpu_kernel kernel = [](const gpuio_thread *t, void *user) {
            auto *job = static_cast<Job *>(user);
            unsigned i = static_cast<unsigned>(t->global_idx);
            printf_values v = printf_values_of(i);
            int got = gpuio_printf(PRINTF_LINE, PRINTF_ARGS(i, v));
            char *want = printf_want_line(i);
            // snprintf's count is the line's length and its newline; out of memory is a mismatch.
            if (want == nullptr || std::strlen(want) + 1 != static_cast<size_t>(got)) {
                job->mismatched_counts.fetch_add(1);
            }
            if (want != nullptr) {
                job->want[i] = std::string(want) + "\n";
                std::free(want);
            }
            if (i == 0) {
                gpuio_puts("a line from gpuio_puts");
                // A format it does not take: nothing printed of it, -1, a line on stderr.
                job->bad_format = gpuio_printf("%n", static_cast<int *>(nullptr));
            }
            if (i == 1) {
                gpuio_write(1, "a line from gpuio_write\n", 24);
            }
        };
        check(gpuio_cpu_launch(rt, threads / 4, 4, kernel, &job), "cpu_launch");
        check(gpuio_synchronize(rt, nullptr), "synchronize");
        check(gpuio_runtime_destroy(rt), "destroy");
    } catch (const std::exception &e) {
        std::fprintf(stderr, "FAIL: %s\n", e.what());
        return 1;
    }
    for (const std::string &line : job.want) {
        std::fprintf(stderr, "want: %s", line.c_str());
    }
    std::fprintf(stderr, "want: a line from gpuio_puts\nwant: a line from gpuio_write\n");
    std::fprintf(stderr, "counts that differ from snprintf's: %u\n", job.mismatched_counts.load());
    std::fprintf(stderr, "gpuio_printf(\"%%n\") returned %d\n", job.bad_format.load());
    return job.mismatched_counts.load() == 0 && job.bad_format.load() == -1 ? 0 : 1;
}
