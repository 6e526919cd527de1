// TEST-ONLY (tests/kernels/hipcpu): C entry points, callable through ctypes, around csrc's GPU host entry
// points (csrc/scan_gpu.h) built for the CPU with HIP-CPU. Each wrapper fills the kernel's parameter
// struct from flat arrays, calls the csrc entry point on the null stream, waits for the launch and
// returns nullptr or the first error message (the entry point's own refusal, a launch error, or a
// synchronisation error).
//
// The csrc entry points are redeclared weak, so a library built from a subset of the translation units
// (the mutation test builds one) links, and a call to one left out reports so instead of crashing.
//
// Adding a kernel: add its csrc translation units to KERNEL_SOURCES (hipcpu_build.py), a wrapper here
// (weak declarations included), and its call to a runner (hipcpu_runner.py for the scan,
// hipcpu_conv1d_runner.py for the causal conv1d).
#include <hip/hip_runtime.h>

#include <cstdint>

#include "conv1d_gpu.h"
#include "portability.h"
#include "scan_complex.h"
#include "scan_gpu.h"

namespace mamba_ssm {
#define MAMBA_HIPCPU_WEAK_SCAN(dir, dtype, P) __attribute__((weak)) const char* scan_##dir##_gpu_##dtype(const P&, void*);
MAMBA_HIPCPU_WEAK_SCAN(fwd, fp32, ScanParams)
MAMBA_HIPCPU_WEAK_SCAN(fwd, fp16, ScanParams)
MAMBA_HIPCPU_WEAK_SCAN(fwd, bf16, ScanParams)
MAMBA_HIPCPU_WEAK_SCAN(bwd, fp32, ScanBwdParams)
MAMBA_HIPCPU_WEAK_SCAN(bwd, fp16, ScanBwdParams)
MAMBA_HIPCPU_WEAK_SCAN(bwd, bf16, ScanBwdParams)
MAMBA_HIPCPU_WEAK_SCAN(complex_fwd, fp32, ScanParams)
MAMBA_HIPCPU_WEAK_SCAN(complex_fwd, fp16, ScanParams)
MAMBA_HIPCPU_WEAK_SCAN(complex_fwd, bf16, ScanParams)
MAMBA_HIPCPU_WEAK_SCAN(complex_bwd, fp32, ScanBwdParams)
MAMBA_HIPCPU_WEAK_SCAN(complex_bwd, fp16, ScanBwdParams)
MAMBA_HIPCPU_WEAK_SCAN(complex_bwd, bf16, ScanBwdParams)
#undef MAMBA_HIPCPU_WEAK_SCAN
#define MAMBA_HIPCPU_WEAK_CONV(dir, dtype, P) __attribute__((weak)) const char* conv1d_##dir##_gpu_##dtype(const P&, void*);
MAMBA_HIPCPU_WEAK_CONV(fwd, fp32, Conv1dParams)
MAMBA_HIPCPU_WEAK_CONV(fwd, fp16, Conv1dParams)
MAMBA_HIPCPU_WEAK_CONV(fwd, bf16, Conv1dParams)
MAMBA_HIPCPU_WEAK_CONV(bwd, fp32, Conv1dBwdParams)
MAMBA_HIPCPU_WEAK_CONV(bwd, fp16, Conv1dBwdParams)
MAMBA_HIPCPU_WEAK_CONV(bwd, bf16, Conv1dBwdParams)
MAMBA_HIPCPU_WEAK_CONV(update, fp32, Conv1dUpdateParams)
MAMBA_HIPCPU_WEAK_CONV(update, fp16, Conv1dUpdateParams)
MAMBA_HIPCPU_WEAK_CONV(update, bf16, Conv1dUpdateParams)
#undef MAMBA_HIPCPU_WEAK_CONV
__attribute__((weak)) const char* conv1d_varlen_states_gpu(const Conv1dVarlenParams&, int, void*);
}  // namespace mamba_ssm

