// How SitChannelsFirstProjection and SitChannelsFirstProjectionKernelGrad (channels_first.cc: what they
// compute) compute, shared by their TensorFlow kernels and their XLA custom calls (xla/xla_kernels.cc).
//
// Both walk the long axis in column tiles of x copied to a contiguous buffer first. The rows of x lie L
// values apart, and for the SiT's L (a multiple of 1024) that is a multiple of 4 KiB: read in place, the
// rows of a tile fall into the same few sets of the L1 cache and evict each other (the kernel gradient
// reads a few rows of dy at a time, fewer than the cache's ways, in place). The copies pad the last tile
// with zeros, so the arithmetic runs on whole vectors only. On an AVX2 host the two ops took 0.58x and,
// with TensorFlow's matmul for the input's gradient, 0.77x the time of TensorFlow's matmuls
// (benchmarks/native_ops.py, docs/speed.md "The projection in a native op").
// While a thread works on one column tile it prefetches the next into the L2 cache, a slice of its lines
// before each register tile: the copies of x (and the kernel gradient's reads of dy) then wait for
// memory less: on the AVX2 host, alone, the SiT's 64 -> 192 projection's input gradient took 0.91x its
// time without; beside the other gradient op, in a graph, the gain was below the noise (docs/speed.md,
// "Prefetching in the kernels").
// The kernel gradient's sums are kept per unit of a fixed partition of the columns and the units' sums
// added in a fixed order: the same bits on every run, whatever the threads. Within a unit they are kept
// as vectors, whose lanes are added once, when the unit ends, not once a column tile.

#ifndef SIT_KERAS_NATIVE_CHANNELS_FIRST_H_
#define SIT_KERAS_NATIVE_CHANNELS_FIRST_H_

#include <algorithm>
#include <vector>

#include "kernels.h"

namespace sit_keras {

// Register tiles: a tile's sums fill the vector registers but for the vectors loaded beside them.
// Projection: kOutputRows rows of y side by side over kColumnVectors vectors of columns. With AVX-512,
// 6 x 4 rather than 4 x 6 (the same 24 sums, 10 loads a row of x either way; the column tile read 32 times
// for 192 outputs, not 48): the SiT's and SieT's train steps took 0.93-0.98x as long on an AMD host
// (docs/speed.md, "The projection's tile").
constexpr int kOutputRows = 6;
constexpr int kColumnVectors = kVectorRegisters >= 32 ? 4 : 2;
// Column tiles a thread copies at a time (512 columns): a row tile's stores then run along 2 KiB of
// each output row rather than jumping between rows every few vectors.
constexpr int64_t kProjectionTiles = 512 / (kColumnVectors * kLanes);
// Kernel gradient: kGradRows rows of x against kGradOutputs rows of dy.
constexpr int kGradRows = kVectorRegisters >= 32 ? 4 : 2;
constexpr int kGradOutputs = 6;
// Columns of x the kernel gradient copies at a time (they stay in the L2 cache; dy is read in place), and
// the units of its fixed partition of the columns (fewer for fewer columns): the threads' work.
constexpr int64_t kGradColumns = 512;
constexpr int64_t kGradUnits = 16;

// dst[r width + c] = src[r columns + first + c] for the columns first + c < columns, zero for the rest of
// the width: `rows` rows of a column tile, contiguous and zero-padded. src may hold bfloat16 (S), widened
// to floats (T) here.
template <typename S, typename T>
void CopyColumns(const S* src, int64_t rows, int64_t columns, int64_t first, int64_t width, T* dst) {
  const int64_t valid = std::min(width, columns - first);
  for (int64_t r = 0; r < rows; ++r) {
    T* to = dst + r * width;
    ConvertRun(src + r * columns + first, valid, to);
    std::fill(to + valid, to + width, T(0));
  }
}

// Prefetches part `part` of `parts` of the cache lines of src's rows [0, rows) over the columns
// [first, first + width) into the L2 cache (those past `columns` are not read).
template <typename T>
inline void PrefetchColumns(const T* src, int64_t rows, int64_t columns, int64_t first, int64_t width,
                            int64_t part, int64_t parts) {
  const int64_t per_row = (width + kLineValues<T> - 1) / kLineValues<T>, lines = rows * per_row;
  for (int64_t line = part * lines / parts; line < (part + 1) * lines / parts; ++line) {
    const int64_t column = first + (line % per_row) * kLineValues<T>;
    if (column < columns) __builtin_prefetch(src + (line / per_row) * columns + column, 0, 1);
  }
}

// packed[(t R + r) kOutputRows + i] = kernel[r, t kOutputRows + i], zero past the N columns: each output
// row tile's kernel values in the order the tile reads them, as T (floats for a bfloat16 kernel, S).
template <typename S, typename T = ComputeType<S>>
std::vector<T> PackKernel(const S* kernel, int64_t rows, int64_t outputs) {
  const int64_t tiles = (outputs + kOutputRows - 1) / kOutputRows;
  std::vector<T> packed(tiles * rows * kOutputRows, T(0));
  for (int64_t t = 0; t < tiles; ++t) {
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t i = 0; i < kOutputRows && t * kOutputRows + i < outputs; ++i) {
        packed[(t * rows + r) * kOutputRows + i] = static_cast<T>(kernel[r * outputs + t * kOutputRows + i]);
      }
    }
  }
  return packed;
}

