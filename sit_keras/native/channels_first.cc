// The GSA layers' channels-first projection (sit_keras.layers.channels_first): a small kernel applied to
// tokens kept channels first, L = windows x tokens columns (about 10^5 in the SiT's train step).
//
// SitChannelsFirstProjection: kernel (R, N), x (R, L) -> y (N, L),  y[n, l] = sum_r kernel[r, n] x[r, l]
//   (tf.matmul(kernel, x, transpose_a=True)).
// SitChannelsFirstProjectionKernelGrad: dy (N, L), x (R, L) -> dkernel (R, N),
//   dkernel[r, n] = sum_l x[r, l] dy[n, l]  (tf.matmul(x, dy, transpose_b=True)).
// The input's gradient, kernel dy, is a plain matmul that TensorFlow runs fast (sit_keras.native).
//
// Both walk the long axis in column tiles of x copied to a contiguous buffer first. The rows of x lie L
// values apart, and for the SiT's L (a multiple of 1024) that is a multiple of 4 KiB: read in place, the
// rows of a tile fall into the same few sets of the L1 cache and evict each other (the kernel gradient
// reads a few rows of dy at a time, fewer than the cache's ways, in place). The copies pad the last tile
// with zeros, so the arithmetic runs on whole vectors only. On an AVX2 host the two ops took 0.58x and,
// with TensorFlow's matmul for the input's gradient, 0.77x the time of TensorFlow's matmuls
// (benchmarks/native_ops.py, docs/speed.md "The projection in a native op").
// The kernel gradient's sums are kept per unit of a fixed partition of the columns and the units' sums
// added in a fixed order: the same bits on every run, whatever the threads.

#include <algorithm>
#include <vector>

#include "kernels.h"

