// The kernel's gradient of a dense convolution of stride 1 with "same" padding and an odd k x k kernel (the
// IMPALA-CNN's and the MiniGrid CNN's convolutions under XLA,
// sit_keras.layers.native_gradients.NativeGradConv2D).
//
// SitConv2DKernelGrad: dy (B, H, W, C_out), x (B, H, W, C_in) -> dkernel (k, k, C_in, C_out), r = k / 2,
//   dkernel[i, j, c, o] = sum_{b, h, w} x[b, h + i - r, w + j - r, c] dy[b, h, w, o],  x zero outside the image
// (tf.raw_ops.Conv2DBackpropFilter with padding "SAME" and strides 1).
//
// How it computes: conv_kernel_grad.h.

#include "conv_kernel_grad.h"
#include "kernels.h"

namespace sit_keras {
namespace {

REGISTER_OP("SitConv2DKernelGrad")
    .Input("dy: T")
    .Input("x: T")
    .Output("dkernel: T")
    .Attr("size: int >= 1")
    .Attr("T: {float, double}")
    .SetShapeFn([](InferenceContext* c) {
      ShapeHandle dy, x;
      TF_RETURN_IF_ERROR(c->WithRank(c->input(0), 4, &dy));
      TF_RETURN_IF_ERROR(c->WithRank(c->input(1), 4, &x));
      for (int axis = 0; axis < 3; ++axis) {
        DimensionHandle merged;
        TF_RETURN_IF_ERROR(c->Merge(c->Dim(dy, axis), c->Dim(x, axis), &merged));
      }
      int size;
      TF_RETURN_IF_ERROR(c->GetAttr("size", &size));
      c->set_output(0, c->MakeShape({size, size, c->Dim(x, 3), c->Dim(dy, 3)}));
      return Status();
    });

template <typename T>
class Conv2DKernelGradOp : public OpKernel {
 public:
  explicit Conv2DKernelGradOp(OpKernelConstruction* context) : OpKernel(context) {
    OP_REQUIRES_OK(context, context->GetAttr("size", &size_));
    OP_REQUIRES_OK(context, CheckConv2DKernelGradSize(size_));
  }

  void Compute(OpKernelContext* context) override {
    const Tensor& dy = context->input(0);
    const Tensor& x = context->input(1);
    OP_REQUIRES_OK(context, CheckConv2DKernelGradInputs(dy.shape(), x.shape()));
    const DenseConvSizes n(x.dim_size(0), x.dim_size(1), x.dim_size(2), x.dim_size(3), dy.dim_size(3), size_);
    Tensor* dkernel = nullptr;
    OP_REQUIRES_OK(context, context->allocate_output(0, TensorShape({size_, size_, x.dim_size(3), dy.dim_size(3)}),
                                                     &dkernel));
    Conv2DKernelGrad(dy.flat<T>().data(), x.flat<T>().data(), n, dkernel->flat<T>().data(), ShardsOf(context));
  }

 private:
  int size_;
};

#define REGISTER(T)                                                                             \
  REGISTER_KERNEL_BUILDER(Name("SitConv2DKernelGrad").Device(DEVICE_CPU).TypeConstraint<T>("T"), \
                          Conv2DKernelGradOp<T>);
REGISTER(float);
REGISTER(double);
#undef REGISTER

}  // namespace
}  // namespace sit_keras
