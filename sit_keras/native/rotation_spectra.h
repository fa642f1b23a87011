// The graph mixing of a C4-invariant graph in the quarter-turn's Fourier basis (SiT paper eq. 11).
//
// A GSA layer whose symmetry holds the quarter turn rho of a square grid shares its graphs' weights
// over rho's orbits of token pairs, so each graph M (out = M x, T x T) is C4-invariant:
// M[rho i, rho j] = M[i, j]. Cut the tokens into rho's orbits (t, rho t, rho^2 t, rho^3 t) and its
// fixed tokens (the class token, an odd grid's centre). Between two orbits o and p, M is then a
// circulant, M[o_m, p_n] = g_op((n - m) mod 4), which the 4-point Fourier transform diagonalises:
//
//   per input orbit p:  a = x0 + x1 + x2 + x3,  b = x0 - x1 + x2 - x3,  c = x0 - x2,  d = x1 - x3;
//   per output orbit o: A = sum_p k1 a_p + sum_f M[o_0, f] x_f,  B = sum_p k2 b_p,
//                       P = sum_p (u c_p + v d_p),  Q = sum_p (u d_p - v c_p),
//                       (out_o0, out_o1, out_o2, out_o3) = (A + B + P, A - B + Q, A + B - P, A - B - Q);
//   per fixed token f:  out_f = sum_p M[f, p_0] a_p + sum_f' M[f, f'] x_f',
//
// with k1 = (g0 + g1 + g2 + g3) / 4, k2 = (g0 - g1 + g2 - g3) / 4, u = (g0 - g2) / 2, v = (g1 - g3) / 2
// (the circulant's eigenvalues at 1, -1 and i). For O orbits and F fixed tokens that is
// (O + F)^2 + 5 O^2 multiply-adds a feature instead of T^2 = (4 O + F)^2: 105 instead of 289 for a
// 4 x 4 window and its class token, 1,569 instead of 4,225 for the 8 x 8 grid and its class token.
// The same sums in exact arithmetic; in floating point they round differently from the dense ones.
//
// The ops are told rho's orbits (attribute `orbits`) and check each graph before using its spectrum:
// a graph that is not C4-invariant, value for value, is mixed densely.
#ifndef SIT_KERAS_NATIVE_ROTATION_SPECTRA_H_
#define SIT_KERAS_NATIVE_ROTATION_SPECTRA_H_

#include <algorithm>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "kernels.h"

