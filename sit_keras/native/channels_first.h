// How SitChannelsFirstProjection and SitChannelsFirstProjectionKernelGrad (channels_first.cc: what they
// compute) compute, shared by their TensorFlow kernels and their XLA custom calls (xla/xla_kernels.cc).
//
// Both walk the long axis in column tiles of x copied to a contiguous buffer first. The rows of x lie L
// values apart, and for the SiT's L (a multiple of 1024) that is a multiple of 4 KiB: read in place, the
// rows of a tile fall into the same few sets of the L1 cache and evict each other. The copies pad the last
// tile with zeros, so the arithmetic runs on whole vectors only. On an AVX2 host the two ops took 0.58x and,
// with TensorFlow's matmul for the input's gradient, 0.77x the time of TensorFlow's matmuls
// (benchmarks/native_ops.py, docs/speed.md "The projection in a native op").
// While a thread projects one column tile it prefetches the next into the L2 cache, a slice of its lines
// before each register tile: its copies of x then wait for memory less: on the AVX2 host, alone, the SiT's
// 64 -> 192 projection's input gradient took 0.91x its time without; beside the other gradient op, in a
// graph, the gain was below the noise (docs/speed.md, "Prefetching in the kernels").
// The kernel gradient is packed (docs/speed.md, "The kernel gradient packed"): for each column tile, dy's
// rows are turned into blocks of kLanes outputs, one vector a column (RowsToLanes), and x's rows copied;
// a register tile then keeps the sums of a few rows of x against a few blocks of outputs in their final
// orientation, each of x's values broadcast against the blocks' vectors, so no lanes are added at the end.
// Its sums are kept per unit of a fixed partition of the columns and the units' sums added in a fixed
// order: the same bits on every run, whatever the threads.

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
// Kernel gradient: kGradRows rows of x against kGradBlocks blocks of kLanes outputs (8 x 3 and 6 x 2, the
// fastest of the tiles tried for the SiT's 64 x 192 kernel with AVX-512 and with AVX2, on an AMD host).
constexpr int kGradRows = kVectorRegisters >= 32 ? 8 : 6;
constexpr int kGradBlocks = kVectorRegisters >= 32 ? 3 : 2;
// Columns the kernel gradient packs at a time (dy's and x's, in the L2 cache), and the units of its fixed
// partition of the columns (fewer for fewer columns): the threads' work.
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
  const bool streaming = columns % kLanes == 0 && Streams(y_data, outputs * columns);
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
              if constexpr (!std::is_same_v<S, double>) {
                if (streaming) {  // aligned: whole tiles of whole vectors, rows of whole vectors
                  for (int v = 0; v < kColumnVectors; ++v) StoreStreaming(target + v * kLanes, sums[i][v]);
                  continue;
                }
              }
              for (int v = 0; v < kColumnVectors; ++v) Store(target + v * kLanes, sums[i][v]);
            } else {  // the last tile: its valid columns only
              for (int v = 0; v < kColumnVectors; ++v) Store(values + v * kLanes, sums[i][v]);
              ConvertRun(values, valid, target);
            }
          }
        }
      }
    }
    if (streaming) StreamsDone();
  });
}

// sums[r, b kLanes + j] += sum_e x[r, e] dy[b, e, j] over `width` columns, for the A rows r of x from r0 and
// the B blocks b of outputs from b0: ProjectChannelsFirstKernelGrad's buffers, x's rows kGradColumns values
// apart and dy's blocks kGradColumns vectors apart; the sums' rows `padded` apart.
template <typename T, int A, int B>
inline void PackedGradTile(const T* x, const T* dy, int64_t width, int64_t r0, int64_t b0, int64_t padded,
                           T* sums) {
  Lanes<T> acc[A][B];
  for (int a = 0; a < A; ++a) {
    for (int b = 0; b < B; ++b) acc[a][b] = Load(sums + (r0 + a) * padded + (b0 + b) * kLanes);
  }
  for (int64_t e = 0; e < width; ++e) {
    Lanes<T> d[B];
    for (int b = 0; b < B; ++b) d[b] = Load(dy + ((b0 + b) * kGradColumns + e) * kLanes);
    for (int a = 0; a < A; ++a) {
      const T value = x[(r0 + a) * kGradColumns + e];
      for (int b = 0; b < B; ++b) acc[a][b] += value * d[b];
    }
  }
  for (int a = 0; a < A; ++a) {
    for (int b = 0; b < B; ++b) Store(sums + (r0 + a) * padded + (b0 + b) * kLanes, acc[a][b]);
  }
}