namespace {

using mamba_ssm::ScanBwdParams;
using mamba_ssm::ScanParams;

// shape: batch, dim, seqlen, dstate, n_groups. flags: b_variable, c_variable, bc_fp32, delta_softplus.
// ptrs: u, delta, A, B, C, D, z, delta_bias, out, last_state (null where absent).
void fill(const std::int64_t* shape, const std::int32_t* flags, void* const* ptrs, ScanParams& p) {
  p.batch = shape[0];
  p.dim = shape[1];
  p.seqlen = shape[2];
  p.dstate = shape[3];
  p.n_groups = shape[4];
  p.b_variable = flags[0] != 0;
  p.c_variable = flags[1] != 0;
  p.bc_fp32 = flags[2] != 0;
  p.delta_softplus = flags[3] != 0;
  p.u = ptrs[0];
  p.delta = ptrs[1];
  p.A = static_cast<const float*>(ptrs[2]);
  p.B = ptrs[3];
  p.C = ptrs[4];
  p.D = static_cast<const float*>(ptrs[5]);
  p.z = ptrs[6];
  p.delta_bias = static_cast<const float*>(ptrs[7]);
  p.out = ptrs[8];
  p.last_state = static_cast<float*>(ptrs[9]);
}

// The backward's parameters: fill()'s, then ptrs[10...] = dout, dlast_state, du, ddelta, dz, dA_part,
// dD_part, ddelta_bias_part, dB, dC, workspace.
void fill_bwd(const std::int64_t* shape, const std::int32_t* flags, void* const* ptrs, ScanBwdParams& p) {
  fill(shape, flags, ptrs, p);
  void* const* g = ptrs + 10;
  p.dout = g[0];
  p.dlast_state = static_cast<const float*>(g[1]);
  p.du = g[2];
  p.ddelta = g[3];
  p.dz = g[4];
  p.dA_part = static_cast<float*>(g[5]);
  p.dD_part = static_cast<float*>(g[6]);
  p.ddelta_bias_part = static_cast<float*>(g[7]);
  p.dB = static_cast<float*>(g[8]);
  p.dC = static_cast<float*>(g[9]);
  p.workspace = static_cast<float*>(g[10]);
}

// Calls entry point `fn` (absent when its translation unit is not in this library) and waits for it.
template <typename P>
const char* call(const char* (*fn)(const P&, void*), const P& p) {
  if (fn == nullptr) return "this entry point's translation unit is not in this library";
  const char* err = fn(p, nullptr);
  const hipError_t sync = hipDeviceSynchronize();
  if (err != nullptr) return err;
  return sync == hipSuccess ? nullptr : hipGetErrorString(sync);
}

}  // namespace