namespace sit_keras {

// The tokens of a window as rho's orbits (4 tokens each, in rotation order) and its fixed tokens.
struct Orbits {
  std::vector<int64_t> orbit;  // 4 O tokens: orbit o is orbit[4 o], ..., orbit[4 o + 3]
  std::vector<int64_t> fixed;  // the F tokens of no orbit, in increasing order
  int64_t count() const { return static_cast<int64_t>(orbit.size()) / 4; }
};

// Orbits from the attribute's flat list for `tokens` tokens; false (with `why`) for a list that is not
// disjoint quadruples of tokens below `tokens`.
inline bool ReadOrbits(const std::vector<int64_t>& flat, int64_t tokens, Orbits* orbits, std::string* why) {
  if (flat.size() % 4 != 0) {
    *why = "orbits must list whole orbits of 4 tokens";
    return false;
  }
  std::vector<bool> used(tokens, false);
  for (const int64_t token : flat) {
    if (token < 0 || token >= tokens || used[token]) {
      *why = "orbits must name distinct tokens below " + std::to_string(tokens);
      return false;
    }
    used[token] = true;
  }
  orbits->orbit = flat;
  orbits->fixed.clear();
  for (int64_t token = 0; token < tokens; ++token) {
    if (!used[token]) orbits->fixed.push_back(token);
  }
  return true;
}

// The spectrum of one graph as an operator out = M x, for Mix (M[j, i] = g[i T + j]) or for its
// gradient (M[i, j] = g[i T + j]). Layout: per orbit pair (o, p), {k1, k2, u, v} at 4 (o O + p); then
// M[o_0, f] (O x F), M[f, p_0] (F x O) and M[f, f'] (F x F).
template <typename T>
struct Spectrum {
  std::vector<T> values;
};

template <typename T, typename Entry>
void FillSpectrum(const Orbits& orbits, Entry m, Spectrum<T>* spectrum) {
  const int64_t n = orbits.count(), f_count = static_cast<int64_t>(orbits.fixed.size());
  std::vector<T>& c = spectrum->values;
  c.assign(4 * n * n + 2 * n * f_count + f_count * f_count, T(0));
  for (int64_t o = 0; o < n; ++o) {
    const int64_t out = orbits.orbit[4 * o];
    for (int64_t p = 0; p < n; ++p) {
      T g[4];
      for (int k = 0; k < 4; ++k) g[k] = m(out, orbits.orbit[4 * p + k]);
      T* e = c.data() + 4 * (o * n + p);
      e[0] = (g[0] + g[1] + g[2] + g[3]) / T(4);
      e[1] = (g[0] - g[1] + g[2] - g[3]) / T(4);
      e[2] = (g[0] - g[2]) / T(2);
      e[3] = (g[1] - g[3]) / T(2);
    }
  }
  T* orbit_from_fixed = c.data() + 4 * n * n;
  T* fixed_from_orbit = orbit_from_fixed + n * f_count;
  T* fixed_from_fixed = fixed_from_orbit + f_count * n;
  for (int64_t f = 0; f < f_count; ++f) {
    const int64_t token = orbits.fixed[f];
    for (int64_t o = 0; o < n; ++o) {
      orbit_from_fixed[o * f_count + f] = m(orbits.orbit[4 * o], token);
      fixed_from_orbit[f * n + o] = m(token, orbits.orbit[4 * o]);
    }
    for (int64_t e = 0; e < f_count; ++e) fixed_from_fixed[f * f_count + e] = m(token, orbits.fixed[e]);
  }
}

// The most tokens SpectralMix takes (its stack buffers): the largest grid the ops serve, 8 x 8 and a class token.
constexpr int64_t kMaxSpectralTokens = 65;

// The fewest blocks of kLanes windows whose mixing pays for checking and transforming the graphs, a
// gathered read of every graph: in its spectral form the Procgen SiT's 8 x 8 global grid at batch 96
// took 0.90x as fast forward and 0.94x forward + backward as 6 blocks of 16 lanes (AVX-512), and
// 0.98-1.01x forward and 1.05-1.10x forward + backward as 12 blocks of 8 lanes (AVX2); its local
// windows' ops (384 blocks) 1.05-1.08x as fast forward + backward (benchmarks/native_ops.py;
// docs/speed.md).
constexpr int64_t kMinSpectralBlocks = 12;

// Each graph's spectra (for Mix and, with `gradients`, for its gradient), or none where a graph is not
// C4-invariant: computed once an op call, on the op's threads.
template <typename T>
class RotationSpectra {
 public:
  // Graphs (channels, T, T) as the ops take them: g[i T + j] = M[j, i] of Mix; `blocks` of kLanes windows.
  RotationSpectra(const Shards& shards, Orbits orbits, const T* graphs, int64_t channels, int64_t tokens,
                  int64_t blocks, bool gradients)
      : orbits_(std::move(orbits)), forward_(channels), backward_(channels), usable_(channels, false) {
    if (orbits_.count() == 0 || tokens > kMaxSpectralTokens || blocks < kMinSpectralBlocks) return;
    // turned[i T + j] = rho(i) T + rho(j): a graph is C4-invariant when it equals itself read through
    // `turned` (rho generates C4), which one pass over its pairs checks.
    std::vector<int64_t> turn(tokens);
    for (int64_t token = 0; token < tokens; ++token) turn[token] = token;
    for (int64_t o = 0; o < orbits_.count(); ++o) {
      for (int k = 0; k < 4; ++k) turn[orbits_.orbit[4 * o + k]] = orbits_.orbit[4 * o + (k + 1) % 4];
    }
    const int64_t pairs = tokens * tokens;
    std::vector<int32_t> turned(pairs);
    for (int64_t i = 0; i < tokens; ++i) {
      for (int64_t j = 0; j < tokens; ++j) turned[i * tokens + j] = static_cast<int32_t>(turn[i] * tokens + turn[j]);
    }
    shards(channels, 8 * pairs, [&](int64_t start, int64_t limit) {
      for (int64_t channel = start; channel < limit; ++channel) {
        const T* g = graphs + channel * pairs;
        int mismatches = 0;  // counted, not and-ed: the loop then compiles to vector gathers and compares
        for (int64_t p = 0; p < pairs; ++p) mismatches += g[turned[p]] != g[p];
        if (mismatches != 0) continue;
        FillSpectrum<T>(orbits_, [&](int64_t j, int64_t i) { return g[i * tokens + j]; }, &forward_[channel]);
        if (gradients) {
          FillSpectrum<T>(orbits_, [&](int64_t i, int64_t j) { return g[i * tokens + j]; }, &backward_[channel]);
        }
        usable_[channel] = true;
      }
    });
  }

