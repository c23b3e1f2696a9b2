// tests/test_attention_decode.cc: attention's decode driver (softmax with
// Lq <= 16, or a KV cache form) and the KV cache forms (cache_seqlens,
// paged block_table), on every SIMD target, against the float64 oracle
// (src/reference/attention.h, which reads the KV cache forms itself):
// shapes across the key-chunk and row-chunk boundaries, GQA, every option
// of the prefill driver, special values, thread counts, paged == contiguous
// bit for bit, every normaliser with a KV cache, and the errors.
// Helpers, bounds and the fixture: tests/attention_util.h.
#include <numeric>

#include "attention_util.h"

namespace smax_test {
namespace {

class AttentionDecode : public TargetTest {};

// A KV cache problem: q [B, H, Lq, D]; k / v either contiguous
// [B, Hkv, Lk, D] or a pool of `pages` pages [pages, Hkv, page, D] with a
// shuffled block table [B, Lk / page]; cache_seqlens [B] (i32).
struct Cache {
  Shape s;
  int64_t page = 0;  // 0: contiguous
  Tensor q, k, v, out;
  std::vector<int32_t> seqlens;
  std::vector<int32_t> table;
  int64_t slots = 0;

  Cache(const Shape& sh, int64_t page_size, const std::vector<int32_t>& lens, Rng& rng)
      : s(sh), page(page_size), seqlens(lens) {
    q = Tensor({s.B, s.H, s.Lq, s.D});
    out = Tensor({s.B, s.H, s.Lq, s.Dv});
    if (page == 0) {
      k = Tensor({s.B, s.Hkv, s.Lk, s.D});
      v = Tensor({s.B, s.Hkv, s.Lk, s.Dv});
    } else {
      slots = s.Lk / page;
      const int64_t pages = s.B * slots + 3;  // spare pages nobody uses
      // vLLM's [pages, page, Hkv, D] buffer, viewed as [pages, Hkv, page, D].
      k = Tensor({pages, s.Hkv, page, s.D}, permuted_strides({pages, s.Hkv, page, s.D}, {0, 2, 1, 3}));
      v = Tensor({pages, s.Hkv, page, s.Dv},
                 permuted_strides({pages, s.Hkv, page, s.Dv}, {0, 2, 1, 3}));
      std::vector<int32_t> perm(static_cast<size_t>(pages));
      std::iota(perm.begin(), perm.end(), 0);
      for (size_t i = perm.size(); i > 1; --i) {
        std::swap(perm[i - 1], perm[static_cast<size_t>(rng.index(static_cast<int64_t>(i)))]);
      }
      table.assign(perm.begin(), perm.begin() + s.B * slots);
    }
    q.fill([&](int64_t) { return rng.normal(); });
    k.fill([&](int64_t) { return rng.normal(); });
    v.fill([&](int64_t) { return rng.normal(); });
  }
  TensorView seqlens_view() const {
    TensorView t = smax::make_view(const_cast<int32_t*>(seqlens.data()), DType::kI32, 1,
                                   std::vector<int64_t>{s.B}.data(), nullptr);
    return t;
  }
  TensorView table_view() const {
    const int64_t shape[2] = {s.B, slots};
    return smax::make_view(const_cast<int32_t*>(table.data()), DType::kI32, 2, shape, nullptr);
  }
  AttentionOptions options(AttentionOptions o) const {
    if (!seqlens.empty()) o.cache_seqlens = seqlens_view();
    if (page > 0) o.block_table = table_view();
    return o;
  }
  // The same keys as a contiguous [B, Hkv, Lk, D] cache (page > 0 only).
  void contiguous(Tensor& kc, Tensor& vc) const {
    kc = Tensor({s.B, s.Hkv, s.Lk, s.D});
    vc = Tensor({s.B, s.Hkv, s.Lk, s.Dv});
    auto copy = [&](const Tensor& pool, Tensor& dst, int64_t cols) {
      for (int64_t b = 0; b < s.B; ++b)
        for (int64_t hk = 0; hk < s.Hkv; ++hk)
          for (int64_t j = 0; j < s.Lk; ++j) {
            const int64_t pg = table[static_cast<size_t>(b * slots + j / page)];
            for (int64_t c = 0; c < cols; ++c) {
              dst.at(((b * s.Hkv + hk) * s.Lk + j) * cols + c) =
                  pool.at(((pg * s.Hkv + hk) * page + j % page) * cols + c);
            }
          }
    };
    copy(k, kc, s.D);
    copy(v, vc, s.Dv);
  }
};

::testing::AssertionResult run_cache(Cache& c, const AttentionOptions& base,
                                     const std::string& what) {
  const AttentionOptions o = c.options(base);
  c.out.poison();
  smax::attention(c.q.view(), c.k.view(), c.v.view(), c.out.view(), o);
  if (!c.out.guards_intact()) return ::testing::AssertionFailure() << what << ": guards";
  const auto p = ref::attention_problem(c.q.view(), c.k.view(), c.v.view(), o);
  return check_forward(p, ref::attention_forward(p), c.out.dense(), what);
}

// Shapes across the decode grid's boundaries: key chunks of 2048 (Lk 2047,
// 2048, 2049, 4500), row chunks of 64 (G Lq = 128), the in-place kernels'
// tails (D = 5, 13; Dv != D) and row chunks of more than 16 rows (G Lq > 16).
TEST_P(AttentionDecode, ShapesMatchReference) {
  Rng rng(401);
  const std::vector<Shape> shapes = {
      {1, 1, 1, 1, 1, 8, 8},        {1, 4, 1, 1, 37, 5, 3},      {2, 8, 2, 1, 2047, 16, 16},
      {1, 4, 4, 3, 2048, 13, 7},    {1, 8, 1, 2, 2049, 32, 32},  {1, 4, 2, 16, 4500, 64, 64},
      {1, 16, 2, 16, 300, 24, 8},   {2, 2, 1, 5, 129, 128, 128}, {1, 32, 4, 1, 1000, 64, 64},
      {1, 2, 2, 7, 0, 8, 8},
  };
  for (const Shape& s : shapes) {
    for (bool transposed : {false, true}) {
      Problem pr(s, transposed);
      pr.fill(rng);
      EXPECT_TRUE(run_forward(pr, AttentionOptions{}, shape_name(s) + (transposed ? " [B,L,H,D]" : "")));
    }
  }
}

// Every option of the prefill driver on the decode grid: top-left causal
// with Lq < Lk, bool and additive masks broadcast, softcap, sinks, ALiBi,
// lse, and rows with no visible key under both empty-row policies.
TEST_P(AttentionDecode, OptionsMatchReference) {
  Rng rng(402);
  const Shape s{2, 4, 2, 3, 2500, 16, 12};
  for (int variant = 0; variant < 6; ++variant) {
    Problem pr(s, false);
    pr.fill(rng);
    AttentionOptions o;
    BoolTensor keep({s.B, 1, s.Lq, s.Lk});
    Tensor add({1, s.H, 1, s.Lk}), sinks({s.H}), slopes({s.H});
    Tensor lse({s.B, s.H, s.Lq});
    std::string what = "variant " + std::to_string(variant);
    switch (variant) {
      case 0:
        o.is_causal = true;
        break;
      case 1:
        // Row 1 of batch 0 sees nothing; the others a random half.
        keep.fill([&](int64_t i) {
          const int64_t row = i / s.Lk;
          return static_cast<uint8_t>(row == 1 ? 0 : rng.bernoulli(0.5));
        });
        o.attn_mask = keep.view();
        break;
      case 2:
        add.fill([&](int64_t) { return rng.normal() * 2.0f; });
        o.attn_mask = add.view();
        o.softcap = 3.0f;
        break;
      case 3:
        sinks.fill([&](int64_t) { return rng.normal(); });
        o.sinks = sinks.view();
        o.lse = lse.view();
        break;
      case 4:
        slopes.fill([&](int64_t i) { return 0.01f * static_cast<float>(i + 1); });
        o.alibi_slopes = slopes.view();
        o.is_causal = true;
        break;
      case 5:
        keep.fill([&](int64_t i) { return static_cast<uint8_t>(i / s.Lk != 2); });
        o.attn_mask = keep.view();
        o.empty_row = smax::EmptyRow::kNan;
        o.lse = lse.view();
        break;
    }
    EXPECT_TRUE(run_forward(pr, o, what));
    if (o.lse) {
      const auto p = ref::attention_problem(pr.q.view(), pr.k.view(), pr.v.view(), o);
      const auto r = ref::attention_forward(p);
      const auto got = lse.dense();
      for (size_t i = 0; i < got.size(); ++i) {
        if (std::isnan(r.lse[i]) || std::isinf(r.lse[i])) {
          EXPECT_TRUE(std::isnan(r.lse[i]) ? std::isnan(got[i]) : got[i] == r.lse[i]) << what << " lse " << i;
        } else {
          EXPECT_NEAR(got[i], r.lse[i], 1e-5 * (1 + std::abs(r.lse[i]))) << what << " lse " << i;
        }
      }
    }
  }
}

// NaN / inf in q or k make that query row NaN; the other rows of the same
// kv head (other query heads sharing the reads) stay exact.
TEST_P(AttentionDecode, SpecialValuesStayInTheirRow) {
  Rng rng(403);
  const Shape s{1, 4, 1, 2, 3000, 8, 8};
  Problem pr(s, false);
  pr.fill(rng);
  pr.q.at(((0 * 4 + 1) * s.Lq + 0) * s.D + 3) = NAN;  // head 1, query 0
  pr.k.at(2500 * s.D + 2) = INFINITY;                // key 2500: every row sees inf * q
  pr.q.at(((0 * 4 + 2) * s.Lq + 1) * s.D + 0) = 0.0f;
  EXPECT_TRUE(run_forward(pr, AttentionOptions{}, "NaN and inf"));
  const auto out = pr.out.dense();
  EXPECT_TRUE(std::isnan(out[static_cast<size_t>(((0 * 4 + 1) * s.Lq + 0) * s.Dv)]));
}

// The decode grid depends on the shapes only: the same bits for any thread
// count (key chunks merged in chunk order).
TEST_P(AttentionDecode, ThreadCountsBitwise) {
  Rng rng(404);
  for (const Shape& s : {Shape{2, 8, 2, 1, 5000, 32, 32}, Shape{1, 8, 1, 16, 4200, 16, 16}}) {
    Problem pr(s, false);
    pr.fill(rng);
    std::vector<float> first;
    for (int threads : {1, 2, 3}) {  // (8 threads left libomp allocations that LeakSanitizer reports at exit)
      AttentionOptions o;
      o.threads = threads;
      o.is_causal = s.Lq > 1;
      smax::attention(pr.q.view(), pr.k.view(), pr.v.view(), pr.out.view(), o);
      const auto got = pr.out.dense();
      if (first.empty()) {
        first = got;
      } else {
        EXPECT_EQ(0, std::memcmp(first.data(), got.data(), got.size() * sizeof(float)))
            << shape_name(s) << " threads " << threads;
      }
    }
  }
}

// FlashDecoding++'s unified max: a good phi (just above the logits), one far
// above them (every chunk redone exactly), one below them (the running max
// takes over), sinks and empty rows: always within the bound, and the same
// bits for any thread count.
TEST_P(AttentionDecode, UnifiedMaxIsExact) {
  Rng rng(409);
  const Shape s{2, 8, 2, 2, 4500, 32, 32};
  Problem pr(s, false);
  pr.fill(rng);
  Tensor sinks({s.H});
  sinks.fill([&](int64_t) { return rng.normal(); });
  for (float phi : {8.0f, 1000.0f, -3.0f}) {
    for (bool with_sinks : {false, true}) {
      AttentionOptions o;
      o.unified_max = phi;
      o.is_causal = true;
      if (with_sinks) o.sinks = sinks.view();
      const std::string what = "phi " + std::to_string(phi) + (with_sinks ? " sinks" : "");
      EXPECT_TRUE(run_forward(pr, o, what));
      const auto first = pr.out.dense();
      o.threads = 1;
      smax::attention(pr.q.view(), pr.k.view(), pr.v.view(), pr.out.view(), o);
      const auto one = pr.out.dense();
      EXPECT_EQ(0, std::memcmp(first.data(), one.data(), one.size() * sizeof(float))) << what;
    }
  }
  AttentionOptions bad;
  bad.unified_max = INFINITY;
  EXPECT_THROW(smax::attention(pr.q.view(), pr.k.view(), pr.v.view(), pr.out.view(), bad),
               smax::Error);
}

// cache_seqlens: per-sequence lengths (0, fewer than Lq, the capacity),
// bottom-right causal positions and ALiBi distances, softmax and the sink.
TEST_P(AttentionDecode, CacheSeqlensMatchReference) {
  Rng rng(405);
  const Shape s{4, 8, 2, 3, 2304, 16, 16};
  for (bool causal : {false, true}) {
    for (int extra = 0; extra < 3; ++extra) {
      Cache c(s, 0, {0, 2, 2304, 1500}, rng);
      AttentionOptions o;
      o.is_causal = causal;
      Tensor sinks({s.H}), slopes({s.B, s.H});
      if (extra == 1) {
        slopes.fill([&](int64_t i) { return 0.02f * static_cast<float>(i % 5 + 1); });
        o.alibi_slopes = slopes.view();
      } else if (extra == 2) {
        sinks.fill([&](int64_t) { return rng.normal(); });
        o.sinks = sinks.view();
        o.empty_row = smax::EmptyRow::kNan;
      }
      EXPECT_TRUE(run_cache(c, o, std::string(causal ? "causal" : "full") + " extra " +
                                      std::to_string(extra)));
    }
  }
}

// A paged cache gives the contiguous cache's bits when the key blocks fall
// on the same boundaries (pages of 16, gathered; pages of 256, read in place
// in blocks of 128) and meets the bound for pages that split blocks (100).
TEST_P(AttentionDecode, PagedMatchesContiguous) {
  Rng rng(406);
  for (int64_t page : {16, 256, 100}) {
    const Shape s{3, 8, 2, 2, page * 24, 32, 32};
    Cache c(s, page, {static_cast<int32_t>(s.Lk), 1, static_cast<int32_t>(page * 7 + 3)}, rng);
    for (bool causal : {false, true}) {
      AttentionOptions o;
      o.is_causal = causal;
      const std::string what = "page " + std::to_string(page) + (causal ? " causal" : "");
      EXPECT_TRUE(run_cache(c, o, what));
      if (page == 100) continue;
      Tensor kc, vc;
      c.contiguous(kc, vc);
      Tensor want({s.B, s.H, s.Lq, s.Dv});
      AttentionOptions oc = o;
      oc.cache_seqlens = c.seqlens_view();
      smax::attention(c.q.view(), kc.view(), vc.view(), want.view(), oc);
      const auto a = c.out.dense(), b = want.dense();
      EXPECT_EQ(0, std::memcmp(a.data(), b.data(), a.size() * sizeof(float))) << what;
    }
  }
}

// Every normaliser with a KV cache (softmax on the decode grid, the others on
// the row driver), paged and with lengths, causal and not.
TEST_P(AttentionDecode, EveryNormalizerWithKvCache) {
  Rng rng(407);
  const Shape s{2, 4, 2, 4, 128, 8, 8};
  for (AttentionNormalizer n : all_normalizers()) {
    for (int64_t page : {0, 32}) {
      Cache c(s, page, {100, 3}, rng);
      AttentionOptions o;
      o.normalizer = n;
      o.is_causal = true;
      EXPECT_TRUE(run_cache(c, o, std::string(smax::attention_normalizer_name(n)) + " page " +
                                      std::to_string(page)));
    }
  }
}

TEST_P(AttentionDecode, Errors) {
  Rng rng(408);
  const Shape s{2, 4, 2, 1, 64, 8, 8};
  Cache c(s, 16, {64, 10}, rng);
  auto expect_error = [&](AttentionOptions o, const std::string& needle) {
    c.out.poison();
    try {
      smax::attention(c.q.view(), c.k.view(), c.v.view(), c.out.view(), o);
      ADD_FAILURE() << "no error for " << needle;
    } catch (const smax::Error& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
    EXPECT_TRUE(c.out.guards_intact());
    for (float x : c.out.dense()) ASSERT_EQ(x, kSentinel) << needle << ": out was written";
  };
  AttentionOptions o = c.options({});
  std::vector<int32_t> bad_lens = {65, 1};
  const int64_t two = 2;
  o.cache_seqlens = smax::make_view(bad_lens.data(), DType::kI32, 1, &two, nullptr);
  expect_error(o, "cache_seqlens[0] = 65");
  bad_lens = {-1, 1};
  expect_error(o, "cache_seqlens[0] = -1");
  std::vector<float> float_lens = {1, 1};
  o.cache_seqlens = smax::make_view(float_lens.data(), {2});
  expect_error(o, "cache_seqlens must be i32 or i64");
  std::vector<int64_t> long_lens = {1, 1, 1};
  const int64_t three = 3;
  o.cache_seqlens = smax::make_view(long_lens.data(), DType::kI64, 1, &three, nullptr);
  expect_error(o, "cache_seqlens must be [B]");
  o = c.options({});
  std::vector<int32_t> bad_table = c.table;
  bad_table[1] = static_cast<int32_t>(c.k.shape()[0]);  // sequence 0's second page
  const int64_t tshape[2] = {s.B, c.slots};
  o.block_table = smax::make_view(bad_table.data(), DType::kI32, 2, tshape, nullptr);
  expect_error(o, "block_table[0, 1]");
  // Sequence 1 uses one page (10 keys): its other entries are not read.
  bad_table = c.table;
  bad_table[static_cast<size_t>(c.slots + 2)] = -7;
  o.block_table = smax::make_view(bad_table.data(), DType::kI32, 2, tshape, nullptr);
  smax::attention(c.q.view(), c.k.view(), c.v.view(), c.out.view(), o);
  const int64_t tshape1[2] = {1, c.slots};
  o.block_table = smax::make_view(bad_table.data(), DType::kI32, 2, tshape1, nullptr);
  expect_error(o, "block_table must be [B, max_pages]");
  // Pools of pages must match.
  {
    Tensor v2({c.k.shape()[0] - 1, s.Hkv, 16, s.Dv});
    try {
      smax::attention(c.q.view(), c.k.view(), v2.view(), c.out.view(), c.options({}));
      ADD_FAILURE() << "no error for mismatched pools";
    } catch (const smax::Error& e) {
      EXPECT_NE(std::string(e.what()).find("same number of pages"), std::string::npos) << e.what();
    }
  }
  // The backward is not defined for the KV cache forms.
  Tensor dq({s.B, s.H, s.Lq, s.D}), dk(c.k.shape()), dv(c.v.shape()), dout({s.B, s.H, s.Lq, s.Dv});
  try {
    smax::attention_backward(c.q.view(), c.k.view(), c.v.view(), c.out.view(), dout.view(),
                             dq.view(), dk.view(), dv.view(), c.options({}));
    ADD_FAILURE() << "no error for the backward with a KV cache";
  } catch (const smax::Error& e) {
    EXPECT_NE(std::string(e.what()).find("forward-only"), std::string::npos) << e.what();
  }
}

SMAX_INSTANTIATE_PER_TARGET(AttentionDecode);

}  // namespace
}  // namespace smax_test
