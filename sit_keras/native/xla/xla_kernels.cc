// The native kernels inside XLA: under tf.function(jit_compile=True) an op of _kernels.so has no XLA
// kernel, so the layers took TensorFlow's builtin ops there. This library gives each of them one: at
// compile time a kernel below checks the shapes and the window ops' constant indices (a wrong one fails
// the compilation with the op's message) and emits a custom call to a host function, which runs the op's
// computation (the same code as its TensorFlow kernel: channels_first.h, conv2d.h, conv_kernel_grad.h,
// depthwise_stem.h, max_pool.h, standardize.h, window_attention.h) on XLA's buffers. A tuple result reaches
// its host function as an array of its elements' buffers.
//
// A custom call gets no thread pool from XLA's CPU runtime: the host functions run on TensorFlow's intra-op
// threads once SitXlaHostThreads (the one op defined here) has handed them over, else on a pool of their own
// (HostPool). The shapes travel in the call's opaque string (int64 values).
// Built only where LLVM's headers are installed (XLA's headers include them; sit_keras/native/build.py),
// and linked to libtensorflow_cc, which exports the XLA symbols used here.

#include <sched.h>

#include <atomic>
#include <cstring>
#include <string>
#include <vector>

#include "../channels_first.h"
#include "../class_token_values.h"
#include "../conv2d.h"
#include "../conv_kernel_grad.h"
#include "../depthwise_stem.h"
#include "../kernels.h"
#include "../max_pool.h"
#include "../standardize.h"
#include "../window_attention.h"
#include "tensorflow/compiler/tf2xla/xla_op_kernel.h"
#include "tensorflow/compiler/tf2xla/xla_op_registry.h"
#include "xla/hlo/builder/xla_builder.h"
#include "xla/service/custom_call_status.h"
#include "xla/service/custom_call_target_registry.h"
#include "xla/shape_util.h"

namespace sit_keras {
namespace {

using tensorflow::DataType;
using tensorflow::XlaOpKernel;
using tensorflow::XlaOpKernelContext;

// TensorFlow's CPU device's intra-op threads, once SitXlaHostThreads has handed them over: the threads the
// XLA launch gives a compiled program for its own parallel loops and oneDNN calls. A second pool on the same
// cores made the two spin against each other from one call to the next: at the MiniGrid size SiT-small's XLA
// step took 1.069x as long with the pool below, the CNN's 1.074x (docs/speed.md, "The custom calls on
// TensorFlow's threads").
std::atomic<tsl::thread::ThreadPool*> device_threads{nullptr};

// A pool of the host functions' own, as many threads as the CPUs this process may use: started only where
// they do not run on TensorFlow's threads.
tsl::thread::ThreadPool* OwnPool() {
  static tsl::thread::ThreadPool* pool = [] {
    cpu_set_t cpus;
    const int count = sched_getaffinity(0, sizeof(cpus), &cpus) == 0 ? CPU_COUNT(&cpus) : 1;
    return new tsl::thread::ThreadPool(tsl::Env::Default(), "sit_keras_xla", std::max(count, 1));
  }();
  return pool;
}

// The threads the host functions run on.
tsl::thread::ThreadPool* HostPool() {
  tsl::thread::ThreadPool* device = device_threads.load(std::memory_order_acquire);
  return device != nullptr ? device : OwnPool();
}

// One call's work shared out on the pool that was HostPool() when the call began.
Shards HostShards() {
  tsl::thread::ThreadPool* pool = HostPool();
  return [pool](int64_t units, int64_t cost, const std::function<void(int64_t, int64_t)>& work) {
    tensorflow::Shard(pool->NumThreads(), pool, units, cost, work);
  };
}

std::string Opaque(const std::vector<int64_t>& sizes) {
  return std::string(reinterpret_cast<const char*>(sizes.data()), sizes.size() * sizeof(int64_t));
}

std::vector<int64_t> OpaqueSizes(const char* opaque, size_t length) {
  std::vector<int64_t> sizes(length / sizeof(int64_t));
  std::memcpy(sizes.data(), opaque, sizes.size() * sizeof(int64_t));
  return sizes;
}

// The custom call of `target` on `operands` of `layouts` (row-major shapes), giving `result` (a tuple's
// host function gets an array of its elements' buffers).
xla::XlaOp CustomCall(XlaOpKernelContext* ctx, const std::string& target, const std::vector<xla::XlaOp>& operands,
                      const std::vector<xla::Shape>& layouts, const xla::Shape& result,
                      const std::vector<int64_t>& sizes) {
  return xla::CustomCallWithLayout(ctx->builder(), target, operands, result, layouts, Opaque(sizes),
                                   /*has_side_effect=*/false, /*output_operand_aliasing=*/{}, /*literal=*/nullptr,
                                   xla::CustomCallSchedule::SCHEDULE_NONE,
                                   xla::CustomCallApiVersion::API_VERSION_STATUS_RETURNING_UNIFIED);
}

// A row-major shape of the kernel's dtype.
xla::Shape ShapeOf(XlaOpKernelContext* ctx, const tensorflow::TensorShape& shape) {
  return xla::ShapeUtil::MakeShape(ctx->input_xla_type(0), shape.dim_sizes());
}

// The custom call of `target` on operands and a result all of the kernel's dtype.
xla::XlaOp Call(XlaOpKernelContext* ctx, const std::string& target, const std::vector<xla::XlaOp>& operands,
                const std::vector<tensorflow::TensorShape>& operand_shapes, const tensorflow::TensorShape& result,
                const std::vector<int64_t>& sizes) {
  std::vector<xla::Shape> layouts;
  for (const auto& shape : operand_shapes) layouts.push_back(ShapeOf(ctx, shape));
  return CustomCall(ctx, target, operands, layouts, ShapeOf(ctx, result), sizes);
}

// The host function's name for an op's target and the kernel's dtype.
std::string Target(const char* name, DataType dtype) {
  return std::string(name) + (dtype == tensorflow::DT_DOUBLE ? "_f64" : "_f32");
}

// Attribute S, the dtype the stem's, the attention and the standardisation ops store their large tensors in,
// is T under XLA: the custom calls take float or double buffers, and sit_keras.native casts bfloat16 up
// around the ops in a compiled function.
Status CheckStorageIsComputeType(OpKernelConstruction* context) {
  DataType compute, storage;
  TF_RETURN_IF_ERROR(context->GetAttr("T", &compute));
  TF_RETURN_IF_ERROR(context->GetAttr("S", &storage));
  if (storage != compute) {
    return InvalidArgument(context->def().op(), " under XLA needs S = T; got S = ",
                           tensorflow::DataTypeString(storage), ", T = ", tensorflow::DataTypeString(compute));
  }
  return Status();
}

// --- SitMaxPool, SitMaxPoolGrad ---------------------------------------------------------------------

template <typename T>
void MaxPoolHost(void* out, const void** in, const char* opaque, size_t length, XlaCustomCallStatus*) {
  const std::vector<int64_t> s = OpaqueSizes(opaque, length);  // B, H, W, C, k
  MaxPool(static_cast<const T*>(in[0]), PoolSizes(s[0], s[1], s[2], s[3], s[4]), static_cast<T*>(out),
          HostShards());
}

template <typename T>
void MaxPoolGradHost(void* out, const void** in, const char* opaque, size_t length, XlaCustomCallStatus*) {
  const std::vector<int64_t> s = OpaqueSizes(opaque, length);
  MaxPoolGrad(static_cast<const T*>(in[0]), static_cast<const T*>(in[1]), static_cast<const T*>(in[2]),
              PoolSizes(s[0], s[1], s[2], s[3], s[4]), static_cast<T*>(out), HostShards());
}

class MaxPoolXla : public XlaOpKernel {
 public:
  explicit MaxPoolXla(OpKernelConstruction* context) : XlaOpKernel(context) {
    OP_REQUIRES_OK(context, context->GetAttr("size", &size_));
    grad_ = type_string() == "SitMaxPoolGrad";
  }

