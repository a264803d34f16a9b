
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

// ---- Inkling-2's variant (transformers' Inkling2BlockAttentionResidual): bank [..., nb, d] plus one partial [..., d]
// (n = nb + 1 rows per token), Q queries read the token's rows in one pass. Keys k_j = r_j v_j (unweighted RMSNorm),
// scores s_kj = scale * (q_k . k_j), p_k = softmax_j, out_k = sum_j p_kj * (normed_values ? k_j : v_j), fp32 out.
// With c_j = r_j (normed values) or 1, a_kj = g_k . v_j and ds_kj = p_kj (c_j a_kj - g_k . out_k), the backward is
//   dv_j = c_j sum_k p_kj g_k + r_j scale sum_k ds_kj q_k - r_j^2 / d * (e_j + sum_k ds_kj s_kj) v_j,
//   dq_k = scale * sum_j ds_kj r_j v_j,   e_j = normed_values ? sum_k p_kj r_j a_kj : 0.
namespace {
// One token's rows: the bank's nb rows (type B) and the partial (type P); `visit(j, f)` calls f with row j's pointer.
template <typename B, typename P>
struct TokenRows {
  const B* bank;
  const P* partial;
  int64_t nb, d;
  template <typename F>
  inline void visit(int64_t j, F&& f) const {
    if (j < nb) f(bank + j * d); else f(partial);
  }
};

template <typename T>
inline float sumsq(const T* __restrict__ v, int64_t d) {
  float ss = 0.f;
#pragma omp simd reduction(+ : ss)
  for (int64_t i = 0; i < d; ++i) { const float x = f32(v[i]); ss += x * x; }
  return ss;
}

template <typename T>
inline void axpy(float a, const T* __restrict__ x, float* __restrict__ y, int64_t d) {
#pragma omp simd
  for (int64_t i = 0; i < d; ++i) y[i] += a * f32(x[i]);
}

template <typename B, typename P>
void inkling_forward_impl(const B* bank, const P* partial, const float* q, int64_t nq, float scale, float eps,
                          bool normed_values, float* out, float* probs, float* rstd, float* scores, int64_t tokens,
                          int64_t nb, int64_t d) {
  const int64_t n = nb + 1;
  at::parallel_for(0, tokens, grain(n * nq, d), [&](int64_t begin, int64_t end) {
    std::vector<float> r(n), s(nq * n);
    for (int64_t t = begin; t < end; ++t) {
      const TokenRows<B, P> rows{bank + t * nb * d, partial + t * d, nb, d};
      for (int64_t j = 0; j < n; ++j) {  // the statistics pass: each row read once for all queries
        rows.visit(j, [&](auto* v) {
          r[j] = 1.f / std::sqrt(sumsq(v, d) / d + eps);
          for (int64_t k = 0; k < nq; ++k) s[k * n + j] = scale * r[j] * dot(q + k * d, v, d);
        });
      }
      float* o = out + t * nq * d;
      std::fill(o, o + nq * d, 0.f);
      for (int64_t k = 0; k < nq; ++k) {
        float* sk = s.data() + k * n;
        float top = -INFINITY, total = 0.f;
        for (int64_t j = 0; j < n; ++j) top = std::max(top, sk[j]);
        float* pk = probs + (t * nq + k) * n;
        for (int64_t j = 0; j < n; ++j) { pk[j] = std::exp(sk[j] - top); total += pk[j]; }
        for (int64_t j = 0; j < n; ++j) pk[j] /= total;
        if (scores != nullptr) std::copy(sk, sk + n, scores + (t * nq + k) * n);
      }
      for (int64_t j = 0; j < n; ++j) {  // the mixing pass: the rows are cache resident
        const float c = normed_values ? r[j] : 1.f;
        rows.visit(j, [&](auto* v) {
          for (int64_t k = 0; k < nq; ++k) axpy(probs[(t * nq + k) * n + j] * c, v, o + k * d, d);
        });
        if (rstd != nullptr) rstd[t * n + j] = r[j];
      }
    }
  });
}

template <typename B, typename P>
void inkling_backward_impl(const B* bank, const P* partial, const float* q, int64_t nq, float scale,
                           bool normed_values, const float* grad_out, const float* probs, const float* rstd,
                           const float* scores, B* grad_bank, P* grad_partial, float* gq_all, int64_t tokens,
                           int64_t nb, int64_t d) {
  const int64_t n = nb + 1;
  at::parallel_for(0, tokens, grain(n * nq, d), [&](int64_t begin, int64_t end) {
    float* gq = gq_all + at::get_thread_num() * nq * d;  // per-thread partial sums over tokens, added up afterwards
    std::vector<float> a(nq * n), ds(nq * n), g_out(nq), dv(d);
    for (int64_t t = begin; t < end; ++t) {
      const TokenRows<B, P> rows{bank + t * nb * d, partial + t * d, nb, d};
      const float* g = grad_out + t * nq * d;
      const float* p = probs + t * nq * n;
      const float* s = scores + t * nq * n;
      const float* r = rstd + t * n;
      for (int64_t j = 0; j < n; ++j)
        rows.visit(j, [&](auto* v) { for (int64_t k = 0; k < nq; ++k) a[k * n + j] = dot(g + k * d, v, d); });
      for (int64_t k = 0; k < nq; ++k) {  // g_k . out_k = sum_j p_kj c_j a_kj: the output is never saved
        float go = 0.f;
        for (int64_t j = 0; j < n; ++j) go += p[k * n + j] * (normed_values ? r[j] : 1.f) * a[k * n + j];
        g_out[k] = go;
        for (int64_t j = 0; j < n; ++j)
          ds[k * n + j] = p[k * n + j] * ((normed_values ? r[j] : 1.f) * a[k * n + j] - go);
      }
      for (int64_t j = 0; j < n; ++j) {
        const float c = normed_values ? r[j] : 1.f;
        float e = 0.f;
        for (int64_t k = 0; k < nq; ++k)
          e += ds[k * n + j] * s[k * n + j] + (normed_values ? p[k * n + j] * r[j] * a[k * n + j] : 0.f);
        const float value_coef = r[j] * r[j] * e / d;
        rows.visit(j, [&](auto* v) {
#pragma omp simd
          for (int64_t i = 0; i < d; ++i) dv[i] = -value_coef * f32(v[i]);
          for (int64_t k = 0; k < nq; ++k) {
            const float pc = p[k * n + j] * c, qc = r[j] * scale * ds[k * n + j];
            const float* __restrict__ gk = g + k * d;
            const float* __restrict__ qk = q + k * d;
            float* __restrict__ acc = dv.data();
#pragma omp simd
            for (int64_t i = 0; i < d; ++i) acc[i] += pc * gk[i] + qc * qk[i];
            axpy(qc, v, gq + k * d, d);  // scale * ds_kj * r_j * v_j
          }
        });
        if (j < nb) {
          if (grad_bank == nullptr) continue;
          B* __restrict__ dst = grad_bank + (t * nb + j) * d;
#pragma omp simd
          for (int64_t i = 0; i < d; ++i) dst[i] = cast<B>(dv[i]);
        } else if (grad_partial != nullptr) {
          P* __restrict__ dst = grad_partial + t * d;
#pragma omp simd
          for (int64_t i = 0; i < d; ++i) dst[i] = cast<P>(dv[i]);
        }
      }
    }
  });
}

// Calls f(B{}, P{}) with the bank's and the partial's element types (fp32 or bf16 each).
template <typename F>
void dispatch_pair(at::ScalarType bank, at::ScalarType partial, F&& f) {
  const bool b16 = bank == at::kBFloat16, p16 = partial == at::kBFloat16;
  if (b16 && p16) f(c10::BFloat16{}, c10::BFloat16{});
  else if (b16) f(c10::BFloat16{}, float{});
  else if (p16) f(float{}, c10::BFloat16{});
  else f(float{}, float{});
}

bool fp32_or_bf16(const at::Tensor& t) { return t.scalar_type() == at::kFloat || t.scalar_type() == at::kBFloat16; }
}  // namespace

