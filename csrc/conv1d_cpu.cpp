// CPU causal conv1d kernels: the baseline-ISA build, the runtime choice of instruction set (the same
// as the selective scan's: AVX2+FMA when the CPU has it, unless MAMBA_SSM_CPU_ISA=generic) and the
// ISA-independent varlen-states copy. No torch header.
#include "conv1d_cpu.h"

#include <cstring>
#include "scan_cpu.h"

#define MAMBA_CPU_NS cpu_generic
#include "conv1d_cpu_impl.h"
#undef MAMBA_CPU_NS

namespace mamba_ssm {

static bool conv_use_avx2() {
  static const bool yes = std::strcmp(scan_cpu_isa(), "avx2") == 0;
  return yes;
}

void conv1d_fwd_cpu(const Conv1dParams& p, int64_t task_begin, int64_t task_end) {
  if (conv_use_avx2()) cpu_avx2::conv::conv1d_fwd(p, task_begin, task_end);
  else cpu_generic::conv::conv1d_fwd(p, task_begin, task_end);
}

void conv1d_bwd_cpu(const Conv1dBwdParams& p, int64_t task_begin, int64_t task_end) {
  if (conv_use_avx2()) cpu_avx2::conv::conv1d_bwd(p, task_begin, task_end);
  else cpu_generic::conv::conv1d_bwd(p, task_begin, task_end);
}

void conv1d_update_cpu(const Conv1dUpdateParams& p, int64_t d_begin, int64_t d_end) {
  if (conv_use_avx2()) cpu_avx2::conv::conv1d_update(p, d_begin, d_end);
  else cpu_generic::conv::conv1d_update(p, d_begin, d_end);
}

template <typename E>
static void varlen_copy(const Conv1dVarlenParams& p) {
  const E* x = static_cast<const E*>(p.x);
  E* states = static_cast<E*>(p.states);
  for (int64_t b = 0; b < p.batch; ++b) {
    const int64_t begin = p.cu_seqlens[b], end = p.cu_seqlens[b + 1];
    for (int64_t j = 0; j < p.state_len; ++j) {
      const int64_t row = end - p.state_len + j;
      E* dst = states + (b * p.state_len + j) * p.dim;
      if (row < begin || row < 0) {
        std::memset(dst, 0, sizeof(E) * p.dim);
        continue;
      }
      const E* src = x + row * p.x_st;
      for (int64_t d = 0; d < p.dim; ++d) dst[d] = src[d * p.x_sd];
    }
  }
}

const char* conv1d_varlen_states_cpu(const Conv1dVarlenParams& p, int elem_size) {
  switch (elem_size) {
    case 2: varlen_copy<uint16_t>(p); return nullptr;
    case 4: varlen_copy<uint32_t>(p); return nullptr;
    case 8: varlen_copy<uint64_t>(p); return nullptr;
    default: return "causal_conv1d_varlen_states: element size must be 2, 4 or 8 bytes";
  }
}

}  // namespace mamba_ssm
