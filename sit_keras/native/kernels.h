// What the native kernels of sit_keras share: vectors of kLanes windows, one window per lane, and the
// TensorFlow names and thread pool their ops use.
#ifndef SIT_KERAS_NATIVE_KERNELS_H_
#define SIT_KERAS_NATIVE_KERNELS_H_

#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <functional>
#include <memory>
#include <type_traits>
#include <utility>

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

// Windows per block of the ops' input layout (sit_keras.native.LANES, chosen from the same flags by
// sit_keras/native/cpu.py): one vector register of floats, 16 with AVX-512 and 8 with AVX2. Built for AVX2
// with 16, each vector took two registers and the kernels' sums spilled (docs/speed.md, "Without AVX-512,
// no kernels"). kVectorRegisters bounds the sums the kernels keep in registers side by side.
#if defined(__AVX512F__)
constexpr int kLanes = 16;
constexpr int kVectorRegisters = 32;
#elif defined(__AVX2__) && defined(__FMA__)
constexpr int kLanes = 8;
constexpr int kVectorRegisters = 16;
#else
#error "the native kernels need AVX-512 or AVX2 with FMA (sit_keras/native/cpu.py builds nothing without)"
#endif

// kLanes values of T, one per window, as one GCC vector: the compiler maps its arithmetic to the
// host's widest vector registers (one register of floats, two of doubles).
template <typename T>
struct LaneVector {
  typedef T type __attribute__((vector_size(kLanes * sizeof(T))));
};
template <typename T>
using Lanes = typename LaneVector<T>::type;

// (Floating-point T only: for bfloat16, the overloads below.)
template <typename T, typename = std::enable_if_t<std::is_floating_point_v<T>>>
inline Lanes<T> Load(const T* p) {
  Lanes<T> v;
  __builtin_memcpy(&v, p, sizeof(v));
  return v;
}

template <typename T, typename = std::enable_if_t<std::is_floating_point_v<T>>>
inline void Store(T* p, Lanes<T> v) {
  __builtin_memcpy(p, &v, sizeof(v));
}

// bfloat16 (the high half of a float's bits) is how mixed_bfloat16 stores the attention ops' large tensors
// (their qkv, outputs and gradients, and the standardised tokens): the ops read it as floats and round their
// float results to it, so that no cast passes over those tensors (docs/speed.md, "bfloat16 in, bfloat16
// out"). The arithmetic stays float.
using tensorflow::bfloat16;
typedef uint16_t HalfLanes __attribute__((vector_size(kLanes * sizeof(uint16_t))));
typedef uint32_t BitLanes __attribute__((vector_size(kLanes * sizeof(uint32_t))));

// kLanes bfloat16 values as floats: exact.
inline Lanes<float> Load(const bfloat16* p) {
  HalfLanes halves;
  __builtin_memcpy(&halves, p, sizeof(halves));
  return reinterpret_cast<Lanes<float>>(__builtin_convertvector(halves, BitLanes) << 16);
}

// Floats rounded to bfloat16 as TensorFlow's Cast rounds them (Eigen's float_to_bfloat16_rtne): to the
// nearest, ties to even, a NaN to the quiet NaN of its sign. (AVX512_BF16's conversion flushes subnormals to
// zero, which Cast does not.)
inline HalfLanes RoundToBfloat16(Lanes<float> v) {
  const BitLanes bits = reinterpret_cast<BitLanes>(v);
  const BitLanes rounded = (bits + 0x7fffu + ((bits >> 16) & 1u)) >> 16;
  const BitLanes quiet_nan = ((bits >> 16) & 0x8000u) | 0x7fc0u;
  const BitLanes is_nan = reinterpret_cast<BitLanes>(v != v);
  return __builtin_convertvector((is_nan & quiet_nan) | (~is_nan & rounded), HalfLanes);
}

inline void Store(bfloat16* p, Lanes<float> v) {
  const HalfLanes halves = RoundToBfloat16(v);
  __builtin_memcpy(p, &halves, sizeof(halves));
}

// The dtype a kernel computes values stored as S in: float for bfloat16, else S.
template <typename S>
using ComputeType = std::conditional_t<std::is_same_v<S, bfloat16>, float, S>;

// to[0, n) = from[0, n), each side float, double or bfloat16: widened exactly, or rounded as Cast rounds.
template <typename From, typename To>
inline void ConvertRun(const From* from, int64_t n, To* to) {
  if constexpr (std::is_same_v<From, To>) {
    std::copy(from, from + n, to);
  } else {
    int64_t e = 0;
    for (; e + kLanes <= n; e += kLanes) Store(to + e, Load(from + e));
    for (; e < n; ++e) to[e] = static_cast<To>(from[e]);
  }
}

