// Vectors of kLanes windows, one window per lane, shared by the native kernels of sit_keras.
#ifndef SIT_KERAS_NATIVE_LANES_H_
#define SIT_KERAS_NATIVE_LANES_H_

namespace sit_keras {

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

}  // namespace sit_keras

#endif  // SIT_KERAS_NATIVE_LANES_H_
