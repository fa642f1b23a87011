// The max-pooling after the SiT's stem (sit_keras.models.sit.SiTEncoder.pool): k x k windows, stride k,
// no padding, on few channels (an image's).
//
// SitMaxPool: x (B, H, W, C) -> y (B, H / k, W / k, C) (rounded down),
//   y[b, i, j, c] = max_{u, v < k} x[b, i k + u, j k + v, c]
// (tf.nn.max_pool2d(x, k, k, "VALID")).
// SitMaxPoolGrad: x, y, dy (B, H / k, W / k, C) -> dx (B, H, W, C): dy[b, i, j, c] at the window's first
// maximum in row-major order, zero elsewhere (the position TensorFlow's MaxPoolGrad picks on CPU).
// Both take bfloat16 too (mixed_bfloat16): a maximum and a placed gradient are exact in any dtype.
//
// SitStridedMaxPoolGrad: x (B, H, W, C), y, dy (B, ceil(H / s), ceil(W / s), C) -> dx (B, H, W, C): the
// gradient of tf.nn.max_pool2d(x, k, s, "SAME") with overlapping windows (s < k, the IMPALA-CNN's 3x3 windows
// of stride 2), each dy value at its window's first maximum in row-major order, the values of overlapping
// windows added. Its forward pass is TensorFlow's (sit_keras.native.strided_max_pool).
//
// How they compute: max_pool.h.

#include "kernels.h"
#include "max_pool.h"

namespace sit_keras {
namespace {

REGISTER_OP("SitMaxPool")
    .Input("x: T")
    .Output("y: T")
    .Attr("size: int >= 1")
    .Attr("T: {float, double, bfloat16}")
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

// A pooling gradient's shape: x's, of rank 4.
Status GradientShape(InferenceContext* c) {
  ShapeHandle x;
  TF_RETURN_IF_ERROR(c->WithRank(c->input(0), 4, &x));
  c->set_output(0, x);
  return Status();
}

REGISTER_OP("SitMaxPoolGrad")
    .Input("x: T")
    .Input("y: T")
    .Input("dy: T")
    .Output("dx: T")
    .Attr("size: int >= 1")
    .Attr("T: {float, double, bfloat16}")
    .SetShapeFn(GradientShape);

REGISTER_OP("SitStridedMaxPoolGrad")
    .Input("x: T")
    .Input("y: T")
    .Input("dy: T")
    .Output("dx: T")
    .Attr("size: int >= 1")
    .Attr("stride: int >= 1")
    .Attr("T: {float, double}")
    .SetShapeFn(GradientShape);

// The sizes of the pooling of x with k x k windows, and the shape of its output.
PoolSizes SizesOf(const Tensor& x, int k) {
  return PoolSizes(x.dim_size(0), x.dim_size(1), x.dim_size(2), x.dim_size(3), k);
}

TensorShape OutputShape(const PoolSizes& n) { return TensorShape({n.images, n.out_height, n.out_width, n.channels}); }

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
    const PoolSizes n = SizesOf(x, size_);
    Tensor* y = nullptr;
    OP_REQUIRES_OK(context, context->allocate_output(0, OutputShape(n), &y));
    MaxPool(x.flat<T>().data(), n, y->flat<T>().data(), ShardsOf(context));
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
    const PoolSizes n = SizesOf(x, size_);
    OP_REQUIRES(context, y.shape() == OutputShape(n) && dy.shape() == OutputShape(n),
                InvalidArgument("SitMaxPoolGrad expects y and dy ", OutputShape(n).DebugString(), " for x ",
                                x.shape().DebugString(), " and size ", size_, "; got ", y.shape().DebugString(),
                                " and ", dy.shape().DebugString()));
    Tensor* dx = nullptr;
    OP_REQUIRES_OK(context, context->allocate_output(0, x.shape(), &dx));
    MaxPoolGrad(x.flat<T>().data(), y.flat<T>().data(), dy.flat<T>().data(), n, dx->flat<T>().data(),
                ShardsOf(context));
  }

 private:
  int size_;
};

template <typename T>
class StridedMaxPoolGradOp : public OpKernel {
 public:
  explicit StridedMaxPoolGradOp(OpKernelConstruction* context) : OpKernel(context) {
    OP_REQUIRES_OK(context, context->GetAttr("size", &size_));
    OP_REQUIRES_OK(context, context->GetAttr("stride", &stride_));
    OP_REQUIRES_OK(context, CheckStridedPoolSize(size_));
  }

  void Compute(OpKernelContext* context) override {
    const Tensor& x = context->input(0);
    const Tensor& y = context->input(1);
    const Tensor& dy = context->input(2);
    if (!CheckInput(context, "SitStridedMaxPoolGrad", x)) return;
    const StridedPoolSizes n(x.dim_size(0), x.dim_size(1), x.dim_size(2), x.dim_size(3), size_, stride_);
    OP_REQUIRES_OK(context, CheckStridedPoolGradInputs(n, x.shape(), y.shape(), dy.shape()));
    Tensor* dx = nullptr;
    OP_REQUIRES_OK(context, context->allocate_output(0, x.shape(), &dx));
    StridedMaxPoolGrad(x.flat<T>().data(), y.flat<T>().data(), dy.flat<T>().data(), n, dx->flat<T>().data(),
                       ShardsOf(context));
  }

 private:
  int size_, stride_;
};

#define REGISTER(T)                                                                                           \
  REGISTER_KERNEL_BUILDER(Name("SitMaxPool").Device(DEVICE_CPU).TypeConstraint<T>("T"), MaxPoolOp<T>);         \
  REGISTER_KERNEL_BUILDER(Name("SitMaxPoolGrad").Device(DEVICE_CPU).TypeConstraint<T>("T"), MaxPoolGradOp<T>); \
  REGISTER_KERNEL_BUILDER(Name("SitStridedMaxPoolGrad").Device(DEVICE_CPU).TypeConstraint<T>("T"),             \
                          StridedMaxPoolGradOp<T>);
REGISTER(float);
REGISTER(double);
#undef REGISTER
REGISTER_KERNEL_BUILDER(Name("SitMaxPool").Device(DEVICE_CPU).TypeConstraint<bfloat16>("T"), MaxPoolOp<bfloat16>);
REGISTER_KERNEL_BUILDER(Name("SitMaxPoolGrad").Device(DEVICE_CPU).TypeConstraint<bfloat16>("T"),
                        MaxPoolGradOp<bfloat16>);

}  // namespace
}  // namespace sit_keras
