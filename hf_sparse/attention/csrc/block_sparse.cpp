// Fused block-sparse attention on CPU, forward and backward (hf_sparse.attention.fused loads it).
//
// Two component kinds:
//
// * Tables: a table of key blocks per (mask group, query block): kv_index[g, qb, slot] = key block or
//   -1, tile_index[g, qb, slot] = -1 for a full tile, else the (c, c) 0/1 tile in ``tiles``. Row r of
//   the flattened (batch * heads) tensors uses mask group group_of_row[r]. Forward: one task per
//   (row, query block); each key tile is S = scale Q K^T (BLAS), masked and exponentiated in cache
//   (online softmax), then accumulated as P V straight into the output rows. Backward: one task per
//   row (it owns that row's dK and dV); probabilities are recomputed as exp(S - lse) tile by tile.
//   A component in residue-class order (Strided's columns: component row i is tensor row
//   (i % m) * d + i / m) is read and written in place with a row stride of d (``Rows``). In float on
//   AVX-512 rows in order run register-blocked (``tables_forward_rb`` / ``tables_backward_rb``).
// * Band: query row i sees key rows i + d for the allowed offsets d in [dmin, dmax] (sliding windows),
//   minus padding. Query rows go in tiles of R; a tile's keys are one contiguous window of
//   R + dmax - dmin rows, so S = Q K^T is one product whose rows each hold their whole softmax (no
//   online rescaling, no skewed buffers). Backward: tasks are (row, chunk of query tiles); chunks at
//   least as long as the band is wide touch disjoint key rows two chunks apart, so even chunks run in
//   parallel, then odd ones, each accumulating dK and dV in place. In float on AVX-512 both run
//   register-blocked (``band_forward_rb`` / ``band_backward_rb``: no BLAS, transposed score tiles).
// * Range (``range_forward``: LSH's first round in bucket order): component row i sees key rows
//   [rlo[i], rhi[i]) of the component's key order; both orders are permutations of the tensors' rows
//   (``qidx``, ``kidx``), which the kernel reads and writes itself. Query rows go in tiles of rows with
//   the same range start (a bucket), tiles in groups with disjoint key windows; register-blocked in float on
//   AVX-512 (``range_forward_rb`` / ``range_backward_rb``), BLAS otherwise.
//
// Both forwards return the log-sum-exp of every row (-inf where a row has no allowed key; its output is
// 0) and take no padded copies: the last query / key block is cut to the rows that exist. Both
// backwards take the log-sum-exp and delta = rowsum(dO * O) of the *whole* attention (all components
// of a plan: then exp(S - lse) are the final probabilities of this component's pairs, and no merge
// needs a backward) and accumulate into dq, dk, dv, which every component of a plan shares.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <ATen/cpu/vec/functional.h>
#include <ATen/cpu/vec/vec.h>
#include <c10/core/impl/alloc_cpu.h>
#include <torch/library.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <deque>
#include <initializer_list>
#include <limits>
#include <mutex>
#include <optional>
#include <pthread.h>
#include <vector>

extern "C" {
void sgemm_(const char*, const char*, const int*, const int*, const int*, const float*, const float*,
            const int*, const float*, const int*, const float*, float*, const int*);
void dgemm_(const char*, const char*, const int*, const int*, const int*, const double*, const double*,
            const int*, const double*, const int*, const double*, double*, const int*);
int MKL_Set_Num_Threads_Local(int);  // MKL (torch's BLAS): this thread's BLAS calls stay single-threaded
}

// Kernel outputs (out; dq, dk, dv and row copies from Python) come from a pool of recently freed blocks.
// glibc gives every freed block over 32 MB back to the system and maps the next one afresh, so each step
// paid the page faults of every output again: ~11 ms per 50 MB (one output of 12 heads x 16k rows);
// Strided(128)'s forward+backward at 16k took 0.373 s with them, 0.262 s without. A block is reused only
// at its exact byte size; at most `limit` bytes are held (``HF_SPARSE_POOL_MB``), oldest released first.
namespace {
class BlockPool {
 public:
  static BlockPool& get() {
    static BlockPool* pool = [] {  // never destroyed: tensors may be freed during interpreter exit
      auto* p = new BlockPool();
      // a fork while another thread holds the lock would leave it locked in the child forever
      pthread_atfork([] { get().mutex_.lock(); }, [] { get().mutex_.unlock(); }, [] { get().mutex_.unlock(); });
      return p;
    }();
    return *pool;
  }

  at::Tensor empty(at::IntArrayRef size, const at::TensorOptions& options) {
    const size_t bytes = c10::multiply_integers(size) * options.dtype().itemsize();
    if (bytes < kMinBytes) return at::empty(size, options);  // small blocks: malloc reuses its heap already
    void* data = take(bytes);
    if (data == nullptr) data = c10::alloc_cpu(bytes);
    return at::from_blob(data, size, [bytes](void* p) { get().give(p, bytes); }, options);
  }

  // Sets the limit, releases blocks down to it, returns the bytes still held.
  int64_t set_limit(int64_t bytes) {
    TORCH_CHECK(bytes >= 0, "pool limit must be >= 0, got ", bytes);
    std::vector<void*> drop;
    size_t held;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      limit_ = static_cast<size_t>(bytes);
      drop = trim();
      held = held_;
    }
    for (void* d : drop) c10::free_cpu(d);
    return static_cast<int64_t>(held);
  }

 private:
  static constexpr size_t kMinBytes = size_t(1) << 20;

  void* take(size_t bytes) {
    std::lock_guard<std::mutex> lock(mutex_);
    for (auto it = free_.rbegin(); it != free_.rend(); ++it) {  // the most recently freed: warmest in cache
      if (it->second != bytes) continue;
      void* p = it->first;
      free_.erase(std::next(it).base());
      held_ -= bytes;
      return p;
    }
    return nullptr;
  }

  void give(void* p, size_t bytes) {
    std::vector<void*> drop;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      free_.emplace_back(p, bytes);
      held_ += bytes;
      drop = trim();
    }
    for (void* d : drop) c10::free_cpu(d);
  }

  // With the lock held: takes the oldest blocks out until the limit holds; the caller frees them unlocked.
  std::vector<void*> trim() {
    std::vector<void*> drop;
    while (held_ > limit_) {
      drop.push_back(free_.front().first);
      held_ -= free_.front().second;
      free_.pop_front();
    }
    return drop;
  }

  std::mutex mutex_;
  std::deque<std::pair<void*, size_t>> free_;
  size_t held_ = 0;
  size_t limit_ = size_t(512) << 20;
};

at::Tensor pooled_empty(at::IntArrayRef size, const at::TensorOptions& options) {
  return BlockPool::get().empty(size, options);
}

// An uninitialised tensor of the given size with like's dtype, from the pool (Python: ``fused.empty``).
at::Tensor pool_empty(at::IntArrayRef size, const at::Tensor& like) {
  TORCH_CHECK(like.device().is_cpu(), "pooled tensors are CPU tensors");
  return pooled_empty(size, like.options());
}

int64_t pool_limit(int64_t bytes) { return BlockPool::get().set_limit(bytes); }
}  // namespace

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

// Element-wise passes over score rows, float on ATen's vector type (AVX-512 / AVX2 where fused.py
// compiled for it: CPU_CAPABILITY_*, else its scalar default) with its exp_u20 (the exp torch's own CPU
// flash kernel uses: 20 ulp, exactly 0 for -inf), double as plain loops (tests). Written with explicit
// vectors: GCC left the inlined ``omp simd`` exp loop scalar inside the kernels (perf: the band forward
// spent as long in that loop as in its products).
using fVec = at::vec::Vectorized<float>;
constexpr int64_t kV = fVec::size();

template <typename T>
inline T exp_scalar(T x) { return std::exp(x); }

// max of Si[lo, hi) (-inf if empty)
template <typename T>
inline T row_max(const T* Si, int64_t lo, int64_t hi) {
  T mx = -std::numeric_limits<T>::infinity();
  int64_t j = lo;
  if constexpr (std::is_same_v<T, float>) {
    if (hi - lo >= kV) {
      fVec m = fVec::loadu(Si + j);
      for (j += kV; j + kV <= hi; j += kV) m = at::vec::maximum(m, fVec::loadu(Si + j));
      mx = at::vec::vec_reduce_all<float>([](fVec& a, fVec& b) { return at::vec::maximum(a, b); }, m);
    }
  }
  for (; j < hi; ++j) mx = Si[j] > mx ? Si[j] : mx;
  return mx;
}

// Si[j] = exp(Si[j] - mx) over [lo, hi), in place; returns their sum.
template <typename T>
inline T exp_sum(T* Si, int64_t lo, int64_t hi, T mx) {
  T sum = 0;
  int64_t j = lo;
  if constexpr (std::is_same_v<T, float>) {
    const fVec vm(mx);
    fVec acc(0.f);
    for (; j + kV <= hi; j += kV) {
      const fVec p = (fVec::loadu(Si + j) - vm).exp_u20();
      p.store(Si + j);
      acc = acc + p;
    }
    sum = at::vec::vec_reduce_all<float>([](fVec& a, fVec& b) { return a + b; }, acc);
  }
  for (; j < hi; ++j) {
    const T p = exp_scalar(Si[j] - mx);
    Si[j] = p;
    sum += p;
  }
  return sum;
}

// x[0, n) *= a
template <typename T>
inline void scale_row(T* x, int64_t n, T a) {
  int64_t j = 0;
  if constexpr (std::is_same_v<T, float>) {
    const fVec va(a);
    for (; j + kV <= n; j += kV) (fVec::loadu(x + j) * va).store(x + j);
  }
  for (; j < n; ++j) x[j] *= a;
}

// Dropout on the attention probabilities, decided for each (flattened row r = b * H + h, query i, key j) of
// the tensors by a counter-based hash of the call's seed: the forward and the backward draw the same mask
// without storing it, every kernel and tiling draws the same one, and ``hf_sparse.attention.dropout.keep_mask``
// computes the same bits in PyTorch (the tests' dense reference). murmur3's 32-bit finaliser over the row's key
// plus a multiple of j; a pair is kept where the hash is >= p * 2^32, and kept probabilities are scaled by
// 1 / (1 - p). The log-sum-exp is that of the probabilities before dropout, so components still merge exactly.
constexpr uint32_t kMix1 = 0x85EBCA6Bu, kMix2 = 0xC2B2AE35u;  // fmix32's multipliers
// the multipliers of the head, query and key positions
constexpr uint32_t kHeadMul = 0x9E3779B9u, kRowMul = 0x85EBCA77u, kKeyMul = 0x27D4EB2Fu;

inline uint32_t fmix32(uint32_t x) {
  x ^= x >> 16;
  x *= kMix1;
  x ^= x >> 13;
  x *= kMix2;
  x ^= x >> 16;
  return x;
}

struct Drop {
  bool on = false;
  uint32_t seed = 0, thresh = 0;
  double scale = 1.0;  // 1 / (1 - p)
  Drop() = default;
  Drop(double p, int64_t s, int64_t head_mul = 1, int64_t head_add = 0) : on(p > 0.0), hmul(head_mul), hadd(head_add) {
    TORCH_CHECK(p >= 0.0 && p < 1.0, "dropout_p must be in [0, 1), got ", p);
    seed = fmix32(static_cast<uint32_t>(s));
    thresh = static_cast<uint32_t>(std::min(4294967295.0, std::floor(p * 4294967296.0)));
    scale = 1.0 / (1.0 - p);
  }
  // where the kernel's rows are not the tensors' (the table kernel on gathered or class rows): the tensor row of
  // component query row i / key row j of flattened row r, qmap[r * qs + i] / kmap[r * ks + j] (qs, ks: 0 where
  // every flattened row has the same map); else i * amul + aadd (one residue class of the class band: row i
  // of class c is tensor row i * d + c), by default i itself
  const int64_t *qmap = nullptr, *kmap = nullptr;
  int64_t qs = 0, ks = 0, amul = 1, aadd = 0;
  int64_t qpos(int64_t r, int64_t i) const { return qmap ? qmap[r * qs + i] : i * amul + aadd; }
  int64_t kpos(int64_t r, int64_t j) const { return kmap ? kmap[r * ks + j] : j * amul + aadd; }
  // flattened row r of the kernel's tensors is row r * hmul + hadd of the call's (b * H + h): hmul = H, hadd = h
  // where the tensors hold head h alone (``PerHead``)
  int64_t hmul = 1, hadd = 0;
  uint32_t head(int64_t r) const { return fmix32(seed + kHeadMul * static_cast<uint32_t>(r * hmul + hadd + 1)); }
  uint32_t row(uint32_t hk, int64_t i) const { return fmix32(hk ^ (kRowMul * static_cast<uint32_t>(i + 1))); }
  bool keep(uint32_t rk, int64_t j) const {
    return fmix32(rk + kKeyMul * static_cast<uint32_t>(j + 1)) >= thresh;
  }
};

#if defined(CPU_CAPABILITY_AVX512)
inline __m512i fmix32_v(__m512i x) {
  x = _mm512_xor_si512(x, _mm512_srli_epi32(x, 16));
  x = _mm512_mullo_epi32(x, _mm512_set1_epi32(static_cast<int>(kMix1)));
  x = _mm512_xor_si512(x, _mm512_srli_epi32(x, 13));
  x = _mm512_mullo_epi32(x, _mm512_set1_epi32(static_cast<int>(kMix2)));
  return _mm512_xor_si512(x, _mm512_srli_epi32(x, 16));
}

// The keep bits of 16 consecutive keys j .. j + 15 of one row (row key rk; keys without a map: j * amul + aadd).
inline __mmask16 drop_keys(const Drop& dr, uint32_t rk, int64_t j) {
  const __m512i lane = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
  const __m512i pos = _mm512_add_epi32(
      _mm512_mullo_epi32(_mm512_add_epi32(_mm512_set1_epi32(static_cast<int>(j)), lane),
                         _mm512_set1_epi32(static_cast<int>(dr.amul))),
      _mm512_set1_epi32(static_cast<int>(dr.aadd + 1)));
  const __m512i x = _mm512_add_epi32(_mm512_set1_epi32(static_cast<int>(rk)),
                                     _mm512_mullo_epi32(pos, _mm512_set1_epi32(static_cast<int>(kKeyMul))));
  return _mm512_cmpge_epu32_mask(fmix32_v(x), _mm512_set1_epi32(static_cast<int>(dr.thresh)));
}
#endif

// Si[jj] (key j0 + jj of flattened row r, row key rk) *= keep ? m : 0 over [lo, hi): dropout of one row
// (16 keys at a time in float on AVX-512 where the keys have no map: BigBird's global rows see every key).
template <typename T>
inline void drop_row(const Drop& dr, int64_t r, uint32_t rk, T* Si, int64_t lo, int64_t hi, int64_t j0, T m) {
  int64_t jj = lo;
#if defined(CPU_CAPABILITY_AVX512)
  if constexpr (std::is_same_v<T, float>) {
    if (!dr.kmap)
      for (; jj + 16 <= hi; jj += 16)
        _mm512_storeu_ps(Si + jj, _mm512_maskz_mul_ps(drop_keys(dr, rk, j0 + jj), _mm512_loadu_ps(Si + jj),
                                                      _mm512_set1_ps(m)));
  }
#endif
  for (; jj < hi; ++jj) Si[jj] = dr.keep(rk, dr.kpos(r, j0 + jj)) ? Si[jj] * m : T(0);
}

// The backward of one row with dropout (``grad_row`` otherwise): P = exp(S - lse), then Pi <- P * M (what
// dV takes) and dSi <- P (M dP - delta), M = keep / (1 - p).
template <typename T>
inline void grad_row_drop(const Drop& dr, int64_t r, uint32_t rk, T* Pi, T* dSi, int64_t n, int64_t j0, T lse,
                          T delta) {
  const T m = static_cast<T>(dr.scale);
  int64_t j = 0;
#if defined(CPU_CAPABILITY_AVX512)
  if constexpr (std::is_same_v<T, float>) {
    const fVec vl(lse), vd(delta);
    if (!dr.kmap)
      for (; j + 16 <= n; j += 16) {
        const fVec p = (fVec::loadu(Pi + j) - vl).exp_u20();
        const __m512 pm = _mm512_maskz_mul_ps(drop_keys(dr, rk, j0 + j), p, _mm512_set1_ps(m));
        _mm512_storeu_ps(Pi + j, pm);
        _mm512_storeu_ps(dSi + j, _mm512_fmsub_ps(pm, _mm512_loadu_ps(dSi + j), _mm512_mul_ps(p, vd)));
      }
  }
#endif
  for (; j < n; ++j) {
    const T p = exp_scalar(Pi[j] - lse);
    const T pm = dr.keep(rk, dr.kpos(r, j0 + j)) ? p * m : T(0);
    Pi[j] = pm;
    dSi[j] = pm * dSi[j] - p * delta;
  }
}

struct Tables {
  const int32_t* kv;      // (G, nqb, K)
  const int32_t* tidx;    // (G, nqb, K)
  const uint8_t* tiles;   // (T, c, c)
  const int32_t* group;   // (BH,)
  int64_t nqb, K, c;
};

// f(k0, kn, tile) for each key tile of query block qb of row r: key rows k0 .. k0 + kn, ``tile`` its
// (c, c) 0/1 mask or nullptr where the tile is full. Forward and backward walk the same tiles.
template <typename F>
inline void for_each_tile(const Tables& t, int64_t r, int64_t qb, int64_t nk, F&& f) {
  const int64_t g = t.group[r];
  const int32_t* kvrow = t.kv + (g * t.nqb + qb) * t.K;
  const int32_t* trow = t.tidx + (g * t.nqb + qb) * t.K;
  for (int64_t s = 0; s < t.K; ++s) {
    const int64_t kb = kvrow[s];
    if (kb < 0) continue;
    const int64_t k0 = kb * t.c, kn = std::min(t.c, nk - k0);
    if (kn <= 0) continue;
    f(k0, kn, trow[s] >= 0 ? t.tiles + trow[s] * t.c * t.c : nullptr);
  }
}

// Score row entries outside a 0/1 mask row -> -inf.
template <typename T>
inline void mask_row(T* Si, const uint8_t* mi, int64_t n) {
  const T ninf = -std::numeric_limits<T>::infinity();
  for (int64_t j = 0; j < n; ++j) Si[j] = mi[j] ? Si[j] : ninf;
}

// Probabilities P = exp(S - lse) and dS = P (dP - delta) of one score row, in place (masked entries
// are -inf in S and come out 0 in both). The backward of both component kinds shares this.
template <typename T>
inline void grad_row(T* Pi, T* dSi, int64_t n, T lse, T delta) {
  int64_t j = 0;
  if constexpr (std::is_same_v<T, float>) {
    const fVec vl(lse), vd(delta);
    for (; j + kV <= n; j += kV) {
      const fVec p = (fVec::loadu(Pi + j) - vl).exp_u20();
      p.store(Pi + j);
      (p * (fVec::loadu(dSi + j) - vd)).store(dSi + j);
    }
  }
  for (; j < n; ++j) {
    const T p = exp_scalar(Pi[j] - lse);
    Pi[j] = p;
    dSi[j] = p * (dSi[j] - delta);
  }
}