// n values of T (float or double) left unset, for a buffer that is written before it is read or zeroed
// piecewise on the threads that use it: a std::vector zeroes all of it first, on the op's calling thread
// alone (the SiT's first window gradient op zeroed 14 MB so: docs/speed.md, "No zeroing on the calling
// thread").
template <typename T>
std::unique_ptr<T[]> Uninitialized(int64_t n) {
  static_assert(std::is_trivially_default_constructible_v<T>);
  return std::unique_ptr<T[]>(new T[n]);
}

// Outputs of at least this many bytes, larger than the AMD host's 32 MiB L3 cache, are written past the
// caches where an op writes them in whole aligned vectors (Streams): a normal store first reads each line
// it writes, which for an output that cannot stay in the caches is a second pass over memory
// (docs/speed.md, "Outputs past the caches").
constexpr int64_t kStreamingBytes = int64_t{32} << 20;

// Whether `size` values of S from p are written by StoreStreaming: floats or bfloat16, p 64-byte aligned.
template <typename S>
inline bool Streams(const S* p, int64_t size) {
  return (std::is_same_v<S, float> || std::is_same_v<S, bfloat16>) &&
         size * static_cast<int64_t>(sizeof(S)) >= kStreamingBytes && reinterpret_cast<uintptr_t>(p) % 64 == 0;
}

// Store(p, v) past the caches, p aligned to the kLanes values' size: a non-temporal store, no line of p
// read first; the same values as Store.
inline void StoreStreaming(float* p, Lanes<float> v) {
#if defined(__AVX512F__)
  _mm512_stream_ps(p, reinterpret_cast<__m512>(v));
#else
  _mm256_stream_ps(p, reinterpret_cast<__m256>(v));
#endif
}

inline void StoreStreaming(bfloat16* p, Lanes<float> v) {
#if defined(__AVX512F__)
  _mm256_stream_si256(reinterpret_cast<__m256i*>(p), reinterpret_cast<__m256i>(RoundToBfloat16(v)));
#else
  _mm_stream_si128(reinterpret_cast<__m128i*>(p), reinterpret_cast<__m128i>(RoundToBfloat16(v)));
#endif
}

// Orders a thread's streaming stores before what follows (the shards' end, another op's reads).
inline void StreamsDone() { _mm_sfence(); }

// Values of T in a 64-byte cache line.
template <typename T>
constexpr int64_t kLineValues = 64 / sizeof(T);

// Prefetches the cache lines of p[0, n) into the L2 cache, for reading or for writing.
template <typename T>
inline void PrefetchRun(const T* p, int64_t n, bool write) {
  for (int64_t e = 0; e < n; e += kLineValues<T>) {
    if (write) {
      __builtin_prefetch(p + e, 1, 1);
    } else {
      __builtin_prefetch(p + e, 0, 1);
    }
  }
}

// The integer type of T's size: the index vectors of a shuffle of Lanes<T>.
template <typename T>
struct IndexOf;
template <>
struct IndexOf<float> {
  using type = int32_t;
};
template <>
struct IndexOf<double> {
  using type = int64_t;
};

// A kLanes x kLanes tile of lane vectors transposed in registers: at each scale h = kLanes / 2, ..., 1
// the off-diagonal h x h blocks of every 2h x 2h block trade places, which after all scales is the
// transpose (a pure permutation of the values). Each scale's shuffle indices are constants (one lane
// index c of the sequence each): with indices known only at run time, AVX2, which has no two-vector
// permute, had each shuffle built and blended lane by lane, and a tile loaded, transposed and stored took
// 277 instructions where it takes 57 (GCC 12 on an AVX2 host; docs/speed.md, "Constant shuffles").
template <typename T, int h, int... c>
inline void TransposeScale(Lanes<T>* rows, std::integer_sequence<int, c...> lanes) {
  using Index = Lanes<typename IndexOf<T>::type>;
  constexpr Index low = {((c & h) ? kLanes + c - h : c)...};
  constexpr Index high = {((c & h) ? kLanes + c : c + h)...};
  for (int r = 0; r < kLanes; ++r) {
    if (r & h) continue;
    const Lanes<T> a = rows[r], b = rows[r + h];
    rows[r] = __builtin_shuffle(a, b, low);
    rows[r + h] = __builtin_shuffle(a, b, high);
  }
  if constexpr (h > 1) TransposeScale<T, h / 2>(rows, lanes);
}

template <typename T>
inline void Transpose(Lanes<T>* rows) {
  TransposeScale<T, kLanes / 2>(rows, std::make_integer_sequence<int, kLanes>{});
}

// Bytes of the widest vector register: a Lanes<T> that fits one is transposed in registers (Transpose's
// shuffles are then one instruction each); a wider one (double), which the compiler would shuffle value
// by value, through a tile in the cache.
constexpr int kRegisterBytes = kLanes * sizeof(float);

template <typename T>
constexpr bool kTransposeInRegisters = sizeof(Lanes<T>) <= kRegisterBytes;

