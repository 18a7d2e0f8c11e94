// The wire protocol's frames: round trips keep views and bytes exactly; every malformed frame is a
// protocol_error (never a crash); case snapshots are deterministic.
#include "gpuemu/protocol/protocol.hpp"

#include "gpuemu/engine/engine.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>

namespace gpuemu::protocol {
namespace {

Tensor random_tensor(DType dt, Shape shape, std::uint32_t seed) {
  std::mt19937 gen(seed);
  std::normal_distribution<double> nd;
  std::vector<double> v(static_cast<std::size_t>(shape_numel(shape)));
  for (auto& x : v) x = nd(gen);
  return Tensor::from_values(dt, shape, v);
}

std::vector<std::byte> bytes_of(const std::string& s) {
  std::vector<std::byte> b(s.size());
  std::memcpy(b.data(), s.data(), s.size());
  return b;
}

TEST(Frame, RoundTripKeepsViewsDtypesAndBits) {
  Frame f = make_request("submit_outputs", {{"op", "softmax"}});
  Tensor t = random_tensor(DType::bfloat16, {3, 5, 7}, 1).transpose(0, 2).slice(1, 1, 5, 2);
  f.add("inputs/x", t);
  f.add("inputs/e8", random_tensor(DType::float8_e4m3fn, {33}, 2));
  f.add("inputs/empty", Tensor::zeros(DType::float32, {0, 4}));
  const auto bytes = encode(f);
  auto d = decode(bytes);
  ASSERT_TRUE(d.ok()) << d.error().message;
  EXPECT_EQ(d->header["method"], "submit_outputs");
  EXPECT_FALSE(d->header.contains("tensors"));
  const Tensor& x = d->tensors.at("inputs/x");
  EXPECT_EQ(x.dtype(), DType::bfloat16);
  EXPECT_EQ(x.shape(), t.shape());
  EXPECT_EQ(x.strides(), t.strides());
  EXPECT_EQ(x.offset(), t.offset());
  EXPECT_FALSE(x.is_contiguous());
  EXPECT_EQ(x.storage()->to_vector(), t.storage()->to_vector());
  EXPECT_EQ(x.contiguous_bytes(), t.contiguous_bytes());
  EXPECT_EQ(d->tensors.at("inputs/e8").contiguous_bytes(),
            f.tensors.at("inputs/e8").contiguous_bytes());
  EXPECT_EQ(d->tensors.at("inputs/empty").numel(), 0);
  // Encoding is deterministic and every tensor starts 64-byte aligned.
  EXPECT_EQ(encode(*d), encode(f));
  auto header_len = static_cast<std::size_t>(bytes[4]) | (static_cast<std::size_t>(bytes[5]) << 8);
  Json h = Json::parse(std::string(reinterpret_cast<const char*>(bytes.data()) + 8, header_len));
  for (const auto& desc : h["tensors"]) EXPECT_EQ(desc["data_offset"].get<std::size_t>() % 64, 0u);
}

TEST(Frame, EncodeToWritesEveryByteOfTheFrameIntoTheCallersBuffer) {
  // The transport writes frames straight into an NNG message's body, which holds whatever was
  // there before: every byte, padding included, must be written (or the frame differs by machine).
  Frame f = make_request("submit_outputs", {{"op", "softmax"}});
  f.add("a", random_tensor(DType::float16, {3, 7}, 3));  // 42 bytes: 22 of padding follow
  f.add("b", random_tensor(DType::float32, {5}, 4));
  f.add("c", Tensor::zeros(DType::float32, {0}));
  const auto expected = encode(f);
  std::vector<std::byte> buf(expected.size() + 100, std::byte{0xAB});
  std::size_t asked = 0;
  const std::size_t n = encode_to(f, [&](std::size_t k) {
    asked = k;
    return buf.data();
  });
  EXPECT_EQ(n, expected.size());
  EXPECT_EQ(asked, expected.size());
  EXPECT_TRUE(std::equal(expected.begin(), expected.end(), buf.begin()));
  EXPECT_EQ(buf[expected.size()], std::byte{0xAB});  // nothing past the frame
  auto d = decode(std::span<const std::byte>(buf.data(), n));
  ASSERT_TRUE(d.ok()) << d.error().message;
  EXPECT_EQ(d->tensors.at("a").contiguous_bytes(), f.tensors.at("a").contiguous_bytes());
  // An allocation that fails: nothing written, 0 returned.
  EXPECT_EQ(encode_to(f, [](std::size_t) -> std::byte* { return nullptr; }), 0u);
}

TEST(Frame, MalformedFramesAreProtocolErrors) {
  Frame f = make_request("ping");
  f.add("t", random_tensor(DType::float32, {4, 4}, 3));
  const auto good = encode(f);
  std::vector<std::vector<std::byte>> bad;
  bad.push_back({});
  bad.push_back(bytes_of("GEM"));
  bad.push_back(bytes_of("XXXX\x02\x00\x00\x00{}"));
  bad.push_back(bytes_of(std::string("GEMU\xff\xff\xff\x7f{}", 10)));  // header length past the end
  bad.push_back(bytes_of(std::string("GEMU\x04\x00\x00\x00[1,2", 12)));  // not an object
  bad.push_back(bytes_of(std::string("GEMU\x03\x00\x00\x00{\"a", 11)));  // not JSON
  for (std::size_t cut : {good.size() - 1, good.size() - 64, std::size_t{70}})
    bad.emplace_back(good.begin(), good.begin() + static_cast<std::ptrdiff_t>(cut));
  auto with_desc = [&](Json desc) {
    Frame g = make_request("ping");
    g.header["tensors"] = Json::array({desc});
    const std::string text = g.header.dump();
    std::string raw = "GEMU";
    for (int i = 0; i < 4; ++i) raw += static_cast<char>((text.size() >> (8 * i)) & 0xff);
    raw += text;
    raw.resize((raw.size() + 63) / 64 * 64 + 64, '\0');
    return bytes_of(raw);
  };
  const Json ok_desc = {{"key", "t"},        {"dtype", "float32"}, {"shape", {4, 4}},
                        {"strides", {4, 1}}, {"offset", 0},        {"storage_nbytes", 64},
                        {"data_offset", 0}};
  ASSERT_TRUE(decode(with_desc(ok_desc)).ok());
  for (auto [field, value] : std::vector<std::pair<std::string, Json>>{{"dtype", "float128"},
                                                                       {"shape", {4, -4}},
                                                                       {"strides", {1}},
                                                                       {"offset", 1},
                                                                       {"storage_nbytes", 65},
                                                                       {"storage_nbytes", 128},
                                                                       {"data_offset", 1},
                                                                       {"data_offset", 64},
                                                                       {"key", 3},
                                                                       {"shape", "4x4"}}) {
    Json d = ok_desc;
    d[field] = value;
    bad.push_back(with_desc(d));
  }
  Json no_data = ok_desc;
  no_data.erase("data_offset");
  bad.push_back(with_desc(no_data));
  for (std::size_t i = 0; i < bad.size(); ++i) {
    auto r = decode(bad[i]);
    ASSERT_FALSE(r.ok()) << "malformed frame " << i << " was accepted";
    EXPECT_EQ(r.error().code, ErrorCode::protocol_error) << i << ": " << r.error().message;
  }
}

// Encodes `f` with its storages of at least 256 bytes in `arena` (plain memory standing for an
// arena of pid 1234, descriptor 7); `target` says what went where.
std::vector<std::byte> encode_into_arena(const Frame& f, std::vector<std::byte>& arena, ShmTarget& target) {
  target.data = arena.data();
  target.segment = {1234, 7, arena.size(), 0};
  target.min_bytes = 256;
  std::vector<std::byte> bytes;
  encode_to(f, [&](std::size_t n) { bytes.resize(n); return bytes.data(); }, &target);
  return bytes;
}

TEST(Frame, LargeStoragesGoToTheArenaWhileTheyFitAndComeBackBitForBit) {
  // An arena (here plain memory) of 1 KiB; a threshold of 256 bytes.
  std::vector<std::byte> arena(1024);
  Frame f = make_request("ping");
  auto filled = [](std::size_t n, int seed) {
    Tensor t = Tensor::zeros(DType::float32, {static_cast<std::int64_t>(n)});
    for (std::size_t i = 0; i < t.storage_bytes(); ++i)
      t.storage()->data()[i] = static_cast<std::byte>((i * 31 + static_cast<std::size_t>(seed)) & 0xff);
    return t;
  };
  f.add("a_small", filled(63, 1));   // 252 bytes: inline
  f.add("b_large", filled(64, 2));   // 256 bytes: the arena, at 0
  f.add("c_large", filled(150, 3));  // 600 bytes: the arena, at 256
  f.add("d_large", filled(100, 4));  // 400 bytes: no longer fits, inline
  ShmTarget target;
  const std::vector<std::byte> bytes = encode_into_arena(f, arena, target);
  EXPECT_EQ(target.placed, 2u);
  EXPECT_EQ(target.used, 256u + 600u);
  EXPECT_EQ(target.spilled, 448u);
  auto header = decode_header(bytes);
  ASSERT_TRUE(header.ok());
  std::map<std::string, Json> descs;
  for (const auto& d : (*header)["tensors"]) descs[d["key"].get<std::string>()] = d;
  EXPECT_TRUE(descs["a_small"].contains("data_offset"));
  EXPECT_EQ(descs["b_large"]["shm"], (Json{{"pid", 1234}, {"fd", 7}, {"size", 1024}, {"offset", 0}}));
  EXPECT_EQ(descs["c_large"]["shm"]["offset"], 256);
  EXPECT_TRUE(descs["d_large"].contains("data_offset"));
  // Without a resolver, shared memory is refused by name.
  auto refused = decode(bytes);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.error().message.find("names shared memory"), std::string::npos);
  // With one, copied out or kept, every byte comes back.
  DecodeOptions o;
  o.resolve = [&](const shm::SegmentRef& r, std::size_t n) -> Result<SharedBytes> {
    EXPECT_EQ(r.pid, 1234);
    return SharedBytes{std::span(arena.data() + r.offset, n), nullptr};
  };
  for (bool keep : {false, true}) {
    o.keep_shared = keep;
    auto back = decode(bytes, o);
    ASSERT_TRUE(back.ok()) << back.error().message;
    EXPECT_EQ(back->shared.size(), keep ? 2u : 0u);
    for (const auto& [key, t] : f.tensors) {
      std::span<const std::byte> got;
      if (auto it = back->tensors.find(key); it != back->tensors.end())
        got = std::span<const std::byte>(it->second.storage()->data(), it->second.storage_bytes());
      else
        got = back->shared.at(key).bytes;
      ASSERT_EQ(got.size(), t.storage_bytes()) << key;
      EXPECT_EQ(std::memcmp(got.data(), t.storage()->data(), got.size()), 0) << key;
    }
  }
  // A view reaching past the arena's bytes is refused even when kept shared.
  Json h = *header;
  for (auto& d : h["tensors"])
    if (d["key"] == "b_large") d["shape"] = {65};
  const std::string text = h.dump();
  std::vector<std::byte> lying(bytes.begin(), bytes.begin() + 8);
  const auto n = static_cast<std::uint32_t>(text.size());
  for (int i = 0; i < 4; ++i) lying[4 + i] = static_cast<std::byte>((n >> (8 * i)) & 0xff);
  lying.insert(lying.end(), reinterpret_cast<const std::byte*>(text.data()),
               reinterpret_cast<const std::byte*>(text.data()) + text.size());
  lying.resize((lying.size() + 63) / 64 * 64 + 2048);
  o.keep_shared = true;
  auto r = decode(lying, o);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code, ErrorCode::protocol_error);
}

