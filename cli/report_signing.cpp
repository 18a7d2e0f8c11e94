// ed25519 signatures of reports through libsodium (report_signing.hpp).
#include "report_signing.hpp"

#include <sodium.h>
#include <sys/stat.h>
#include <gpuemu/protocol/protocol.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <vector>

namespace gpuemu::cli {
namespace fs = std::filesystem;

namespace {

Result<std::string> read_file(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  if (!in) return make_error(ErrorCode::not_found, "cannot read " + p.string());
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

Status write_file(const fs::path& p, const std::string& bytes, bool secret) {
  {
    std::ofstream out(p, std::ios::binary | std::ios::trunc);
    out << bytes;
    if (!out) return make_error(ErrorCode::io_error, "cannot write " + p.string());
  }
  if (secret && ::chmod(p.c_str(), 0600) != 0)
    return make_error(ErrorCode::io_error, "cannot chmod 0600 " + p.string());
  return {};
}

std::string to_base64(const unsigned char* data, std::size_t n) {
  std::string out(sodium_base64_encoded_len(n, sodium_base64_VARIANT_ORIGINAL), '\0');
  sodium_bin2base64(out.data(), out.size(), data, n, sodium_base64_VARIANT_ORIGINAL);
  out.resize(std::char_traits<char>::length(out.c_str()));
  return out;
}

// Decodes exactly `n` bytes of base64; nullopt when malformed or of another length.
std::optional<std::vector<unsigned char>> from_base64(const std::string& text, std::size_t n) {
  std::vector<unsigned char> out(n + 8);
  std::size_t len = 0;
  if (sodium_base642bin(out.data(), out.size(), text.data(), text.size(), nullptr, &len, nullptr,
                        sodium_base64_VARIANT_ORIGINAL) != 0 ||
      len != n)
    return std::nullopt;
  out.resize(n);
  return out;
}

Status init_sodium() {
  if (sodium_init() < 0) return make_error(ErrorCode::internal, "libsodium failed to initialise");
  return {};
}

struct KeyPair {
  std::vector<unsigned char> public_key, secret_key;
};

// The home's key pair: $GPUEMU_HOME/keys/report_ed25519{,.pub}, generated on first use.
Result<KeyPair> home_key_pair() {
  const fs::path dir = fs::path(protocol::home_paths().home) / "keys";
  const fs::path secret = dir / "report_ed25519", pub = dir / "report_ed25519.pub";
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return make_error(ErrorCode::io_error, "cannot create " + dir.string());
  ::chmod(dir.c_str(), 0700);
  KeyPair k;
  k.public_key.resize(crypto_sign_PUBLICKEYBYTES);
  k.secret_key.resize(crypto_sign_SECRETKEYBYTES);
  if (fs::exists(secret)) {
    GPUEMU_TRY(std::string s, read_file(secret));
    if (s.size() != crypto_sign_SECRETKEYBYTES)
      return make_error(ErrorCode::io_error, secret.string() + " is not an ed25519 secret key");
    std::copy(s.begin(), s.end(), k.secret_key.begin());
    crypto_sign_ed25519_sk_to_pk(k.public_key.data(), k.secret_key.data());
    return k;
  }
  crypto_sign_keypair(k.public_key.data(), k.secret_key.data());
  GPUEMU_TRY_STATUS(
      write_file(secret, std::string(k.secret_key.begin(), k.secret_key.end()), /*secret=*/true));
  GPUEMU_TRY_STATUS(write_file(pub, to_base64(k.public_key.data(), k.public_key.size()) + "\n",
                               /*secret=*/false));
  return k;
}

}  // namespace

Result<SignatureInfo> sign_report_file(const std::string& file) {
  GPUEMU_TRY_STATUS(init_sodium());
  GPUEMU_TRY(std::string body, read_file(file));
  GPUEMU_TRY(KeyPair k, home_key_pair());
  unsigned char sig[crypto_sign_BYTES];
  crypto_sign_detached(sig, nullptr, reinterpret_cast<const unsigned char*>(body.data()),
                       body.size(), k.secret_key.data());
  sodium_memzero(k.secret_key.data(), k.secret_key.size());
  SignatureInfo info{to_base64(k.public_key.data(), k.public_key.size()),
                     to_base64(sig, sizeof sig)};
  const nlohmann::json j = {{"algorithm", "ed25519"},
                            {"public_key", info.public_key},
                            {"signature", info.signature},
                            {"file", fs::path(file).filename().string()}};
  GPUEMU_TRY_STATUS(write_file(file + ".sig", j.dump(2) + "\n", false));
  return info;
}

Result<VerifyOutcome> verify_report_file(const std::string& file,
                                         const std::string& pinned_key_b64) {
  GPUEMU_TRY_STATUS(init_sodium());
  GPUEMU_TRY(std::string body, read_file(file));
  GPUEMU_TRY(std::string sig_text, read_file(file + ".sig"));
  VerifyOutcome v;
  v.key_pinned = !pinned_key_b64.empty();
  nlohmann::json sig;
  try {
    sig = nlohmann::json::parse(sig_text);
  } catch (const nlohmann::json::exception&) {
    v.reason = file + ".sig is not JSON";
    return v;
  }
  if (!sig.is_object() || sig.value("algorithm", "") != "ed25519" ||
      !sig.value("public_key", nlohmann::json()).is_string() ||
      !sig.value("signature", nlohmann::json()).is_string()) {
    v.reason = file + ".sig is not an ed25519 signature file";
    return v;
  }
  v.public_key = v.key_pinned ? pinned_key_b64 : sig["public_key"].get<std::string>();
  auto key = from_base64(v.public_key, crypto_sign_PUBLICKEYBYTES);
  if (!key) {
    v.reason = "the public key is not a base64 ed25519 key";
    return v;
  }
  auto signature = from_base64(sig["signature"].get<std::string>(), crypto_sign_BYTES);
  if (!signature) {
    v.reason = "the signature is not base64 of 64 bytes";
    return v;
  }
  if (crypto_sign_verify_detached(signature->data(),
                                  reinterpret_cast<const unsigned char*>(body.data()), body.size(),
                                  key->data()) != 0) {
    v.reason = v.key_pinned && sig["public_key"].get<std::string>() != pinned_key_b64
                   ? "not signed by the given key"
                   : "the signature does not match the report (modified after signing?)";
    return v;
  }
  v.valid = true;
  return v;
}

}  // namespace gpuemu::cli