  void Compile(XlaOpKernelContext* ctx) override {
    const tensorflow::TensorShape x = ctx->InputShape(0);
    const char* op = grad_ ? "SitMaxPoolGrad" : "SitMaxPool";
    OP_REQUIRES(ctx, x.dims() == 4, InvalidArgument(op, " expects x (B, H, W, C); got ", x.DebugString()));
    const tensorflow::TensorShape y({x.dim_size(0), x.dim_size(1) / size_, x.dim_size(2) / size_, x.dim_size(3)});
    const std::vector<int64_t> sizes = {x.dim_size(0), x.dim_size(1), x.dim_size(2), x.dim_size(3), size_};
    if (!grad_) {
      ctx->SetOutput(0, Call(ctx, Target("sit_max_pool", ctx->input_type(0)), {ctx->Input(0)}, {x}, y, sizes));
      return;
    }
    OP_REQUIRES(ctx, ctx->InputShape(1) == y && ctx->InputShape(2) == y,
                InvalidArgument(op, " expects y and dy ", y.DebugString(), " for x ", x.DebugString(),
                                " and size ", size_, "; got ", ctx->InputShape(1).DebugString(), " and ",
                                ctx->InputShape(2).DebugString()));
    ctx->SetOutput(0, Call(ctx, Target("sit_max_pool_grad", ctx->input_type(0)),
                           {ctx->Input(0), ctx->Input(1), ctx->Input(2)}, {x, y, y}, x, sizes));
  }

 private:
  int size_;
  bool grad_;
};

// --- SitStridedMaxPoolGrad ---------------------------------------------------------------------------

template <typename T>
void StridedMaxPoolGradHost(void* out, const void** in, const char* opaque, size_t length, XlaCustomCallStatus*) {
  const std::vector<int64_t> s = OpaqueSizes(opaque, length);  // B, H, W, C, k, stride
  StridedMaxPoolGrad(static_cast<const T*>(in[0]), static_cast<const T*>(in[1]), static_cast<const T*>(in[2]),
                     StridedPoolSizes(s[0], s[1], s[2], s[3], s[4], s[5]), static_cast<T*>(out), HostShards());
}

class StridedMaxPoolGradXla : public XlaOpKernel {
 public:
  explicit StridedMaxPoolGradXla(OpKernelConstruction* context) : XlaOpKernel(context) {
    OP_REQUIRES_OK(context, context->GetAttr("size", &size_));
    OP_REQUIRES_OK(context, context->GetAttr("stride", &stride_));
    OP_REQUIRES_OK(context, CheckStridedPoolSize(size_));
  }

  void Compile(XlaOpKernelContext* ctx) override {
    const tensorflow::TensorShape x = ctx->InputShape(0);
    OP_REQUIRES(ctx, x.dims() == 4,
                InvalidArgument("SitStridedMaxPoolGrad expects x (B, H, W, C); got ", x.DebugString()));
    const StridedPoolSizes n(x.dim_size(0), x.dim_size(1), x.dim_size(2), x.dim_size(3), size_, stride_);
    const tensorflow::TensorShape y({n.images, n.out_height, n.out_width, n.channels});
    OP_REQUIRES_OK(ctx, CheckStridedPoolGradInputs(n, x, ctx->InputShape(1), ctx->InputShape(2)));
    const std::vector<int64_t> sizes = {x.dim_size(0), x.dim_size(1), x.dim_size(2), x.dim_size(3), size_, stride_};
    ctx->SetOutput(0, Call(ctx, Target("sit_strided_max_pool_grad", ctx->input_type(0)),
                           {ctx->Input(0), ctx->Input(1), ctx->Input(2)}, {x, y, y}, x, sizes));
  }

 private:
  int64_t size_, stride_;
};

// --- SitChannelsFirstProjection, SitChannelsFirstProjectionKernelGrad ---------------------------------

template <typename T>
void ProjectionHost(void* out, const void** in, const char* opaque, size_t length, XlaCustomCallStatus*) {
  const std::vector<int64_t> s = OpaqueSizes(opaque, length);  // R, L, N
  ProjectChannelsFirst(static_cast<const T*>(in[0]), static_cast<const T*>(in[1]), s[0], s[1], s[2],
                       static_cast<T*>(out), HostShards());
}

template <typename T>
void ProjectionKernelGradHost(void* out, const void** in, const char* opaque, size_t length,
                              XlaCustomCallStatus*) {
  const std::vector<int64_t> s = OpaqueSizes(opaque, length);
  ProjectChannelsFirstKernelGrad(static_cast<const T*>(in[0]), static_cast<const T*>(in[1]), s[0], s[1], s[2],
                                 static_cast<T*>(out), HostShards());
}

class ProjectionXla : public XlaOpKernel {
 public:
  explicit ProjectionXla(OpKernelConstruction* context) : XlaOpKernel(context) {
    grad_ = type_string() == "SitChannelsFirstProjectionKernelGrad";
  }

