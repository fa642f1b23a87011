// Fused window attention for the GSA blocks of sit_keras (SiT paper eq. 3, 6, 8, 11).
//
// Inputs: the channels-first projections in blocks of kLanes windows, qkv (3 H d, B / kLanes, T,
// kLanes), their bias (3 H d) and the transposed graphs G_q, G_k, G_v (3 H d, T, T). SitWindowAttention
// also takes a kernel: (0, 3 H d), or (R, 3 H d) when its first input holds the R channels that kernel
// projects to q, k and v (the op projects them itself: Source below), and skip (W, T, H d), W <= B: a
// block's skip connection, added to the first W windows' outputs (W = 0: none), so that the sum is not a
// pass of its own over the tokens. For every window b and head h, with x the head's d x T slice of q, k or v
// plus its bias:
//
//   q[f, j]  = sum_t graphs[f, t, j] x_q[f, t]     (and k, v alike: the graph mixing of eq. 11)
//   S[i, j]  = sum_f q[f, i] k[f, j]                               (scores)
//   L_m[p]   = sum_k values[m, h, p, k] S[indices[p, k]]           (p = i T + j: the linear score
//              map of eq. 3 / 8: G, S +- S^T, the triangle sums and 1 / sqrt(d), one per m)
//   A        = sum_m softmax_j(L_m)                                (m = 0: eq. 3; m = 1: eq. 6)
//   out[b, i, h d + f] = sum_j A[i, j] v[f, j]   (+ skip[b, i, h d + f] for the first W windows)
//
// Given the attribute `orbits` (the quarter turn's orbits of the tokens), the ops mix each graph that is
// C4-invariant on them in the turn's Fourier basis instead, the same sums in fewer multiply-adds
// (rotation_spectra.h). The gradient ops' attribute `orbit_gradients` (with orbits) says the graphs are
// built from classes of token pairs that the turn keeps, so only the sums of their gradient over the
// turn's orbits of pairs matter: for windows of up to 1024 token pairs the ops then return that gradient
// averaged over those orbits, formed in the turn's Fourier basis (105 instead of 289 multiply-adds a 4 x 4
// window's feature); every class gets the same gradient as from the dense one.
//
// SitClassTokenAttention computes row i = 0 alone, with L_m[j] = c[m, 0] q_0 . k_j + c[m, 1] q_j . k_0.
// The gradient ops recompute each window's S and A and return the gradients of qkv, the bias,
// the graphs and (SitWindowAttentionGrad) the map's values. Nothing of size B x T x T is stored:
// the builtin ops write the scores, the mapped scores and the attention weights to memory and
// read them back, and on a CPU those passes, not the arithmetic, bound the step. Windows are
// processed kLanes at a time, one per vector lane, so every loop below runs on kLanes-wide rows.
//
// The large tensors (qkv, out and their gradients) have the dtype S: T, or bfloat16 for T = float
// (mixed_bfloat16), which the ops read as floats and write rounded, as TensorFlow's Cast would.

#include <string>
#include <vector>

#include "kernels.h"
#include "window_attention.h"

