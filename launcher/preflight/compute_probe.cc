#include "launcher/preflight/compute_probe.h"

#include <time.h>

#include <algorithm>
#include <vector>

namespace ddprun::launcher {
namespace {

// This thread's CPU time: what the GEMMs ran, not what they waited for a core.
std::chrono::duration<double> ThreadCpuTime() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return std::chrono::seconds(ts.tv_sec) + std::chrono::nanoseconds(ts.tv_nsec);
}

// 128^3: 4 MFLOP a GEMM, its three matrices (192 KiB) in any L2.
constexpr int kN = 128;

// c += a * b, row-major, the i-k-j order that streams rows (the compiler vectorises the inner
// loop). Deterministic, so every node does the same work.
void Gemm(const std::vector<float>& a, const std::vector<float>& b, std::vector<float>* c) {
  for (int i = 0; i < kN; ++i) {
    float* row = c->data() + static_cast<size_t>(i) * kN;
    for (int k = 0; k < kN; ++k) {
      const float aik = a[static_cast<size_t>(i) * kN + k];
      const float* brow = b.data() + static_cast<size_t>(k) * kN;
      for (int j = 0; j < kN; ++j) row[j] += aik * brow[j];
    }
  }
}

}  // namespace

double CpuGemmGflops() {
  const size_t size = static_cast<size_t>(kN) * kN;
  std::vector<float> a(size), b(size), c(size, 0.0f);
  for (size_t i = 0; i < size; ++i) {
    a[i] = static_cast<float>(i % 7) * 0.25f;
    b[i] = static_cast<float>(i % 5) * 0.5f;
  }
  constexpr double kFlops = 2.0 * kN * kN * kN;
  double best = 0;
  for (int block = 0; block < kGemmBlocks; ++block) {
    const std::chrono::duration<double> start = ThreadCpuTime();
    int gemms = 0;
    std::chrono::duration<double> took{};
    do {
      Gemm(a, b, &c);
      ++gemms;
      took = ThreadCpuTime() - start;
    } while (took < kGemmBlockTime);
    best = std::max(best, gemms * kFlops / took.count() / 1e9);
  }
  // Keeps the work observable, so that no optimiser drops it.
  volatile float sink = c[size / 2];
  (void)sink;
  return best;
}

}  // namespace ddprun::launcher