  // The spectrum of channel's graph for Mix (backward: for its gradient), or nullptr for a dense graph.
  const Spectrum<T>* forward(int64_t channel) const { return usable_[channel] ? &forward_[channel] : nullptr; }
  const Spectrum<T>* backward(int64_t channel) const { return usable_[channel] ? &backward_[channel] : nullptr; }
  const Orbits& orbits() const { return orbits_; }

 private:
  const Orbits orbits_;
  std::vector<Spectrum<T>> forward_, backward_;
  std::vector<char> usable_;  // not vector<bool>: the threads write neighbouring channels
};

// The transform's sums for output orbits [o0, o0 + R): R x 4 sums side by side. N > 0 and F >= 0: the
// number of orbits and of fixed tokens, known when compiled (the loops then unroll); else read.
template <typename T, int R, int N, int F>
inline void SpectralRows(const T* pairs, const T* orbit_from_fixed, const Orbits& orbits, int64_t o0,
                         const Lanes<T>* a, const Lanes<T>* b, const Lanes<T>* c, const Lanes<T>* d,
                         const Lanes<T>* xf, T* out) {
  const int64_t n = N > 0 ? N : orbits.count();
  const int64_t f_count = F >= 0 ? F : static_cast<int64_t>(orbits.fixed.size());
  Lanes<T> sa[R] = {}, sb[R] = {}, sp[R] = {}, sq[R] = {};
  for (int64_t p = 0; p < n; ++p) {
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) {
      const T* e = pairs + 4 * ((o0 + r) * n + p);
      // One multiply-add each: written as sums of two products, they would take a multiply and an add more.
      sa[r] += e[0] * a[p];
      sb[r] += e[1] * b[p];
      sp[r] += e[2] * c[p];
      sp[r] += e[3] * d[p];
      sq[r] += e[2] * d[p];
      sq[r] -= e[3] * c[p];
    }
  }
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r) {
    const int64_t o = o0 + r;
    for (int64_t f = 0; f < f_count; ++f) sa[r] += orbit_from_fixed[o * f_count + f] * xf[f];
    const int64_t* t = orbits.orbit.data() + 4 * o;
    const Lanes<T> plus = sa[r] + sb[r], minus = sa[r] - sb[r];
    Store(out + t[0] * kLanes, plus + sp[r]);
    Store(out + t[1] * kLanes, minus + sq[r]);
    Store(out + t[2] * kLanes, plus - sp[r]);
    Store(out + t[3] * kLanes, minus - sq[r]);
  }
}

