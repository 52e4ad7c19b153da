/* A stand-in for libcuda.so.1 with the few driver API calls a park makes (tests only: this
 * machine has no GPU). "Device" memory is host memory; every call checks its context as the
 * driver does (CUDA_ERROR_INVALID_CONTEXT before cuCtxSetCurrent). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

typedef int CUresult;
typedef uint64_t CUdeviceptr;
static int current = 0;
static long live = 0; /* allocations not yet freed: the test reads it */

long fakecuda_live(void) { return live; }
CUresult cuInit(unsigned int flags) { return flags == 0 ? 0 : 1; }
CUresult cuDeviceGet(int *dev, int ordinal) { if (ordinal != 0) return 101; *dev = 0; return 0; }
CUresult cuDeviceGetName(char *name, int len, int dev) { strncpy(name, "Fake GPU", len); return 0; }
CUresult cuDevicePrimaryCtxRetain(void **ctx, int dev) { *ctx = (void *)0x1; return 0; }
CUresult cuDevicePrimaryCtxRelease_v2(int dev) { current = 0; return 0; }
CUresult cuCtxSetCurrent(void *ctx) { current = ctx != 0; return 0; }
CUresult cuCtxSynchronize(void) { return current ? 0 : 201; }
CUresult cuMemAlloc_v2(CUdeviceptr *p, size_t n) {
    if (!current) return 201;
    void *m = malloc(n);
    if (!m) return 2; /* CUDA_ERROR_OUT_OF_MEMORY */
    live++; *p = (CUdeviceptr)(uintptr_t)m; return 0;
}
CUresult cuMemFree_v2(CUdeviceptr p) { free((void *)(uintptr_t)p); live--; return 0; }
CUresult cuMemAllocHost_v2(void **p, size_t n) {
    if (!current) return 201;
    if (posix_memalign(p, 4096, n)) return 2;
    live++; return 0;
}
CUresult cuMemFreeHost(void *p) { free(p); live--; return 0; }
CUresult cuMemcpyDtoH_v2(void *dst, CUdeviceptr src, size_t n) {
    if (!current) return 201; memcpy(dst, (void *)(uintptr_t)src, n); return 0;
}
CUresult cuMemcpyHtoD_v2(CUdeviceptr dst, const void *src, size_t n) {
    if (!current) return 201; memcpy((void *)(uintptr_t)dst, src, n); return 0;
}
CUresult cuMemsetD32_v2(CUdeviceptr dst, unsigned int v, size_t count) {
    if (!current) return 201;
    uint32_t *w = (uint32_t *)(uintptr_t)dst;
    for (size_t i = 0; i < count; i++) w[i] = v;
    return 0;
}
CUresult cuGetErrorString(CUresult e, const char **s) {
    *s = e == 2 ? "out of memory" : e == 201 ? "invalid device context" : "unknown error"; return 0;
}
