
#include <torch/extension.h>
#include <ATen/Parallel.h>
#include <cmath>
#include <vector>

namespace {
// The per-row loops are `omp simd` (built with -fopenmp-simd: no OpenMP runtime), which lets the compiler reorder the
// fp32 reductions into vector lanes; plain loops would stay scalar (IEEE order), hand-split lanes vectorised badly.
inline float f32(float x) { return x; }
inline float f32(c10::BFloat16 x) { return c10::detail::f32_from_bits(x.x); }
template <typename T> inline T cast(float x) { return static_cast<T>(x); }  // BFloat16: round to nearest even

// (sum v_i^2, sum v_i w_i) of one row
template <typename T>
inline void sumsq_dot(const T* __restrict__ v, const float* __restrict__ w, int64_t d, float& ss_out, float& dot_out) {
  float ss = 0.f, dot = 0.f;
#pragma omp simd reduction(+ : ss, dot)
  for (int64_t i = 0; i < d; ++i) { const float x = f32(v[i]); ss += x * x; dot += x * w[i]; }
  ss_out = ss;
  dot_out = dot;
}

template <typename T>
inline float dot(const float* __restrict__ g, const T* __restrict__ v, int64_t d) {
  float s = 0.f;
#pragma omp simd reduction(+ : s)
  for (int64_t i = 0; i < d; ++i) s += g[i] * f32(v[i]);
  return s;
}

// acc = sum_j p[j] v_j (fp32), the eager path's order: p_0 v_0 first, then the others
template <typename T>
inline void weighted_sum(const std::vector<const T*>& rows, const float* p, int64_t d, float* __restrict__ acc) {
  const T* __restrict__ first = rows[0];
  const float p0 = p[0];
#pragma omp simd
  for (int64_t i = 0; i < d; ++i) acc[i] = p0 * f32(first[i]);
  for (size_t j = 1; j < rows.size(); ++j) {
    const T* __restrict__ v = rows[j];
    const float pj = p[j];
#pragma omp simd
    for (int64_t i = 0; i < d; ++i) acc[i] += pj * f32(v[i]);
  }
}

// acc (fp32 mix) -> m = float(T(acc)) in place; returns rsqrt(mean(m^2) + eps) of the cast mix
template <typename T>
inline float cast_and_rstd(float* __restrict__ acc, int64_t d, float eps) {
  float ss = 0.f;
#pragma omp simd reduction(+ : ss)
  for (int64_t i = 0; i < d; ++i) { acc[i] = f32(cast<T>(acc[i])); ss += acc[i] * acc[i]; }
  return 1.f / std::sqrt(ss / d + eps);
}

// the n source rows of token t
template <typename T>
inline void rows_of(const std::vector<const T*>& base, int64_t t, int64_t d, std::vector<const T*>& rows) {
  for (size_t j = 0; j < base.size(); ++j) rows[j] = base[j] + t * d;
}

template <typename T>
std::vector<const T*> pointers(const std::vector<at::Tensor>& sources) {
  std::vector<const T*> ptrs;
  for (const auto& s : sources) ptrs.push_back(s.data_ptr<T>());
  return ptrs;
}

int64_t grain(int64_t n, int64_t d) { return std::max<int64_t>(1, 32768 / std::max<int64_t>(1, n * d)); }

template <typename T>
void forward_impl(const std::vector<at::Tensor>& sources, const float* w, float eps, const T* gain, float eps2,
                  T* out, float* probs, float* rstd, float* scores, int64_t tokens, int64_t d) {
  const auto base = pointers<T>(sources);
  const int64_t n = base.size();
  at::parallel_for(0, tokens, grain(n, d), [&](int64_t begin, int64_t end) {
    std::vector<float> acc(d), p(n);
    std::vector<const T*> rows(n);
    for (int64_t t = begin; t < end; ++t) {
      rows_of(base, t, d, rows);
      float top = -INFINITY;
      for (int64_t j = 0; j < n; ++j) {
        float ss, vw;
        sumsq_dot(rows[j], w, d, ss, vw);
        const float r = 1.f / std::sqrt(ss / d + eps);
        p[j] = r * vw;
        if (rstd != nullptr) { rstd[j * tokens + t] = r; scores[j * tokens + t] = p[j]; }  // kept for the backward
        top = std::max(top, p[j]);
      }
      float total = 0.f;
      for (int64_t j = 0; j < n; ++j) { p[j] = std::exp(p[j] - top); total += p[j]; }
      for (int64_t j = 0; j < n; ++j) { p[j] /= total; probs[j * tokens + t] = p[j]; }
      weighted_sum(rows, p.data(), d, acc.data());
      T* o = out + t * d;
      if (gain == nullptr) {
#pragma omp simd
        for (int64_t i = 0; i < d; ++i) o[i] = cast<T>(acc[i]);
        continue;
      }
      const float r2 = cast_and_rstd<T>(acc.data(), d, eps2);  // KimiLinearRMSNorm: weight * (x * rstd).to(dtype)
#pragma omp simd
      for (int64_t i = 0; i < d; ++i) o[i] = cast<T>(f32(gain[i]) * f32(cast<T>(acc[i] * r2)));
    }
  });
}

// g (fp32, d): dLoss/dmix through the output norm, as the eager path rounds it; adds the gain's gradient to ggain
template <typename T>
void norm_backward_row(float* __restrict__ m, const T* __restrict__ go, const T* __restrict__ gain, float eps2,
                       int64_t d, float* __restrict__ g, float* __restrict__ ggain) {
  const float r2 = cast_and_rstd<T>(m, d, eps2);
  float c = 0.f;
#pragma omp simd reduction(+ : c)
  for (int64_t i = 0; i < d; ++i) {
    const float x_hat = m[i] * r2;
    ggain[i] += f32(go[i]) * f32(cast<T>(x_hat));
    g[i] = f32(cast<T>(f32(go[i]) * f32(gain[i])));
    m[i] = x_hat;
    c += g[i] * x_hat;
  }
  c /= d;
#pragma omp simd
  for (int64_t i = 0; i < d; ++i) g[i] = f32(cast<T>(r2 * (g[i] - m[i] * c)));
}

template <typename T>
void backward_impl(const std::vector<at::Tensor>& sources, const float* w, const T* gain, float eps2, const T* grad_out,
                   const float* probs, const float* rstd, const float* scores, std::vector<T*>& grads,
                   float* gw_all, float* ggain_all, int64_t tokens, int64_t d) {
  const auto base = pointers<T>(sources);
  const int64_t n = base.size();
  at::parallel_for(0, tokens, grain(n, d), [&](int64_t begin, int64_t end) {
    float* gw = gw_all + at::get_thread_num() * d;  // per-thread partial sums over tokens, added up afterwards
    float* ggain = ggain_all + at::get_thread_num() * d;
    std::vector<float> m(d), g(d), p(n), gdv(n);
    std::vector<const T*> rows(n);
    for (int64_t t = begin; t < end; ++t) {
      rows_of(base, t, d, rows);
      const T* go = grad_out + t * d;
      for (int64_t j = 0; j < n; ++j) p[j] = probs[j * tokens + t];
      if (gain != nullptr) {
        weighted_sum(rows, p.data(), d, m.data());  // the mix, recomputed: never saved
        norm_backward_row(m.data(), go, gain, eps2, d, g.data(), ggain);
      } else {
#pragma omp simd
        for (int64_t i = 0; i < d; ++i) g[i] = f32(go[i]);
      }
      float g_out = 0.f;  // g . out = sum_j p_j (g . v_j)
      for (int64_t j = 0; j < n; ++j) { gdv[j] = dot(g.data(), rows[j], d); g_out += p[j] * gdv[j]; }
      for (int64_t j = 0; j < n; ++j) {
        const float r = rstd[j * tokens + t];
        const float key_coef = p[j] * (gdv[j] - g_out) * r;  // dLoss/ds_j * r_j
        const float value_coef = key_coef * scores[j * tokens + t] * r / d;
        const T* __restrict__ v = rows[j];
        const float pj = p[j];
#pragma omp simd
        for (int64_t i = 0; i < d; ++i) gw[i] += key_coef * f32(v[i]);
        if (grads[j] == nullptr) continue;  // a source without gradient (frozen embeddings)
        T* __restrict__ dv = grads[j] + t * d;
        const float* __restrict__ gr = g.data();
#pragma omp simd
        for (int64_t i = 0; i < d; ++i) dv[i] = cast<T>(pj * gr[i] + key_coef * w[i] - value_coef * f32(v[i]));
      }
    }
  });
}

// the eager path's w = (norm_weight * query).float(): the product rounded to the parameters' dtype, then fp32.
// Computed here for the common dtypes: at decode sizes two tensor ops cost more than the whole mix.
std::vector<float> mixed_weight(const at::Tensor& query, const at::Tensor& norm_weight) {
  const int64_t d = query.numel();
  std::vector<float> w(d);
  const auto type = query.scalar_type();
  if (type == norm_weight.scalar_type() && query.is_contiguous() && norm_weight.is_contiguous() &&
      (type == at::kFloat || type == at::kBFloat16)) {
    AT_DISPATCH_FLOATING_TYPES_AND(at::kBFloat16, type, "attnres_mix_weight", [&] {
      const scalar_t* q = query.data_ptr<scalar_t>();
      const scalar_t* g = norm_weight.data_ptr<scalar_t>();
      for (int64_t i = 0; i < d; ++i) w[i] = f32(cast<scalar_t>(f32(g[i]) * f32(q[i])));
    });
    return w;
  }
  const at::Tensor product = norm_weight.mul(query).to(at::kFloat).contiguous();
  std::copy(product.data_ptr<float>(), product.data_ptr<float>() + d, w.begin());
  return w;
}
}  // namespace