TEST(Frame, BorrowedStoragesReadTheArenaAndBecomeTheirOwnWhenKept) {
  // A float32 and an int64 storage, both in an arena (here plain memory).
  std::vector<std::byte> arena(4096);
  Frame f = make_request("ping");
  Tensor x = Tensor::zeros(DType::float32, {100});
  Tensor y = Tensor::zeros(DType::float32, {100});
  Tensor idx = Tensor::zeros(DType::int64, {40});
  for (std::int64_t i = 0; i < 100; ++i) x.set_flat(i, 0.5 * static_cast<double>(i));
  for (std::int64_t i = 0; i < 100; ++i) y.set_flat(i, -1.0 * static_cast<double>(i));
  for (std::int64_t i = 0; i < 40; ++i) idx.set_flat(i, static_cast<double>(i % 7));
  f.add("x", x);
  f.add("y", y);
  f.add("idx", idx);
  ShmTarget target;
  const std::vector<std::byte> bytes = encode_into_arena(f, arena, target);
  ASSERT_EQ(target.placed, 3u);
  DecodeOptions o;
  o.borrow = true;
  o.resolve = [&](const shm::SegmentRef& r, std::size_t n) -> Result<SharedBytes> {
    return SharedBytes{std::span(arena.data() + r.offset, n), nullptr};
  };
  auto back = decode(bytes, o);
  ASSERT_TRUE(back.ok()) << back.error().message;
  const auto in_arena = [&](const Tensor& t) {
    return t.storage()->data() >= arena.data() && t.storage()->data() < arena.data() + arena.size();
  };
  // Floating-point storages are read where they lie; integer ones are copied while decoding.
  const Tensor& bx = back->tensors.at("x");
  const Tensor& bi = back->tensors.at("idx");
  EXPECT_TRUE(in_arena(bx) && bx.storage()->borrowed());
  EXPECT_TRUE(in_arena(back->tensors.at("y")) && back->tensors.at("y").storage()->borrowed());
  EXPECT_FALSE(in_arena(bi) || bi.storage()->borrowed());
  EXPECT_EQ(bx.to_f64(), x.to_f64());
  EXPECT_EQ(bi.to_f64(), idx.to_f64());
  EXPECT_EQ(borrowed_in(*back).tensors, 2u);
  // Something keeps x (a view of it) past the request; y only the frame holds.
  const Tensor kept = bx.slice(0, 10, 20, 1);
  Copied c = own_borrowed(*back);
  EXPECT_EQ(c.tensors, 1u);
  EXPECT_EQ(c.bytes, 400u);
  EXPECT_FALSE(in_arena(kept));
  EXPECT_FALSE(bx.storage()->borrowed());  // the same storage: every view moved at once
  EXPECT_TRUE(back->tensors.at("y").storage()->borrowed());
  // The sender reuses its arena: what was kept keeps its bytes.
  std::fill(arena.begin(), arena.end(), std::byte{0xff});
  for (std::int64_t i = 0; i < 10; ++i) EXPECT_EQ(kept.get_flat(i), 0.5 * static_cast<double>(10 + i));
  EXPECT_EQ(bi.to_f64(), idx.to_f64());
  EXPECT_TRUE(std::isnan(back->tensors.at("y").get_flat(1)));  // borrowed: the arena's bytes now
}

