#include "trainer/train/rng_state.h"

#include <ATen/Context.h>
#include <ATen/core/Generator.h>

#include <mutex>

namespace ddprun::trainer {
namespace {

constexpr char kCpuKey[] = "rng/cpu";
constexpr char kGpuKey[] = "rng/cuda";

at::Generator GeneratorOf(const torch::Device& device) {
  return at::globalContext().defaultGenerator(device);
}

torch::Tensor StateOf(const torch::Device& device) {
  at::Generator gen = GeneratorOf(device);
  std::lock_guard<std::mutex> lock(gen.mutex());
  return gen.get_state();
}

void SetState(const torch::Device& device, const torch::Tensor& state) {
  at::Generator gen = GeneratorOf(device);
  std::lock_guard<std::mutex> lock(gen.mutex());
  gen.set_state(state);
}

}  // namespace

RngState RngState::Capture(const torch::Device& model_device) {
  RngState s;
  s.device_ = model_device;
  s.cpu_ = StateOf(torch::kCPU);
  if (model_device.is_cuda()) s.gpu_ = StateOf(model_device);
  return s;
}

std::optional<RngState> RngState::Read(torch::serialize::InputArchive& archive,
                                       const torch::Device& model_device) {
  RngState s;
  s.device_ = model_device;
  if (!archive.try_read(kCpuKey, s.cpu_, true)) return std::nullopt;
  if (model_device.is_cuda() && !archive.try_read(kGpuKey, s.gpu_, true)) {
    s.gpu_ = torch::Tensor();
  }
  return s;
}

void RngState::Write(torch::serialize::OutputArchive& archive) const {
  archive.write(kCpuKey, cpu_, true);
  if (gpu_.defined()) archive.write(kGpuKey, gpu_, true);
}

void RngState::Restore() const {
  SetState(torch::kCPU, cpu_);
  if (gpu_.defined()) SetState(device_, gpu_);
}

torch::Device DeviceOf(const std::vector<torch::Tensor>& params) {
  return params.empty() ? torch::Device(torch::kCPU) : params.front().device();
}

}  // namespace ddprun::trainer