  void Compile(XlaOpKernelContext* ctx) override {
    // The projection takes (kernel (R, N), x (R, L)); the kernel's gradient (dy (N, L), x (R, L)).
    const tensorflow::TensorShape first = ctx->InputShape(0), x = ctx->InputShape(1);
    const char* op = grad_ ? "SitChannelsFirstProjectionKernelGrad" : "SitChannelsFirstProjection";
    OP_REQUIRES(ctx, first.dims() == 2 && x.dims() == 2,
                InvalidArgument(op, " expects ", grad_ ? "dy (N, L)" : "a kernel (R, N)", " and x (R, L); got ",
                                first.DebugString(), " and ", x.DebugString()));
    const int64_t rows = x.dim_size(0), columns = x.dim_size(1);
    const int64_t outputs = grad_ ? first.dim_size(0) : first.dim_size(1);
    const int64_t shared = grad_ ? first.dim_size(1) : first.dim_size(0);
    OP_REQUIRES(ctx, shared == (grad_ ? columns : rows),
                InvalidArgument(op, grad_ ? " expects dy (N, L) and x (R, L) with the same L; got "
                                          : " expects a kernel (R, N) and x (R, L) with the same R; got ",
                                first.DebugString(), " and ", x.DebugString()));
    const tensorflow::TensorShape result = grad_ ? tensorflow::TensorShape({rows, outputs})
                                                 : tensorflow::TensorShape({outputs, columns});
    const char* target = grad_ ? "sit_channels_first_projection_kernel_grad" : "sit_channels_first_projection";
    ctx->SetOutput(0, Call(ctx, Target(target, ctx->input_type(0)), {ctx->Input(0), ctx->Input(1)}, {first, x},
                           result, {rows, columns, outputs}));
  }

 private:
  bool grad_;
};

// --- SitConv2D ---------------------------------------------------------------------------------------

template <typename T>
void Conv2DHost(void* out, const void** in, const char* opaque, size_t length, XlaCustomCallStatus*) {
  const std::vector<int64_t> s = OpaqueSizes(opaque, length);  // B, H, W, C_in, C_out, k, relu
  Conv2D(static_cast<const T*>(in[0]), static_cast<const T*>(in[1]), DenseConvSizes(s[0], s[1], s[2], s[3], s[4], s[5]),
         ConvEpilogue<T>{static_cast<const T*>(in[2]), s[6] != 0}, static_cast<T*>(out), HostShards());
}

class Conv2DXla : public XlaOpKernel {
 public:
  explicit Conv2DXla(OpKernelConstruction* context) : XlaOpKernel(context) {
    OP_REQUIRES_OK(context, context->GetAttr("relu", &relu_));
  }

  void Compile(XlaOpKernelContext* ctx) override {
    const tensorflow::TensorShape x = ctx->InputShape(0), kernel = ctx->InputShape(1), bias = ctx->InputShape(2);
    OP_REQUIRES_OK(ctx, CheckConv2DInputs(x, kernel, bias));
    const tensorflow::TensorShape y({x.dim_size(0), x.dim_size(1), x.dim_size(2), kernel.dim_size(3)});
    const std::vector<int64_t> sizes = {x.dim_size(0), x.dim_size(1), x.dim_size(2), x.dim_size(3),
                                        kernel.dim_size(3), kernel.dim_size(0), relu_ ? 1 : 0};
    ctx->SetOutput(0, Call(ctx, Target("sit_conv2d", ctx->input_type(0)), {ctx->Input(0), ctx->Input(1), ctx->Input(2)},
                           {x, kernel, bias}, y, sizes));
  }

 private:
  bool relu_;
};

// --- SitConv2DKernelGrad -----------------------------------------------------------------------------

template <typename T>
void Conv2DKernelGradHost(void* out, const void** in, const char* opaque, size_t length, XlaCustomCallStatus*) {
  const std::vector<int64_t> s = OpaqueSizes(opaque, length);  // B, H, W, C_in, C_out, k
  Conv2DKernelGrad(static_cast<const T*>(in[0]), static_cast<const T*>(in[1]),
                   DenseConvSizes(s[0], s[1], s[2], s[3], s[4], s[5]), static_cast<T*>(out), HostShards());
}

class Conv2DKernelGradXla : public XlaOpKernel {
 public:
  explicit Conv2DKernelGradXla(OpKernelConstruction* context) : XlaOpKernel(context) {
    OP_REQUIRES_OK(context, context->GetAttr("size", &size_));
    OP_REQUIRES_OK(context, CheckConv2DKernelGradSize(size_));
  }

  void Compile(XlaOpKernelContext* ctx) override {
    const tensorflow::TensorShape dy = ctx->InputShape(0), x = ctx->InputShape(1);
    OP_REQUIRES_OK(ctx, CheckConv2DKernelGradInputs(dy, x));
    const tensorflow::TensorShape dkernel({size_, size_, x.dim_size(3), dy.dim_size(3)});
    const std::vector<int64_t> sizes = {x.dim_size(0), x.dim_size(1), x.dim_size(2), x.dim_size(3),
                                        dy.dim_size(3), size_};
    ctx->SetOutput(0, Call(ctx, Target("sit_conv2d_kernel_grad", ctx->input_type(0)), {ctx->Input(0), ctx->Input(1)},
                           {dy, x}, dkernel, sizes));
  }

 private:
  int64_t size_;
};

// --- SitDepthwiseConv, SitDepthwiseConvKernelGrad ---------------------------------------------------

template <typename T>
void DepthwiseConvHost(void* out, const void** in, const char* opaque, size_t length, XlaCustomCallStatus*) {
  const std::vector<int64_t> s = OpaqueSizes(opaque, length);  // B, H, W, C, k
  DepthwiseConv(static_cast<const T*>(in[0]), static_cast<const T*>(in[1]), static_cast<const T*>(in[2]),
                ConvSizes(s[0], s[1], s[2], s[3], s[4]), static_cast<T*>(out), HostShards());
}

template <typename T>
void DepthwiseConvKernelGradHost(void* out, const void** in, const char* opaque, size_t length,
                                 XlaCustomCallStatus*) {
  const std::vector<int64_t> s = OpaqueSizes(opaque, length);
  void** results = static_cast<void**>(out);  // a tuple: dkernel, dbias
  DepthwiseConvKernelGrad(static_cast<const T*>(in[0]), static_cast<const T*>(in[1]),
                          ConvSizes(s[0], s[1], s[2], s[3], s[4]), static_cast<T*>(results[0]),
                          static_cast<T*>(results[1]), HostShards());
}

class DepthwiseConvXla : public XlaOpKernel {
 public:
  explicit DepthwiseConvXla(OpKernelConstruction* context) : XlaOpKernel(context) {
    OP_REQUIRES_OK(context, CheckStorageIsComputeType(context));
    grad_ = type_string() == "SitDepthwiseConvKernelGrad";
  }