// The tile products of the backward: dV += P^T dO, dK += scale dS^T Q, dQ += scale dS K. ``lq`` / ``lk``:
// the row stride of the query-side (Q, dO, dQ) / key-side (K, dK, dV) tensors, in rows.
template <typename T>
inline void grad_products(const T* P, const T* dS, int64_t ld, int64_t qn, int64_t kn, const T* Q, const T* dO,
                          const T* Kb, T* dQ, T* dKb, T* dVb, int64_t D, int64_t Dv, T scale, int64_t lq = 1,
                          int64_t lk = 1) {
  gemm_rm<T>(true, false, kn, Dv, qn, T(1), P, ld, dO, lq * Dv, T(1), dVb, lk * Dv);
  gemm_rm<T>(true, false, kn, D, qn, scale, dS, ld, Q, lq * D, T(1), dKb, lk * D);
  gemm_rm<T>(false, false, qn, D, kn, scale, dS, ld, Kb, lk * D, T(1), dQ, lq * D);
}

// Rows of a component in a tensor's rows: component row i is tensor row (i % m) * d + i / m (d = 1, m = n:
// the same rows; d > 1: the residue classes of stride d, m = n / d rows each, read in place with a row
// stride of d instead of transposed copies). A block of rows never crosses a class (m % block == 0).
struct Rows {
  int64_t d, m;
  int64_t operator()(int64_t i) const { return (i % m) * d + i / m; }
};

template <typename T>
void forward_impl(const T* q, const T* k, const T* v, T* out, T* lse, const Tables& t, int64_t BH,
                  int64_t nq, int64_t nk, int64_t D, int64_t Dv, T scale, Rows qr, Rows kr, const Drop& dr) {
  const int64_t c = t.c, nqb = t.nqb, lq = qr.d, lk = kr.d;
  const T ninf = -std::numeric_limits<T>::infinity();
  at::parallel_for(0, BH * nqb, 1, [&](int64_t begin, int64_t end) {
    SequentialBlas seq;
    std::vector<T> S(c * c), m(c), l(c);
    for (int64_t task = begin; task < end; ++task) {
      const int64_t r = task / nqb, qb = task % nqb;
      const int64_t q0 = qb * c, qn = std::min(c, nq - q0), row0 = r * nq + qr(q0);
      const T* Q = q + row0 * D;
      T* O = out + row0 * Dv;
      const uint32_t hk = dr.head(r);
      std::fill(m.begin(), m.end(), ninf);
      std::fill(l.begin(), l.end(), T(0));
      for (int64_t i = 0; i < qn; ++i) std::fill(O + i * lq * Dv, O + i * lq * Dv + Dv, T(0));
      for_each_tile(t, r, qb, nk, [&](int64_t k0, int64_t kn, const uint8_t* tile) {
        const int64_t krow = r * nk + kr(k0);
        gemm_rm<T>(false, true, qn, kn, D, scale, Q, lq * D, k + krow * D, lk * D, T(0), S.data(), c);
        for (int64_t i = 0; i < qn; ++i) {
          T* Si = S.data() + i * c;
          if (tile) mask_row(Si, tile + i * c, kn);
          const T mx = row_max(Si, 0, kn);
          if (mx == ninf) {  // no allowed key in this tile
            std::fill(Si, Si + kn, T(0));
            continue;
          }
          const T mnew = mx > m[i] ? mx : m[i];
          const T corr = m[i] == ninf ? T(0) : exp_scalar(m[i] - mnew);
          const T sum = exp_sum(Si, 0, kn, mnew);
          if (corr != T(1)) scale_row(O + i * lq * Dv, Dv, corr);
          l[i] = l[i] * corr + sum;
          m[i] = mnew;
          if (dr.on) drop_row(dr, r, dr.row(hk, dr.qpos(r, q0 + i)), Si, 0, kn, k0, static_cast<T>(dr.scale));
        }
        gemm_rm<T>(false, false, qn, Dv, kn, T(1), S.data(), c, v + krow * Dv, lk * Dv, T(1), O, lq * Dv);
      });
      for (int64_t i = 0; i < qn; ++i) {
        T* Oi = O + i * lq * Dv;
        T& L = lse[row0 + i * lq];
        if (l[i] > T(0)) {
          scale_row(Oi, Dv, T(1) / l[i]);
          L = m[i] + std::log(l[i]);
        } else {
          std::fill(Oi, Oi + Dv, T(0));
          L = ninf;
        }
      }
    }
  });
}

template <typename T>
void backward_impl(const T* q, const T* k, const T* v, const T* dout, const T* lse, const T* delta,
                   T* dq, T* dk, T* dv, const Tables& t, int64_t BH, int64_t nq, int64_t nk, int64_t D,
                   int64_t Dv, T scale, Rows qr, Rows kr, const Drop& dr) {
  const int64_t c = t.c, nqb = t.nqb, lq = qr.d, lk = kr.d;
  at::parallel_for(0, BH, 1, [&](int64_t begin, int64_t end) {
    SequentialBlas seq;
    std::vector<T> P(c * c), dS(c * c);
    for (int64_t r = begin; r < end; ++r) {
      for (int64_t qb = 0; qb < nqb; ++qb) {
        const int64_t q0 = qb * c, qn = std::min(c, nq - q0), row0 = r * nq + qr(q0);
        const T* Q = q + row0 * D;
        const T* dO = dout + row0 * Dv;
        for_each_tile(t, r, qb, nk, [&](int64_t k0, int64_t kn, const uint8_t* tile) {
          const int64_t krow = r * nk + kr(k0);
          const T* Kb = k + krow * D;
          gemm_rm<T>(false, true, qn, kn, D, scale, Q, lq * D, Kb, lk * D, T(0), P.data(), c);  // S
          gemm_rm<T>(false, true, qn, kn, Dv, T(1), dO, lq * Dv, v + krow * Dv, lk * Dv, T(0), dS.data(), c);  // dP
          for (int64_t i = 0; i < qn; ++i) {
            T* Pi = P.data() + i * c;
            T* dSi = dS.data() + i * c;
            const T L = lse[row0 + i * lq];
            if (std::isinf(L)) {  // no allowed key: no gradient
              std::fill(Pi, Pi + kn, T(0));
              std::fill(dSi, dSi + kn, T(0));
              continue;
            }
            if (tile) mask_row(Pi, tile + i * c, kn);
            if (dr.on)
              grad_row_drop(dr, r, dr.row(dr.head(r), dr.qpos(r, q0 + i)), Pi, dSi, kn, k0, L, delta[row0 + i * lq]);
            else
              grad_row(Pi, dSi, kn, L, delta[row0 + i * lq]);
          }
          grad_products<T>(P.data(), dS.data(), c, qn, kn, Q, dO, Kb, dq + row0 * D, dk + krow * D,
                           dv + krow * Dv, D, Dv, scale, lq, lk);
        });
      }
    }
  });
}

// ----------------------------------------------------------------------------- band components

struct Band {
  const uint8_t* ok;      // (dmax - dmin + 1,) allowed offsets j - i
  bool all_ok;            // every offset in [dmin, dmax] is allowed
  int64_t dmin, dmax;
  const uint8_t* kvalid;  // (BH, nk) 0/1, or nullptr: every key is valid
  const uint8_t* qvalid;  // (BH, nq) 0/1, or nullptr
  int64_t R;              // query rows per tile
  int64_t width() const { return R + dmax - dmin; }  // keys of one tile
};

// Key rows [j0, j1) of the query tile [i0, i0 + qn).
inline void band_window(const Band& b, int64_t i0, int64_t qn, int64_t nk, int64_t& j0, int64_t& j1) {
  j0 = std::max<int64_t>(0, i0 + b.dmin);
  j1 = std::min<int64_t>(nk, i0 + qn + b.dmax);
}

// Query rows per chunk of the band backwards (a multiple of the tile R): at least as long as the band is wide,
// so chunks two apart share no key row and even chunks run in parallel, then odd ones. Longer chunks, up to
// kBandChunkRows, while each phase keeps 4 tasks per thread: a key row's dK, dV (and K, V) are read from memory
// once per chunk that sees it, and the two chunks that see it run in different phases, far apart in time.
// Causal band of 128 (Strided's local band), 16k tokens, H=12 D=64, backward alone: chunks of 128 / 512 / 1024
// rows 110.6 / 102.5 / 101.7 ms; SlidingWindow(512) 576 / 1024 rows 329.9 / 325.5 ms (one host, alternating).
constexpr int64_t kBandChunkRows = 1024;

inline int64_t band_chunk(const Band& b, int64_t BH, int64_t nq, int64_t R) {
  const int64_t least = std::max<int64_t>(1, (b.dmax - b.dmin + 1 + R - 1) / R);
  const int64_t tasks = 4 * static_cast<int64_t>(at::get_num_threads());
  int64_t tiles = std::max(least, kBandChunkRows / R);
  while (tiles > least && BH * ((nq + tiles * R - 1) / (tiles * R) / 2) < tasks) tiles = std::max(least, tiles / 2);
  return tiles * R;
}

// Row i (query row qi) of a score tile whose column 0 is key row j0: masks disallowed entries inside
// the row's own window to -inf and returns that window's columns [lo, hi) (lo >= hi: none).
template <typename T>
inline void band_mask_row(const Band& b, T* Si, int64_t qi, int64_t j0, int64_t W, const uint8_t* kv,
                          int64_t& lo, int64_t& hi) {
  const T ninf = -std::numeric_limits<T>::infinity();
  lo = std::max<int64_t>(0, qi + b.dmin - j0);
  hi = std::min<int64_t>(W, qi + b.dmax + 1 - j0);
  if (!b.all_ok) {
    const uint8_t* o = b.ok + (j0 - qi - b.dmin);  // o[jj]: offset of column jj allowed
    for (int64_t jj = lo; jj < hi; ++jj) Si[jj] = o[jj] ? Si[jj] : ninf;
  }
  if (kv) {
    const uint8_t* kj = kv + j0;
    for (int64_t jj = lo; jj < hi; ++jj) Si[jj] = kj[jj] ? Si[jj] : ninf;
  }
}

template <typename T>
inline void zero_outside(T* row, int64_t lo, int64_t hi, int64_t W) {
  if (hi <= lo) {
    std::fill(row, row + W, T(0));
    return;
  }
  std::fill(row, row + lo, T(0));
  std::fill(row + hi, row + W, T(0));
}

template <typename T>
void band_forward_impl(const T* q, const T* k, const T* v, T* out, T* lse, const Band& b, int64_t BH,
                       int64_t nq, int64_t nk, int64_t D, int64_t Dv, T scale, const Drop& dr) {
  const int64_t R = b.R, ntiles = (nq + R - 1) / R, Wmax = b.width();
  const T ninf = -std::numeric_limits<T>::infinity();
  at::parallel_for(0, BH * ntiles, 1, [&](int64_t begin, int64_t end) {
    SequentialBlas seq;
    std::vector<T> S(R * Wmax), inv(R);
    for (int64_t task = begin; task < end; ++task) {
      const int64_t r = task / ntiles, i0 = (task % ntiles) * R, qn = std::min(R, nq - i0);
      T* O = out + (r * nq + i0) * Dv;
      T* L = lse + r * nq + i0;
      int64_t j0, j1;
      band_window(b, i0, qn, nk, j0, j1);
      const int64_t W = j1 - j0;
      if (W <= 0) {
        std::fill(O, O + qn * Dv, T(0));
        std::fill(L, L + qn, ninf);
        continue;
      }
      gemm_rm<T>(false, true, qn, W, D, scale, q + (r * nq + i0) * D, D, k + (r * nk + j0) * D, D, T(0),
                 S.data(), Wmax);
      const uint8_t* kv = b.kvalid ? b.kvalid + r * nk : nullptr;
      const uint8_t* qv = b.qvalid ? b.qvalid + r * nq : nullptr;
      for (int64_t i = 0; i < qn; ++i) {
        T* Si = S.data() + i * Wmax;
        int64_t lo = 0, hi = 0;
        if (!qv || qv[i0 + i]) {
          band_mask_row(b, Si, i0 + i, j0, W, kv, lo, hi);
        }
        const T mx = row_max(Si, lo, hi);
        if (mx == ninf) {  // no allowed key: output 0, lse -inf
          std::fill(Si, Si + W, T(0));
          L[i] = ninf;
          inv[i] = T(0);
          continue;
        }
        const T sum = exp_sum(Si, lo, hi, mx);
        inv[i] = T(1) / sum;  // normalised in O after the product: Dv entries per row, not W
        zero_outside(Si, lo, hi, W);
        if (dr.on) drop_row(dr, r, dr.row(dr.head(r), i0 + i), Si, lo, hi, j0, static_cast<T>(dr.scale));
        L[i] = mx + std::log(sum);
      }
      gemm_rm<T>(false, false, qn, Dv, W, T(1), S.data(), Wmax, v + (r * nk + j0) * Dv, Dv, T(0), O, Dv);
      for (int64_t i = 0; i < qn; ++i) scale_row(O + i * Dv, Dv, inv[i]);
    }
  });
}


#if defined(CPU_CAPABILITY_AVX512)
// ----------------------------------------------------------------------------- register-blocked band forward
//
// float, AVX-512, every offset in [dmin, dmax] allowed, D and Dv multiples of 16: the band kernels without
// BLAS. A tile is kRB = 64 query rows in parts of 16 (one zmm of rows); its scores are kept transposed,
// ST[j][r] (key j, row r), so every pass over them is a vector over 16 rows (the row max, exp and sum need
// no horizontal reduction) and each part computes only its own key range: 16 + width - 1 keys per 16 rows
// (1.03 keys per allowed pair at width 513; the BLAS tiles of FUSED_BAND_ROWS = 32 rows computed 1.06).
// Products: ST = K (scale Q)^T as 8 keys x 16 rows of accumulators over d (Q^T packed per tile), O = P V
// as 4 rows x 64 values over keys (P broadcast from ST, V's rows read in place); the backward adds dV and
// dK as 4 keys x 64 values over the tile's rows. SW(512), 16k tokens, H=12 D=64, 2 threads: forward
// 0.206 -> 0.167 s, backward alone 0.47 -> 0.39 s (every product at about the 4096^2 matmul rate: perf
// puts the 5 backward products at equal shares); the BLAS path stays for double, other CPUs and bands with
// disallowed offsets. Dilated is no longer one: with n % dilation == 0 it runs here as a class band
// (``class_band_forward_rb``), otherwise (and when decoding) on the table kernel.
constexpr int64_t kRB = 64, kParts = kRB / 16;

inline __m512 masked_or_ninf(__m512 x, __mmask16 keep) {
  return _mm512_mask_mov_ps(_mm512_set1_ps(-std::numeric_limits<float>::infinity()), keep, x);
}

// ``Drop`` on 16 rows at once (the lanes of a transposed score vector): the rows' keys, then for key j the
// bits of the rows that keep (key, row).

// keys of the 16 rows from component row i of flattened row r (rows from ``nq`` on: unused lanes)
inline __m512i drop_rows(const Drop& dr, uint32_t hk, int64_t i, int64_t r, int64_t nq) {
  alignas(64) uint32_t rk[16];
  for (int u = 0; u < 16; ++u) rk[u] = dr.row(hk, i + u < nq ? dr.qpos(r, i + u) : 0);
  return _mm512_load_si512(rk);
}

inline __mmask16 drop_keep(const Drop& dr, __m512i rk, int64_t j) {
  const __m512i x = _mm512_add_epi32(rk, _mm512_set1_epi32(static_cast<int>(kKeyMul * static_cast<uint32_t>(j + 1))));
  return _mm512_cmpge_epu32_mask(fmix32_v(x), _mm512_set1_epi32(static_cast<int>(dr.thresh)));
}

// Dropout of a forward part's probabilities (transposed, keys [ja, jb) = tensor keys j0 + ja .., rows from
// tensor row i): dropped ones -> 0 (the kept ones' 1 / (1 - p) goes into the rows' inv: ``drop_inv``).
inline void drop_part(const Drop& dr, uint32_t hk, float* S, int64_t ja, int64_t jb, int64_t j0, int64_t i,
                      int64_t r, int64_t nq) {
  const __m512i rk = drop_rows(dr, hk, i, r, nq);
  for (int64_t j = ja; j < jb; ++j) {
    const __mmask16 keep = drop_keep(dr, rk, dr.kpos(r, j0 + j));
    _mm512_storeu_ps(S + j * kRB, _mm512_maskz_mov_ps(keep, _mm512_loadu_ps(S + j * kRB)));
  }
}

inline void drop_inv(const Drop& dr, float* inv, int64_t r0, int64_t r1) {
  for (int64_t r = r0; r < r1; ++r) inv[r] *= static_cast<float>(dr.scale);
}

// One backward vector with dropout: p (0 where not allowed) and dP of 16 rows for key j -> P M at sj (dV's)
// and P (M dP - delta) at dj.
inline void drop_grad(const Drop& dr, __m512i rk, int64_t j, __m512 p, float* sj, float* dj, __m512 dl) {
  const __m512 pm = _mm512_maskz_mul_ps(drop_keep(dr, rk, j), p, _mm512_set1_ps(static_cast<float>(dr.scale)));
  _mm512_storeu_ps(sj, pm);
  _mm512_storeu_ps(dj, _mm512_fmsub_ps(pm, _mm512_loadu_ps(dj), _mm512_mul_ps(p, dl)));
}

// ST[j][16h .. 16h + 16) = sum_d K[j][d] QT[d][16h ..] for the NK keys j0 .. j0 + NK - 1 (window-relative),
// one accumulator per key. DC: D known at compile time (the key rows' addresses are then one register plus
// constants; with a runtime D, GCC kept 8 pointers and spilled them inside the backward), 0: runtime D.
template <int DC, int NK>
inline void scores_keys(const float* K, int64_t D, const float* QT, float* ST, int64_t j0) {
  if constexpr (DC > 0) D = DC;
  __m512 acc[NK];
#pragma GCC unroll 8
  for (int u = 0; u < NK; ++u) acc[u] = _mm512_setzero_ps();
  const float* k = K + j0 * D;
  for (int64_t d = 0; d < D; ++d) {
    const __m512 qv = _mm512_loadu_ps(QT + d * kRB);
#pragma GCC unroll 8
    for (int u = 0; u < NK; ++u) acc[u] = _mm512_fmadd_ps(_mm512_set1_ps(k[u * D + d]), qv, acc[u]);
  }
#pragma GCC unroll 8
  for (int u = 0; u < NK; ++u) _mm512_storeu_ps(ST + (j0 + u) * kRB, acc[u]);
}

