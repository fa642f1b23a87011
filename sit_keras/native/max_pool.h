// How SitMaxPool and SitMaxPoolGrad (max_pool.cc: what they compute) compute, shared by their TensorFlow
// kernels and their XLA custom calls (xla/xla_kernels.cc).
//
// A thread takes whole output rows. The forward pass first takes the maximum over a window's k input rows
// for the whole row at once (a loop the compiler vectorises), then over each window's k columns. The
// gradient is given y too and puts dy[b, i, j, c] on the window's first value equal to it in row-major
// order: the first maximum, where TensorFlow's MaxPoolGrad puts it, found without the index per output
// that TensorFlow's general pooling kernel (any stride and padding) writes and reads back, and without a
// branch per position (FirstEqual's bit mask: in the SiT's train step a search took 3.9x its time,
// docs/speed.md).

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

// y (B, H / k, W / k, C) from x (B, H, W, C), both stored as S: float, double, or bfloat16, whose rows are
// widened to floats in vectors first (a maximum is exact in any of them; compared as bfloat16 one by one, the
// pooling took 4.5x its float32 time).
template <typename S>
void MaxPool(const S* x_data, const PoolSizes& n, S* y_data, const Shards& shards) {
  using T = ComputeType<S>;
  constexpr bool kStoredAsComputed = std::is_same_v<S, T>;
  const int64_t covered = n.out_width * n.size * n.channels;  // the values of a row some window reads
  // A unit is an output row: (b, i) = (unit / (H / k), unit % (H / k)).
  shards(n.images * n.out_height, n.size * covered, [&](int64_t start, int64_t limit) {
    std::vector<T> rows_max(covered), widened(kStoredAsComputed ? 0 : covered);
    std::vector<T> out_row(kStoredAsComputed ? 0 : n.out_row);
    for (int64_t unit = start; unit < limit; ++unit) {
      const int64_t b = unit / n.out_height, i = unit % n.out_height;
      const S* rows = x_data + (b * n.height + i * n.size) * n.row;
      T* m = rows_max.data();
      ConvertRun(rows, covered, m);
      for (int64_t u = 1; u < n.size; ++u) {
        const T* row;
        if constexpr (kStoredAsComputed) {
          row = rows + u * n.row;
        } else {
          ConvertRun(rows + u * n.row, covered, widened.data());
          row = widened.data();
        }
        for (int64_t s = 0; s < covered; ++s) m[s] = std::max(m[s], row[s]);
      }
      T* out;
      if constexpr (kStoredAsComputed) {
        out = y_data + unit * n.out_row;
      } else {
        out = out_row.data();
      }
      for (int64_t j = 0; j < n.out_width; ++j) {
        const T* window = m + j * n.size * n.channels;
        for (int64_t c = 0; c < n.channels; ++c) {
          T best = window[c];
          for (int64_t v = 1; v < n.size; ++v) best = std::max(best, window[v * n.channels + c]);
          out[j * n.channels + c] = best;
        }
      }
      if constexpr (!kStoredAsComputed) ConvertRun(out, n.out_row, y_data + unit * n.out_row);
    }
  });
}

// Window positions a 64-bit mask holds, a bit each: a strided pooling's gradient takes at most this many; the
// unstrided one searches larger windows value by value.
constexpr int64_t kMaxStridedPoolPositions = 64;

// The first of a window's rows x columns positions (row-major, at x + (r W + q) C) whose value equals
// `maximum`, without branches on the values (the maxima's positions are random, so a search's branches were
// mispredicted): a bit per position, set where x equals it, and the lowest set bit; 0 where none is (a NaN).
template <typename T>
inline int64_t FirstEqual(const T* x, int64_t rows, int64_t columns, int64_t row_stride, int64_t channels,
                          T maximum) {
  uint64_t equal = 0;
  int e = 0;
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t q = 0; q < columns; ++q, ++e) {
      equal |= uint64_t{x[r * row_stride + q * channels] == maximum} << e;
    }
  }
  return equal == 0 ? 0 : __builtin_ctzll(equal);
}

