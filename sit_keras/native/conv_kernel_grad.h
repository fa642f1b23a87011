// How SitConv2DKernelGrad (conv_kernel_grad.cc: what it computes) computes, shared by its TensorFlow kernel
// and its XLA custom call (xla/xla_kernels.cc).
//
// With r = k / 2 and j' = k - 1 - j, the gradient's sum over an image row's pixels w becomes one over the
// input's pixels p = w + j - r:
//   dkernel[i, j, c, o] = sum_p x[b, h + i - r, p, c] dy[b, h, p - r + j', o],
// and for one p the k C_out values dy[b, h, p - r + j', o] (j' < k, o < C_out) are consecutive in the row of
// dy padded by r zero pixels at each end. So a row adds, per tap row i and input channel c, the scalar
// x[..., p, c] times that run of k C_out values to k C_out sums, p by p: the sums of up to 8 input channels
// stay in vector registers over a block of rows, and each vector of the run, loaded once, serves them all.
// Under XLA the gradient was a oneDNN call that took 9x as long as TensorFlow's own op on the IMPALA-CNN's
// first convolution (docs/speed.md, "Where XLA loses the IMPALA-CNN's step").
// The sums over rows are kept per unit of a fixed partition of the B H rows and the units' sums added in a
// fixed order: the same bits on every run, whatever the threads.

#ifndef SIT_KERAS_NATIVE_CONV_KERNEL_GRAD_H_
#define SIT_KERAS_NATIVE_CONV_KERNEL_GRAD_H_

#include <algorithm>
#include <type_traits>
#include <vector>

#include "kernels.h"

