// How SitChannelsFirstProjectionBfloat16 (channels_first.cc: what it computes) computes: y (N, L) = kernel
// (R, N)^T x (R, L), all three stored as bfloat16 and the products summed in float, as TensorFlow's
// bfloat16 MatMul sums them (the GSA layers' projection under mixed_bfloat16).
//
// With AMX (the library built where the compiler targets AMX_TILE and AMX_BF16, and the kernel granting the
// process the tiles' state) the products are tile dot products (TDPBF16PS): 16 x 16 output tiles, two rows
// of outputs by two of columns at a time in four accumulator tiles, over K tiles of 32 rows of x. A column
// chunk of x is first laid out as the tiles read it, each pair of rows interleaved value by value. The
// outputs go to memory as whole cache lines of bfloat16 with non-temporal stores: the SiT's output is 40 MB
// and its lines, read for ownership by ordinary stores, cost more than the arithmetic. The speed against
// TensorFlow's bfloat16 MatMul (oneDNN, itself on AMX): docs/speed.md, "The projection in bfloat16 on AMX
// tiles". Elsewhere the op runs the float projection (channels_first.h), which widens x a column tile at a
// time and rounds each output vector as it stores it.

#ifndef SIT_KERAS_NATIVE_CHANNELS_FIRST_BFLOAT16_H_
#define SIT_KERAS_NATIVE_CHANNELS_FIRST_BFLOAT16_H_

#include <algorithm>
#include <cstring>
#include <vector>

#include "channels_first.h"
#include "kernels.h"

#if defined(__AMX_TILE__) && defined(__AMX_BF16__) && defined(__AVX512BF16__)
#include <immintrin.h>
#include <sys/syscall.h>
#include <unistd.h>
#define SIT_KERAS_AMX 1
#endif

