// The GSA layers' channels-first projection (sit_keras.layers.channels_first): a small kernel applied to
// tokens kept channels first, L = windows x tokens columns (about 10^5 in the SiT's train step).
//
// SitChannelsFirstProjection: kernel (R, N), x (R, L) -> y (N, L),  y[n, l] = sum_r kernel[r, n] x[r, l]
//   (tf.matmul(kernel, x, transpose_a=True)).
// SitChannelsFirstProjectionKernelGrad: dy (N, L), x (R, L) -> dkernel (R, N),
//   dkernel[r, n] = sum_l x[r, l] dy[n, l]  (tf.matmul(x, dy, transpose_b=True)).
// The input's gradient, kernel dy, is SitChannelsFirstProjection by the transposed kernel (sit_keras.native).
// SitChannelsFirstProjectionBfloat16: the projection with the kernel, x and y stored as bfloat16 and the
//   products summed in float (tf.matmul(kernel, x, transpose_a=True) on bfloat16), for mixed_bfloat16 on
//   AMX hosts; no XLA kernel.
//
// How they compute: channels_first.h, channels_first_bfloat16.h.

#include "channels_first.h"
#include "channels_first_bfloat16.h"
#include "kernels.h"

namespace sit_keras {
namespace {

// kernel (R, N), x (R, L) -> y (N, L).
Status ProjectionShape(InferenceContext* c) {
  ShapeHandle kernel, x;
  TF_RETURN_IF_ERROR(c->WithRank(c->input(0), 2, &kernel));
  TF_RETURN_IF_ERROR(c->WithRank(c->input(1), 2, &x));
  DimensionHandle rows;
  TF_RETURN_IF_ERROR(c->Merge(c->Dim(kernel, 0), c->Dim(x, 0), &rows));
  c->set_output(0, c->Matrix(c->Dim(kernel, 1), c->Dim(x, 1)));
  return Status();
}

REGISTER_OP("SitChannelsFirstProjection")
    .Input("kernel: T")
    .Input("x: T")
    .Output("y: T")
    .Attr("T: {float, double}")
    .SetShapeFn(ProjectionShape);

REGISTER_OP("SitChannelsFirstProjectionBfloat16")
    .Input("kernel: bfloat16")
    .Input("x: bfloat16")
    .Output("y: bfloat16")
    .SetShapeFn(ProjectionShape);

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

bool CheckRank2(OpKernelContext* context, const char* op, const char* what, const Tensor& t) {
  if (t.dims() != 2) {
    context->CtxFailure(InvalidArgument(op, " expects ", what, " of rank 2; got ", t.shape().DebugString()));
    return false;
  }
  return true;
}

// T: float or double; bfloat16 for SitChannelsFirstProjectionBfloat16.
template <typename T>
class ChannelsFirstProjectionOp : public OpKernel {
 public:
  explicit ChannelsFirstProjectionOp(OpKernelConstruction* context) : OpKernel(context) {}

  void Compute(OpKernelContext* context) override {
    const Tensor& kernel = context->input(0);
    const Tensor& x = context->input(1);
    const char* op =
        std::is_same_v<T, bfloat16> ? "SitChannelsFirstProjectionBfloat16" : "SitChannelsFirstProjection";
    if (!CheckRank2(context, op, "a kernel (R, N)", kernel) || !CheckRank2(context, op, "x (R, L)", x)) {
      return;
    }
    OP_REQUIRES(context, kernel.dim_size(0) == x.dim_size(0),
                InvalidArgument(op, " expects a kernel (R, N) and x (R, L) with the same R; got ",
                                kernel.shape().DebugString(), " and ", x.shape().DebugString()));
    const int64_t rows = x.dim_size(0), columns = x.dim_size(1), outputs = kernel.dim_size(1);
    Tensor* y = nullptr;
    OP_REQUIRES_OK(context, context->allocate_output(0, TensorShape({outputs, columns}), &y));
    if constexpr (std::is_same_v<T, bfloat16>) {
      ProjectChannelsFirstBfloat16(kernel.flat<T>().data(), x.flat<T>().data(), rows, columns, outputs,
                                   y->flat<T>().data(), ShardsOf(context));
    } else {
      ProjectChannelsFirst(kernel.flat<T>().data(), x.flat<T>().data(), rows, columns, outputs,
                           y->flat<T>().data(), ShardsOf(context));
    }
  }
};

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
    ProjectChannelsFirstKernelGrad(dy.flat<T>().data(), x.flat<T>().data(), rows, columns, outputs,
                                   dkernel->flat<T>().data(), ShardsOf(context));
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
REGISTER_KERNEL_BUILDER(Name("SitChannelsFirstProjectionBfloat16").Device(DEVICE_CPU),
                        ChannelsFirstProjectionOp<bfloat16>);

}  // namespace
}  // namespace sit_keras
