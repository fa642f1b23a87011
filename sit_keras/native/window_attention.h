// How the window-attention ops (window_attention.cc: what they compute) compute, shared by their TensorFlow
// kernels and their XLA custom calls (xla/xla_kernels.cc): the checks of their inputs, which both run
// before any computation (the XLA kernels at compile time, on constant indices), and the computation,
// on raw buffers, sharded through a Shards callback.

#ifndef SIT_KERAS_NATIVE_WINDOW_ATTENTION_H_
#define SIT_KERAS_NATIVE_WINDOW_ATTENTION_H_

#include <algorithm>
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "kernels.h"
#include "rotation_spectra.h"

namespace sit_keras {

// The sizes every kernel checks, from qkv (3 H d, B / kLanes, T, kLanes) or the inputs (R, B / kLanes, T,
// kLanes) of a kernel (R, 3 H d), values (M, H, T^2, K) and indices (T^2, K); rows = R, 0 without a kernel.
struct AttentionSizes {
  int64_t heads, head_dim, windows, tokens, pairs, maps, terms, rows;
};

// The checks below return the op's error, naming the shape it expects, or OK. The TensorFlow kernels run
// them on their inputs, the XLA kernels on the shapes they compile for (and on constant indices).
inline Status CheckQkv(int num_heads, const TensorShape& qkv) {
  if (qkv.dims() != 4 || qkv.dim_size(0) % (3 * num_heads) != 0 || qkv.dim_size(3) != kLanes) {
    return InvalidArgument("SitWindowAttention expects qkv (3 H d, B / ", kLanes, ", T, ", kLanes, ") with H = ",
                           num_heads, "; got ", qkv.DebugString());
  }
  return Status();
}

// values (M, H, T^2, K) and indices (T^2, K), each index in [0, T^2).
inline Status CheckMap(const TensorShape& values, const TensorShape& indices, const int32_t* index,
                       const AttentionSizes& s, const char* what) {
  if (indices.dims() != 2 || indices.dim_size(0) != s.pairs || values.dims() != 4 ||
      values.dim_size(1) != s.heads || values.dim_size(2) != s.pairs ||
      values.dim_size(3) != indices.dim_size(1) || values.dim_size(0) < 1) {
    return InvalidArgument("SitWindowAttention expects ", what, " values (M, ", s.heads, ", ", s.pairs,
                           ", K) and indices (", s.pairs, ", K); got ", values.DebugString(), " and ",
                           indices.DebugString());
  }
  for (int64_t i = 0; i < indices.num_elements(); ++i) {
    if (index[i] < 0 || index[i] >= s.pairs) {
      return InvalidArgument("SitWindowAttention: ", what, " index ", index[i], " is outside [0, ", s.pairs, ")");
    }
  }
  return Status();
}

// The shapes both ops check: bias (3 H d) and graphs (3 H d, T, T) for `channels` = 3 H d and T tokens.
inline Status CheckBiasAndGraphs(int64_t channels, int64_t tokens, const TensorShape& bias,
                                 const TensorShape& graphs) {
  if (bias.dims() != 1 || bias.dim_size(0) != channels) {
    return InvalidArgument("SitWindowAttention expects bias (", channels, "); got ", bias.DebugString());
  }
  if (graphs.dims() != 3 || graphs.dim_size(0) != channels || graphs.dim_size(1) != tokens ||
      graphs.dim_size(2) != tokens) {
    return InvalidArgument("SitWindowAttention expects graphs (", channels, ", ", tokens, ", ", tokens, "); got ",
                           graphs.DebugString());
  }
  return Status();
}

// The window ops' sizes, after checking qkv and kernel: (3 H d, B / kLanes, T, kLanes) and (0, 3 H d), or
// the inputs (R, B / kLanes, T, kLanes) of a kernel (R, 3 H d); then bias, graphs, values (M, H, T^2, K)
// and indices (T^2, K), whose values are `index`.
inline Status ReadSizes(int num_heads, const TensorShape& qkv, const TensorShape& kernel, const TensorShape& bias,
                        const TensorShape& graphs, const TensorShape& values, const TensorShape& indices,
                        const int32_t* index, AttentionSizes* s) {
  const bool projected = kernel.dims() == 2 && kernel.dim_size(0) > 0;
  if (!projected) TF_RETURN_IF_ERROR(CheckQkv(num_heads, qkv));
  const int64_t channels = projected ? kernel.dim_size(1) : qkv.dim_size(0);
  if (kernel.dims() != 2 || kernel.dim_size(1) != channels || channels % (3 * num_heads) != 0 ||
      (projected && (qkv.dims() != 4 || qkv.dim_size(0) != kernel.dim_size(0) || qkv.dim_size(3) != kLanes))) {
    return InvalidArgument("SitWindowAttention expects qkv (3 H d, B / ", kLanes, ", T, ", kLanes,
                           ") and kernel (0, 3 H d), or inputs (R, B / ", kLanes, ", T, ", kLanes,
                           ") and kernel (R, 3 H d), with H = ", num_heads, "; got ", qkv.DebugString(), " and ",
                           kernel.DebugString());
  }
  TF_RETURN_IF_ERROR(CheckBiasAndGraphs(channels, qkv.dim_size(2), bias, graphs));
  s->heads = num_heads;
  s->head_dim = channels / (3 * num_heads);
  s->windows = qkv.dim_size(1) * kLanes;
  s->tokens = qkv.dim_size(2);
  s->pairs = s->tokens * s->tokens;
  s->maps = values.dims() == 4 ? values.dim_size(0) : 0;
  s->terms = indices.dims() == 2 ? indices.dim_size(1) : 0;
  s->rows = kernel.dim_size(0);
  return CheckMap(values, indices, index, *s, "the map's");
}

// SitWindowAttention's skip (W, T, H d), W <= B: W = 0 for none.
inline Status CheckSkip(const AttentionSizes& s, const TensorShape& skip) {
  const int64_t dim = s.heads * s.head_dim;
  if (skip.dims() != 3 || skip.dim_size(0) > s.windows || skip.dim_size(1) != s.tokens || skip.dim_size(2) != dim) {
    return InvalidArgument("SitWindowAttention expects skip (W <= ", s.windows, ", ", s.tokens, ", ", dim,
                           "); got ", skip.DebugString());
  }
  return Status();
}

// SitWindowAttentionGrad's other inputs, for sizes `s`: the transposed map (M, H, T^2, K') and its indices
// (T^2, K'), and dout (B, T, H d).
inline Status CheckWindowGradInputs(const AttentionSizes& s, const TensorShape& transposed_values,
                                    const TensorShape& transposed_indices, const int32_t* transposed_index,
                                    const TensorShape& dout) {
  TF_RETURN_IF_ERROR(CheckMap(transposed_values, transposed_indices, transposed_index, s, "the transposed map's"));
  if (transposed_values.dim_size(0) != s.maps) {
    return InvalidArgument("SitWindowAttentionGrad: ", s.maps, " maps but ", transposed_values.dim_size(0),
                           " transposed maps");
  }
  const int64_t dim = s.heads * s.head_dim;
  if (dout != TensorShape({s.windows, s.tokens, dim})) {
    return InvalidArgument("SitWindowAttentionGrad expects dout (", s.windows, ", ", s.tokens, ", ", dim,
                           "); got ", dout.DebugString());
  }
  return Status();
}

// The class-token ops' sizes, after checking qkv, bias, graphs and coefficients (M, 2).
inline Status ReadClassSizes(int num_heads, const TensorShape& qkv, const TensorShape& bias,
                             const TensorShape& graphs, const TensorShape& coefficients, AttentionSizes* s) {
  TF_RETURN_IF_ERROR(CheckQkv(num_heads, qkv));
  TF_RETURN_IF_ERROR(CheckBiasAndGraphs(qkv.dim_size(0), qkv.dim_size(2), bias, graphs));
  if (coefficients.dims() != 2 || coefficients.dim_size(1) != 2 || coefficients.dim_size(0) < 1) {
    return InvalidArgument("SitClassTokenAttention expects coefficients (M, 2); got ", coefficients.DebugString());
  }
  *s = AttentionSizes{num_heads, qkv.dim_size(0) / (3 * num_heads), qkv.dim_size(1) * kLanes, qkv.dim_size(2),
             qkv.dim_size(2) * qkv.dim_size(2), coefficients.dim_size(0), 0, 0};
  return Status();
}

// A class-token row's gradient dout (B, 1, D), which gradient op `op` takes.
inline Status CheckClassRowGradient(const char* op, int64_t windows, int64_t dim, const TensorShape& dout) {
  if (dout != TensorShape({windows, 1, dim})) {
    return InvalidArgument(op, " expects dout (", windows, ", 1, ", dim, "); got ", dout.DebugString());
  }
  return Status();
}

// SitClassTokenAttentionGrad's dout (B, 1, H d), for sizes `s`.
inline Status CheckClassGradInputs(const AttentionSizes& s, const TensorShape& dout) {
  return CheckClassRowGradient("SitClassTokenAttentionGrad", s.windows, s.heads * s.head_dim, dout);
}

// The quarter turn's orbits (the ops' attribute `orbits`, flattened) for T tokens.
inline Status ReadOpOrbits(const char* op, const std::vector<int64_t>& list, int64_t tokens, Orbits* orbits) {
  std::string why;
  if (!ReadOrbits(list, tokens, orbits, &why)) return InvalidArgument(op, ": ", why);
  return Status();
}

// Where the heads' q, k and v come from, and where their gradients go: the projections themselves, qkv
// (3 H d, B / kLanes, T, kLanes), with rows = 0; or the inputs x (R, B / kLanes, T, kLanes) of a
// projection by kernel (R, 3 H d) that the op applies itself, with rows = R. For a projection from a
// few channels (the first local block's R = C + 3 values a pixel), its 3 H d channels then never
// pass through memory. x, qkv and qkv's gradient dqkv are stored as S (T, or bfloat16 for T = float); dx_heads
// is the gradient of x per head (H, R, B / kLanes, T, kLanes), in T.
template <typename T, typename S = T>
struct Source {
  const S* x;
  const T* kernel;
  int64_t rows;
  S* dqkv;
  T* dx_heads;
};

// ReadHead's projection of R inputs (R fixed): each vector of the inputs is read once for all d
// features; the same sums, in the same order, as the loop over any number of rows in ReadHead.
template <typename T, int R, typename S>
void ReadProjected(const S* x, const T* w, const T* bias, int64_t row, int64_t n, int64_t d, int64_t channels,
                   T* buf) {
  for (int64_t e = 0; e < n; e += kLanes) {
    Lanes<T> xs[R];
    for (int r = 0; r < R; ++r) xs[r] = Load(x + r * row + e);
    for (int64_t f = 0; f < d; ++f) {
      Lanes<T> sum = Lanes<T>{} + bias[f];
      for (int r = 0; r < R; ++r) sum += w[r * channels + f] * xs[r];
      Store(buf + f * n + e, sum);
    }
  }
}

// One head's q, k or v (channels [channel, channel + d)) plus its bias for the kLanes windows from b:
// buf[(f T + i) kLanes + l]. A block's T x kLanes values of a channel are contiguous in qkv and x.
// The next block's values of those channels are prefetched: the ops read d runs of T kLanes values a
// row apart, 3 H d of them for a block's heads, more than the hardware prefetchers follow (on the AVX2
// host, with the prefetches of WriteHead, the class token op's forward pass took 0.88-0.92x its time
// without: docs/speed.md, "Prefetching in the kernels").
template <typename T, typename S>
void ReadHead(const Source<T, S>& src, const T* bias, const AttentionSizes& s, int64_t channel, int64_t b, T* buf) {
  const int64_t row = s.windows * s.tokens, n = s.tokens * kLanes, channels = 3 * s.heads * s.head_dim;
  const S* x = src.x + b * s.tokens;
  const T* kernel = src.kernel + channel;
  switch (src.rows) {  // the first local block's C + 3 values a pixel: 6 for RGB
    case 4: return ReadProjected<T, 4>(x, kernel, bias + channel, row, n, s.head_dim, channels, buf);
    case 5: return ReadProjected<T, 5>(x, kernel, bias + channel, row, n, s.head_dim, channels, buf);
    case 6: return ReadProjected<T, 6>(x, kernel, bias + channel, row, n, s.head_dim, channels, buf);
    case 7: return ReadProjected<T, 7>(x, kernel, bias + channel, row, n, s.head_dim, channels, buf);
    default: break;
  }
  for (int64_t f = 0; f < s.head_dim; ++f) {
    T* target = buf + f * n;
    const T offset = bias[channel + f];
    if (src.rows == 0) {
      // A feature's prefetches beside its copy: all d features' at once waited for the core's few
      // line-fill buffers (on the AMX host, most of ReadHead's time sat at the prefetches).
      if (b + kLanes < s.windows) PrefetchRun(x + (channel + f) * row + n, n, /*write=*/false);
      for (int64_t e = 0; e < n; e += kLanes) Store(target + e, Load(x + (channel + f) * row + e) + offset);
      continue;
    }
    const T* w = kernel + f;  // column channel + f of the kernel, rows `channels` apart
    for (int64_t e = 0; e < n; e += kLanes) {
      Lanes<T> sum = Lanes<T>{} + offset;
      for (int64_t r = 0; r < src.rows; ++r) sum += w[r * channels] * Load(x + r * row + e);
      Store(target + e, sum);
    }
  }
}

// WriteHead's gradients for R inputs (R fixed): into dx (rows `row` apart, set when `set`, else added to)
// and dk (R x 3 d lane-wide entries, rows 3 d kLanes apart), each vector of buf read once for all R rows;
// the same sums, in the same order, as the loop over any number of rows in WriteHead. x: rows x_row apart.
template <typename T, int R>
void WriteProjected(const T* x, int64_t x_row, const T* w, const T* buf, int64_t row, int64_t n, int64_t d,
                    int64_t dim, bool set, T* dx, T* dk) {
  for (int64_t e = 0; e < n; e += kLanes) {
    Lanes<T> acc[R];
    for (int r = 0; r < R; ++r) acc[r] = set ? Lanes<T>{} : Load(dx + r * row + e);
    for (int64_t f = 0; f < d; ++f) {
      const Lanes<T> g = Load(buf + f * n + e);
      for (int r = 0; r < R; ++r) acc[r] += w[r * 3 * dim + f] * g;
    }
    for (int r = 0; r < R; ++r) Store(dx + r * row + e, acc[r]);
  }
  for (int64_t f = 0; f < d; ++f) {
    Lanes<T> acc[R];
    for (int r = 0; r < R; ++r) acc[r] = Load(dk + (r * 3 * d + f) * kLanes);
    for (int64_t e = 0; e < n; e += kLanes) {
      const Lanes<T> g = Load(buf + f * n + e);
      for (int r = 0; r < R; ++r) acc[r] += Load(x + r * x_row + e) * g;
    }
    for (int r = 0; r < R; ++r) Store(dk + (r * 3 * d + f) * kLanes, acc[r]);
  }
}

// The gradient buf of head h's projection c (0: q, 1: k, 2: v) for the kLanes windows from b: into
// dqkv (past the caches where it Streams, else with the next block's lines prefetched for writing, as
// ReadHead's for reading); or, with a kernel, into head h's share of x's gradient, dx_heads (set by c = 0,
// then added to) and the unit's lane-wide kernel gradient dkernel (R x 3 d entries, r 3 d + c d + f).
template <typename T, typename S>
void WriteHead(const Source<T, S>& src, const AttentionSizes& s, int64_t h, int64_t c, int64_t b, const T* buf,
               T* dkernel) {
  const int64_t row = s.windows * s.tokens, n = s.tokens * kLanes, d = s.head_dim, dim = s.heads * d;
  const int64_t channel = c * dim + h * d;
  if (src.rows == 0) {
    if constexpr (!std::is_same_v<S, double>) {
      // Each run is aligned to a vector of S: it starts a whole number of blocks of T x kLanes values in.
      if (Streams(src.dqkv, 3 * dim * row)) {
        for (int64_t f = 0; f < d; ++f) {
          S* dqkv = src.dqkv + (channel + f) * row + b * s.tokens;
          for (int64_t e = 0; e < n; e += kLanes) StoreStreaming(dqkv + e, Load(buf + f * n + e));
        }
        return StreamsDone();
      }
    }
    for (int64_t f = 0; f < d; ++f) {
      S* dqkv = src.dqkv + (channel + f) * row;
      if (b + kLanes < s.windows) PrefetchRun(dqkv + (b + kLanes) * s.tokens, n, true);
      ConvertRun(buf + f * n, n, dqkv + b * s.tokens);
    }
    return;
  }
  // x's R runs of this block as T, x_row apart. bfloat16 is widened here once, n apart: the kernel gradient's
  // sums read each run d times, and widened there each time it made the op slower in bfloat16 than in float32
  // (docs/speed.md, "The first block's inputs widened once").
  const T* x0;
  int64_t x_row = row;
  if constexpr (std::is_same_v<S, T>) {
    x0 = src.x + b * s.tokens;
  } else {
    thread_local std::vector<T> widened;
    widened.resize(src.rows * n);
    for (int64_t r = 0; r < src.rows; ++r) ConvertRun(src.x + r * row + b * s.tokens, n, widened.data() + r * n);
    x0 = widened.data();
    x_row = n;
  }
  const T* w0 = src.kernel + channel;
  T* dx0 = src.dx_heads + h * src.rows * row + b * s.tokens;
  T* dk0 = dkernel + c * d * kLanes;
  switch (src.rows) {
    case 4: return WriteProjected<T, 4>(x0, x_row, w0, buf, row, n, d, dim, c == 0, dx0, dk0);
    case 5: return WriteProjected<T, 5>(x0, x_row, w0, buf, row, n, d, dim, c == 0, dx0, dk0);
    case 6: return WriteProjected<T, 6>(x0, x_row, w0, buf, row, n, d, dim, c == 0, dx0, dk0);
    case 7: return WriteProjected<T, 7>(x0, x_row, w0, buf, row, n, d, dim, c == 0, dx0, dk0);
    default: break;
  }
  for (int64_t r = 0; r < src.rows; ++r) {
    const T* x = x0 + r * x_row;
    const T* w = w0 + r * 3 * dim;
    T* dx = dx0 + r * row;
    for (int64_t e = 0; e < n; e += kLanes) {
      Lanes<T> sum = c == 0 ? Lanes<T>{} : Load(dx + e);
      for (int64_t f = 0; f < d; ++f) sum += w[f] * Load(buf + f * n + e);
      Store(dx + e, sum);
    }
    T* dk = dk0 + r * 3 * d * kLanes;
    for (int64_t f = 0; f < d; ++f) {
      Lanes<T> sum = Load(dk + f * kLanes);
      for (int64_t e = 0; e < n; e += kLanes) sum += Load(x + e) * Load(buf + f * n + e);
      Store(dk + f * kLanes, sum);
    }
  }
}

// The tokens (W, T, D) of a skip connection that SitWindowAttention adds to its first W windows' outputs.
template <typename S>
struct Skip {
  const S* tokens = nullptr;
  int64_t windows = 0;
};

// A head's (T, d) slice of out (B, T, D) for kLanes windows from b <-> buf[(f T + i) kLanes + l].
template <typename T, typename S>
void LoadTokens(const S* out, const AttentionSizes& s, int64_t h, int64_t b, T* buf) {
  const int64_t dim = s.heads * s.head_dim, t = s.tokens;
  for (int64_t i = 0; i < t; ++i) {
    RowsToLanes(out + (b * t + i) * dim + h * s.head_dim, t * dim, s.head_dim, kLanes, buf + i * kLanes, t * kLanes);
  }
}

// StoreTokens adds skip (W, T, D) to the first W windows (a block's skip connection), if given.
template <typename T, typename S>
void StoreTokens(const T* buf, const AttentionSizes& s, int64_t h, int64_t b, S* out, const Skip<S>& skip = {}) {
  const int64_t dim = s.heads * s.head_dim, t = s.tokens;
  const int add_rows = static_cast<int>(std::clamp<int64_t>(skip.windows - b, 0, kLanes));
  for (int64_t i = 0; i < t; ++i) {
    const int64_t at = (b * t + i) * dim + h * s.head_dim;
    LanesToRows(buf + i * kLanes, t * kLanes, s.head_dim, kLanes, out + at, t * dim,
                add_rows > 0 ? skip.tokens + at : nullptr, add_rows);
  }
}

// exp(x) for x <= 0 (softmax logits minus their maximum): Cephes' expf, 2^n exp(r) with
// |r| <= ln(2) / 2 and a degree-7 polynomial (about 1 ulp), in vector arithmetic.
inline Lanes<float> Exp(Lanes<float> x) {
  typedef int32_t Ints __attribute__((vector_size(kLanes * sizeof(int32_t))));
  x = x > -87.0f ? x : -87.0f;
  const Lanes<float> t = x * 1.44269504088896341f + 0.5f;
  Lanes<float> n = __builtin_convertvector(__builtin_convertvector(t, Ints), Lanes<float>);
  n = n > t ? n - 1.0f : n;  // floor(t): the conversion truncates towards zero
  const Lanes<float> r = x - n * 0.693359375f + n * 2.12194440e-4f;
  Lanes<float> y = r * 1.9875691500e-4f + 1.3981999507e-3f;
  y = y * r + 8.3334519073e-3f;
  y = y * r + 4.1665795894e-2f;
  y = y * r + 1.6666665459e-1f;
  y = y * r + 5.0000001201e-1f;
  y = y * r * r + r + 1.0f;
  return y * reinterpret_cast<Lanes<float>>((__builtin_convertvector(n, Ints) + 127) << 23);
}

// double (the tests' exact comparisons): the library's exp, lane by lane.
inline Lanes<double> Exp(Lanes<double> x) {
  for (int l = 0; l < kLanes; ++l) x[l] = std::exp(x[l]);
  return x;
}

// put(o, sum_k term(o, k)) for o < outputs. kChains outputs are summed side by side: a single
// running sum would wait on each multiply-add's latency, several keep the vector units busy.
constexpr int kChains = 8;

template <typename T, typename Term, typename Put>
inline void Sums(int64_t outputs, int64_t terms, Term term, Put put) {
  int64_t o = 0;
  for (; o + kChains <= outputs; o += kChains) {
    Lanes<T> acc[kChains] = {};
    for (int64_t k = 0; k < terms; ++k) {
      for (int c = 0; c < kChains; ++c) acc[c] += term(o + c, k);
    }
    for (int c = 0; c < kChains; ++c) put(o + c, acc[c]);
  }
  for (; o < outputs; ++o) {
    Lanes<T> acc = {};
    for (int64_t k = 0; k < terms; ++k) acc += term(o, k);
    put(o, acc);
  }
}

// put(a, b, sum_k left(a, k) right(b, k)) for a < A and b < B counted from a0 and b0: the A x B sums
// side by side in registers, each left(a, k) and right(b, k) loaded once for the whole tile (A + B
// loads for A B multiply-adds), each sum taken over k in order.
template <typename T, int A, int B, typename Left, typename Right, typename Put>
inline void Tile(int64_t a0, int64_t b0, int64_t terms, Left left, Right right, Put put) {
  Lanes<T> acc[A][B] = {};
  for (int64_t k = 0; k < terms; ++k) {
    decltype(left(a0, k)) l[A];  // a vector, or a value for every lane
    Lanes<T> r[B];
    for (int a = 0; a < A; ++a) l[a] = left(a0 + a, k);
    for (int b = 0; b < B; ++b) r[b] = right(b0 + b, k);
    for (int a = 0; a < A; ++a) {
      for (int b = 0; b < B; ++b) acc[a][b] += l[a] * r[b];
    }
  }
  for (int a = 0; a < A; ++a) {
    for (int b = 0; b < B; ++b) put(a0 + a, b0 + b, acc[a][b]);
  }
}

// The rows x cols products put(a, b, sum_k left(a, k) right(b, k)) in tiles of kTile x kTile: a T x T
// matrix streamed through kTile-row tiles is read d / kTile times instead of d times. That pays for
// a grid whose T x T lane matrices (64 B a pair) overflow the core's L2, the 8 x 8 global grid's;
// the local windows' (T = 17) fit in L1, and there the sums of kChains (Sums) measured faster.
// kTile^2 sums and 2 kTile factors fit 32 registers at 4 and 16 at 3: with 4 on an AVX2 host the ops took
// 1.03-1.19x longer forward + backward (docs/speed.md, "Eight lanes on an AVX2 host").
constexpr int kTile = kVectorRegisters >= 32 ? 4 : 3;
constexpr int64_t kMaxUntiledPairs = 1024;

inline bool Tiled(const AttentionSizes& s) { return s.pairs > kMaxUntiledPairs; }

template <typename T, int B, typename Left, typename Right, typename Put>
inline void TileRows(int64_t rows_left, int64_t a0, int64_t b0, int64_t terms, Left left, Right right, Put put) {
  switch (std::min<int64_t>(kTile, rows_left)) {
    case 1: return Tile<T, 1, B>(a0, b0, terms, left, right, put);
    case 2: return Tile<T, 2, B>(a0, b0, terms, left, right, put);
    case 3: return Tile<T, 3, B>(a0, b0, terms, left, right, put);
    default: return Tile<T, kTile, B>(a0, b0, terms, left, right, put);
  }
}

template <typename T, typename Left, typename Right, typename Put>
inline void Products(int64_t rows, int64_t cols, int64_t terms, Left left, Right right, Put put) {
  for (int64_t a = 0; a < rows; a += kTile) {
    int64_t b = 0;
    for (; b + kTile <= cols; b += kTile) TileRows<T, kTile>(rows - a, a, b, terms, left, right, put);
    for (; b < cols; ++b) TileRows<T, 1>(rows - a, a, b, terms, left, right, put);
  }
}

// S[(i T + j) kLanes + l] = sum_f q[f, i] k[f, j], per lane.
template <typename T>
void Scores(const T* q, const T* k, const AttentionSizes& s, T* scores) {
  const int64_t t = s.tokens;
  if (!Tiled(s)) {
    for (int64_t i = 0; i < t; ++i) {
      Sums<T>(
          t, s.head_dim,
          [&](int64_t j, int64_t f) { return Load(q + (f * t + i) * kLanes) * Load(k + (f * t + j) * kLanes); },
          [&](int64_t j, Lanes<T> v) { Store(scores + (i * t + j) * kLanes, v); });
    }
    return;
  }
  Products<T>(
      t, t, s.head_dim, [&](int64_t i, int64_t f) { return Load(q + (f * t + i) * kLanes); },
      [&](int64_t j, int64_t f) { return Load(k + (f * t + j) * kLanes); },
      [&](int64_t i, int64_t j, Lanes<T> v) { Store(scores + (i * t + j) * kLanes, v); });
}

// y[p] = sum_k w[p, k] x[index[p, k]] for the pairs p of one head and map.
template <typename T>
void MapRows(const T* w, const int32_t* index, int64_t pairs, int64_t terms, const T* x, T* y) {
  Sums<T>(
      pairs, terms, [&](int64_t p, int64_t k) { return w[p * terms + k] * Load(x + index[p * terms + k] * kLanes); },
      [&](int64_t p, Lanes<T> v) { Store(y + p * kLanes, v); });
}

// Softmax over j of each of `rows` rows of t logits, in place.
template <typename T>
void Softmax(int64_t rows, int64_t t, T* logits) {
  for (int64_t i = 0; i < rows; ++i) {
    T* row = logits + i * t * kLanes;
    Lanes<T> peak = Load(row);
    for (int64_t j = 1; j < t; ++j) {
      const Lanes<T> x = Load(row + j * kLanes);
      peak = x > peak ? x : peak;
    }
    Lanes<T> total = {};
    for (int64_t j = 0; j < t; ++j) {
      const Lanes<T> e = Exp(Load(row + j * kLanes) - peak);
      total += e;
      Store(row + j * kLanes, e);
    }
    const Lanes<T> inverse = T(1) / total;
    for (int64_t j = 0; j < t; ++j) Store(row + j * kLanes, Load(row + j * kLanes) * inverse);
  }
}

// out[f, a] = sum_k M[a, k] x[f, k] for x (d, T), per lane, with M = m (T, T) or, when kTransposed,
// its transpose: one loop for both, the choice made when compiled.
template <typename T, bool kTransposed>
void MatrixTimes(const T* m, const T* x, const AttentionSizes& s, T* out) {
  const int64_t t = s.tokens;
  auto entry = [&](int64_t a, int64_t k) { return Load(m + (kTransposed ? k * t + a : a * t + k) * kLanes); };
  if (!Tiled(s)) {
    for (int64_t f = 0; f < s.head_dim; ++f) {
      Sums<T>(
          t, t, [&](int64_t a, int64_t k) { return entry(a, k) * Load(x + (f * t + k) * kLanes); },
          [&](int64_t a, Lanes<T> v) { Store(out + (f * t + a) * kLanes, v); });
    }
    return;
  }
  Products<T>(
      t, s.head_dim, t, entry, [&](int64_t f, int64_t k) { return Load(x + (f * t + k) * kLanes); },
      [&](int64_t a, int64_t f, Lanes<T> v) { Store(out + (f * t + a) * kLanes, v); });
}

// out[f, i] = sum_j m[i, j] x[f, j] for m (T, T) and x (d, T), per lane.
template <typename T>
void RowTimes(const T* m, const T* x, const AttentionSizes& s, T* out) {
  MatrixTimes<T, false>(m, x, s, out);
}

// out[f, j] = sum_i m[i, j] x[f, i] for m (T, T) and x (d, T), per lane.
template <typename T>
void ColumnTimes(const T* m, const T* x, const AttentionSizes& s, T* out) {
  MatrixTimes<T, true>(m, x, s, out);
}

// The transposed graphs G_q, G_k, G_v (3 H d, T, T) of eq. 11 and, for those that are C4-invariant,
// their spectra (rotation_spectra.h). `orbit_gradients`: the graphs are built from C4-invariant classes of
// token pairs, so only the orbit sums of their gradient over the quarter turn's orbits of pairs matter (the
// gradient ops' attribute of that name; rotation_spectra.h); it needs the turn's orbits.
template <typename T>
struct Graphs {
  const T* values;
  const RotationSpectra<T>& spectra;
  bool orbit_gradients = false;
  const Orbits* gradient_orbits() const {
    return orbit_gradients && spectra.orbits().count() > 0 ? &spectra.orbits() : nullptr;
  }
};

// out[f, j] = sum_t g[f, t, j] x[f, t] for one head's d features of q, k or v from `channel` on: the
// graph mixing G_q, G_k, G_v of eq. 11 with g = the transposed graphs of those features (T, T each),
// in the spectral form where a graph has one; given `transform`, x's transform (OrbitTransform) there for
// each feature mixed in that form, laid out as x.
template <typename T>
void Mix(const Graphs<T>& graphs, int64_t channel, const T* x, const AttentionSizes& s, T* out,
         T* transform = nullptr) {
  const int64_t t = s.tokens;
  for (int64_t f = 0; f < s.head_dim; ++f) {
    const T* g = graphs.values + (channel + f) * s.pairs;
    const T* xf = x + f * t * kLanes;
    if (const Spectrum<T>* spectrum = graphs.spectra.forward(channel + f)) {
      T* kept = transform != nullptr ? transform + f * t * kLanes : nullptr;
      SpectralMix(*spectrum, graphs.spectra.orbits(), xf, out + f * t * kLanes, kept);
      continue;
    }
    Sums<T>(
        t, t, [&](int64_t j, int64_t i) { return g[i * t + j] * Load(xf + i * kLanes); },
        [&](int64_t j, Lanes<T> v) { Store(out + (f * t + j) * kLanes, v); });
  }
}

// The gradient ops take the blocks of a unit kGroup at a time (Block::slot).
constexpr int kGroup = 4;

// out[c] += sum_r factors[r] columns[r padded + c] for the N vectors c of one row: N sums side by side.
template <typename T, int N>
inline void AddRowProducts(const T* factors, const T* columns, int64_t rows, int64_t padded, T* out) {
  Lanes<T> acc[N];
  for (int c = 0; c < N; ++c) acc[c] = Load(out + c * kLanes);
  for (int64_t r = 0; r < rows; ++r) {
    const T a = factors[r];
    for (int c = 0; c < N; ++c) acc[c] += a * Load(columns + r * padded + c * kLanes);
  }
  for (int c = 0; c < N; ++c) Store(out + c * kLanes, acc[c]);
}

// Graph gradients of windows up to this many token pairs are summed lane-wide (3 d T^2 kLanes values
// a unit, which stay in cache); a larger grid's are summed over the lanes as they are formed, into
// rows of T padded to whole vectors (3 d T Tp values a unit).
constexpr int64_t kMaxLaneWidePairs = 1024;

inline bool LaneWideGraphs(const AttentionSizes& s) { return s.pairs <= kMaxLaneWidePairs; }
inline int64_t PaddedTokens(const AttentionSizes& s) { return (s.tokens + kLanes - 1) / kLanes * kLanes; }
// The values of one feature's graph gradient in a unit's accumulator.
inline int64_t GraphGradientSize(const AttentionSizes& s) {
  return LaneWideGraphs(s) ? s.pairs * kLanes : s.tokens * PaddedTokens(s);
}

// Rows [i, i + R) of a lane-wide graph gradient from S slots: dg[r, j] += sum_k x_k[r] dout_k[j], the
// R x S factors x_k[r] held in registers across the row, so each dout_k[j] is read once for R rows.
// The same sums, in the same order, as the loop over single rows in UnmixFeature.
constexpr int kGraphRows = kVectorRegisters >= 32 ? 4 : 2;  // kGraphRows x kGroup factors held in registers

template <typename T, int R, int S>
inline void AddGraphRows(const T* x, const T* dout, int64_t stride, int64_t t, int64_t i, T* dg) {
  Lanes<T> factors[R][S];
  for (int r = 0; r < R; ++r) {
    for (int k = 0; k < S; ++k) factors[r][k] = Load(x + k * stride + (i + r) * kLanes);
  }
  for (int64_t j = 0; j < t; ++j) {
    Lanes<T> d[S];
    for (int k = 0; k < S; ++k) d[k] = Load(dout + k * stride + j * kLanes);
    for (int r = 0; r < R; ++r) {
      T* a = dg + ((i + r) * t + j) * kLanes;
      Lanes<T> acc = Load(a);
      for (int k = 0; k < S; ++k) acc += factors[r][k] * d[k];
      Store(a, acc);
    }
  }
}

// The gradients of Mix for one feature f of `slots` blocks (x and dout of slot k at x + k stride,
// dout + k stride): dx[t] = sum_j g[t, j] dout[j] per block (by the graph's `spectrum` where it has one),
// and dg[t, j] += sum_k x_k[t] dout_k[j], per lane (LaneWideGraphs; summed over the lanes later) or summed
// over the lanes now, in rows of `padded` values with the help of `transposed` (slots kLanes rows of `padded`
// values, zero beyond t). Lane-wide and given `gradient_orbits`, dg holds instead the sums of the graph's
// gradient averaged over those orbits (AddOrbitGradients), from the transforms of x that Mix kept in
// x_transform (laid out as x) and of dout that the spectral dx leaves in d_transform (slot k's at
// d_transform + k t kLanes), where the graph has a spectrum.
template <typename T>
void UnmixFeature(const T* g, const Spectrum<T>* spectrum, const Orbits& orbits, const Orbits* gradient_orbits,
                  const T* x, const T* x_transform, const T* dout, int slots, int64_t stride, int64_t t,
                  bool lane_wide, int64_t padded, T* transposed, T* d_transform, T* dx, T* dg) {
  const bool orbit_sums = lane_wide && gradient_orbits != nullptr;
  if (spectrum != nullptr) {  // dx = M^T dout through the transposed graph's spectrum
    for (int k = 0; k < slots; ++k) {
      T* kept = orbit_sums ? d_transform + k * t * kLanes : nullptr;
      SpectralMix(*spectrum, orbits, dout + k * stride, dx + k * stride, kept);
    }
  } else if (lane_wide) {
    for (int k = 0; k < slots; ++k) {
      const T* dk = dout + k * stride;
      Sums<T>(
          t, t, [&](int64_t i, int64_t j) { return g[i * t + j] * Load(dk + j * kLanes); },
          [&](int64_t i, Lanes<T> v) { Store(dx + k * stride + i * kLanes, v); });
    }
  } else {  // a large grid's g, read once for all slots
    Products<T>(
        t, slots, t, [&](int64_t i, int64_t j) { return g[i * t + j]; },
        [&](int64_t k, int64_t j) { return Load(dout + k * stride + j * kLanes); },
        [&](int64_t i, int64_t k, Lanes<T> v) { Store(dx + k * stride + i * kLanes, v); });
  }
  if (orbit_sums) {
    const bool kept = spectrum != nullptr && x_transform != nullptr;
    AddOrbitGradients<T, kGroup>(*gradient_orbits, x, dout, stride, kept ? x_transform : nullptr, stride,
                                 kept ? d_transform : nullptr, t * kLanes, slots, dg);
    return;
  }
  if (lane_wide) {
    int64_t i = 0;
    if (slots == kGroup) {
      for (; i + kGraphRows <= t; i += kGraphRows) AddGraphRows<T, kGraphRows, kGroup>(x, dout, stride, t, i, dg);
    }
    for (; i < t; ++i) {
      T* dg_row = dg + i * t * kLanes;
      for (int64_t j = 0; j < t; ++j) {
        Lanes<T> acc = Load(dg_row + j * kLanes);
        for (int k = 0; k < slots; ++k) acc += Load(x + k * stride + i * kLanes) * Load(dout + k * stride + j * kLanes);
        Store(dg_row + j * kLanes, acc);
      }
    }
    return;
  }
  // transposed[(k kLanes + l) padded + j] = dout_k[j] of lane l; then each row i of dg gathers
  // x_k[i] of every lane times those rows, kChains vectors of j at a time.
  for (int k = 0; k < slots; ++k) {
    LanesToRows(dout + k * stride, kLanes, t, kLanes, transposed + k * kLanes * padded, padded);
  }
  const int64_t vectors = padded / kLanes, rows = slots * kLanes;
  T factors[kGroup * kLanes];
  for (int64_t i = 0; i < t; ++i) {
    for (int k = 0; k < slots; ++k) Store(factors + k * kLanes, Load(x + k * stride + i * kLanes));
    for (int64_t v = 0; v < vectors; v += kChains) {
      T* out = dg + i * padded + v * kLanes;
      const T* columns = transposed + v * kLanes;
      switch (std::min<int64_t>(kChains, vectors - v)) {
        case 1: AddRowProducts<T, 1>(factors, columns, rows, padded, out); break;
        case 2: AddRowProducts<T, 2>(factors, columns, rows, padded, out); break;
        case 3: AddRowProducts<T, 3>(factors, columns, rows, padded, out); break;
        case 4: AddRowProducts<T, 4>(factors, columns, rows, padded, out); break;
        case 5: AddRowProducts<T, 5>(factors, columns, rows, padded, out); break;
        case 6: AddRowProducts<T, 6>(factors, columns, rows, padded, out); break;
        case 7: AddRowProducts<T, 7>(factors, columns, rows, padded, out); break;
        default: AddRowProducts<T, kChains>(factors, columns, rows, padded, out); break;
      }
    }
  }
}

// The per-thread buffers of one block of kLanes windows of one head: the projections as read
// (raw: q, k, v one after the other) and mixed by the graphs (q, k, v), the scores, each map's
// softmax and their sum, and for the gradient the same again. The gradient ops keep the raw
// projections and the mixed ones' gradients of kGroup blocks (`slot`), so that each feature's
// graph gradient is read and written once per kGroup blocks, not once per block.
template <typename T>
struct Block {
  Block(const AttentionSizes& s, bool grad)
      : size(s.head_dim * s.tokens * kLanes), raw((grad ? kGroup : 1) * 3 * size), mixed(3 * size),
        scores(s.pairs * kLanes), attention(s.pairs * kLanes), per_map(s.maps * s.pairs * kLanes), out(size) {
    if (grad) {
      dout.resize(size);
      dmixed.resize(kGroup * 3 * size);
      draw.resize(kGroup * 3 * size);
      dattention.resize(scores.size());
      dlogits.resize(scores.size());
      dscores.resize(scores.size());
      if (!LaneWideGraphs(s)) transposed.resize(kGroup * kLanes * PaddedTokens(s), T(0));
      if (LaneWideGraphs(s)) {  // for orbit-averaged graph gradients (UnmixFeature)
        raw_transform.resize(raw.size());
        dout_transform.resize(kGroup * s.tokens * kLanes);
      }
    }
  }
  T* q() { return mixed.data(); }
  T* k() { return mixed.data() + size; }
  T* v() { return mixed.data() + 2 * size; }
  // Projection c (0: q, 1: k, 2: v) of the current slot, as read and its mixed form's gradient.
  T* raw_at(int64_t c) { return raw.data() + (slot * 3 + c) * size; }
  T* raw_transform_at(int64_t c) { return raw_transform.data() + (slot * 3 + c) * size; }
  T* dmixed_at(int64_t c) { return dmixed.data() + (slot * 3 + c) * size; }
  int64_t size;
  int slot = 0;
  std::vector<T> raw, mixed, scores, attention, per_map, out;
  std::vector<T> dout, dmixed, draw, dattention, dlogits, dscores;
  std::vector<T> transposed;  // UnmixFeature's rows of dout, for a grid too large for lane-wide graph gradients
  // Mix's transforms of the raw projections (laid out as raw) and one feature's of the mixed ones' gradients,
  // for orbit-averaged graph gradients.
  std::vector<T> raw_transform, dout_transform;
};

// Reads head h's q, k and v (plus their bias) for kLanes windows from b and mixes them by their graphs.
template <typename T, typename S>
void LoadAndMix(const Source<T, S>& src, const T* bias, const Graphs<T>& graphs, const AttentionSizes& s, int64_t h,
                int64_t b, Block<T>* blk) {
  const int64_t dim = s.heads * s.head_dim;
  for (int64_t c = 0; c < 3; ++c) {
    const int64_t channel = c * dim + h * s.head_dim;
    ReadHead(src, bias, s, channel, b, blk->raw_at(c));
    const bool keep = graphs.gradient_orbits() != nullptr && !blk->raw_transform.empty();
    Mix(graphs, channel, blk->raw_at(c), s, blk->mixed.data() + c * blk->size,
        keep ? blk->raw_transform_at(c) : nullptr);
  }
}

// The mixed projections' gradients of the blocks in slots [0, slots) (windows from starts[slot])
// back through the graphs into the source (WriteHead; dkernel: the unit's kernel gradient), the
// bias's gradient (lane-wide, head h's 3 d channels) into dbias, and the graphs' gradients into
// dgraphs (GraphGradientSize values a channel, the same channels).
template <typename T, typename S>
void UnmixAndStore(const Graphs<T>& graphs, const AttentionSizes& s, int64_t h, int slots, const int64_t* starts,
                   Block<T>* blk, const Source<T, S>& src, T* dbias, T* dgraphs, T* dkernel) {
  const int64_t dim = s.heads * s.head_dim, t = s.tokens;
  for (int64_t c = 0; c < 3; ++c) {
    const int64_t channel = c * dim + h * s.head_dim;
    for (int64_t f = 0; f < s.head_dim; ++f) {
      // Slot k's feature f of projection c starts at (k 3 + c) size + f T kLanes.
      const int64_t at = c * blk->size + f * t * kLanes, stride = 3 * blk->size;
      T* draw = blk->draw.data() + at;
      const T* x_transform = blk->raw_transform.empty() ? nullptr : blk->raw_transform.data() + at;
      UnmixFeature(graphs.values + (channel + f) * s.pairs, graphs.spectra.backward(channel + f),
                   graphs.spectra.orbits(), graphs.gradient_orbits(), blk->raw.data() + at, x_transform,
                   blk->dmixed.data() + at, slots, stride, t, LaneWideGraphs(s), PaddedTokens(s),
                   blk->transposed.data(), blk->dout_transform.data(), draw,
                   dgraphs + (c * s.head_dim + f) * GraphGradientSize(s));
      T* db = dbias + (c * s.head_dim + f) * kLanes;
      Lanes<T> sum = Load(db);
      for (int slot = 0; slot < slots; ++slot) {
        for (int64_t i = 0; i < t; ++i) sum += Load(draw + slot * stride + i * kLanes);
      }
      Store(db, sum);
    }
    for (int slot = 0; slot < slots; ++slot) {
      WriteHead(src, s, h, c, starts[slot], blk->draw.data() + (slot * 3 + c) * blk->size, dkernel);
    }
  }
}

// The sum of v's lanes, in halves: a fixed order (the same on every run) of log2(kLanes) steps,
// not a chain of kLanes - 1 dependent additions.
template <typename T>
inline T LaneSumInHalves(Lanes<T> v) {
  T x[kLanes];
  Store(x, v);
  for (int half = kLanes / 2; half >= 1; half /= 2) {
    for (int l = 0; l < half; ++l) x[l] += x[l + half];
  }
  return x[0];
}

// LaneSumInHalves of kLanes vectors at once (v is overwritten): lane k of the result is
// LaneSumInHalves(v[k]), the same additions in the same order, bit for bit. The vectors are transposed in
// registers first, so that each step of halves is one vector addition for all of them, not a store and
// kLanes - 1 scalar additions a vector (the 8 x 8 global grid's gradient op summed 101,400 vectors one by
// one, about 5% of its time on the AMD host: docs/speed.md, "Lane sums in registers").
template <typename T>
inline Lanes<T> LaneSumsInHalves(Lanes<T>* v) {
  if constexpr (kTransposeInRegisters<T>) {
    Transpose<T>(v);  // v[l] lane k = lane l of the k-th vector
    for (int half = kLanes / 2; half >= 1; half /= 2) {
      for (int l = 0; l < half; ++l) v[l] += v[l + half];
    }
    return v[0];
  } else {
    Lanes<T> totals;
    for (int k = 0; k < kLanes; ++k) totals[k] = LaneSumInHalves<T>(v[k]);
    return totals;
  }
}

// place(e, LaneSumInHalves(sum(e))) for e in [start, limit): kLanes entries at a time (LaneSumsInHalves),
// the last ones one by one; the same values either way.
template <typename T, typename Sum, typename Place>
inline void LaneTotals(int64_t start, int64_t limit, Sum sum, Place place) {
  int64_t e = start;
  for (; e + kLanes <= limit; e += kLanes) {
    Lanes<T> v[kLanes];
    for (int k = 0; k < kLanes; ++k) v[k] = sum(e + k);
    const Lanes<T> totals = LaneSumsInHalves<T>(v);
    for (int k = 0; k < kLanes; ++k) place(e + k, totals[k]);
  }
  for (; e < limit; ++e) place(e, LaneSumInHalves<T>(sum(e)));
}

// Sums the lane-wide per-chunk gradient accumulators `partial` ((heads, chunks, entries, kLanes)) into
// place(h, e, sum) for every head h and entry e, in a fixed order, on the op's threads.
template <typename T, typename Place>
void SumPartials(const Shards& shards, const T* partial, int64_t heads, int64_t chunks, int64_t entries,
                 Place place) {
  shards(heads * entries, 2 * chunks * kLanes, [&](int64_t start, int64_t limit) {
    // The entries [start, limit) of all heads, taken head by head, so that no entry needs a division.
    for (int64_t h = start / entries; h * entries < limit; ++h) {
      const T* head = partial + h * chunks * entries * kLanes;
      LaneTotals<T>(
          std::max(start - h * entries, int64_t{0}), std::min(limit - h * entries, entries),
          [&](int64_t e) {
            Lanes<T> sum = {};
            for (int64_t chunk = 0; chunk < chunks; ++chunk) sum += Load(head + (chunk * entries + e) * kLanes);
            return sum;
          },
          [&](int64_t e, T total) { place(h, e, total); });
    }
  });
}

// Chunks of a head's blocks for the gradient ops: each chunk has its own accumulators, so there are
// as few as give every thread two units (heads x chunks) to share.
inline int64_t NumChunks(int64_t threads, int64_t heads, int64_t blocks) {
  return std::max<int64_t>(1, std::min<int64_t>(blocks, (2 * threads + heads - 1) / heads));
}

// The gradients of the graph mixing, the bias and (with a kernel) the kernel, one set a unit (head h,
// chunk of its blocks): 3 d graphs of GraphGradientSize values, 3 d lane-wide bias entries and R x 3 d
// lane-wide kernel entries. Write() adds the units' sums in a fixed order, so a run's gradients do
// not depend on the threads' timing.
template <typename T>
class MixingGradients {
 public:
  // gradient_orbits: lane-wide graph gradients averaged over the quarter turn's orbits of pairs (Graphs).
  MixingGradients(const AttentionSizes& s, int64_t chunks, const Orbits* gradient_orbits)
      : s_(s), chunks_(chunks), orbits_(LaneWideGraphs(s) ? gradient_orbits : nullptr),
        graph_values_(3 * s.head_dim * GraphGradientSize(s)),
        unit_values_(graph_values_ + (1 + s.rows) * 3 * s.head_dim * kLanes),
        partial_(Uninitialized<T>(s.heads * chunks * unit_values_)) {}