// sums[i][v] = sum_r w[r kOutputRows + i] x[r width + v kLanes ...]: one output row tile over a column tile.
template <typename T>
inline void ProjectTile(const T* w, const T* x, int64_t rows, int64_t width,
                        Lanes<T> (&sums)[kOutputRows][kColumnVectors]) {
  for (auto& row : sums) {
    for (auto& sum : row) sum = Lanes<T>{};
  }
  for (int64_t r = 0; r < rows; ++r) {
    Lanes<T> xs[kColumnVectors];
    for (int v = 0; v < kColumnVectors; ++v) xs[v] = Load(x + r * width + v * kLanes);
    for (int i = 0; i < kOutputRows; ++i) {
      const T weight = w[r * kOutputRows + i];
      for (int v = 0; v < kColumnVectors; ++v) sums[i][v] += weight * xs[v];
    }
  }
}

// The lanes of v added in lane order.
template <typename T>
inline T LaneSum(Lanes<T> v) {
  T sum = v[0];
  for (int l = 1; l < kLanes; ++l) sum += v[l];
  return sum;
}

// sums[r outputs + n] += sum_c x[r width + c] dy[n stride + c], lane by lane, for A rows r of x from r0
// and B rows n of dy from n0, over `width` columns (a multiple of kLanes).
template <typename T, int A, int B>
inline void GradTile(const T* x, const T* dy, int64_t stride, int64_t r0, int64_t n0, int64_t width,
                     int64_t outputs, Lanes<T>* sums) {
  Lanes<T> acc[A][B] = {};
  for (int64_t c = 0; c < width; c += kLanes) {
    Lanes<T> xs[A];
    for (int a = 0; a < A; ++a) xs[a] = Load(x + (r0 + a) * width + c);
    for (int b = 0; b < B; ++b) {
      const Lanes<T> g = Load(dy + (n0 + b) * stride + c);
      for (int a = 0; a < A; ++a) acc[a][b] += xs[a] * g;
    }
  }
  for (int a = 0; a < A; ++a) {
    for (int b = 0; b < B; ++b) sums[(r0 + a) * outputs + n0 + b] += acc[a][b];
  }
}

// GradTile over every row of x (A at a time, the last ones one at a time) against B rows of dy from n0,
// whose values then stay in the L1 cache while x's pass. B rows, fewer than the cache's ways, can be read
// in place whatever their stride.
// prefetch(i) runs before the i-th register tile of kGradRows rows.
template <typename T, int B, typename Prefetch>
void GradColumns(const T* x, const T* dy, int64_t stride, int64_t rows, int64_t n0, int64_t width,
                 int64_t outputs, Lanes<T>* sums, Prefetch prefetch) {
  int64_t r0 = 0;
  for (; r0 + kGradRows <= rows; r0 += kGradRows) {
    prefetch(r0 / kGradRows);
    GradTile<T, kGradRows, B>(x, dy, stride, r0, n0, width, outputs, sums);
  }
  for (; r0 < rows; ++r0) GradTile<T, 1, B>(x, dy, stride, r0, n0, width, outputs, sums);
}