TEST(Frame, RandomBytesNeverCrashTheDecoder) {
  Frame f = make_request("fuzz", {{"op", "softmax"}});
  f.add("a", random_tensor(DType::float16, {8, 3}, 4).transpose(0, 1));
  const auto good = encode(f);
  std::mt19937 gen(7);
  int accepted = 0;
  for (int i = 0; i < 3000; ++i) {
    auto b = good;
    const int flips = 1 + static_cast<int>(gen() % 8);
    for (int k = 0; k < flips; ++k) b[gen() % b.size()] = static_cast<std::byte>(gen());
    if (gen() % 4 == 0) b.resize(gen() % b.size());
    auto r = decode(b);
    if (r.ok())
      ++accepted;  // a flip inside tensor bytes or padding is still a valid frame
    else
      EXPECT_EQ(r.error().code, ErrorCode::protocol_error);
  }
  EXPECT_GT(accepted, 0);
}

TEST(Frame, ErrorRepliesCarryEveryCodeBack) {
  for (ErrorCode c : k_all_error_codes) {
    auto r = reply_result(*decode(encode(make_error_reply(make_error(c, "boom")))));
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.error().code, c);
    EXPECT_EQ(r.error().message, "boom");
    EXPECT_EQ(parse_error_code(error_code_name(c)), c);
  }
  // An error whose code or message is not a string (a broken or hostile daemon) is an internal
  // error, not a type_error thrown in the client (fuzz_frame).
  Frame odd;
  odd.header = {{"v", 1}, {"ok", false}, {"error", {{"code", 7}, {"message", {1, 2}}}}};
  auto weird = reply_result(odd);
  ASSERT_FALSE(weird.ok());
  EXPECT_EQ(weird.error().code, ErrorCode::internal);
  EXPECT_EQ(weird.error().message, "(no message)");
  auto ok = reply_result(*decode(encode(make_reply({{"x", 1}}))));
  ASSERT_TRUE(ok.ok());
  EXPECT_EQ((*ok)["x"], 1);
}