  void Compile(XlaOpKernelContext* ctx) override {
    // The convolution takes (x, kernel, bias); the kernel's gradient (dy, x, kernel).
    const int first = grad_ ? 1 : 0;
    const tensorflow::TensorShape x = ctx->InputShape(first), kernel = ctx->InputShape(first + 1);
    const char* op = grad_ ? "SitDepthwiseConvKernelGrad" : "SitDepthwiseConv";
    const bool fits = x.dims() == 4 && kernel.dims() == 3 && kernel.dim_size(0) == kernel.dim_size(1) &&
                      kernel.dim_size(0) % 2 == 1 && kernel.dim_size(2) == x.dim_size(3);
    OP_REQUIRES(ctx, fits,
                InvalidArgument(op, " expects x (B, H, W, C) and a kernel (k, k, ",
                                x.dims() == 4 ? std::to_string(x.dim_size(3)) : std::string("C"),
                                ") with k odd; got ", x.DebugString(), " and ", kernel.DebugString()));
    const std::vector<int64_t> sizes = {x.dim_size(0), x.dim_size(1), x.dim_size(2), x.dim_size(3),
                                        kernel.dim_size(0)};
    const tensorflow::TensorShape bias({kernel.dim_size(2)});
    if (!grad_) {
      OP_REQUIRES(ctx, ctx->InputShape(2) == bias,
                  InvalidArgument(op, " expects a bias ", bias.DebugString(), "; got ",
                                  ctx->InputShape(2).DebugString()));
      ctx->SetOutput(0, Call(ctx, Target("sit_depthwise_conv", ctx->input_type(0)),
                             {ctx->Input(0), ctx->Input(1), ctx->Input(2)}, {x, kernel, bias}, x, sizes));
      return;
    }
    OP_REQUIRES(ctx, ctx->InputShape(0) == x,
                InvalidArgument(op, " expects dy of x's shape ", x.DebugString(), "; got ",
                                ctx->InputShape(0).DebugString()));
    const xla::Shape result = xla::ShapeUtil::MakeTupleShape({ShapeOf(ctx, kernel), ShapeOf(ctx, bias)});
    const xla::XlaOp call = CustomCall(ctx, Target("sit_depthwise_conv_kernel_grad", ctx->input_type(0)),
                                       {ctx->Input(0), ctx->Input(1)}, {ShapeOf(ctx, x), ShapeOf(ctx, x)}, result,
                                       sizes);
    for (int i = 0; i < 2; ++i) ctx->SetOutput(i, xla::GetTupleElement(call, i));
  }

 private:
  bool grad_;
};

// --- SitWindowAttention(Grad), SitClassTokenAttention(Grad) ------------------------------------------

// The attention ops' opaque string: their sizes, K' (the transposed map's terms: SitWindowAttentionGrad's,
// else 0), the attribute `orbit_gradients` (the gradient ops'; else 0), the skip's windows (SitWindowAttention's,
// else 0), then the attribute `orbits`.
std::vector<int64_t> AttentionOpaque(const AttentionSizes& s, int64_t transposed_terms, bool orbit_gradients,
                                     int64_t skip_windows, const std::vector<int64_t>& orbits) {
  std::vector<int64_t> v = {s.heads, s.head_dim, s.windows, s.tokens, s.pairs, s.maps, s.terms, s.rows,
                            transposed_terms, orbit_gradients ? 1 : 0, skip_windows};
  v.insert(v.end(), orbits.begin(), orbits.end());
  return v;
}

struct AttentionCall {
  AttentionSizes s;
  int64_t transposed_terms;
  bool orbit_gradients;
  int64_t skip_windows;
  Orbits orbits;
};

AttentionCall ReadAttentionCall(const char* opaque, size_t length) {
  const std::vector<int64_t> v = OpaqueSizes(opaque, length);
  AttentionCall call{{v[0], v[1], v[2], v[3], v[4], v[5], v[6], v[7]}, v[8], v[9] != 0, v[10], {}};
  std::string why;  // none: the kernel checked the orbits when it compiled the call
  ReadOrbits(std::vector<int64_t>(v.begin() + 11, v.end()), call.s.tokens, &call.orbits, &why);
  return call;
}

template <typename T>
const T* In(const void** in, int i) {
  return static_cast<const T*>(in[i]);
}

// A tuple result's element i.
template <typename T>
T* Out(void* out, int i) {
  return static_cast<T*>(static_cast<void**>(out)[i]);
}

// In: qkv, kernel, bias, graphs, values, indices, skip.
template <typename T>
void WindowAttentionHost(void* out, const void** in, const char* opaque, size_t length, XlaCustomCallStatus*) {
  AttentionCall call = ReadAttentionCall(opaque, length);
  const WindowInputs<T> inputs{In<T>(in, 0), In<T>(in, 1), In<T>(in, 2),
                               In<T>(in, 3), In<T>(in, 4), In<int32_t>(in, 5)};
  const Skip<T> skip{In<T>(in, 6), call.skip_windows};
  WindowAttention(call.s, std::move(call.orbits), inputs, skip, static_cast<T*>(out), HostShards());
}

// In: dout, qkv, kernel, bias, graphs, values, indices, transposed values and indices; out: a tuple of five.
template <typename T>
void WindowAttentionGradHost(void* out, const void** in, const char* opaque, size_t length, XlaCustomCallStatus*) {
  AttentionCall call = ReadAttentionCall(opaque, length);
  const WindowInputs<T> inputs{In<T>(in, 1), In<T>(in, 2), In<T>(in, 3),
                               In<T>(in, 4), In<T>(in, 5), In<int32_t>(in, 6)};
  const WindowGradients<T> gradients{Out<T>(out, 0), Out<T>(out, 1), Out<T>(out, 2), Out<T>(out, 3),
                                     Out<T>(out, 4)};
  WindowAttentionGrad(call.s, std::move(call.orbits), call.orbit_gradients, In<T>(in, 0), inputs, In<T>(in, 7),
                      In<int32_t>(in, 8), call.transposed_terms, gradients, HostPool()->NumThreads(), HostShards());
}

// In: qkv, bias, graphs, coefficients.
template <typename T>
void ClassTokenAttentionHost(void* out, const void** in, const char* opaque, size_t length, XlaCustomCallStatus*) {
  AttentionCall call = ReadAttentionCall(opaque, length);
  ClassTokenAttention(call.s, std::move(call.orbits), In<T>(in, 0), In<T>(in, 1), In<T>(in, 2), In<T>(in, 3),
                      static_cast<T*>(out), HostShards());
}

// In: dout, qkv, bias, graphs, coefficients; out: a tuple of three.
template <typename T>
void ClassTokenAttentionGradHost(void* out, const void** in, const char* opaque, size_t length,
                                 XlaCustomCallStatus*) {
  AttentionCall call = ReadAttentionCall(opaque, length);
  ClassTokenAttentionGrad(call.s, std::move(call.orbits), call.orbit_gradients, In<T>(in, 0), In<T>(in, 1),
                          In<T>(in, 2), In<T>(in, 3), In<T>(in, 4), Out<T>(out, 0), Out<T>(out, 1), Out<T>(out, 2),
                          HostPool()->NumThreads(), HostShards());
}

// The attention ops' XLA kernels: each checks what its TensorFlow kernel checks (window_attention.h),
// the indices' values included, which must therefore be constants of the compiled function.
class AttentionXla : public XlaOpKernel {
 public:
  explicit AttentionXla(OpKernelConstruction* context) : XlaOpKernel(context) {
    OP_REQUIRES_OK(context, CheckStorageIsComputeType(context));
    OP_REQUIRES_OK(context, context->GetAttr("num_heads", &num_heads_));
    OP_REQUIRES_OK(context, context->GetAttr("orbits", &orbit_list_));
    if (context->HasAttr("orbit_gradients")) {  // the gradient ops'
      OP_REQUIRES_OK(context, context->GetAttr("orbit_gradients", &orbit_gradients_));
    }
  }