extern "C" {

// kind: 0 fp32, 1 fp16, 2 bf16 (mamba_ssm::ScalarKind).
const char* mamba_hipcpu_scan_fwd(int kind, const std::int64_t* shape, const std::int32_t* flags,
                                  void* const* ptrs) {
  ScanParams p;
  fill(shape, flags, ptrs, p);
  switch (kind) {
    case 0: return call(&mamba_ssm::scan_fwd_gpu_fp32, p);
    case 1: return call(&mamba_ssm::scan_fwd_gpu_fp16, p);
    case 2: return call(&mamba_ssm::scan_fwd_gpu_bf16, p);
    default: return "unknown dtype kind (0 fp32, 1 fp16, 2 bf16)";
  }
}

// ptrs: the forward's ten, then dout, dlast_state, du, ddelta, dz, dA_part, dD_part, ddelta_bias_part,
// dB, dC, workspace.
const char* mamba_hipcpu_scan_bwd(int kind, const std::int64_t* shape, const std::int32_t* flags,
                                  void* const* ptrs) {
  ScanBwdParams p;
  fill_bwd(shape, flags, ptrs, p);
  switch (kind) {
    case 0: return call(&mamba_ssm::scan_bwd_gpu_fp32, p);
    case 1: return call(&mamba_ssm::scan_bwd_gpu_fp16, p);
    case 2: return call(&mamba_ssm::scan_bwd_gpu_bf16, p);
    default: return "unknown dtype kind (0 fp32, 1 fp16, 2 bf16)";
  }
}

// Complex A (csrc/scan_complex.h): the arguments of the two above, in the complex layouts.
const char* mamba_hipcpu_scan_complex_fwd(int kind, const std::int64_t* shape, const std::int32_t* flags,
                                          void* const* ptrs) {
  ScanParams p;
  fill(shape, flags, ptrs, p);
  switch (kind) {
    case 0: return call(&mamba_ssm::scan_complex_fwd_gpu_fp32, p);
    case 1: return call(&mamba_ssm::scan_complex_fwd_gpu_fp16, p);
    case 2: return call(&mamba_ssm::scan_complex_fwd_gpu_bf16, p);
    default: return "unknown dtype kind (0 fp32, 1 fp16, 2 bf16)";
  }
}

const char* mamba_hipcpu_scan_complex_bwd(int kind, const std::int64_t* shape, const std::int32_t* flags,
                                          void* const* ptrs) {
  ScanBwdParams p;
  fill_bwd(shape, flags, ptrs, p);
  switch (kind) {
    case 0: return call(&mamba_ssm::scan_complex_bwd_gpu_fp32, p);
    case 1: return call(&mamba_ssm::scan_complex_bwd_gpu_fp16, p);
    case 2: return call(&mamba_ssm::scan_complex_bwd_gpu_bf16, p);
    default: return "unknown dtype kind (0 fp32, 1 fp16, 2 bf16)";
  }
}

// Causal conv1d (csrc/conv1d_gpu.h). shape: batch, dim, seqlen, width, x_sb, x_sd, x_sl. flags: silu,
// channel_last. ptrs: x, out, weight, bias, seq_idx, initial_states, final_states (null where absent).
static void fill_conv(const std::int64_t* shape, const std::int32_t* flags, void* const* ptrs,
                      mamba_ssm::Conv1dParams& p) {
  p.batch = shape[0];
  p.dim = shape[1];
  p.seqlen = shape[2];
  p.width = shape[3];
  p.x_sb = shape[4];
  p.x_sd = shape[5];
  p.x_sl = shape[6];
  p.silu = flags[0] != 0;
  p.channel_last = flags[1] != 0;
  p.x = ptrs[0];
  p.out = ptrs[1];
  p.weight = static_cast<const float*>(ptrs[2]);
  p.bias = static_cast<const float*>(ptrs[3]);
  p.seq_idx = static_cast<const std::int32_t*>(ptrs[4]);
  p.initial_states = static_cast<const float*>(ptrs[5]);
  p.final_states = ptrs[6];
}

const char* mamba_hipcpu_conv_fwd(int kind, const std::int64_t* shape, const std::int32_t* flags,
                                  void* const* ptrs) {
  mamba_ssm::Conv1dParams p;
  fill_conv(shape, flags, ptrs, p);
  switch (kind) {
    case 0: return call(&mamba_ssm::conv1d_fwd_gpu_fp32, p);
    case 1: return call(&mamba_ssm::conv1d_fwd_gpu_fp16, p);
    case 2: return call(&mamba_ssm::conv1d_fwd_gpu_bf16, p);
    default: return "unknown dtype kind (0 fp32, 1 fp16, 2 bf16)";
  }
}

// ptrs: the forward's seven, then dout, dfinal_states, dx, dweight, dbias, dinitial_states, workspace.
const char* mamba_hipcpu_conv_bwd(int kind, const std::int64_t* shape, const std::int32_t* flags,
                                  void* const* ptrs) {
  mamba_ssm::Conv1dBwdParams p;
  fill_conv(shape, flags, ptrs, p);
  void* const* g = ptrs + 7;
  p.dout = g[0];
  p.dfinal_states = static_cast<const float*>(g[1]);
  p.dx = g[2];
  p.dweight = static_cast<float*>(g[3]);
  p.dbias = static_cast<float*>(g[4]);
  p.dinitial_states = static_cast<float*>(g[5]);
  p.workspace = static_cast<float*>(g[6]);
  switch (kind) {
    case 0: return call(&mamba_ssm::conv1d_bwd_gpu_fp32, p);
    case 1: return call(&mamba_ssm::conv1d_bwd_gpu_fp16, p);
    case 2: return call(&mamba_ssm::conv1d_bwd_gpu_bf16, p);
    default: return "unknown dtype kind (0 fp32, 1 fp16, 2 bf16)";
  }
}

// shape: batch, dim, seqlen, width, state_len, n_states, x_sb, x_sd, x_sl, s_sb, s_sd, s_sl. flags: silu.
// ptrs: x, out, conv_state, weight, bias, cache_seqlens, conv_state_indices.
const char* mamba_hipcpu_conv_update(int kind, const std::int64_t* shape, const std::int32_t* flags,
                                     void* const* ptrs) {
  mamba_ssm::Conv1dUpdateParams p;
  p.batch = shape[0];
  p.dim = shape[1];
  p.seqlen = shape[2];
  p.width = shape[3];
  p.state_len = shape[4];
  p.n_states = shape[5];
  p.x_sb = shape[6];
  p.x_sd = shape[7];
  p.x_sl = shape[8];
  p.s_sb = shape[9];
  p.s_sd = shape[10];
  p.s_sl = shape[11];
  p.silu = flags[0] != 0;
  p.x = ptrs[0];
  p.out = ptrs[1];
  p.state = ptrs[2];
  p.weight = static_cast<const float*>(ptrs[3]);
  p.bias = static_cast<const float*>(ptrs[4]);
  p.cache_seqlens = static_cast<const std::int32_t*>(ptrs[5]);
  p.state_indices = static_cast<const std::int32_t*>(ptrs[6]);
  switch (kind) {
    case 0: return call(&mamba_ssm::conv1d_update_gpu_fp32, p);
    case 1: return call(&mamba_ssm::conv1d_update_gpu_fp16, p);
    case 2: return call(&mamba_ssm::conv1d_update_gpu_bf16, p);
    default: return "unknown dtype kind (0 fp32, 1 fp16, 2 bf16)";
  }
}

// shape: batch, dim, state_len, total, x_st, x_sd. ptrs: x, states, cu_seqlens.
const char* mamba_hipcpu_conv_varlen(int elem_size, const std::int64_t* shape, void* const* ptrs) {
  if (mamba_ssm::conv1d_varlen_states_gpu == nullptr) return "conv1d_fp32.cu is not in this library";
  mamba_ssm::Conv1dVarlenParams p;
  p.batch = shape[0];
  p.dim = shape[1];
  p.state_len = shape[2];
  p.total = shape[3];
  p.x_st = shape[4];
  p.x_sd = shape[5];
  p.x = ptrs[0];
  p.states = ptrs[1];
  p.cu_seqlens = static_cast<const std::int32_t*>(ptrs[2]);
  const char* err = mamba_ssm::conv1d_varlen_states_gpu(p, elem_size, nullptr);
  const hipError_t sync = hipDeviceSynchronize();
  if (err != nullptr) return err;
  return sync == hipSuccess ? nullptr : hipGetErrorString(sync);
}

// Resume order after barriers for the following launches (build.py's SCHEDULES: 0 fixed, 1 reversed,
// 2 shuffled); the patched copy of HIP-CPU's scheduler reads it.
void mamba_hipcpu_set_schedule(int mode) { hip::detail::this_tile::mamba_schedule.store(mode); }

// Lanes per warp the kernels were compiled for (the layout: 64 or 32).
int mamba_hipcpu_warp_size() { return mamba_ssm::gpu::kWarpSize; }

}  // extern "C"