namespace sit_keras {

#ifdef SIT_KERAS_AMX

// Whether the kernel lets this process use the AMX tiles (Linux asks each process to request them once).
inline bool AmxGranted() {
  static const bool granted = [] {
    constexpr long kRequestPermission = 0x1023, kTileData = 18;  // ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA
    return syscall(SYS_arch_prctl, kRequestPermission, kTileData) == 0;
  }();
  return granted;
}

constexpr int64_t kAmxSide = 16;          // a tile's rows, and its float columns
constexpr int64_t kAmxDepth = 32;         // bfloat16 values a tile row holds: the K of one dot product
constexpr int64_t kAmxChunkTiles = 32;    // column tiles laid out at a time (512 columns, 32 KiB a K tile)

struct alignas(64) AmxTileConfig {
  uint8_t palette = 1, start_row = 0, reserved[14] = {};
  uint16_t bytes_per_row[16] = {};
  uint8_t rows[16] = {};
};

// packed[((t K + k) 16 + m) 32 + j] = kernel[k 32 + j, t 16 + m], zero past R and N: the A tiles of output
// row tile t (an even count of them) and K tile k.
inline std::vector<uint16_t> PackAmxKernel(const bfloat16* kernel, int64_t rows, int64_t outputs,
                                           int64_t row_tiles, int64_t depth_tiles) {
  std::vector<uint16_t> packed(row_tiles * depth_tiles * kAmxSide * kAmxDepth, 0);
  for (int64_t t = 0; t * kAmxSide < outputs; ++t) {
    for (int64_t k = 0; k < depth_tiles; ++k) {
      for (int64_t m = 0; m < kAmxSide && t * kAmxSide + m < outputs; ++m) {
        for (int64_t j = 0; j < kAmxDepth && k * kAmxDepth + j < rows; ++j) {
          std::memcpy(&packed[((t * depth_tiles + k) * kAmxSide + m) * kAmxDepth + j],
                      &kernel[(k * kAmxDepth + j) * outputs + t * kAmxSide + m], sizeof(uint16_t));
        }
      }
    }
  }
  return packed;
}

// The B tiles of `tiles` column tiles from column `first` for each K tile: tile row p holds rows 2p and
// 2p + 1 of the K tile interleaved, (x[2p, c], x[2p + 1, c]) for its 16 columns c; zero past R and L.
inline void PackAmxColumns(const bfloat16* x, int64_t rows, int64_t columns, int64_t first, int64_t tiles,
                           int64_t depth_tiles, uint16_t* packed) {
  const __m512i interleave = _mm512_set_epi16(47, 15, 46, 14, 45, 13, 44, 12, 43, 11, 42, 10, 41, 9, 40, 8, 39,
                                              7, 38, 6, 37, 5, 36, 4, 35, 3, 34, 2, 33, 1, 32, 0);
  for (int64_t k = 0; k < depth_tiles; ++k) {
    for (int64_t t = 0; t < tiles; ++t) {
      const int64_t left = first + t * kAmxSide;
      const int64_t valid = std::clamp<int64_t>(columns - left, 0, kAmxSide);
      const __mmask16 mask = static_cast<__mmask16>((1u << valid) - 1);
      uint16_t* tile = packed + (k * kAmxChunkTiles + t) * kAmxSide * kAmxDepth;
      for (int64_t p = 0; p < kAmxSide; ++p) {
        const int64_t r = k * kAmxDepth + 2 * p;
        __m512i even = _mm512_setzero_si512(), odd = _mm512_setzero_si512();
        if (r < rows) even = _mm512_castsi256_si512(_mm256_maskz_loadu_epi16(mask, x + r * columns + left));
        if (r + 1 < rows) {
          odd = _mm512_castsi256_si512(_mm256_maskz_loadu_epi16(mask, x + (r + 1) * columns + left));
        }
        _mm512_storeu_si512(tile + p * kAmxDepth, _mm512_permutex2var_epi16(even, interleave, odd));
      }
    }
  }
}

// Output rows [row, row + 16) of columns [left, left + 16) from a float tile's 16 x 16 sums, rounded (those
// past N and L left out).
inline void WriteAmxTile(const float* sums, int64_t row, int64_t left, int64_t outputs, int64_t columns,
                         bfloat16* y) {
  const int64_t valid = std::clamp<int64_t>(columns - left, 0, kAmxSide);
  const __mmask16 mask = static_cast<__mmask16>((1u << valid) - 1);
  for (int64_t m = 0; m < kAmxSide && row + m < outputs; ++m) {
    const __m256bh rounded = _mm512_cvtneps_pbh(_mm512_loadu_ps(sums + m * kAmxSide));
    _mm256_mask_storeu_epi16(y + (row + m) * columns + left, mask, (__m256i)rounded);
  }
}

// y (N, L) = kernel (R, N)^T x (R, L) on AMX tiles: each thread lays out its column chunks and sums them
// against the packed kernel, two output row tiles by two column tiles at a time.
inline void ProjectChannelsFirstAmx(const bfloat16* kernel, const bfloat16* x, int64_t rows, int64_t columns,
                                    int64_t outputs, bfloat16* y, const Shards& shards) {
  const int64_t depth_tiles = (rows + kAmxDepth - 1) / kAmxDepth;
  const int64_t row_tiles = 2 * ((outputs + 2 * kAmxSide - 1) / (2 * kAmxSide));  // even: two at a time
  const std::vector<uint16_t> a = PackAmxKernel(kernel, rows, outputs, row_tiles, depth_tiles);
  const int64_t column_tiles = (columns + kAmxSide - 1) / kAmxSide;
  const int64_t chunks = (column_tiles + kAmxChunkTiles - 1) / kAmxChunkTiles;
  shards(chunks, 2 * rows * outputs * kAmxChunkTiles * kAmxSide, [&](int64_t start, int64_t limit) {
    AmxTileConfig config;
    for (int t = 0; t < 8; ++t) config.rows[t] = kAmxSide, config.bytes_per_row[t] = 64;
    _tile_loadconfig(&config);
    std::vector<uint16_t> b(depth_tiles * kAmxChunkTiles * kAmxSide * kAmxDepth);
    alignas(64) float sums[4][kAmxSide * kAmxSide];
    for (int64_t chunk = start; chunk < limit; ++chunk) {
      const int64_t first = chunk * kAmxChunkTiles * kAmxSide;
      const int64_t tiles = std::min(kAmxChunkTiles, column_tiles - chunk * kAmxChunkTiles);
      const int64_t pairs = (tiles + 1) / 2;  // an odd last tile is paired with zeros
      PackAmxColumns(x, rows, columns, first, 2 * pairs, depth_tiles, b.data());
      for (int64_t t = 0; t < row_tiles; t += 2) {
        for (int64_t pair = 0; pair < pairs; ++pair) {
          // Tiles 0-3: the sums of rows t, t + 1 by columns 2 pair, 2 pair + 1; 4, 5: A; 6, 7: B.
          _tile_zero(0);
          _tile_zero(1);
          _tile_zero(2);
          _tile_zero(3);
          for (int64_t k = 0; k < depth_tiles; ++k) {
            const int64_t tile_values = kAmxSide * kAmxDepth;
            _tile_loadd(4, a.data() + (t * depth_tiles + k) * tile_values, 64);
            _tile_loadd(5, a.data() + ((t + 1) * depth_tiles + k) * tile_values, 64);
            _tile_loadd(6, b.data() + (k * kAmxChunkTiles + 2 * pair) * tile_values, 64);
            _tile_loadd(7, b.data() + (k * kAmxChunkTiles + 2 * pair + 1) * tile_values, 64);
            _tile_dpbf16ps(0, 4, 6);
            _tile_dpbf16ps(1, 4, 7);
            _tile_dpbf16ps(2, 5, 6);
            _tile_dpbf16ps(3, 5, 7);
          }
          _tile_stored(0, sums[0], 64);
          _tile_stored(1, sums[1], 64);
          _tile_stored(2, sums[2], 64);
          _tile_stored(3, sums[3], 64);
          const int64_t left = first + 2 * pair * kAmxSide, row = t * kAmxSide;
          bfloat16* target = y + row * columns + left;
          const bool aligned = reinterpret_cast<uintptr_t>(target) % 64 == 0 && columns % 32 == 0;
          if (aligned && left + 2 * kAmxSide <= columns && row + 2 * kAmxSide <= outputs) {
            // Whole lines: each output row's 32 values of the two column tiles, streamed past the caches.
            for (int h = 0; h < 2; ++h) {
              for (int64_t m = 0; m < kAmxSide; ++m) {
                const __m512bh line = _mm512_cvtne2ps_pbh(_mm512_load_ps(sums[2 * h + 1] + m * kAmxSide),
                                                          _mm512_load_ps(sums[2 * h] + m * kAmxSide));
                _mm512_stream_si512(reinterpret_cast<__m512i*>(target + (h * kAmxSide + m) * columns), (__m512i)line);
              }
            }
          } else {
            for (int h = 0; h < 2; ++h) {
              for (int side = 0; side < 2; ++side) {
                WriteAmxTile(sums[2 * h + side], row + h * kAmxSide, left + side * kAmxSide, outputs, columns, y);
              }
            }
          }
        }
      }
    }
    _tile_release();
    _mm_sfence();  // the streamed lines visible before the op returns
  });
}

#endif  // SIT_KERAS_AMX

// y (N, L) = kernel (R, N)^T x (R, L), stored as bfloat16, summed in float.
inline void ProjectChannelsFirstBfloat16(const bfloat16* kernel, const bfloat16* x, int64_t rows, int64_t columns,
                                         int64_t outputs, bfloat16* y, const Shards& shards) {
  if (outputs == 0 || columns == 0) return;
#ifdef SIT_KERAS_AMX
  if (rows > 0 && AmxGranted()) return ProjectChannelsFirstAmx(kernel, x, rows, columns, outputs, y, shards);
#endif
  ProjectChannelsFirst(kernel, x, rows, columns, outputs, y, shards);  // floats, a column tile at a time
}

}  // namespace sit_keras

#endif  // SIT_KERAS_NATIVE_CHANNELS_FIRST_BFLOAT16_H_