namespace sit_keras {

// Units of the fixed partition of the rows (fewer for fewer rows): the threads' work.
constexpr int64_t kConvGradientUnits = 32;
// Vectors of sums a block's loop keeps in registers at most; longer runs take several passes over its rows.
constexpr int64_t kConvSumVectors = 8;
// Bytes of a block of padded dy rows at most: a part of the L1 cache (32-48 KB a core here).
constexpr int64_t kConvBlockBytes = 16 * 1024;

struct DenseConvSizes {
  DenseConvSizes(int64_t images, int64_t height, int64_t width, int64_t in_channels, int64_t out_channels,
                 int64_t side)
      : images(images), height(height), width(width), in_channels(in_channels), out_channels(out_channels),
        side(side), radius(side / 2), rows(images * height), run(side * out_channels),
        run_vectors((run + kLanes - 1) / kLanes) {}
  const int64_t images, height, width, in_channels, out_channels, side, radius, rows, run, run_vectors;
  bool empty() const { return rows == 0 || width == 0 || in_channels == 0 || out_channels == 0; }
};

// The op's checks, shared by its TensorFlow and XLA kernels: an odd size; dy and x of the same B, H and W.
inline Status CheckConv2DKernelGradSize(int64_t size) {
  if (size % 2 == 1) return Status();
  return InvalidArgument("SitConv2DKernelGrad expects an odd size; got ", size);
}

inline Status CheckConv2DKernelGradInputs(const TensorShape& dy, const TensorShape& x) {
  const bool fits = dy.dims() == 4 && x.dims() == 4 && dy.dim_size(0) == x.dim_size(0) &&
                    dy.dim_size(1) == x.dim_size(1) && dy.dim_size(2) == x.dim_size(2);
  if (fits) return Status();
  return InvalidArgument("SitConv2DKernelGrad expects dy (B, H, W, C_out) and x (B, H, W, C_in); got ",
                         dy.DebugString(), " and ", x.DebugString());
}

// Input channels whose sums a pass keeps in registers side by side, V vectors each, with room for the V
// vectors of dy it loads (a Lanes<double> takes two registers): 8, 4, 2 or 1.
template <typename T, int V>
constexpr int kSumChannels = [] {
  constexpr int registers = sizeof(T) / sizeof(float);
  for (int channels : {8, 4, 2}) {
    if ((channels + 1) * V * registers <= kVectorRegisters - 2) return channels;
  }
  return 1;
}();

// sums[c stride + v kLanes ...] += x[p C_in + c] padded[p C_out + v kLanes ...] over p < W of each of a
// block's rows whose tap row i is inside the image, for C input channels and V vectors of sums, which stay
// in registers over the block's rows. A pixel's V vectors of dy are loaded once for the C channels: one
// channel at a time, each multiply-add needed a load of its own and the loads, not the FMA units, set the
// rate (2.6 ms against TensorFlow's 1.8 in a graph for the MiniGrid CNN's 16 x 32 channels at 14x14).
template <typename T, int V, int C>
inline void AddBlock(const DenseConvSizes& n, int64_t first_row, int64_t last_row, int64_t i, const T* x_data,
                     const T* padded, int64_t padded_row, T* sums, int64_t stride) {
  // U sets of sums, for the pixels p = U q + u, so that at least 8 multiply-adds in a row are independent
  // of each other: with one set of one vector, each waited for the one before (a chain of W values a row).
  constexpr int U = C * V >= 8 ? 1 : (C * V >= 4 ? 2 : 4);
  Lanes<T> acc[U][C][V];
  for (int u = 0; u < U; ++u) {
    for (int c = 0; c < C; ++c) {
      for (int v = 0; v < V; ++v) acc[u][c][v] = Lanes<T>{};
    }
  }
  const auto add_pixel = [&](Lanes<T>(&sets)[C][V], const T* x, const T* run) {
    Lanes<T> dy[V];
    for (int v = 0; v < V; ++v) dy[v] = Load(run + v * kLanes);
    for (int c = 0; c < C; ++c) {
      const T value = x[c];
      for (int v = 0; v < V; ++v) sets[c][v] += value * dy[v];
    }
  };
  for (int64_t row = first_row; row < last_row; ++row) {
    const int64_t b = row / n.height, source = row % n.height + i - n.radius;
    if (source < 0 || source >= n.height) continue;
    const T* x = x_data + (b * n.height + source) * n.width * n.in_channels;
    const T* runs = padded + (row - first_row) * padded_row;
    int64_t p = 0;
    for (; p + U <= n.width; p += U) {
      for (int u = 0; u < U; ++u) add_pixel(acc[u], x + (p + u) * n.in_channels, runs + (p + u) * n.out_channels);
    }
    for (; p < n.width; ++p) add_pixel(acc[0], x + p * n.in_channels, runs + p * n.out_channels);
  }
  for (int c = 0; c < C; ++c) {
    for (int v = 0; v < V; ++v) {
      Lanes<T> total = acc[0][c][v];
      for (int u = 1; u < U; ++u) total += acc[u][c][v];
      T* s = sums + c * stride + v * kLanes;
      Store(s, Load(s) + total);
    }
  }
}

// AddBlock for V vectors and as many of the `channels` input channels left as a pass takes (8, 4, 2 or 1,
// at most kSumChannels); returns how many it took.
template <typename T, int V>
inline int64_t AddChannels(int64_t channels, const DenseConvSizes& n, int64_t first_row, int64_t last_row,
                           int64_t i, const T* x_data, const T* padded, int64_t padded_row, T* sums,
                           int64_t stride) {
  constexpr int kMax = kSumChannels<T, V>;
  const auto add = [&](auto taken) -> int64_t {
    AddBlock<T, V, decltype(taken)::value>(n, first_row, last_row, i, x_data, padded, padded_row, sums, stride);
    return decltype(taken)::value;
  };
  if constexpr (kMax >= 8) {
    if (channels >= 8) return add(std::integral_constant<int, 8>{});
  }
  if constexpr (kMax >= 4) {
    if (channels >= 4) return add(std::integral_constant<int, 4>{});
  }
  if constexpr (kMax >= 2) {
    if (channels >= 2) return add(std::integral_constant<int, 2>{});
  }
  return add(std::integral_constant<int, 1>{});
}

template <typename T>
inline int64_t AddRows(int64_t vectors, int64_t channels, const DenseConvSizes& n, int64_t first_row,
                       int64_t last_row, int64_t i, const T* x_data, const T* padded, int64_t padded_row, T* sums,
                       int64_t stride) {
  switch (vectors) {
#define SIT_ADD_CHANNELS(V) \
  case V:                  \
    return AddChannels<T, V>(channels, n, first_row, last_row, i, x_data, padded, padded_row, sums, stride);
    SIT_ADD_CHANNELS(1)
    SIT_ADD_CHANNELS(2)
    SIT_ADD_CHANNELS(3)
    SIT_ADD_CHANNELS(4)
    SIT_ADD_CHANNELS(5)
    SIT_ADD_CHANNELS(6)
    SIT_ADD_CHANNELS(7)
    SIT_ADD_CHANNELS(8)
#undef SIT_ADD_CHANNELS
  }
  return channels;  // unreachable: 1 <= vectors <= kConvSumVectors
}

// dkernel (k, k, C_in, C_out) from dy (B, H, W, C_out) and x (B, H, W, C_in).
template <typename T>
void Conv2DKernelGrad(const T* dy_data, const T* x_data, const DenseConvSizes& n, T* dkernel_data,
                      const Shards& shards) {
  const int64_t k = n.side, c_in = n.in_channels, c_out = n.out_channels;
  std::fill(dkernel_data, dkernel_data + k * k * c_in * c_out, T(0));
  if (n.empty()) return;
  // Unit u's sums: sums[u][(i C_in + c) S + j' C_out + o], S = run_vectors kLanes (lanes past k C_out unused).
  const int64_t stride = n.run_vectors * kLanes, units = std::min(n.rows, kConvGradientUnits);
  const int64_t unit_values = k * c_in * stride;
  std::vector<T> sums(units * unit_values, T(0));
  // Rows of dy, each padded by r zero pixels at each end; a vector's values past the last one.
  const int64_t padded_row = (n.width + 2 * n.radius) * c_out;
  const int64_t unit_rows = (n.rows + units - 1) / units;
  // A unit's rows go in blocks whose padded dy fits the L1 cache (kConvBlockBytes): the passes over a block
  // (per tap row, input channels up to 8 at a time) read it there, each keeping its sums in registers.
  const int64_t block_rows = std::max<int64_t>(1, kConvBlockBytes / (padded_row * int64_t(sizeof(T))));
  shards(units, 2 * k * c_in * n.width * stride * unit_rows, [&](int64_t start, int64_t limit) {
    std::vector<T> padded(std::min(block_rows, unit_rows) * padded_row + stride, T(0));
    for (int64_t u = start; u < limit; ++u) {
      const int64_t unit_last = (u + 1) * n.rows / units;
      T* unit_sums = sums.data() + u * unit_values;
      for (int64_t first_row = u * n.rows / units; first_row < unit_last; first_row += block_rows) {
        const int64_t last_row = std::min(unit_last, first_row + block_rows);
        for (int64_t row = first_row; row < last_row; ++row) {
          const T* g = dy_data + row * n.width * c_out;
          std::copy(g, g + n.width * c_out, padded.data() + (row - first_row) * padded_row + n.radius * c_out);
        }
        for (int64_t i = 0; i < k; ++i) {
          for (int64_t v0 = 0; v0 < n.run_vectors; v0 += kConvSumVectors) {
            const int64_t vectors = std::min(kConvSumVectors, n.run_vectors - v0);
            for (int64_t c = 0; c < c_in;) {
              T* s = unit_sums + (i * c_in + c) * stride + v0 * kLanes;
              c += AddRows(vectors, c_in - c, n, first_row, last_row, i, x_data + c, padded.data() + v0 * kLanes,
                           padded_row, s, stride);
            }
          }
        }
      }
    }
  });
  // dkernel[i, j, c, o]: the units' sums at j' = k - 1 - j, unit by unit.
  for (int64_t u = 0; u < units; ++u) {
    for (int64_t i = 0; i < k; ++i) {
      for (int64_t c = 0; c < c_in; ++c) {
        const T* s = sums.data() + u * unit_values + (i * c_in + c) * stride;
        for (int64_t j = 0; j < k; ++j) {
          T* d = dkernel_data + ((i * k + j) * c_in + c) * c_out;
          for (int64_t o = 0; o < c_out; ++o) d[o] += s[(k - 1 - j) * c_out + o];
        }
      }
    }
  }
}

}  // namespace sit_keras

#endif  // SIT_KERAS_NATIVE_CONV_KERNEL_GRAD_H_
