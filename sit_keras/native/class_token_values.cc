// The class token's row of a token-only GSA block whose scores are formed outside the op (SiT paper eq. 3,
// 6 and 11 for row 0): the first local block of a SiT with one local block, whose class token's q_0 and
// k_0 are constants, so that its scores q_0 . (G_k K)_j and (G_q Q)_j . k_0 are one matmul of the
// window's composed inputs (GraphSymmetricAttention.attend_constant_class_token). What is left per window
// are the values, and this op forms them a block of kLanes windows at a time, never writing the (D, B, T)
// values, their graph mixing or the attention-weighted products to memory:
//
// SitClassTokenValues: x (R, B / kLanes, T, kLanes) (the R composed inputs of each window token),
//   scores (B, 2, H, T) (row[b, h, j] = q_0 . k_j and column[b, h, j] = q_j . k_0 of head h),
//   kernel (R, H d) (the values' projection), graphs (H d, T, T) (G_v transposed, [c, t, j] = G_c[j, t]) and
//   coefficients (M, 2) -> out (B, 1, H d):
//     a[j]        = sum_m softmax_j(c[m, 0] row[j] + c[m, 1] column[j])
//     out[b, 0, c] = sum_j a[j] sum_t graphs[c, t, j] sum_r kernel[r, c] x[r, b, t]
// SitClassTokenValuesGrad: dout (B, 1, H d) and the inputs -> the gradients of x, the scores, the kernel
//   and the graphs.
// x, out and their gradients have the dtype S: T, or bfloat16 for T = float (mixed_bfloat16), read as floats
// and written rounded, as TensorFlow's Cast would (kernels.h).

#include "class_token_values.h"
#include "kernels.h"

namespace sit_keras {
namespace {

REGISTER_OP("SitClassTokenValues")
    .Input("x: S")
    .Input("scores: T")
    .Input("kernel: T")
    .Input("graphs: T")
    .Input("coefficients: T")
    .Output("out: S")
    .Attr("num_heads: int >= 1")
    .Attr("T: {float, double}")
    .Attr("S: {float, double, bfloat16}")
    .SetShapeFn([](InferenceContext* c) {
      ShapeHandle x, kernel;
      TF_RETURN_IF_ERROR(c->WithRank(c->input(0), 4, &x));
      TF_RETURN_IF_ERROR(c->WithRank(c->input(2), 2, &kernel));
      DimensionHandle windows;
      TF_RETURN_IF_ERROR(c->Multiply(c->Dim(x, 1), kLanes, &windows));
      c->set_output(0, c->MakeShape({windows, 1, c->Dim(kernel, 1)}));
      return Status();
    });

REGISTER_OP("SitClassTokenValuesGrad")
    .Input("dout: S")
    .Input("x: S")
    .Input("scores: T")
    .Input("kernel: T")
    .Input("graphs: T")
    .Input("coefficients: T")
    .Output("dx: S")
    .Output("dscores: T")
    .Output("dkernel: T")
    .Output("dgraphs: T")
    .Attr("num_heads: int >= 1")
    .Attr("T: {float, double}")
    .Attr("S: {float, double, bfloat16}")
    .SetShapeFn([](InferenceContext* c) {
      for (int i = 0; i < 4; ++i) c->set_output(i, c->input(i + 1));
      return Status();
    });

// The ops' shared part: their attribute num_heads, and their inputs x, scores, kernel, graphs and
// coefficients from input `first` on (the gradient op's dout comes before them).
template <typename T, typename S>
class ValuesKernel : public OpKernel {
 public:
  explicit ValuesKernel(OpKernelConstruction* context) : OpKernel(context) {
    OP_REQUIRES_OK(context, context->GetAttr("num_heads", &num_heads_));
  }

 protected:
  Status ReadInputs(OpKernelContext* context, int first, ValuesSizes* s, ValuesInputs<T, S>* in) const {
    TF_RETURN_IF_ERROR(ReadValuesSizes(num_heads_, context->input(first).shape(),
                                       context->input(first + 1).shape(), context->input(first + 2).shape(),
                                       context->input(first + 3).shape(), context->input(first + 4).shape(), s));
    *in = ValuesInputs<T, S>{context->input(first).flat<S>().data(), context->input(first + 1).flat<T>().data(),
                             context->input(first + 2).flat<T>().data(), context->input(first + 3).flat<T>().data(),
                             context->input(first + 4).flat<T>().data()};
    return Status();
  }

 private:
  int num_heads_;
};

template <typename T, typename S>
class ClassTokenValuesOp : public ValuesKernel<T, S> {
 public:
  using ValuesKernel<T, S>::ValuesKernel;

  void Compute(OpKernelContext* context) override {
    ValuesSizes s;
    ValuesInputs<T, S> in;
    OP_REQUIRES_OK(context, this->ReadInputs(context, 0, &s, &in));
    Tensor* out = nullptr;
    OP_REQUIRES_OK(context, context->allocate_output(0, TensorShape({s.windows, 1, s.heads * s.head_dim}), &out));
    ClassTokenValues(s, in, out->flat<S>().data(), ShardsOf(context));
  }
};

template <typename T, typename S>
class ClassTokenValuesGradOp : public ValuesKernel<T, S> {
 public:
  using ValuesKernel<T, S>::ValuesKernel;

  void Compute(OpKernelContext* context) override {
    ValuesSizes s;
    ValuesInputs<T, S> in;
    OP_REQUIRES_OK(context, this->ReadInputs(context, 1, &s, &in));
    OP_REQUIRES_OK(context, CheckValuesGradInputs(s, context->input(0).shape()));
    Tensor* outputs[4] = {};
    for (int i = 0; i < 4; ++i) {
      OP_REQUIRES_OK(context, context->allocate_output(i, context->input(i + 1).shape(), &outputs[i]));
    }
    const ValuesGradients<T, S> out{outputs[0]->flat<S>().data(), outputs[1]->flat<T>().data(),
                                    outputs[2]->flat<T>().data(), outputs[3]->flat<T>().data()};
    ClassTokenValuesGrad(s, context->input(0).flat<S>().data(), in, out, ThreadsOf(context), ShardsOf(context));
  }
};

#define REGISTER(T, S)                                                                                      \
  REGISTER_KERNEL_BUILDER(                                                                                  \
      Name("SitClassTokenValues").Device(DEVICE_CPU).TypeConstraint<T>("T").TypeConstraint<S>("S"),         \
      ClassTokenValuesOp<T, S>);                                                                            \
  REGISTER_KERNEL_BUILDER(                                                                                  \
      Name("SitClassTokenValuesGrad").Device(DEVICE_CPU).TypeConstraint<T>("T").TypeConstraint<S>("S"),     \
      ClassTokenValuesGradOp<T, S>);
REGISTER(float, float);
REGISTER(double, double);
REGISTER(float, bfloat16);
#undef REGISTER

}  // namespace
}  // namespace sit_keras