 protected:
  // The values of the constant int32 input i.
  Status ConstantIndices(XlaOpKernelContext* ctx, int i, std::vector<int32_t>* indices) const {
    std::vector<int64_t> values;
    const Status status = ctx->ConstantInputReshapedToIntVector(i, &values);
    if (!status.ok()) {
      return InvalidArgument(type_string(), " under XLA needs constant indices: ", status.message());
    }
    indices->assign(values.begin(), values.end());
    return Status();
  }

  Status CheckOrbits(int64_t tokens) const {
    Orbits orbits;
    return ReadOpOrbits(type_string().c_str(), orbit_list_, tokens, &orbits);
  }

  std::string Target(const char* name, XlaOpKernelContext* ctx) const {
    return sit_keras::Target(name, ctx->input_type(0));
  }

  int num_heads_;
  std::vector<int64_t> orbit_list_;
  bool orbit_gradients_ = false;
};

class WindowAttentionXla : public AttentionXla {
 public:
  using AttentionXla::AttentionXla;

  void Compile(XlaOpKernelContext* ctx) override {
    // qkv, kernel, bias, graphs, values, indices, skip
    std::vector<tensorflow::TensorShape> in(7);
    for (int i = 0; i < 7; ++i) in[i] = ctx->InputShape(i);
    std::vector<int32_t> indices;
    OP_REQUIRES_OK(ctx, ConstantIndices(ctx, 5, &indices));
    AttentionSizes s;
    OP_REQUIRES_OK(ctx, ReadSizes(num_heads_, in[0], in[1], in[2], in[3], in[4], in[5], indices.data(), &s));
    OP_REQUIRES_OK(ctx, CheckSkip(s, in[6]));
    OP_REQUIRES_OK(ctx, CheckOrbits(s.tokens));
    std::vector<xla::Shape> layouts;
    for (int i = 0; i < 7; ++i) {
      layouts.push_back(i == 5 ? xla::ShapeUtil::MakeShape(xla::S32, in[i].dim_sizes()) : ShapeOf(ctx, in[i]));
    }
    std::vector<xla::XlaOp> operands;
    for (int i = 0; i < 7; ++i) operands.push_back(ctx->Input(i));
    const tensorflow::TensorShape out({s.windows, s.tokens, s.heads * s.head_dim});
    ctx->SetOutput(0, CustomCall(ctx, Target("sit_window_attention", ctx), operands, layouts, ShapeOf(ctx, out),
                                 AttentionOpaque(s, 0, orbit_gradients_, in[6].dim_size(0), orbit_list_)));
  }
};

class WindowAttentionGradXla : public AttentionXla {
 public:
  using AttentionXla::AttentionXla;

  void Compile(XlaOpKernelContext* ctx) override {
    // dout, qkv, kernel, bias, graphs, values, indices, transposed_values, transposed_indices
    std::vector<tensorflow::TensorShape> in(9);
    for (int i = 0; i < 9; ++i) in[i] = ctx->InputShape(i);
    std::vector<int32_t> indices, transposed_indices;
    OP_REQUIRES_OK(ctx, ConstantIndices(ctx, 6, &indices));
    OP_REQUIRES_OK(ctx, ConstantIndices(ctx, 8, &transposed_indices));
    AttentionSizes s;
    OP_REQUIRES_OK(ctx, ReadSizes(num_heads_, in[1], in[2], in[3], in[4], in[5], in[6], indices.data(), &s));
    OP_REQUIRES_OK(ctx, CheckWindowGradInputs(s, in[7], in[8], transposed_indices.data(), in[0]));
    OP_REQUIRES_OK(ctx, CheckOrbits(s.tokens));
    std::vector<xla::Shape> layouts;
    std::vector<xla::XlaOp> operands;
    for (int i = 0; i < 9; ++i) {
      const bool is_index = i == 6 || i == 8;
      layouts.push_back(is_index ? xla::ShapeUtil::MakeShape(xla::S32, in[i].dim_sizes()) : ShapeOf(ctx, in[i]));
      operands.push_back(ctx->Input(i));
    }
    // The gradients of qkv, kernel, bias, graphs and values, each of its input's shape.
    const xla::Shape result = xla::ShapeUtil::MakeTupleShape(
        {ShapeOf(ctx, in[1]), ShapeOf(ctx, in[2]), ShapeOf(ctx, in[3]), ShapeOf(ctx, in[4]), ShapeOf(ctx, in[5])});
    const xla::XlaOp call = CustomCall(ctx, Target("sit_window_attention_grad", ctx), operands, layouts, result,
                                       AttentionOpaque(s, in[8].dim_size(1), orbit_gradients_, 0, orbit_list_));
    for (int i = 0; i < 5; ++i) ctx->SetOutput(i, xla::GetTupleElement(call, i));
  }
};

class ClassTokenAttentionXla : public AttentionXla {
 public:
  using AttentionXla::AttentionXla;

