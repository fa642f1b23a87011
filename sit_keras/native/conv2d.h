// How SitConv2D (conv2d.cc: what it computes) computes, shared by its TensorFlow kernel and its XLA custom
// call (xla/xla_kernels.cc).
//
// A thread takes whole output rows. For a row it copies the k input rows its taps read into a buffer, each
// padded by r = k / 2 zero pixels at both ends, so that the inner loops test no border. It then takes the
// output channels W at a time (16, 8, 4, then one by one) and the row's pixels in passes of P <= 12 (as even
// as the width allows): P vectors of W sums stay in registers while, for each tap (i, j) and input channel c,
// the kernel's W values K[i, j, c, o] are loaded once and multiplied by each pixel's input value. Each sum
// runs over (i, j, c) in that order whatever the threads: the same bits on every run. The bias is added to
// each sum as it is stored, and with relu max(., 0) taken (ConvEpilogue). Under XLA the convolution was a
// oneDNN call that created its primitive on every call (docs/speed.md, "The CNNs' convolutions in a native
// op").

#ifndef SIT_KERAS_NATIVE_CONV2D_H_
#define SIT_KERAS_NATIVE_CONV2D_H_

#include <algorithm>
#include <cstring>
#include <vector>

#include "conv_kernel_grad.h"
#include "kernels.h"