template <typename T, int N, int F>
void SpectralMixOf(const Spectrum<T>& spectrum, const Orbits& orbits, const T* x, T* out, T* transform) {
  constexpr int64_t kMaxOrbits = kMaxSpectralTokens / 4;
  const int64_t n = N > 0 ? N : orbits.count();
  const int64_t f_count = F >= 0 ? F : static_cast<int64_t>(orbits.fixed.size());
  Lanes<T> a[kMaxOrbits], b[kMaxOrbits], c[kMaxOrbits], d[kMaxOrbits], xf[kMaxSpectralTokens];
  for (int64_t p = 0; p < n; ++p) {
    const int64_t* t = orbits.orbit.data() + 4 * p;
    const Lanes<T> x0 = Load(x + t[0] * kLanes), x1 = Load(x + t[1] * kLanes), x2 = Load(x + t[2] * kLanes),
                   x3 = Load(x + t[3] * kLanes);
    const Lanes<T> even = x0 + x2, odd = x1 + x3;
    a[p] = even + odd;
    b[p] = even - odd;
    c[p] = x0 - x2;
    d[p] = x1 - x3;
  }
  for (int64_t f = 0; f < f_count; ++f) xf[f] = Load(x + orbits.fixed[f] * kLanes);
  if (transform != nullptr) {  // kept for the graph's gradient (AddOrbitGradients)
    for (int64_t p = 0; p < n; ++p) {
      Store(transform + p * kLanes, a[p]);
      Store(transform + (n + p) * kLanes, b[p]);
      Store(transform + (2 * n + p) * kLanes, c[p]);
      Store(transform + (3 * n + p) * kLanes, d[p]);
    }
    for (int64_t f = 0; f < f_count; ++f) Store(transform + (4 * n + f) * kLanes, xf[f]);
  }
  const T* pairs = spectrum.values.data();
  const T* orbit_from_fixed = pairs + 4 * n * n;
  const T* fixed_from_orbit = orbit_from_fixed + n * f_count;
  const T* fixed_from_fixed = fixed_from_orbit + f_count * n;
  for (int64_t o0 = 0; o0 < n; o0 += 4) {
    switch (std::min<int64_t>(4, n - o0)) {
      case 1: SpectralRows<T, 1, N, F>(pairs, orbit_from_fixed, orbits, o0, a, b, c, d, xf, out); break;
      case 2: SpectralRows<T, 2, N, F>(pairs, orbit_from_fixed, orbits, o0, a, b, c, d, xf, out); break;
      case 3: SpectralRows<T, 3, N, F>(pairs, orbit_from_fixed, orbits, o0, a, b, c, d, xf, out); break;
      default: SpectralRows<T, 4, N, F>(pairs, orbit_from_fixed, orbits, o0, a, b, c, d, xf, out); break;
    }
  }
  for (int64_t f = 0; f < f_count; ++f) {
    Lanes<T> sum = {};
    for (int64_t p = 0; p < n; ++p) sum += fixed_from_orbit[f * n + p] * a[p];
    for (int64_t e = 0; e < f_count; ++e) sum += fixed_from_fixed[f * f_count + e] * xf[e];
    Store(out + orbits.fixed[f] * kLanes, sum);
  }
}

// out[j] = sum_i M[j, i] x[i] for one feature of kLanes windows (token i's vector at x + i kLanes), M
// given by its spectrum: the transform above, four output orbits at a time; and, given `transform`, x's
// transform there (OrbitTransform's layout). A 4 x 4 window and its class token (4 orbits, 1 fixed token)
// has its own unrolled copy.
template <typename T>
void SpectralMix(const Spectrum<T>& spectrum, const Orbits& orbits, const T* x, T* out, T* transform = nullptr) {
  if (orbits.count() == 4 && orbits.fixed.size() == 1) {
    return SpectralMixOf<T, 4, 1>(spectrum, orbits, x, out, transform);
  }
  SpectralMixOf<T, 0, -1>(spectrum, orbits, x, out, transform);
}

