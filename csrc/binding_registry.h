// What mamba_ssm._C registers in the torch.library namespace `mamba_ssm`, once for both bindings: the
// op schemas and, per device, which op template implements each op. binding.cpp / binding_cuda.cpp
// (classic: TORCH_LIBRARY) and binding_stable.cpp / binding_stable_cuda.cpp (stable ABI:
// STABLE_TORCH_LIBRARY) hand in a registrar whose `impl<&fn>(name)` registers fn for their dispatch key.
//
// Adding an op: its schema to kSchemas, its op template (over the tensor API `A`, e.g. in
// binding_scan_ops.h), and one `impl` line per device it runs on below. Fake implementations and
// autograd are registered from Python (mamba_ssm/ops/backends/compiled*.py).
#pragma once
#include "binding_complex_ops.h"
#include "binding_conv1d_ops.h"
#include "binding_scan_ops.h"

namespace mamba_ssm {

inline constexpr const char* kSchemas[] = {
    // out, last_state (batch, dim, d_state) fp32. Semantics: csrc/scan_params.h.
    "selective_scan_fwd(Tensor u, Tensor delta, Tensor A, Tensor B, Tensor C, Tensor? D, Tensor? z, "
    "Tensor? delta_bias, bool delta_softplus) -> (Tensor, Tensor)",
    // du, ddelta, dA, dB, dC, dD, dz, ddelta_bias; dD / ddelta_bias / dz are empty when that input is None.
    "selective_scan_bwd(Tensor u, Tensor delta, Tensor A, Tensor B, Tensor C, Tensor? D, Tensor? z, "
    "Tensor? delta_bias, bool delta_softplus, Tensor dout, Tensor? dlast_state) -> "
    "(Tensor, Tensor, Tensor, Tensor, Tensor, Tensor, Tensor, Tensor)",
    // Complex A (S4D-style diagonal complex state): out (u's dtype), last_state (batch, dim, d_state)
    // complex64. Inputs, layouts and math: csrc/scan_complex.h.
    "selective_scan_complex_fwd(Tensor u, Tensor delta, Tensor A, Tensor B, Tensor C, Tensor? D, Tensor? z, "
    "Tensor? delta_bias, bool delta_softplus) -> (Tensor, Tensor)",
    // du, ddelta, dA (complex), dB, dC (each like its input), dD, dz, ddelta_bias; dD / ddelta_bias / dz are
    // empty when that input is None. dlast_state: complex (batch, dim, d_state).
    "selective_scan_complex_bwd(Tensor u, Tensor delta, Tensor A, Tensor B, Tensor C, Tensor? D, Tensor? z, "
    "Tensor? delta_bias, bool delta_softplus, Tensor dout, Tensor? dlast_state) -> "
    "(Tensor, Tensor, Tensor, Tensor, Tensor, Tensor, Tensor, Tensor)",
    // out (x's layout: channel-last or contiguous, see binding_conv1d_common.h), final_states (batch, dim,
    // width - 1).
    "causal_conv1d_fwd(Tensor x, Tensor weight, Tensor? bias, Tensor? seq_idx, Tensor? initial_states, "
    "bool silu) -> (Tensor, Tensor)",
    // dx (x's layout), dweight, dbias, dinitial_states; dbias / dinitial_states are empty when absent.
    "causal_conv1d_bwd(Tensor x, Tensor weight, Tensor? bias, Tensor? seq_idx, Tensor? initial_states, "
    "Tensor dout, Tensor? dfinal_states, bool silu) -> (Tensor, Tensor, Tensor, Tensor)",
    // out with x's shape ((batch, dim) or (batch, dim, seqlen)), contiguous; conv_state updated in place.
    "causal_conv1d_update(Tensor x, Tensor(a!) conv_state, Tensor weight, Tensor? bias, bool silu, "
    "Tensor? cache_seqlens, Tensor? conv_state_indices) -> Tensor",
    // states (batch, dim, state_len), strided as a (batch, state_len, dim) tensor in memory.
    "causal_conv1d_varlen_states(Tensor x, Tensor cu_seqlens, int state_len) -> Tensor",
    // The embedded build-info JSON (see binding_info.cpp), and the CPU kernel build that runs (avx512,
    // avx2 or generic; MAMBA_SSM_CPU_ISA caps it). Neither takes a tensor: registered for
    // CompositeExplicitAutograd.
    "build_info() -> str",
    "cpu_isa() -> str",
};

template <class A, class Registrar>
void register_cpu_kernels(Registrar& r) {
  r.template impl<&selective_scan_fwd_cpu<A>>("selective_scan_fwd");
  r.template impl<&selective_scan_bwd_cpu<A>>("selective_scan_bwd");
  r.template impl<&selective_scan_complex_fwd_cpu<A>>("selective_scan_complex_fwd");
  r.template impl<&selective_scan_complex_bwd_cpu<A>>("selective_scan_complex_bwd");
  r.template impl<&causal_conv1d_fwd_cpu<A>>("causal_conv1d_fwd");
  r.template impl<&causal_conv1d_bwd_cpu<A>>("causal_conv1d_bwd");
  r.template impl<&causal_conv1d_update_cpu<A>>("causal_conv1d_update");
  r.template impl<&causal_conv1d_varlen_states_cpu<A>>("causal_conv1d_varlen_states");
}

template <class A, class Registrar>
void register_cuda_kernels(Registrar& r) {
  r.template impl<&selective_scan_fwd_cuda<A>>("selective_scan_fwd");
  r.template impl<&selective_scan_bwd_cuda<A>>("selective_scan_bwd");
  r.template impl<&selective_scan_complex_fwd_cuda<A>>("selective_scan_complex_fwd");
  r.template impl<&selective_scan_complex_bwd_cuda<A>>("selective_scan_complex_bwd");
  r.template impl<&causal_conv1d_fwd_cuda<A>>("causal_conv1d_fwd");
  r.template impl<&causal_conv1d_bwd_cuda<A>>("causal_conv1d_bwd");
  r.template impl<&causal_conv1d_update_cuda<A>>("causal_conv1d_update");
  r.template impl<&causal_conv1d_varlen_states_cuda<A>>("causal_conv1d_varlen_states");
}

// The tensor-free ops (build_info, cpu_isa): plain functions, the same in both bindings.
std::string build_info();
std::string cpu_isa();

template <class Registrar>
void register_info_ops(Registrar& r) {
  r.template impl<&build_info>("build_info");
  r.template impl<&cpu_isa>("cpu_isa");
}

}  // namespace mamba_ssm