// scores_keys for keys j in [ja, jb): 8 at a time, then the 1-7 left in one call (they ran one at a time, each
// one accumulator chained through D multiply-adds). A 16-row part of a causal band of 128 has 143 keys (7
// left), of Strided(128)'s classes 15 + 16 t (7 left), of SlidingWindow(512) 528 (none). Strided(128) at 16k,
// H=12 D=64, both in one process, alternating, median of 7: forward 0.0863 -> 0.0835 s (SlidingWindow,
// LSH, Fixed unchanged within the noise, 2%).
template <int DC>
__attribute__((noinline)) void scores_part_d(const float* K, int64_t D, const float* QT, float* ST, int64_t ja,
                                             int64_t jb) {
  int64_t j = ja;
  for (; j + 8 <= jb; j += 8) scores_keys<DC, 8>(K, D, QT, ST, j);
  switch (jb - j) {
    case 7: return scores_keys<DC, 7>(K, D, QT, ST, j);
    case 6: return scores_keys<DC, 6>(K, D, QT, ST, j);
    case 5: return scores_keys<DC, 5>(K, D, QT, ST, j);
    case 4: return scores_keys<DC, 4>(K, D, QT, ST, j);
    case 3: return scores_keys<DC, 3>(K, D, QT, ST, j);
    case 2: return scores_keys<DC, 2>(K, D, QT, ST, j);
    case 1: return scores_keys<DC, 1>(K, D, QT, ST, j);
    default: return;
  }
}

inline void scores_part(const float* K, int64_t D, const float* QT, float* ST, int64_t ja, int64_t jb) {
  switch (D) {
    case 64: return scores_part_d<64>(K, D, QT, ST, ja, jb);
    case 128: return scores_part_d<128>(K, D, QT, ST, ja, jb);
    case 32: return scores_part_d<32>(K, D, QT, ST, ja, jb);
    default: return scores_part_d<0>(K, D, QT, ST, ja, jb);
  }
}

// A[u][c0 .. c0 + 16 NC) (=, or += with ACC) s[u * ss] sum_{l in [la, lb)} B[u BU + l BL] X[l][c0 ..] for
// u < nu: the products of a transposed tile B (ST or DS, stride kRB) with row-major X (stride ldx) into A
// (stride lda), s[0] alone where ss = 0. O = P V and dQ = dS K take 4 rows of the tile (BU = 1, BL = kRB) over
// keys; dV = P^T dO and dK = dS^T Q take 4 keys (BU = kRB, BL = 1) over rows. The 4 x NC accumulators stay in
// registers only when every loop over them is unrolled; the strides of B are template arguments so the 4
// broadcasts' addresses are one register plus constants.
template <int NC, int64_t BU, int64_t BL, bool ACC>
inline void rb_block(const float* B, const float* X, int64_t ldx, int64_t la, int64_t lb, float* A, int64_t lda,
                     int64_t nu, const float* s, int64_t ss) {
  __m512 acc[4][NC];
#pragma GCC unroll 4
  for (int u = 0; u < 4; ++u)
#pragma GCC unroll 4
    for (int c = 0; c < NC; ++c) acc[u][c] = _mm512_setzero_ps();
  for (int64_t l = la; l < lb; ++l) {
    const float* xr = X + l * ldx;
    const float* b = B + l * BL;
    __m512 xc[NC];
#pragma GCC unroll 4
    for (int c = 0; c < NC; ++c) xc[c] = _mm512_loadu_ps(xr + 16 * c);
#pragma GCC unroll 4
    for (int u = 0; u < 4; ++u) {
      const __m512 bu = _mm512_set1_ps(b[u * BU]);
#pragma GCC unroll 4
      for (int c = 0; c < NC; ++c) acc[u][c] = _mm512_fmadd_ps(bu, xc[c], acc[u][c]);
    }
  }
#pragma GCC unroll 4
  for (int u = 0; u < 4; ++u) {
    if (u >= nu) break;
    const __m512 su = _mm512_set1_ps(s[u * ss]);
#pragma GCC unroll 4
    for (int c = 0; c < NC; ++c) {
      float* a = A + u * lda + 16 * c;
      _mm512_storeu_ps(a, ACC ? _mm512_fmadd_ps(acc[u][c], su, _mm512_loadu_ps(a)) : _mm512_mul_ps(acc[u][c], su));
    }
  }
}

// rb_block over all ld columns of X and A (both of row stride ld): 64 at a time, then 16
template <int64_t BU, int64_t BL, bool ACC>
inline void rb_rows(const float* B, const float* X, int64_t ld, int64_t la, int64_t lb, float* A, int64_t nu,
                    const float* s, int64_t ss) {
  int64_t c0 = 0;
  for (; c0 + 64 <= ld; c0 += 64) rb_block<4, BU, BL, ACC>(B, X + c0, ld, la, lb, A + c0, ld, nu, s, ss);
  for (; c0 < ld; c0 += 16) rb_block<1, BU, BL, ACC>(B, X + c0, ld, la, lb, A + c0, ld, nu, s, ss);
}

// O[4 rows] (=, or += with ACC) inv[row] * sum_j P[j][row] V[j] over keys [ja, jb) (P = ST + row offset)
template <bool ACC = false>
inline void pv_rows(const float* P, const float* V, int64_t Dv, int64_t ja, int64_t jb, float* O, int64_t nrows,
                    const float* inv) {
  rb_rows<1, kRB, ACC>(P, V, Dv, ja, jb, O, nrows, inv, 1);
}

// A[key u] += alpha * sum_{rows i in [ra, rb)} M[u][i] X[i] for keys u < nkeys (M = ST or DS + key offset;
// X and A of row stride ldx): dV and dK.
inline void key_rows(const float* M, const float* X, int64_t ldx, int64_t ra, int64_t rb, float* A, int64_t nkeys,
                     float alpha) {
  rb_rows<kRB, 1, true>(M, X, ldx, ra, rb, A, nkeys, &alpha, 0);
}

// Rows (bits, of the part starting at tile row r0) that see key row jk: ``rows`` (the part's valid rows)
// with dmin <= jk - (i0 + i) <= dmax, none where the key is padding.
inline __mmask16 band_keep(const Band& b, __mmask16 rows, int64_t r0, int64_t r1, int64_t i0, int64_t jk,
                           const uint8_t* kv) {
  const int64_t lo = std::max<int64_t>(r0, jk - i0 - b.dmax) - r0;
  const int64_t hi = std::min<int64_t>(r1 - 1, jk - i0 - b.dmin) - r0;
  if (hi < lo || (kv && !kv[jk])) return 0;
  return rows & static_cast<__mmask16>(((2u << hi) - 1u) & ~((1u << lo) - 1u));
}

inline bool band_rb_applies(const Band& b, int64_t D, int64_t Dv) {
  return b.all_ok && D % 16 == 0 && Dv % 16 == 0;
}

// Scratch of one thread of the register-blocked kernels (Wmax: the most keys of a tile).
struct RbScratch {
  std::vector<float> ST, DS, QT, OT, inv, scl;
  RbScratch(int64_t Wmax, int64_t D, int64_t Dv, float scale)
      // + 4 key rows: groups of 4 keys read (and discard) up to 3 rows past the last key
      : ST((Wmax + 4) * kRB), DS((Wmax + 4) * kRB), QT(D * kRB), OT(Dv * kRB), inv(kRB), scl(kRB, scale) {}
};

// XT[d * kRB + i] = s X[i * ldx + d] for d < D (a multiple of 16) and tile rows i < kRB (0 from row qn on):
// a tile's Q or dO transposed for ``scores_part``, in 16 x 16 blocks in registers (the scalar loop it replaced
// read Q column by column: perf put it at ~4% of the narrow causal band's backward, SW causal 128 at 16k).
inline void pack_transposed(const float* X, int64_t ldx, int64_t qn, int64_t D, float s, float* XT) {
  const __m512 sv = _mm512_set1_ps(s);
  for (int64_t i0 = 0; i0 < kRB; i0 += 16) {
    for (int64_t d0 = 0; d0 < D; d0 += 16) {
      __m512 r[16], t[16];
#pragma GCC unroll 16
      for (int u = 0; u < 16; ++u)
        r[u] = i0 + u < qn ? _mm512_mul_ps(sv, _mm512_loadu_ps(X + (i0 + u) * ldx + d0)) : _mm512_setzero_ps();
#pragma GCC unroll 8
      for (int u = 0; u < 16; u += 2) {  // 2 x 2 blocks of 32-bit elements
        t[u] = _mm512_unpacklo_ps(r[u], r[u + 1]);
        t[u + 1] = _mm512_unpackhi_ps(r[u], r[u + 1]);
      }
#pragma GCC unroll 4
      for (int u = 0; u < 16; u += 4) {  // 4 x 4 blocks inside each 128-bit lane
        r[u] = _mm512_shuffle_ps(t[u], t[u + 2], _MM_SHUFFLE(1, 0, 1, 0));
        r[u + 1] = _mm512_shuffle_ps(t[u], t[u + 2], _MM_SHUFFLE(3, 2, 3, 2));
        r[u + 2] = _mm512_shuffle_ps(t[u + 1], t[u + 3], _MM_SHUFFLE(1, 0, 1, 0));
        r[u + 3] = _mm512_shuffle_ps(t[u + 1], t[u + 3], _MM_SHUFFLE(3, 2, 3, 2));
      }
#pragma GCC unroll 2
      for (int u = 0; u < 16; u += 8) {  // then the 128-bit lanes, twice
#pragma GCC unroll 4
        for (int e = 0; e < 4; ++e) {
          t[u + e] = _mm512_shuffle_f32x4(r[u + e], r[u + e + 4], 0x88);
          t[u + e + 4] = _mm512_shuffle_f32x4(r[u + e], r[u + e + 4], 0xdd);
        }
      }
#pragma GCC unroll 8
      for (int e = 0; e < 8; ++e) {
        r[e] = _mm512_shuffle_f32x4(t[e], t[e + 8], 0x88);
        r[e + 8] = _mm512_shuffle_f32x4(t[e], t[e + 8], 0xdd);
      }
#pragma GCC unroll 16
      for (int u = 0; u < 16; ++u) _mm512_storeu_ps(XT + (d0 + u) * kRB + i0, r[u]);
    }
  }
}

// Softmax of one 16-row part over its transposed scores S[j * kRB] (keys [ja, jb), row max mx): P = exp(S - mx)
// in place, inv[i] = 1 / row sum and L[i] = log-sum-exp for tile rows [r0, r1) (0 and -inf for a row with no
// allowed key: its base is 0, so exp(-inf - 0) = 0 and its sum stays 0).
inline void part_softmax(float* S, int64_t ja, int64_t jb, __m512 mx, int64_t r0, int64_t r1, float* inv, float* L) {
  const float ninf = -std::numeric_limits<float>::infinity();
  const __mmask16 empty = _mm512_cmp_ps_mask(mx, _mm512_set1_ps(ninf), _CMP_EQ_OQ);
  const fVec base(_mm512_mask_mov_ps(mx, empty, _mm512_setzero_ps()));
  fVec sum(0.f);
  for (int64_t j = ja; j < jb; ++j) {
    const fVec p = (fVec::loadu(S + j * kRB) - base).exp_u20();
    p.store(S + j * kRB);
    sum = sum + p;
  }
  float sums[16], bases[16];
  sum.store(sums);
  base.store(bases);
  for (int64_t i = r0; i < r1; ++i) {
    const float sm = sums[i - r0];
    inv[i] = sm > 0.f ? 1.f / sm : 0.f;
    L[i] = sm > 0.f ? bases[i - r0] + std::log(sm) : ninf;
  }
}

// Forward of the tile of query rows [i0, i0 + kRB) of one sequence (q, k, v, out, lse at its row 0,
// contiguous rows; kv / qv its key / query validity or nullptr; dr its dropout, hk its row's ``Drop::head``).
void band_tile_forward_rb(const float* q, const float* k, const float* v, float* out, float* lse, const Band& b,
                          const uint8_t* kv, const uint8_t* qv, int64_t nq, int64_t nk, int64_t D, int64_t Dv,
                          float scale, int64_t i0, RbScratch& w, const Drop& dr, uint32_t hk) {
  const float ninf = -std::numeric_limits<float>::infinity();
  const int64_t qn = std::min(kRB, nq - i0);
  const float* Q = q + i0 * D;
  float* O = out + i0 * Dv;
  float* L = lse + i0;
  int64_t j0, j1;
  band_window(b, i0, qn, nk, j0, j1);
  pack_transposed(Q, D, qn, D, scale, w.QT.data());
  for (int64_t h = 0; h * 16 < qn; ++h) {
    const int64_t r0 = 16 * h, r1 = std::min<int64_t>(qn, r0 + 16);
    // this part's keys, window-relative
    const int64_t ja = std::max<int64_t>(j0, i0 + r0 + b.dmin) - j0;
    const int64_t jb = std::min<int64_t>(j1, i0 + r1 - 1 + b.dmax + 1) - j0;
    __mmask16 rows = static_cast<__mmask16>((1u << (r1 - r0)) - 1u);
    if (qv)
      for (int64_t i = r0; i < r1; ++i)
        if (!qv[i0 + i]) rows &= static_cast<__mmask16>(~(1u << (i - r0)));
    float* S = w.ST.data() + r0;
    if (jb > ja) scores_part(k + j0 * D, D, w.QT.data() + r0, S, ja, jb);
    __m512 mx = _mm512_set1_ps(ninf);
    for (int64_t j = ja; j < jb; ++j) {
      const __mmask16 keep = band_keep(b, rows, r0, r1, i0, j0 + j, kv);
      __m512 s = _mm512_loadu_ps(S + j * kRB);
      if (keep != 0xFFFF) {
        s = masked_or_ninf(s, keep);
        _mm512_storeu_ps(S + j * kRB, s);
      }
      mx = _mm512_max_ps(mx, s);
    }
    part_softmax(S, ja, jb, mx, r0, r1, w.inv.data(), L);
    if (dr.on) {
      drop_part(dr, hk, S, ja, jb, j0, i0 + r0, 0, nq);
      drop_inv(dr, w.inv.data(), r0, r1);
    }
    for (int64_t g = r0; g < r1; g += 4)
      pv_rows(w.ST.data() + g, v + j0 * Dv, Dv, ja, jb, O + g * Dv, std::min<int64_t>(4, r1 - g), w.inv.data() + g);
  }
}

void band_forward_rb(const float* q, const float* k, const float* v, float* out, float* lse, const Band& b,
                     int64_t BH, int64_t nq, int64_t nk, int64_t D, int64_t Dv, float scale, const Drop& dr) {
  const int64_t ntiles = (nq + kRB - 1) / kRB;
  at::parallel_for(0, BH * ntiles, 1, [&](int64_t begin, int64_t end) {
    RbScratch w(b.width() - b.R + kRB, D, Dv, scale);
    for (int64_t task = begin; task < end; ++task) {
      const int64_t r = task / ntiles;
      band_tile_forward_rb(q + r * nq * D, k + r * nk * D, v + r * nk * Dv, out + r * nq * Dv, lse + r * nq, b,
                           b.kvalid ? b.kvalid + r * nk : nullptr, b.qvalid ? b.qvalid + r * nq : nullptr, nq, nk,
                           D, Dv, scale, (task % ntiles) * kRB, w, dr, dr.head(r));
    }
  });
}

// The products of a backward tile after its parts' P (in ST) and dS (in DS) over their keys [ja[h], jb[h]):
// dV += P^T dO and dK += scale dS^T Q in groups of 4 keys over the rows of the parts that see them (window rows
// of dK, dV from key 0 of the tile's window), dQ += scale dS K per part (dQ at the tile's row 0). Zeros first
// where a part's keys end inside the union, so groups of 4 keys can run over several parts.
inline void tile_grads(float* ST, float* DS, const int64_t* ja, const int64_t* jb, int64_t parts, int64_t qn,
                       const float* Q, const float* dO, const float* Kw, int64_t D, int64_t Dv, float* dK, float* dV,
                       float* dQ, const float* scl, float scale) {
  constexpr int64_t R = kRB;
  int64_t ua = std::numeric_limits<int64_t>::max(), ub = 0;
  for (int64_t h = 0; h < parts; ++h)
    if (jb[h] > ja[h]) ua = std::min(ua, ja[h]), ub = std::max(ub, jb[h]);
  if (ub <= ua) return;
  for (int64_t h = 0; h < parts && parts > 1; ++h)
    for (int64_t j = ua; j < ub; ++j)
      if (j < ja[h] || j >= jb[h]) {
        std::fill_n(ST + j * R + 16 * h, 16, 0.f);
        std::fill_n(DS + j * R + 16 * h, 16, 0.f);
      }
  for (int64_t j = ua; j < ub; j += 4) {
    const int64_t nkeys = std::min<int64_t>(4, ub - j);
    int64_t ra = qn, rb = 0;  // rows of the parts that see a key of the group
    for (int64_t h = 0; h < parts; ++h)
      if (j < jb[h] && j + nkeys > ja[h]) ra = std::min(ra, 16 * h), rb = std::min(qn, 16 * h + 16);
    if (ra >= rb) continue;
    key_rows(ST + j * R, dO, Dv, ra, rb, dV + j * Dv, nkeys, 1.f);
    key_rows(DS + j * R, Q, D, ra, rb, dK + j * D, nkeys, scale);
  }
  for (int64_t h = 0; h < parts; ++h) {
    const int64_t r1 = std::min<int64_t>(qn, 16 * h + 16);
    for (int64_t g = 16 * h; g < r1; g += 4)
      pv_rows<true>(DS + g, Kw, D, ja[h], jb[h], dQ + g * D, std::min<int64_t>(4, r1 - g), scl);
  }
}