// ---------------------------------------------------------------------------------------------
// The gradient of graphs built from C4-invariant classes of token pairs (graphs.quarter_turn_orbits):
// a class's gradient is the sum of the graph's gradient over the class's pairs, each class a union of
// rho's orbits of pairs, so the graph's gradient is needed only up to its orbit sums. The ops then
// return it averaged over those orbits, each pair's value the mean of its orbit's, for the windows whose
// graph gradients they sum lane-wide (up to 1024 token pairs; a larger grid's dense sums have the same
// orbit sums, and averaging them would only cost time):
//
//   dg[i, j] = sum_w x_w[i] dout_w[j]   ->   (1 / 4) sum_r dg[rho^r i, rho^r j]   (sum over windows w).
//
// Between orbits o and p that mean is a correlation over the turn, dg[o_m, p_n] = C_op((n - m) mod 4) / 4
// with C(s) = sum_w sum_r x[o_r] dout[p_(r + s)], which the 4-point Fourier transform (a, b, c, d as in
// SpectralMixOf, of x and of dout) turns into four sums of products:
//
//   A = sum_w a_x a_d,  B = sum_w b_x b_d,  P = sum_w (c_x c_d + d_x d_d),  Q = sum_w (d_x c_d - c_x d_d),
//   (C(0), C(1), C(2), C(3)) = (A + B + 2 P, A - B - 2 Q, A + B - 2 P, A - B + 2 Q) / 4;
//
// a fixed token f's pairs with orbit p average to sum_w x_f a_d,p / 4 (and orbit o's with f to
// sum_w a_x,o dout_f / 4), two fixed tokens' pair is its own orbit. That is 6 O^2 + 2 O F + F^2
// multiply-adds a feature and window instead of T^2: 105 instead of 289 for a 4 x 4 window and its class
// token. Layout of the sums (OrbitGradientSize entries): {A, B, P, Q} of orbit pair (o, p) at 4 (o O + p);
// then sum a_x,o dout_f (O x F), sum x_f a_d,p (F x O) and sum x_f dout_f' (F x F).

// The sums' entries for `orbits`.
inline int64_t OrbitGradientSize(const Orbits& orbits) {
  const int64_t n = orbits.count(), f_count = static_cast<int64_t>(orbits.fixed.size());
  return 4 * n * n + 2 * n * f_count + f_count * f_count;
}

// The most tokens AddOrbitGradients takes (its stack buffers): the ops' lane-wide graph gradients' windows.
constexpr int64_t kMaxOrbitGradientTokens = 32;

// out = a[n], b[n], c[n], d[n] of the orbits (as SpectralMixOf) and then the fixed tokens' values, for one
// feature of kLanes windows (token i's vector at x + i kLanes; entry e's at out + e kLanes).
template <typename T>
inline void OrbitTransform(const Orbits& orbits, int64_t n, int64_t f_count, const T* x, T* out) {
  for (int64_t p = 0; p < n; ++p) {
    const int64_t* t = orbits.orbit.data() + 4 * p;
    const Lanes<T> x0 = Load(x + t[0] * kLanes), x1 = Load(x + t[1] * kLanes), x2 = Load(x + t[2] * kLanes),
                   x3 = Load(x + t[3] * kLanes);
    const Lanes<T> even = x0 + x2, odd = x1 + x3;
    Store(out + p * kLanes, even + odd);
    Store(out + (n + p) * kLanes, even - odd);
    Store(out + (2 * n + p) * kLanes, x0 - x2);
    Store(out + (3 * n + p) * kLanes, x1 - x3);
  }
  for (int64_t f = 0; f < f_count; ++f) Store(out + (4 * n + f) * kLanes, Load(x + orbits.fixed[f] * kLanes));
}

// sums[e + i] += sum_k u_k[o] v_k[p0 + i] for the P orbits p0 + i (e = sums + (4 (o O + p0 + i) + entry)
// kLanes; slot k's transforms at u + k us, v + k vs): the P sums held in registers over the slots, so each
// u_k[o] is read once for P orbits.
template <typename T, int P>
inline void AddOuterRow(const T* u, int64_t us, const T* v, int64_t vs, int slots, T* e) {
  Lanes<T> acc[P];
  for (int i = 0; i < P; ++i) acc[i] = Load(e + 4 * i * kLanes);
  for (int k = 0; k < slots; ++k) {
    const Lanes<T> x = Load(u + k * us);
    for (int i = 0; i < P; ++i) acc[i] += x * Load(v + k * vs + i * kLanes);
  }
  for (int i = 0; i < P; ++i) Store(e + 4 * i * kLanes, acc[i]);
}

