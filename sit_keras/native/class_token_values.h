// How SitClassTokenValues and its gradient (class_token_values.cc: what they compute) compute, shared by their
// TensorFlow kernels and their XLA custom calls (xla/xla_kernels.cc): the checks of their inputs and the
// computation on raw buffers, sharded through a Shards callback.

#ifndef SIT_KERAS_NATIVE_CLASS_TOKEN_VALUES_H_
#define SIT_KERAS_NATIVE_CLASS_TOKEN_VALUES_H_

#include <algorithm>
#include <memory>
#include <new>

#include "kernels.h"
#include "window_attention.h"

namespace sit_keras {

// R input rows, B windows (a multiple of kLanes), T tokens, H heads of d features, M maps.
struct ValuesSizes {
  int64_t rows, windows, tokens, heads, head_dim, maps;
};

// x (R, B / kLanes, T, kLanes), scores (B, 2, H, T), kernel (R, H d), graphs (H d, T, T), coefficients (M, 2).
inline Status ReadValuesSizes(int num_heads, const TensorShape& x, const TensorShape& scores,
                              const TensorShape& kernel, const TensorShape& graphs,
                              const TensorShape& coefficients, ValuesSizes* s) {
  if (x.dims() != 4 || x.dim_size(0) < 1 || x.dim_size(3) != kLanes) {
    return InvalidArgument("SitClassTokenValues expects x (R, B / ", kLanes, ", T, ", kLanes, "); got ",
                           x.DebugString());
  }
  const int64_t rows = x.dim_size(0), windows = x.dim_size(1) * kLanes, tokens = x.dim_size(2);
  if (kernel.dims() != 2 || kernel.dim_size(0) != rows || kernel.dim_size(1) % num_heads != 0) {
    return InvalidArgument("SitClassTokenValues expects kernel (", rows, ", H d) with H = ", num_heads, "; got ",
                           kernel.DebugString());
  }
  const int64_t dim = kernel.dim_size(1);
  if (scores != TensorShape({windows, 2, num_heads, tokens})) {
    return InvalidArgument("SitClassTokenValues expects scores (", windows, ", 2, ", num_heads, ", ", tokens,
                           "); got ", scores.DebugString());
  }
  if (graphs != TensorShape({dim, tokens, tokens})) {
    return InvalidArgument("SitClassTokenValues expects graphs (", dim, ", ", tokens, ", ", tokens, "); got ",
                           graphs.DebugString());
  }
  if (coefficients.dims() != 2 || coefficients.dim_size(1) != 2 || coefficients.dim_size(0) < 1) {
    return InvalidArgument("SitClassTokenValues expects coefficients (M, 2); got ", coefficients.DebugString());
  }
  *s = ValuesSizes{rows, windows, tokens, num_heads, dim / num_heads, coefficients.dim_size(0)};
  return Status();
}

// SitClassTokenValuesGrad's dout (B, 1, H d).
inline Status CheckValuesGradInputs(const ValuesSizes& s, const TensorShape& dout) {
  return CheckClassRowGradient("SitClassTokenValuesGrad", s.windows, s.heads * s.head_dim, dout);
}

// The ops' inputs (x stored as S).
template <typename T, typename S = T>
struct ValuesInputs {
  const S* x;
  const T *scores, *kernel, *graphs, *coefficients;
};

// n zeroed values of T on whole cache lines: each lane vector of a buffer of them then sits in one line.
// (std::vector's floats are 16-byte aligned, and most of its 64-byte vectors straddled two lines.)
template <typename T>
class LineAligned {
 public:
  explicit LineAligned(int64_t n = 0) { assign(n, T(0)); }
  void assign(int64_t n, T value) {
    if (n > size_) {
      data_.reset(new (std::align_val_t(64)) T[n]);
      size_ = n;
    }
    std::fill(data_.get(), data_.get() + n, value);
  }
  T* data() { return data_.get(); }
  const T* data() const { return data_.get(); }
  T* begin() { return data_.get(); }
  T* end() { return data_.get() + size_; }

