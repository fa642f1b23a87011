// The max-pooling after the SiT's stem (sit_keras.models.sit.SiTEncoder.pool): k x k windows, stride k,
// no padding, on few channels (an image's).
//
// SitMaxPool: x (B, H, W, C) -> y (B, H / k, W / k, C) (rounded down),
//   y[b, i, j, c] = max_{u, v < k} x[b, i k + u, j k + v, c]
// (tf.nn.max_pool2d(x, k, k, "VALID")).
// SitMaxPoolGrad: x, y, dy (B, H / k, W / k, C) -> dx (B, H, W, C): dy[b, i, j, c] at the window's first
// maximum in row-major order, zero elsewhere (the position TensorFlow's MaxPoolGrad picks on CPU).
//
// A thread takes whole output rows. The forward pass first takes the maximum over a window's k input rows
// for the whole row at once (a loop the compiler vectorises), then over each window's k columns. The
// gradient is given y too and puts dy[b, i, j, c] on the window's first value equal to it in row-major
// order: the first maximum, where TensorFlow's MaxPoolGrad puts it, found without the index per output
// that TensorFlow's general pooling kernel (any stride and padding) writes and reads back.

#include <algorithm>
#include <vector>

#include "kernels.h"

namespace sit_keras {
namespace {

REGISTER_OP("SitMaxPool")
    .Input("x: T")
    .Output("y: T")
    .Attr("size: int >= 1")
    .Attr("T: {float, double}")
    .SetShapeFn([](InferenceContext* c) {
      ShapeHandle x;
      TF_RETURN_IF_ERROR(c->WithRank(c->input(0), 4, &x));
      int size;
      TF_RETURN_IF_ERROR(c->GetAttr("size", &size));
      DimensionHandle height, width;
      TF_RETURN_IF_ERROR(c->Divide(c->Dim(x, 1), size, /*evenly_divisible=*/false, &height));
      TF_RETURN_IF_ERROR(c->Divide(c->Dim(x, 2), size, /*evenly_divisible=*/false, &width));
      c->set_output(0, c->MakeShape({c->Dim(x, 0), height, width, c->Dim(x, 3)}));
      return Status();
    });

REGISTER_OP("SitMaxPoolGrad")
    .Input("x: T")
    .Input("y: T")
    .Input("dy: T")
    .Output("dx: T")
    .Attr("size: int >= 1")
    .Attr("T: {float, double}")
    .SetShapeFn([](InferenceContext* c) {
      ShapeHandle x;
      TF_RETURN_IF_ERROR(c->WithRank(c->input(0), 4, &x));
      c->set_output(0, x);
      return Status();
    });

struct PoolSizes {
  PoolSizes(const Tensor& x, int k)
      : images(x.dim_size(0)), height(x.dim_size(1)), width(x.dim_size(2)), channels(x.dim_size(3)), size(k),
        out_height(height / k), out_width(width / k), row(width * channels), out_row(out_width * channels) {}
  const int64_t images, height, width, channels, size, out_height, out_width, row, out_row;
  TensorShape output() const { return TensorShape({images, out_height, out_width, channels}); }
};

bool CheckInput(OpKernelContext* context, const char* op, const Tensor& x) {
  if (x.dims() != 4) {
    context->CtxFailure(InvalidArgument(op, " expects x (B, H, W, C); got ", x.shape().DebugString()));
    return false;
  }
  return true;
}

template <typename T>
class MaxPoolOp : public OpKernel {
 public:
  explicit MaxPoolOp(OpKernelConstruction* context) : OpKernel(context) {
    OP_REQUIRES_OK(context, context->GetAttr("size", &size_));
  }