// FirstEqual of a k x k window with any number of positions: a search that stops at the first equal value.
template <typename T>
inline int64_t FirstEqualBySearch(const T* x, int64_t k, int64_t row_stride, int64_t channels, T maximum) {
  for (int64_t e = 0; e < k * k; ++e) {
    if (x[(e / k) * row_stride + (e % k) * channels] == maximum) return e;
  }
  return 0;
}

// One output row's gradients (dx zeroed before): dy at each window's first value equal to y (the window's first
// value where none is, a NaN). K is the window's side where known when compiled (the SiT's 2: unrolled, no
// division), 0 where it is n.size.
template <int K, typename T>
inline void PlaceRow(const T* rows, const T* y, const T* dy, const PoolSizes& n, T* dx) {
  const int64_t k = K > 0 ? K : n.size;
  const bool by_mask = k * k <= kMaxStridedPoolPositions;
  for (int64_t t = 0; t < n.out_row; ++t) {
    const int64_t corner = t / n.channels * k * n.channels + t % n.channels;  // (u, v) = (0, 0)
    const int64_t e = by_mask ? FirstEqual(rows + corner, k, k, n.row, n.channels, y[t])
                              : FirstEqualBySearch(rows + corner, k, n.row, n.channels, y[t]);
    dx[corner + (e / k) * n.row + (e % k) * n.channels] = dy[t];
  }
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
      const T *y = y_data + unit * n.out_row, *dy = dy_data + unit * n.out_row;
      T* dx = dx_data + first_row * n.row;
      if (n.size == 2) {
        PlaceRow<2>(rows, y, dy, n, dx);
      } else {
        PlaceRow<0>(rows, y, dy, n, dx);
      }
    }
  });
}

// The sizes of a pooling with k x k windows, stride s and TensorFlow's "same" padding: ceil(H / s) x ceil(W / s)
// outputs, the windows starting pad_top (pad_left) rows (columns) above (left of) the image, where
// pad_top = max((out_height - 1) s + k - H, 0) / 2 (rounded down), as TensorFlow pads.
struct StridedPoolSizes {
  StridedPoolSizes(int64_t images, int64_t height, int64_t width, int64_t channels, int64_t k, int64_t stride)
      : images(images), height(height), width(width), channels(channels), size(k), stride(stride),
        out_height((height + stride - 1) / stride), out_width((width + stride - 1) / stride),
        pad_top(std::max<int64_t>((out_height - 1) * stride + k - height, 0) / 2),
        pad_left(std::max<int64_t>((out_width - 1) * stride + k - width, 0) / 2) {}
  const int64_t images, height, width, channels, size, stride, out_height, out_width, pad_top, pad_left;
};

// The op's checks, shared by its TensorFlow and XLA kernels: windows of at most kMaxStridedPoolPositions
// positions; y and dy of the pooling's output shape.
inline Status CheckStridedPoolSize(int64_t size) {
  if (size * size <= kMaxStridedPoolPositions) return Status();
  return InvalidArgument("SitStridedMaxPoolGrad expects windows of at most ", kMaxStridedPoolPositions,
                         " positions; got size ", size);
}

inline Status CheckStridedPoolGradInputs(const StridedPoolSizes& n, const TensorShape& x, const TensorShape& y,
                                         const TensorShape& dy) {
  const TensorShape out({n.images, n.out_height, n.out_width, n.channels});
  if (y == out && dy == out) return Status();
  return InvalidArgument("SitStridedMaxPoolGrad expects y and dy ", out.DebugString(), " for x ", x.DebugString(),
                         ", size ", n.size, " and stride ", n.stride, "; got ", y.DebugString(), " and ",
                         dy.DebugString());
}