 private:
  struct Free {
    void operator()(T* p) const { ::operator delete[](p, std::align_val_t(64)); }
  };
  std::unique_ptr<T[], Free> data_;
  int64_t size_ = 0;
};

// One block of kLanes windows: its inputs as T, a head's attention weights (the sum of the maps' softmaxes,
// each kept for the gradient), its outputs, and for the gradient dout, the values' gradients (d x T lanes),
// the attention's and the scores'.
template <typename T>
struct ValuesBlock {
  explicit ValuesBlock(const ValuesSizes& s)
      : x(s.rows * s.tokens * kLanes), scores(2 * s.tokens * kLanes), per_map(s.maps * s.tokens * kLanes),
        attention(s.tokens * kLanes), out(s.head_dim * kLanes), dout(s.head_dim * kLanes),
        dvalues(s.head_dim * s.tokens * kLanes), dattention(s.tokens * kLanes), dscores(2 * s.tokens * kLanes) {}
  LineAligned<T> x, scores, per_map, attention, out, dout, dvalues, dattention, dscores;
};

// The block's inputs x[(r T + t) kLanes + l], widened to T.
template <typename T, typename S>
void LoadInputs(const S* x, const ValuesSizes& s, int64_t b, ValuesBlock<T>* blk) {
  const int64_t n = s.tokens * kLanes, row = s.windows * s.tokens;
  for (int64_t r = 0; r < s.rows; ++r) ConvertRun(x + r * row + b * s.tokens, n, blk->x.data() + r * n);
}

// Head h's attention weights for the block's windows: a[j] = sum_m softmax_j(c[m, 0] row[j] + c[m, 1] column[j]).
template <typename T>
void Attention(const T* scores, const T* coefficients, const ValuesSizes& s, int64_t h, int64_t b,
               ValuesBlock<T>* blk) {
  const int64_t t = s.tokens, stride = 2 * s.heads * t;
  T* row = blk->scores.data();
  T* column = row + t * kLanes;
  RowsToLanes(scores + b * stride + h * t, stride, t, kLanes, row, kLanes);
  RowsToLanes(scores + b * stride + (s.heads + h) * t, stride, t, kLanes, column, kLanes);
  ClassAttention(row, column, coefficients, s.maps, t, blk->per_map.data(), blk->attention.data());
}

// Feature c's value v[i] = sum_r kernel[r, c] x[r, i] and its weight w[i] = sum_j g[i, j] a[j], g = graphs[c]
// (G_v applied to the attention instead of the values: sum_j a_j (G_v v)_j = sum_t v_t (G_v^T a)_t).
template <typename T>
inline void ValueAndWeight(const T* kernel, const T* g, const ValuesSizes& s, int64_t c, int64_t i,
                           const ValuesBlock<T>& blk, Lanes<T>* v, Lanes<T>* w) {
  const int64_t t = s.tokens, dim = s.heads * s.head_dim;
  const T* x = blk.x.data();
  const T* a = blk.attention.data();
  Lanes<T> value = {}, weight = {};
  for (int64_t r = 0; r < s.rows; ++r) value += kernel[r * dim + c] * Load(x + (r * t + i) * kLanes);
  for (int64_t j = 0; j < t; ++j) weight += g[i * t + j] * Load(a + j * kLanes);
  *v = value;
  *w = weight;
}

// SitClassTokenValues: out (B, 1, H d) for checked sizes `s`, a block of kLanes windows (every head) a unit.
template <typename T, typename S>
void ClassTokenValues(const ValuesSizes& s, const ValuesInputs<T, S>& in, S* out, const Shards& shards) {
  const int64_t dim = s.heads * s.head_dim, t = s.tokens, blocks = s.windows / kLanes;
  auto work = [&](int64_t start, int64_t limit) {
    ValuesBlock<T> blk(s);
    for (int64_t unit = start; unit < limit; ++unit) {
      const int64_t b = unit * kLanes;
      LoadInputs(in.x, s, b, &blk);
      for (int64_t h = 0; h < s.heads; ++h) {
        Attention(in.scores, in.coefficients, s, h, b, &blk);
        for (int64_t f = 0; f < s.head_dim; ++f) {
          const int64_t c = h * s.head_dim + f;
          Lanes<T> sum = {};
          for (int64_t i = 0; i < t; ++i) {
            Lanes<T> v, w;
            ValueAndWeight(in.kernel, in.graphs + c * t * t, s, c, i, blk, &v, &w);
            sum += v * w;
          }
          Store(blk.out.data() + f * kLanes, sum);
        }
        LanesToRows(blk.out.data(), kLanes, s.head_dim, kLanes, out + b * dim + h * s.head_dim, dim);
      }
    }
  };
  const int64_t cost = dim * t * (s.rows + t + 1) * kLanes + s.heads * s.maps * 12 * t * kLanes;
  shards(blocks, cost, work);
}

// SitClassTokenValuesGrad's outputs: the gradients of x (stored as S), the scores, the kernel and the graphs.
template <typename T, typename S = T>
struct ValuesGradients {
  S* dx;
  T *dscores, *dkernel, *dgraphs;
};

// Blocks whose graph gradients ClassTokenValuesGrad adds up together: the d T^2 lane-wide sums of a head
// overflow the core's L1 cache, and each is then read and written once for kValuesGroup blocks.
constexpr int kValuesGroup = 8;

// Head h's graph gradients dg[c, i, j] += sum_k dw_k[f, i] a_k[j] over the `slots` blocks k of `group`
// (each a_k (T lanes), then dw_k (d x T lanes)), j in tiles of kTileJ sums kept in registers.
template <typename T>
void AddGraphGradients(const T* group, int slots, const ValuesSizes& s, int64_t h, T* dgraphs) {
  constexpr int kTileJ = 8;
  const int64_t t = s.tokens, size = (1 + s.head_dim) * t * kLanes;
  for (int64_t f = 0; f < s.head_dim; ++f) {
    T* dg = dgraphs + (h * s.head_dim + f) * t * t * kLanes;
    for (int64_t i = 0; i < t; ++i) {
      for (int64_t j0 = 0; j0 < t; j0 += kTileJ) {
        const int tile = static_cast<int>(std::min<int64_t>(kTileJ, t - j0));
        Lanes<T> sums[kTileJ] = {};
        for (int k = 0; k < slots; ++k) {
          const T* a = group + k * size;
          const Lanes<T> dw = Load(a + (t + f * t + i) * kLanes);
          for (int j = 0; j < tile; ++j) sums[j] += dw * Load(a + (j0 + j) * kLanes);
        }
        for (int j = 0; j < tile; ++j) {
          T* at = dg + (i * t + j0 + j) * kLanes;
          Store(at, Load(at) + sums[j]);
        }
      }
    }
  }
}

// The gradient's sums each stay in registers over the terms they add up: stored once per sum instead of once
// per term, which left the gradient op bound by its stores and at about 4x the forward op's time.
constexpr int kGradTile = 8;

// Feature c's kernel gradient dkernel[r, c] += sum_i x[r, i] dv[i].
template <typename T>
void AddKernelGradient(const T* x, const T* dv, const ValuesSizes& s, int64_t c, T* dkernel) {
  const int64_t t = s.tokens, dim = s.heads * s.head_dim;
  for (int64_t r = 0; r < s.rows; ++r) {
    Lanes<T> sum = {};
    for (int64_t i = 0; i < t; ++i) sum += Load(x + (r * t + i) * kLanes) * Load(dv + i * kLanes);
    T* dk = dkernel + (r * dim + c) * kLanes;
    Store(dk, Load(dk) + sum);
  }
}

// Head h's attention gradient da[j] = sum_f sum_i graphs[h d + f, i, j] dw[f, i] (from w = G_v a), dw (d x T
// lanes), j in tiles of kGradTile sums.
template <typename T>
void AttentionGradient(const T* graphs, const T* dw, const ValuesSizes& s, int64_t h, T* da) {
  const int64_t t = s.tokens;
  for (int64_t j0 = 0; j0 < t; j0 += kGradTile) {
    const int tile = static_cast<int>(std::min<int64_t>(kGradTile, t - j0));
    Lanes<T> sums[kGradTile] = {};
    for (int64_t f = 0; f < s.head_dim; ++f) {
      const T* g = graphs + (h * s.head_dim + f) * t * t + j0;
      for (int64_t i = 0; i < t; ++i) {
        const Lanes<T> w = Load(dw + (f * t + i) * kLanes);
        for (int j = 0; j < tile; ++j) sums[j] += g[i * t + j] * w;
      }
    }
    for (int j = 0; j < tile; ++j) Store(da + (j0 + j) * kLanes, sums[j]);
  }
}

// Head h's part of x's gradient dx[r, i] += sum_f kernel[r, h d + f] dv[f, i], dv (d x T lanes), i in tiles
// of kGradTile sums.
template <typename T>
void AddInputGradient(const T* kernel, const T* dv, const ValuesSizes& s, int64_t h, T* dx) {
  const int64_t t = s.tokens, dim = s.heads * s.head_dim;
  for (int64_t r = 0; r < s.rows; ++r) {
    const T* k = kernel + r * dim + h * s.head_dim;
    for (int64_t i0 = 0; i0 < t; i0 += kGradTile) {
      const int tile = static_cast<int>(std::min<int64_t>(kGradTile, t - i0));
      T* at = dx + (r * t + i0) * kLanes;
      Lanes<T> sums[kGradTile];
      for (int i = 0; i < tile; ++i) sums[i] = Load(at + i * kLanes);
      for (int64_t f = 0; f < s.head_dim; ++f) {
        for (int i = 0; i < tile; ++i) sums[i] += k[f] * Load(dv + (f * t + i0 + i) * kLanes);
      }
      for (int i = 0; i < tile; ++i) Store(at + i * kLanes, sums[i]);
    }
  }
}

// SitClassTokenValuesGrad for checked sizes (ReadValuesSizes, CheckValuesGradInputs): a chunk of blocks a
// unit, each with lane-wide sums of the kernel's and the graphs' gradients, added in a fixed order at the
// end (the same result on every run). x's and the scores' gradients are each block's own.
template <typename T, typename S>
void ClassTokenValuesGrad(const ValuesSizes& s, const S* dout, const ValuesInputs<T, S>& in,
                          const ValuesGradients<T, S>& out, int64_t threads, const Shards& shards) {
  const int64_t dim = s.heads * s.head_dim, t = s.tokens, blocks = s.windows / kLanes;
  const int64_t chunks = std::max<int64_t>(1, std::min<int64_t>(blocks, 2 * threads));
  const int64_t graph_entries = dim * t * t, entries = graph_entries + s.rows * dim;  // per chunk, lane-wide
  LineAligned<T> partial(chunks * entries * kLanes);
  const int64_t row = s.windows * t, n = t * kLanes, stride = 2 * s.heads * t;
  auto work = [&](int64_t start, int64_t limit) {
    ValuesBlock<T> blk(s);
    LineAligned<T> dx;
    const int64_t group_size = (1 + s.head_dim) * t * kLanes;
    LineAligned<T> group(kValuesGroup * group_size);
    int slot = 0;
    for (int64_t chunk = start; chunk < limit; ++chunk) {
      T* dgraphs = partial.data() + chunk * entries * kLanes;
      T* dkernel = dgraphs + graph_entries * kLanes;
      std::fill(dgraphs, dgraphs + entries * kLanes, T(0));
      const int64_t first = chunk * blocks / chunks, last = (chunk + 1) * blocks / chunks;
      dx.assign((last - first) * s.rows * n, T(0));  // the chunk's x gradient, summed over the heads
      // Heads outside, blocks inside: a head's graph gradients (d T^2 lane-wide sums) stay in the core's
      // cache over the chunk's blocks.
      for (int64_t h = 0; h < s.heads; ++h) {
        for (int64_t block = first; block < last; ++block) {
          const int64_t b = block * kLanes;
          T* dx_block = dx.data() + (block - first) * s.rows * n;
          T* group_a = group.data() + slot * group_size;  // this block's a and dw, for AddGraphGradients
          T* group_dw = group_a + t * kLanes;
          LoadInputs(in.x, s, b, &blk);
          Attention(in.scores, in.coefficients, s, h, b, &blk);
          RowsToLanes(dout + b * dim + h * s.head_dim, dim, s.head_dim, kLanes, blk.dout.data(), kLanes);
          for (int64_t f = 0; f < s.head_dim; ++f) {
            const int64_t c = h * s.head_dim + f;
            // out = sum_i v[i] w[i]:  dv[i] = dO w[i], dw[i] = dO v[i]
            const Lanes<T> o = Load(blk.dout.data() + f * kLanes);
            T* dv = blk.dvalues.data() + f * t * kLanes;
            for (int64_t i = 0; i < t; ++i) {
              Lanes<T> v, w;
              ValueAndWeight(in.kernel, in.graphs + c * t * t, s, c, i, blk, &v, &w);
              Store(dv + i * kLanes, o * w);
              Store(group_dw + (f * t + i) * kLanes, o * v);
            }
            AddKernelGradient(blk.x.data(), dv, s, c, dkernel);
          }
          // w = G_v a per feature (dg[i, j] += dw[i] a[j] at the flush), and x's gradient, each summed over
          // the head's features in registers.
          AttentionGradient(in.graphs, group_dw, s, h, blk.dattention.data());
          AddInputGradient(in.kernel, blk.dvalues.data(), s, h, dx_block);
          // Through the maps' softmaxes into the gradients of the scores' row and column.
          T* drow = blk.dscores.data();
          T* dcolumn = drow + t * kLanes;
          ClassAttentionGradient(blk.per_map.data(), blk.dattention.data(), in.coefficients, s.maps, t, drow, dcolumn);
          LanesToRows(drow, kLanes, t, kLanes, out.dscores + b * stride + h * t, stride);
          LanesToRows(dcolumn, kLanes, t, kLanes, out.dscores + b * stride + (s.heads + h) * t, stride);
          std::copy(blk.attention.data(), blk.attention.data() + t * kLanes, group_a);
          if (++slot == kValuesGroup || block + 1 == last) {
            AddGraphGradients(group.data(), slot, s, h, dgraphs);
            slot = 0;
          }
        }
      }
      for (int64_t block = first; block < last; ++block) {
        for (int64_t r = 0; r < s.rows; ++r) {
          ConvertRun(dx.data() + ((block - first) * s.rows + r) * n, n, out.dx + r * row + block * kLanes * s.tokens);
        }
      }
    }
  };
  const int64_t cost = (blocks / chunks + 1) * (dim * t * (3 * s.rows + 4 * t + 3) + s.heads * s.maps * 20 * t) *
                       kLanes;
  shards(chunks, cost, work);
  // The chunks' sums, in chunk order, and their lanes in halves.
  shards(entries, 2 * chunks * kLanes, [&](int64_t start, int64_t limit) {
    for (int64_t e = start; e < limit; ++e) {
      Lanes<T> sum = {};
      for (int64_t chunk = 0; chunk < chunks; ++chunk) sum += Load(partial.data() + (chunk * entries + e) * kLanes);
      const T total = LaneSumInHalves<T>(sum);
      if (e < graph_entries) {
        out.dgraphs[e] = total;
      } else {
        out.dkernel[e - graph_entries] = total;
      }
    }
  });
}

}  // namespace sit_keras

#endif  // SIT_KERAS_NATIVE_CLASS_TOKEN_VALUES_H_
