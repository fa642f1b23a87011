// How SitStandardizedLanes and SitStandardizedLanesGrad (standardize.cc: what they compute) compute, shared
// by their TensorFlow kernels and their XLA custom calls (xla/xla_kernels.cc).

#ifndef SIT_KERAS_NATIVE_STANDARDIZE_H_
#define SIT_KERAS_NATIVE_STANDARDIZE_H_

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "kernels.h"

namespace sit_keras {

// The kLanes windows from b of the tokens x (B, T, D), transposed: values[(c T + i) kLanes + l] =
// x[b + l, i, c] (zero for windows at or beyond B), with each token's mean and r, lane by lane. The
// windows' B x T x D values are one contiguous run of x, read once. Channel-major, as the output runs
// are: token-major, a channel's T values would lie D kLanes values apart (4 KB for D = 64), which the
// cache holds in one set. x may be stored as bfloat16 (S), read as T = float.
template <typename T>
struct BlockTile {
  BlockTile(int64_t tokens, int64_t channels)
      : tokens(tokens), channels(channels), values(tokens * channels * kLanes), mean(tokens), inverse(tokens) {}

  template <typename S>
  void Read(const S* x, int64_t windows, int64_t b, T epsilon) {
    const int64_t size = tokens * channels;
    const int rows = static_cast<int>(std::min<int64_t>(kLanes, windows - b));
    const int64_t run = tokens * kLanes;  // a channel's values
    for (int64_t i = 0; i < tokens; ++i) {
      RowsToLanes(x + b * size + i * channels, size, channels, rows, values.data() + i * kLanes, run);
    }
    for (int64_t i = 0; i < tokens; ++i) {
      const T* v = values.data() + i * kLanes;
      Lanes<T> sum = {};
      for (int64_t c = 0; c < channels; ++c) sum += Load(v + c * run);
      mean[i] = sum / T(channels);
      Lanes<T> squares = {};
      for (int64_t c = 0; c < channels; ++c) {
        const Lanes<T> centred = Load(v + c * run) - mean[i];
        squares += centred * centred;
      }
      const Lanes<T> variance = squares / T(channels) + epsilon;
      for (int l = 0; l < kLanes; ++l) inverse[i][l] = T(1) / std::sqrt(variance[l]);
    }
  }

  // The standardised value of channel c of token i.
  Lanes<T> Standardized(int64_t i, int64_t c) const {
    return (Load(values.data() + (c * tokens + i) * kLanes) - mean[i]) * inverse[i];
  }

