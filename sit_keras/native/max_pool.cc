// The max-pooling after the SiT's stem (sit_keras.models.sit.SiTEncoder.pool): k x k windows, stride k,
// no padding, on few channels (an image's).
//
// SitMaxPool: x (B, H, W, C) -> y (B, H / k, W / k, C) (rounded down),
//   y[b, i, j, c] = max_{u, v < k} x[b, i k + u, j k + v, c]
// (tf.nn.max_pool2d(x, k, k, "VALID")).
// SitMaxPoolGrad: x, dy (B, H / k, W / k, C) -> dx (B, H, W, C): dy[b, i, j, c] at the window's first
// maximum in row-major order, zero elsewhere (the position TensorFlow's MaxPoolGrad picks on CPU).
//
// TensorFlow's CPU gradient finds each window's maximum with a general pooling kernel (any stride and
// padding) that writes an index per output; here a thread takes whole output rows, whose k input rows
// it reads once. The gradient reads x again rather than keeping indices: the SiT's x is a few MB.

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

// For an output row: calls pick(t, u, s) for each of its values t = j C + c and each value of its window,
// u < k the input row and s = (j k + v) C + c the place in it; a window's values come in row-major order.
template <typename Pick>
inline void ForEachWindowValue(const PoolSizes& n, Pick pick) {
  for (int64_t u = 0; u < n.size; ++u) {
    for (int64_t j = 0; j < n.out_width; ++j) {
      for (int64_t v = 0; v < n.size; ++v) {
        const int64_t s = (j * n.size + v) * n.channels;
        for (int64_t c = 0; c < n.channels; ++c) pick(j * n.channels + c, u, s + c);
      }
    }
  }
}

// out[t] = the first value of window t = j C + c, rows[j k C + c], and its place (where place is given).
template <typename T>
inline void FirstWindowValues(const PoolSizes& n, const T* rows, T* out, int64_t* place) {
  for (int64_t j = 0; j < n.out_width; ++j) {
    for (int64_t c = 0; c < n.channels; ++c) {
      const int64_t t = j * n.channels + c, s = j * n.size * n.channels + c;
      out[t] = rows[s];
      if (place != nullptr) place[t] = s;
    }
  }
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
    // A unit is an output row: (b, i) = (unit / (H / k), unit % (H / k)).
    RunShards(context, n.images * n.out_height, n.size * n.size * n.out_row, [&](int64_t start, int64_t limit) {
      for (int64_t unit = start; unit < limit; ++unit) {
        const int64_t b = unit / n.out_height, i = unit % n.out_height;
        const T* rows = x_data + (b * n.height + i * n.size) * n.row;
        T* out = y_data + unit * n.out_row;
        FirstWindowValues(n, rows, out, nullptr);
        ForEachWindowValue(n, [&](int64_t t, int64_t u, int64_t s) {
          const T value = rows[u * n.row + s];
          if (value > out[t]) out[t] = value;
        });
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
    const Tensor& dy = context->input(1);
    if (!CheckInput(context, "SitMaxPoolGrad", x)) return;
    const PoolSizes n(x, size_);
    OP_REQUIRES(context, dy.shape() == n.output(),
                InvalidArgument("SitMaxPoolGrad expects dy ", n.output().DebugString(), " for x ",
                                x.shape().DebugString(), " and size ", size_, "; got ",
                                dy.shape().DebugString()));
    Tensor* dx = nullptr;
    OP_REQUIRES_OK(context, context->allocate_output(0, x.shape(), &dx));
    const T* x_data = x.flat<T>().data();
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
      std::vector<T> maximum(n.out_row);
      std::vector<int64_t> place(n.out_row);  // of each window's maximum, in the unit's input rows
      for (int64_t unit = start; unit < limit; ++unit) {
        const int64_t b = unit / n.out_height, i = unit % n.out_height;
        const int64_t first_row = b * n.height + i * n.size;
        const int64_t last_row = i + 1 == n.out_height ? (b + 1) * n.height : first_row + n.size;
        std::fill(dx_data + first_row * n.row, dx_data + last_row * n.row, T(0));
        const T* rows = x_data + first_row * n.row;
        FirstWindowValues(n, rows, maximum.data(), place.data());
        ForEachWindowValue(n, [&](int64_t t, int64_t u, int64_t s) {
          const T value = rows[u * n.row + s];
          if (value > maximum[t]) {  // strictly: the first maximum keeps its place
            maximum[t] = value;
            place[t] = u * n.row + s;
          }
        });
        T* target = dx_data + first_row * n.row;
        const T* g = dy_data + unit * n.out_row;
        for (int64_t t = 0; t < n.out_row; ++t) target[place[t]] = g[t];
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