TEST(CaseCodec, SnapshotsAreDeterministicAndRestoreExactly) {
  auto cat = Catalogue::load({GPUEMU_SOURCE_DIR "/schemas/ops"});
  ASSERT_TRUE(cat.ok());
  for (const char* op : {"softmax", "matmul", "flash_attention", "layer_norm"}) {
    FuzzOptions o;
    CaseGenerator gen(*(*cat)->find(op), o);
    for (int i = 0; i < 6; ++i) {
      auto c = gen.generate(99, i);
      ASSERT_TRUE(c.ok());
      const auto snap = snapshot_case(*c);
      EXPECT_EQ(snap, snapshot_case(*gen.generate(99, i)));
      auto back = restore_case(snap);
      ASSERT_TRUE(back.ok()) << back.error().message;
      EXPECT_EQ(snapshot_case(*back), snap);
      EXPECT_EQ(back->seed, c->seed);
      EXPECT_EQ(back->dims, c->dims);
      EXPECT_EQ(back->attrs, c->attrs);
      for (const auto& [name, t] : c->inputs) {
        EXPECT_EQ(back->inputs.at(name).strides(), t.strides());
        EXPECT_EQ(back->layouts.at(name).kind, c->layouts.at(name).kind);
      }
    }
  }
  auto opts = options_from_json(
      {{"dtypes", {"bf16"}}, {"distribution", "boundary"}, {"dims", {{"N", {129}}}}});
  ASSERT_TRUE(opts.ok());
  EXPECT_EQ(options_to_json(*opts)["dtypes"][0], "bfloat16");
  EXPECT_FALSE(options_from_json({{"distribution", "gaussian"}}).ok());
  EXPECT_FALSE(options_from_json({{"dims", "N=3"}}).ok());
  EXPECT_FALSE(options_from_json({{"element_budget_scale", 0}}).ok());
}

}  // namespace
}  // namespace gpuemu::protocol
