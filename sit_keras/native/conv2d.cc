// A dense convolution of stride 1 with "same" padding and an odd k x k kernel (the IMPALA-CNN's and the
// MiniGrid CNN's convolutions, and their input gradients, under XLA:
// sit_keras.layers.native_gradients.NativeGradConv2D).
//
// SitConv2D: x (B, H, W, C_in), kernel (k, k, C_in, C_out) -> y (B, H, W, C_out), r = k / 2,
//   y[b, h, w, o] = sum_{i, j, c} x[b, h + i - r, w + j - r, c] kernel[i, j, c, o],  x zero outside the image
// (tf.nn.conv2d(x, kernel, 1, "SAME")). The input's gradient is the same op on dy with the kernel turned by
// 180 degrees and its channel axes swapped (sit_keras.native.conv2d).
//
// How it computes: conv2d.h.

#include "conv2d.h"

#include "kernels.h"

namespace sit_keras {
namespace {

REGISTER_OP("SitConv2D")
    .Input("x: T")
    .Input("kernel: T")
    .Output("y: T")
    .Attr("T: {float, double}")
    .SetShapeFn([](InferenceContext* c) {
      ShapeHandle x, kernel;
      TF_RETURN_IF_ERROR(c->WithRank(c->input(0), 4, &x));
      TF_RETURN_IF_ERROR(c->WithRank(c->input(1), 4, &kernel));
      DimensionHandle channels;
      TF_RETURN_IF_ERROR(c->Merge(c->Dim(x, 3), c->Dim(kernel, 2), &channels));
      c->set_output(0, c->MakeShape({c->Dim(x, 0), c->Dim(x, 1), c->Dim(x, 2), c->Dim(kernel, 3)}));
      return Status();
    });

template <typename T>
class Conv2DOp : public OpKernel {
 public:
  explicit Conv2DOp(OpKernelConstruction* context) : OpKernel(context) {}

  void Compute(OpKernelContext* context) override {
    const Tensor& x = context->input(0);
    const Tensor& kernel = context->input(1);
    OP_REQUIRES_OK(context, CheckConv2DInputs(x.shape(), kernel.shape()));
    const DenseConvSizes n(x.dim_size(0), x.dim_size(1), x.dim_size(2), x.dim_size(3), kernel.dim_size(3),
                           kernel.dim_size(0));
    Tensor* y = nullptr;
    OP_REQUIRES_OK(context, context->allocate_output(
                                0, TensorShape({x.dim_size(0), x.dim_size(1), x.dim_size(2), kernel.dim_size(3)}), &y));
    Conv2D(x.flat<T>().data(), kernel.flat<T>().data(), n, y->flat<T>().data(), ShardsOf(context));
  }
};

#define REGISTER(T) \
  REGISTER_KERNEL_BUILDER(Name("SitConv2D").Device(DEVICE_CPU).TypeConstraint<T>("T"), Conv2DOp<T>);
REGISTER(float);
REGISTER(double);
#undef REGISTER

}  // namespace
}  // namespace sit_keras