// PackedGradTile over every row of x (kGradRows at a time, then one at a time) against B blocks from b0.
template <typename T, int B>
inline void PackedGradRows(const T* x, const T* dy, int64_t rows, int64_t width, int64_t b0, int64_t padded,
                           T* sums) {
  int64_t r0 = 0;
  for (; r0 + kGradRows <= rows; r0 += kGradRows) {
    PackedGradTile<T, kGradRows, B>(x, dy, width, r0, b0, padded, sums);
  }
  for (; r0 < rows; ++r0) PackedGradTile<T, 1, B>(x, dy, width, r0, b0, padded, sums);
}

// dkernel (R, N) = x (R, L) dy (N, L)^T.
template <typename T>
void ProjectChannelsFirstKernelGrad(const T* dy_data, const T* x_data, int64_t rows, int64_t columns,
                                    int64_t outputs, T* dkernel_data, const Shards& shards) {
  const int64_t size = rows * outputs;
  std::fill(dkernel_data, dkernel_data + size, T(0));
  if (size == 0 || columns == 0) return;
  // Unit u sums the column chunks [u chunks / units, (u + 1) chunks / units) into its own (R, N) sums, their
  // rows padded to whole blocks of kLanes outputs.
  const int64_t blocks = (outputs + kLanes - 1) / kLanes, padded = blocks * kLanes;
  const int64_t chunks = (columns + kGradColumns - 1) / kGradColumns, units = std::min(chunks, kGradUnits);
  std::vector<T> sums(units * rows * padded, T(0));
  const int64_t cost = 2 * size * kGradColumns * (chunks / units + 1);
  shards(units, cost, [&](int64_t start, int64_t limit) {
    std::vector<T> dy(blocks * kGradColumns * kLanes), x(rows * kGradColumns);
    for (int64_t u = start; u < limit; ++u) {
      T* unit_sums = sums.data() + u * rows * padded;
      for (int64_t chunk = u * chunks / units; chunk < (u + 1) * chunks / units; ++chunk) {
        const int64_t first = chunk * kGradColumns, width = std::min(kGradColumns, columns - first);
        // dy[(b kGradColumns + e) kLanes + j] = dy_data[b kLanes + j, first + e], zero past the N outputs.
        for (int64_t b = 0; b < blocks; ++b) {
          const int block_rows = static_cast<int>(std::min<int64_t>(kLanes, outputs - b * kLanes));
          RowsToLanes(dy_data + b * kLanes * columns + first, columns, width, block_rows,
                      dy.data() + b * kGradColumns * kLanes, kLanes);
        }
        CopyColumns(x_data, rows, columns, first, kGradColumns, x.data());
        int64_t b0 = 0;
        for (; b0 + kGradBlocks <= blocks; b0 += kGradBlocks) {
          PackedGradRows<T, kGradBlocks>(x.data(), dy.data(), rows, width, b0, padded, unit_sums);
        }
        for (; b0 < blocks; ++b0) PackedGradRows<T, 1>(x.data(), dy.data(), rows, width, b0, padded, unit_sums);
      }
    }
  });
  for (int64_t u = 0; u < units; ++u) {
    for (int64_t r = 0; r < rows; ++r) {
      const T* unit_row = sums.data() + (u * rows + r) * padded;
      for (int64_t n = 0; n < outputs; ++n) dkernel_data[r * outputs + n] += unit_row[n];
    }
  }
}

}  // namespace sit_keras

#endif  // SIT_KERAS_NATIVE_CHANNELS_FIRST_H_
