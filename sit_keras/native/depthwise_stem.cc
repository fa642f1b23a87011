// The SiT's stem (sit_keras.layers.GraphConv2D): a depth-wise convolution of stride 1 with "same"
// padding and an odd k x k kernel, on few channels (an image's).
//
// SitDepthwiseConv: x (B, H, W, C), kernel (k, k, C), bias (C) -> y (B, H, W, C), with r = k / 2,
//   y[b, h, w, c] = sum_{i, j < k} kernel[i, j, c] x[b, h + i - r, w + j - r, c] + bias[c],
// x zero outside the image (tf.nn.depthwise_conv2d with padding "SAME", strides 1 and a depth multiplier of
// 1, then the bias added).
// SitDepthwiseConvKernelGrad: dy (B, H, W, C), x, kernel -> dkernel (k, k, C), dbias (C),
//   dkernel[i, j, c] = sum_{b, h, w} dy[b, h, w, c] x[b, h + i - r, w + j - r, c],
//   dbias[c] = sum_{b, h, w} dy[b, h, w, c].
// The bias rides in the ops because a separate add and its gradient's sum cost more than the convolution
// on bfloat16 maps (TensorFlow's Eigen kernels widen them value by value).
// The input's gradient is SitDepthwiseConv of dy with the kernel turned by 180 degrees and a zero bias
// (sit_keras.native.depthwise_conv), a separate op that a train step, whose input is an image, prunes.
// The maps x, y and dy have the dtype S: T, or bfloat16 for T = float (mixed_bfloat16), read as floats and
// written rounded, as TensorFlow's Cast would (kernels.h).
//
// How they compute: depthwise_stem.h.

#include <string>

#include "depthwise_stem.h"
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
    .Input("x: S")
    .Input("kernel: T")
    .Input("bias: T")
    .Output("y: S")
    .Attr("T: {float, double}")
    .Attr("S: {float, double, bfloat16}")
    .SetShapeFn([](InferenceContext* c) {
      ShapeHandle x, kernel, bias;
      TF_RETURN_IF_ERROR(ConvShapes(c, &x, &kernel));
      TF_RETURN_IF_ERROR(c->WithRank(c->input(2), 1, &bias));
      DimensionHandle channels;
      TF_RETURN_IF_ERROR(c->Merge(c->Dim(bias, 0), c->Dim(kernel, 2), &channels));
      c->set_output(0, x);
      return Status();
    });

REGISTER_OP("SitDepthwiseConvKernelGrad")
    .Input("dy: S")
    .Input("x: S")
    .Input("kernel: T")
    .Output("dkernel: T")
    .Output("dbias: T")
    .Attr("T: {float, double}")
    .Attr("S: {float, double, bfloat16}")
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
      c->set_output(1, c->Vector(channels));
      return Status();
    });

ConvSizes SizesOf(const Tensor& x, const Tensor& kernel) {
  return ConvSizes(x.dim_size(0), x.dim_size(1), x.dim_size(2), x.dim_size(3), kernel.dim_size(0));
}

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

template <typename T, typename S>
class DepthwiseConvOp : public OpKernel {
 public:
  explicit DepthwiseConvOp(OpKernelConstruction* context) : OpKernel(context) {}

  void Compute(OpKernelContext* context) override {
    const Tensor& x = context->input(0);
    const Tensor& kernel = context->input(1);
    const Tensor& bias = context->input(2);
    if (!CheckShapes(context, "SitDepthwiseConv", x, kernel)) return;
    OP_REQUIRES(context, bias.dims() == 1 && bias.dim_size(0) == kernel.dim_size(2),
                InvalidArgument("SitDepthwiseConv expects a bias (", kernel.dim_size(2), "); got ",
                                bias.shape().DebugString()));
    const ConvSizes n = SizesOf(x, kernel);
    Tensor* y = nullptr;
    OP_REQUIRES_OK(context, context->allocate_output(0, x.shape(), &y));
    DepthwiseConv(x.flat<S>().data(), kernel.flat<T>().data(), bias.flat<T>().data(), n, y->flat<S>().data(),
                  ShardsOf(context));
  }
};

template <typename T, typename S>
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
    const ConvSizes n = SizesOf(x, kernel);
    Tensor* dkernel = nullptr;
    Tensor* dbias = nullptr;
    OP_REQUIRES_OK(context, context->allocate_output(0, kernel.shape(), &dkernel));
    OP_REQUIRES_OK(context, context->allocate_output(1, TensorShape({kernel.dim_size(2)}), &dbias));
    DepthwiseConvKernelGrad(dy.flat<S>().data(), x.flat<S>().data(), n, dkernel->flat<T>().data(),
                            dbias->flat<T>().data(), ShardsOf(context));
  }
};

#define REGISTER(T, S)                                                                                  \
  REGISTER_KERNEL_BUILDER(                                                                              \
      Name("SitDepthwiseConv").Device(DEVICE_CPU).TypeConstraint<T>("T").TypeConstraint<S>("S"),        \
      DepthwiseConvOp<T, S>);                                                                           \
  REGISTER_KERNEL_BUILDER(                                                                              \
      Name("SitDepthwiseConvKernelGrad").Device(DEVICE_CPU).TypeConstraint<T>("T").TypeConstraint<S>("S"), \
      DepthwiseConvKernelGradOp<T, S>);
REGISTER(float, float);
REGISTER(double, double);
REGISTER(float, bfloat16);
#undef REGISTER

}  // namespace
}  // namespace sit_keras
