// What the native kernels of sit_keras share: vectors of kLanes windows, one window per lane, and the
// TensorFlow names and thread pool their ops use.
#ifndef SIT_KERAS_NATIVE_KERNELS_H_
#define SIT_KERAS_NATIVE_KERNELS_H_

#include <cstdint>
#include <functional>

#include "tensorflow/core/framework/op.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/shape_inference.h"
#include "tensorflow/core/util/work_sharder.h"

namespace sit_keras {

using tensorflow::DEVICE_CPU;
using tensorflow::OpKernel;
using tensorflow::OpKernelConstruction;
using tensorflow::OpKernelContext;
using tensorflow::Status;
using tensorflow::Tensor;
using tensorflow::TensorShape;
using tensorflow::errors::InvalidArgument;
using tensorflow::shape_inference::DimensionHandle;
using tensorflow::shape_inference::InferenceContext;
using tensorflow::shape_inference::ShapeHandle;

// Windows per block of the ops' input layout (sit_keras.native.LANES).
constexpr int kLanes = 16;

// kLanes values of T, one per window, as one GCC vector: the compiler maps its arithmetic to the
// host's widest vector registers (one AVX-512 register of floats, two AVX2 ones, ...).
template <typename T>
struct LaneVector {
  typedef T type __attribute__((vector_size(kLanes * sizeof(T))));
};
template <typename T>
using Lanes = typename LaneVector<T>::type;

template <typename T>
inline Lanes<T> Load(const T* p) {
  Lanes<T> v;
  __builtin_memcpy(&v, p, sizeof(v));
  return v;
}

template <typename T>
inline void Store(T* p, Lanes<T> v) {
  __builtin_memcpy(p, &v, sizeof(v));
}

// work(start, limit) over [0, units) on TensorFlow's CPU threads, `cost` an estimate of a unit's operations.
inline void RunShards(OpKernelContext* context, int64_t units, int64_t cost,
                      const std::function<void(int64_t, int64_t)>& work) {
  auto* threads = context->device()->tensorflow_cpu_worker_threads();
  tensorflow::Shard(threads->num_threads, threads->workers, units, cost, work);
}

}  // namespace sit_keras

#endif  // SIT_KERAS_NATIVE_KERNELS_H_