// Whether the Inkling kernel takes these inputs: plain contiguous CPU tensors, bank [..., nb, d] and partial [..., d]
// of the same leading shape (fp32 or bf16 each), fp32 queries [Q, d] contiguous.
bool inkling_fits(at::Tensor bank, at::Tensor partial, at::Tensor queries) {
  if (!plain_cpu(bank) || !plain_cpu(partial) || !plain_cpu(queries)) return false;
  if (!fp32_or_bf16(bank) || !fp32_or_bf16(partial) || queries.scalar_type() != at::kFloat) return false;
  if (!bank.is_contiguous() || !partial.is_contiguous() || !queries.is_contiguous()) return false;
  if (partial.dim() == 0 || bank.dim() != partial.dim() + 1 || queries.dim() != 2) return false;
  const int64_t d = partial.size(-1);
  if (d == 0 || bank.size(-1) != d || queries.size(1) != d || queries.size(0) == 0) return false;
  for (int64_t i = 0; i + 1 < partial.dim(); ++i)
    if (bank.size(i) != partial.size(i)) return false;
  return true;
}

// (out fp32 [..., Q, d], probs [..., Q, n], rstd [..., n], scores [..., Q, n]); rstd and scores undefined unless
// keep_stats
std::vector<at::Tensor> inkling_forward(at::Tensor bank, at::Tensor partial, at::Tensor queries, double scale,
                                        double eps, bool normed_values, bool keep_stats) {
  const int64_t d = partial.size(-1), tokens = partial.numel() / d, nb = bank.size(-2), nq = queries.size(0);
  auto lead = partial.sizes().vec();
  lead.pop_back();
  const auto opts = partial.options().dtype(at::kFloat);
  auto shape = [&](std::vector<int64_t> tail) { auto s = lead; s.insert(s.end(), tail.begin(), tail.end()); return s; };
  at::Tensor out = at::empty(shape({nq, d}), opts), probs = at::empty(shape({nq, nb + 1}), opts), rstd, scores;
  if (keep_stats) {
    rstd = at::empty(shape({nb + 1}), opts);
    scores = at::empty(shape({nq, nb + 1}), opts);
  }
  dispatch_pair(bank.scalar_type(), partial.scalar_type(), [&](auto b, auto p) {
    using B = decltype(b);
    using P = decltype(p);
    inkling_forward_impl<B, P>(bank.data_ptr<B>(), partial.data_ptr<P>(), queries.data_ptr<float>(), nq, scale, eps,
                               normed_values, out.data_ptr<float>(), probs.data_ptr<float>(),
                               keep_stats ? rstd.data_ptr<float>() : nullptr,
                               keep_stats ? scores.data_ptr<float>() : nullptr, tokens, nb, d);
  });
  return {out, probs, rstd, scores};
}