namespace sit_keras {
namespace {

REGISTER_OP("SitWindowAttention")
    .Input("qkv: S")
    .Input("kernel: T")
    .Input("bias: T")
    .Input("graphs: T")
    .Input("values: T")
    .Input("indices: int32")
    .Input("skip: S")
    .Output("out: S")
    .Attr("num_heads: int >= 1")
    .Attr("orbits: list(int) = []")
    .Attr("T: {float, double}")
    .Attr("S: {float, double, bfloat16}")
    .SetShapeFn([](InferenceContext* c) {
      ShapeHandle qkv, kernel;
      TF_RETURN_IF_ERROR(c->WithRank(c->input(0), 4, &qkv));
      TF_RETURN_IF_ERROR(c->WithRank(c->input(1), 2, &kernel));
      auto channels = c->Dim(kernel, 1);
      auto dim = c->UnknownDim();
      if (c->ValueKnown(channels)) dim = c->MakeDim(c->Value(channels) / 3);
      tensorflow::shape_inference::DimensionHandle windows;
      TF_RETURN_IF_ERROR(c->Multiply(c->Dim(qkv, 1), kLanes, &windows));
      c->set_output(0, c->MakeShape({windows, c->Dim(qkv, 2), dim}));
      return Status();
    });

REGISTER_OP("SitWindowAttentionGrad")
    .Input("dout: S")
    .Input("qkv: S")
    .Input("kernel: T")
    .Input("bias: T")
    .Input("graphs: T")
    .Input("values: T")
    .Input("indices: int32")
    .Input("transposed_values: T")
    .Input("transposed_indices: int32")
    .Output("dqkv: S")
    .Output("dkernel: T")
    .Output("dbias: T")
    .Output("dgraphs: T")
    .Output("dvalues: T")
    .Attr("num_heads: int >= 1")
    .Attr("orbits: list(int) = []")
    .Attr("orbit_gradients: bool = false")
    .Attr("T: {float, double}")
    .Attr("S: {float, double, bfloat16}")
    .SetShapeFn([](InferenceContext* c) {
      for (int i = 0; i < 5; ++i) c->set_output(i, c->input(i + 1));
      return Status();
    });

REGISTER_OP("SitClassTokenAttention")
    .Input("qkv: S")
    .Input("bias: T")
    .Input("graphs: T")
    .Input("coefficients: T")
    .Output("out: S")
    .Attr("num_heads: int >= 1")
    .Attr("orbits: list(int) = []")
    .Attr("T: {float, double}")
    .Attr("S: {float, double, bfloat16}")
    .SetShapeFn([](InferenceContext* c) {
      ShapeHandle qkv;
      TF_RETURN_IF_ERROR(c->WithRank(c->input(0), 4, &qkv));
      auto channels = c->Dim(qkv, 0);
      auto dim = c->UnknownDim();
      if (c->ValueKnown(channels)) dim = c->MakeDim(c->Value(channels) / 3);
      tensorflow::shape_inference::DimensionHandle windows;
      TF_RETURN_IF_ERROR(c->Multiply(c->Dim(qkv, 1), kLanes, &windows));
      c->set_output(0, c->MakeShape({windows, 1, dim}));
      return Status();
    });

REGISTER_OP("SitClassTokenAttentionGrad")
    .Input("dout: S")
    .Input("qkv: S")
    .Input("bias: T")
    .Input("graphs: T")
    .Input("coefficients: T")
    .Output("dqkv: S")
    .Output("dbias: T")
    .Output("dgraphs: T")
    .Attr("num_heads: int >= 1")
    .Attr("orbits: list(int) = []")
    .Attr("orbit_gradients: bool = false")
    .Attr("T: {float, double}")
    .Attr("S: {float, double, bfloat16}")
    .SetShapeFn([](InferenceContext* c) {
      for (int i = 0; i < 3; ++i) c->set_output(i, c->input(i + 1));
      return Status();
    });

// An op of one GSA layer's heads (attribute num_heads) on windows whose quarter turn has the orbits of
// attribute `orbits` (none: every graph is mixed densely).
class HeadsKernel : public OpKernel {
 public:
  explicit HeadsKernel(OpKernelConstruction* context) : OpKernel(context) {
    OP_REQUIRES_OK(context, context->GetAttr("num_heads", &num_heads_));
    OP_REQUIRES_OK(context, context->GetAttr("orbits", &orbit_list_));
    if (context->HasAttr("orbit_gradients")) {  // the gradient ops'
      OP_REQUIRES_OK(context, context->GetAttr("orbit_gradients", &orbit_gradients_));
    }
  }

 protected:
  int num_heads_;
  std::vector<int64_t> orbit_list_;
  bool orbit_gradients_ = false;
};

template <typename T, typename S>
class WindowAttentionOp : public HeadsKernel {
 public:
  explicit WindowAttentionOp(OpKernelConstruction* context) : HeadsKernel(context) {}

