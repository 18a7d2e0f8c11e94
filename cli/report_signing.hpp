// Signed reports: ed25519 (libsodium) over the exact bytes of a report file, written next to it
// as FILE.sig = {"algorithm": "ed25519", "public_key": base64, "signature": base64}. The key pair
// lives in $GPUEMU_HOME/keys/ (created on first use, the secret key 0600). Verification is offline.
#pragma once

#include <gpuemu/base/error.hpp>

#include <string>

namespace gpuemu::cli {

struct SignatureInfo {
  std::string public_key;  // base64
  std::string signature;   // base64
};

// Signs `file` with the home's key (generating it when absent) and writes `file`.sig.
Result<SignatureInfo> sign_report_file(const std::string& file);

struct VerifyOutcome {
  bool valid = false;
  bool key_pinned = false;  // checked against a key the caller gave, not the one in FILE.sig
  std::string public_key;   // base64 key the signature was checked with
  std::string reason;       // why it is invalid
};

// Checks `file` against `file`.sig; `pinned_key_b64` (when not empty) must be the signer's key.
// Errors (not_found, io_error) only when the report or its .sig cannot be read at all.
Result<VerifyOutcome> verify_report_file(const std::string& file,
                                         const std::string& pinned_key_b64);

}  // namespace gpuemu::cli
