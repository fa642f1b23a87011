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

#include <algorithm>
#include <cmath>
#include <vector>

#include "kernels.h"

namespace sit_keras {
namespace {

REGISTER_OP("SitStandardizedLanes")
    .Input("x: T")
    .Input("epsilon: T")
    .Output("y: T")
    .Attr("T: {float, double}")
    .SetShapeFn([](InferenceContext* c) {
      ShapeHandle x;
      TF_RETURN_IF_ERROR(c->WithRank(c->input(0), 3, &x));
      DimensionHandle blocks = c->UnknownDim();
      if (c->ValueKnown(c->Dim(x, 0))) blocks = c->MakeDim((c->Value(c->Dim(x, 0)) + kLanes - 1) / kLanes);
      c->set_output(0, c->MakeShape({c->Dim(x, 2), blocks, c->Dim(x, 1), kLanes}));
      return Status();
    });

REGISTER_OP("SitStandardizedLanesGrad")
    .Input("dy: T")
    .Input("x: T")
    .Input("epsilon: T")
    .Input("skip_dy: T")
    .Output("dx: T")
    .Attr("T: {float, double}")
    .SetShapeFn([](InferenceContext* c) {
      c->set_output(0, c->input(1));
      return Status();
    });

// The kLanes windows from b of the tokens x (B, T, D), transposed: values[(c T + i) kLanes + l] =
// x[b + l, i, c] (zero for windows at or beyond B), with each token's mean and r, lane by lane. The
// windows' B x T x D values are one contiguous run of x, read once. Channel-major, as the output runs
// are: token-major, a channel's T values would lie D kLanes values apart (4 KB for D = 64), which the
// cache holds in one set.
template <typename T>
struct BlockTile {
  BlockTile(int64_t tokens, int64_t channels)
      : tokens(tokens), channels(channels), values(tokens * channels * kLanes), mean(tokens), inverse(tokens) {}

  void Read(const T* x, int64_t windows, int64_t b, T epsilon) {
    const int64_t size = tokens * channels;
    const int rows = static_cast<int>(std::min<int64_t>(kLanes, windows - b));
    const int64_t run = tokens * kLanes;  // a channel's values
    for (int64_t i = 0; i < tokens; ++i) {
      RowsToLanes(x + b * size + i * channels, size, channels, rows, values.data() + i * kLanes, run);
    }
    for (int64_t i = 0; i < tokens; ++i) {
      const T* v = values.data() + i * kLanes;
      Lanes<T> sum = {};
      for (int64_t c = 0; c < channels; ++c) sum += Load(v + c * run);
      mean[i] = sum / T(channels);
      Lanes<T> squares = {};
      for (int64_t c = 0; c < channels; ++c) {
        const Lanes<T> centred = Load(v + c * run) - mean[i];
        squares += centred * centred;
      }
      const Lanes<T> variance = squares / T(channels) + epsilon;
      for (int l = 0; l < kLanes; ++l) inverse[i][l] = T(1) / std::sqrt(variance[l]);
    }
  }

  // The standardised value of channel c of token i.
  Lanes<T> Standardized(int64_t i, int64_t c) const {
    return (Load(values.data() + (c * tokens + i) * kLanes) - mean[i]) * inverse[i];
  }

  const int64_t tokens, channels;
  std::vector<T> values;
  std::vector<Lanes<T>> mean, inverse;
};

// The tokens' sizes: B windows of T tokens of D channels, in ceil(B / kLanes) blocks of the lane layout.
struct TokenSizes {
  explicit TokenSizes(const Tensor& x)
      : windows(x.dim_size(0)), tokens(x.dim_size(1)), channels(x.dim_size(2)),
        blocks((windows + kLanes - 1) / kLanes) {}
  TensorShape lanes() const { return TensorShape({channels, blocks, tokens, kLanes}); }
  const int64_t windows, tokens, channels, blocks;
};

// The tokens (B, T, D) and the epsilon, a scalar of their dtype (an attribute would round a double's).
bool CheckInputs(OpKernelContext* context, const Tensor& x, const Tensor& epsilon) {
  if (x.dims() != 3 || x.dim_size(2) < 1 || epsilon.dims() != 0) {
    context->CtxFailure(InvalidArgument("SitStandardizedLanes expects tokens (B, T, D) and a scalar epsilon; got ",
                                        x.shape().DebugString(), " and ", epsilon.shape().DebugString()));
    return false;
  }
  return true;
}

template <typename T>
class StandardizedLanesOp : public OpKernel {
 public:
  explicit StandardizedLanesOp(OpKernelConstruction* context) : OpKernel(context) {}

