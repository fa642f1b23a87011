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
// each kept for the gradient), a feature's weights (Weights), its outputs, and for the gradient dout, the
// values' gradients (d x T lanes) and the scores'.
template <typename T>
struct ValuesBlock {
  explicit ValuesBlock(const ValuesSizes& s)
      : x(s.rows * s.tokens * kLanes), scores(2 * s.tokens * kLanes), per_map(s.maps * s.tokens * kLanes),
        attention(s.tokens * kLanes), weights(s.tokens * kLanes), out(s.head_dim * kLanes), dout(s.head_dim * kLanes),
        dvalues(s.head_dim * s.tokens * kLanes), dscores(2 * s.tokens * kLanes) {}
  LineAligned<T> x, scores, per_map, attention, weights, out, dout, dvalues, dscores;
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

// Feature c's values v[i] = sum_r kernel[r, c] x[r, i], put(i, v[i]) in token order, kChains tokens summed
// side by side (Sums): each kernel value is loaded once for them.
template <typename T, typename Put>
inline void Values(const T* kernel, const ValuesSizes& s, int64_t c, const ValuesBlock<T>& blk, Put put) {
  const int64_t t = s.tokens, dim = s.heads * s.head_dim;
  const T* x = blk.x.data();
  Sums<T>(
      t, s.rows, [&](int64_t i, int64_t r) { return kernel[r * dim + c] * Load(x + (r * t + i) * kLanes); }, put);
}

// A feature's weights w[i] = sum_j g[i, j] a[j], g its graph (G_v applied to the attention instead of the
// values: sum_j a_j (G_v v)_j = sum_t v_t (G_v^T a)_t), put(i, w[i]) in token order, kChains tokens summed
// side by side: each a[j] is loaded once for them (one token at a time loaded it once per multiply-add).
template <typename T, typename Put>
inline void Weights(const T* g, const ValuesSizes& s, const ValuesBlock<T>& blk, Put put) {
  const int64_t t = s.tokens;
  const T* a = blk.attention.data();
  Sums<T>(t, t, [&](int64_t i, int64_t j) { return g[i * t + j] * Load(a + j * kLanes); }, put);
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
          T* w = blk.weights.data();
          Weights(in.graphs + c * t * t, s, blk, [&](int64_t i, Lanes<T> weight) { Store(w + i * kLanes, weight); });
          Lanes<T> sum = {};
          Values(in.kernel, s, c, blk, [&](int64_t i, Lanes<T> v) { sum += v * Load(w + i * kLanes); });
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

// Blocks whose gradients ClassTokenValuesGrad finishes together (FinishGroup): the d T^2 lane-wide sums of a
// head's graph gradients overflow the core's L1 cache, and each is then read and written once for
// kValuesGroup blocks; each graph value is loaded once for kTile of them. In perf profiles of the op at the
// first local block's shapes (one each), the two took about a quarter fewer samples with 16 than with 8.
constexpr int kValuesGroup = 16;

// Up to kValuesGroup blocks of one head whose gradients are finished together: each block's a (T lanes)
// then dw (d x T lanes) at block(k), its maps' softmaxes (M x T lanes) and its attention's gradient (T
// lanes), and where its windows start.
template <typename T>
struct ValuesGroup {
  explicit ValuesGroup(const ValuesSizes& s)
      : size((1 + s.head_dim) * s.tokens * kLanes), blocks(kValuesGroup * size),
        per_map(kValuesGroup * s.maps * s.tokens * kLanes), dattention(kValuesGroup * s.tokens * kLanes) {}
  T* block(int k) { return blocks.data() + k * size; }
  int64_t size;
  LineAligned<T> blocks, per_map, dattention;
  int64_t starts[kValuesGroup];
  int slots = 0;
};

// Head h's graph gradients dg[c, i, j] += sum_k dw_k[f, i] a_k[j] over the `slots` blocks k of `group`
// (each a_k (T lanes), then dw_k (d x T lanes)): per feature, in Products' tiles of kTile x kTile sums in
// registers, each dw_k[f, i] and a_k[j] loaded once a tile (2 kTile loads for kTile^2 multiply-adds; a row of
// sums over j loaded a_k[j] once per multiply-add, and the op waited on its loads).
template <typename T>
void AddGraphGradients(const T* group, int slots, const ValuesSizes& s, int64_t h, T* dgraphs) {
  const int64_t t = s.tokens, size = (1 + s.head_dim) * t * kLanes;
  for (int64_t f = 0; f < s.head_dim; ++f) {
    T* dg = dgraphs + (h * s.head_dim + f) * t * t * kLanes;
    Products<T>(
        t, t, slots, [&](int64_t i, int64_t k) { return Load(group + k * size + (t + f * t + i) * kLanes); },
        [&](int64_t j, int64_t k) { return Load(group + k * size + j * kLanes); },
        [&](int64_t i, int64_t j, Lanes<T> sum) {
          T* at = dg + (i * t + j) * kLanes;
          Store(at, Load(at) + sum);
        });
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

// The attention's gradients da_k[j] = sum_f sum_i graphs[h d + f, i, j] dw_k[f, i] (from w = G_v a) of the
// `slots` blocks k of `group` (as AddGraphGradients'), slot k's T lanes at da + k T kLanes: Products' tiles
// over tokens j and blocks k, each graph value loaded once for kTile blocks (a block at a time loaded one
// for every multiply-add).
template <typename T>
void AttentionGradients(const T* graphs, const T* group, int slots, const ValuesSizes& s, int64_t h, T* da) {
  const int64_t t = s.tokens, size = (1 + s.head_dim) * t * kLanes;
  const T* g = graphs + h * s.head_dim * t * t;  // g[(f T + i) T + j]: the sums run over f T + i in order
  Products<T>(
      t, slots, s.head_dim * t, [&](int64_t j, int64_t fi) { return g[fi * t + j]; },
      [&](int64_t k, int64_t fi) { return Load(group + k * size + (t + fi) * kLanes); },
      [&](int64_t j, int64_t k, Lanes<T> sum) { Store(da + (k * t + j) * kLanes, sum); });
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

// Finishes the group's blocks of head h: their attention's gradients (AttentionGradients), through each
// block's softmaxes into the gradients of its scores' row and column (dscores (B, 2, H, T)), and the
// graphs' gradients (AddGraphGradients). Empties the group.
template <typename T>
void FinishGroup(const ValuesSizes& s, const T* graphs, const T* coefficients, int64_t h, ValuesGroup<T>* group,
                 ValuesBlock<T>* blk, T* dscores, T* dgraphs) {
  const int64_t t = s.tokens, stride = 2 * s.heads * t;
  AttentionGradients(graphs, group->blocks.data(), group->slots, s, h, group->dattention.data());
  T* drow = blk->dscores.data();
  T* dcolumn = drow + t * kLanes;
  for (int k = 0; k < group->slots; ++k) {
    const int64_t b = group->starts[k];
    ClassAttentionGradient(group->per_map.data() + k * s.maps * t * kLanes, group->dattention.data() + k * t * kLanes,
                           coefficients, s.maps, t, drow, dcolumn);
    LanesToRows(drow, kLanes, t, kLanes, dscores + b * stride + h * t, stride);
    LanesToRows(dcolumn, kLanes, t, kLanes, dscores + b * stride + (s.heads + h) * t, stride);
  }
  AddGraphGradients(group->blocks.data(), group->slots, s, h, dgraphs);
  group->slots = 0;
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
  const int64_t row = s.windows * t, n = t * kLanes;
  auto work = [&](int64_t start, int64_t limit) {
    ValuesBlock<T> blk(s);
    ValuesGroup<T> group(s);
    LineAligned<T> dx;
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
          const int k = group.slots++;
          T* group_dw = group.block(k) + t * kLanes;
          group.starts[k] = b;
          LoadInputs(in.x, s, b, &blk);
          Attention(in.scores, in.coefficients, s, h, b, &blk);
          RowsToLanes(dout + b * dim + h * s.head_dim, dim, s.head_dim, kLanes, blk.dout.data(), kLanes);
          for (int64_t f = 0; f < s.head_dim; ++f) {
            const int64_t c = h * s.head_dim + f;
            // out = sum_i v[i] w[i]:  dv[i] = dO w[i], dw[i] = dO v[i]
            const Lanes<T> o = Load(blk.dout.data() + f * kLanes);
            T* dv = blk.dvalues.data() + f * t * kLanes;
            Weights(in.graphs + c * t * t, s, blk, [&](int64_t i, Lanes<T> w) { Store(dv + i * kLanes, o * w); });
            T* dw = group_dw + f * t * kLanes;
            Values(in.kernel, s, c, blk, [&](int64_t i, Lanes<T> v) { Store(dw + i * kLanes, o * v); });
            AddKernelGradient(blk.x.data(), dv, s, c, dkernel);
          }
          // x's gradient, summed over the head's features in registers; the attention's and the graphs' (w =
          // G_v a per feature) when the group is full.
          AddInputGradient(in.kernel, blk.dvalues.data(), s, h, dx.data() + (block - first) * s.rows * n);
          std::copy(blk.attention.data(), blk.attention.data() + t * kLanes, group.block(k));
          std::copy(blk.per_map.data(), blk.per_map.data() + s.maps * t * kLanes,
                    group.per_map.data() + k * s.maps * t * kLanes);
          if (group.slots == kValuesGroup || block + 1 == last) {
            FinishGroup(s, in.graphs, in.coefficients, h, &group, &blk, out.dscores, dgraphs);
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
    LaneTotals<T>(
        start, limit,
        [&](int64_t e) {
          Lanes<T> sum = {};
          for (int64_t chunk = 0; chunk < chunks; ++chunk) sum += Load(partial.data() + (chunk * entries + e) * kLanes);
          return sum;
        },
        [&](int64_t e, T total) {
          if (e < graph_entries) {
            out.dgraphs[e] = total;
          } else {
            out.dkernel[e - graph_entries] = total;
          }
        });
  });
}

}  // namespace sit_keras

#endif  // SIT_KERAS_NATIVE_CLASS_TOKEN_VALUES_H_
