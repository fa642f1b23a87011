// The native kernels inside XLA: under tf.function(jit_compile=True) an op of _kernels.so has no XLA
// kernel, so the layers took TensorFlow's builtin ops there. This library gives some of them one: at
// compile time a kernel below checks the shapes (a wrong one fails the compilation with the op's message)
// and emits a custom call to a host function, which runs the op's computation (the same code as its
// TensorFlow kernel: channels_first.h, depthwise_stem.h, max_pool.h) on XLA's buffers.
//
// A custom call gets no thread pool from XLA's CPU runtime, so the host functions share one of their own,
// as many threads as the process may run on. The shapes travel in the call's opaque string (int64 values).
// Built only where LLVM's headers are installed (XLA's headers include them; sit_keras/native/build.py),
// and linked to libtensorflow_cc, which exports the XLA symbols used here.

#include <sched.h>

#include <cstring>
#include <string>
#include <vector>

#include "../channels_first.h"
#include "../depthwise_stem.h"
#include "../kernels.h"
#include "../max_pool.h"
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

// The threads the host functions run on: as many as the CPUs this process may use.
Shards HostShards() {
  static tsl::thread::ThreadPool* pool = [] {
    cpu_set_t cpus;
    const int count = sched_getaffinity(0, sizeof(cpus), &cpus) == 0 ? CPU_COUNT(&cpus) : 1;
    return new tsl::thread::ThreadPool(tsl::Env::Default(), "sit_keras_xla", std::max(count, 1));
  }();
  return [](int64_t units, int64_t cost, const std::function<void(int64_t, int64_t)>& work) {
    tensorflow::Shard(pool->NumThreads(), pool, units, cost, work);
  };
}

std::string Opaque(const std::vector<int64_t>& sizes) {
  return std::string(reinterpret_cast<const char*>(sizes.data()), sizes.size() * sizeof(int64_t));
}

std::vector<int64_t> Sizes(const char* opaque, size_t length) {
  std::vector<int64_t> sizes(length / sizeof(int64_t));
  std::memcpy(sizes.data(), opaque, sizes.size() * sizeof(int64_t));
  return sizes;
}

// The custom call of `target` on `operands`, with row-major layouts for them and the result.
xla::XlaOp Call(XlaOpKernelContext* ctx, const std::string& target, const std::vector<xla::XlaOp>& operands,
                const std::vector<tensorflow::TensorShape>& operand_shapes, const tensorflow::TensorShape& result,
                const std::vector<int64_t>& sizes) {
  const xla::PrimitiveType type = ctx->input_xla_type(0);
  std::vector<xla::Shape> layouts;
  for (const auto& shape : operand_shapes) layouts.push_back(xla::ShapeUtil::MakeShape(type, shape.dim_sizes()));
  return xla::CustomCallWithLayout(ctx->builder(), target, operands,
                                   xla::ShapeUtil::MakeShape(type, result.dim_sizes()), layouts, Opaque(sizes),
                                   /*has_side_effect=*/false, /*output_operand_aliasing=*/{}, /*literal=*/nullptr,
                                   xla::CustomCallSchedule::SCHEDULE_NONE,
                                   xla::CustomCallApiVersion::API_VERSION_STATUS_RETURNING_UNIFIED);
}

// The host function's name for an op's target and the kernel's dtype.
std::string Target(const char* name, DataType dtype) {
  return std::string(name) + (dtype == tensorflow::DT_DOUBLE ? "_f64" : "_f32");
}

// --- SitMaxPool, SitMaxPoolGrad ---------------------------------------------------------------------

template <typename T>
void MaxPoolHost(void* out, const void** in, const char* opaque, size_t length, XlaCustomCallStatus*) {
  const std::vector<int64_t> s = Sizes(opaque, length);  // B, H, W, C, k
  MaxPool(static_cast<const T*>(in[0]), PoolSizes(s[0], s[1], s[2], s[3], s[4]), static_cast<T*>(out),
          HostShards());
}