// Whether the kernel takes these inputs. It reads raw memory, so every tensor must be a plain strided CPU tensor with
// its own storage (no Python subclass such as DTensor or FakeTensor, no functorch wrapper, no lazy conj / neg view).
// Checked here rather than in Python: at decode sizes the checks were a good part of the call.
bool plain_cpu(const at::Tensor& t) {
  return t.defined() && t.device().is_cpu() && t.layout() == at::kStrided && t.has_storage() &&
         !t.unsafeGetTensorImpl()->is_python_dispatch() && !t.is_conj() && !t.is_neg();
}

bool mix_fits(std::vector<at::Tensor> sources, at::Tensor query, at::Tensor norm_weight,
              c10::optional<at::Tensor> out_norm_weight) {
  if (sources.empty() || !plain_cpu(sources[0]) || sources[0].dim() == 0) return false;
  const auto& first = sources[0];
  const auto type = first.scalar_type();
  const int64_t d = first.size(-1);
  if ((type != at::kFloat && type != at::kBFloat16) || d == 0) return false;
  for (const auto& s : sources)
    if (!plain_cpu(s) || s.scalar_type() != type || !s.sizes().equals(first.sizes()) || !s.is_contiguous())
      return false;
  for (const auto* p : {&query, &norm_weight})  // [d] (or the [1, d] weight of the query's Linear), any float dtype
    if (!plain_cpu(*p) || !at::isFloatingType(p->scalar_type()) || p->numel() != d) return false;
  if (out_norm_weight.has_value()) {
    const auto& gain = *out_norm_weight;
    if (!plain_cpu(gain) || gain.scalar_type() != type || gain.numel() != d || !gain.is_contiguous()) return false;
  }
  return true;
}