// The band backward on the same tiles (chunks and phases as ``band_backward_impl``): per part, ST = K (scale
// Q)^T and dPT = V dO^T, then P = exp(ST - lse) and dS = P (dPT - delta) in place; dV += P^T dO and dK +=
// scale dS^T Q in groups of 4 keys over the rows of the parts that see them; dQ += scale dS K per part.
// Backward of the tile of query rows [i0, i0 + kRB) of one sequence (every pointer at its row 0, contiguous
// rows): adds to dq (its rows) and dk, dv (its window's rows).
void band_tile_backward_rb(const float* q, const float* k, const float* v, const float* dout, const float* lse,
                           const float* delta, float* dq, float* dk, float* dv, const Band& b, const uint8_t* kv,
                           const uint8_t* qv, int64_t nq, int64_t nk, int64_t D, int64_t Dv, float scale, int64_t i0,
                           RbScratch& w, const Drop& dr, uint32_t hk) {
  constexpr int64_t R = kRB;
  const int64_t qn = std::min(R, nq - i0);
  const float* Q = q + i0 * D;
  const float* dO = dout + i0 * Dv;
  int64_t j0, j1;
  band_window(b, i0, qn, nk, j0, j1);
  if (j1 <= j0) return;
  const float* Kw = k + j0 * D;
  const float* Vw = v + j0 * Dv;
  float *ST = w.ST.data(), *DS = w.DS.data();
  pack_transposed(Q, D, qn, D, scale, w.QT.data());
  pack_transposed(dO, Dv, qn, Dv, 1.f, w.OT.data());
  const int64_t parts = (qn + 15) / 16;
  int64_t ja[kParts] = {}, jb[kParts] = {};
  for (int64_t h = 0; h < parts; ++h) {
    const int64_t r0 = 16 * h, r1 = std::min<int64_t>(qn, r0 + 16);
    ja[h] = std::max<int64_t>(j0, i0 + r0 + b.dmin) - j0;
    jb[h] = std::min<int64_t>(j1, i0 + r1 - 1 + b.dmax + 1) - j0;
    __mmask16 rows = 0;
    for (int64_t i = r0; i < r1; ++i)
      if ((!qv || qv[i0 + i]) && !std::isinf(lse[i0 + i])) rows |= static_cast<__mmask16>(1u << (i - r0));
    const __mmask16 inside = static_cast<__mmask16>((1u << (r1 - r0)) - 1u);
    const fVec lv(_mm512_maskz_loadu_ps(rows, lse + i0 + r0));
    const fVec dl(_mm512_maskz_loadu_ps(inside, delta + i0 + r0));
    if (jb[h] <= ja[h]) continue;
    scores_part(Kw, D, w.QT.data() + r0, ST + r0, ja[h], jb[h]);
    scores_part(Vw, Dv, w.OT.data() + r0, DS + r0, ja[h], jb[h]);
    const __m512i rk = dr.on ? drop_rows(dr, hk, i0 + r0, 0, nq) : _mm512_setzero_si512();
    for (int64_t j = ja[h]; j < jb[h]; ++j) {
      float* sj = ST + j * R + r0;
      float* dj = DS + j * R + r0;
      const __mmask16 keep = band_keep(b, rows, r0, r1, i0, j0 + j, kv);
      const __m512 p = _mm512_maskz_mov_ps(keep, (fVec::loadu(sj) - lv).exp_u20());
      if (dr.on) {
        drop_grad(dr, rk, dr.kpos(0, j0 + j), p, sj, dj, dl);
        continue;
      }
      _mm512_storeu_ps(sj, p);
      _mm512_storeu_ps(dj, _mm512_mul_ps(p, _mm512_sub_ps(_mm512_loadu_ps(dj), dl)));
    }
  }
  tile_grads(ST, DS, ja, jb, parts, qn, Q, dO, Kw, D, Dv, dk + j0 * D, dv + j0 * Dv, dq + i0 * D, w.scl.data(), scale);
}

// The band backward on the same tiles, in chunks and phases as ``band_backward_impl``: per part, ST = K
// (scale Q)^T and dPT = V dO^T, then P = exp(ST - lse) and dS = P (dPT - delta) in place; dV += P^T dO and
// dK += scale dS^T Q in groups of 4 keys over the rows of the parts that see them; dQ += scale dS K per part.
void band_backward_rb(const float* q, const float* k, const float* v, const float* dout, const float* lse,
                      const float* delta, float* dq, float* dk, float* dv, const Band& b, int64_t BH, int64_t nq,
                      int64_t nk, int64_t D, int64_t Dv, float scale, const Drop& dr) {
  const int64_t chunk = band_chunk(b, BH, nq, kRB);
  const int64_t nchunks = (nq + chunk - 1) / chunk, per_phase = (nchunks + 1) / 2;
  for (int64_t phase = 0; phase < 2; ++phase) {
    at::parallel_for(0, BH * per_phase, 1, [&](int64_t begin, int64_t end) {
      RbScratch w(kRB + b.dmax - b.dmin, D, Dv, scale);
      for (int64_t task = begin; task < end; ++task) {
        const int64_t r = task / per_phase, ch = 2 * (task % per_phase) + phase;
        if (ch >= nchunks) continue;
        for (int64_t i0 = ch * chunk; i0 < std::min(nq, (ch + 1) * chunk); i0 += kRB)
          band_tile_backward_rb(q + r * nq * D, k + r * nk * D, v + r * nk * Dv, dout + r * nq * Dv, lse + r * nq,
                                delta + r * nq, dq + r * nq * D, dk + r * nk * D, dv + r * nk * Dv, b,
                                b.kvalid ? b.kvalid + r * nk : nullptr, b.qvalid ? b.qvalid + r * nq : nullptr, nq,
                                nk, D, Dv, scale, i0, w, dr, dr.head(r));
      }
    });
  }
}

// ----------------------------------------------------------------------------- register-blocked table forward
//
// The table kernel's forward on the band's micro-kernels (float, AVX-512, c = kRB, D and Dv multiples of 16,
// rows read in order): a query block's key tiles are scored one after another into one transposed score
// buffer (ST[key][row], every kept key of the block), masked where a tile is partial, then one max, exp and sum
// per 16 rows over all of them (two passes over cache-resident scores: no online rescaling) and O = P V tile by
// tile, accumulated in place. No BLAS calls and no packing: MKL spent ~30% of its 64 x 64 tile products packing
// (perf, BlockLocal(128) at 16k). The backward: ``tables_backward_rb``. 16k tokens, H=12 D=64, 2
// threads, forward (one host, the same timing script before and after): BlockLocal(128) 0.075 ->
// 0.061 s, TopKBlocks(64, 4) 0.163 -> 0.114 s, Random(64, 3) 0.102 -> 0.085 s, Fixed(128, 8) 0.317 -> 0.277 s,
// BigBird(64) 0.278 -> 0.258 s.
// Bits of the rows [r0, r1) of a partial tile (c = kRB, row-major 0/1) that allow key column j.
inline __mmask16 tile_bits(const uint8_t* tile, int64_t r0, int64_t r1, int64_t j) {
  __mmask16 keep = 0;
  for (int64_t i = r0; i < r1; ++i) keep |= static_cast<__mmask16>(tile[i * kRB + j] ? 1u << (i - r0) : 0u);
  return keep;
}

// Most keys a query block may have here: its scores (and the backward's dP) stay in cache, 256 KB each. Wider
// tables (BigBird's global rows, which see every key) keep the BLAS tiles and their online softmax: on these
// kernels their n-key score buffers made BigBird(64) scale 2.45x from 16k to 32k tokens (forward).
constexpr int64_t kTablesRbMaxKeys = 1024;

inline bool tables_rb_applies(const Tables& t, int64_t D, int64_t Dv, int64_t lq, int64_t lk) {
  return t.c == kRB && t.K * kRB <= kTablesRbMaxKeys && lq == 1 && lk == 1 && D % 16 == 0 && Dv % 16 == 0;
}

void tables_forward_rb(const float* q, const float* k, const float* v, float* out, float* lse, const Tables& t,
                       int64_t BH, int64_t nq, int64_t nk, int64_t D, int64_t Dv, float scale, const Drop& dr) {
  const float ninf = -std::numeric_limits<float>::infinity();
  const int64_t nqb = t.nqb;
  at::parallel_for(0, BH * nqb, 1, [&](int64_t begin, int64_t end) {
    RbScratch w(t.K * kRB, D, Dv, scale);
    std::vector<int64_t> k0s(t.K), kns(t.K);
    std::vector<const uint8_t*> masks(t.K);
    for (int64_t task = begin; task < end; ++task) {
      const int64_t r = task / nqb, qb = task % nqb;
      const int64_t i0 = qb * kRB, qn = std::min(kRB, nq - i0);
      const float* Q = q + (r * nq + i0) * D;
      float* O = out + (r * nq + i0) * Dv;
      float* L = lse + r * nq + i0;
      int64_t T = 0, W = 0;  // tiles, keys
      for_each_tile(t, r, qb, nk, [&](int64_t k0, int64_t kn, const uint8_t* tile) {
        k0s[T] = k0, kns[T] = kn, masks[T++] = tile;
        W += kn;
      });
      if (W == 0) {
        std::fill(O, O + qn * Dv, 0.f);
        std::fill(L, L + qn, ninf);
        continue;
      }
      pack_transposed(Q, D, qn, D, scale, w.QT.data());
      for (int64_t h = 0; h * 16 < qn; ++h) {
        const int64_t r0 = 16 * h, r1 = std::min<int64_t>(qn, r0 + 16);
        float* S = w.ST.data() + r0;
        __m512 mx = _mm512_set1_ps(ninf);
        for (int64_t s = 0, off = 0; s < T; off += kns[s++]) {
          scores_part(k + (r * nk + k0s[s]) * D, D, w.QT.data() + r0, S + off * kRB, 0, kns[s]);
          const uint8_t* tile = masks[s];
          for (int64_t j = 0; j < kns[s]; ++j) {
            __m512 x = _mm512_loadu_ps(S + (off + j) * kRB);
            if (tile) {
              x = masked_or_ninf(x, tile_bits(tile, r0, r1, j));
              _mm512_storeu_ps(S + (off + j) * kRB, x);
            }
            mx = _mm512_max_ps(mx, x);
          }
        }
        part_softmax(S, 0, W, mx, r0, r1, w.inv.data(), L);
        if (dr.on) {
          for (int64_t s = 0, off = 0; s < T; off += kns[s++])
            drop_part(dr, dr.head(r), S + off * kRB, 0, kns[s], k0s[s], i0 + r0, r, nq);
          drop_inv(dr, w.inv.data(), r0, r1);
        }
        for (int64_t g = r0; g < r1; g += 4) {
          const int64_t nrows = std::min<int64_t>(4, r1 - g);
          for (int64_t s = 0, off = 0; s < T; off += kns[s++]) {
            const float* P = w.ST.data() + off * kRB + g;
            const float* V = v + (r * nk + k0s[s]) * Dv;
            if (s == 0)
              pv_rows<false>(P, V, Dv, 0, kns[s], O + g * Dv, nrows, w.inv.data() + g);
            else
              pv_rows<true>(P, V, Dv, 0, kns[s], O + g * Dv, nrows, w.inv.data() + g);
          }
        }
      }
    }
  });
}

// The table kernel's backward on the same micro-kernels (``tables_rb_applies``): one task per flattened row
// (it owns that row's dK, dV), its query blocks in turn; per block, ST = K (scale Q)^T and dPT = V dO^T for
// every kept key, P = exp(ST - lse) and dS = P (dPT - delta) in place, then per tile dV += P^T dO and dK +=
// scale dS^T Q in groups of 4 keys, and dQ += scale dS K over all tiles. 16k tokens, forward+backward (one host,
// forward already register-blocked in both): BlockLocal(128) 0.230 -> 0.209 s, TopKBlocks(64, 4) 0.413 ->
// 0.358 s, Random(64, 3) 0.332 -> 0.284 s, Fixed(128, 8) 0.836 -> 0.743 s, BigBird(64) 0.902 -> 0.748 s.
void tables_backward_rb(const float* q, const float* k, const float* v, const float* dout, const float* lse,
                        const float* delta, float* dq, float* dk, float* dv, const Tables& t, int64_t BH,
                        int64_t nq, int64_t nk, int64_t D, int64_t Dv, float scale, const Drop& dr) {
  constexpr int64_t R = kRB;
  at::parallel_for(0, BH, 1, [&](int64_t begin, int64_t end) {
    RbScratch w(t.K * R, D, Dv, scale);
    std::vector<int64_t> k0s(t.K), kns(t.K);
    std::vector<const uint8_t*> masks(t.K);
    for (int64_t r = begin; r < end; ++r) {
      for (int64_t qb = 0; qb < t.nqb; ++qb) {
        const int64_t i0 = qb * R, qn = std::min(R, nq - i0);
        int64_t T = 0;
        for_each_tile(t, r, qb, nk, [&](int64_t k0, int64_t kn, const uint8_t* tile) {
          k0s[T] = k0, kns[T] = kn, masks[T++] = tile;
        });
        if (T == 0) continue;
        const float* Q = q + (r * nq + i0) * D;
        const float* dO = dout + (r * nq + i0) * Dv;
        const float* Lr = lse + r * nq + i0;
        float *ST = w.ST.data(), *DS = w.DS.data();
        pack_transposed(Q, D, qn, D, scale, w.QT.data());
        pack_transposed(dO, Dv, qn, Dv, 1.f, w.OT.data());
        for (int64_t h = 0; h * 16 < qn; ++h) {
          const int64_t r0 = 16 * h, r1 = std::min<int64_t>(qn, r0 + 16);
          __mmask16 rows = 0;  // rows with an allowed key (the others get no gradient)
          for (int64_t i = r0; i < r1; ++i)
            if (!std::isinf(Lr[i])) rows |= static_cast<__mmask16>(1u << (i - r0));
          const __mmask16 inside = static_cast<__mmask16>((1u << (r1 - r0)) - 1u);
          const fVec lv(_mm512_maskz_loadu_ps(rows, Lr + r0));
          const fVec dl(_mm512_maskz_loadu_ps(inside, delta + r * nq + i0 + r0));
          for (int64_t s = 0, off = 0; s < T; off += kns[s++]) {
            float* S = ST + off * R + r0;
            float* dP = DS + off * R + r0;
            scores_part(k + (r * nk + k0s[s]) * D, D, w.QT.data() + r0, S, 0, kns[s]);
            scores_part(v + (r * nk + k0s[s]) * Dv, Dv, w.OT.data() + r0, dP, 0, kns[s]);
            const __m512i rk = dr.on ? drop_rows(dr, dr.head(r), i0 + r0, r, nq) : _mm512_setzero_si512();
            for (int64_t j = 0; j < kns[s]; ++j) {
              const __mmask16 keep = masks[s] ? rows & tile_bits(masks[s], r0, r1, j) : rows;
              const __m512 p = _mm512_maskz_mov_ps(keep, (fVec::loadu(S + j * R) - lv).exp_u20());
              if (dr.on) {
                drop_grad(dr, rk, dr.kpos(r, k0s[s] + j), p, S + j * R, dP + j * R, dl);
                continue;
              }
              _mm512_storeu_ps(S + j * R, p);
              _mm512_storeu_ps(dP + j * R, _mm512_mul_ps(p, _mm512_sub_ps(_mm512_loadu_ps(dP + j * R), dl)));
            }
          }
        }
        for (int64_t s = 0, off = 0; s < T; off += kns[s++]) {
          for (int64_t j = 0; j < kns[s]; j += 4) {
            const int64_t nkeys = std::min<int64_t>(4, kns[s] - j), krow = r * nk + k0s[s] + j;
            key_rows(ST + (off + j) * R, dO, Dv, 0, qn, dv + krow * Dv, nkeys, 1.f);
            key_rows(DS + (off + j) * R, Q, D, 0, qn, dk + krow * D, nkeys, scale);
          }
        }
        for (int64_t g = 0; g < qn; g += 4)
          for (int64_t s = 0, off = 0; s < T; off += kns[s++])
            pv_rows<true>(DS + off * R + g, k + (r * nk + k0s[s]) * D, D, 0, kns[s], dq + (r * nq + i0 + g) * D,
                          std::min<int64_t>(4, qn - g), w.scl.data());
      }
    }
  });
}

// ----------------------------------------------------------------------------- bands within residue classes
//
// A component in residue-class order (Strided's causal columns, Dilated): n = d * m rows, class c holds the
// tensor rows c, c + d, c + 2d, ... (component rows c * m .. c * m + m), and inside a class the component is
// a band of offsets [dmin, dmax] in class positions (none across classes). One task per (row, classes): its
// rows are gathered into contiguous scratch (they are d rows apart in the tensor; a task takes ``class_group``
// classes at once), run as one sequence on the register-blocked tiles, and written (or, for gradients, added)
// back; validity is in component order.

// Classes per task: G consecutive classes (d % G == 0, at most kClassGroupRows rows in all) whose rows
// t * d + c0 .. c0 + G - 1 are next to each other in the tensor, so a task gathers and adds back runs of G rows,
// not single rows d apart (with d = 128 and D = 64 each row of a class is on a page of its own). Strided(128) at
// 16k tokens (m = 128, so G = 4), one host, profiler: class band forward 37 -> 33 ms, backward 72 -> 66 ms.
constexpr int64_t kClassGroupRows = 512;
inline int64_t class_group(int64_t d, int64_t m) {
  int64_t G = 1;
  while (d % (2 * G) == 0 && 2 * G * m <= kClassGroupRows) G *= 2;
  return G;
}

// Run t of a task's classes: rows t * d + c0 .. c0 + G - 1 of x (row length len), next to each other. The loops
// over runs prefetch the run kClassAhead further: each run is on a page of its own (d rows apart), where the
// hardware prefetchers do not follow. Strided(128) at 16k (profiler, both in one process, alternating, median
// of 6 runs of 4 steps): class band forward 36.5 -> 33.6 ms, backward 77 -> 73 ms; still about twice its
// products' time, the rest these strided reads and writes (perf before the prefetch: memmove ~25% of it).
constexpr int64_t kClassAhead = 8;
inline void prefetch_run(const float* x, int64_t len, int64_t d, int64_t c0, int64_t G, int64_t t, int64_t m,
                         bool write = false) {
  if (t + kClassAhead >= m) return;
  const char* run = reinterpret_cast<const char*>(x + ((t + kClassAhead) * d + c0) * len);
  for (int64_t b = 0; b < G * len * static_cast<int64_t>(sizeof(float)); b += 64) {
    if (write) __builtin_prefetch(run + b, 1, 3);
    else __builtin_prefetch(run + b, 0, 3);
  }
}

// rows t * d + c0 + g of x (g < G, row length len, starting at row 0 of one (batch, head)) <-> rows g * m + t of s
inline void gather_classes(const float* x, int64_t len, int64_t d, int64_t c0, int64_t G, int64_t m, float* s) {
  for (int64_t t = 0; t < m; ++t) {
    prefetch_run(x, len, d, c0, G, t, m);
    for (int64_t g = 0; g < G; ++g)
      std::memcpy(s + (g * m + t) * len, x + (t * d + c0 + g) * len, len * sizeof(float));
  }
}

inline void add_classes(float* x, int64_t len, int64_t d, int64_t c0, int64_t G, int64_t m, const float* s) {
  for (int64_t t = 0; t < m; ++t) {
    prefetch_run(x, len, d, c0, G, t, m, true);
    for (int64_t g = 0; g < G; ++g) {
      float* row = x + (t * d + c0 + g) * len;
      const float* src = s + (g * m + t) * len;
      for (int64_t e = 0; e < len; ++e) row[e] += src[e];
    }
  }
}

// dst (Dv values, log-sum-exp dst_lse) <- the exact softmax merge of dst and src over disjoint key sets
inline void merge_row(float* dst, float& dst_lse, const float* src, float src_lse, int64_t Dv) {
  const float ninf = -std::numeric_limits<float>::infinity();
  if (src_lse == ninf) return;
  if (dst_lse == ninf) {
    std::memcpy(dst, src, Dv * sizeof(float));
    dst_lse = src_lse;
    return;
  }
  const float mx = std::max(dst_lse, src_lse);
  const float a = std::exp(dst_lse - mx), c = std::exp(src_lse - mx), inv = 1.f / (a + c);
  for (int64_t e = 0; e < Dv; ++e) dst[e] = (dst[e] * a + src[e] * c) * inv;
  dst_lse = mx + std::log(a + c);
}