  void Compile(XlaOpKernelContext* ctx) override {
    // qkv, bias, graphs, coefficients; the gradient takes dout first.
    const bool grad = type_string() == "SitClassTokenAttentionGrad";
    const int first = grad ? 1 : 0;
    std::vector<tensorflow::TensorShape> in;
    std::vector<xla::XlaOp> operands;
    for (int i = 0; i < first + 4; ++i) {
      in.push_back(ctx->InputShape(i));
      operands.push_back(ctx->Input(i));
    }
    AttentionSizes s;
    OP_REQUIRES_OK(ctx, ReadClassSizes(num_heads_, in[first], in[first + 1], in[first + 2], in[first + 3], &s));
    if (grad) OP_REQUIRES_OK(ctx, CheckClassGradInputs(s, in[0]));
    OP_REQUIRES_OK(ctx, CheckOrbits(s.tokens));
    std::vector<xla::Shape> layouts;
    for (const auto& shape : in) layouts.push_back(ShapeOf(ctx, shape));
    const std::vector<int64_t> opaque = AttentionOpaque(s, 0, orbit_gradients_, 0, orbit_list_);
    if (!grad) {
      const tensorflow::TensorShape out({s.windows, 1, s.heads * s.head_dim});
      ctx->SetOutput(0, CustomCall(ctx, Target("sit_class_token_attention", ctx), operands, layouts,
                                   ShapeOf(ctx, out), opaque));
      return;
    }
    // The gradients of qkv, bias and graphs.
    const xla::Shape result = xla::ShapeUtil::MakeTupleShape({layouts[1], layouts[2], layouts[3]});
    const xla::XlaOp call =
        CustomCall(ctx, Target("sit_class_token_attention_grad", ctx), operands, layouts, result, opaque);
    for (int i = 0; i < 3; ++i) ctx->SetOutput(i, xla::GetTupleElement(call, i));
  }
};

// --- SitClassTokenValues, SitClassTokenValuesGrad -------------------------------------------------

// The opaque string: R, B, T, H, d, M.
ValuesSizes ReadValuesCall(const char* opaque, size_t length) {
  const std::vector<int64_t> v = OpaqueSizes(opaque, length);
  return ValuesSizes{v[0], v[1], v[2], v[3], v[4], v[5]};
}

// In: x, scores, kernel, graphs, coefficients.
template <typename T>
void ClassTokenValuesHost(void* out, const void** in, const char* opaque, size_t length, XlaCustomCallStatus*) {
  const ValuesInputs<T> inputs{In<T>(in, 0), In<T>(in, 1), In<T>(in, 2), In<T>(in, 3), In<T>(in, 4)};
  ClassTokenValues(ReadValuesCall(opaque, length), inputs, static_cast<T*>(out), HostShards());
}

// In: dout, x, scores, kernel, graphs, coefficients; out: a tuple of four.
template <typename T>
void ClassTokenValuesGradHost(void* out, const void** in, const char* opaque, size_t length, XlaCustomCallStatus*) {
  const ValuesInputs<T> inputs{In<T>(in, 1), In<T>(in, 2), In<T>(in, 3), In<T>(in, 4), In<T>(in, 5)};
  const ValuesGradients<T> gradients{Out<T>(out, 0), Out<T>(out, 1), Out<T>(out, 2), Out<T>(out, 3)};
  ClassTokenValuesGrad(ReadValuesCall(opaque, length), In<T>(in, 0), inputs, gradients, HostPool()->NumThreads(),
                       HostShards());
}

// Checks what the TensorFlow kernels check (class_token_values.h) when it compiles.
class ClassTokenValuesXla : public XlaOpKernel {
 public:
  explicit ClassTokenValuesXla(OpKernelConstruction* context) : XlaOpKernel(context) {
    OP_REQUIRES_OK(context, CheckStorageIsComputeType(context));
    OP_REQUIRES_OK(context, context->GetAttr("num_heads", &num_heads_));
    grad_ = type_string() == "SitClassTokenValuesGrad";
  }

  void Compile(XlaOpKernelContext* ctx) override {
    // x, scores, kernel, graphs, coefficients; the gradient takes dout first.
    const int first = grad_ ? 1 : 0;
    std::vector<tensorflow::TensorShape> in;
    std::vector<xla::XlaOp> operands;
    std::vector<xla::Shape> layouts;
    for (int i = 0; i < first + 5; ++i) {
      in.push_back(ctx->InputShape(i));
      operands.push_back(ctx->Input(i));
      layouts.push_back(ShapeOf(ctx, in.back()));
    }
    ValuesSizes s;
    OP_REQUIRES_OK(ctx, ReadValuesSizes(num_heads_, in[first], in[first + 1], in[first + 2], in[first + 3],
                                        in[first + 4], &s));
    if (grad_) OP_REQUIRES_OK(ctx, CheckValuesGradInputs(s, in[0]));
    const std::vector<int64_t> opaque = {s.rows, s.windows, s.tokens, s.heads, s.head_dim, s.maps};
    if (!grad_) {
      const tensorflow::TensorShape out({s.windows, 1, s.heads * s.head_dim});
      ctx->SetOutput(0, CustomCall(ctx, Target("sit_class_token_values", ctx->input_type(0)), operands, layouts,
                                   ShapeOf(ctx, out), opaque));
      return;
    }
    // The gradients of x, the scores, the kernel and the graphs.
    const xla::Shape result = xla::ShapeUtil::MakeTupleShape({layouts[1], layouts[2], layouts[3], layouts[4]});
    const xla::XlaOp call = CustomCall(ctx, Target("sit_class_token_values_grad", ctx->input_type(0)), operands,
                                       layouts, result, opaque);
    for (int i = 0; i < 4; ++i) ctx->SetOutput(i, xla::GetTupleElement(call, i));
  }