  const int64_t tokens, channels;
  std::vector<T> values;
  std::vector<Lanes<T>> mean, inverse;
};

// The tokens' sizes: B windows of T tokens of D channels, in ceil(B / kLanes) blocks of the lane layout.
struct TokenSizes {
  TokenSizes(int64_t windows, int64_t tokens, int64_t channels)
      : windows(windows), tokens(tokens), channels(channels), blocks((windows + kLanes - 1) / kLanes) {}
  explicit TokenSizes(const TensorShape& x) : TokenSizes(x.dim_size(0), x.dim_size(1), x.dim_size(2)) {}
  TensorShape lanes() const { return TensorShape({channels, blocks, tokens, kLanes}); }
  const int64_t windows, tokens, channels, blocks;
};

// The tokens (B, T, D) and the epsilon, a scalar of their dtype (an attribute would round a double's).
inline Status CheckStandardizeInputs(const TensorShape& x, const TensorShape& epsilon) {
  if (x.dims() != 3 || x.dim_size(2) < 1 || epsilon.dims() != 0) {
    return InvalidArgument("SitStandardizedLanes expects tokens (B, T, D) and a scalar epsilon; got ",
                           x.DebugString(), " and ", epsilon.DebugString());
  }
  return Status();
}

// SitStandardizedLanesGrad's dy (the lane layout of x) and skip_dy (B, K <= T, D).
inline Status CheckStandardizeGradInputs(const TokenSizes& n, const TensorShape& dy, const TensorShape& skip_dy) {
  if (dy != n.lanes()) {
    return InvalidArgument("SitStandardizedLanesGrad expects dy (", n.channels, ", ", n.blocks, ", ", n.tokens,
                           ", ", kLanes, "); got ", dy.DebugString());
  }
  const int64_t skipped = skip_dy.dims() == 3 ? skip_dy.dim_size(1) : -1;
  if (skipped < 0 || skipped > n.tokens || skip_dy.dim_size(0) != n.windows || skip_dy.dim_size(2) != n.channels) {
    return InvalidArgument("SitStandardizedLanesGrad expects skip_dy (", n.windows, ", K <= ", n.tokens, ", ",
                           n.channels, "); got ", skip_dy.DebugString());
  }
  return Status();
}

// y in the lane layout from the tokens x, both stored as S.
template <typename T, typename S>
void StandardizeLanes(const S* x_data, const TokenSizes& n, T epsilon, S* y_data, const Shards& shards) {
  const int64_t windows = n.windows, tokens = n.tokens, channels = n.channels, blocks = n.blocks;
  // A unit is a block of kLanes windows: for each channel, its T x kLanes outputs are one contiguous run.
  shards(blocks, 8 * tokens * channels * kLanes, [&](int64_t start, int64_t limit) {
    BlockTile<T> tile(tokens, channels);
    for (int64_t block = start; block < limit; ++block) {
      tile.Read(x_data, windows, block * kLanes, epsilon);
      for (int64_t c = 0; c < channels; ++c) {
        S* y = y_data + (c * blocks + block) * tokens * kLanes;
        for (int64_t i = 0; i < tokens; ++i) Store(y + i * kLanes, tile.Standardized(i, c));
      }
    }
  });
}

// dx (B, T, D) from dy in the lane layout, plus skip_dy (B, K, D) on the first K tokens; all stored as S.
template <typename T, typename S>
void StandardizeLanesGrad(const S* dy_data, const S* x_data, const S* skip_data, int64_t skipped,
                          const TokenSizes& n, T epsilon, S* dx_data, const Shards& shards) {
  const int64_t windows = n.windows, tokens = n.tokens, channels = n.channels, blocks = n.blocks;
  shards(blocks, 14 * tokens * channels * kLanes, [&](int64_t start, int64_t limit) {
    BlockTile<T> tile(tokens, channels);
    std::vector<T> gradient(tokens * channels * kLanes);  // channel-major, as the tile
    const int64_t run = tokens * kLanes, size = tokens * channels;
    for (int64_t block = start; block < limit; ++block) {
      const int64_t b = block * kLanes;
      tile.Read(x_data, windows, b, epsilon);
      // Per token: mean_c dy and mean_c (dy y), then dx = r (dy - mean dy - y mean(dy y)); dy's
      // channel c of this block is the run at dy_data + (c blocks + block) run.
      const S* dy_block = dy_data + block * run;
      for (int64_t i = 0; i < tokens; ++i) {
        Lanes<T> sum = {}, sum_y = {};
        for (int64_t c = 0; c < channels; ++c) {
          const Lanes<T> g = Load(dy_block + c * blocks * run + i * kLanes);
          sum += g;
          sum_y += g * tile.Standardized(i, c);
        }
        const Lanes<T> mean_g = sum / T(channels), mean_gy = sum_y / T(channels);
        for (int64_t c = 0; c < channels; ++c) {
          const Lanes<T> g = Load(dy_block + c * blocks * run + i * kLanes);
          Store(gradient.data() + c * run + i * kLanes,
                tile.inverse[i] * (g - mean_g - tile.Standardized(i, c) * mean_gy));
        }
      }
      const int rows = static_cast<int>(std::min<int64_t>(kLanes, windows - b));
      // The skip connection's gradient on the first K tokens, added in T before dx is stored (once rounded).
      for (int l = 0; l < rows; ++l) {
        const S* skip_row = skip_data + (b + l) * skipped * channels;
        for (int64_t i = 0; i < skipped; ++i) {
          for (int64_t c = 0; c < channels; ++c) {
            gradient[c * run + i * kLanes + l] += static_cast<T>(skip_row[i * channels + c]);
          }
        }
      }
      for (int64_t i = 0; i < tokens; ++i) {
        LanesToRows(gradient.data() + i * kLanes, run, channels, rows, dx_data + b * size + i * channels, size);
      }
    }
  });
}

}  // namespace sit_keras

#endif  // SIT_KERAS_NATIVE_STANDARDIZE_H_