// merge: out / lse hold another component's attention of the same rows, merged with this one in place
// (no separate output, no merge pass); else they are written.
void class_band_forward_rb(const float* q, const float* k, const float* v, float* out, float* lse, const Band& b,
                           int64_t BH, int64_t n, int64_t D, int64_t Dv, float scale, int64_t d, bool merge,
                           const Drop& dr) {
  const int64_t m = n / d, G = class_group(d, m), ng = d / G;
  at::parallel_for(0, BH * ng, 1, [&](int64_t begin, int64_t end) {
    RbScratch w(kRB + b.dmax - b.dmin, D, Dv, scale);
    std::vector<float> Q(G * m * D), K(G * m * D), V(G * m * Dv), O(G * m * Dv), L(G * m);
    for (int64_t task = begin; task < end; ++task) {
      const int64_t r = task / ng, c0 = (task % ng) * G;
      gather_classes(q + r * n * D, D, d, c0, G, m, Q.data());
      gather_classes(k + r * n * D, D, d, c0, G, m, K.data());
      gather_classes(v + r * n * Dv, Dv, d, c0, G, m, V.data());
      for (int64_t g = 0; g < G; ++g) {
        const int64_t at = (c0 + g) * m, o = g * m;  // the class's first row in component order, in scratch
        const uint8_t* kv = b.kvalid ? b.kvalid + r * n + at : nullptr;
        const uint8_t* qv = b.qvalid ? b.qvalid + r * n + at : nullptr;
        Drop dc = dr;  // the class's rows in the tensor: t * d + c
        dc.amul = d, dc.aadd = c0 + g;
        for (int64_t i0 = 0; i0 < m; i0 += kRB)
          band_tile_forward_rb(Q.data() + o * D, K.data() + o * D, V.data() + o * Dv, O.data() + o * Dv, L.data() + o,
                               b, kv, qv, m, m, D, Dv, scale, i0, w, dc, dr.head(r));
      }
      for (int64_t t = 0; t < m; ++t) {
        prefetch_run(out + r * n * Dv, Dv, d, c0, G, t, m, true);
        if (merge) prefetch_run(lse + r * n, 1, d, c0, G, t, m, true);
        for (int64_t g = 0; g < G; ++g) {
          const int64_t row = r * n + t * d + c0 + g, at = g * m + t;
          if (merge) {
            merge_row(out + row * Dv, lse[row], O.data() + at * Dv, L[at], Dv);
          } else {
            std::memcpy(out + row * Dv, O.data() + at * Dv, Dv * sizeof(float));
            lse[row] = L[at];
          }
        }
      }
    }
  });
}

void class_band_backward_rb(const float* q, const float* k, const float* v, const float* dout, const float* lse,
                            const float* delta, float* dq, float* dk, float* dv, const Band& b, int64_t BH, int64_t n,
                            int64_t D, int64_t Dv, float scale, int64_t d, const Drop& dr) {
  const int64_t m = n / d, G = class_group(d, m), ng = d / G, M = G * m;
  at::parallel_for(0, BH * ng, 1, [&](int64_t begin, int64_t end) {
    RbScratch w(kRB + b.dmax - b.dmin, D, Dv, scale);
    std::vector<float> Q(M * D), K(M * D), V(M * Dv), dO(M * Dv), L(M), De(M), dQ(M * D), dK(M * D), dV(M * Dv);
    for (int64_t task = begin; task < end; ++task) {
      const int64_t r = task / ng, c0 = (task % ng) * G;
      gather_classes(q + r * n * D, D, d, c0, G, m, Q.data());
      gather_classes(k + r * n * D, D, d, c0, G, m, K.data());
      gather_classes(v + r * n * Dv, Dv, d, c0, G, m, V.data());
      gather_classes(dout + r * n * Dv, Dv, d, c0, G, m, dO.data());
      gather_classes(lse + r * n, 1, d, c0, G, m, L.data());
      gather_classes(delta + r * n, 1, d, c0, G, m, De.data());
      std::fill(dQ.begin(), dQ.end(), 0.f);
      std::fill(dK.begin(), dK.end(), 0.f);
      std::fill(dV.begin(), dV.end(), 0.f);
      for (int64_t g = 0; g < G; ++g) {
        const int64_t at = (c0 + g) * m, o = g * m;
        const uint8_t* kv = b.kvalid ? b.kvalid + r * n + at : nullptr;
        const uint8_t* qv = b.qvalid ? b.qvalid + r * n + at : nullptr;
        Drop dc = dr;
        dc.amul = d, dc.aadd = c0 + g;
        for (int64_t i0 = 0; i0 < m; i0 += kRB)
          band_tile_backward_rb(Q.data() + o * D, K.data() + o * D, V.data() + o * Dv, dO.data() + o * Dv,
                                L.data() + o, De.data() + o, dQ.data() + o * D, dK.data() + o * D,
                                dV.data() + o * Dv, b, kv, qv, m, m, D, Dv, scale, i0, w, dc, dr.head(r));
      }
      add_classes(dq + r * n * D, D, d, c0, G, m, dQ.data());
      add_classes(dk + r * n * D, D, d, c0, G, m, dK.data());
      add_classes(dv + r * n * Dv, Dv, d, c0, G, m, dV.data());
    }
  });
}
#endif

template <typename T>
void band_backward_impl(const T* q, const T* k, const T* v, const T* dout, const T* lse, const T* delta,
                        T* dq, T* dk, T* dv, const Band& b, int64_t BH, int64_t nq, int64_t nk, int64_t D,
                        int64_t Dv, T scale, const Drop& dr) {
  const int64_t R = b.R, Wmax = b.width();
  const int64_t chunk = band_chunk(b, BH, nq, R);
  const int64_t nchunks = (nq + chunk - 1) / chunk, per_phase = (nchunks + 1) / 2;
  for (int64_t phase = 0; phase < 2; ++phase) {
    at::parallel_for(0, BH * per_phase, 1, [&](int64_t begin, int64_t end) {
      SequentialBlas seq;
      std::vector<T> P(R * Wmax), dS(R * Wmax);
      for (int64_t task = begin; task < end; ++task) {
        const int64_t r = task / per_phase, ch = 2 * (task % per_phase) + phase;
        if (ch >= nchunks) continue;
        const uint8_t* kv = b.kvalid ? b.kvalid + r * nk : nullptr;
        const uint8_t* qv = b.qvalid ? b.qvalid + r * nq : nullptr;
        for (int64_t i0 = ch * chunk; i0 < std::min(nq, (ch + 1) * chunk); i0 += R) {
          const int64_t qn = std::min(R, nq - i0);
          const T* Q = q + (r * nq + i0) * D;
          const T* dO = dout + (r * nq + i0) * Dv;
          const T* L = lse + r * nq + i0;
          const T* De = delta + r * nq + i0;
          T* dQ = dq + (r * nq + i0) * D;
          int64_t j0, j1;
          band_window(b, i0, qn, nk, j0, j1);
          const int64_t W = j1 - j0;
          if (W <= 0) continue;
          const T* Kb = k + (r * nk + j0) * D;
          gemm_rm<T>(false, true, qn, W, D, scale, Q, D, Kb, D, T(0), P.data(), Wmax);                    // S
          gemm_rm<T>(false, true, qn, W, Dv, T(1), dO, Dv, v + (r * nk + j0) * Dv, Dv, T(0), dS.data(), Wmax);  // dP
          for (int64_t i = 0; i < qn; ++i) {
            T* Pi = P.data() + i * Wmax;
            T* dSi = dS.data() + i * Wmax;
            int64_t lo = 0, hi = 0;
            if (!std::isinf(L[i]) && (!qv || qv[i0 + i])) {
              band_mask_row(b, Pi, i0 + i, j0, W, kv, lo, hi);
              if (hi > lo && dr.on)
                grad_row_drop(dr, r, dr.row(dr.head(r), i0 + i), Pi + lo, dSi + lo, hi - lo, j0 + lo, L[i], De[i]);
              else if (hi > lo)
                grad_row(Pi + lo, dSi + lo, hi - lo, L[i], De[i]);
            }
            zero_outside(Pi, lo, hi, W);
            zero_outside(dSi, lo, hi, W);
          }
          grad_products<T>(P.data(), dS.data(), Wmax, qn, W, Q, dO, Kb, dQ, dk + (r * nk + j0) * D,
                           dv + (r * nk + j0) * Dv, D, Dv, scale);
        }
      }
    });
  }
}

// The call's dropout with the component's row maps (``Drop``): (BH, n) or (1, n) int64 tensor rows, or none.
Drop drop_spec(Drop dr, const std::optional<at::Tensor>& qmap, const std::optional<at::Tensor>& kmap, int64_t BH,
               int64_t nq, int64_t nk) {
  auto map = [&](const std::optional<at::Tensor>& m, int64_t n, const int64_t*& ptr, int64_t& stride) {
    if (!m.has_value() || !m->defined() || m->numel() == 0) return;
    TORCH_CHECK(m->dtype() == at::kLong && m->is_contiguous() && m->dim() == 2 && m->size(1) == n &&
                (m->size(0) == BH || m->size(0) == 1), "row map (BH or 1, ", n, ") int64");
    ptr = m->data_ptr<int64_t>();
    stride = m->size(0) == 1 ? 0 : n;
  };
  map(qmap, nq, dr.qmap, dr.qs);
  map(kmap, nk, dr.kmap, dr.ks);
  return dr;
}

Tables tables(const at::Tensor& kv, const at::Tensor& tidx, const at::Tensor& tiles, const at::Tensor& group,
              int64_t c) {
  TORCH_CHECK(kv.dtype() == at::kInt && tidx.dtype() == at::kInt && group.dtype() == at::kInt, "int32 tables");
  TORCH_CHECK(tiles.dtype() == at::kByte, "uint8 tiles");
  TORCH_CHECK(kv.is_contiguous() && tidx.is_contiguous() && tiles.is_contiguous() && group.is_contiguous());
  return Tables{kv.data_ptr<int32_t>(), tidx.data_ptr<int32_t>(), tiles.data_ptr<uint8_t>(),
                group.data_ptr<int32_t>(), kv.size(1), kv.size(2), c};
}

// The component's rows in the tensors' rows: class stride d (1: the same rows); see ``Rows``.
Rows rows(int64_t d, int64_t n, int64_t c) {
  TORCH_CHECK(d >= 1 && n % d == 0, "row class stride ", d, " does not divide ", n, " rows");
  TORCH_CHECK(d == 1 || (n / d) % c == 0, "rows per class ", n / d, " not a multiple of the block ", c);
  return Rows{d, n / d};
}

std::vector<at::Tensor> forward(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                const at::Tensor& kv, const at::Tensor& tidx, const at::Tensor& tiles,
                                const at::Tensor& group, int64_t c, double scale, int64_t q_stride,
                                int64_t k_stride, double dropout_p, int64_t seed, int64_t head_mul, int64_t head_add,
                                const std::optional<at::Tensor>& qmap, const std::optional<at::Tensor>& kmap) {
  TORCH_CHECK(q.is_contiguous() && k.is_contiguous() && v.is_contiguous(), "contiguous q, k, v");
  TORCH_CHECK(q.dim() == 3 && k.dim() == 3 && v.dim() == 3, "(BH, n, D) q, k, v");
  const int64_t BH = q.size(0), nq = q.size(1), D = q.size(2), nk = k.size(1), Dv = v.size(2);
  const Drop dr = drop_spec(Drop(dropout_p, seed, head_mul, head_add), qmap, kmap, BH, nq, nk);
  Tables t = tables(kv, tidx, tiles, group, c);
  TORCH_CHECK(t.nqb * c >= nq, "query blocks do not cover the queries");
  auto out = pooled_empty({BH, nq, Dv}, q.options());
  auto lse = at::empty({BH, nq}, q.options());
#if defined(CPU_CAPABILITY_AVX512)
  if (q.scalar_type() == at::kFloat && tables_rb_applies(t, D, Dv, q_stride, k_stride)) {
    tables_forward_rb(q.data_ptr<float>(), k.data_ptr<float>(), v.data_ptr<float>(), out.data_ptr<float>(),
                      lse.data_ptr<float>(), t, BH, nq, nk, D, Dv, static_cast<float>(scale), dr);
    return {out, lse};
  }
#endif
  AT_DISPATCH_FLOATING_TYPES(q.scalar_type(), "hf_sparse_forward", [&] {
    forward_impl<scalar_t>(q.data_ptr<scalar_t>(), k.data_ptr<scalar_t>(), v.data_ptr<scalar_t>(),
                           out.data_ptr<scalar_t>(), lse.data_ptr<scalar_t>(), t, BH, nq, nk, D, Dv,
                           static_cast<scalar_t>(scale), rows(q_stride, nq, c), rows(k_stride, nk, c), dr);
  });
  return {out, lse};
}

// Gradients accumulate into dq, dk, dv (the caller zeroes them once for every component of a plan).
void check_grads(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& dq,
                 const at::Tensor& dk, const at::Tensor& dv) {
  TORCH_CHECK(dq.is_contiguous() && dk.is_contiguous() && dv.is_contiguous(), "contiguous dq, dk, dv");
  TORCH_CHECK(dq.sizes() == q.sizes() && dk.sizes() == k.sizes() && dv.sizes() == v.sizes(), "dq, dk, dv shapes");
  TORCH_CHECK(dq.scalar_type() == q.scalar_type() && dk.scalar_type() == q.scalar_type() &&
              dv.scalar_type() == q.scalar_type(), "dq, dk, dv dtype");
}

void backward(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& dout,
              const at::Tensor& lse, const at::Tensor& delta, const at::Tensor& kv, const at::Tensor& tidx,
              const at::Tensor& tiles, const at::Tensor& group, int64_t c, double scale, int64_t q_stride,
              int64_t k_stride, at::Tensor dq, at::Tensor dk, at::Tensor dv, double dropout_p, int64_t seed,
              int64_t head_mul, int64_t head_add, const std::optional<at::Tensor>& qmap,
              const std::optional<at::Tensor>& kmap) {
  TORCH_CHECK(q.is_contiguous() && k.is_contiguous() && v.is_contiguous() && dout.is_contiguous() &&
              lse.is_contiguous() && delta.is_contiguous(), "contiguous inputs");
  check_grads(q, k, v, dq, dk, dv);
  const int64_t BH = q.size(0), nq = q.size(1), D = q.size(2), nk = k.size(1), Dv = v.size(2);
  const Drop dr = drop_spec(Drop(dropout_p, seed, head_mul, head_add), qmap, kmap, BH, nq, nk);
  Tables t = tables(kv, tidx, tiles, group, c);
#if defined(CPU_CAPABILITY_AVX512)
  if (q.scalar_type() == at::kFloat && tables_rb_applies(t, D, Dv, q_stride, k_stride)) {
    tables_backward_rb(q.data_ptr<float>(), k.data_ptr<float>(), v.data_ptr<float>(), dout.data_ptr<float>(),
                       lse.data_ptr<float>(), delta.data_ptr<float>(), dq.data_ptr<float>(), dk.data_ptr<float>(),
                       dv.data_ptr<float>(), t, BH, nq, nk, D, Dv, static_cast<float>(scale), dr);
    return;
  }
#endif
  AT_DISPATCH_FLOATING_TYPES(q.scalar_type(), "hf_sparse_backward", [&] {
    backward_impl<scalar_t>(q.data_ptr<scalar_t>(), k.data_ptr<scalar_t>(), v.data_ptr<scalar_t>(),
                            dout.data_ptr<scalar_t>(), lse.data_ptr<scalar_t>(), delta.data_ptr<scalar_t>(),
                            dq.data_ptr<scalar_t>(), dk.data_ptr<scalar_t>(), dv.data_ptr<scalar_t>(), t, BH,
                            nq, nk, D, Dv, static_cast<scalar_t>(scale), rows(q_stride, nq, c),
                            rows(k_stride, nk, c), dr);
  });
}

Band band_spec(const at::Tensor& ok, int64_t dmin, const at::Tensor& kvalid, const at::Tensor& qvalid,
               int64_t BH, int64_t nq, int64_t nk, int64_t R) {
  TORCH_CHECK(ok.dtype() == at::kByte && ok.is_contiguous() && ok.numel() >= 1, "uint8 offsets");
  TORCH_CHECK(kvalid.dtype() == at::kByte && qvalid.dtype() == at::kByte, "uint8 validity");
  TORCH_CHECK(kvalid.numel() == 0 || (kvalid.is_contiguous() && kvalid.numel() == BH * nk), "key validity (BH, nk)");
  TORCH_CHECK(qvalid.numel() == 0 || (qvalid.is_contiguous() && qvalid.numel() == BH * nq), "query validity (BH, nq)");
  TORCH_CHECK(R > 0, "tile rows");
  const uint8_t* o = ok.data_ptr<uint8_t>();
  bool all = true;
  for (int64_t i = 0; i < ok.numel(); ++i) all = all && o[i];
  return Band{o, all, dmin, dmin + ok.numel() - 1,
              kvalid.numel() ? kvalid.data_ptr<uint8_t>() : nullptr,
              qvalid.numel() ? qvalid.data_ptr<uint8_t>() : nullptr, R};
}

std::vector<at::Tensor> band_forward(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                     const at::Tensor& ok, int64_t dmin, const at::Tensor& kvalid,
                                     const at::Tensor& qvalid, int64_t R, double scale, double dropout_p,
                                     int64_t seed, int64_t head_mul, int64_t head_add) {
  const Drop dr(dropout_p, seed, head_mul, head_add);
  TORCH_CHECK(q.is_contiguous() && k.is_contiguous() && v.is_contiguous(), "contiguous q, k, v");
  TORCH_CHECK(q.dim() == 3 && k.dim() == 3 && v.dim() == 3, "(BH, n, D) q, k, v");
  const int64_t BH = q.size(0), nq = q.size(1), D = q.size(2), nk = k.size(1), Dv = v.size(2);
  Band b = band_spec(ok, dmin, kvalid, qvalid, BH, nq, nk, R);
  auto out = pooled_empty({BH, nq, Dv}, q.options());
  auto lse = at::empty({BH, nq}, q.options());
#if defined(CPU_CAPABILITY_AVX512)
  if (q.scalar_type() == at::kFloat && band_rb_applies(b, D, Dv)) {
    band_forward_rb(q.data_ptr<float>(), k.data_ptr<float>(), v.data_ptr<float>(), out.data_ptr<float>(),
                    lse.data_ptr<float>(), b, BH, nq, nk, D, Dv, static_cast<float>(scale), dr);
    return {out, lse};
  }
#endif
  AT_DISPATCH_FLOATING_TYPES(q.scalar_type(), "hf_sparse_band_forward", [&] {
    band_forward_impl<scalar_t>(q.data_ptr<scalar_t>(), k.data_ptr<scalar_t>(), v.data_ptr<scalar_t>(),
                                out.data_ptr<scalar_t>(), lse.data_ptr<scalar_t>(), b, BH, nq, nk, D, Dv,
                                static_cast<scalar_t>(scale), dr);
  });
  return {out, lse};
}

