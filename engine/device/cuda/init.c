//go:build cuda

// The driver's cuInit, called once by gorgonia.org/cu's package init, which
// exits the process when it fails. This definition, in the executable,
// takes precedence over libcuda's: it calls the driver's (the next
// definition in the lookup order), keeps its result for Open to report, and
// answers success so that the process lives on and its other devices work.
#define _GNU_SOURCE
#include <dlfcn.h>
#include <cuda.h>

static CUresult init_result = CUDA_ERROR_NOT_INITIALIZED;
static int init_called;

CUresult cuInit(unsigned int flags) {
	CUresult (*real)(unsigned int) = (CUresult (*)(unsigned int))dlsym(RTLD_NEXT, "cuInit");
	init_called = 1;
	init_result = real ? real(flags) : CUDA_ERROR_NOT_INITIALIZED;
	return CUDA_SUCCESS;
}

int linger_cu_init_result(int *called) {
	*called = init_called;
	return (int)init_result;
}