// (out, probs [n, ...], rstd [n, ...], scores [n, ...]); rstd and scores (the backward's) undefined unless keep_stats
std::vector<at::Tensor> mix_forward(std::vector<at::Tensor> sources, at::Tensor query, at::Tensor norm_weight,
                                    double eps, c10::optional<at::Tensor> out_norm_weight, double out_norm_eps,
                                    bool keep_stats) {
  const auto& first = sources[0];
  const int64_t d = first.size(-1), tokens = first.numel() / d, n = sources.size();
  auto stat_shape = first.sizes().vec();
  stat_shape.back() = n;
  std::rotate(stat_shape.rbegin(), stat_shape.rbegin() + 1, stat_shape.rend());  // [n, ...]
  const auto stat_opts = first.options().dtype(at::kFloat);
  at::Tensor out = at::empty_like(first), probs = at::empty(stat_shape, stat_opts), rstd, scores;
  if (keep_stats) {
    rstd = at::empty(stat_shape, stat_opts);
    scores = at::empty(stat_shape, stat_opts);
  }
  const std::vector<float> w = mixed_weight(query, norm_weight);
  AT_DISPATCH_FLOATING_TYPES_AND(at::kBFloat16, first.scalar_type(), "attnres_mix_forward", [&] {
    const scalar_t* gain = out_norm_weight.has_value() ? out_norm_weight->data_ptr<scalar_t>() : nullptr;
    forward_impl<scalar_t>(sources, w.data(), eps, gain, out_norm_eps, out.data_ptr<scalar_t>(),
                           probs.data_ptr<float>(), keep_stats ? rstd.data_ptr<float>() : nullptr,
                           keep_stats ? scores.data_ptr<float>() : nullptr, tokens, d);
  });
  return {out, probs, rstd, scores};
}