void band_backward(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& dout,
                   const at::Tensor& lse, const at::Tensor& delta, const at::Tensor& ok, int64_t dmin,
                   const at::Tensor& kvalid, const at::Tensor& qvalid, int64_t R, double scale, at::Tensor dq,
                   at::Tensor dk, at::Tensor dv, double dropout_p, int64_t seed, int64_t head_mul, int64_t head_add) {
  const Drop dr(dropout_p, seed, head_mul, head_add);
  TORCH_CHECK(q.is_contiguous() && k.is_contiguous() && v.is_contiguous() && dout.is_contiguous() &&
              lse.is_contiguous() && delta.is_contiguous(), "contiguous inputs");
  check_grads(q, k, v, dq, dk, dv);
  const int64_t BH = q.size(0), nq = q.size(1), D = q.size(2), nk = k.size(1), Dv = v.size(2);
  Band b = band_spec(ok, dmin, kvalid, qvalid, BH, nq, nk, R);
#if defined(CPU_CAPABILITY_AVX512)
  if (q.scalar_type() == at::kFloat && band_rb_applies(b, D, Dv)) {
    band_backward_rb(q.data_ptr<float>(), k.data_ptr<float>(), v.data_ptr<float>(), dout.data_ptr<float>(),
                     lse.data_ptr<float>(), delta.data_ptr<float>(), dq.data_ptr<float>(), dk.data_ptr<float>(),
                     dv.data_ptr<float>(), b, BH, nq, nk, D, Dv, static_cast<float>(scale), dr);
    return;
  }
#endif
  AT_DISPATCH_FLOATING_TYPES(q.scalar_type(), "hf_sparse_band_backward", [&] {
    band_backward_impl<scalar_t>(q.data_ptr<scalar_t>(), k.data_ptr<scalar_t>(), v.data_ptr<scalar_t>(),
                                 dout.data_ptr<scalar_t>(), lse.data_ptr<scalar_t>(),
                                 delta.data_ptr<scalar_t>(), dq.data_ptr<scalar_t>(), dk.data_ptr<scalar_t>(),
                                 dv.data_ptr<scalar_t>(), b, BH, nq, nk, D, Dv, static_cast<scalar_t>(scale), dr);
  });
}


// ----------------------------------------------------------------------------- range components
//
// Rows with key ranges (LSH buckets in sorted order: every row's keys are one contiguous run of the key
// order). The component's orders are permutations of the tensors' rows (``qidx``, ``kidx``, (BH, n) int64),
// read and written by the kernel itself: no sorted copies of q, k, v, dO, no scatter of the output.
// Tiles are runs of at most R component rows with the same range start (one bucket's rows, where a bucket
// has at most R), so a tile's window (the union of its rows' ranges) holds no other bucket's keys; groups
// are runs of tiles whose windows are disjoint from every other group's (one bucket each), so the backward
// adds a group's dK, dV without a lock, and the key rows of a group are gathered once for all its tiles.
// It replaced fixed tiles of 32 rows on sorted copies (index_select of q, k, v, dO, index_copy / index_add
// back), whose windows spanned two buckets: LSH(64) at 16k, H=12 D=64, 2 threads, those kernels 59 ms of the
// forward and ~30 ms of copies around them; with the counting sort of the bucket order (``lsh_order``) the
// whole call (hashing included) went from 0.142-0.157 to 0.088-0.103 s forward and 0.32-0.39 to 0.20-0.22 s
// forward+backward (the two versions alternating, 3 processes each, matmul 180-183 GFLOP/s).
struct RangePlan {
  const int64_t *qidx, *kidx;  // (BH, nq) / (BH, nk): component row -> tensor row
  const int32_t *rlo, *rhi;    // (BH, nq) key ranges in the component's key rows
  const uint8_t* kvalid;       // (BH, nk) 0/1 in the key order, or nullptr
  int64_t BH, nq, nk, nqt, nkt;
  std::vector<int64_t> tile_row;              // first flattened component row (r * nq + i) of each tile
  std::vector<int32_t> tile_n, tile_j0, tile_j1;  // its rows, its key window [j0, j1) (j1 <= j0: no key)
  std::vector<int64_t> group;                 // first tile of each group, then the number of tiles
  std::vector<int64_t> group_j0, group_j1;    // each group's key window (the union of its tiles')
  int64_t W = 1;                              // widest tile window
};

// Whether idx (BH, n) holds every row 0 .. nt - 1 once in each flattened row.
bool is_permutation(const int64_t* idx, int64_t BH, int64_t n, int64_t nt) {
  if (n != nt) return false;
  std::vector<uint8_t> seen(nt);
  for (int64_t r = 0; r < BH; ++r) {
    std::fill(seen.begin(), seen.end(), 0);
    for (int64_t i = 0; i < n; ++i) {
      const int64_t t = idx[r * n + i];
      if (t < 0 || t >= nt || seen[t]) return false;
      seen[t] = 1;
    }
  }
  return true;
}

RangePlan range_plan(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& qidx,
                     const at::Tensor& kidx, const at::Tensor& rlo, const at::Tensor& rhi, const at::Tensor& kvalid,
                     int64_t R) {
  TORCH_CHECK(q.is_contiguous() && k.is_contiguous() && v.is_contiguous(), "contiguous q, k, v");
  TORCH_CHECK(q.dim() == 3 && k.dim() == 3 && v.dim() == 3, "(BH, n, D) q, k, v");
  TORCH_CHECK(R > 0, "tile rows");
  RangePlan p;
  p.BH = q.size(0), p.nqt = q.size(1), p.nkt = k.size(1);
  TORCH_CHECK(qidx.dtype() == at::kLong && kidx.dtype() == at::kLong && qidx.is_contiguous() && kidx.is_contiguous() &&
              qidx.dim() == 2 && kidx.dim() == 2 && qidx.size(0) == p.BH && kidx.size(0) == p.BH,
              "int64 row orders (BH, n)");
  p.nq = qidx.size(1), p.nk = kidx.size(1);
  p.qidx = qidx.data_ptr<int64_t>(), p.kidx = kidx.data_ptr<int64_t>();
  TORCH_CHECK(is_permutation(p.qidx, p.BH, p.nq, p.nqt) && is_permutation(p.kidx, p.BH, p.nk, p.nkt),
              "the row orders must be permutations of the query and key rows");
  TORCH_CHECK(rlo.dtype() == at::kInt && rhi.dtype() == at::kInt && rlo.is_contiguous() && rhi.is_contiguous() &&
              rlo.numel() == p.BH * p.nq && rhi.numel() == p.BH * p.nq, "int32 key ranges (BH, nq)");
  TORCH_CHECK(kvalid.dtype() == at::kByte && (kvalid.numel() == 0 || (kvalid.is_contiguous() &&
              kvalid.numel() == p.BH * p.nk)), "uint8 key validity (BH, nk)");
  p.rlo = rlo.data_ptr<int32_t>(), p.rhi = rhi.data_ptr<int32_t>();
  p.kvalid = kvalid.numel() ? kvalid.data_ptr<uint8_t>() : nullptr;
  for (int64_t r = 0; r < p.BH; ++r) {
    const size_t first_group = p.group.size();
    int64_t reach = std::numeric_limits<int64_t>::min();  // end of the windows so far in this row
    bool ordered = true;  // every tile's window starts at or after its group's start
    for (int64_t i = 0; i < p.nq;) {
      const int64_t a0 = r * p.nq + i;
      int64_t lo = std::numeric_limits<int64_t>::max(), hi = std::numeric_limits<int64_t>::min(), start = -1, n = 0;
      for (; i < p.nq && n < R; ++i, ++n) {
        const int64_t a = r * p.nq + i, l = p.rlo[a], h = p.rhi[a];
        if (h <= l) continue;
        TORCH_CHECK(l >= 0 && h <= p.nk, "key range [", l, ", ", h, ") outside ", p.nk, " keys");
        if (start < 0) start = l;
        else if (l != start) break;
        lo = std::min(lo, l), hi = std::max(hi, h);
      }
      if (lo >= hi) lo = hi = 0;  // no row with a key
      if (hi > lo && lo >= reach) p.group.push_back(static_cast<int64_t>(p.tile_row.size()));
      else if (p.group.size() == first_group) p.group.push_back(static_cast<int64_t>(p.tile_row.size()));
      else if (hi > lo && lo < p.tile_j0[p.group.back()]) ordered = false;
      p.tile_row.push_back(a0);
      p.tile_n.push_back(static_cast<int32_t>(n));
      p.tile_j0.push_back(static_cast<int32_t>(lo));
      p.tile_j1.push_back(static_cast<int32_t>(hi));
      if (hi > lo) reach = std::max(reach, hi);
    }
    if (!ordered) p.group.resize(first_group + 1);  // windows out of order: the row's tiles in one group
  }
  p.group.push_back(static_cast<int64_t>(p.tile_row.size()));
  for (size_t t = 0; t < p.tile_row.size(); ++t) p.W = std::max<int64_t>(p.W, p.tile_j1[t] - p.tile_j0[t]);
  for (size_t g = 0; g + 1 < p.group.size(); ++g) {
    int64_t lo = std::numeric_limits<int64_t>::max(), hi = 0;
    for (int64_t t = p.group[g]; t < p.group[g + 1]; ++t)
      if (p.tile_j1[t] > p.tile_j0[t]) lo = std::min<int64_t>(lo, p.tile_j0[t]), hi = std::max<int64_t>(hi, p.tile_j1[t]);
    p.group_j0.push_back(std::min(lo, hi));
    p.group_j1.push_back(hi);
  }
  return p;
}

// Rows ahead of the one being copied whose cache lines are requested (rows are scattered over the tensor:
// each would otherwise wait for memory in turn).
constexpr int64_t kPrefetchRows = 8;

template <typename T>
inline void prefetch_row(const T* row, int64_t w, int rw) {
  for (int64_t b = 0; b < w * static_cast<int64_t>(sizeof(T)); b += 64) {
    if (rw) __builtin_prefetch(reinterpret_cast<const char*>(row) + b, 1);
    else __builtin_prefetch(reinterpret_cast<const char*>(row) + b, 0);
  }
}

// dst[i] = src[idx[i]] for n rows of width w.
template <typename T>
inline void gather_rows(T* dst, const T* src, const int64_t* idx, int64_t n, int64_t w) {
  for (int64_t i = 0; i < std::min(n, kPrefetchRows); ++i) prefetch_row(src + idx[i] * w, w, 0);
  for (int64_t i = 0; i < n; ++i) {
    if (i + kPrefetchRows < n) prefetch_row(src + idx[i + kPrefetchRows] * w, w, 0);
    std::memcpy(dst + i * w, src + idx[i] * w, w * sizeof(T));
  }
}

// dst[idx[i]] += src[i] for n rows of width w.
template <typename T>
inline void scatter_add_rows(T* dst, const T* src, const int64_t* idx, int64_t n, int64_t w) {
  for (int64_t i = 0; i < std::min(n, kPrefetchRows); ++i) prefetch_row(dst + idx[i] * w, w, 1);
  for (int64_t i = 0; i < n; ++i) {
    if (i + kPrefetchRows < n) prefetch_row(dst + idx[i + kPrefetchRows] * w, w, 1);
    T* d = dst + idx[i] * w;
    const T* s = src + i * w;
    int64_t j = 0;
    if constexpr (std::is_same_v<T, float>) {
      for (; j + kV <= w; j += kV) (fVec::loadu(d + j) + fVec::loadu(s + j)).store(d + j);
    }
    for (; j < w; ++j) d[j] += s[j];
  }
}

// Requests the rows of group g (its key rows of k and v, its query rows of each of ``qs``) into L2 while the
// group before it computes: the rows are scattered over the tensors, and copied one after another each would
// wait for memory in turn.
template <typename T>
inline void prefetch_l2(const T* row, int64_t w) {
  for (int64_t b = 0; b < w * static_cast<int64_t>(sizeof(T)); b += 64)
    __builtin_prefetch(reinterpret_cast<const char*>(row) + b, 0, 2);
}

template <typename T>
void prefetch_group(const RangePlan& p, int64_t g, const T* k, const T* v,
                    std::initializer_list<std::pair<const T*, int64_t>> qs, int64_t D, int64_t Dv) {
  const int64_t t0 = p.group[g], t1 = p.group[g + 1], r = p.tile_row[t0] / p.nq;
  const int64_t* krows = p.kidx + r * p.nk;
  for (int64_t j = p.group_j0[g]; j < p.group_j1[g]; ++j) {
    prefetch_l2(k + (r * p.nkt + krows[j]) * D, D);
    prefetch_l2(v + (r * p.nkt + krows[j]) * Dv, Dv);
  }
  for (int64_t a = p.tile_row[t0]; a < p.tile_row[t1 - 1] + p.tile_n[t1 - 1]; ++a)
    for (const auto& [x, w] : qs) prefetch_l2(x + (r * p.nqt + p.qidx[a]) * w, w);
}

// f(scratch, r, g0, g1, tiles [t0, t1), next) for each group, in parallel (``make()``: one scratch per thread):
// the group's key window is [g0, g1) of row r; ``next``: the group this thread runs next, or -1.
template <typename M, typename F>
void for_each_range_group(const RangePlan& p, M&& make, F&& f) {
  const int64_t ngroups = static_cast<int64_t>(p.group.size()) - 1;
  at::parallel_for(0, ngroups, 1, [&](int64_t begin, int64_t end) {
    SequentialBlas seq;
    auto scratch = make();
    for (int64_t g = begin; g < end; ++g)
      f(scratch, p.tile_row[p.group[g]] / p.nq, p.group_j0[g], p.group_j1[g], p.group[g], p.group[g + 1],
        g + 1 < end ? g + 1 : -1);
  });
}

template <typename T>
struct RangeScratch {
  std::vector<T> Q, dO, K, V, dK, dV, S, dS, O, dQ, inv;
};

// Row i of a tile (flattened component row a) in a score tile whose column 0 is key row j0: entries of
// invalid keys -> -inf; returns the row's columns [lo, hi) (lo >= hi: none).
template <typename T>
inline void range_mask_row(const RangePlan& p, int64_t a, T* Si, int64_t r, int64_t j0, int64_t& lo, int64_t& hi) {
  lo = p.rlo[a] - j0, hi = p.rhi[a] - j0;
  if (p.kvalid && hi > lo) {
    const uint8_t* kv = p.kvalid + r * p.nk + j0;
    for (int64_t jj = lo; jj < hi; ++jj) Si[jj] = kv[jj] ? Si[jj] : -std::numeric_limits<T>::infinity();
  }
}

template <typename T>
void range_forward_impl(const T* q, const T* k, const T* v, T* out, T* lse, const RangePlan& p, int64_t R,
                        int64_t D, int64_t Dv, T scale, const Drop& dr) {
  const T ninf = -std::numeric_limits<T>::infinity();
  for_each_range_group(p, [] { return RangeScratch<T>(); }, [&](RangeScratch<T>& s, int64_t r, int64_t g0, int64_t g1,
                                                             int64_t t0, int64_t t1, int64_t) {
    auto &Q = s.Q, &K = s.K, &V = s.V, &S = s.S, &O = s.O, &inv = s.inv;
    Q.resize(R * D), K.resize((g1 - g0) * D), V.resize((g1 - g0) * Dv), S.resize(R * p.W), O.resize(R * Dv);
    inv.resize(R);
    gather_rows(K.data(), k + r * p.nkt * D, p.kidx + r * p.nk + g0, g1 - g0, D);
    gather_rows(V.data(), v + r * p.nkt * Dv, p.kidx + r * p.nk + g0, g1 - g0, Dv);
    for (int64_t t = t0; t < t1; ++t) {
      const int64_t a0 = p.tile_row[t], qn = p.tile_n[t], j0 = p.tile_j0[t], W = p.tile_j1[t] - j0;
      const int64_t* rows = p.qidx + a0;  // the tile's tensor rows
      T* Ot = out + r * p.nqt * Dv;
      T* Lt = lse + r * p.nqt;
      if (W <= 0) {
        for (int64_t i = 0; i < qn; ++i) std::fill(Ot + rows[i] * Dv, Ot + (rows[i] + 1) * Dv, T(0)), Lt[rows[i]] = ninf;
        continue;
      }
      gather_rows(Q.data(), q + r * p.nqt * D, rows, qn, D);
      gemm_rm<T>(false, true, qn, W, D, scale, Q.data(), D, K.data() + (j0 - g0) * D, D, T(0), S.data(), p.W);
      for (int64_t i = 0; i < qn; ++i) {
        T* Si = S.data() + i * p.W;
        int64_t lo, hi;
        range_mask_row(p, a0 + i, Si, r, j0, lo, hi);
        const T mx = row_max(Si, lo, hi);
        if (mx == ninf) {  // no allowed key: output 0, lse -inf
          std::fill(Si, Si + W, T(0));
          Lt[rows[i]] = ninf;
          inv[i] = T(0);
          continue;
        }
        const T sum = exp_sum(Si, lo, hi, mx);
        inv[i] = T(1) / sum;
        zero_outside(Si, lo, hi, W);
        if (dr.on) drop_row(dr, r, dr.row(dr.head(r), rows[i]), Si, lo, hi, j0, static_cast<T>(dr.scale));
        Lt[rows[i]] = mx + std::log(sum);
      }
      gemm_rm<T>(false, false, qn, Dv, W, T(1), S.data(), p.W, V.data() + (j0 - g0) * Dv, Dv, T(0), O.data(), Dv);
      for (int64_t i = 0; i < qn; ++i) {
        scale_row(O.data() + i * Dv, Dv, inv[i]);
        std::memcpy(Ot + rows[i] * Dv, O.data() + i * Dv, Dv * sizeof(T));
      }
    }
  });
}