// P and Q of orbit o with the P orbits from p0: P += c_x c_d + d_x d_d, Q += d_x c_d - c_x d_d, the 2 P sums
// in registers over the slots (c, d of x at u, u + n kLanes; of dout at v, v + n kLanes).
template <typename T, int P>
inline void AddRotationRow(const T* u, int64_t us, const T* v, int64_t vs, int64_t n, int slots, T* e) {
  Lanes<T> re[P], im[P];
  for (int i = 0; i < P; ++i) {
    re[i] = Load(e + (4 * i + 2) * kLanes);
    im[i] = Load(e + (4 * i + 3) * kLanes);
  }
  for (int k = 0; k < slots; ++k) {
    const Lanes<T> c = Load(u + k * us), d = Load(u + k * us + n * kLanes);
    for (int i = 0; i < P; ++i) {
      const Lanes<T> vc = Load(v + k * vs + i * kLanes), vd = Load(v + k * vs + (n + i) * kLanes);
      re[i] += c * vc;
      re[i] += d * vd;
      im[i] += d * vc;
      im[i] -= c * vd;
    }
  }
  for (int i = 0; i < P; ++i) {
    Store(e + (4 * i + 2) * kLanes, re[i]);
    Store(e + (4 * i + 3) * kLanes, im[i]);
  }
}

// Rows of four orbits p at a time (fewer for the last): Row<R>(p0) for R = min(4, n - p0).
template <typename Row>
inline void InFours(int64_t n, Row row) {
  int64_t p0 = 0;
  for (; p0 + 4 <= n; p0 += 4) row(std::integral_constant<int, 4>{}, p0);
  switch (n - p0) {
    case 3: row(std::integral_constant<int, 3>{}, p0); break;
    case 2: row(std::integral_constant<int, 2>{}, p0); break;
    case 1: row(std::integral_constant<int, 1>{}, p0); break;
    default: break;
  }
}

// sums += the lane-wide sums above of `slots` blocks for one feature, from the transforms (OrbitTransform)
// of x and dout, slot k's at tx + k xs and td + k ds. N > 0 and F >= 0: the number of orbits and of fixed
// tokens, known when compiled; else read.
template <typename T, int N, int F>
void AddOrbitProductsOf(const Orbits& orbits, const T* tx, int64_t xs, const T* td, int64_t ds, int slots, T* sums) {
  const int64_t n = N > 0 ? N : orbits.count();
  const int64_t f_count = F >= 0 ? F : static_cast<int64_t>(orbits.fixed.size());
  for (int64_t o = 0; o < n; ++o) {
    InFours(n, [&](auto rows, int64_t p0) {
      constexpr int R = decltype(rows)::value;
      T* e = sums + 4 * (o * n + p0) * kLanes;
      AddOuterRow<T, R>(tx + o * kLanes, xs, td + p0 * kLanes, ds, slots, e);                            // A
      AddOuterRow<T, R>(tx + (n + o) * kLanes, xs, td + (n + p0) * kLanes, ds, slots, e + kLanes);       // B
      AddRotationRow<T, R>(tx + (2 * n + o) * kLanes, xs, td + (2 * n + p0) * kLanes, ds, n, slots, e);  // P, Q
    });
  }
  T* orbit_fixed = sums + 4 * n * n * kLanes;
  T* fixed_orbit = orbit_fixed + n * f_count * kLanes;
  T* fixed_fixed = fixed_orbit + f_count * n * kLanes;
  const T* xf = tx + 4 * n * kLanes;  // the fixed tokens' values
  const T* df = td + 4 * n * kLanes;
  for (int64_t f = 0; f < f_count; ++f) {
    for (int64_t o = 0; o < n; ++o) {
      Lanes<T> to = Load(orbit_fixed + (o * f_count + f) * kLanes), from = Load(fixed_orbit + (f * n + o) * kLanes);
      for (int k = 0; k < slots; ++k) {
        to += Load(tx + k * xs + o * kLanes) * Load(df + k * ds + f * kLanes);
        from += Load(xf + k * xs + f * kLanes) * Load(td + k * ds + o * kLanes);
      }
      Store(orbit_fixed + (o * f_count + f) * kLanes, to);
      Store(fixed_orbit + (f * n + o) * kLanes, from);
    }
    for (int64_t e = 0; e < f_count; ++e) {
      Lanes<T> sum = Load(fixed_fixed + (f * f_count + e) * kLanes);
      for (int k = 0; k < slots; ++k) sum += Load(xf + k * xs + f * kLanes) * Load(df + k * ds + e * kLanes);
      Store(fixed_fixed + (f * f_count + e) * kLanes, sum);
    }
  }
}