  void Compute(OpKernelContext* context) override {
    const Tensor& x = context->input(0);
    if (!CheckInput(context, "SitMaxPool", x)) return;
    const PoolSizes n(x, size_);
    Tensor* y = nullptr;
    OP_REQUIRES_OK(context, context->allocate_output(0, n.output(), &y));
    const T* x_data = x.flat<T>().data();
    T* y_data = y->flat<T>().data();
    const int64_t covered = n.out_width * n.size * n.channels;  // the values of a row some window reads
    // A unit is an output row: (b, i) = (unit / (H / k), unit % (H / k)).
    RunShards(context, n.images * n.out_height, n.size * covered, [&](int64_t start, int64_t limit) {
      std::vector<T> rows_max(covered);
      for (int64_t unit = start; unit < limit; ++unit) {
        const int64_t b = unit / n.out_height, i = unit % n.out_height;
        const T* rows = x_data + (b * n.height + i * n.size) * n.row;
        T* m = rows_max.data();
        std::copy(rows, rows + covered, m);
        for (int64_t u = 1; u < n.size; ++u) {
          const T* row = rows + u * n.row;
          for (int64_t s = 0; s < covered; ++s) m[s] = std::max(m[s], row[s]);
        }
        T* out = y_data + unit * n.out_row;
        for (int64_t j = 0; j < n.out_width; ++j) {
          const T* window = m + j * n.size * n.channels;
          for (int64_t c = 0; c < n.channels; ++c) {
            T best = window[c];
            for (int64_t v = 1; v < n.size; ++v) best = std::max(best, window[v * n.channels + c]);
            out[j * n.channels + c] = best;
          }
        }
      }
    });
  }

 private:
  int size_;
};

template <typename T>
class MaxPoolGradOp : public OpKernel {
 public:
  explicit MaxPoolGradOp(OpKernelConstruction* context) : OpKernel(context) {
    OP_REQUIRES_OK(context, context->GetAttr("size", &size_));
  }

  void Compute(OpKernelContext* context) override {
    const Tensor& x = context->input(0);
    const Tensor& y = context->input(1);
    const Tensor& dy = context->input(2);
    if (!CheckInput(context, "SitMaxPoolGrad", x)) return;
    const PoolSizes n(x, size_);
    OP_REQUIRES(context, y.shape() == n.output() && dy.shape() == n.output(),
                InvalidArgument("SitMaxPoolGrad expects y and dy ", n.output().DebugString(), " for x ",
                                x.shape().DebugString(), " and size ", size_, "; got ", y.shape().DebugString(),
                                " and ", dy.shape().DebugString()));
    Tensor* dx = nullptr;
    OP_REQUIRES_OK(context, context->allocate_output(0, x.shape(), &dx));
    const T* x_data = x.flat<T>().data();
    const T* y_data = y.flat<T>().data();
    const T* dy_data = dy.flat<T>().data();
    T* dx_data = dx->flat<T>().data();
    // A unit is the k input rows of an output row, and for the last output row of an image also the rows
    // under it that no window covers (H mod k): it zeroes them and places its gradients.
    const int64_t units = n.images * n.out_height;
    if (units == 0) {
      std::fill(dx_data, dx_data + dx->NumElements(), T(0));
      return;
    }
    RunShards(context, units, 2 * n.size * n.size * n.out_row, [&](int64_t start, int64_t limit) {
      for (int64_t unit = start; unit < limit; ++unit) {
        const int64_t b = unit / n.out_height, i = unit % n.out_height;
        const int64_t first_row = b * n.height + i * n.size;
        const int64_t last_row = i + 1 == n.out_height ? (b + 1) * n.height : first_row + n.size;
        std::fill(dx_data + first_row * n.row, dx_data + last_row * n.row, T(0));
        const T* rows = x_data + first_row * n.row;
        T* target = dx_data + first_row * n.row;
        for (int64_t t = 0; t < n.out_row; ++t) {
          const T maximum = y_data[unit * n.out_row + t];
          const int64_t corner = t / n.channels * n.size * n.channels + t % n.channels;  // (u, v) = (0, 0)
          int64_t place = corner;  // where no value equals y (a NaN): the window's first value
          for (int64_t e = 0; e < n.size * n.size; ++e) {
            const int64_t at = corner + (e / n.size) * n.row + (e % n.size) * n.channels;
            if (rows[at] == maximum) {
              place = at;
              break;
            }
          }
          target[place] = dy_data[unit * n.out_row + t];
        }
      }
    });
  }

 private:
  int size_;
};

#define REGISTER(T)                                                                                           \
  REGISTER_KERNEL_BUILDER(Name("SitMaxPool").Device(DEVICE_CPU).TypeConstraint<T>("T"), MaxPoolOp<T>);         \
  REGISTER_KERNEL_BUILDER(Name("SitMaxPoolGrad").Device(DEVICE_CPU).TypeConstraint<T>("T"), MaxPoolGradOp<T>);
REGISTER(float);
REGISTER(double);
#undef REGISTER

}  // namespace
}  // namespace sit_keras
