// Device: where a tensor's storage lives. CPU is always available; CUDA is present when the
// library was built with PAC_CUDA and a GPU is visible at run time.
#pragma once

#include <string>

namespace pac {

enum class DeviceType { cpu, cuda };

struct Device {
  DeviceType type = DeviceType::cpu;
  int index = 0;

  static Device cpu() { return {DeviceType::cpu, 0}; }
  static Device cuda(int index = 0) { return {DeviceType::cuda, index}; }
  bool is_cpu() const { return type == DeviceType::cpu; }
  bool operator==(const Device& other) const { return type == other.type && index == other.index; }
  std::string str() const;
  // "cpu", "cuda" (GPU 0) or "cuda:N"; anything else is an error naming what is accepted.
  static Device parse(const std::string& text);
};

// True when the library was compiled with the CUDA backend.
bool cuda_compiled();
// Number of GPUs visible now: 0 when CUDA is not compiled in or no device/driver is present.
int cuda_device_count();
// Makes GPU `index` this process's device; must come before any other CUDA work. Throws in a
// build without CUDA or when there is no such GPU.
void cuda_set_device(int index);
// Waits until the GPU has finished everything queued (no-op without CUDA).
void cuda_synchronize();
// The GPU this process uses (after cuda_set_device, or 0).
int current_cuda_device();
// Whether fp32 GEMMs and convolutions may use TF32 tensor cores (off by default, so GPU results
// match the CPU's to fp32 rounding); see core/cuda/context.h.
void cuda_set_tf32(bool allow);

}  // namespace pac