 private:
  int num_heads_;
  bool grad_;
};

// --- SitStandardizedLanes, SitStandardizedLanesGrad -------------------------------------------------

// In: x (B, T, D), epsilon; the opaque string: B, T, D.
template <typename T>
void StandardizedLanesHost(void* out, const void** in, const char* opaque, size_t length, XlaCustomCallStatus*) {
  const std::vector<int64_t> s = OpaqueSizes(opaque, length);
  StandardizeLanes(In<T>(in, 0), TokenSizes(s[0], s[1], s[2]), *In<T>(in, 1), static_cast<T*>(out), HostShards());
}

// In: dy, x, epsilon, skip_dy (B, K, D); the opaque string: B, T, D, K.
template <typename T>
void StandardizedLanesGradHost(void* out, const void** in, const char* opaque, size_t length,
                               XlaCustomCallStatus*) {
  const std::vector<int64_t> s = OpaqueSizes(opaque, length);
  StandardizeLanesGrad(In<T>(in, 0), In<T>(in, 1), In<T>(in, 3), s[3], TokenSizes(s[0], s[1], s[2]),
                       *In<T>(in, 2), static_cast<T*>(out), HostShards());
}

class StandardizedLanesXla : public XlaOpKernel {
 public:
  explicit StandardizedLanesXla(OpKernelConstruction* context) : XlaOpKernel(context) {
    OP_REQUIRES_OK(context, CheckStorageIsComputeType(context));
    grad_ = type_string() == "SitStandardizedLanesGrad";
  }

  void Compile(XlaOpKernelContext* ctx) override {
    // The op takes (x, epsilon); its gradient (dy, x, epsilon, skip_dy).
    const int first = grad_ ? 1 : 0;
    const tensorflow::TensorShape x = ctx->InputShape(first), epsilon = ctx->InputShape(first + 1);
    OP_REQUIRES_OK(ctx, CheckStandardizeInputs(x, epsilon));
    const TokenSizes n(x);
    std::vector<int64_t> sizes = {n.windows, n.tokens, n.channels};
    if (!grad_) {
      ctx->SetOutput(0, Call(ctx, Target("sit_standardized_lanes", ctx->input_type(0)),
                             {ctx->Input(0), ctx->Input(1)}, {x, epsilon}, n.lanes(), sizes));
      return;
    }
    const tensorflow::TensorShape dy = ctx->InputShape(0), skip_dy = ctx->InputShape(3);
    OP_REQUIRES_OK(ctx, CheckStandardizeGradInputs(n, dy, skip_dy));
    sizes.push_back(skip_dy.dim_size(1));
    ctx->SetOutput(0, Call(ctx, Target("sit_standardized_lanes_grad", ctx->input_type(0)),
                           {ctx->Input(0), ctx->Input(1), ctx->Input(2), ctx->Input(3)}, {dy, x, epsilon, skip_dy},
                           x, sizes));
  }

 private:
  bool grad_;
};

#define REGISTER_HOST(name, function)                                                      \
  XLA_CPU_REGISTER_CUSTOM_CALL_TARGET_WITH_SYM(name "_f32", (function<float>)); \
  XLA_CPU_REGISTER_CUSTOM_CALL_TARGET_WITH_SYM(name "_f64", (function<double>))
REGISTER_HOST("sit_max_pool", MaxPoolHost);
REGISTER_HOST("sit_max_pool_grad", MaxPoolGradHost);
REGISTER_HOST("sit_strided_max_pool_grad", StridedMaxPoolGradHost);
REGISTER_HOST("sit_channels_first_projection", ProjectionHost);
REGISTER_HOST("sit_channels_first_projection_kernel_grad", ProjectionKernelGradHost);
REGISTER_HOST("sit_conv2d", Conv2DHost);
REGISTER_HOST("sit_conv2d_kernel_grad", Conv2DKernelGradHost);
REGISTER_HOST("sit_depthwise_conv", DepthwiseConvHost);
REGISTER_HOST("sit_depthwise_conv_kernel_grad", DepthwiseConvKernelGradHost);
REGISTER_HOST("sit_window_attention", WindowAttentionHost);
REGISTER_HOST("sit_window_attention_grad", WindowAttentionGradHost);
REGISTER_HOST("sit_class_token_attention", ClassTokenAttentionHost);
REGISTER_HOST("sit_class_token_attention_grad", ClassTokenAttentionGradHost);
REGISTER_HOST("sit_class_token_values", ClassTokenValuesHost);
REGISTER_HOST("sit_class_token_values_grad", ClassTokenValuesGradHost);
REGISTER_HOST("sit_standardized_lanes", StandardizedLanesHost);
REGISTER_HOST("sit_standardized_lanes_grad", StandardizedLanesGradHost);
#undef REGISTER_HOST

const DataType kTypes[] = {tensorflow::DT_FLOAT, tensorflow::DT_DOUBLE};
#define REGISTER(op, kernel) \
  REGISTER_XLA_OP(Name(op).TypeConstraint("T", kTypes).Device(tensorflow::DEVICE_CPU_XLA_JIT), kernel)
REGISTER("SitMaxPool", MaxPoolXla);
REGISTER("SitMaxPoolGrad", MaxPoolXla);
REGISTER("SitStridedMaxPoolGrad", StridedMaxPoolGradXla);
REGISTER("SitChannelsFirstProjection", ProjectionXla);
REGISTER("SitChannelsFirstProjectionKernelGrad", ProjectionXla);
REGISTER("SitConv2D", Conv2DXla);
REGISTER("SitConv2DKernelGrad", Conv2DKernelGradXla);
#undef REGISTER
// The ops whose large tensors have their own dtype S (float or double here: CheckStorageIsComputeType).
#define REGISTER(op, kernel)                                                                      \
  REGISTER_XLA_OP(Name(op).TypeConstraint("T", kTypes).TypeConstraint("S", kTypes).Device(        \
                      tensorflow::DEVICE_CPU_XLA_JIT),                                            \
                  kernel)
REGISTER("SitDepthwiseConv", DepthwiseConvXla);
REGISTER("SitDepthwiseConvKernelGrad", DepthwiseConvXla);
REGISTER("SitClassTokenAttention", ClassTokenAttentionXla);
REGISTER("SitClassTokenAttentionGrad", ClassTokenAttentionXla);
REGISTER("SitClassTokenValues", ClassTokenValuesXla);
REGISTER("SitClassTokenValuesGrad", ClassTokenValuesXla);
REGISTER("SitStandardizedLanes", StandardizedLanesXla);
REGISTER("SitStandardizedLanesGrad", StandardizedLanesXla);
#undef REGISTER
// The window ops read their indices when they compile.
REGISTER_XLA_OP(Name("SitWindowAttention")
                    .TypeConstraint("T", kTypes)
                    .TypeConstraint("S", kTypes)
                    .Device(tensorflow::DEVICE_CPU_XLA_JIT)
                    .CompileTimeConstantInput("indices"),
                WindowAttentionXla);
REGISTER_XLA_OP(Name("SitWindowAttentionGrad")
                    .TypeConstraint("T", kTypes)
                    .TypeConstraint("S", kTypes)
                    .Device(tensorflow::DEVICE_CPU_XLA_JIT)
                    .CompileTimeConstantInput("indices")
                    .CompileTimeConstantInput("transposed_indices"),
                WindowAttentionGradXla);

// --- SitXlaHostThreads ---------------------------------------------------------------------------------

// Hands the host functions this CPU device's intra-op threads (device = true) or gives them their own pool
// (false), for the calls that begin from then on; outputs how many threads they now run on. TensorFlow keeps
// one intra-op pool per process for its CPU devices (unless TF_OVERRIDE_GLOBAL_THREADPOOL gives each device
// its own, which sit_keras.native then leaves alone), so the pointer outlives every device.
class XlaHostThreadsOp : public OpKernel {
 public:
  explicit XlaHostThreadsOp(OpKernelConstruction* context) : OpKernel(context) {
    OP_REQUIRES_OK(context, context->GetAttr("device", &device_));
  }