  void Compute(OpKernelContext* context) override {
    const Tensor& x = context->input(0);
    if (!CheckInputs(context, x, context->input(1))) return;
    const TokenSizes n(x);
    const int64_t windows = n.windows, tokens = n.tokens, channels = n.channels, blocks = n.blocks;
    Tensor* y = nullptr;
    OP_REQUIRES_OK(context, context->allocate_output(0, n.lanes(), &y));
    const T* x_data = x.flat<T>().data();
    T* y_data = y->flat<T>().data();
    const T epsilon = context->input(1).scalar<T>()();
    // A unit is a block of kLanes windows: for each channel, its T x kLanes outputs are one contiguous run.
    RunShards(context, blocks, 8 * tokens * channels * kLanes, [&](int64_t start, int64_t limit) {
      BlockTile<T> tile(tokens, channels);
      for (int64_t block = start; block < limit; ++block) {
        tile.Read(x_data, windows, block * kLanes, epsilon);
        for (int64_t c = 0; c < channels; ++c) {
          T* y = y_data + (c * blocks + block) * tokens * kLanes;
          for (int64_t i = 0; i < tokens; ++i) Store(y + i * kLanes, tile.Standardized(i, c));
        }
      }
    });
  }
};

template <typename T>
class StandardizedLanesGradOp : public OpKernel {
 public:
  explicit StandardizedLanesGradOp(OpKernelConstruction* context) : OpKernel(context) {}

  void Compute(OpKernelContext* context) override {
    const Tensor& dy = context->input(0);
    const Tensor& x = context->input(1);
    if (!CheckInputs(context, x, context->input(2))) return;
    const TokenSizes n(x);
    const int64_t windows = n.windows, tokens = n.tokens, channels = n.channels, blocks = n.blocks;
    OP_REQUIRES(context, dy.shape() == n.lanes(),
                InvalidArgument("SitStandardizedLanesGrad expects dy (", channels, ", ", blocks, ", ", tokens, ", ",
                                kLanes, "); got ", dy.shape().DebugString()));
    const Tensor& skip_dy = context->input(3);
    const int64_t skipped = skip_dy.dims() == 3 ? skip_dy.dim_size(1) : -1;
    OP_REQUIRES(context,
                skipped >= 0 && skipped <= tokens && skip_dy.dim_size(0) == windows && skip_dy.dim_size(2) == channels,
                InvalidArgument("SitStandardizedLanesGrad expects skip_dy (", windows, ", K <= ", tokens, ", ",
                                channels, "); got ", skip_dy.shape().DebugString()));
    Tensor* dx = nullptr;
    OP_REQUIRES_OK(context, context->allocate_output(0, x.shape(), &dx));
    const T* x_data = x.flat<T>().data();
    const T* dy_data = dy.flat<T>().data();
    const T* skip_data = skip_dy.flat<T>().data();
    T* dx_data = dx->flat<T>().data();
    const T epsilon = context->input(2).scalar<T>()();
    RunShards(context, blocks, 14 * tokens * channels * kLanes, [&](int64_t start, int64_t limit) {
      BlockTile<T> tile(tokens, channels);
      std::vector<T> gradient(tokens * channels * kLanes);  // channel-major, as the tile
      const int64_t run = tokens * kLanes, size = tokens * channels;
      for (int64_t block = start; block < limit; ++block) {
        const int64_t b = block * kLanes;
        tile.Read(x_data, windows, b, epsilon);
        // Per token: mean_c dy and mean_c (dy y), then dx = r (dy - mean dy - y mean(dy y)); dy's
        // channel c of this block is the run at dy_data + (c blocks + block) run.
        const T* dy_block = dy_data + block * run;
        for (int64_t i = 0; i < tokens; ++i) {
          Lanes<T> sum = {}, sum_y = {};
          for (int64_t c = 0; c < channels; ++c) {
            const Lanes<T> g = Load(dy_block + c * blocks * run + i * kLanes);
            sum += g;
            sum_y += g * tile.Standardized(i, c);
          }
          const Lanes<T> mean_g = sum / T(channels), mean_gy = sum_y / T(channels);
          for (int64_t c = 0; c < channels; ++c) {
            const Lanes<T> g = Load(dy_block + c * blocks * run + i * kLanes);
            Store(gradient.data() + c * run + i * kLanes,
                  tile.inverse[i] * (g - mean_g - tile.Standardized(i, c) * mean_gy));
          }
        }
        const int rows = static_cast<int>(std::min<int64_t>(kLanes, windows - b));
        for (int64_t i = 0; i < tokens; ++i) {
          LanesToRows(gradient.data() + i * kLanes, run, channels, rows, dx_data + b * size + i * channels, size);
        }
        // The skip connection's K D values of each window follow its rows' first K D values.
        for (int l = 0; l < rows && skipped > 0; ++l) {
          T* dx_row = dx_data + (b + l) * size;
          const T* skip_row = skip_data + (b + l) * skipped * channels;
          for (int64_t v = 0; v < skipped * channels; ++v) dx_row[v] += skip_row[v];
        }
      }
    });
  }
};

#define REGISTER(T)                                                                                    \
  REGISTER_KERNEL_BUILDER(Name("SitStandardizedLanes").Device(DEVICE_CPU).TypeConstraint<T>("T"),      \
                          StandardizedLanesOp<T>);                                                     \
  REGISTER_KERNEL_BUILDER(Name("SitStandardizedLanesGrad").Device(DEVICE_CPU).TypeConstraint<T>("T"),  \
                          StandardizedLanesGradOp<T>);
REGISTER(float);
REGISTER(double);
#undef REGISTER

}  // namespace
}  // namespace sit_keras