template <typename T>
void range_backward_impl(const T* q, const T* k, const T* v, const T* dout, const T* lse, const T* delta, T* dq,
                         T* dk, T* dv, const RangePlan& p, int64_t R, int64_t D, int64_t Dv, T scale,
                         const Drop& dr) {
  for_each_range_group(p, [] { return RangeScratch<T>(); }, [&](RangeScratch<T>& s, int64_t r, int64_t g0, int64_t g1,
                                                             int64_t t0, int64_t t1, int64_t) {
    if (g1 <= g0) return;
    const int64_t GW = g1 - g0;
    auto &Q = s.Q, &dO = s.dO, &K = s.K, &V = s.V, &dK = s.dK, &dV = s.dV, &P = s.S, &dS = s.dS, &dQ = s.dQ;
    Q.resize(R * D), dO.resize(R * Dv), K.resize(GW * D), V.resize(GW * Dv), P.resize(R * p.W), dS.resize(R * p.W);
    dQ.resize(R * D);
    dK.assign(GW * D, T(0)), dV.assign(GW * Dv, T(0));
    const int64_t* krows = p.kidx + r * p.nk + g0;
    gather_rows(K.data(), k + r * p.nkt * D, krows, GW, D);
    gather_rows(V.data(), v + r * p.nkt * Dv, krows, GW, Dv);
    for (int64_t t = t0; t < t1; ++t) {
      const int64_t a0 = p.tile_row[t], qn = p.tile_n[t], j0 = p.tile_j0[t], W = p.tile_j1[t] - j0;
      if (W <= 0) continue;
      const int64_t* rows = p.qidx + a0;
      const T* L = lse + r * p.nqt;
      const T* De = delta + r * p.nqt;
      gather_rows(Q.data(), q + r * p.nqt * D, rows, qn, D);
      gather_rows(dO.data(), dout + r * p.nqt * Dv, rows, qn, Dv);
      const T* Kw = K.data() + (j0 - g0) * D;
      gemm_rm<T>(false, true, qn, W, D, scale, Q.data(), D, Kw, D, T(0), P.data(), p.W);                         // S
      gemm_rm<T>(false, true, qn, W, Dv, T(1), dO.data(), Dv, V.data() + (j0 - g0) * Dv, Dv, T(0), dS.data(), p.W);  // dP
      for (int64_t i = 0; i < qn; ++i) {
        T* Pi = P.data() + i * p.W;
        T* dSi = dS.data() + i * p.W;
        int64_t lo = 0, hi = 0;
        if (!std::isinf(L[rows[i]])) {
          range_mask_row(p, a0 + i, Pi, r, j0, lo, hi);
          if (hi > lo && dr.on)
            grad_row_drop(dr, r, dr.row(dr.head(r), rows[i]), Pi + lo, dSi + lo, hi - lo, j0 + lo, L[rows[i]],
                          De[rows[i]]);
          else if (hi > lo)
            grad_row(Pi + lo, dSi + lo, hi - lo, L[rows[i]], De[rows[i]]);
        }
        zero_outside(Pi, lo, hi, W);
        zero_outside(dSi, lo, hi, W);
      }
      std::fill(dQ.begin(), dQ.begin() + qn * D, T(0));
      grad_products<T>(P.data(), dS.data(), p.W, qn, W, Q.data(), dO.data(), Kw, dQ.data(),
                       dK.data() + (j0 - g0) * D, dV.data() + (j0 - g0) * Dv, D, Dv, scale);
      scatter_add_rows(dq + r * p.nqt * D, dQ.data(), rows, qn, D);
    }
    scatter_add_rows(dk + r * p.nkt * D, dK.data(), krows, GW, D);
    scatter_add_rows(dv + r * p.nkt * Dv, dV.data(), krows, GW, Dv);
  });
}

// Whether the range kernels run register-blocked (float, AVX-512, D and Dv multiples of 16), on tiles of at
// most kRangeRb rows; else the BLAS path, on tiles of the caller's R.
#if defined(CPU_CAPABILITY_AVX512)
constexpr int64_t kRangeRb = kRB;
#else
constexpr int64_t kRangeRb = 64;
#endif
bool range_rb_enabled = true;  // tests run both paths (``range_register_blocked``)

inline bool range_rb_applies(const at::Tensor& q, int64_t D, int64_t Dv) {
#if defined(CPU_CAPABILITY_AVX512)
  return range_rb_enabled && q.scalar_type() == at::kFloat && D % 16 == 0 && Dv % 16 == 0;
#else
  return false;
#endif
}

// Turns the register-blocked range kernels on or off (tests); returns whether they now run where they apply.
bool range_register_blocked(bool enable) {
  range_rb_enabled = enable;
#if defined(CPU_CAPABILITY_AVX512)
  return enable;
#else
  return false;
#endif
}

#if defined(CPU_CAPABILITY_AVX512)
// The range kernels on the band's register-blocked micro-kernels (float, AVX-512, D and Dv multiples of 16,
// tiles of at most kRB rows): a tile's rows are gathered into contiguous buffers, the group's key rows once
// per group; per 16-row part, its keys are the union of its rows' ranges and a key's rows are two vector
// compares against the rows' range bounds. No BLAS calls: MKL's 64-row products on these small shapes ran
// at about half its large-matmul rate and packed every operand (perf of LSH(64) at 16k).
struct RangeRbScratch {
  RbScratch w;
  std::vector<float> Q, dO, O, dQ, L, De, K, V, dK, dV;
  RangeRbScratch(const RangePlan& p, int64_t D, int64_t Dv, float scale)
      : w(p.W, D, Dv, scale), Q(kRB * D), dO(kRB * Dv), O(kRB * Dv), dQ(kRB * D), L(kRB), De(kRB) {}
};

// Rows (bits) of the part of tile rows [r0, r1) that see window key j: lo <= j < hi (bounds relative to the
// window, ``lov`` / ``hiv``), and the key is valid.
inline __mmask16 range_keep(__mmask16 rows, __m512i lov, __m512i hiv, int64_t j, const uint8_t* kvw) {
  if (kvw && !kvw[j]) return 0;
  const __m512i jv = _mm512_set1_epi32(static_cast<int32_t>(j));
  return rows & _mm512_cmp_epi32_mask(lov, jv, _MM_CMPINT_LE) & _mm512_cmp_epi32_mask(jv, hiv, _MM_CMPINT_LT);
}

// A part's rows with keys, its window-relative bounds as vectors and its keys [ja, jb) (the union).
struct RangePart {
  __mmask16 rows = 0;
  __m512i lov, hiv;
  int64_t ja = 0, jb = 0;
};

inline RangePart range_part(const RangePlan& p, int64_t a0, int64_t r0, int64_t r1, int64_t j0) {
  RangePart s;
  alignas(64) int32_t lo[16] = {}, hi[16] = {};
  int64_t ja = std::numeric_limits<int64_t>::max(), jb = std::numeric_limits<int64_t>::min();
  for (int64_t i = r0; i < r1; ++i) {
    const int64_t l = p.rlo[a0 + i], h = p.rhi[a0 + i];
    if (h <= l) continue;
    lo[i - r0] = static_cast<int32_t>(l - j0), hi[i - r0] = static_cast<int32_t>(h - j0);
    s.rows |= static_cast<__mmask16>(1u << (i - r0));
    ja = std::min(ja, l - j0), jb = std::max(jb, h - j0);
  }
  s.lov = _mm512_load_si512(lo), s.hiv = _mm512_load_si512(hi);
  if (s.rows) s.ja = ja, s.jb = jb;
  return s;
}

void range_forward_rb(const float* q, const float* k, const float* v, float* out, float* lse, const RangePlan& p,
                      int64_t D, int64_t Dv, float scale, const Drop& dr) {
  const float ninf = -std::numeric_limits<float>::infinity();
  for_each_range_group(
      p, [&] { return RangeRbScratch(p, D, Dv, scale); },
      [&](RangeRbScratch& s, int64_t r, int64_t g0, int64_t g1, int64_t t0, int64_t t1, int64_t next) {
        if (next >= 0) prefetch_group<float>(p, next, k, v, {{q, D}}, D, Dv);
        s.K.resize((g1 - g0 + 4) * D), s.V.resize((g1 - g0 + 4) * Dv);
        gather_rows(s.K.data(), k + r * p.nkt * D, p.kidx + r * p.nk + g0, g1 - g0, D);
        gather_rows(s.V.data(), v + r * p.nkt * Dv, p.kidx + r * p.nk + g0, g1 - g0, Dv);
        const uint8_t* kv = p.kvalid ? p.kvalid + r * p.nk : nullptr;
        for (int64_t t = t0; t < t1; ++t) {
          const int64_t a0 = p.tile_row[t], qn = p.tile_n[t], j0 = p.tile_j0[t];
          const int64_t* rows = p.qidx + a0;
          float* Ot = out + r * p.nqt * Dv;
          float* Lt = lse + r * p.nqt;
          gather_rows(s.Q.data(), q + r * p.nqt * D, rows, qn, D);
          pack_transposed(s.Q.data(), D, qn, D, scale, s.w.QT.data());
          const float* Kw = s.K.data() + (j0 - g0) * D;
          const float* Vw = s.V.data() + (j0 - g0) * Dv;
          for (int64_t r0 = 0; r0 < qn; r0 += 16) {
            const int64_t r1 = std::min<int64_t>(qn, r0 + 16);
            const RangePart part = range_part(p, a0, r0, r1, j0);
            float* S = s.w.ST.data() + r0;
            if (part.jb > part.ja) scores_part(Kw, D, s.w.QT.data() + r0, S, part.ja, part.jb);
            __m512 mx = _mm512_set1_ps(ninf);
            for (int64_t j = part.ja; j < part.jb; ++j) {
              const __mmask16 keep = range_keep(part.rows, part.lov, part.hiv, j, kv ? kv + j0 : nullptr);
              __m512 x = _mm512_loadu_ps(S + j * kRB);
              if (keep != 0xFFFF) {
                x = masked_or_ninf(x, keep);
                _mm512_storeu_ps(S + j * kRB, x);
              }
              mx = _mm512_max_ps(mx, x);
            }
            part_softmax(S, part.ja, part.jb, mx, r0, r1, s.w.inv.data(), s.L.data());
            if (dr.on) {  // component rows a0 - r * nq + ..., keys j0 + ..., through the orders (``drop_spec``)
              drop_part(dr, dr.head(r), S, part.ja, part.jb, j0, a0 - r * p.nq + r0, r, p.nq);
              drop_inv(dr, s.w.inv.data(), r0, r1);
            }
            for (int64_t g = r0; g < r1; g += 4)
              pv_rows(s.w.ST.data() + g, Vw, Dv, part.ja, part.jb, s.O.data() + g * Dv, std::min<int64_t>(4, r1 - g),
                      s.w.inv.data() + g);
          }
          for (int64_t i = 0; i < qn; ++i) {
            std::memcpy(Ot + rows[i] * Dv, s.O.data() + i * Dv, Dv * sizeof(float));
            Lt[rows[i]] = s.L[i];
          }
        }
      });
}

void range_backward_rb(const float* q, const float* k, const float* v, const float* dout, const float* lse,
                       const float* delta, float* dq, float* dk, float* dv, const RangePlan& p, int64_t D, int64_t Dv,
                       float scale, const Drop& dr) {
  constexpr int64_t R = kRB;
  for_each_range_group(
      p, [&] { return RangeRbScratch(p, D, Dv, scale); },
      [&](RangeRbScratch& s, int64_t r, int64_t g0, int64_t g1, int64_t t0, int64_t t1, int64_t next) {
        if (next >= 0) prefetch_group<float>(p, next, k, v, {{q, D}, {dout, Dv}}, D, Dv);
        if (g1 <= g0) return;
        const int64_t GW = g1 - g0;
        const int64_t* krows = p.kidx + r * p.nk + g0;
        s.K.resize((GW + 4) * D), s.V.resize((GW + 4) * Dv);
        s.dK.assign((GW + 4) * D, 0.f), s.dV.assign((GW + 4) * Dv, 0.f);
        gather_rows(s.K.data(), k + r * p.nkt * D, krows, GW, D);
        gather_rows(s.V.data(), v + r * p.nkt * Dv, krows, GW, Dv);
        const uint8_t* kv = p.kvalid ? p.kvalid + r * p.nk : nullptr;
        float *ST = s.w.ST.data(), *DS = s.w.DS.data();
        for (int64_t t = t0; t < t1; ++t) {
          const int64_t a0 = p.tile_row[t], qn = p.tile_n[t], j0 = p.tile_j0[t];
          if (p.tile_j1[t] <= j0) continue;
          const int64_t* rows = p.qidx + a0;
          gather_rows(s.Q.data(), q + r * p.nqt * D, rows, qn, D);
          gather_rows(s.dO.data(), dout + r * p.nqt * Dv, rows, qn, Dv);
          for (int64_t i = 0; i < qn; ++i) s.L[i] = lse[r * p.nqt + rows[i]], s.De[i] = delta[r * p.nqt + rows[i]];
          pack_transposed(s.Q.data(), D, qn, D, scale, s.w.QT.data());
          pack_transposed(s.dO.data(), Dv, qn, Dv, 1.f, s.w.OT.data());
          const float* Kw = s.K.data() + (j0 - g0) * D;
          const float* Vw = s.V.data() + (j0 - g0) * Dv;
          const int64_t parts = (qn + 15) / 16;
          int64_t ja[kParts] = {}, jb[kParts] = {};
          for (int64_t h = 0; h < parts; ++h) {
            const int64_t r0 = 16 * h, r1 = std::min<int64_t>(qn, r0 + 16);
            RangePart part = range_part(p, a0, r0, r1, j0);
            for (int64_t i = r0; i < r1; ++i)
              if (std::isinf(s.L[i])) part.rows &= static_cast<__mmask16>(~(1u << (i - r0)));
            ja[h] = part.ja, jb[h] = part.jb;
            if (jb[h] <= ja[h]) continue;
            const __mmask16 inside = static_cast<__mmask16>((1u << (r1 - r0)) - 1u);
            const fVec lv(_mm512_maskz_loadu_ps(part.rows, s.L.data() + r0));
            const fVec dl(_mm512_maskz_loadu_ps(inside, s.De.data() + r0));
            scores_part(Kw, D, s.w.QT.data() + r0, ST + r0, ja[h], jb[h]);
            scores_part(Vw, Dv, s.w.OT.data() + r0, DS + r0, ja[h], jb[h]);
            const __m512i rk = dr.on ? drop_rows(dr, dr.head(r), a0 - r * p.nq + r0, r, p.nq) : _mm512_setzero_si512();
            for (int64_t j = ja[h]; j < jb[h]; ++j) {
              float* sj = ST + j * R + r0;
              float* dj = DS + j * R + r0;
              const __mmask16 keep = range_keep(part.rows, part.lov, part.hiv, j, kv ? kv + j0 : nullptr);
              const __m512 pr = _mm512_maskz_mov_ps(keep, (fVec::loadu(sj) - lv).exp_u20());
              if (dr.on) {
                drop_grad(dr, rk, dr.kpos(r, j0 + j), pr, sj, dj, dl);
                continue;
              }
              _mm512_storeu_ps(sj, pr);
              _mm512_storeu_ps(dj, _mm512_mul_ps(pr, _mm512_sub_ps(_mm512_loadu_ps(dj), dl)));
            }
          }
          std::fill_n(s.dQ.data(), qn * D, 0.f);
          tile_grads(ST, DS, ja, jb, parts, qn, s.Q.data(), s.dO.data(), Kw, D, Dv, s.dK.data() + (j0 - g0) * D,
                     s.dV.data() + (j0 - g0) * Dv, s.dQ.data(), s.w.scl.data(), scale);
          scatter_add_rows(dq + r * p.nqt * D, s.dQ.data(), rows, qn, D);
        }
        scatter_add_rows(dk + r * p.nkt * D, s.dK.data(), krows, GW, D);
        scatter_add_rows(dv + r * p.nkt * Dv, s.dV.data(), krows, GW, Dv);
      });
}
#endif

// The call's dropout on a range component: its orders are the maps from component rows to tensor rows.
Drop range_drop(Drop dr, const RangePlan& rp) {
  dr.qmap = rp.qidx, dr.qs = rp.nq, dr.kmap = rp.kidx, dr.ks = rp.nk;
  return dr;
}

std::vector<at::Tensor> range_forward(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                      const at::Tensor& qidx, const at::Tensor& kidx, const at::Tensor& rlo,
                                      const at::Tensor& rhi, const at::Tensor& kvalid, int64_t R, double scale,
                                      double dropout_p, int64_t seed, int64_t head_mul, int64_t head_add) {
  const int64_t D = q.size(2), Dv = v.size(2);
  const bool rb = range_rb_applies(q, D, Dv);
  const RangePlan p = range_plan(q, k, v, qidx, kidx, rlo, rhi, kvalid, rb ? std::min(R, kRangeRb) : R);
  const Drop dr = range_drop(Drop(dropout_p, seed, head_mul, head_add), p);
  auto out = pooled_empty({p.BH, p.nqt, Dv}, q.options());
  auto lse = at::empty({p.BH, p.nqt}, q.options());
#if defined(CPU_CAPABILITY_AVX512)
  if (rb) {
    range_forward_rb(q.data_ptr<float>(), k.data_ptr<float>(), v.data_ptr<float>(), out.data_ptr<float>(),
                     lse.data_ptr<float>(), p, D, Dv, static_cast<float>(scale), dr);
    return {out, lse};
  }
#endif
  AT_DISPATCH_FLOATING_TYPES(q.scalar_type(), "hf_sparse_range_forward", [&] {
    range_forward_impl<scalar_t>(q.data_ptr<scalar_t>(), k.data_ptr<scalar_t>(), v.data_ptr<scalar_t>(),
                                 out.data_ptr<scalar_t>(), lse.data_ptr<scalar_t>(), p, R, D, Dv,
                                 static_cast<scalar_t>(scale), dr);
  });
  return {out, lse};
}

void range_backward(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& dout,
                    const at::Tensor& lse, const at::Tensor& delta, const at::Tensor& qidx, const at::Tensor& kidx,
                    const at::Tensor& rlo, const at::Tensor& rhi, const at::Tensor& kvalid, int64_t R, double scale,
                    at::Tensor dq, at::Tensor dk, at::Tensor dv, double dropout_p, int64_t seed, int64_t head_mul,
                    int64_t head_add) {
  TORCH_CHECK(dout.is_contiguous() && lse.is_contiguous() && delta.is_contiguous(), "contiguous inputs");
  check_grads(q, k, v, dq, dk, dv);
  const int64_t D = q.size(2), Dv = v.size(2);
  const bool rb = range_rb_applies(q, D, Dv);
  const RangePlan p = range_plan(q, k, v, qidx, kidx, rlo, rhi, kvalid, rb ? std::min(R, kRangeRb) : R);
  const Drop dr = range_drop(Drop(dropout_p, seed, head_mul, head_add), p);
#if defined(CPU_CAPABILITY_AVX512)
  if (rb) {
    range_backward_rb(q.data_ptr<float>(), k.data_ptr<float>(), v.data_ptr<float>(), dout.data_ptr<float>(),
                      lse.data_ptr<float>(), delta.data_ptr<float>(), dq.data_ptr<float>(), dk.data_ptr<float>(),
                      dv.data_ptr<float>(), p, D, Dv, static_cast<float>(scale), dr);
    return;
  }
#endif
  AT_DISPATCH_FLOATING_TYPES(q.scalar_type(), "hf_sparse_range_backward", [&] {
    range_backward_impl<scalar_t>(q.data_ptr<scalar_t>(), k.data_ptr<scalar_t>(), v.data_ptr<scalar_t>(),
                                  dout.data_ptr<scalar_t>(), lse.data_ptr<scalar_t>(), delta.data_ptr<scalar_t>(),
                                  dq.data_ptr<scalar_t>(), dk.data_ptr<scalar_t>(), dv.data_ptr<scalar_t>(), p, R, D,
                                  Dv, static_cast<scalar_t>(scale), dr);
  });
}