// W channels of a window of 3 x 3 positions inside the image (x and dx at its corner, y and dy at its output)
// as one GCC vector each: per channel, the position of the first value equal to y (row-major; 0 where none is,
// a NaN) by selects from the last position to the first, and dy added to dx there by a select at each
// position. Each channel gets the same sum as FirstEqual's one channel at a time, without a branch or a
// gather: the channels of a position are consecutive.
template <typename T, int W>
inline void PlaceWindowChannels(const T* x, const T* y, const T* dy, int64_t row_stride, int64_t channels,
                                T* dx) {
  typedef T Values __attribute__((vector_size(W * sizeof(T))));
  typedef typename IndexOf<T>::type Places __attribute__((vector_size(W * sizeof(T))));
  const auto load = [](const T* p) {
    Values v;
    __builtin_memcpy(&v, p, sizeof(v));
    return v;
  };
  const Values maximum = load(y), gradient = load(dy);
  int64_t at[9];
  for (int e = 0; e < 9; ++e) at[e] = (e / 3) * row_stride + (e % 3) * channels;
  Places place = {};
  for (int e = 8; e >= 0; --e) place = load(x + at[e]) == maximum ? Places{} + e : place;
  for (int e = 0; e < 9; ++e) {
    const Values before = load(dx + at[e]);
    const Values after = place == e ? before + gradient : before;
    __builtin_memcpy(dx + at[e], &after, sizeof(after));
  }
}

// All channels of a 3 x 3 window inside the image: 16, 8, 4 channels at a time, then one by one.
template <typename T>
inline void PlaceWindow(const T* x, const T* y, const T* dy, int64_t row_stride, int64_t channels, T* dx) {
  int64_t c = 0;
  for (; c + 16 <= channels; c += 16) PlaceWindowChannels<T, 16>(x + c, y + c, dy + c, row_stride, channels, dx + c);
  for (; c + 8 <= channels; c += 8) PlaceWindowChannels<T, 8>(x + c, y + c, dy + c, row_stride, channels, dx + c);
  for (; c + 4 <= channels; c += 4) PlaceWindowChannels<T, 4>(x + c, y + c, dy + c, row_stride, channels, dx + c);
  for (; c < channels; ++c) PlaceWindowChannels<T, 1>(x + c, y + c, dy + c, row_stride, channels, dx + c);
}

// dx (B, H, W, C) from x, y and dy (B, ceil(H / s), ceil(W / s), C) of a pooling with overlapping windows
// (s < k, k k <= kMaxStridedPoolPositions): each dy value is added at its window's first value equal to y in
// row-major order among those inside the image (the window's first value where none is equal: a NaN). A
// thread takes whole images, so the sums where windows overlap are formed in one fixed order.
template <typename T>
void StridedMaxPoolGrad(const T* x_data, const T* y_data, const T* dy_data, const StridedPoolSizes& n,
                        T* dx_data, const Shards& shards) {
  const int64_t image = n.height * n.width * n.channels, out_image = n.out_height * n.out_width * n.channels;
  const int64_t row_stride = n.width * n.channels;
  shards(n.images, 4 * n.size * n.size * out_image, [&](int64_t start, int64_t limit) {
    for (int64_t b = start; b < limit; ++b) {
      const T* x = x_data + b * image;
      T* dx = dx_data + b * image;
      std::fill(dx, dx + image, T(0));
      for (int64_t i = 0; i < n.out_height; ++i) {
        const int64_t top = i * n.stride - n.pad_top;
        const int64_t row_first = std::max<int64_t>(top, 0), rows = std::min(top + n.size, n.height) - row_first;
        for (int64_t j = 0; j < n.out_width; ++j) {
          const int64_t left = j * n.stride - n.pad_left;
          const int64_t col_first = std::max<int64_t>(left, 0);
          const int64_t columns = std::min(left + n.size, n.width) - col_first;
          const int64_t corner = row_first * row_stride + col_first * n.channels;
          const int64_t out = b * out_image + (i * n.out_width + j) * n.channels;
          if (rows == 3 && columns == 3) {  // the IMPALA-CNN's windows away from the border
            PlaceWindow(x + corner, y_data + out, dy_data + out, row_stride, n.channels, dx + corner);
            continue;
          }
          for (int64_t c = 0; c < n.channels; ++c) {
            const int64_t e = FirstEqual(x + corner + c, rows, columns, row_stride, n.channels, y_data[out + c]);
            dx[corner + (e / columns) * row_stride + (e % columns) * n.channels + c] += dy_data[out + c];
          }
        }
      }
    }
  });
}

}  // namespace sit_keras

#endif  // SIT_KERAS_NATIVE_MAX_POOL_H_