  void Compute(OpKernelContext* context) override {
    const Tensor& qkv = context->input(0);
    const Tensor& kernel = context->input(1);
    const Tensor& bias = context->input(2);
    const Tensor& graphs = context->input(3);
    const Tensor& values = context->input(4);
    const Tensor& indices = context->input(5);
    const Tensor& skip = context->input(6);
    AttentionSizes s;
    OP_REQUIRES_OK(context, ReadSizes(num_heads_, qkv.shape(), kernel.shape(), bias.shape(), graphs.shape(),
                                      values.shape(), indices.shape(), indices.flat<int32_t>().data(), &s));
    OP_REQUIRES_OK(context, CheckSkip(s, skip.shape()));
    Orbits orbits;
    OP_REQUIRES_OK(context, ReadOpOrbits(name().c_str(), orbit_list_, s.tokens, &orbits));
    Tensor* out = nullptr;
    OP_REQUIRES_OK(context,
                   context->allocate_output(0, TensorShape({s.windows, s.tokens, s.heads * s.head_dim}), &out));
    const WindowInputs<T, S> in{qkv.flat<S>().data(),    kernel.flat<T>().data(),
                             bias.flat<T>().data(),   graphs.flat<T>().data(),
                             values.flat<T>().data(), indices.flat<int32_t>().data()};
    const Skip<S> add{skip.flat<S>().data(), skip.dim_size(0)};
    WindowAttention(s, std::move(orbits), in, add, out->flat<S>().data(), ShardsOf(context));
  }
};

template <typename T, typename S>
class WindowAttentionGradOp : public HeadsKernel {
 public:
  explicit WindowAttentionGradOp(OpKernelConstruction* context) : HeadsKernel(context) {}

  void Compute(OpKernelContext* context) override {
    const Tensor& dout = context->input(0);
    const Tensor& qkv = context->input(1);
    const Tensor& kernel = context->input(2);
    const Tensor& bias = context->input(3);
    const Tensor& graphs = context->input(4);
    const Tensor& values = context->input(5);
    const Tensor& indices = context->input(6);
    const Tensor& transposed_values = context->input(7);
    const Tensor& transposed_indices = context->input(8);
    AttentionSizes s;
    OP_REQUIRES_OK(context, ReadSizes(num_heads_, qkv.shape(), kernel.shape(), bias.shape(), graphs.shape(),
                                      values.shape(), indices.shape(), indices.flat<int32_t>().data(), &s));
    OP_REQUIRES_OK(context, CheckWindowGradInputs(s, transposed_values.shape(), transposed_indices.shape(),
                                                  transposed_indices.flat<int32_t>().data(), dout.shape()));
    Orbits orbits;
    OP_REQUIRES_OK(context, ReadOpOrbits(name().c_str(), orbit_list_, s.tokens, &orbits));
    Tensor *dqkv = nullptr, *dkernel = nullptr, *dbias = nullptr, *dgraphs = nullptr, *dvalues = nullptr;
    OP_REQUIRES_OK(context, context->allocate_output(0, qkv.shape(), &dqkv));
    OP_REQUIRES_OK(context, context->allocate_output(1, kernel.shape(), &dkernel));
    OP_REQUIRES_OK(context, context->allocate_output(2, bias.shape(), &dbias));
    OP_REQUIRES_OK(context, context->allocate_output(3, graphs.shape(), &dgraphs));
    OP_REQUIRES_OK(context, context->allocate_output(4, values.shape(), &dvalues));
    const WindowInputs<T, S> in{qkv.flat<S>().data(),    kernel.flat<T>().data(),
                             bias.flat<T>().data(),   graphs.flat<T>().data(),
                             values.flat<T>().data(), indices.flat<int32_t>().data()};
    const WindowGradients<T, S> out{dqkv->flat<S>().data(), dkernel->flat<T>().data(), dbias->flat<T>().data(),
                                 dgraphs->flat<T>().data(), dvalues->flat<T>().data()};
    WindowAttentionGrad(s, std::move(orbits), orbit_gradients_, dout.flat<S>().data(), in,
                        transposed_values.flat<T>().data(), transposed_indices.flat<int32_t>().data(),
                        transposed_indices.dim_size(1), out, ThreadsOf(context), ShardsOf(context));
  }
};

template <typename T, typename S>
class ClassTokenAttentionOp : public HeadsKernel {
 public:
  explicit ClassTokenAttentionOp(OpKernelConstruction* context) : HeadsKernel(context) {}

