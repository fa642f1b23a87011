// The GSA blocks' LayerNorm without its affine part, written straight into the attention ops'
// layout (sit_keras.layers.normalization, sit_keras.native.lane_blocks).
//
// SitStandardizedLanes: tokens x (B, T, D) -> y (D, B / kLanes, T, kLanes), padded windows zero, with
//   y[c, b / kLanes, i, b % kLanes] = (x[b, i, c] - mean_c x[b, i]) r[b, i],  r = 1 / sqrt(var_c x[b, i] + eps).
// SitStandardizedLanesGrad: dx[b, i, c] = r (dy - mean_c dy - y mean_c(dy y)), the exact derivative, plus
//   skip_dy[b, i, c] for the first K tokens (skip_dy (B, K, D), K <= T): the gradient of x[:, :K] read by a skip
//   connection, added here rather than by an AddN over the whole (B, T, D) gradient.
// Builtin ops take four passes over the tokens for the statistics and the normalisation, a transpose
// into the lane layout, and as many again for the gradient; these read and write each value once.
// The tokens and their gradients have the dtype S: T, or bfloat16 for T = float (mixed_bfloat16), read as
// floats and written rounded, as TensorFlow's Cast would (kernels.h).

#include "kernels.h"
#include "standardize.h"

namespace sit_keras {
namespace {

REGISTER_OP("SitStandardizedLanes")
    .Input("x: S")
    .Input("epsilon: T")
    .Output("y: S")
    .Attr("T: {float, double}")
    .Attr("S: {float, double, bfloat16}")
    .SetShapeFn([](InferenceContext* c) {
      ShapeHandle x;
      TF_RETURN_IF_ERROR(c->WithRank(c->input(0), 3, &x));
      DimensionHandle blocks = c->UnknownDim();
      if (c->ValueKnown(c->Dim(x, 0))) blocks = c->MakeDim((c->Value(c->Dim(x, 0)) + kLanes - 1) / kLanes);
      c->set_output(0, c->MakeShape({c->Dim(x, 2), blocks, c->Dim(x, 1), kLanes}));
      return Status();
    });

REGISTER_OP("SitStandardizedLanesGrad")
    .Input("dy: S")
    .Input("x: S")
    .Input("epsilon: T")
    .Input("skip_dy: S")
    .Output("dx: S")
    .Attr("T: {float, double}")
    .Attr("S: {float, double, bfloat16}")
    .SetShapeFn([](InferenceContext* c) {
      c->set_output(0, c->input(1));
      return Status();
    });

template <typename T, typename S>
class StandardizedLanesOp : public OpKernel {
 public:
  explicit StandardizedLanesOp(OpKernelConstruction* context) : OpKernel(context) {}

  void Compute(OpKernelContext* context) override {
    const Tensor& x = context->input(0);
    OP_REQUIRES_OK(context, CheckStandardizeInputs(x.shape(), context->input(1).shape()));
    const TokenSizes n(x.shape());
    Tensor* y = nullptr;
    OP_REQUIRES_OK(context, context->allocate_output(0, n.lanes(), &y));
    StandardizeLanes(x.flat<S>().data(), n, context->input(1).scalar<T>()(), y->flat<S>().data(),
                     ShardsOf(context));
  }
};

template <typename T, typename S>
class StandardizedLanesGradOp : public OpKernel {
 public:
  explicit StandardizedLanesGradOp(OpKernelConstruction* context) : OpKernel(context) {}

  void Compute(OpKernelContext* context) override {
    const Tensor& dy = context->input(0);
    const Tensor& x = context->input(1);
    const Tensor& skip_dy = context->input(3);
    OP_REQUIRES_OK(context, CheckStandardizeInputs(x.shape(), context->input(2).shape()));
    const TokenSizes n(x.shape());
    OP_REQUIRES_OK(context, CheckStandardizeGradInputs(n, dy.shape(), skip_dy.shape()));
    Tensor* dx = nullptr;
    OP_REQUIRES_OK(context, context->allocate_output(0, x.shape(), &dx));
    StandardizeLanesGrad(dy.flat<S>().data(), x.flat<S>().data(), skip_dy.flat<S>().data(), skip_dy.dim_size(1), n,
                         context->input(2).scalar<T>()(), dx->flat<S>().data(), ShardsOf(context));
  }
};

#define REGISTER(T, S)                                                                                    \
  REGISTER_KERNEL_BUILDER(                                                                                \
      Name("SitStandardizedLanes").Device(DEVICE_CPU).TypeConstraint<T>("T").TypeConstraint<S>("S"),      \
      StandardizedLanesOp<T, S>);                                                                         \
  REGISTER_KERNEL_BUILDER(                                                                                \
      Name("SitStandardizedLanesGrad").Device(DEVICE_CPU).TypeConstraint<T>("T").TypeConstraint<S>("S"),  \
      StandardizedLanesGradOp<T, S>);
REGISTER(float, float);
REGISTER(double, double);
REGISTER(float, bfloat16);
#undef REGISTER

}  // namespace
}  // namespace sit_keras
