// A CUDA C++ kernel doing file I/O through gpuio (tests/amdgcn_code_objects builds it for
// AMD as HIP, with printf_kernel.cu, and joins both with the device library, so that the
// joined code object holds the ring's request path too). Each thread writes its 16-byte
// record at its offset of `fd`, reads it back and compares; thread 0 then syncs the file.
// `results[i]` is 0 if thread i's record came back, else what failed (-errno, or -1).
#include <gpuio/device.h>

extern "C" __global__ void file_kernel(int fd, unsigned n, int *results) {
    unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) {
        return;
    }
    char record[16];
    for (int b = 0; b < 16; ++b) {
        record[b] = static_cast<char>('a' + (i + b) % 26);
    }
    int64_t at = static_cast<int64_t>(i) * 16;
    ptrdiff_t wrote = gpuio_pwrite(fd, record, sizeof record, at);
    char back[16] = {};
    ptrdiff_t read = wrote == 16 ? gpuio_pread(fd, back, sizeof back, at) : wrote;
    int result = read < 0 ? static_cast<int>(read) : read == 16 ? 0 : -1;
    for (int b = 0; result == 0 && b < 16; ++b) {
        if (back[b] != record[b]) {
            result = -1;
        }
    }
    if (i == 0 && result == 0) {
        result = gpuio_fsync(fd);
    }
    results[i] = result;
}