// dst[e dst_stride + l] = src[l src_stride + e] for e < n and l < kLanes, zero in the lanes from `rows` on:
// kLanes rows of n values into lanes, a kLanes x kLanes tile at a time, so that memory is read and written
// in whole vectors, not a value a cache line. src may hold bfloat16 (S), read as T = float.
template <typename S, typename T>
void RowsToLanes(const S* src, int64_t src_stride, int64_t n, int rows, T* dst, int64_t dst_stride) {
  Lanes<T> tile[kLanes];
  int64_t e0 = 0;
  for (; e0 + kLanes <= n; e0 += kLanes) {
    if constexpr (kTransposeInRegisters<T>) {
      for (int l = 0; l < kLanes; ++l) tile[l] = l < rows ? Load(src + l * src_stride + e0) : Lanes<T>{};
      Transpose<T>(tile);
    } else {
      T values[kLanes * kLanes];
      for (int l = 0; l < kLanes; ++l) {
        for (int k = 0; k < kLanes; ++k) {
          values[k * kLanes + l] = l < rows ? static_cast<T>(src[l * src_stride + e0 + k]) : T(0);
        }
      }
      for (int k = 0; k < kLanes; ++k) tile[k] = Load(values + k * kLanes);
    }
    for (int k = 0; k < kLanes; ++k) Store(dst + (e0 + k) * dst_stride, tile[k]);
  }
  for (; e0 < n; ++e0) {  // the last n % kLanes values
    Lanes<T> v = {};
    for (int l = 0; l < rows; ++l) v[l] = static_cast<T>(src[l * src_stride + e0]);
    Store(dst + e0 * dst_stride, v);
  }
}

// The inverse: dst[l dst_stride + e] = src[e src_stride + l] for e < n and the lanes l < rows, dst in S;
// plus add[l dst_stride + e] (laid out as dst) in the lanes l < add_rows, before a bfloat16 dst is rounded.
template <typename T, typename S>
void LanesToRows(const T* src, int64_t src_stride, int64_t n, int rows, S* dst, int64_t dst_stride,
                 const S* add = nullptr, int add_rows = 0) {
  Lanes<T> tile[kLanes];
  int64_t e0 = 0;
  for (; e0 + kLanes <= n; e0 += kLanes) {
    for (int k = 0; k < kLanes; ++k) tile[k] = Load(src + (e0 + k) * src_stride);
    if constexpr (kTransposeInRegisters<T>) {
      Transpose<T>(tile);
      for (int l = 0; l < rows; ++l) {
        const Lanes<T> v = l < add_rows ? tile[l] + Load(add + l * dst_stride + e0) : tile[l];
        Store(dst + l * dst_stride + e0, v);
      }
    } else {
      T values[kLanes * kLanes];
      for (int k = 0; k < kLanes; ++k) Store(values + k * kLanes, tile[k]);
      for (int l = 0; l < rows; ++l) {
        for (int k = 0; k < kLanes; ++k) {
          const int64_t at = l * dst_stride + e0 + k;
          const T v = values[k * kLanes + l];
          dst[at] = static_cast<S>(l < add_rows ? v + static_cast<T>(add[at]) : v);
        }
      }
    }
  }
  for (; e0 < n; ++e0) {
    const Lanes<T> v = Load(src + e0 * src_stride);
    for (int l = 0; l < rows; ++l) {
      const int64_t at = l * dst_stride + e0;
      dst[at] = static_cast<S>(l < add_rows ? v[l] + static_cast<T>(add[at]) : v[l]);
    }
  }
}

// work(start, limit) over [0, units) on TensorFlow's CPU threads, `cost` an estimate of a unit's operations.
inline void RunShards(OpKernelContext* context, int64_t units, int64_t cost,
                      const std::function<void(int64_t, int64_t)>& work) {
  auto* threads = context->device()->tensorflow_cpu_worker_threads();
  tensorflow::Shard(threads->num_threads, threads->workers, units, cost, work);
}

// A RunShards whose threads are chosen by the caller: an op's TensorFlow thread pool (ShardsOf), or the
// pool of the XLA custom calls (xla/xla_kernels.cc), which have no OpKernelContext.
using Shards = std::function<void(int64_t units, int64_t cost, const std::function<void(int64_t, int64_t)>& work)>;

// The threads of an op's TensorFlow thread pool.
inline int64_t ThreadsOf(OpKernelContext* context) {
  return context->device()->tensorflow_cpu_worker_threads()->num_threads;
}

inline Shards ShardsOf(OpKernelContext* context) {
  return [context](int64_t units, int64_t cost, const std::function<void(int64_t, int64_t)>& work) {
    RunShards(context, units, cost, work);
  };
}

}  // namespace sit_keras

#endif  // SIT_KERAS_NATIVE_KERNELS_H_