namespace sit_keras {
namespace {

REGISTER_OP("SitChannelsFirstProjection")
    .Input("kernel: T")
    .Input("x: T")
    .Output("y: T")
    .Attr("T: {float, double}")
    .SetShapeFn([](InferenceContext* c) {
      ShapeHandle kernel, x;
      TF_RETURN_IF_ERROR(c->WithRank(c->input(0), 2, &kernel));
      TF_RETURN_IF_ERROR(c->WithRank(c->input(1), 2, &x));
      DimensionHandle rows;
      TF_RETURN_IF_ERROR(c->Merge(c->Dim(kernel, 0), c->Dim(x, 0), &rows));
      c->set_output(0, c->Matrix(c->Dim(kernel, 1), c->Dim(x, 1)));
      return Status();
    });

REGISTER_OP("SitChannelsFirstProjectionKernelGrad")
    .Input("dy: T")
    .Input("x: T")
    .Output("dkernel: T")
    .Attr("T: {float, double}")
    .SetShapeFn([](InferenceContext* c) {
      ShapeHandle dy, x;
      TF_RETURN_IF_ERROR(c->WithRank(c->input(0), 2, &dy));
      TF_RETURN_IF_ERROR(c->WithRank(c->input(1), 2, &x));
      DimensionHandle columns;
      TF_RETURN_IF_ERROR(c->Merge(c->Dim(dy, 1), c->Dim(x, 1), &columns));
      c->set_output(0, c->Matrix(c->Dim(x, 0), c->Dim(dy, 0)));
      return Status();
    });

// Register tiles: a tile's sums fill the vector registers but for the vectors loaded beside them.
// Projection: kOutputRows rows of y side by side over kColumnVectors vectors of columns.
constexpr int kOutputRows = kVectorRegisters >= 32 ? 4 : 6;
constexpr int kColumnVectors = kVectorRegisters >= 32 ? 6 : 2;
// Column tiles a thread copies at a time (about 512 columns): a row tile's stores then run along 2 KiB of
// each output row rather than jumping between rows every few vectors.
constexpr int64_t kProjectionTiles = 512 / (kColumnVectors * kLanes);
// Kernel gradient: kGradRows rows of x against kGradOutputs rows of dy.
constexpr int kGradRows = kVectorRegisters >= 32 ? 4 : 2;
constexpr int kGradOutputs = 6;
// Columns of x the kernel gradient copies at a time (they stay in the L2 cache; dy is read in place), and
// the units of its fixed partition of the columns (fewer for fewer columns): the threads' work.
constexpr int64_t kGradColumns = 512;
constexpr int64_t kGradUnits = 64;

bool CheckRank2(OpKernelContext* context, const char* op, const char* what, const Tensor& t) {
  if (t.dims() != 2) {
    context->CtxFailure(InvalidArgument(op, " expects ", what, " of rank 2; got ", t.shape().DebugString()));
    return false;
  }
  return true;
}

// dst[r width + c] = src[r columns + first + c] for the columns first + c < columns, zero for the rest of
// the width: `rows` rows of a column tile, contiguous and zero-padded.
template <typename T>
void CopyColumns(const T* src, int64_t rows, int64_t columns, int64_t first, int64_t width, T* dst) {
  const int64_t valid = std::min(width, columns - first);
  for (int64_t r = 0; r < rows; ++r) {
    const T* from = src + r * columns + first;
    T* to = dst + r * width;
    std::copy(from, from + valid, to);
    std::fill(to + valid, to + width, T(0));
  }
}

// packed[(t R + r) kOutputRows + i] = kernel[r, t kOutputRows + i], zero past the N columns: each output
// row tile's kernel values in the order the tile reads them.
template <typename T>
std::vector<T> PackKernel(const T* kernel, int64_t rows, int64_t outputs) {
  const int64_t tiles = (outputs + kOutputRows - 1) / kOutputRows;
  std::vector<T> packed(tiles * rows * kOutputRows, T(0));
  for (int64_t t = 0; t < tiles; ++t) {
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t i = 0; i < kOutputRows && t * kOutputRows + i < outputs; ++i) {
        packed[(t * rows + r) * kOutputRows + i] = kernel[r * outputs + t * kOutputRows + i];
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

template <typename T>
class ChannelsFirstProjectionOp : public OpKernel {
 public:
  explicit ChannelsFirstProjectionOp(OpKernelConstruction* context) : OpKernel(context) {}

  void Compute(OpKernelContext* context) override {
    const Tensor& kernel = context->input(0);
    const Tensor& x = context->input(1);
    const char* op = "SitChannelsFirstProjection";
    if (!CheckRank2(context, op, "a kernel (R, N)", kernel) || !CheckRank2(context, op, "x (R, L)", x)) {
      return;
    }
    OP_REQUIRES(context, kernel.dim_size(0) == x.dim_size(0),
                InvalidArgument(op, " expects a kernel (R, N) and x (R, L) with the same R; got ",
                                kernel.shape().DebugString(), " and ", x.shape().DebugString()));
    const int64_t rows = x.dim_size(0), columns = x.dim_size(1), outputs = kernel.dim_size(1);
    Tensor* y = nullptr;
    OP_REQUIRES_OK(context, context->allocate_output(0, TensorShape({outputs, columns}), &y));
    T* y_data = y->flat<T>().data();
    if (outputs == 0 || columns == 0) return;
    if (rows == 0) {
      std::fill(y_data, y_data + y->NumElements(), T(0));
      return;
    }
    const std::vector<T> packed = PackKernel(kernel.flat<T>().data(), rows, outputs);
    const T* x_data = x.flat<T>().data();
    constexpr int64_t width = kColumnVectors * kLanes, chunk = kProjectionTiles * width;
    const int64_t chunks = (columns + chunk - 1) / chunk;
    const int64_t row_tiles = (outputs + kOutputRows - 1) / kOutputRows;
    RunShards(context, chunks, 2 * rows * outputs * chunk, [&](int64_t start, int64_t limit) {
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
            const T* w = packed.data() + t * rows * kOutputRows;
            ProjectTile(w, buffer.data() + tile * width, rows, chunk, sums);
            for (int64_t i = 0; i < kOutputRows && t * kOutputRows + i < outputs; ++i) {
              T* target = y_data + (t * kOutputRows + i) * columns + left;
              if (valid == width) {
                for (int v = 0; v < kColumnVectors; ++v) Store(target + v * kLanes, sums[i][v]);
              } else {  // the last tile: its valid columns only
                for (int v = 0; v < kColumnVectors; ++v) Store(values + v * kLanes, sums[i][v]);
                std::copy(values, values + valid, target);
              }
            }
          }
        }
      }
    });
  }
};

// The lanes of v added in lane order.
template <typename T>
inline T LaneSum(Lanes<T> v) {
  T sum = v[0];
  for (int l = 1; l < kLanes; ++l) sum += v[l];
  return sum;
}

// sums[r outputs + n] += sum_c x[r width + c] dy[n stride + c] for A rows r of x from r0 and B rows n of dy
// from n0, over `width` columns (a multiple of kLanes).
template <typename T, int A, int B>
inline void GradTile(const T* x, const T* dy, int64_t stride, int64_t r0, int64_t n0, int64_t width,
                     int64_t outputs, T* sums) {
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
    for (int b = 0; b < B; ++b) sums[(r0 + a) * outputs + n0 + b] += LaneSum<T>(acc[a][b]);
  }
}