// (grad of w = norm_weight * query (fp32 [d]), grad of the output norm's gain or undefined, grad of each source or
// undefined where `needs_grad` is false)
std::vector<at::Tensor> mix_backward(std::vector<at::Tensor> sources, at::Tensor query, at::Tensor norm_weight,
                                     c10::optional<at::Tensor> out_norm_weight, double out_norm_eps,
                                     at::Tensor grad_out, at::Tensor probs, at::Tensor rstd, at::Tensor scores,
                                     std::vector<bool> needs_grad) {
  const auto& first = sources[0];
  const int64_t d = first.size(-1), tokens = first.numel() / d, n = sources.size();
  const std::vector<float> w = mixed_weight(query, norm_weight);
  grad_out = grad_out.contiguous();
  const auto threads = at::get_num_threads();
  at::Tensor gw = at::zeros({threads, d}, first.options().dtype(at::kFloat));
  at::Tensor ggain = at::zeros({threads, d}, first.options().dtype(at::kFloat));
  std::vector<at::Tensor> result(n + 2);
  AT_DISPATCH_FLOATING_TYPES_AND(at::kBFloat16, first.scalar_type(), "attnres_mix_backward", [&] {
    std::vector<scalar_t*> grads(n, nullptr);
    for (int64_t j = 0; j < n; ++j) {
      if (!needs_grad[j]) continue;
      result[2 + j] = at::empty_like(first);
      grads[j] = result[2 + j].data_ptr<scalar_t>();
    }
    const scalar_t* gain = out_norm_weight.has_value() ? out_norm_weight->data_ptr<scalar_t>() : nullptr;
    backward_impl<scalar_t>(sources, w.data(), gain, out_norm_eps, grad_out.data_ptr<scalar_t>(),
                            probs.data_ptr<float>(), rstd.data_ptr<float>(), scores.data_ptr<float>(), grads,
                            gw.data_ptr<float>(), ggain.data_ptr<float>(), tokens, d);
  });
  result[0] = gw.sum(0);
  if (out_norm_weight.has_value()) result[1] = ggain.sum(0).to(out_norm_weight->scalar_type());
  return result;
}