// (grad of the queries fp32 [Q, d], grad of the bank or undefined, grad of the partial or undefined)
std::vector<at::Tensor> inkling_backward(at::Tensor bank, at::Tensor partial, at::Tensor queries, double scale,
                                         bool normed_values, at::Tensor grad_out, at::Tensor probs, at::Tensor rstd,
                                         at::Tensor scores, bool bank_grad, bool partial_grad) {
  const int64_t d = partial.size(-1), tokens = partial.numel() / d, nb = bank.size(-2), nq = queries.size(0);
  grad_out = grad_out.to(at::kFloat).contiguous();
  at::Tensor gq = at::zeros({at::get_num_threads(), nq, d}, partial.options().dtype(at::kFloat));
  at::Tensor grad_bank = bank_grad ? at::empty_like(bank) : at::Tensor();
  at::Tensor grad_partial = partial_grad ? at::empty_like(partial) : at::Tensor();
  dispatch_pair(bank.scalar_type(), partial.scalar_type(), [&](auto b, auto p) {
    using B = decltype(b);
    using P = decltype(p);
    inkling_backward_impl<B, P>(bank.data_ptr<B>(), partial.data_ptr<P>(), queries.data_ptr<float>(), nq, scale,
                                normed_values, grad_out.data_ptr<float>(), probs.data_ptr<float>(),
                                rstd.data_ptr<float>(), scores.data_ptr<float>(),
                                bank_grad ? grad_bank.data_ptr<B>() : nullptr,
                                partial_grad ? grad_partial.data_ptr<P>() : nullptr, gq.data_ptr<float>(), tokens,
                                nb, d);
  });
  return {gq.sum(0), grad_bank, grad_partial};
}