// GradTile over every row of x (A at a time, the last ones one at a time) against B rows of dy from n0,
// whose values then stay in the L1 cache while x's pass. B rows, fewer than the cache's ways, can be read
// in place whatever their stride.
template <typename T, int B>
void GradColumns(const T* x, const T* dy, int64_t stride, int64_t rows, int64_t n0, int64_t width,
                 int64_t outputs, T* sums) {
  int64_t r0 = 0;
  for (; r0 + kGradRows <= rows; r0 += kGradRows) {
    GradTile<T, kGradRows, B>(x, dy, stride, r0, n0, width, outputs, sums);
  }
  for (; r0 < rows; ++r0) GradTile<T, 1, B>(x, dy, stride, r0, n0, width, outputs, sums);
}

template <typename T>
class ChannelsFirstProjectionKernelGradOp : public OpKernel {
 public:
  explicit ChannelsFirstProjectionKernelGradOp(OpKernelConstruction* context) : OpKernel(context) {}

  void Compute(OpKernelContext* context) override {
    const Tensor& dy = context->input(0);
    const Tensor& x = context->input(1);
    const char* op = "SitChannelsFirstProjectionKernelGrad";
    if (!CheckRank2(context, op, "dy (N, L)", dy) || !CheckRank2(context, op, "x (R, L)", x)) return;
    OP_REQUIRES(context, dy.dim_size(1) == x.dim_size(1),
                InvalidArgument(op, " expects dy (N, L) and x (R, L) with the same L; got ",
                                dy.shape().DebugString(), " and ", x.shape().DebugString()));
    const int64_t rows = x.dim_size(0), columns = x.dim_size(1), outputs = dy.dim_size(0);
    Tensor* dkernel = nullptr;
    OP_REQUIRES_OK(context, context->allocate_output(0, TensorShape({rows, outputs}), &dkernel));
    T* dkernel_data = dkernel->flat<T>().data();
    const int64_t size = rows * outputs;
    std::fill(dkernel_data, dkernel_data + size, T(0));
    if (size == 0 || columns == 0) return;
    const T* x_data = x.flat<T>().data();
    const T* dy_data = dy.flat<T>().data();
    // Unit u sums the column chunks [u chunks / units, (u + 1) chunks / units) into its own (R, N) sums.
    const int64_t chunks = (columns + kGradColumns - 1) / kGradColumns, units = std::min(chunks, kGradUnits);
    std::vector<T> sums(units * size, T(0));
    const int64_t cost = 2 * size * kGradColumns * (chunks / units + 1);
    RunShards(context, units, cost, [&](int64_t start, int64_t limit) {
      std::vector<T> xs(rows * kGradColumns), last;
      if (columns % kGradColumns != 0) last.resize(outputs * kGradColumns);
      for (int64_t u = start; u < limit; ++u) {
        T* unit_sums = sums.data() + u * size;
        for (int64_t chunk = u * chunks / units; chunk < (u + 1) * chunks / units; ++chunk) {
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
          int64_t n0 = 0;
          for (; n0 + kGradOutputs <= outputs; n0 += kGradOutputs) {
            GradColumns<T, kGradOutputs>(xs.data(), g, stride, rows, n0, kGradColumns, outputs, unit_sums);
          }
          for (; n0 < outputs; ++n0) {
            GradColumns<T, 1>(xs.data(), g, stride, rows, n0, kGradColumns, outputs, unit_sums);
          }
        }
      }
    });
    for (int64_t u = 0; u < units; ++u) {
      const T* unit_sums = sums.data() + u * size;
      for (int64_t e = 0; e < size; ++e) dkernel_data[e] += unit_sums[e];
    }
  }
};

#define REGISTER(T)                                                                                     \
  REGISTER_KERNEL_BUILDER(Name("SitChannelsFirstProjection").Device(DEVICE_CPU).TypeConstraint<T>("T"), \
                          ChannelsFirstProjectionOp<T>);                                                \
  REGISTER_KERNEL_BUILDER(                                                                              \
      Name("SitChannelsFirstProjectionKernelGrad").Device(DEVICE_CPU).TypeConstraint<T>("T"),           \
      ChannelsFirstProjectionKernelGradOp<T>);
REGISTER(float);
REGISTER(double);
#undef REGISTER

}  // namespace
}  // namespace sit_keras
