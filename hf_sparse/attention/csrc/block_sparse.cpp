// Fused block-sparse attention on CPU, forward and backward (hf_sparse.attention.fused loads it).
//
// A component is a table of key blocks per (mask group, query block): kv_index[g, qb, slot] = key
// block or -1, tile_index[g, qb, slot] = -1 for a full tile, else the (c, c) 0/1 tile in ``tiles``.
// Row r of the flattened (batch * heads) tensors uses mask group group_of_row[r].
//
// Forward: one task per (row, query block); each key tile is S = scale Q K^T (BLAS), masked and
// exponentiated in cache (online softmax), then accumulated as P V straight into the output rows;
// the log-sum-exp of every row is returned (-inf where a row has no allowed key; its output is 0).
// Backward: one task per row (it owns that row's dK and dV); probabilities are recomputed as
// exp(S - lse) tile by tile, and dQ, dK, dV are BLAS products accumulated in place.
// No padded copies: the last query / key block is cut to the rows that exist.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <torch/library.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

extern "C" {
void sgemm_(const char*, const char*, const int*, const int*, const int*, const float*, const float*,
            const int*, const float*, const int*, const float*, float*, const int*);
void dgemm_(const char*, const char*, const int*, const int*, const int*, const double*, const double*,
            const int*, const double*, const int*, const double*, double*, const int*);
int MKL_Set_Num_Threads_Local(int);  // MKL (torch's BLAS): this thread's BLAS calls stay single-threaded
}

namespace {
// Inside a parallel_for task the tile products must not start BLAS threads of their own
// (oversubscription made a 2-thread run 20x slower than a 1-thread one).
struct SequentialBlas {
  int prev;
  SequentialBlas() : prev(MKL_Set_Num_Threads_Local(1)) {}
  ~SequentialBlas() { MKL_Set_Num_Threads_Local(prev); }
};
}  // namespace

