// The SiT's stem (sit_keras.layers.GraphConv2D): a depth-wise convolution of stride 1 with "same"
// padding and an odd k x k kernel, on few channels (an image's).
//
// SitDepthwiseConv: x (B, H, W, C), kernel (k, k, C) -> y (B, H, W, C), with r = k / 2,
//   y[b, h, w, c] = sum_{i, j < k} kernel[i, j, c] x[b, h + i - r, w + j - r, c],  x zero outside the image
// (tf.nn.depthwise_conv2d with padding "SAME", strides 1 and a depth multiplier of 1).
// SitDepthwiseConvKernelGrad: dy (B, H, W, C), x, kernel -> dkernel (k, k, C),
//   dkernel[i, j, c] = sum_{b, h, w} dy[b, h, w, c] x[b, h + i - r, w + j - r, c].
// The input's gradient is SitDepthwiseConv of dy with the kernel turned by 180 degrees
// (sit_keras.native.depthwise_conv), a separate op that a train step, whose input is an image, prunes.
//
// An image row of W pixels is W C contiguous values, and along it the kernel's value for channel c repeats
// with period C; so each row is convolved as k x k multiply-adds of whole runs of values (one per tap,
// the input run shifted by (j - r) C values, its ends cut where the tap reads outside the image) against
// the tap's kernel values laid out along the run ("taps": kernel[i, j, s mod C] at s). The loops run over
// W C values, not over C = 3 channels, and the compiler vectorises them. TensorFlow's CPU kernels copy each
// window of the input into a buffer first, which on 3 channels costs more than the arithmetic.
// The kernel gradient's sums over the rows are kept per unit of a fixed partition of the B H rows, and the
// units' sums added in a fixed order: the same bits on every run, whatever the threads.

#include <algorithm>
#include <string>
#include <vector>

#include "kernels.h"