template <typename T>
void MaxPoolGradHost(void* out, const void** in, const char* opaque, size_t length, XlaCustomCallStatus*) {
  const std::vector<int64_t> s = Sizes(opaque, length);
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

// --- SitChannelsFirstProjection, SitChannelsFirstProjectionKernelGrad ---------------------------------

template <typename T>
void ProjectionHost(void* out, const void** in, const char* opaque, size_t length, XlaCustomCallStatus*) {
  const std::vector<int64_t> s = Sizes(opaque, length);  // R, L, N
  ProjectChannelsFirst(static_cast<const T*>(in[0]), static_cast<const T*>(in[1]), s[0], s[1], s[2],
                       static_cast<T*>(out), HostShards());
}

template <typename T>
void ProjectionKernelGradHost(void* out, const void** in, const char* opaque, size_t length,
                              XlaCustomCallStatus*) {
  const std::vector<int64_t> s = Sizes(opaque, length);
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

// --- SitDepthwiseConv, SitDepthwiseConvKernelGrad ---------------------------------------------------

template <typename T>
void DepthwiseConvHost(void* out, const void** in, const char* opaque, size_t length, XlaCustomCallStatus*) {
  const std::vector<int64_t> s = Sizes(opaque, length);  // B, H, W, C, k
  DepthwiseConv(static_cast<const T*>(in[0]), static_cast<const T*>(in[1]), ConvSizes(s[0], s[1], s[2], s[3], s[4]),
                static_cast<T*>(out), HostShards());
}

template <typename T>
void DepthwiseConvKernelGradHost(void* out, const void** in, const char* opaque, size_t length,
                                 XlaCustomCallStatus*) {
  const std::vector<int64_t> s = Sizes(opaque, length);
  DepthwiseConvKernelGrad(static_cast<const T*>(in[0]), static_cast<const T*>(in[1]),
                          ConvSizes(s[0], s[1], s[2], s[3], s[4]), static_cast<T*>(out), HostShards());
}

class DepthwiseConvXla : public XlaOpKernel {
 public:
  explicit DepthwiseConvXla(OpKernelConstruction* context) : XlaOpKernel(context) {
    grad_ = type_string() == "SitDepthwiseConvKernelGrad";
  }

  void Compile(XlaOpKernelContext* ctx) override {
    // The convolution takes (x, kernel); the kernel's gradient (dy, x, kernel).
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
    if (!grad_) {
      ctx->SetOutput(0, Call(ctx, Target("sit_depthwise_conv", ctx->input_type(0)), {ctx->Input(0), ctx->Input(1)},
                             {x, kernel}, x, sizes));
      return;
    }
    OP_REQUIRES(ctx, ctx->InputShape(0) == x,
                InvalidArgument(op, " expects dy of x's shape ", x.DebugString(), "; got ",
                                ctx->InputShape(0).DebugString()));
    ctx->SetOutput(0, Call(ctx, Target("sit_depthwise_conv_kernel_grad", ctx->input_type(0)),
                           {ctx->Input(0), ctx->Input(1)}, {x, x}, kernel, sizes));
  }

 private:
  bool grad_;
};

#define REGISTER_HOST(name, function)                                                      \
  XLA_CPU_REGISTER_CUSTOM_CALL_TARGET_WITH_SYM(name "_f32", (function<float>)); \
  XLA_CPU_REGISTER_CUSTOM_CALL_TARGET_WITH_SYM(name "_f64", (function<double>))
REGISTER_HOST("sit_max_pool", MaxPoolHost);
REGISTER_HOST("sit_max_pool_grad", MaxPoolGradHost);
REGISTER_HOST("sit_channels_first_projection", ProjectionHost);
REGISTER_HOST("sit_channels_first_projection_kernel_grad", ProjectionKernelGradHost);
REGISTER_HOST("sit_depthwise_conv", DepthwiseConvHost);
REGISTER_HOST("sit_depthwise_conv_kernel_grad", DepthwiseConvKernelGradHost);
#undef REGISTER_HOST

const DataType kTypes[] = {tensorflow::DT_FLOAT, tensorflow::DT_DOUBLE};
#define REGISTER(op, kernel) \
  REGISTER_XLA_OP(Name(op).TypeConstraint("T", kTypes).Device(tensorflow::DEVICE_CPU_XLA_JIT), kernel)
REGISTER("SitMaxPool", MaxPoolXla);
REGISTER("SitMaxPoolGrad", MaxPoolXla);
REGISTER("SitChannelsFirstProjection", ProjectionXla);
REGISTER("SitChannelsFirstProjectionKernelGrad", ProjectionXla);
REGISTER("SitDepthwiseConv", DepthwiseConvXla);
REGISTER("SitDepthwiseConvKernelGrad", DepthwiseConvXla);
#undef REGISTER

template <typename Kernel>
OpKernel* Create(OpKernelConstruction* context) {
  return new Kernel(context);
}

}  // namespace
}  // namespace sit_keras

// The registrations above reach XLA when it first lists its kernels, which it does once per process, at its
// first op (eager or compiled). A library loaded after that calls this (sit_keras.native, by ctypes): it
// adds the kernels to TensorFlow's registry as XLA would have.
extern "C" void SitRegisterXlaKernelsLate() {
  using sit_keras::Create;
  using tensorflow::kernel_factory::OpKernelRegistrar;
  static const bool registered = [] {
    const std::pair<const char*, tensorflow::OpKernel* (*)(tensorflow::OpKernelConstruction*)> kernels[] = {
        {"SitMaxPool", Create<sit_keras::MaxPoolXla>},
        {"SitMaxPoolGrad", Create<sit_keras::MaxPoolXla>},
        {"SitChannelsFirstProjection", Create<sit_keras::ProjectionXla>},
        {"SitChannelsFirstProjectionKernelGrad", Create<sit_keras::ProjectionXla>},
        {"SitDepthwiseConv", Create<sit_keras::DepthwiseConvXla>},
        {"SitDepthwiseConvKernelGrad", Create<sit_keras::DepthwiseConvXla>},
    };
    for (const auto& [op, create] : kernels) {
      const tensorflow::KernelDef* def = tensorflow::KernelDefBuilder(op)
                                             .Device(tensorflow::DEVICE_CPU_XLA_JIT)
                                             .TypeConstraint("T", {tensorflow::DT_FLOAT, tensorflow::DT_DOUBLE})
                                             .Build();
      new OpKernelRegistrar(def, "SitXlaKernel", create);  // kept for the process, as static ones are
    }
    return true;
  }();
  (void)registered;
}