  void Compute(OpKernelContext* context) override {
    const Tensor& qkv = context->input(0);
    const Tensor& bias = context->input(1);
    const Tensor& graphs = context->input(2);
    const Tensor& coefficients = context->input(3);
    AttentionSizes s;
    OP_REQUIRES_OK(context,
                   ReadClassSizes(num_heads_, qkv.shape(), bias.shape(), graphs.shape(), coefficients.shape(), &s));
    Orbits orbits;
    OP_REQUIRES_OK(context, ReadOpOrbits(name().c_str(), orbit_list_, s.tokens, &orbits));
    Tensor* out = nullptr;
    OP_REQUIRES_OK(context, context->allocate_output(0, TensorShape({s.windows, 1, s.heads * s.head_dim}), &out));
    ClassTokenAttention(s, std::move(orbits), qkv.flat<S>().data(), bias.flat<T>().data(), graphs.flat<T>().data(),
                        coefficients.flat<T>().data(), out->flat<S>().data(), ShardsOf(context));
  }
};

template <typename T, typename S>
class ClassTokenAttentionGradOp : public HeadsKernel {
 public:
  explicit ClassTokenAttentionGradOp(OpKernelConstruction* context) : HeadsKernel(context) {}

  void Compute(OpKernelContext* context) override {
    const Tensor& dout = context->input(0);
    const Tensor& qkv = context->input(1);
    const Tensor& bias = context->input(2);
    const Tensor& graphs = context->input(3);
    const Tensor& coefficients = context->input(4);
    AttentionSizes s;
    OP_REQUIRES_OK(context,
                   ReadClassSizes(num_heads_, qkv.shape(), bias.shape(), graphs.shape(), coefficients.shape(), &s));
    OP_REQUIRES_OK(context, CheckClassGradInputs(s, dout.shape()));
    Orbits orbits;
    OP_REQUIRES_OK(context, ReadOpOrbits(name().c_str(), orbit_list_, s.tokens, &orbits));
    Tensor *dqkv = nullptr, *dbias = nullptr, *dgraphs = nullptr;
    OP_REQUIRES_OK(context, context->allocate_output(0, qkv.shape(), &dqkv));
    OP_REQUIRES_OK(context, context->allocate_output(1, bias.shape(), &dbias));
    OP_REQUIRES_OK(context, context->allocate_output(2, graphs.shape(), &dgraphs));
    ClassTokenAttentionGrad(s, std::move(orbits), orbit_gradients_, dout.flat<S>().data(), qkv.flat<S>().data(),
                            bias.flat<T>().data(), graphs.flat<T>().data(), coefficients.flat<T>().data(),
                            dqkv->flat<S>().data(), dbias->flat<T>().data(), dgraphs->flat<T>().data(),
                            ThreadsOf(context), ShardsOf(context));
  }
};

#define REGISTER(T, S)                                                                                      \
  REGISTER_KERNEL_BUILDER(                                                                                  \
      Name("SitWindowAttention").Device(DEVICE_CPU).TypeConstraint<T>("T").TypeConstraint<S>("S"),          \
      WindowAttentionOp<T, S>);                                                                             \
  REGISTER_KERNEL_BUILDER(                                                                                  \
      Name("SitWindowAttentionGrad").Device(DEVICE_CPU).TypeConstraint<T>("T").TypeConstraint<S>("S"),      \
      WindowAttentionGradOp<T, S>);                                                                         \
  REGISTER_KERNEL_BUILDER(                                                                                  \
      Name("SitClassTokenAttention").Device(DEVICE_CPU).TypeConstraint<T>("T").TypeConstraint<S>("S"),      \
      ClassTokenAttentionOp<T, S>);                                                                         \
  REGISTER_KERNEL_BUILDER(                                                                                  \
      Name("SitClassTokenAttentionGrad").Device(DEVICE_CPU).TypeConstraint<T>("T").TypeConstraint<S>("S"),  \
      ClassTokenAttentionGradOp<T, S>);
REGISTER(float, float);
REGISTER(double, double);
REGISTER(float, bfloat16);
#undef REGISTER

}  // namespace
}  // namespace sit_keras