namespace {

// Row-major C (m x n, ldc) = alpha * op(A) op(B) + beta * C, with op(A) (m x k), op(B) (k x n).
// ta/tb: whether A / B are stored transposed (row-major A is (k x m) then).
template <typename T>
void gemm_rm(bool ta, bool tb, int m, int n, int k, T alpha, const T* A, int lda, const T* B, int ldb,
             T beta, T* C, int ldc) {
  // column-major view: C^T = op(B)^T op(A)^T
  const char tA = tb ? 'T' : 'N', tB = ta ? 'T' : 'N';
  if constexpr (std::is_same_v<T, float>) {
    sgemm_(&tA, &tB, &n, &m, &k, &alpha, B, &ldb, A, &lda, &beta, C, &ldc);
  } else {
    dgemm_(&tA, &tB, &n, &m, &k, &alpha, B, &ldb, A, &lda, &beta, C, &ldc);
  }
}

// exp(x) for x <= 0, exactly 0 below -87 (masked entries are -inf): branch-free, so it vectorises.
inline float exp_neg(float x) {
  const float xc = x < -87.f ? -87.f : x;
  const float n = std::floor(xc * 1.44269504088896341f + 0.5f);
  const float r = (xc - n * 0.693359375f) + n * 2.12194440e-4f;
  float p = 1.9875691500E-4f;
  p = p * r + 1.3981999507E-3f;
  p = p * r + 8.3334519073E-3f;
  p = p * r + 4.1665795894E-2f;
  p = p * r + 1.6666665459E-1f;
  p = p * r + 5.0000001201E-1f;
  p = p * r * r + r + 1.f;
  int32_t bits = (static_cast<int32_t>(n) + 127) << 23;
  float scale;
  std::memcpy(&scale, &bits, sizeof(float));
  return x < -87.f ? 0.f : p * scale;
}
inline double exp_neg(double x) { return std::exp(x); }

struct Tables {
  const int32_t* kv;      // (G, nqb, K)
  const int32_t* tidx;    // (G, nqb, K)
  const uint8_t* tiles;   // (T, c, c)
  const int32_t* group;   // (BH,)
  int64_t nqb, K, c;
};

template <typename T>
void forward_impl(const T* q, const T* k, const T* v, T* out, T* lse, const Tables& t, int64_t BH,
                  int64_t nq, int64_t nk, int64_t D, int64_t Dv, T scale) {
  const int64_t c = t.c, nqb = t.nqb, K = t.K;
  const T ninf = -std::numeric_limits<T>::infinity();
  at::parallel_for(0, BH * nqb, 1, [&](int64_t begin, int64_t end) {
    SequentialBlas seq;
    std::vector<T> S(c * c), m(c), l(c);
    for (int64_t task = begin; task < end; ++task) {
      const int64_t r = task / nqb, qb = task % nqb, g = t.group[r];
      const int64_t q0 = qb * c, qn = std::min(c, nq - q0);
      const T* Q = q + (r * nq + q0) * D;
      T* O = out + (r * nq + q0) * Dv;
      std::fill(m.begin(), m.end(), ninf);
      std::fill(l.begin(), l.end(), T(0));
      std::fill(O, O + qn * Dv, T(0));
      const int32_t* kvrow = t.kv + (g * nqb + qb) * K;
      const int32_t* trow = t.tidx + (g * nqb + qb) * K;
      for (int64_t s = 0; s < K; ++s) {
        const int64_t kb = kvrow[s];
        if (kb < 0) continue;
        const int64_t k0 = kb * c, kn = std::min(c, nk - k0);
        if (kn <= 0) continue;
        const T* Kb = k + (r * nk + k0) * D;
        const T* Vb = v + (r * nk + k0) * Dv;
        gemm_rm<T>(false, true, qn, kn, D, scale, Q, D, Kb, D, T(0), S.data(), c);  // (qn, kn)
        const uint8_t* tile = trow[s] >= 0 ? t.tiles + trow[s] * c * c : nullptr;
        for (int64_t i = 0; i < qn; ++i) {
          T* Si = S.data() + i * c;
          if (tile) {
            const uint8_t* mi = tile + i * c;
            for (int64_t j = 0; j < kn; ++j) Si[j] = mi[j] ? Si[j] : ninf;
          }
          T mx = ninf;
          for (int64_t j = 0; j < kn; ++j) mx = Si[j] > mx ? Si[j] : mx;
          if (mx == ninf) {  // no allowed key in this tile
            std::fill(Si, Si + kn, T(0));
            continue;
          }
          const T mnew = mx > m[i] ? mx : m[i];
          const T corr = m[i] == ninf ? T(0) : exp_neg(m[i] - mnew);
          T sum = 0;
          for (int64_t j = 0; j < kn; ++j) {
            const T p = exp_neg(Si[j] - mnew);
            Si[j] = p;
            sum += p;
          }
          if (corr != T(1)) {
            T* Oi = O + i * Dv;
            for (int64_t d = 0; d < Dv; ++d) Oi[d] *= corr;
          }
          l[i] = l[i] * corr + sum;
          m[i] = mnew;
        }
        gemm_rm<T>(false, false, qn, Dv, kn, T(1), S.data(), c, Vb, Dv, T(1), O, Dv);  // O += P V
      }
      T* L = lse + r * nq + q0;
      for (int64_t i = 0; i < qn; ++i) {
        T* Oi = O + i * Dv;
        if (l[i] > T(0)) {
          const T inv = T(1) / l[i];
          for (int64_t d = 0; d < Dv; ++d) Oi[d] *= inv;
          L[i] = m[i] + std::log(l[i]);
        } else {
          std::fill(Oi, Oi + Dv, T(0));
          L[i] = ninf;
        }
      }
    }
  });
}

template <typename T>
void backward_impl(const T* q, const T* k, const T* v, const T* dout, const T* lse, const T* delta,
                   T* dq, T* dk, T* dv, const Tables& t, int64_t BH, int64_t nq, int64_t nk, int64_t D,
                   int64_t Dv, T scale) {
  const int64_t c = t.c, nqb = t.nqb, K = t.K;
  const T ninf = -std::numeric_limits<T>::infinity();
  at::parallel_for(0, BH, 1, [&](int64_t begin, int64_t end) {
    SequentialBlas seq;
    std::vector<T> P(c * c), dS(c * c);
    for (int64_t r = begin; r < end; ++r) {
      const int64_t g = t.group[r];
      std::fill(dq + r * nq * D, dq + (r + 1) * nq * D, T(0));
      std::fill(dk + r * nk * D, dk + (r + 1) * nk * D, T(0));
      std::fill(dv + r * nk * Dv, dv + (r + 1) * nk * Dv, T(0));
      for (int64_t qb = 0; qb < nqb; ++qb) {
        const int64_t q0 = qb * c, qn = std::min(c, nq - q0);
        const T* Q = q + (r * nq + q0) * D;
        const T* dO = dout + (r * nq + q0) * Dv;
        const T* L = lse + r * nq + q0;
        const T* De = delta + r * nq + q0;
        T* dQ = dq + (r * nq + q0) * D;
        const int32_t* kvrow = t.kv + (g * nqb + qb) * K;
        const int32_t* trow = t.tidx + (g * nqb + qb) * K;
        for (int64_t s = 0; s < K; ++s) {
          const int64_t kb = kvrow[s];
          if (kb < 0) continue;
          const int64_t k0 = kb * c, kn = std::min(c, nk - k0);
          if (kn <= 0) continue;
          const T* Kb = k + (r * nk + k0) * D;
          const T* Vb = v + (r * nk + k0) * Dv;
          gemm_rm<T>(false, true, qn, kn, D, scale, Q, D, Kb, D, T(0), P.data(), c);    // S
          gemm_rm<T>(false, true, qn, kn, Dv, T(1), dO, Dv, Vb, Dv, T(0), dS.data(), c);  // dP
          const uint8_t* tile = trow[s] >= 0 ? t.tiles + trow[s] * c * c : nullptr;
          for (int64_t i = 0; i < qn; ++i) {
            T* Pi = P.data() + i * c;
            T* dSi = dS.data() + i * c;
            const T li = L[i], di = De[i];
            if (li == ninf || std::isinf(li)) {  // no allowed key: no gradient
              std::fill(Pi, Pi + kn, T(0));
              std::fill(dSi, dSi + kn, T(0));
              continue;
            }
            if (tile) {
              const uint8_t* mi = tile + i * c;
              for (int64_t j = 0; j < kn; ++j) Pi[j] = mi[j] ? Pi[j] : ninf;
            }
            for (int64_t j = 0; j < kn; ++j) {
              const T p = exp_neg(Pi[j] - li);
              Pi[j] = p;
              dSi[j] = p * (dSi[j] - di);
            }
          }
          T* dKb = dk + (r * nk + k0) * D;
          T* dVb = dv + (r * nk + k0) * Dv;
          gemm_rm<T>(true, false, kn, Dv, qn, T(1), P.data(), c, dO, Dv, T(1), dVb, Dv);     // dV += P^T dO
          gemm_rm<T>(true, false, kn, D, qn, scale, dS.data(), c, Q, D, T(1), dKb, D);       // dK += dS^T Q
          gemm_rm<T>(false, false, qn, D, kn, scale, dS.data(), c, Kb, D, T(1), dQ, D);      // dQ += dS K
        }
      }
    }
  });
}

Tables tables(const at::Tensor& kv, const at::Tensor& tidx, const at::Tensor& tiles, const at::Tensor& group,
              int64_t c) {
  TORCH_CHECK(kv.dtype() == at::kInt && tidx.dtype() == at::kInt && group.dtype() == at::kInt, "int32 tables");
  TORCH_CHECK(tiles.dtype() == at::kByte, "uint8 tiles");
  TORCH_CHECK(kv.is_contiguous() && tidx.is_contiguous() && tiles.is_contiguous() && group.is_contiguous());
  return Tables{kv.data_ptr<int32_t>(), tidx.data_ptr<int32_t>(), tiles.data_ptr<uint8_t>(),
                group.data_ptr<int32_t>(), kv.size(1), kv.size(2), c};
}

std::vector<at::Tensor> forward(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                const at::Tensor& kv, const at::Tensor& tidx, const at::Tensor& tiles,
                                const at::Tensor& group, int64_t c, double scale) {
  TORCH_CHECK(q.is_contiguous() && k.is_contiguous() && v.is_contiguous(), "contiguous q, k, v");
  TORCH_CHECK(q.dim() == 3 && k.dim() == 3 && v.dim() == 3, "(BH, n, D) q, k, v");
  const int64_t BH = q.size(0), nq = q.size(1), D = q.size(2), nk = k.size(1), Dv = v.size(2);
  Tables t = tables(kv, tidx, tiles, group, c);
  TORCH_CHECK(t.nqb * c >= nq, "query blocks do not cover the queries");
  auto out = at::empty({BH, nq, Dv}, q.options());
  auto lse = at::empty({BH, nq}, q.options());
  AT_DISPATCH_FLOATING_TYPES(q.scalar_type(), "hf_sparse_forward", [&] {
    forward_impl<scalar_t>(q.data_ptr<scalar_t>(), k.data_ptr<scalar_t>(), v.data_ptr<scalar_t>(),
                           out.data_ptr<scalar_t>(), lse.data_ptr<scalar_t>(), t, BH, nq, nk, D, Dv,
                           static_cast<scalar_t>(scale));
  });
  return {out, lse};
}

std::vector<at::Tensor> backward(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                 const at::Tensor& dout, const at::Tensor& lse, const at::Tensor& delta,
                                 const at::Tensor& kv, const at::Tensor& tidx, const at::Tensor& tiles,
                                 const at::Tensor& group, int64_t c, double scale) {
  TORCH_CHECK(q.is_contiguous() && k.is_contiguous() && v.is_contiguous() && dout.is_contiguous() &&
              lse.is_contiguous() && delta.is_contiguous(), "contiguous inputs");
  const int64_t BH = q.size(0), nq = q.size(1), D = q.size(2), nk = k.size(1), Dv = v.size(2);
  Tables t = tables(kv, tidx, tiles, group, c);
  auto dq = at::empty_like(q), dk = at::empty_like(k), dv = at::empty_like(v);
  AT_DISPATCH_FLOATING_TYPES(q.scalar_type(), "hf_sparse_backward", [&] {
    backward_impl<scalar_t>(q.data_ptr<scalar_t>(), k.data_ptr<scalar_t>(), v.data_ptr<scalar_t>(),
                            dout.data_ptr<scalar_t>(), lse.data_ptr<scalar_t>(), delta.data_ptr<scalar_t>(),
                            dq.data_ptr<scalar_t>(), dk.data_ptr<scalar_t>(), dv.data_ptr<scalar_t>(), t, BH,
                            nq, nk, D, Dv, static_cast<scalar_t>(scale));
  });
  return {dq, dk, dv};
}

}  // namespace

TORCH_LIBRARY(hf_sparse_fused, m) {
  m.def("forward(Tensor q, Tensor k, Tensor v, Tensor kv, Tensor tidx, Tensor tiles, Tensor group, int c, float scale) -> Tensor[]", &forward);
  m.def("backward(Tensor q, Tensor k, Tensor v, Tensor dout, Tensor lse, Tensor delta, Tensor kv, Tensor tidx, Tensor tiles, Tensor group, int c, float scale) -> Tensor[]", &backward);
}