// sums += the lane-wide sums above of `slots` (at most S) blocks' x and dout (slot k's at x + k stride,
// dout + k stride) for one feature of a window of at most kMaxOrbitGradientTokens tokens; their transforms
// taken from tx and td where both are given (slot k's at tx + k xs, td + k ds), else formed here. A 4 x 4
// window and its class token has its own unrolled copy.
template <typename T, int S>
void AddOrbitGradients(const Orbits& orbits, const T* x, const T* dout, int64_t stride, const T* tx, int64_t xs,
                       const T* td, int64_t ds, int slots, T* sums) {
  alignas(64) T formed[2 * S * kMaxOrbitGradientTokens * kLanes];
  if (tx == nullptr || td == nullptr) {
    const int64_t n = orbits.count(), f_count = static_cast<int64_t>(orbits.fixed.size());
    xs = ds = kMaxOrbitGradientTokens * kLanes;
    T* x_formed = formed;
    T* d_formed = formed + S * xs;
    for (int k = 0; k < slots; ++k) {
      OrbitTransform(orbits, n, f_count, x + k * stride, x_formed + k * xs);
      OrbitTransform(orbits, n, f_count, dout + k * stride, d_formed + k * ds);
    }
    tx = x_formed;
    td = d_formed;
  }
  if (orbits.count() == 4 && orbits.fixed.size() == 1) {
    return AddOrbitProductsOf<T, 4, 1>(orbits, tx, xs, td, ds, slots, sums);
  }
  AddOrbitProductsOf<T, 0, -1>(orbits, tx, xs, td, ds, slots, sums);
}

// The T x T graph gradient g (g[i T + j]) from the totals of the sums above.
template <typename T>
void OrbitGradientToGraph(const Orbits& orbits, const T* total, int64_t tokens, T* g) {
  const int64_t n = orbits.count(), f_count = static_cast<int64_t>(orbits.fixed.size());
  for (int64_t o = 0; o < n; ++o) {
    for (int64_t p = 0; p < n; ++p) {
      const T* e = total + 4 * (o * n + p);
      // C(s) / 4 for the shift s = (n - m) mod 4 from orbit o's token m to orbit p's token n.
      const T shift[4] = {(e[0] + e[1] + 2 * e[2]) / 16, (e[0] - e[1] - 2 * e[3]) / 16,
                          (e[0] + e[1] - 2 * e[2]) / 16, (e[0] - e[1] + 2 * e[3]) / 16};
      for (int m = 0; m < 4; ++m) {
        for (int k = 0; k < 4; ++k) g[orbits.orbit[4 * o + m] * tokens + orbits.orbit[4 * p + k]] = shift[(k - m) & 3];
      }
    }
  }
  const T* orbit_fixed = total + 4 * n * n;
  const T* fixed_orbit = orbit_fixed + n * f_count;
  const T* fixed_fixed = fixed_orbit + f_count * n;
  for (int64_t f = 0; f < f_count; ++f) {
    const int64_t token = orbits.fixed[f];
    for (int64_t o = 0; o < n; ++o) {
      for (int m = 0; m < 4; ++m) {
        g[orbits.orbit[4 * o + m] * tokens + token] = orbit_fixed[o * f_count + f] / 4;
        g[token * tokens + orbits.orbit[4 * o + m]] = fixed_orbit[f * n + o] / 4;
      }
    }
    for (int64_t e = 0; e < f_count; ++e) g[token * tokens + orbits.fixed[e]] = fixed_fixed[f * f_count + e];
  }
}

}  // namespace sit_keras

#endif  // SIT_KERAS_NATIVE_ROTATION_SPECTRA_H_