  // Zeroes a unit's sums, on the thread that runs the unit (UnitGradients), not all of them on the op's.
  void Clear(int64_t unit) { std::fill(graphs(unit), graphs(unit) + unit_values_, T(0)); }
  T* graphs(int64_t unit) { return partial_.get() + unit * unit_values_; }
  T* bias(int64_t unit) { return graphs(unit) + graph_values_; }
  T* kernel(int64_t unit) { return bias(unit) + 3 * s_.head_dim * kLanes; }

  // Into dgraphs (3 H d, T, T), dbias (3 H d) and dkernel (R, 3 H d), or nullptr without a kernel. A channel
  // of a head on each thread at a time.
  void Write(const Shards& shards, T* dg, T* db, T* dkernel) const {
    const int64_t d = s_.head_dim, dim = s_.heads * d, t = s_.tokens, padded = PaddedTokens(s_);
    const bool lane_wide = LaneWideGraphs(s_);
    const int64_t cost = chunks_ * (s_.pairs + s_.rows + 1) * (lane_wide ? kLanes : 1);
    shards(s_.heads * 3 * d, cost, [&](int64_t start, int64_t limit) {
      std::vector<T> totals(orbits_ != nullptr ? OrbitGradientSize(*orbits_) : 0);
      for (int64_t u = start; u < limit; ++u) {
        const int64_t h = u / (3 * d), e = u % (3 * d);  // entry c d + f of head h is channel c D + h d + f
        const int64_t channel = (e / d) * dim + h * d + e % d;
        const T* units = partial_.get() + h * chunks_ * unit_values_;
        db[channel] = LaneTotal(units + graph_values_ + e * kLanes);
        for (int64_t r = 0; dkernel != nullptr && r < s_.rows; ++r) {
          const int64_t at = graph_values_ + (1 + r) * 3 * d * kLanes + e * kLanes;
          dkernel[r * 3 * dim + channel] = LaneTotal(units + at);
        }
        const T* graph = units + e * GraphGradientSize(s_);
        T* out = dg + channel * s_.pairs;
        const auto lane_sum = [&](int64_t p) { return ChunkSum(graph + p * kLanes); };
        if (orbits_ != nullptr) {
          LaneTotals<T>(0, totals.size(), lane_sum, [&](int64_t p, T total) { totals[p] = total; });
          OrbitGradientToGraph(*orbits_, totals.data(), t, out);
          continue;
        }
        if (lane_wide) {
          LaneTotals<T>(0, s_.pairs, lane_sum, [&](int64_t p, T total) { out[p] = total; });
          continue;
        }
        for (int64_t i = 0; i < t; ++i) {  // a row's sums over the chunks, a vector of j at a time
          int64_t j = 0;
          for (; j + kLanes <= t; j += kLanes) Store(out + i * t + j, ChunkSum(graph + i * padded + j));
          for (; j < t; ++j) {
            T sum = T(0);
            for (int64_t chunk = 0; chunk < chunks_; ++chunk) sum += graph[chunk * unit_values_ + i * padded + j];
            out[i * t + j] = sum;
          }
        }
      }
    });
  }

