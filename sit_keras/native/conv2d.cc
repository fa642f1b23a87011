// A dense convolution of stride 1 with "same" padding and an odd k x k kernel (the IMPALA-CNN's and the
// MiniGrid CNN's convolutions, and their input gradients, under XLA:
// sit_keras.layers.native_gradients.NativeGradConv2D).
//
// SitConv2D: x (B, H, W, C_in), kernel (k, k, C_in, C_out), bias (C_out) -> y (B, H, W, C_out), r = k / 2,
//   z[b, h, w, o] = sum_{i, j, c} x[b, h + i - r, w + j - r, c] kernel[i, j, c, o] + bias[o],
//   x zero outside the image; y = z, or max(z, 0) with the attribute relu
// (tf.nn.relu(tf.nn.bias_add(tf.nn.conv2d(x, kernel, 1, "SAME"), bias))). The input's gradient is the same op
// on dy with the kernel turned by 180 degrees, its channel axes swapped, and a zero bias
// (sit_keras.native.conv2d).
//
// How it computes: conv2d.h.

#include "conv2d.h"

#include "kernels.h"

namespace sit_keras {
namespace {

REGISTER_OP("SitConv2D")
    .Input("x: T")
    .Input("kernel: T")
    .Input("bias: T")
    .Output("y: T")
    .Attr("relu: bool = false")
    .Attr("T: {float, double}")
    .SetShapeFn([](InferenceContext* c) {
      ShapeHandle x, kernel, bias;
      TF_RETURN_IF_ERROR(c->WithRank(c->input(0), 4, &x));
      TF_RETURN_IF_ERROR(c->WithRank(c->input(1), 4, &kernel));
      TF_RETURN_IF_ERROR(c->WithRank(c->input(2), 1, &bias));
      DimensionHandle channels, out_channels;
      TF_RETURN_IF_ERROR(c->Merge(c->Dim(x, 3), c->Dim(kernel, 2), &channels));
      TF_RETURN_IF_ERROR(c->Merge(c->Dim(bias, 0), c->Dim(kernel, 3), &out_channels));
      c->set_output(0, c->MakeShape({c->Dim(x, 0), c->Dim(x, 1), c->Dim(x, 2), c->Dim(kernel, 3)}));
      return Status();
    });

template <typename T>
class Conv2DOp : public OpKernel {
 public:
  explicit Conv2DOp(OpKernelConstruction* context) : OpKernel(context) {
    OP_REQUIRES_OK(context, context->GetAttr("relu", &relu_));
  }

  void Compute(OpKernelContext* context) override {
    const Tensor& x = context->input(0);
    const Tensor& kernel = context->input(1);
    const Tensor& bias = context->input(2);
    OP_REQUIRES_OK(context, CheckConv2DInputs(x.shape(), kernel.shape(), bias.shape()));
    const DenseConvSizes n(x.dim_size(0), x.dim_size(1), x.dim_size(2), x.dim_size(3), kernel.dim_size(3),
                           kernel.dim_size(0));
    Tensor* y = nullptr;
    OP_REQUIRES_OK(context, context->allocate_output(
                                0, TensorShape({x.dim_size(0), x.dim_size(1), x.dim_size(2), kernel.dim_size(3)}), &y));
    Conv2D(x.flat<T>().data(), kernel.flat<T>().data(), n, ConvEpilogue<T>{bias.flat<T>().data(), relu_},
           y->flat<T>().data(), ShardsOf(context));
  }

 private:
  bool relu_;
};

#define REGISTER(T) \
  REGISTER_KERNEL_BUILDER(Name("SitConv2D").Device(DEVICE_CPU).TypeConstraint<T>("T"), Conv2DOp<T>);
REGISTER(float);
REGISTER(double);
#undef REGISTER

}  // namespace
}  // namespace sit_keras