  void Compute(OpKernelContext* context) override {
    const auto* threads_here = context->device()->tensorflow_cpu_worker_threads();
    OP_REQUIRES(context, threads_here != nullptr && threads_here->workers != nullptr,
                InvalidArgument("SitXlaHostThreads runs on a CPU device with intra-op threads"));
    device_threads.store(device_ ? threads_here->workers : nullptr, std::memory_order_release);
    Tensor* threads = nullptr;
    OP_REQUIRES_OK(context, context->allocate_output(0, TensorShape({}), &threads));
    threads->scalar<int32_t>()() = HostPool()->NumThreads();
  }

 private:
  bool device_;
};

template <typename Kernel>
OpKernel* Create(OpKernelConstruction* context) {
  return new Kernel(context);
}

}  // namespace
}  // namespace sit_keras

REGISTER_OP("SitXlaHostThreads")
    .Attr("device: bool = true")
    .Output("threads: int32")
    .SetIsStateful()
    .SetShapeFn(tensorflow::shape_inference::ScalarShape);
REGISTER_KERNEL_BUILDER(Name("SitXlaHostThreads").Device(tensorflow::DEVICE_CPU), sit_keras::XlaHostThreadsOp);

// The registrations above reach XLA when it first lists its kernels, which it does once per process, at its
// first op (eager or compiled). A library loaded after that calls this (sit_keras.native, by ctypes): it
// adds the kernels to TensorFlow's registry as XLA would have.
extern "C" void SitRegisterXlaKernelsLate() {
  using sit_keras::Create;
  using tensorflow::kernel_factory::OpKernelRegistrar;
  static const bool registered = [] {
    struct Kernel {
      const char* op;
      tensorflow::OpKernel* (*create)(tensorflow::OpKernelConstruction*);
      std::vector<const char*> constant_inputs;  // compile-time constants, kept in host memory as XLA's are
    };
    const Kernel kernels[] = {
        {"SitMaxPool", Create<sit_keras::MaxPoolXla>, {}},
        {"SitMaxPoolGrad", Create<sit_keras::MaxPoolXla>, {}},
        {"SitStridedMaxPoolGrad", Create<sit_keras::StridedMaxPoolGradXla>, {}},
        {"SitChannelsFirstProjection", Create<sit_keras::ProjectionXla>, {}},
        {"SitChannelsFirstProjectionKernelGrad", Create<sit_keras::ProjectionXla>, {}},
        {"SitConv2D", Create<sit_keras::Conv2DXla>, {}},
        {"SitConv2DKernelGrad", Create<sit_keras::Conv2DKernelGradXla>, {}},
        {"SitDepthwiseConv", Create<sit_keras::DepthwiseConvXla>, {}},
        {"SitDepthwiseConvKernelGrad", Create<sit_keras::DepthwiseConvXla>, {}},
        {"SitWindowAttention", Create<sit_keras::WindowAttentionXla>, {"indices"}},
        {"SitWindowAttentionGrad", Create<sit_keras::WindowAttentionGradXla>, {"indices", "transposed_indices"}},
        {"SitClassTokenAttention", Create<sit_keras::ClassTokenAttentionXla>, {}},
        {"SitClassTokenAttentionGrad", Create<sit_keras::ClassTokenAttentionXla>, {}},
        {"SitClassTokenValues", Create<sit_keras::ClassTokenValuesXla>, {}},
        {"SitClassTokenValuesGrad", Create<sit_keras::ClassTokenValuesXla>, {}},
        {"SitStandardizedLanes", Create<sit_keras::StandardizedLanesXla>, {}},
        {"SitStandardizedLanesGrad", Create<sit_keras::StandardizedLanesXla>, {}},
    };
    for (const Kernel& kernel : kernels) {
      tensorflow::KernelDefBuilder builder(kernel.op);
      builder.Device(tensorflow::DEVICE_CPU_XLA_JIT).TypeConstraint("T", {tensorflow::DT_FLOAT, tensorflow::DT_DOUBLE});
      for (const char* input : kernel.constant_inputs) builder.HostMemory(input);
      const tensorflow::KernelDef* def = builder.Build();
      new OpKernelRegistrar(def, "SitXlaKernel", kernel.create);  // kept for the process, as static ones are
    }
    return true;
  }();
  (void)registered;
}