 private:
  // The sum over the chunks of a head of the vector at `first` (in the first chunk), in chunk order.
  Lanes<T> ChunkSum(const T* first) const {
    Lanes<T> sum = {};
    for (int64_t chunk = 0; chunk < chunks_; ++chunk) sum += Load(first + chunk * unit_values_);
    return sum;
  }
  // The sum over the chunks of a head and their lanes of one lane-wide value, in a fixed order.
  T LaneTotal(const T* first) const { return LaneSumInHalves<T>(ChunkSum(first)); }

  const AttentionSizes s_;
  const int64_t chunks_;
  const Orbits* orbits_;  // lane-wide graph gradients' only
  const int64_t graph_values_, unit_values_;
  std::unique_ptr<T[]> partial_;
};

// The blocks of one unit (head h = unit / chunks, chunk = unit % chunks of its blocks):
// backward(h, b) leaves the gradients of block b's mixed q, k and v in blk's current slot; every
// kGroup blocks, and after the last, UnmixAndStore takes them back through the graphs into the source.
template <typename T, typename S, typename Backward>
void UnitGradients(const AttentionSizes& s, int64_t unit, int64_t chunks, const Graphs<T>& graphs, Block<T>* blk,
                   MixingGradients<T>* mixing, const Source<T, S>& src, Backward backward) {
  const int64_t blocks = s.windows / kLanes, h = unit / chunks, chunk = unit % chunks;
  const int64_t last = (chunk + 1) * blocks / chunks;
  mixing->Clear(unit);
  int64_t starts[kGroup];
  for (int64_t block = chunk * blocks / chunks; block < last; ++block) {
    const int64_t b = block * kLanes;
    starts[blk->slot] = b;
    backward(h, b);
    if (++blk->slot == kGroup || block + 1 == last) {
      UnmixAndStore(graphs, s, h, blk->slot, starts, blk, src, mixing->bias(unit), mixing->graphs(unit),
                    mixing->kernel(unit));
      blk->slot = 0;
    }
  }
}

// ---------------------------------------------------------------------------------------------
// SitWindowAttention: every row of every window (a block that is not the last).

// Mixes q, k, v and forms S, each map's softmax (per_map) and their sum (attention).
template <typename T, typename S>
void Forward(const Source<T, S>& src, const T* bias, const Graphs<T>& graphs, const T* values, const int32_t* indices,
             const AttentionSizes& s, int64_t h, int64_t b, Block<T>* blk) {
  LoadAndMix(src, bias, graphs, s, h, b, blk);
  Scores(blk->q(), blk->k(), s, blk->scores.data());
  std::fill(blk->attention.begin(), blk->attention.end(), T(0));
  for (int64_t m = 0; m < s.maps; ++m) {
    T* probabilities = blk->per_map.data() + m * s.pairs * kLanes;
    MapRows(values + (m * s.heads + h) * s.pairs * s.terms, indices, s.pairs, s.terms, blk->scores.data(),
            probabilities);
    Softmax(s.tokens, s.tokens, probabilities);
    for (int64_t p = 0; p < s.pairs; ++p) {
      T* a = blk->attention.data() + p * kLanes;
      Store(a, Load(a) + Load(probabilities + p * kLanes));
    }
  }
}

// Each graph's spectra on the op's threads (rotation_spectra.h), for `orbits` of the tokens.
template <typename T>
RotationSpectra<T> SpectraOf(const Shards& shards, Orbits orbits, const T* graphs, const AttentionSizes& s,
                             bool gradients) {
  const int64_t blocks = (s.windows + kLanes - 1) / kLanes;
  return RotationSpectra<T>(shards, std::move(orbits), graphs, 3 * s.heads * s.head_dim, s.tokens, blocks,
                            gradients);
}

// The window ops' inputs: qkv (or the inputs of `kernel`; stored as S), kernel (R, 3 H d), bias, graphs, values,
// indices.
template <typename T, typename S = T>
struct WindowInputs {
  const S* qkv;
  const T *kernel, *bias, *graphs, *values;
  const int32_t* indices;
};

// SitWindowAttention: out (B, T, H d) for checked sizes `s` (ReadSizes) and orbits, plus skip (CheckSkip).
template <typename T, typename S>
void WindowAttention(const AttentionSizes& s, Orbits orbits, const WindowInputs<T, S>& in, const Skip<S>& skip,
                     S* out, const Shards& shards) {
  const int64_t blocks = (s.windows + kLanes - 1) / kLanes;
  const Source<T, S> src{in.qkv, in.kernel, s.rows, nullptr, nullptr};
  const RotationSpectra<T> spectra = SpectraOf(shards, std::move(orbits), in.graphs, s, /*gradients=*/false);
  const Graphs<T> g{in.graphs, spectra};
  auto work = [&](int64_t start, int64_t limit) {
    Block<T> blk(s, false);
    for (int64_t unit = start; unit < limit; ++unit) {
      const int64_t h = unit % s.heads, b = (unit / s.heads) * kLanes;
      Forward(src, in.bias, g, in.values, in.indices, s, h, b, &blk);
      // out[b, i, h d + f] = sum_j A[i, j] v[f, j]
      RowTimes(blk.attention.data(), blk.v(), s, blk.out.data());
      StoreTokens(blk.out.data(), s, h, b, out, skip);
    }
  };
  const int64_t cost =
      (s.pairs * (5 * s.head_dim + s.maps * (s.terms + 8)) + 3 * s.head_dim * s.tokens * (1 + s.rows)) * kLanes;
  shards(blocks * s.heads, cost, work);
}

// SitWindowAttentionGrad's outputs: the gradients of qkv (or of the kernel's inputs), the kernel, the bias,
// the graphs and the values, each of its input's shape (dqkv's stored as S).
template <typename T, typename S = T>
struct WindowGradients {
  S* dqkv;
  T *dkernel, *dbias, *dgraphs, *dvalues;
};

// SitWindowAttentionGrad for checked sizes (ReadSizes, CheckWindowGradInputs): dout (B, T, H d), the
// transposed map's values (M, H, T^2, K') and indices (T^2, K'); `threads` the shards' threads. With
// `orbit_gradients` (and orbits), the graphs' gradient averaged over the quarter turn's orbits of pairs.
template <typename T, typename S>
void WindowAttentionGrad(const AttentionSizes& s, Orbits orbits, bool orbit_gradients, const S* dout_data,
                         const WindowInputs<T, S>& in, const T* wt, const int32_t* index_t, int64_t t_terms,
                         const WindowGradients<T, S>& out, int64_t threads, const Shards& shards) {
  const int64_t t = s.tokens, d = s.head_dim;
  const int64_t blocks = (s.windows + kLanes - 1) / kLanes;
  // Each head's blocks are split into chunks with their own lane-wide accumulators of the
  // gradients of the map's values and of the graphs, added in a fixed order afterwards: the same
  // result on every run.
  const int64_t chunks = NumChunks(threads, s.heads, blocks);
  const int64_t value_entries = s.maps * s.pairs * s.terms;
  const std::unique_ptr<T[]> value_partial = Uninitialized<T>(s.heads * chunks * value_entries * kLanes);
  const RotationSpectra<T> spectra = SpectraOf(shards, std::move(orbits), in.graphs, s, /*gradients=*/true);
  const Graphs<T> g{in.graphs, spectra, orbit_gradients};
  MixingGradients<T> mixing(s, chunks, g.gradient_orbits());
  const T* w = in.values;
  const int32_t* index = in.indices;
  // With a kernel, each head's share of the inputs' gradient, summed over the heads at the end.
  const int64_t size = (s.rows > 0 ? s.rows : 3 * s.heads * d) * s.windows * t;  // of qkv
  // Not zeroed: WriteHead sets each head's share (projection c = 0) before it adds to it.
  const std::unique_ptr<T[]> per_head = Uninitialized<T>(s.rows > 0 ? s.heads * size : 0);
  const Source<T, S> src{in.qkv, in.kernel, s.rows, out.dqkv, per_head.get()};
  auto work = [&](int64_t start, int64_t limit) {
    Block<T> blk(s, true);
    for (int64_t unit = start; unit < limit; ++unit) {
      T* value_acc = value_partial.get() + unit * value_entries * kLanes;
      std::fill(value_acc, value_acc + value_entries * kLanes, T(0));
      UnitGradients(s, unit, chunks, g, &blk, &mixing, src, [&](int64_t h, int64_t b) {
        Forward(src, in.bias, g, w, index, s, h, b, &blk);
        // dO[(f T + i) kLanes + l], laid out as q, k and v.
        LoadTokens(dout_data, s, h, b, blk.dout.data());
        T* dq = blk.dmixed_at(0);
        T* dk = blk.dmixed_at(1);
        T* dv = blk.dmixed_at(2);
        // dA[i, j] = sum_f dO[i, f] v[f, j];  dv[f, j] = sum_i A[i, j] dO[i, f]
        Scores(blk.dout.data(), blk.v(), s, blk.dattention.data());
        ColumnTimes(blk.attention.data(), blk.dout.data(), s, dv);
        std::fill(blk.dscores.begin(), blk.dscores.end(), T(0));
        for (int64_t m = 0; m < s.maps; ++m) {
          const T* probabilities = blk.per_map.data() + m * s.pairs * kLanes;
          // Softmax backward: dL[i, j] = P[i, j] (dA[i, j] - sum_j' P[i, j'] dA[i, j']).
          for (int64_t i = 0; i < t; ++i) {
            const T* p_row = probabilities + i * t * kLanes;
            const T* da = blk.dattention.data() + i * t * kLanes;
            Lanes<T> dot = {};
            for (int64_t j = 0; j < t; ++j) dot += Load(p_row + j * kLanes) * Load(da + j * kLanes);
            T* dl = blk.dlogits.data() + i * t * kLanes;
            for (int64_t j = 0; j < t; ++j) {
              Store(dl + j * kLanes, Load(p_row + j * kLanes) * (Load(da + j * kLanes) - dot));
            }
          }
          // dvalues[m, h, p, k] += dL[p] S[index[p, k]];  dS += the transposed map of dL. The sizes and
          // buffers in locals: each store could alias `s` and `blk` for the compiler, which then reloaded
          // them every term.
          const int64_t pairs = s.pairs, terms = s.terms;
          const T* scores = blk.scores.data();
          const T* dlogits = blk.dlogits.data();
          T* acc_m = value_acc + m * pairs * terms * kLanes;
          for (int64_t p = 0; p < pairs; ++p) {
            const Lanes<T> dl = Load(dlogits + p * kLanes);
            const int32_t* row = index + p * terms;
            T* a = acc_m + p * terms * kLanes;
            for (int64_t k = 0; k < terms; ++k) {
              Store(a + k * kLanes, Load(a + k * kLanes) + dl * Load(scores + row[k] * kLanes));
            }
          }
          const T* wt_m = wt + (m * s.heads + h) * s.pairs * t_terms;
          Sums<T>(
              s.pairs, t_terms,
              [&](int64_t c, int64_t k) {
                return wt_m[c * t_terms + k] * Load(blk.dlogits.data() + index_t[c * t_terms + k] * kLanes);
              },
              [&](int64_t c, Lanes<T> v) {
                T* ds = blk.dscores.data() + c * kLanes;
                Store(ds, Load(ds) + v);
              });
        }
        // dq[f, i] = sum_j dS[i, j] k[f, j];  dk[f, j] = sum_i dS[i, j] q[f, i]
        RowTimes(blk.dscores.data(), blk.k(), s, dq);
        ColumnTimes(blk.dscores.data(), blk.q(), s, dk);
      });
    }
  };
  const int64_t cost = (blocks / chunks + 1) *
                       (s.pairs * (14 * d + s.maps * (2 * s.terms + t_terms + 20)) + 6 * d * t * (1 + s.rows)) *
                       kLanes;
  shards(s.heads * chunks, cost, work);
  if (s.rows > 0) {  // the heads' shares of the inputs' gradient, in head order, a vector at a time
    shards(size, s.heads, [&](int64_t start, int64_t limit) {
      int64_t e = start;
      for (; e + kLanes <= limit; e += kLanes) {
        Lanes<T> sum = Load(per_head.get() + e);
        for (int64_t h = 1; h < s.heads; ++h) sum += Load(per_head.get() + h * size + e);
        Store(out.dqkv + e, sum);
      }
      for (; e < limit; ++e) {
        T sum = per_head[e];
        for (int64_t h = 1; h < s.heads; ++h) sum += per_head[h * size + e];
        out.dqkv[e] = static_cast<S>(sum);
      }
    });
  }
  const int64_t map_entries = s.pairs * s.terms;
  SumPartials(shards, value_partial.get(), s.heads, chunks, value_entries, [&](int64_t h, int64_t e, T sum) {
    int64_t m = 0;  // e's map: a comparison or two (M <= 2), not a division an entry
    while (e >= (m + 1) * map_entries) ++m;
    out.dvalues[(m * s.heads + h) * map_entries + e - m * map_entries] = sum;
  });
  mixing.Write(shards, out.dgraphs, out.dbias, out.dkernel);
}

// ---------------------------------------------------------------------------------------------
// SitClassTokenAttention: the class token's row alone (a last, token-only block). Its logits
// for map m are coefficients[m, 0] q_0 . k_j + coefficients[m, 1] q_j . k_0 (scale and sign
// included), the attention is the sum of their softmaxes over j, out[b, 0, h d + f] = sum_j a_j v[f, j].

// The class token's attention over its T tokens from its scores row[j] (its query, token j's key) and
// column[j] (token j's query, its key), T lanes each: a[j] = sum_m softmax_j(c[m, 0] row[j] + c[m, 1]
// column[j]) over the M maps, each map's softmax kept in per_map (M x T lanes) for the gradient.
template <typename T>
void ClassAttention(const T* row, const T* column, const T* coefficients, int64_t maps, int64_t t, T* per_map,
                    T* attention) {
  std::fill(attention, attention + t * kLanes, T(0));
  for (int64_t m = 0; m < maps; ++m) {
    T* probabilities = per_map + m * t * kLanes;
    for (int64_t j = 0; j < t; ++j) {
      Store(probabilities + j * kLanes,
            coefficients[2 * m] * Load(row + j * kLanes) + coefficients[2 * m + 1] * Load(column + j * kLanes));
    }
    Softmax(1, t, probabilities);
    for (int64_t j = 0; j < t; ++j) {
      Store(attention + j * kLanes, Load(attention + j * kLanes) + Load(probabilities + j * kLanes));
    }
  }
}

// ClassAttention's gradient: from the attention's gradient da (T lanes), through each map's softmax
// (per_map), the gradients of the scores row and column (T lanes each).
template <typename T>
void ClassAttentionGradient(const T* per_map, const T* da, const T* coefficients, int64_t maps, int64_t t, T* drow,
                            T* dcolumn) {
  std::fill(drow, drow + t * kLanes, T(0));
  std::fill(dcolumn, dcolumn + t * kLanes, T(0));
  for (int64_t m = 0; m < maps; ++m) {
    const T* p = per_map + m * t * kLanes;
    Lanes<T> dot = {};
    for (int64_t j = 0; j < t; ++j) dot += Load(p + j * kLanes) * Load(da + j * kLanes);
    for (int64_t j = 0; j < t; ++j) {
      const Lanes<T> dl = Load(p + j * kLanes) * (Load(da + j * kLanes) - dot);
      Store(drow + j * kLanes, Load(drow + j * kLanes) + coefficients[2 * m] * dl);
      Store(dcolumn + j * kLanes, Load(dcolumn + j * kLanes) + coefficients[2 * m + 1] * dl);
    }
  }
}

// row[j] = q_0 . k_j and column[j] = q_j . k_0 of the mixed q, k; logits and softmaxes per map.
template <typename T, typename S>
void ClassForward(const Source<T, S>& src, const T* bias, const Graphs<T>& graphs, const T* coefficients,
                  const AttentionSizes& s, int64_t maps, int64_t h, int64_t b, Block<T>* blk) {
  const int64_t t = s.tokens;
  LoadAndMix(src, bias, graphs, s, h, b, blk);
  T* row = blk->scores.data();
  T* column = row + t * kLanes;
  for (int64_t j = 0; j < t; ++j) {
    Lanes<T> r = {}, c = {};
    for (int64_t f = 0; f < s.head_dim; ++f) {
      r += Load(blk->q() + f * t * kLanes) * Load(blk->k() + (f * t + j) * kLanes);
      c += Load(blk->q() + (f * t + j) * kLanes) * Load(blk->k() + f * t * kLanes);
    }
    Store(row + j * kLanes, r);
    Store(column + j * kLanes, c);
  }
  ClassAttention(row, column, coefficients, maps, t, blk->per_map.data(), blk->attention.data());
}

// SitClassTokenAttention: out (B, 1, H d) for checked sizes `s` (ReadClassSizes) and orbits.
template <typename T, typename S>
void ClassTokenAttention(const AttentionSizes& s, Orbits orbits, const S* qkv, const T* bias, const T* graphs,
                         const T* coefficient, S* out, const Shards& shards) {
  const int64_t dim = s.heads * s.head_dim, t = s.tokens;
  const int64_t blocks = (s.windows + kLanes - 1) / kLanes;
  const Source<T, S> src{qkv, nullptr, 0, nullptr, nullptr};
  const RotationSpectra<T> spectra = SpectraOf(shards, std::move(orbits), graphs, s, /*gradients=*/false);
  const Graphs<T> g{graphs, spectra};
  auto work = [&](int64_t start, int64_t limit) {
    Block<T> blk(s, false);
    for (int64_t unit = start; unit < limit; ++unit) {
      const int64_t h = unit % s.heads, b = (unit / s.heads) * kLanes;
      ClassForward(src, bias, g, coefficient, s, s.maps, h, b, &blk);
      for (int64_t f = 0; f < s.head_dim; ++f) {
        Lanes<T> acc = {};
        for (int64_t j = 0; j < t; ++j) {
          acc += Load(blk.attention.data() + j * kLanes) * Load(blk.v() + (f * t + j) * kLanes);
        }
        Store(blk.out.data() + f * kLanes, acc);
      }
      LanesToRows(blk.out.data(), kLanes, s.head_dim, kLanes, out + b * dim + h * s.head_dim, dim);
    }
  };
  const int64_t cost = (3 * s.head_dim * s.pairs + 4 * s.head_dim * t + s.maps * 12 * t) * kLanes;
  shards(blocks * s.heads, cost, work);
}

// SitClassTokenAttentionGrad for checked sizes (ReadClassSizes, CheckClassGradInputs): the gradients of
// qkv, the bias and the graphs from dout (B, 1, H d); `threads` the shards' threads; `orbit_gradients` as
// in WindowAttentionGrad.
template <typename T, typename S>
void ClassTokenAttentionGrad(const AttentionSizes& s, Orbits orbits, bool orbit_gradients, const S* dout_data,
                             const S* qkv, const T* bias, const T* graphs, const T* coefficient, S* dqkv, T* dbias,
                             T* dgraphs, int64_t threads, const Shards& shards) {
  const int64_t dim = s.heads * s.head_dim, t = s.tokens, d = s.head_dim;
  const int64_t blocks = (s.windows + kLanes - 1) / kLanes;
  const int64_t chunks = NumChunks(threads, s.heads, blocks);
  const Source<T, S> src{qkv, nullptr, 0, dqkv, nullptr};
  const RotationSpectra<T> spectra = SpectraOf(shards, std::move(orbits), graphs, s, /*gradients=*/true);
  const Graphs<T> g{graphs, spectra, orbit_gradients};
  MixingGradients<T> mixing(s, chunks, g.gradient_orbits());
  auto work = [&](int64_t start, int64_t limit) {
    Block<T> blk(s, true);
    for (int64_t unit = start; unit < limit; ++unit) {
      UnitGradients(s, unit, chunks, g, &blk, &mixing, src, [&](int64_t h, int64_t b) {
        ClassForward(src, bias, g, coefficient, s, s.maps, h, b, &blk);
        RowsToLanes(dout_data + b * dim + h * d, dim, d, kLanes, blk.dout.data(), kLanes);  // dO[f]
        T* dq = blk.dmixed_at(0);
        T* dk = blk.dmixed_at(1);
        T* dv = blk.dmixed_at(2);
        // dv[f, j] = a_j dO[f];  da_j = sum_f dO[f] v[f, j]
        T* da = blk.dattention.data();
        for (int64_t j = 0; j < t; ++j) {
          const Lanes<T> a = Load(blk.attention.data() + j * kLanes);
          Lanes<T> acc = {};
          for (int64_t f = 0; f < d; ++f) {
            const Lanes<T> o = Load(blk.dout.data() + f * kLanes);
            Store(dv + (f * t + j) * kLanes, a * o);
            acc += o * Load(blk.v() + (f * t + j) * kLanes);
          }
          Store(da + j * kLanes, acc);
        }
        // Per map, the softmax backward; drow / dcolumn: the gradients of q_0 . k_j and q_j . k_0.
        T* drow = blk.dscores.data();
        T* dcolumn = drow + t * kLanes;
        ClassAttentionGradient(blk.per_map.data(), da, coefficient, s.maps, t, drow, dcolumn);
        // row_j = q_0 . k_j:  dq_0 += sum_j drow_j k_j, dk_j += drow_j q_0;
        // column_j = q_j . k_0:  dq_j += dcolumn_j k_0, dk_0 += sum_j dcolumn_j q_j.
        for (int64_t f = 0; f < d; ++f) {
          const Lanes<T> q0 = Load(blk.q() + f * t * kLanes), k0 = Load(blk.k() + f * t * kLanes);
          Lanes<T> dq0 = {}, dk0 = {};
          for (int64_t j = 0; j < t; ++j) {
            const Lanes<T> r = Load(drow + j * kLanes), c = Load(dcolumn + j * kLanes);
            const Lanes<T> qj = Load(blk.q() + (f * t + j) * kLanes), kj = Load(blk.k() + (f * t + j) * kLanes);
            dq0 += r * kj;
            dk0 += c * qj;
            Store(dq + (f * t + j) * kLanes, c * k0);
            Store(dk + (f * t + j) * kLanes, r * q0);
          }
          Store(dq + f * t * kLanes, Load(dq + f * t * kLanes) + dq0);
          Store(dk + f * t * kLanes, Load(dk + f * t * kLanes) + dk0);
        }
      });
    }
  };
  const int64_t cost = (blocks / chunks + 1) * (9 * d * s.pairs + 12 * d * t + s.maps * 12 * t) * kLanes;
  shards(s.heads * chunks, cost, work);
  mixing.Write(shards, dgraphs, dbias, nullptr);
}

}  // namespace sit_keras

#endif  // SIT_KERAS_NATIVE_WINDOW_ATTENTION_H_
