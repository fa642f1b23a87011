// How SitMaxPool and SitMaxPoolGrad (max_pool.cc: what they compute) compute, shared by their TensorFlow
// kernels and their XLA custom calls (xla/xla_kernels.cc).
//
// A thread takes whole output rows. The forward pass first takes the maximum over a window's k input rows
// for the whole row at once (a loop the compiler vectorises), then over each window's k columns. The
// gradient is given y too and puts dy[b, i, j, c] on the window's first value equal to it in row-major
// order: the first maximum, where TensorFlow's MaxPoolGrad puts it, found without the index per output
// that TensorFlow's general pooling kernel (any stride and padding) writes and reads back.

#ifndef SIT_KERAS_NATIVE_MAX_POOL_H_
#define SIT_KERAS_NATIVE_MAX_POOL_H_

#include <algorithm>
#include <vector>

#include "kernels.h"

namespace sit_keras {

struct PoolSizes {
  PoolSizes(int64_t images, int64_t height, int64_t width, int64_t channels, int64_t k)
      : images(images), height(height), width(width), channels(channels), size(k), out_height(height / k),
        out_width(width / k), row(width * channels), out_row(out_width * channels) {}
  const int64_t images, height, width, channels, size, out_height, out_width, row, out_row;
};

// y (B, H / k, W / k, C) from x (B, H, W, C).
template <typename T>
void MaxPool(const T* x_data, const PoolSizes& n, T* y_data, const Shards& shards) {
  const int64_t covered = n.out_width * n.size * n.channels;  // the values of a row some window reads
  // A unit is an output row: (b, i) = (unit / (H / k), unit % (H / k)).
  shards(n.images * n.out_height, n.size * covered, [&](int64_t start, int64_t limit) {
    std::vector<T> rows_max(covered);
    for (int64_t unit = start; unit < limit; ++unit) {
      const int64_t b = unit / n.out_height, i = unit % n.out_height;
      const T* rows = x_data + (b * n.height + i * n.size) * n.row;
      T* m = rows_max.data();
      std::copy(rows, rows + covered, m);
      for (int64_t u = 1; u < n.size; ++u) {
        const T* row = rows + u * n.row;
        for (int64_t s = 0; s < covered; ++s) m[s] = std::max(m[s], row[s]);
      }
      T* out = y_data + unit * n.out_row;
      for (int64_t j = 0; j < n.out_width; ++j) {
        const T* window = m + j * n.size * n.channels;
        for (int64_t c = 0; c < n.channels; ++c) {
          T best = window[c];
          for (int64_t v = 1; v < n.size; ++v) best = std::max(best, window[v * n.channels + c]);
          out[j * n.channels + c] = best;
        }
      }
    }
  });
}

// dx (B, H, W, C) from x, y and dy (B, H / k, W / k, C).
template <typename T>
void MaxPoolGrad(const T* x_data, const T* y_data, const T* dy_data, const PoolSizes& n, T* dx_data,
                 const Shards& shards) {
  // A unit is the k input rows of an output row, and for the last output row of an image also the rows
  // under it that no window covers (H mod k): it zeroes them and places its gradients.
  const int64_t units = n.images * n.out_height;
  if (units == 0) {
    std::fill(dx_data, dx_data + n.images * n.height * n.row, T(0));
    return;
  }
  shards(units, 2 * n.size * n.size * n.out_row, [&](int64_t start, int64_t limit) {
    for (int64_t unit = start; unit < limit; ++unit) {
      const int64_t b = unit / n.out_height, i = unit % n.out_height;
      const int64_t first_row = b * n.height + i * n.size;
      const int64_t last_row = i + 1 == n.out_height ? (b + 1) * n.height : first_row + n.size;
      std::fill(dx_data + first_row * n.row, dx_data + last_row * n.row, T(0));
      const T* rows = x_data + first_row * n.row;
      T* target = dx_data + first_row * n.row;
      for (int64_t t = 0; t < n.out_row; ++t) {
        const T maximum = y_data[unit * n.out_row + t];
        const int64_t corner = t / n.channels * n.size * n.channels + t % n.channels;  // (u, v) = (0, 0)
        int64_t place = corner;  // where no value equals y (a NaN): the window's first value
        for (int64_t e = 0; e < n.size * n.size; ++e) {
          const int64_t at = corner + (e / n.size) * n.row + (e % n.size) * n.channels;
          if (rows[at] == maximum) {
            place = at;
            break;
          }
        }
        target[place] = dy_data[unit * n.out_row + t];
      }
    }
  });
}

}  // namespace sit_keras

#endif  // SIT_KERAS_NATIVE_MAX_POOL_H_
