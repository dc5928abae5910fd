// kernels.cc: the engine's kernels (../kernels/linger.cu, the source
// nvcc compiles to the committed PTX) compiled for the host with emu.h,
// and the registry that fakecuda.c's module and launch calls use: a
// kernel's PTX name, and a launcher that unpacks the driver's void
// **params by the kernel's own signature.
#include "emu.h"
#include "linger.cu"

#include <tuple>
#include <utility>

namespace {

template <class... A, size_t... I>
void run(void (*k)(A...), dim3 g, dim3 b, void **p, std::index_sequence<I...>) {
	// The arguments are copied once, as the driver does at launch.
	std::tuple<A...> args{*static_cast<A *>(p[I])...};
	emu::launch(g, b, [&] { std::apply(k, args); });
}

template <class... A>
void run(void (*k)(A...), dim3 g, dim3 b, void **p) {
	run(k, g, b, p, std::index_sequence_for<A...>{});
}

struct entry {
	const char *name;
	void (*launch)(dim3, dim3, void **);
};

#define K(f) {#f, [](dim3 g, dim3 b, void **p) { run(f, g, b, p); }}
const entry registry[] = {
	K(linger_fill),
	K(linger_fill_uniform),
	K(linger_embed),
	K(linger_swiglu),
	K(linger_add),
	K(linger_causal_mask),
	K(linger_kv_write),
	K(linger_rmsnorm),
	K(linger_rope),
	K(linger_gemm),
	K(linger_gemv),
	K(linger_attention),
	K(linger_attention_combine),
	K(linger_attention_tiled),
	K(linger_argmax),
	K(linger_topk),
};
#undef K
const int nregistry = sizeof registry / sizeof registry[0];

} // namespace

extern "C" {

__attribute__((visibility("default"))) int fakecuda_kernel_count(void) { return nregistry; }

__attribute__((visibility("default"))) const char *fakecuda_kernel_name(int i) { return i >= 0 && i < nregistry ? registry[i].name : nullptr; }

__attribute__((visibility("default"))) int fakecuda_kernel_find(const char *name) {
	for (int i = 0; i < nregistry; i++)
		if (strcmp(registry[i].name, name) == 0) return i;
	return -1;
}

__attribute__((visibility("default"))) void fakecuda_kernel_run(int i, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz, void **params) {
	registry[i].launch(dim3{gx, gy, gz}, dim3{bx, by, bz}, params);
}

} // extern "C"