namespace sit_keras {

// The op's checks, shared by its TensorFlow and XLA kernels: x (B, H, W, C_in), a kernel (k, k, C_in, C_out)
// with k odd and a bias (C_out).
inline Status CheckConv2DInputs(const TensorShape& x, const TensorShape& kernel, const TensorShape& bias) {
  const bool fits = x.dims() == 4 && kernel.dims() == 4 && kernel.dim_size(0) == kernel.dim_size(1) &&
                    kernel.dim_size(0) % 2 == 1 && kernel.dim_size(2) == x.dim_size(3) && bias.dims() == 1 &&
                    bias.dim_size(0) == kernel.dim_size(3);
  if (fits) return Status();
  return InvalidArgument(
      "SitConv2D expects x (B, H, W, C_in), a kernel (k, k, C_in, C_out) with k odd and a bias (C_out); got ",
      x.DebugString(), ", ", kernel.DebugString(), " and ", bias.DebugString());
}

// Pixels whose sums one pass keeps in registers: P vectors of W values of T, with room left for the kernel's
// vector and the products (kVectorRegisters: 32 with AVX-512, 16 with AVX2).
template <typename T, int W>
constexpr int kConvPixels = std::min<int>(12, (kVectorRegisters - 4) / std::max<int>(1, W * sizeof(T) / (kLanes * 4)));

// The bias and activation a convolution's outputs get as they are stored: the layer's, which under XLA were
// separate passes over the (B, H, W, C_out) outputs (docs/speed.md, "The MiniGrid CNN's step under XLA").
template <typename T>
struct ConvEpilogue {
  const T* bias;  // C_out values
  bool relu;      // max(y, 0) after the bias
};

// out[p, o0 + l] (l < W) for the P pixels from p0 of a row: the sums over the taps i in [i0, i1) (rows inside
// the image), j < k and c < C_in of padded[i][(p + j) C_in + c] K[i, j, c, o0 + l], plus the bias (then
// max(., 0) with relu).
template <typename T, int W, int P>
inline void ConvPixels(const T* padded, int64_t padded_row, const T* kernel, const DenseConvSizes& n, int64_t i0,
                       int64_t i1, int64_t p0, int64_t o0, const ConvEpilogue<T>& epilogue, T* out) {
  typedef T Values __attribute__((vector_size(W * sizeof(T))));
  Values acc[P];
  for (int p = 0; p < P; ++p) acc[p] = Values{};
  const int64_t c_in = n.in_channels, c_out = n.out_channels;
  for (int64_t i = i0; i < i1; ++i) {
    for (int64_t j = 0; j < n.side; ++j) {
      const T* x = padded + i * padded_row + (p0 + j) * c_in;
      const T* k = kernel + (i * n.side + j) * c_in * c_out + o0;
      for (int64_t c = 0; c < c_in; ++c) {
        Values weights;
        std::memcpy(&weights, k + c * c_out, sizeof(weights));
        for (int p = 0; p < P; ++p) acc[p] += x[p * c_in + c] * weights;
      }
    }
  }
  Values bias;
  std::memcpy(&bias, epilogue.bias + o0, sizeof(bias));
  for (int p = 0; p < P; ++p) {
    Values y = acc[p] + bias;
    if (epilogue.relu) y = y > Values{} ? y : Values{};
    std::memcpy(out + (p0 + p) * c_out + o0, &y, sizeof(Values));
  }
}

// Output channels [o0, o0 + W) of a row, in passes of at most kConvPixels pixels, as even as the width
// allows (14 pixels as 7 + 7, not 12 + 2): a pass of few pixels waits on its chains of multiply-adds, 2
// pixels at a quarter of the FMA units' rate.
template <typename T, int W>
inline void ConvChannels(const T* padded, int64_t padded_row, const T* kernel, const DenseConvSizes& n, int64_t i0,
                         int64_t i1, int64_t o0, const ConvEpilogue<T>& epilogue, T* out) {
  constexpr int kMax = kConvPixels<T, W>;
  const int64_t passes = (n.width + kMax - 1) / kMax;
  for (int64_t pass = 0, p = 0; pass < passes; ++pass) {
    const int64_t pixels = (n.width - p) / (passes - pass);  // the rest shared evenly by the passes left
    switch (pixels) {
#define SIT_CONV_PASS(P)                                                                   \
  case P:                                                                                  \
    if constexpr (P <= kMax) ConvPixels<T, W, P>(padded, padded_row, kernel, n, i0, i1, p, o0, epilogue, out); \
    break;
      SIT_CONV_PASS(1)
      SIT_CONV_PASS(2)
      SIT_CONV_PASS(3)
      SIT_CONV_PASS(4)
      SIT_CONV_PASS(5)
      SIT_CONV_PASS(6)
      SIT_CONV_PASS(7)
      SIT_CONV_PASS(8)
      SIT_CONV_PASS(9)
      SIT_CONV_PASS(10)
      SIT_CONV_PASS(11)
      SIT_CONV_PASS(12)
#undef SIT_CONV_PASS
    }
    p += pixels;
  }
}

// out (B, H, W, C_out) = x (B, H, W, C_in) convolved with kernel (k, k, C_in, C_out): stride 1, "same"
// padding (r = k / 2 zero pixels at each side), as tf.nn.conv2d(x, kernel, 1, "SAME"); then the epilogue's
// bias and activation.
template <typename T>
void Conv2D(const T* x_data, const T* kernel, const DenseConvSizes& n, const ConvEpilogue<T>& epilogue,
            T* out_data, const Shards& shards) {
  if (n.rows == 0 || n.width == 0 || n.out_channels == 0) return;
  const int64_t c_in = n.in_channels, c_out = n.out_channels;
  if (c_in == 0) {
    for (int64_t pixel = 0; pixel < n.rows * n.width; ++pixel) {
      for (int64_t o = 0; o < c_out; ++o) {
        const T y = epilogue.bias[o];
        out_data[pixel * c_out + o] = epilogue.relu && !(y > T(0)) ? T(0) : y;
      }
    }
    return;
  }
  const int64_t padded_row = (n.width + 2 * n.radius) * c_in;
  shards(n.rows, 2 * n.width * n.side * n.side * c_in * c_out, [&](int64_t start, int64_t limit) {
    std::vector<T> padded(n.side * padded_row, T(0));  // the borders stay zero
    for (int64_t row = start; row < limit; ++row) {
      const int64_t b = row / n.height, h = row % n.height;
      // The taps i whose input row h + i - r is inside the image.
      const int64_t i0 = std::max<int64_t>(0, n.radius - h), i1 = std::min(n.side, n.height + n.radius - h);
      for (int64_t i = i0; i < i1; ++i) {
        const T* x = x_data + (b * n.height + h + i - n.radius) * n.width * c_in;
        std::copy(x, x + n.width * c_in, padded.data() + i * padded_row + n.radius * c_in);
      }
      T* out = out_data + row * n.width * c_out;
      const T* in = padded.data();
      int64_t o = 0;
      for (; o + 16 <= c_out; o += 16) ConvChannels<T, 16>(in, padded_row, kernel, n, i0, i1, o, epilogue, out);
      for (; o + 8 <= c_out; o += 8) ConvChannels<T, 8>(in, padded_row, kernel, n, i0, i1, o, epilogue, out);
      for (; o + 4 <= c_out; o += 4) ConvChannels<T, 4>(in, padded_row, kernel, n, i0, i1, o, epilogue, out);
      for (; o < c_out; ++o) ConvChannels<T, 1>(in, padded_row, kernel, n, i0, i1, o, epilogue, out);
    }
  });
}

}  // namespace sit_keras

#endif  // SIT_KERAS_NATIVE_CONV2D_H_
