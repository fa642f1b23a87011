// How SitDepthwiseConv and SitDepthwiseConvKernelGrad (depthwise_stem.cc: what they compute) compute,
// shared by their TensorFlow kernels and their XLA custom calls (xla/xla_kernels.cc).
//
// An image row of W pixels is W C contiguous values, and along it the kernel's value for channel c repeats
// with period C; so each row is convolved as k x k multiply-adds of whole runs of values (one per tap,
// the input run shifted by (j - r) C values, its ends cut where the tap reads outside the image) against
// the tap's kernel values laid out along the run ("taps": kernel[i, j, s mod C] at s). The loops run over
// W C values, not over C = 3 channels, and the compiler vectorises them. TensorFlow's CPU kernels copy each
// window of the input into a buffer first, which on 3 channels costs more than the arithmetic.
// The kernel gradient's sums over the rows are kept per unit of a fixed partition of the B H rows, and the
// units' sums added in a fixed order: the same bits on every run, whatever the threads.

#ifndef SIT_KERAS_NATIVE_DEPTHWISE_STEM_H_
#define SIT_KERAS_NATIVE_DEPTHWISE_STEM_H_

#include <algorithm>
#include <vector>

#include "kernels.h"

namespace sit_keras {

// Values of a row laid out for the taps at most: a multiple of C near 256 (the whole row when shorter), so
// that the taps (k k of them) and a unit's kernel-gradient sums stay in the L1 cache whatever W.
constexpr int64_t kRunValues = 256;
// Units of the kernel gradient's fixed partition of the rows (fewer for fewer rows): the threads' work.
constexpr int64_t kGradientUnits = 32;

struct ConvSizes {
  ConvSizes(int64_t images, int64_t height, int64_t width, int64_t channels, int64_t side)
      : images(images), height(height), width(width), channels(channels), side(side), radius(side / 2),
        row(width * channels), rows(images * height),
        run(channels == 0 ? 0 : std::min(row, channels * std::max<int64_t>(1, kRunValues / channels))) {}
  const int64_t images, height, width, channels, side, radius, row, rows, run;
  bool empty() const { return rows == 0 || row == 0; }
};

// taps[(i k + j) run + s] = kernel[i, j, s mod C] for s < run.
template <typename T>
std::vector<T> Taps(const T* kernel, const ConvSizes& n) {
  const int64_t taps_count = n.side * n.side;
  std::vector<T> taps(taps_count * n.run);
  for (int64_t tap = 0; tap < taps_count; ++tap) {
    for (int64_t s = 0; s < n.run; ++s) taps[tap * n.run + s] = kernel[tap * n.channels + s % n.channels];
  }
  return taps;
}

// out[t] += a[t] b[t], t < n, in T (a and b may be stored as bfloat16): the one loop of the ops, vectorised
// by the compiler.
template <typename T, typename A, typename B>
inline void MultiplyAdd(T* __restrict out, const A* __restrict a, const B* __restrict b, int64_t n) {
  for (int64_t t = 0; t < n; ++t) out[t] += static_cast<T>(a[t]) * static_cast<T>(b[t]);
}

// Calls tap(i, j, first, last, start) for each tap (i, j) and each part [first, last) of the output row h
// (values t of the row) whose input row h + i - r and values t + (j - r) C lie inside the image; start is
// the first value of the part's run of `run` values, so the tap's value for t is taps[... + t - start].
template <typename Tap>
inline void ForEachTap(const ConvSizes& n, int64_t h, Tap tap) {
  for (int64_t i = 0; i < n.side; ++i) {
    const int64_t source = h + i - n.radius;
    if (source < 0 || source >= n.height) continue;
    for (int64_t j = 0; j < n.side; ++j) {
      const int64_t shift = (j - n.radius) * n.channels;
      const int64_t low = std::max<int64_t>(0, -shift), high = std::min(n.row, n.row - shift);
      for (int64_t start = 0; start < n.row; start += n.run) {
        const int64_t first = std::max(low, start), last = std::min(high, start + n.run);
        if (first < last) tap(i, j, first, last, start);
      }
    }
  }
}

// Row h of the convolution of the image `in` (H rows of W C values, stored as S) with the taps, written to out.
template <typename T, typename S>
void ConvolveRow(const ConvSizes& n, const S* in, int64_t h, const T* taps, T* out) {
  std::fill(out, out + n.row, T(0));
  ForEachTap(n, h, [&](int64_t i, int64_t j, int64_t first, int64_t last, int64_t start) {
    const S* source = in + (h + i - n.radius) * n.row + (j - n.radius) * n.channels;
    MultiplyAdd(out + first, taps + (i * n.side + j) * n.run + first - start, source + first, last - first);
  });
}

// y (B, H, W, C): x (B, H, W, C) convolved with the kernel (k, k, C), then the bias (C) added; x and y stored
// as S (T, or bfloat16 for T = float: each row is summed in T and rounded once, with its bias).
template <typename T, typename S>
void DepthwiseConv(const S* x_data, const T* kernel_data, const T* bias_data, const ConvSizes& n, S* y_data,
                   const Shards& shards) {
  if (n.empty()) return;
  const std::vector<T> taps = Taps(kernel_data, n);
  std::vector<T> bias_row(n.row);  // bias[s mod C] along a row
  for (int64_t s = 0; s < n.row; ++s) bias_row[s] = bias_data[s % n.channels];
  // A unit is a row of the output: (b, h) = (unit / H, unit % H).
  shards(n.rows, 2 * n.side * n.side * n.row, [&](int64_t start, int64_t limit) {
    std::vector<T> row(std::is_same_v<T, S> ? 0 : n.row);
    for (int64_t unit = start; unit < limit; ++unit) {
      const int64_t b = unit / n.height, h = unit % n.height;
      T* out;
      if constexpr (std::is_same_v<T, S>) {
        out = y_data + unit * n.row;
      } else {
        out = row.data();
      }
      ConvolveRow(n, x_data + b * n.height * n.row, h, taps.data(), out);
      // Added after the taps, as `conv + bias` would.
      for (int64_t t = 0; t < n.row; ++t) out[t] += bias_row[t];
      if constexpr (!std::is_same_v<T, S>) ConvertRun(row.data(), n.row, y_data + unit * n.row);
    }
  });
}

// dkernel (k, k, C) and dbias (C) from dy and x (B, H, W, C), both stored as S.
template <typename T, typename S>
void DepthwiseConvKernelGrad(const S* dy_data, const S* x_data, const ConvSizes& n, T* dkernel_data,
                             T* dbias_data, const Shards& shards) {
  const int64_t k = n.side;
  std::fill(dkernel_data, dkernel_data + k * k * n.channels, T(0));
  std::fill(dbias_data, dbias_data + n.channels, T(0));
  if (n.empty()) return;
  // Unit u sums rows [u rows / units, (u + 1) rows / units) into its own taps-shaped sums: sums[u][(i k + j)
  // run + s] holds dy[t] x[t + (j - r) C] of its rows' values t = start + s of every run, and the last
  // run-long block, sums[u][k k run + s], holds dy[t] alone (the bias's).
  const int64_t units = std::min(n.rows, kGradientUnits), unit_values = (k * k + 1) * n.run;
  std::vector<T> sums(units * unit_values, T(0));
  const int64_t cost = 2 * (k * k + 1) * n.row * (n.rows / units + 1);
  shards(units, cost, [&](int64_t start, int64_t limit) {
    for (int64_t u = start; u < limit; ++u) {
      T* unit_sums = sums.data() + u * unit_values;
      T* bias_sums = unit_sums + k * k * n.run;
      for (int64_t row = u * n.rows / units; row < (u + 1) * n.rows / units; ++row) {
        const int64_t b = row / n.height, h = row % n.height;
        const S* image = x_data + b * n.height * n.row;
        const S* g = dy_data + row * n.row;
        ForEachTap(n, h, [&](int64_t i, int64_t j, int64_t first, int64_t last, int64_t start) {
          const S* source = image + (h + i - n.radius) * n.row + (j - n.radius) * n.channels;
          MultiplyAdd(unit_sums + (i * k + j) * n.run + first - start, g + first, source + first, last - first);
        });
        for (int64_t start = 0; start < n.row; start += n.run) {
          const int64_t count = std::min(n.run, n.row - start);
          for (int64_t s = 0; s < count; ++s) bias_sums[s] += static_cast<T>(g[start + s]);
        }
      }
    }
  });
  // dkernel[i, j, c] and dbias[c]: the units' sums at s = c mod C, unit by unit, run value by run value.
  for (int64_t u = 0; u < units; ++u) {
    for (int64_t tap = 0; tap <= k * k; ++tap) {
      const T* unit_sums = sums.data() + u * unit_values + tap * n.run;
      T* out = tap < k * k ? dkernel_data + tap * n.channels : dbias_data;
      for (int64_t s = 0; s < n.run; ++s) out[s % n.channels] += unit_sums[s];
    }
  }
}

}  // namespace sit_keras

#endif  // SIT_KERAS_NATIVE_DEPTHWISE_STEM_H_
