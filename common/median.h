// The median of a few figures (the checkpoint advice's saves, the preflight's nodes): the middle
// one, or the mean of the two middle ones; 0 for none.
#ifndef DDPRUN_COMMON_MEDIAN_H_
#define DDPRUN_COMMON_MEDIAN_H_

#include <algorithm>
#include <vector>

namespace ddprun {

template <typename Container>
double Median(const Container& values) {
  std::vector<double> v(values.begin(), values.end());
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 == 1 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

}  // namespace ddprun

#endif  // DDPRUN_COMMON_MEDIAN_H_