// Bands within residue classes (see ``class_band_forward_rb``): float on AVX-512 only; ``class_band_runs``
// says whether this build runs them for head sizes D, Dv (the caller keeps such components elsewhere if not).
bool class_band_runs(int64_t D, int64_t Dv) {
#if defined(CPU_CAPABILITY_AVX512)
  return D % 16 == 0 && Dv % 16 == 0;
#else
  return false;
#endif
}

Band class_band_spec(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, int64_t dmin, int64_t dmax,
                     const at::Tensor& kvalid, const at::Tensor& qvalid, int64_t d) {
  TORCH_CHECK(q.is_contiguous() && k.is_contiguous() && v.is_contiguous(), "contiguous q, k, v");
  TORCH_CHECK(q.dim() == 3 && q.sizes() == k.sizes() && v.size(1) == q.size(1), "(BH, n, D) q, k, v of one length");
  TORCH_CHECK(q.scalar_type() == at::kFloat && class_band_runs(q.size(2), v.size(2)), "float, AVX-512, D % 16 == 0");
  const int64_t BH = q.size(0), n = q.size(1);
  TORCH_CHECK(d >= 1 && n % d == 0, "class stride ", d, " does not divide ", n, " rows");
  TORCH_CHECK(dmin <= dmax, "empty band");
  TORCH_CHECK(kvalid.numel() == 0 || (kvalid.is_contiguous() && kvalid.numel() == BH * n), "key validity (BH, n)");
  TORCH_CHECK(qvalid.numel() == 0 || (qvalid.is_contiguous() && qvalid.numel() == BH * n), "query validity (BH, n)");
  return Band{nullptr, true, dmin, dmax, kvalid.numel() ? kvalid.data_ptr<uint8_t>() : nullptr,
              qvalid.numel() ? qvalid.data_ptr<uint8_t>() : nullptr, 64};
}

// out, lse: undefined to return new ones, else another component's (out, lse) of the same rows to merge
// this component into, in place.
std::vector<at::Tensor> class_band_forward(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                           int64_t dmin, int64_t dmax, const at::Tensor& kvalid,
                                           const at::Tensor& qvalid, int64_t d, double scale,
                                           const std::optional<at::Tensor>& out_in,
                                           const std::optional<at::Tensor>& lse_in, double dropout_p, int64_t seed,
                                           int64_t head_mul, int64_t head_add) {
  const Band b = class_band_spec(q, k, v, dmin, dmax, kvalid, qvalid, d);
  const Drop dr(dropout_p, seed, head_mul, head_add);
  const bool merge = out_in.has_value();
  TORCH_CHECK(merge == lse_in.has_value(), "out and lse together");
  auto out = merge ? *out_in : pooled_empty({q.size(0), q.size(1), v.size(2)}, q.options());
  auto lse = merge ? *lse_in : at::empty({q.size(0), q.size(1)}, q.options());
  TORCH_CHECK(out.is_contiguous() && lse.is_contiguous() && out.scalar_type() == at::kFloat &&
              lse.scalar_type() == at::kFloat, "contiguous float out, lse");
  TORCH_CHECK(out.sizes() == at::IntArrayRef({q.size(0), q.size(1), v.size(2)}) && lse.numel() == q.size(0) * q.size(1),
              "out (BH, n, Dv), lse (BH, n)");
#if defined(CPU_CAPABILITY_AVX512)
  class_band_forward_rb(q.data_ptr<float>(), k.data_ptr<float>(), v.data_ptr<float>(), out.data_ptr<float>(),
                        lse.data_ptr<float>(), b, q.size(0), q.size(1), q.size(2), v.size(2),
                        static_cast<float>(scale), d, merge, dr);
#endif
  return {out, lse};
}

void class_band_backward(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& dout,
                         const at::Tensor& lse, const at::Tensor& delta, int64_t dmin, int64_t dmax,
                         const at::Tensor& kvalid, const at::Tensor& qvalid, int64_t d, double scale, at::Tensor dq,
                         at::Tensor dk, at::Tensor dv, double dropout_p, int64_t seed, int64_t head_mul,
                         int64_t head_add) {
  const Band b = class_band_spec(q, k, v, dmin, dmax, kvalid, qvalid, d);
  const Drop dr(dropout_p, seed, head_mul, head_add);
  TORCH_CHECK(dout.is_contiguous() && lse.is_contiguous() && delta.is_contiguous(), "contiguous inputs");
  check_grads(q, k, v, dq, dk, dv);
#if defined(CPU_CAPABILITY_AVX512)
  class_band_backward_rb(q.data_ptr<float>(), k.data_ptr<float>(), v.data_ptr<float>(), dout.data_ptr<float>(),
                         lse.data_ptr<float>(), delta.data_ptr<float>(), dq.data_ptr<float>(), dk.data_ptr<float>(),
                         dv.data_ptr<float>(), b, q.size(0), q.size(1), q.size(2), v.size(2),
                         static_cast<float>(scale), d, dr);
#endif
}
// argmax of [p, -p] over p[0, half): the first of equal maxima (in vectors where half is a multiple of
// 16: each lane keeps its first extreme, then the first index among the lanes that hold the extreme).
inline int64_t signed_argmax(const float* p, int64_t half) {
  float hi = p[0], lo = p[0];
  int64_t hi_at = 0, lo_at = 0;
#if defined(CPU_CAPABILITY_AVX512)
  if (half % 16 == 0) {
    __m512 vhi = _mm512_loadu_ps(p), vlo = vhi;
    __m512i idx = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15), vhi_at = idx, vlo_at = idx;
    for (int64_t j = 16; j < half; j += 16) {
      idx = _mm512_add_epi32(idx, _mm512_set1_epi32(16));
      const __m512 x = _mm512_loadu_ps(p + j);
      const __mmask16 up = _mm512_cmp_ps_mask(x, vhi, _CMP_GT_OQ), down = _mm512_cmp_ps_mask(x, vlo, _CMP_LT_OQ);
      vhi = _mm512_mask_mov_ps(vhi, up, x);
      vhi_at = _mm512_mask_mov_epi32(vhi_at, up, idx);
      vlo = _mm512_mask_mov_ps(vlo, down, x);
      vlo_at = _mm512_mask_mov_epi32(vlo_at, down, idx);
    }
    hi = _mm512_reduce_max_ps(vhi);
    lo = _mm512_reduce_min_ps(vlo);
    const __mmask16 at_hi = _mm512_cmp_ps_mask(vhi, _mm512_set1_ps(hi), _CMP_EQ_OQ);
    const __mmask16 at_lo = _mm512_cmp_ps_mask(vlo, _mm512_set1_ps(lo), _CMP_EQ_OQ);
    hi_at = at_hi ? _mm512_mask_reduce_min_epi32(at_hi, vhi_at) : 0;  // no lane: NaN (a NaN row)
    lo_at = at_lo ? _mm512_mask_reduce_min_epi32(at_lo, vlo_at) : 0;
    return hi >= -lo ? hi_at : lo_at + half;
  }
#endif
  for (int64_t j = 1; j < half; ++j) {
    if (p[j] > hi) hi = p[j], hi_at = j;
    if (p[j] < lo) lo = p[j], lo_at = j;
  }
  return hi >= -lo ? hi_at : lo_at + half;
}

// LSH hashing (``LSH.hash``): the bucket of row r in round h is the argmax of [x R_h, -x R_h], the first
// of equal maxima, without the (rows, rounds * buckets / 2) projection in memory: 256 rows at a time, the
// product and the scan in cache (16k tokens, 12 heads, 256 buckets: ~78 -> ~21 ms per tensor; the
// projection alone was 100 MB, and torch's max / min with indices ran at ~1.6 G elements/s).
// x (B, H, L, D), any strides with unit stride along D; rot (D, rounds * half).
at::Tensor lsh_hash(const at::Tensor& x, const at::Tensor& rot, int64_t rounds) {
  TORCH_CHECK(x.dim() == 4 && x.scalar_type() == at::kFloat && x.stride(3) == 1, "x (B, H, L, D) float, unit stride in D");
  TORCH_CHECK(rot.dim() == 2 && rot.is_contiguous() && rot.scalar_type() == at::kFloat && rot.size(0) == x.size(3) &&
              rounds > 0 && rot.size(1) % rounds == 0, "rot (D, rounds * half) float, contiguous");
  const int64_t B = x.size(0), H = x.size(1), L = x.size(2), D = x.size(3), W = rot.size(1), half = W / rounds;
  auto out = at::empty({B, H, L, rounds}, x.options().dtype(at::kLong));
  const float* X = x.data_ptr<float>();
  const float* Rm = rot.data_ptr<float>();
  int64_t* O = out.data_ptr<int64_t>();
  constexpr int64_t kRows = 256;
  const int64_t per = (L + kRows - 1) / kRows;
  at::parallel_for(0, B * H * per, 1, [&](int64_t t0, int64_t t1) {
    SequentialBlas blas;
    std::vector<float> proj(kRows * W);
    for (int64_t t = t0; t < t1; ++t) {
      const int64_t b = t / (H * per), h = t / per % H, r0 = t % per * kRows, m = std::min(kRows, L - r0);
      gemm_rm<float>(false, false, m, W, D, 1.f, X + b * x.stride(0) + h * x.stride(1) + r0 * x.stride(2),
                     x.stride(2), Rm, W, 0.f, proj.data(), W);
      int64_t* o = O + ((b * H + h) * L + r0) * rounds;
      for (int64_t i = 0; i < m; ++i) {
        for (int64_t g = 0; g < rounds; ++g) o[i * rounds + g] = signed_argmax(proj.data() + i * W + g * half, half);
      }
    }
  });
  return out;
}

// delta_i = sum_d dO[i, d] * O[i, d] - dlse_i, 0 on rows with lse = -inf (no allowed key: their outputs are
// constants), for every backward kernel: one pass over dO and O (the torch product and sum wrote and read a
// temporary of O's size: 16k tokens, 12 heads, D=64: 11 ms -> ~5 ms of each forward+backward step).
at::Tensor row_delta(const at::Tensor& dout, const at::Tensor& out, const at::Tensor& lse,
                     const std::optional<at::Tensor>& dlse) {
  TORCH_CHECK(dout.is_contiguous() && out.is_contiguous() && lse.is_contiguous() && dout.sizes() == out.sizes() &&
              dout.scalar_type() == out.scalar_type() && lse.scalar_type() == out.scalar_type() &&
              lse.numel() * out.size(-1) == out.numel(), "contiguous dO, O (..., Dv) and lse (...) of one dtype");
  TORCH_CHECK(!dlse || (dlse->is_contiguous() && dlse->numel() == lse.numel() &&
              dlse->scalar_type() == lse.scalar_type()), "dlse like lse");
  auto delta = at::empty(lse.sizes(), lse.options());
  const int64_t rows = lse.numel(), X = out.size(-1);
  AT_DISPATCH_FLOATING_TYPES(out.scalar_type(), "hf_sparse_row_delta", [&] {
    const scalar_t *a = dout.data_ptr<scalar_t>(), *b = out.data_ptr<scalar_t>(), *l = lse.data_ptr<scalar_t>();
    const scalar_t* dl = dlse ? dlse->data_ptr<scalar_t>() : nullptr;
    scalar_t* d = delta.data_ptr<scalar_t>();
    at::parallel_for(0, rows, 2048, [&](int64_t r0, int64_t r1) {
      for (int64_t r = r0; r < r1; ++r) {
        if (std::isinf(l[r]) && l[r] < 0) {
          d[r] = 0;
          continue;
        }
        const scalar_t *x = a + r * X, *y = b + r * X;
        scalar_t sum = 0;
        int64_t j = 0;
        if constexpr (std::is_same_v<scalar_t, float>) {
          fVec acc(0.f);
          for (; j + kV <= X; j += kV) acc = at::vec::fmadd(fVec::loadu(x + j), fVec::loadu(y + j), acc);
          sum = at::vec::vec_reduce_all<float>([](fVec& u, fVec& w) { return u + w; }, acc);
        }
        for (; j < X; ++j) sum += x[j] * y[j];
        d[r] = dl ? sum - dl[r] : sum;
      }
    });
  });
  return delta;
}

// One hashing round's bucket order (``LSHBuckets._plan``): hq (BH, nq) and hk (BH, nk) bucket ids in [0, nb) ->
// q_index, k_index (positions sorted by bucket, stable: by position within a bucket) and the key range [lo, hi)
// of every query in that order (its bucket's keys; with ``causal`` those at positions <= its own + off), int64.
// A counting sort: two passes over the ids instead of torch's comparison sorts and binary searches (at 16k
// tokens, 12 heads: 19 ms of LSH(64)'s plan).
std::vector<at::Tensor> lsh_order(const at::Tensor& hq, const at::Tensor& hk, int64_t nb, bool causal, int64_t off) {
  TORCH_CHECK(hq.dim() == 2 && hk.dim() == 2 && hq.size(0) == hk.size(0) && hq.is_contiguous() && hk.is_contiguous() &&
              hq.scalar_type() == at::kLong && hk.scalar_type() == at::kLong, "int64 bucket ids (BH, n)");
  const int64_t BH = hq.size(0), nq = hq.size(1), nk = hk.size(1);
  auto qi = at::empty({BH, nq}, hq.options()), ki = at::empty({BH, nk}, hq.options());
  auto lo = at::empty({BH, nq}, hq.options()), hi = at::empty({BH, nq}, hq.options());
  const int64_t *Hq = hq.data_ptr<int64_t>(), *Hk = hk.data_ptr<int64_t>();
  int64_t *Qi = qi.data_ptr<int64_t>(), *Ki = ki.data_ptr<int64_t>(), *Lo = lo.data_ptr<int64_t>(),
          *Hi = hi.data_ptr<int64_t>();
  for (int64_t a = 0; a < BH * nq; ++a) TORCH_CHECK(Hq[a] >= 0 && Hq[a] < nb, "bucket id ", Hq[a], " outside [0, ", nb, ")");
  for (int64_t a = 0; a < BH * nk; ++a) TORCH_CHECK(Hk[a] >= 0 && Hk[a] < nb, "bucket id ", Hk[a], " outside [0, ", nb, ")");
  at::parallel_for(0, BH, 1, [&](int64_t r0, int64_t r1) {
    std::vector<int64_t> kstart(nb + 1), qstart(nb + 1), fill(nb);
    for (int64_t r = r0; r < r1; ++r) {
      const int64_t *hqr = Hq + r * nq, *hkr = Hk + r * nk;
      int64_t *qir = Qi + r * nq, *kir = Ki + r * nk;
      auto order = [&](const int64_t* h, int64_t n, std::vector<int64_t>& start, int64_t* idx) {
        std::fill(start.begin(), start.end(), 0);
        for (int64_t i = 0; i < n; ++i) ++start[h[i] + 1];
        for (int64_t b = 0; b < nb; ++b) start[b + 1] += start[b];
        std::copy(start.begin(), start.begin() + nb, fill.begin());
        for (int64_t i = 0; i < n; ++i) idx[fill[h[i]]++] = i;
      };
      order(hkr, nk, kstart, kir);
      order(hqr, nq, qstart, qir);
      for (int64_t s = 0; s < nq; ++s) {
        const int64_t i = qir[s], b = hqr[i];
        Lo[r * nq + s] = kstart[b];
        Hi[r * nq + s] = causal ? std::upper_bound(kir + kstart[b], kir + kstart[b + 1], i + off) - kir : kstart[b + 1];
      }
    }
  });
  return {qi, ki, lo, hi};
}
}  // namespace

TORCH_LIBRARY(hf_sparse_fused, m) {
  m.def("pool_empty(int[] size, Tensor like) -> Tensor", &pool_empty);
  m.def("pool_limit(int bytes) -> int", &pool_limit);
  m.def("lsh_hash(Tensor x, Tensor rot, int rounds) -> Tensor", &lsh_hash);
  m.def("range_register_blocked(bool enable) -> bool", &range_register_blocked);
  m.def("row_delta(Tensor dout, Tensor out, Tensor lse, Tensor? dlse) -> Tensor", &row_delta);
  m.def("lsh_order(Tensor hq, Tensor hk, int nb, bool causal, int off) -> Tensor[]", &lsh_order);
  m.def("forward(Tensor q, Tensor k, Tensor v, Tensor kv, Tensor tidx, Tensor tiles, Tensor group, int c, float scale, int q_stride, int k_stride, float dropout_p=0., int seed=0, int head_mul=1, int head_add=0, Tensor? qmap=None, Tensor? kmap=None) -> Tensor[]", &forward);
  m.def("backward(Tensor q, Tensor k, Tensor v, Tensor dout, Tensor lse, Tensor delta, Tensor kv, Tensor tidx, Tensor tiles, Tensor group, int c, float scale, int q_stride, int k_stride, Tensor(a!) dq, Tensor(b!) dk, Tensor(c!) dv, float dropout_p=0., int seed=0, int head_mul=1, int head_add=0, Tensor? qmap=None, Tensor? kmap=None) -> ()", &backward);
  m.def("band_forward(Tensor q, Tensor k, Tensor v, Tensor ok, int dmin, Tensor kvalid, Tensor qvalid, int R, float scale, float dropout_p=0., int seed=0, int head_mul=1, int head_add=0) -> Tensor[]", &band_forward);
  m.def("class_band_runs(int D, int Dv) -> bool", &class_band_runs);
  m.def("class_band_forward(Tensor q, Tensor k, Tensor v, int dmin, int dmax, Tensor kvalid, Tensor qvalid, int d, float scale, Tensor(a!)? out=None, Tensor(b!)? lse=None, float dropout_p=0., int seed=0, int head_mul=1, int head_add=0) -> Tensor[]", &class_band_forward);
  m.def("class_band_backward(Tensor q, Tensor k, Tensor v, Tensor dout, Tensor lse, Tensor delta, int dmin, int dmax, Tensor kvalid, Tensor qvalid, int d, float scale, Tensor(a!) dq, Tensor(b!) dk, Tensor(c!) dv, float dropout_p=0., int seed=0, int head_mul=1, int head_add=0) -> ()", &class_band_backward);
  m.def("range_forward(Tensor q, Tensor k, Tensor v, Tensor qidx, Tensor kidx, Tensor rlo, Tensor rhi, Tensor kvalid, int R, float scale, float dropout_p=0., int seed=0, int head_mul=1, int head_add=0) -> Tensor[]", &range_forward);
  m.def("range_backward(Tensor q, Tensor k, Tensor v, Tensor dout, Tensor lse, Tensor delta, Tensor qidx, Tensor kidx, Tensor rlo, Tensor rhi, Tensor kvalid, int R, float scale, Tensor(a!) dq, Tensor(b!) dk, Tensor(c!) dv, float dropout_p=0., int seed=0, int head_mul=1, int head_add=0) -> ()", &range_backward);
  m.def("band_backward(Tensor q, Tensor k, Tensor v, Tensor dout, Tensor lse, Tensor delta, Tensor ok, int dmin, Tensor kvalid, Tensor qvalid, int R, float scale, Tensor(a!) dq, Tensor(b!) dk, Tensor(c!) dv, float dropout_p=0., int seed=0, int head_mul=1, int head_add=0) -> ()", &band_backward);
}