namespace sit_keras {
namespace {

// The kernel's shape (k, k, C), both sides equal and C the input's channels, in a shape function.
Status ConvShapes(InferenceContext* c, ShapeHandle* x, ShapeHandle* kernel) {
  TF_RETURN_IF_ERROR(c->WithRank(c->input(0), 4, x));
  TF_RETURN_IF_ERROR(c->WithRank(c->input(1), 3, kernel));
  DimensionHandle side, channels;
  TF_RETURN_IF_ERROR(c->Merge(c->Dim(*kernel, 0), c->Dim(*kernel, 1), &side));
  TF_RETURN_IF_ERROR(c->Merge(c->Dim(*kernel, 2), c->Dim(*x, 3), &channels));
  return Status();
}

REGISTER_OP("SitDepthwiseConv")
    .Input("x: T")
    .Input("kernel: T")
    .Output("y: T")
    .Attr("T: {float, double}")
    .SetShapeFn([](InferenceContext* c) {
      ShapeHandle x, kernel;
      TF_RETURN_IF_ERROR(ConvShapes(c, &x, &kernel));
      c->set_output(0, x);
      return Status();
    });

REGISTER_OP("SitDepthwiseConvKernelGrad")
    .Input("dy: T")
    .Input("x: T")
    .Input("kernel: T")
    .Output("dkernel: T")
    .Attr("T: {float, double}")
    .SetShapeFn([](InferenceContext* c) {
      ShapeHandle dy, x, kernel;
      TF_RETURN_IF_ERROR(c->WithRank(c->input(0), 4, &dy));
      // As ConvShapes, with x and the kernel its inputs 1 and 2, and dy of x's shape.
      TF_RETURN_IF_ERROR(c->WithRank(c->input(1), 4, &x));
      TF_RETURN_IF_ERROR(c->WithRank(c->input(2), 3, &kernel));
      TF_RETURN_IF_ERROR(c->Merge(dy, x, &x));
      DimensionHandle side, channels;
      TF_RETURN_IF_ERROR(c->Merge(c->Dim(kernel, 0), c->Dim(kernel, 1), &side));
      TF_RETURN_IF_ERROR(c->Merge(c->Dim(kernel, 2), c->Dim(x, 3), &channels));
      c->set_output(0, kernel);
      return Status();
    });

// Values of a row laid out for the taps at most: a multiple of C near 256 (the whole row when shorter), so
// that the taps (k k of them) and a unit's kernel-gradient sums stay in the L1 cache whatever W.
constexpr int64_t kRunValues = 256;
// Units of the kernel gradient's fixed partition of the rows (fewer for fewer rows): the threads' work.
constexpr int64_t kGradientUnits = 32;

struct ConvSizes {
  ConvSizes(const Tensor& x, const Tensor& kernel)
      : images(x.dim_size(0)), height(x.dim_size(1)), width(x.dim_size(2)), channels(x.dim_size(3)),
        side(kernel.dim_size(0)), radius(side / 2), row(width * channels), rows(images * height),
        run(channels == 0 ? 0 : std::min(row, channels * std::max<int64_t>(1, kRunValues / channels))) {}
  const int64_t images, height, width, channels, side, radius, row, rows, run;
  bool empty() const { return rows == 0 || row == 0; }
};

bool CheckShapes(OpKernelContext* context, const char* op, const Tensor& x, const Tensor& kernel) {
  const bool fits = x.dims() == 4 && kernel.dims() == 3 && kernel.dim_size(0) == kernel.dim_size(1) &&
                    kernel.dim_size(0) % 2 == 1 && kernel.dim_size(2) == x.dim_size(3);
  if (!fits) {
    const std::string channels = x.dims() == 4 ? std::to_string(x.dim_size(3)) : "C";
    context->CtxFailure(InvalidArgument(op, " expects x (B, H, W, C) and a kernel (k, k, ", channels,
                                        ") with k odd; got ", x.shape().DebugString(), " and ",
                                        kernel.shape().DebugString()));
    return false;
  }
  return true;
}

// taps[(i k + j) run + s] = kernel[i, j, s mod C] for s < run.
template <typename T>
std::vector<T> Taps(const T* kernel, const ConvSizes& n) {
  const int64_t taps_count = n.side * n.side;
  std::vector<T> taps(taps_count * n.run);
  for (int64_t tap = 0; tap < taps_count; ++tap) {
    for (int64_t s = 0; s < n.run; ++s) taps[tap * n.run + s] = kernel[tap * n.channels + s % n.channels];
  }
  return taps;
}

// out[t] += a[t] b[t], t < n: the one loop of the ops, vectorised by the compiler.
template <typename T>
inline void MultiplyAdd(T* __restrict out, const T* __restrict a, const T* __restrict b, int64_t n) {
  for (int64_t t = 0; t < n; ++t) out[t] += a[t] * b[t];
}

// Calls tap(i, j, first, last, start) for each tap (i, j) and each part [first, last) of the output row h
// (values t of the row) whose input row h + i - r and values t + (j - r) C lie inside the image; start is
// the first value of the part's run of `run` values, so the tap's value for t is taps[... + t - start].
template <typename Tap>
inline void ForEachTap(const ConvSizes& n, int64_t h, Tap tap) {
  for (int64_t i = 0; i < n.side; ++i) {
    const int64_t source = h + i - n.radius;
    if (source < 0 || source >= n.height) continue;
    for (int64_t j = 0; j < n.side; ++j) {
      const int64_t shift = (j - n.radius) * n.channels;
      const int64_t low = std::max<int64_t>(0, -shift), high = std::min(n.row, n.row - shift);
      for (int64_t start = 0; start < n.row; start += n.run) {
        const int64_t first = std::max(low, start), last = std::min(high, start + n.run);
        if (first < last) tap(i, j, first, last, start);
      }
    }
  }
}

// Row h of the convolution of the image `in` (H rows of W C values) with the taps, written to out.
template <typename T>
void ConvolveRow(const ConvSizes& n, const T* in, int64_t h, const T* taps, T* out) {
  std::fill(out, out + n.row, T(0));
  ForEachTap(n, h, [&](int64_t i, int64_t j, int64_t first, int64_t last, int64_t start) {
    const T* source = in + (h + i - n.radius) * n.row + (j - n.radius) * n.channels;
    MultiplyAdd(out + first, taps + (i * n.side + j) * n.run + first - start, source + first, last - first);
  });
}

template <typename T>
class DepthwiseConvOp : public OpKernel {
 public:
  explicit DepthwiseConvOp(OpKernelConstruction* context) : OpKernel(context) {}