// y (N, L) = kernel (R, N)^T x (R, L), all three stored as S and computed as T: floats for bfloat16, widened
// as each column tile is copied and rounded as each output vector is stored, so no float copy of x or y is
// made in memory.
template <typename S, typename T = ComputeType<S>>
void ProjectChannelsFirst(const S* kernel_data, const S* x_data, int64_t rows, int64_t columns, int64_t outputs,
                          S* y_data, const Shards& shards) {
  if (outputs == 0 || columns == 0) return;
  if (rows == 0) {
    std::fill(y_data, y_data + outputs * columns, S(0));
    return;
  }
  const std::vector<T> packed = PackKernel(kernel_data, rows, outputs);
  constexpr int64_t width = kColumnVectors * kLanes, chunk = kProjectionTiles * width;
  const int64_t chunks = (columns + chunk - 1) / chunk;
  const int64_t row_tiles = (outputs + kOutputRows - 1) / kOutputRows;
  shards(chunks, 2 * rows * outputs * chunk, [&](int64_t start, int64_t limit) {
    std::vector<T> buffer(rows * chunk);
    Lanes<T> sums[kOutputRows][kColumnVectors];
    T values[kColumnVectors * kLanes];
    for (int64_t c = start; c < limit; ++c) {
      const int64_t first = c * chunk;
      CopyColumns(x_data, rows, columns, first, chunk, buffer.data());
      for (int64_t t = 0; t < row_tiles; ++t) {
        // A row tile's outputs over the whole chunk: kOutputRows runs of contiguous stores.
        for (int64_t tile = 0; tile < kProjectionTiles && first + tile * width < columns; ++tile) {
          const int64_t left = first + tile * width, valid = std::min(width, columns - left);
          if (c + 1 < limit) {
            PrefetchColumns(x_data, rows, columns, first + chunk, chunk, t * kProjectionTiles + tile,
                            row_tiles * kProjectionTiles);
          }
          const T* w = packed.data() + t * rows * kOutputRows;
          ProjectTile(w, buffer.data() + tile * width, rows, chunk, sums);
          for (int64_t i = 0; i < kOutputRows && t * kOutputRows + i < outputs; ++i) {
            S* target = y_data + (t * kOutputRows + i) * columns + left;
            if (valid == width) {
              for (int v = 0; v < kColumnVectors; ++v) Store(target + v * kLanes, sums[i][v]);
            } else {  // the last tile: its valid columns only
              for (int v = 0; v < kColumnVectors; ++v) Store(values + v * kLanes, sums[i][v]);
              ConvertRun(values, valid, target);
            }
          }
        }
      }
    }
  });
}

// dkernel (R, N) = x (R, L) dy (N, L)^T.
template <typename T>
void ProjectChannelsFirstKernelGrad(const T* dy_data, const T* x_data, int64_t rows, int64_t columns,
                                    int64_t outputs, T* dkernel_data, const Shards& shards) {
  const int64_t size = rows * outputs;
  std::fill(dkernel_data, dkernel_data + size, T(0));
  if (size == 0 || columns == 0) return;
  // Unit u sums the column chunks [u chunks / units, (u + 1) chunks / units) into its own (R, N) sums.
  const int64_t chunks = (columns + kGradColumns - 1) / kGradColumns, units = std::min(chunks, kGradUnits);
  std::vector<T> sums(units * size, T(0));
  const int64_t cost = 2 * size * kGradColumns * (chunks / units + 1);
  shards(units, cost, [&](int64_t start, int64_t limit) {
    std::vector<T> xs(rows * kGradColumns), last;
    if (columns % kGradColumns != 0) last.resize(outputs * kGradColumns);
    std::vector<Lanes<T>> unit_sums(size);
    for (int64_t u = start; u < limit; ++u) {
      std::fill(unit_sums.begin(), unit_sums.end(), Lanes<T>{});
      const int64_t end = (u + 1) * chunks / units;
      for (int64_t chunk = u * chunks / units; chunk < end; ++chunk) {
        const int64_t first = chunk * kGradColumns;
        CopyColumns(x_data, rows, columns, first, kGradColumns, xs.data());
        // dy in place, but for the last chunk's columns past L: a zero-padded copy.
        const T* g = dy_data + first;
        int64_t stride = columns;
        if (first + kGradColumns > columns) {
          CopyColumns(dy_data, outputs, columns, first, kGradColumns, last.data());
          g = last.data();
          stride = kGradColumns;
        }
        // The next chunk's lines, a slice before each register tile: issued all at once, they waited for
        // the core's few line-fill buffers (on the AMX host, about 12% of the op's samples sat at the prefetches).
        const int64_t row_tiles = rows / kGradRows, parts = (outputs / kGradOutputs) * row_tiles;
        int64_t n0 = 0;
        for (; n0 + kGradOutputs <= outputs; n0 += kGradOutputs) {
          const int64_t group = n0 / kGradOutputs;
          auto prefetch = [&](int64_t tile) {
            if (chunk + 1 == end) return;
            const int64_t next = first + kGradColumns, part = group * row_tiles + tile;
            PrefetchColumns(x_data, rows, columns, next, kGradColumns, part, parts);
            PrefetchColumns(dy_data, outputs, columns, next, kGradColumns, part, parts);
          };
          GradColumns<T, kGradOutputs>(xs.data(), g, stride, rows, n0, kGradColumns, outputs, unit_sums.data(),
                                       prefetch);
        }
        for (; n0 < outputs; ++n0) {
          GradColumns<T, 1>(xs.data(), g, stride, rows, n0, kGradColumns, outputs, unit_sums.data(),
                            [](int64_t) {});
        }
      }
      for (int64_t e = 0; e < size; ++e) sums[u * size + e] = LaneSum<T>(unit_sums[e]);
    }
  });
  for (int64_t u = 0; u < units; ++u) {
    const T* unit_sums = sums.data() + u * size;
    for (int64_t e = 0; e < size; ++e) dkernel_data[e] += unit_sums[e];
  }
}

}  // namespace sit_keras

#endif  // SIT_KERAS_NATIVE_CHANNELS_FIRST_H_