  void Compute(OpKernelContext* context) override {
    const Tensor& x = context->input(0);
    const Tensor& kernel = context->input(1);
    if (!CheckShapes(context, "SitDepthwiseConv", x, kernel)) return;
    const ConvSizes n(x, kernel);
    Tensor* y = nullptr;
    OP_REQUIRES_OK(context, context->allocate_output(0, x.shape(), &y));
    T* y_data = y->flat<T>().data();
    if (n.empty()) return;
    const std::vector<T> taps = Taps(kernel.flat<T>().data(), n);
    const T* x_data = x.flat<T>().data();
    // A unit is a row of the output: (b, h) = (unit / H, unit % H).
    RunShards(context, n.rows, 2 * n.side * n.side * n.row, [&](int64_t start, int64_t limit) {
      for (int64_t unit = start; unit < limit; ++unit) {
        const int64_t b = unit / n.height, h = unit % n.height;
        ConvolveRow(n, x_data + b * n.height * n.row, h, taps.data(), y_data + unit * n.row);
      }
    });
  }
};

template <typename T>
class DepthwiseConvKernelGradOp : public OpKernel {
 public:
  explicit DepthwiseConvKernelGradOp(OpKernelConstruction* context) : OpKernel(context) {}

  void Compute(OpKernelContext* context) override {
    const Tensor& dy = context->input(0);
    const Tensor& x = context->input(1);
    const Tensor& kernel = context->input(2);
    if (!CheckShapes(context, "SitDepthwiseConvKernelGrad", x, kernel)) return;
    OP_REQUIRES(context, dy.shape() == x.shape(),
                InvalidArgument("SitDepthwiseConvKernelGrad expects dy of x's shape ", x.shape().DebugString(),
                                "; got ", dy.shape().DebugString()));
    const ConvSizes n(x, kernel);
    const int64_t k = n.side;
    Tensor* dkernel = nullptr;
    OP_REQUIRES_OK(context, context->allocate_output(0, kernel.shape(), &dkernel));
    T* dkernel_data = dkernel->flat<T>().data();
    std::fill(dkernel_data, dkernel_data + kernel.NumElements(), T(0));
    if (n.empty()) return;
    const T* x_data = x.flat<T>().data();
    const T* dy_data = dy.flat<T>().data();
    // Unit u sums rows [u rows / units, (u + 1) rows / units) into its own taps-shaped sums: sums[u][(i k + j)
    // run + s] holds dy[t] x[t + (j - r) C] of its rows' values t = start + s of every run.
    const int64_t units = std::min(n.rows, kGradientUnits), unit_values = k * k * n.run;
    std::vector<T> sums(units * unit_values, T(0));
    const int64_t cost = 2 * k * k * n.row * (n.rows / units + 1);
    RunShards(context, units, cost, [&](int64_t start, int64_t limit) {
      for (int64_t u = start; u < limit; ++u) {
        T* unit_sums = sums.data() + u * unit_values;
        for (int64_t row = u * n.rows / units; row < (u + 1) * n.rows / units; ++row) {
          const int64_t b = row / n.height, h = row % n.height;
          const T* image = x_data + b * n.height * n.row;
          const T* g = dy_data + row * n.row;
          ForEachTap(n, h, [&](int64_t i, int64_t j, int64_t first, int64_t last, int64_t start) {
            const T* source = image + (h + i - n.radius) * n.row + (j - n.radius) * n.channels;
            MultiplyAdd(unit_sums + (i * k + j) * n.run + first - start, g + first, source + first, last - first);
          });
        }
      }
    });
    // dkernel[i, j, c]: the units' sums at s = c mod C, unit by unit, run value by run value.
    for (int64_t u = 0; u < units; ++u) {
      for (int64_t tap = 0; tap < k * k; ++tap) {
        const T* unit_sums = sums.data() + u * unit_values + tap * n.run;
        for (int64_t s = 0; s < n.run; ++s) dkernel_data[tap * n.channels + s % n.channels] += unit_sums[s];
      }
    }
  }
};

#define REGISTER(T)                                                                                  \
  REGISTER_KERNEL_BUILDER(Name("SitDepthwiseConv").Device(DEVICE_CPU).TypeConstraint<T>("T"),        \
                          DepthwiseConvOp<T>);                                                       \
  REGISTER_KERNEL_BUILDER(Name("SitDepthwiseConvKernelGrad").Device(DEVICE_CPU).TypeConstraint<T>("T"), \
                          DepthwiseConvKernelGradOp<T>);
REGISTER(float);
REGISTER(double);
#undef REGISTER

}  // namespace
}  // namespace sit_keras
